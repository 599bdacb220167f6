"""Tests for stochattn.figures (shared helpers) and stochattn.experiments.uci_figures: every figure writer makes a
readable PNG and a PDF from contract-format files."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from stochattn import figures as F
from stochattn import report as R
from stochattn.experiments import uci_figures as UF
from stochattn.experiments import uci_tables as U
from stochattn.io import load_json, load_npz, save_json, save_npz
from test_report import (  # the shared fake-run builder (Gaussian setup)
    METHODS,
    RESCALED,
    make_fake_uci,
    metrics_paths,
    sa_score_quantile,
)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    root = tmp_path_factory.mktemp("uci")
    files = make_fake_uci(root, spreads=RESCALED, offsets={m: 0.0 for m in RESCALED})
    runs = R.load_runs(metrics_paths(files), progress=False)
    return files, runs


def sharp_inputs(files, dataset, methods=METHODS, n_splits=3):
    """method -> [(samples.npz, metrics.json)] of every split (the pair form of the input)."""
    return {m: [(files[(dataset, k, m)]["samples"], files[(dataset, k, m)]["metrics"]) for k in range(n_splits)]
            for m in methods}


def assert_figure_files(written, out_base):
    png, pdf = Path(str(out_base) + ".png"), Path(str(out_base) + ".pdf")
    assert written == [png, pdf]
    assert png.stat().st_size > 1000 and pdf.stat().st_size > 1000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[2] == 4  # Agg writes RGBA
    assert img.shape[0] > 100 and img.shape[1] > 100
    assert img[..., :3].std() > 0.01  # something was drawn
    return img


def test_save_figure_strips_suffix_and_is_atomic(tmp_path):
    fig = Figure(figsize=(2, 2))
    FigureCanvasAgg(fig)
    fig.add_subplot().plot([0, 1], [1, 0])
    written = F.save_figure(fig, tmp_path / "sub" / "fig.png")
    assert_figure_files(written, tmp_path / "sub" / "fig")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["fig.pdf", "fig.png"]  # no temp files
    # dpi 150: a 2 x 2 inch figure is 300 x 300 pixels
    assert mpimg.imread(written[0]).shape[:2] == (300, 300)
    with pytest.raises(TypeError, match="fig"):
        F.save_figure("not a figure", tmp_path / "x")


def test_pit_histograms(tmp_path, fake):
    files, runs = fake
    out = tmp_path / "pit_yacht"
    assert_figure_files(UF.pit_histograms(runs, "yacht", out), out)
    # also from paths, and the scaled variant
    out2 = tmp_path / "pit_energy_scaled"
    paths = [v["metrics"] for (d, _, _), v in files.items() if d == "energy"]
    assert_figure_files(UF.pit_histograms(paths, "energy", out2, pit="scaled"), out2)
    with pytest.raises(ValueError, match="wine"):
        UF.pit_histograms(runs, "wine", tmp_path / "x")
    assert list(F.pooled_pit(runs, "yacht", "native")) == list(METHODS)  # both SA runs get a panel


def test_normalised_widths_match_table_ratio(fake):
    """Default (the paper's): every method but SA temperature-scaled, so a method's widths are T x its native
    widths and their mean is the table's Panel B ratio; scaling="matched" gives the uci_matched table's ratio."""
    files, runs = fake
    widths = UF.normalised_widths(sharp_inputs(files, "yacht"), 0.95, dataset="yacht")
    assert list(widths) == list(METHODS)
    assert all(w.shape == (3 * 40,) for w in widths.values())
    assert widths["sa"].mean() == pytest.approx(1.0, rel=1e-12)
    # sa_match, swag, mc_dropout are SA's draws x 1.5, 2, 0.5 around the same point: temperature scaling undoes
    # the known spread, so all three have the same widths (T x c equal across them)
    for method in RESCALED:
        np.testing.assert_allclose(widths[method], widths["swag"], rtol=1e-5)
    matched = UF.normalised_widths(sharp_inputs(files, "yacht"), 0.95, dataset="yacht", scaling="matched")
    # matched to SA's calibration coverage, every width is s_(j) x SA's (s_(j) per split: the j-th smallest SA
    # calibration score)
    q = np.repeat([sa_score_quantile(files[("yacht", k, "sa")]["samples"]) for k in range(3)], 40)
    for method in RESCALED:
        np.testing.assert_allclose(matched[method], q * matched["sa"], rtol=1e-9)
    # equal split sizes: the mean normalised width is the table's Panel B ratio (each scaling its own)
    tidy = U.uci_master_table(runs)
    for method in METHODS:
        for metric, w in (("pi95_width_ratio", widths), ("pi95_width_ratio_matched", matched)):
            row = tidy[(tidy.dataset == "yacht") & (tidy.method == method) & (tidy.metric == metric)]
            assert w[method].mean() == pytest.approx(row.value.iloc[0], rel=1e-10)
    # dict form of the input gives the same numbers
    dict_form = {m: {"samples": [p for p, _ in v], "metrics": [q for _, q in v]}
                 for m, v in sharp_inputs(files, "yacht").items()}
    np.testing.assert_array_equal(UF.normalised_widths(dict_form)["swag"], widths["swag"])
    with pytest.raises(ValueError, match="scaling"):
        UF.normalised_widths(dict_form, scaling="conformal")


def test_normalised_widths_errors(fake):
    files, _ = fake
    inputs = sharp_inputs(files, "yacht")
    with pytest.raises(ValueError, match="'sa'"):
        UF.normalised_widths({m: v for m, v in inputs.items() if m != "sa"})
    with pytest.raises(ValueError, match="not 'energy'"):
        UF.normalised_widths(inputs, dataset="energy")
    with pytest.raises(ValueError, match="one of each per split"):
        UF.normalised_widths({"sa": {"samples": [inputs["sa"][0][0]], "metrics": []}})


def test_normalised_widths_need_the_factor_of_their_scaling(tmp_path, fake):
    files, _ = fake
    inputs = sharp_inputs(files, "yacht", methods=("sa", "swag"), n_splits=1)
    rec = load_json(inputs["swag"][0][1])
    assert rec["temperature"] > 0 and rec["matched"]["factor_95"] != pytest.approx(rec["temperature"])
    del rec["matched"]
    save_json(tmp_path / "metrics.json", rec)
    runs = {"sa": inputs["sa"], "swag": [(inputs["swag"][0][0], tmp_path / "metrics.json")]}
    UF.normalised_widths(runs)  # temperature: present
    with pytest.raises(ValueError, match="factor_95"):
        UF.normalised_widths(runs, scaling="matched")
    rec["temperature"] = None
    save_json(tmp_path / "metrics.json", rec)
    with pytest.raises(ValueError, match="temperature"):
        UF.normalised_widths(runs)


def test_sharpness_boxplot_whiskers_p5_p95_and_mean(tmp_path, fake):
    files, _ = fake
    out = tmp_path / "sharp_yacht"
    assert_figure_files(UF.sharpness_boxplot(sharp_inputs(files, "yacht"), "yacht", out), out)
    widths = UF.normalised_widths(sharp_inputs(files, "yacht"))
    fig = Figure()
    FigureCanvasAgg(fig)
    box = F.draw_sharpness(fig.add_subplot(), widths, 0.95)
    for i, method in enumerate(widths):
        lo_whisker, hi_whisker = box["whiskers"][2 * i], box["whiskers"][2 * i + 1]
        assert lo_whisker.get_ydata()[1] == pytest.approx(np.percentile(widths[method], 5))
        assert hi_whisker.get_ydata()[1] == pytest.approx(np.percentile(widths[method], 95))
        assert box["means"][i].get_marker() == "D"
        assert box["means"][i].get_ydata()[0] == pytest.approx(widths[method].mean())
    assert box["fliers"] == [] or all(len(f.get_ydata()) == 0 for f in box["fliers"])


def test_yacht_appendix_any_dataset(tmp_path, fake):
    files, runs = fake
    for dataset in ("yacht", "energy"):
        out = tmp_path / f"appendix_{dataset}"
        img = assert_figure_files(UF.yacht_appendix(runs, sharp_inputs(files, dataset), dataset, out), out)
        assert img.shape[1] > 1.5 * img.shape[0]  # two panels side by side


def test_cost_figure(tmp_path, fake):
    _, runs = fake
    cost = U.uci_cost_table(runs)
    out = tmp_path / "cost_yacht"
    assert_figure_files(UF.cost_figure(cost, out, dataset="yacht"), out)
    out_all = tmp_path / "cost_all"
    assert_figure_files(UF.cost_figure(cost, out_all), out_all)
    # a zero total (nothing recorded) cannot sit on a log axis: still draws
    zero = cost.copy()
    zero.loc[(zero.method == "sa") & (zero.metric == "seconds_total"), "value"] = 0.0
    out_zero = tmp_path / "cost_zero"
    assert_figure_files(UF.cost_figure(zero, out_zero, dataset="yacht"), out_zero)
    with pytest.raises(ValueError, match="metric"):
        UF.cost_figure(cost, tmp_path / "x", metric="nope")


def _fake_sinusoid(root: Path, n: int = 80, s: int = 19, seed: int = 0):
    """A 1-D noisy sinusoid in the prepared.npz layout (x standardised) and per-method test samples."""
    rng = np.random.default_rng(seed)
    x_raw = np.sort(rng.uniform(-3.0, 3.0, n))
    x_mean, x_std = x_raw.mean(), x_raw.std()
    trend = np.sin(2 * x_raw)
    y = trend + rng.normal(0.0, 0.3, n)
    prepared = root / "toy" / "sinusoid" / "split0" / "prepared.npz"
    perm = rng.permutation(n)  # test rows need not be sorted by x
    save_npz(prepared, x_test=((x_raw - x_mean) / x_std)[perm, None], y_test=y[perm], x_mean=np.array([x_mean]),
             x_std=np.array([x_std]), y_mean=np.float64(0.0), y_std=np.float64(1.0))
    paths = {}
    for method, sd in {"sa": 0.3, "mc_dropout": 0.1, "swag": 0.05, "hsa": 0.6}.items():
        samples = trend[perm] + rng.normal(0.0, sd * (1 + 0.5 * np.abs(x_raw[perm])), (s, n))
        paths[method] = root / "toy" / "sinusoid" / "split0" / method / "samples.npz"
        save_npz(paths[method], y=y[perm], point=trend[perm], samples=samples)
    return prepared, paths


def test_teaser_sinusoid(tmp_path):
    prepared, paths = _fake_sinusoid(tmp_path)
    out = tmp_path / "teaser_c"
    assert_figure_files(UF.teaser_sinusoid(paths, prepared, out), out)
    assert_figure_files(UF.teaser_sinusoid(paths, prepared, out, trend_method="swag", level=0.5), out)
    with pytest.raises(ValueError, match="trend_method"):
        UF.teaser_sinusoid(paths, prepared, out, trend_method="ivon")


def test_teaser_checks_that_every_method_recovers_the_trend(tmp_path):
    prepared, paths = _fake_sinusoid(tmp_path)
    out = tmp_path / "teaser_c"
    # every fake method's point is the trend itself: RMSE 0 passes any tolerance
    assert_figure_files(UF.teaser_sinusoid(paths, prepared, out, max_trend_rmse=1e-9), out)
    flat = load_npz(paths["swag"])
    flat["point"] = np.full_like(flat["point"], flat["point"].mean())  # a straight line: the failure to catch
    save_npz(paths["swag"], **flat)
    expected = float(np.sqrt(np.mean((flat["point"] - load_npz(paths["sa"])["point"]) ** 2)))
    with pytest.raises(ValueError, match=rf"SWAG {expected:.3g}"):
        UF.teaser_sinusoid(paths, prepared, out, max_trend_rmse=0.5 * expected)
    assert_figure_files(UF.teaser_sinusoid(paths, prepared, out, max_trend_rmse=1.01 * expected), out)


def test_teaser_rejects_mismatched_inputs(tmp_path):
    prepared, paths = _fake_sinusoid(tmp_path)
    short = tmp_path / "short.npz"
    save_npz(short, y=np.zeros(5), point=np.zeros(5), samples=np.zeros((3, 5)))
    with pytest.raises(ValueError, match="test points"):
        UF.teaser_sinusoid({"sa": short}, prepared, tmp_path / "x")
    three_d = tmp_path / "prep3d.npz"
    save_npz(three_d, x_test=np.zeros((80, 2, 2)), x_mean=np.zeros(2), x_std=np.ones(2))
    with pytest.raises(ValueError, match=r"x_test of shape \(n, n_features\)"):
        UF.teaser_sinusoid(paths, three_d, tmp_path / "x")


def test_method_colors_are_distinct_and_cover_every_labelled_method():
    assert set(F.METHOD_COLORS) == set(R.METHOD_LABELS)
    assert len(set(F.METHOD_COLORS.values())) == len(F.METHOD_COLORS)
    assert F.method_color("contextual_dropout") not in {F.method_color(m) for m in METHODS}
    assert F.method_color("deep_ensemble") in F.PALETTE
    assert F.format_seconds(30) == "30 s" and F.format_seconds(90) == "1.5 min" and F.format_seconds(7200) == "2.0 h"


def test_cost_figure_from_the_csv(tmp_path, fake):
    _, runs = fake
    csv = tmp_path / "uci_cost.csv"
    U.uci_cost_table(runs).to_csv(csv, index=False)
    out = tmp_path / "cost_csv"
    assert_figure_files(UF.cost_figure(csv, out), out)


def test_paper_w1_figure_counts_the_cells_within_2x(tmp_path, monkeypatch):
    """One panel per method with a paper value; each title counts its points within a factor 2 of the paper (a row
    without a paper value or a W1 of ours is left out); the file round trip through the comparison's CSV."""
    import pandas as pd

    rows = [("yacht", "sa", 0.05, 0.02, 3), ("energy", "sa", 0.03, 0.03, 3), ("wine", "sa", 0.09, 0.18, 3),
            ("power", "sa", 0.134, 0.093, 1), ("yacht", "ivon", 0.056, 0.103, 3), ("energy", "ivon", 0.071, 0.159, 3),
            ("wine", "ivon", 0.158, float("nan"), 3), ("yacht", "swag", float("nan"), 0.037, 3)]  # fmt: skip
    table = pd.DataFrame(rows, columns=["dataset", "method", "w1", "paper_w1", "n"]).assign(w1_floor=0.02)
    # uci_slice_comparison's verdicts (its rule is tested in test_paper_comparison): 2x of the paper or 1.5x the floor
    table["within"] = [False, True, True, True, True, False, False, False]
    drawn = {}
    save = UF.save_figure
    monkeypatch.setattr(UF, "save_figure", lambda fig, out: drawn.setdefault("fig", fig) and save(fig, out))
    out = tmp_path / "w1"
    assert_figure_files(UF.paper_w1_figure(table, out), out)
    titles = [ax.get_title() for ax in drawn["fig"].axes]
    assert titles == ["SA: 3 of 4 within", "IVON: 1 of 2 within"]  # yacht SA 2.5x out; energy IVON 0.45x out
    labels = [t.get_text() for t in drawn["fig"].axes[0].texts]
    assert labels == ["Yacht", "Energy", "Wine", "Power (1)"]  # the splits where fewer than the most
    csv = tmp_path / "comparison.csv"
    table.to_csv(csv, index=False)
    assert_figure_files(UF.paper_w1_figure(csv, tmp_path / "w1_csv"), tmp_path / "w1_csv")
    with pytest.raises(ValueError, match="within"):
        UF.paper_w1_figure(table.drop(columns="within"), tmp_path / "x")
    with pytest.raises(ValueError, match="no row"):
        UF.paper_w1_figure(table[table["method"] == "swag"], tmp_path / "x")


def test_schedule_curves_mark_each_patiences_kept_epoch_on_its_line(tmp_path, monkeypatch):
    """One panel per split, one line per (lr, batch); each patience's kept epoch is a marker at that epoch's
    validation value on its schedule's line; the paper's line where given; a missing column is a clear error."""
    import pandas as pd

    rng = np.random.default_rng(0)
    curves = pd.DataFrame([{"prepared": f"results/uci/naval/split{k}/prepared.npz", "lr": lr, "batch": 256,
                            "epoch": e, "val_nrmse": float(1 / e + rng.uniform(0, 0.01))}
                           for k in (0, 1) for lr in (1e-4, 3e-4) for e in range(1, 41)])  # fmt: skip
    kept = pd.DataFrame([{"prepared": f"results/uci/naval/split{k}/prepared.npz", "lr": lr, "batch": 256,
                          "patience": p, "best_epoch": 10 + p + k} for k in (0, 1) for lr in (1e-4, 3e-4)
                         for p in (2, 5)])  # fmt: skip
    drawn = {}
    save = UF.save_figure
    monkeypatch.setattr(UF, "save_figure", lambda fig, out: drawn.setdefault("fig", fig) and save(fig, out))
    out = tmp_path / "curves"
    assert_figure_files(UF.schedule_curves_figure(curves, kept, out, reference=0.173), out)
    axes = drawn["fig"].axes
    assert [ax.get_title() for ax in axes] == ["Naval, split0", "Naval, split1"]
    for k, ax in enumerate(axes):
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert lines["paper, test (its splits)"].get_ydata()[0] == 0.173
        for lr in (1e-4, 3e-4):
            curve = lines[f"lr {lr:g}, batch 256"]
            color = curve.get_color()
            marks = [ln for ln in ax.get_lines() if ln.get_marker() in "v^" and ln.get_color() == color
                     and len(ln.get_xdata()) == 1]  # fmt: skip
            assert sorted(int(m.get_xdata()[0]) for m in marks) == [12 + k, 15 + k]
            for m in marks:  # on the line, at its epoch's value
                e = int(m.get_xdata()[0])
                assert m.get_ydata()[0] == curve.get_ydata()[list(curve.get_xdata()).index(e)]
    with pytest.raises(ValueError, match="best_epoch"):
        UF.schedule_curves_figure(curves, kept.drop(columns="best_epoch"), tmp_path / "x")


def test_train_select_writes_every_epoch_and_the_curves_figure(tmp_path):
    """benchmarks/uci_train_select.py --curves / --figure: one CSV row per epoch of every curve, run to the largest
    patience's stop; the per-patience rows (--out) read their values off those epochs; both figure files."""
    import subprocess
    import sys

    import pandas as pd
    import yaml

    from stochattn.experiments import uci

    repo = Path(__file__).resolve().parents[1]
    prepared = tmp_path / "results" / "uci" / "sinusoid" / "split0" / "prepared.npz"
    uci.prepare_sinusoid(prepared, n=160, seed=0)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"model": dict(n_blocks=1, d_block=8, attention_n_heads=2),
                                      "train": {"weight_decay": 1e-5}}))  # fmt: skip
    out, curves, figure = tmp_path / "select.csv", tmp_path / "curves.csv", tmp_path / "fig"
    res = subprocess.run([sys.executable, str(repo / "benchmarks" / "uci_train_select.py"), str(prepared), "--lr",
                          "1e-2", "3e-3", "--batch", "16", "--patience", "2", "4", "--max-epochs", "12", "--config",
                          str(config), "--out", str(out), "--curves", str(curves), "--figure", str(figure)],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows, epochs = pd.read_csv(out), pd.read_csv(curves)
    assert len(rows) == 4 and set(epochs["lr"]) == {1e-2, 3e-3}
    for r in rows.itertuples():
        c = epochs[epochs["lr"] == r.lr]
        assert c["epoch"].tolist() == list(range(1, len(c) + 1))  # every epoch of the curve, in order
        assert len(c) == rows[rows["lr"] == r.lr]["epochs_run"].max()  # up to the largest patience's stop
        at = c[c["epoch"] == r.best_epoch].iloc[0]
        assert (at["val_nrmse"], at["test_nrmse"]) == pytest.approx((r.val_nrmse, r.test_nrmse))
        assert at["val_nrmse"] == c["val_nrmse"].iloc[: r.epochs_run].min()
    assert_figure_files([Path(str(figure) + ".png"), Path(str(figure) + ".pdf")], figure)


def test_figure_rule_entries_cover_the_shared_helpers():
    from stochattn.provenance import code_closure

    pit = code_closure(["stochattn.experiments.uci_figures:pit_histograms"])
    for key in ("stochattn.figures:draw_pit_grid", "stochattn.figures:pooled_pit", "stochattn.figures:save_figure",
                "stochattn.figures:METHOD_COLORS", "stochattn.report:load_runs", "stochattn.report:method_label"):
        assert key in pit, key
    appendix = code_closure(["stochattn.experiments.uci_figures:yacht_appendix"])
    assert {"stochattn.figures:draw_pit_overlay", "stochattn.figures:draw_sharpness",
            "stochattn.experiments.uci_figures:normalised_widths"} <= set(appendix)
    assert "stochattn.figures:format_seconds" in code_closure(["stochattn.experiments.uci_figures:cost_figure"])


def test_sharpness_grid_has_one_lettered_panel_per_data_set(tmp_path, fake, monkeypatch):
    """The paper's six-panel figure in one file: a panel per data set in the given order, titled (a), (b), ...,
    each drawing that data set's temperature-scaled widths."""
    files, _ = fake
    inputs = {d: sharp_inputs(files, d) for d in ("yacht", "energy")}
    out = tmp_path / "grid"
    assert_figure_files(UF.sharpness_grid(inputs, out, columns=3), out)
    figures = []
    monkeypatch.setattr(UF, "save_figure", lambda fig, base: figures.append(fig) or [])
    UF.sharpness_grid(inputs, out, columns=3)
    axes = figures[0].axes
    assert [ax.get_title() for ax in axes if ax.get_visible()] == ["(a) Yacht", "(b) Energy"]
    assert len(axes) == 2  # two data sets: one row of two, not a half-empty grid of three
    with pytest.raises(ValueError, match="no data set"):
        UF.sharpness_grid({}, out)


def test_compose_panels_letters_each_panel_in_reading_order(tmp_path, monkeypatch):
    """The teaser in one file: panel images laid out in rows at their own aspect ratios, lettered (a), (b), (c)."""
    paths = []
    for name, (w, h) in {"maps": (6, 2), "axes": (4, 2), "toy": (3, 2)}.items():
        fig = F.new_figure(w, h)
        fig.add_subplot().plot([0, 1], [0, 1])
        paths.append(F.save_figure(fig, tmp_path / name)[0])
    out = tmp_path / "teaser"
    assert_figure_files(F.compose_panels([[paths[0]], paths[1:]], out, title="t"), out)
    figures = []
    monkeypatch.setattr(F, "save_figure", lambda fig, base: figures.append(fig) or [])
    F.compose_panels([[paths[0]], paths[1:]], out)
    letters = [t.get_text() for ax in figures[0].axes for t in ax.texts]
    assert letters == ["(a)", "(b)", "(c)"]
    a, b, c = (ax.get_position() for ax in figures[0].axes)
    assert a.y0 > b.y1 - 1e-6 and abs(b.y0 - c.y0) < 1e-6 and b.x1 <= c.x0 + 1e-6  # (a) on top, (b) left of (c)
    with pytest.raises(ValueError, match="no panel"):
        F.compose_panels([[]], out)


def test_figure_marker_is_one_line_and_says_see_caption():
    """A stand-in or reduced run's figure carries one line; the caption (report, .prov.json) holds the rest."""
    assert F.figure_marker() == ""
    assert F.figure_marker("aquaplanet", detail="Z500 24 h") == "STAND-IN: aquaplanet, Z500 24 h; see caption"
    assert F.figure_marker("aquaplanet", reduced=True, detail="Z500 24 h") == (
        "STAND-IN: aquaplanet, Z500 24 h, reduced; see caption")
    assert F.figure_marker(reduced=True) == "REDUCED PROTOCOL; see caption"
    fig = F.new_figure(3, 2)
    F.draw_marker(fig, "")
    assert fig._supxlabel is None  # nothing drawn without a marker
    F.draw_marker(fig, F.figure_marker(reduced=True))
    assert fig._supxlabel.get_text() == "REDUCED PROTOCOL; see caption"
    for bad in ("two\nlines", "x" * (F.MARKER_MAX_CHARS + 1)):
        with pytest.raises(ValueError, match="one line"):
            F.draw_marker(fig, bad)


def test_labels_of_points_close_together_do_not_overlap():
    """Three data sets at one spot (and a fourth beside it), as power, wine and concrete sit in several panels of the
    paper-comparison figure: each label goes to a corner where its drawn text overlaps no other label; and SWAG's
    panel of 2026-11-29 (concrete's label ran over power's and wine's markers): no label covers another point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from stochattn.experiments.uci_figures import _label_points

    def drawn(points):
        fig, ax = plt.subplots(figsize=(3, 3))
        ax.set(xscale="log", yscale="log", xlim=(0.01, 0.3), ylim=(0.01, 0.3))
        for _, x, y in points:
            ax.plot(x, y, "o", ms=5)
        _label_points(ax, points)
        renderer = fig.canvas.get_renderer()
        for t in ax.texts:
            t.update_positions(renderer)
        texts = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the text alone, without a leader line
        markers = [line.get_window_extent(renderer) for line in ax.lines]
        plt.close(fig)
        return [t.get_text() for t in ax.texts], texts, markers

    labels, boxes, _ = drawn([("Power (1)", 0.17, 0.15), ("Wine", 0.17, 0.15), ("Concrete", 0.175, 0.155),
                              ("Kin8nm (1)", 0.1, 0.1)])  # fmt: skip
    assert labels == ["Power (1)", "Wine", "Concrete", "Kin8nm (1)"]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    labels, boxes, markers = drawn([("Concrete", 0.137, 0.154), ("Power (1)", 0.176, 0.180), ("Wine", 0.196, 0.173),
                                    ("Kin8nm (1)", 0.11, 0.098)])  # fmt: skip
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert not any(t.overlaps(m) for i, t in enumerate(boxes) for j, m in enumerate(markers) if i != j)


def test_paper_w1_figures_labels_cover_no_other_point_as_saved(tmp_path, monkeypatch):
    """SA's and MultiSWAG's panels of the kept report of 2026-12-04: labelled before the constrained layout and the
    equal aspect had set the panels' boxes, protein's label covered yacht's MultiSWAG point and kin8nm's ran into
    protein's on SA's panel. As saved, no label's text overlaps another label or another point's marker."""
    import pandas as pd
    from matplotlib.text import Text

    rows = [("concrete", "sa", 0.075, 0.051, 3), ("concrete", "multiswag", 0.056, 0.115, 3),
            ("energy", "sa", 0.077, 0.03, 3), ("energy", "multiswag", 0.029, 0.042, 3),
            ("kin8nm", "sa", 0.073, 0.07, 3), ("kin8nm", "multiswag", 0.132, 0.087, 3),
            ("naval", "sa", 0.089, 0.022, 3),
            ("power", "sa", 0.116, 0.093, 3), ("power", "multiswag", 0.142, 0.169, 3),
            ("protein", "sa", 0.131, 0.163, 1), ("protein", "multiswag", 0.113, 0.14, 1),
            ("wine", "sa", 0.158, 0.189, 3), ("wine", "multiswag", 0.164, 0.177, 3),
            ("yacht", "sa", 0.057, 0.021, 3), ("yacht", "multiswag", 0.093, 0.07, 3)]  # fmt: skip
    table = pd.DataFrame(rows, columns=["dataset", "method", "w1", "paper_w1", "n"]).assign(w1_floor=0.005, within=True)
    drawn = {}
    save = UF.save_figure
    monkeypatch.setattr(UF, "save_figure", lambda fig, out: drawn.setdefault("fig", fig) and save(fig, out))
    UF.paper_w1_figure(table, tmp_path / "w1")
    fig = drawn["fig"]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for t in ax.texts:
            t.update_positions(renderer)
        texts = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the text alone, without a leader line
        markers = [line.get_window_extent(renderer) for line in ax.lines if line.get_marker() == "o"]
        assert len(texts) == len(markers) == (8 if ax.get_title().startswith("SA") else 7)
        assert not any(a.overlaps(b) for i, a in enumerate(texts) for b in texts[i + 1 :]), ax.get_title()
        assert not any(t.overlaps(m) for i, t in enumerate(texts) for j, m in enumerate(markers) if i != j)


def test_loss_minimum_figure_marks_the_losss_minimum_and_the_scale_matching_point(tmp_path, monkeypatch):
    """One panel per backbone; the vertical lines at kappa * rho and 1; candidates beyond twice s0 counted, not drawn;
    the closed-form curve passes through the loss it describes; a result without rows is a clear error."""

    def row(nu, q, kappa=0.56, rho=1.1, s0=0.05, z2=0.004):
        loss = s0**2 * (q**2 / kappa - 2 * rho * q) + z2
        return {"nu": nu, "scale_ratio": q, "loss": loss, "loss_se": 1e-5, "kappa": kappa, "rho": rho, "s0": s0,
                "z2": z2}  # fmt: skip

    results = [{"net": f"/w/results/uci/{d}/split0/backbone",
                "loss_minimum": {"rows": [row(1, 10.1), row(23, 0.95), row(101, 0.42)], "nu_loss_argmin": 101,
                                 "nu_surrogate": 23}} for d in ("naval", "energy")]  # fmt: skip
    drawn = {}
    save = UF.save_figure
    monkeypatch.setattr(UF, "save_figure", lambda fig, out: drawn.setdefault("fig", fig) and save(fig, out))
    out = tmp_path / "loss_minimum"
    assert_figure_files(UF.loss_minimum_figure(results, out), out)
    axes = drawn["fig"].axes
    assert [ax.get_title() for ax in axes] == ["Naval, split0", "Energy, split0"]
    for ax in axes:
        vertical = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if list(ln.get_ydata()) == [0, 1])  # axvline
        assert vertical == pytest.approx([0.56 * 1.1, 1.0])
        assert [t.get_text() for t in ax.texts if "beyond" in t.get_text()] == [
            "kappa 0.56, rho 1.10\nleast at 0.62 s0\n1 nu beyond 2 s0"]
        assert sorted(t.get_text() for t in ax.texts if t.get_text().isdigit()) == ["101", "23"]
        curve = ax.get_lines()[0]
        x, y = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
        assert np.interp(0.42, x, y) == pytest.approx(row(101, 0.42)["loss"] / 0.05**2, rel=1e-3)
    with pytest.raises(ValueError, match="no loss_minimum rows"):
        UF.loss_minimum_figure([{"net": "x", "loss_minimum": {"rows": []}}], tmp_path / "x")
