"""Tests for stochattn.experiments.era5_report: the ClimaX tables hold the numbers of the stage files with the
paper's bold rule, and every figure writer makes a PNG and a PDF, from small synthetic runs scored by the real
evaluate / spatial_metrics code."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stochattn import report as R
from stochattn.calibrate import EvalResult, IntegerDomain, bo_calibrate
from stochattn.experiments import era5_report as E
from stochattn.experiments.era5 import spatial_metrics
from stochattn.experiments.evaluate import evaluate_split
from stochattn import metrics as M
from stochattn.io import load_json, load_npz, save_json, save_npz, sha256_record
from stochattn.metrics import central_interval
from stochattn.scaling import apply_scale
from test_figures import assert_figure_files  # PNG + PDF written, non-empty, something drawn

# scoringrules itself (the reference these tests score against), imported with its numba kernels cached on disk:
# a plain import compiles them again in every pytest worker (~4 CPU-s each)
sr = M._scoringrules()

S, N, N_CAL = 5, 3, 4
LAT = np.arange(-87.1875, 90.0, 5.625)
LON = np.arange(0.0, 360.0, 5.625)
D = LAT.size * LON.size
# method -> (spread of the samples around the point, point error scale); swag under-dispersed, hsa inaccurate
SPREADS = {"sa": (300.0, 1.0), "swag": (30.0, 1.0), "hsa": (400.0, 2.0), "ivon": (150.0, 1.2)}
CAPTION = "AQUAPLANET STAND-IN, not ERA5: synthetic test inputs"
MARKER = "STAND-IN: aquaplanet, Z500 72 h; see caption"


def _fields(rng: np.random.Generator, clim: np.ndarray, n: int) -> np.ndarray:
    return clim + 600.0 * rng.standard_normal((n, D))


def _bo_run(seed: int, low: int = 1, high: int = 512) -> dict:
    """A real bo_calibrate record on a synthetic EvalStats: s(nu) = 2 nu^-1/2 (noisy), s0 = 1, so nu* ~ 4."""
    rng = np.random.default_rng(100 + seed)

    def evaluate(nu: int) -> EvalResult:
        scale = 2.0 * nu**-0.5 * math.exp(0.02 * rng.standard_normal())
        return EvalResult(nu=nu, loss=(scale - 1.0) ** 2 + 0.5, scale=scale)

    res = bo_calibrate(evaluate, 1.0, domain=IntegerDomain(low, high), budget=6, initial_design=3, seed=seed,
                       num_posterior_draws=200).to_dict()  # fmt: skip
    return res


@pytest.fixture(scope="module")
def era5(tmp_path_factory):
    """Synthetic stage outputs: pairs.npz, runs/<method>/{samples.npz, meta.json, metrics.json, spatial.json},
    an.json, scale_sweep.json, adapter.json."""
    root = tmp_path_factory.mktemp("era5")
    rng = np.random.default_rng(0)
    clim = 54000.0 + 800.0 * np.cos(np.deg2rad(LAT))[:, None].repeat(LON.size, 1).ravel()
    y_mean, y_std = 54000.0, 900.0
    y_test, y_cal = _fields(rng, clim, N), _fields(rng, clim, N_CAL)
    save_npz(root / "pairs.npz", lat=LAT, lon=LON, climatology=clim, y_mean=np.float64(y_mean),
             y_std=np.float64(y_std), y_test=((y_test - y_mean) / y_std).astype(np.float32))  # fmt: skip
    samples, metas = {}, {}
    for i, (method, (spread, err)) in enumerate(SPREADS.items()):
        run_dir = root / "runs" / method
        point = y_test + 200.0 * err * rng.standard_normal(y_test.shape)
        cal_point = y_cal + 200.0 * err * rng.standard_normal(y_cal.shape)
        save_npz(run_dir / "samples.npz", y=y_test, point=point, cal_y=y_cal, cal_point=cal_point,
                 samples=point + spread * rng.standard_normal((S, *point.shape)),
                 cal_samples=cal_point + spread * rng.standard_normal((S, *cal_point.shape)),
                 sigma_y=np.float64(y_std))  # fmt: skip
        seconds = {"train": 10.0 * i, "calibrate": 2.0 if method == "sa" else 0.0, "predict": 1.0 + i,
                   "backbone_train": 5.0 if method in ("sa", "swag") else 0.0}  # fmt: skip
        save_json(run_dir / "meta.json", {"method": method, "seconds": seconds, "nu": 4 if method == "sa" else None,
                                          "sha256": sha256_record(run_dir / "samples.npz")})
        samples[method], metas[method] = run_dir / "samples.npz", run_dir / "meta.json"
    metrics = {m: samples[m].with_name("metrics.json") for m in SPREADS}
    evaluate_split(samples, metrics, seed=0)
    spatial = {m: samples[m].with_name("spatial.json") for m in SPREADS}
    for m in SPREADS:
        temperature = load_json(metrics[m])["temperature"]
        save_json(spatial[m], dict(spatial_metrics(samples[m], root / "pairs.npz", temperature), method=m))
    pit = lambda a: rng.beta(a, a, size=N * D).tolist()  # noqa: E731
    analyses = {
        "score_sweep": {
            "grid": [{"nu": nu, "crps": 200.0 + (np.log2(nu) - 4.6) ** 2, "energy": 300.0 + (np.log2(nu) - 4.6) ** 2,
                      "w1": 0.05, "coverage_95": 0.9, "width_95": 1000.0 / nu**0.5} for nu in (1, 4, 16, 25, 64)],
            "nu_score": 25,
            "test": {"calibration_first": {"nu": 4, "pit": pit(1.0), "crps": 221.7, "energy": 310.0, "w1": 0.05},
                     "score_oriented": {"nu": 25, "pit": pit(0.7), "crps": 135.4, "energy": 209.7, "w1": 0.08}},
        },
        "bo_seeds": [_bo_run(seed) for seed in (0, 1, 2)],
        "bo_second_range": [_bo_run(seed, 2, 64) for seed in (0, 1, 2)],
        "latency": {"batch": 4, "deterministic": 0.42, "threads": 2, "device": {"device": "cpu", "torch_threads": 2},
                    "sa": [{"nu": nu, "seconds": 0.45 + 0.01 * np.log2(nu)} for nu in (1, 2, 4, 8, 64, 512)]},
    }  # fmt: skip
    save_json(root / "an.json", analyses)
    sweep = {"rows": [{"scale": s, "val": {"rmse": 265.0 - 0.1 * s + 0.004 * s**2, "w1": 0.22 - 0.0016 * s,
                                           "coverage_95": 0.08 + 0.008 * s, "width_95": 47.0 + 5.0 * s},
                       "test": {"rmse": 264.0 + s / 100, "w1": 0.2 - s / 1000, "coverage_95": 0.1 + s / 200,
                                "width_95": 50.0 + 4.0 * s}} for s in (1.0, 2.0, 16.0, 64.0)],
             "selected_w1": 64.0, "selected_rmse": 16.0, "num_samples": S}  # fmt: skip
    save_json(root / "scale_sweep.json", sweep)
    skill = {"backbone": {"rmse": 420.0, "acc": 0.91}, "adapted": {"rmse": 300.0, "acc": 0.95},
             "persistence": {"rmse": 900.0, "acc": 0.5}, "climatology": {"rmse": 1000.0, "acc": 0.0}}  # fmt: skip
    save_json(root / "adapter.json", {"test_skill": skill, "persistence_over_climatology_rmse": 0.9})
    return {"root": root, "samples": samples, "metas": metas, "metrics": metrics, "spatial": spatial,
            "an": root / "an.json", "sweep": root / "scale_sweep.json", "adapter": root / "adapter.json",
            "pairs": root / "pairs.npz"}  # fmt: skip


def runs_of(era5):
    return {m: (era5["metrics"][m], era5["spatial"][m]) for m in SPREADS}


def value(tidy, method, metric):
    row = tidy[(tidy["method"] == method) & (tidy["metric"] == metric)]
    assert len(row) == 1, (method, metric)
    return float(row["value"].iloc[0])


def bold_columns(tidy, spec, title):
    """Row labels (methods) of the bold cells in column ``title`` of the markdown of ``tidy`` (rows = methods)."""
    lines = [ln for ln in R.to_markdown(tidy, spec).splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    col = header.index(title)
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return {r[0] for r in rows if r[col].startswith("**")}


# --------------------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------------------
def test_summary_table_holds_the_run_numbers(era5):
    tidy = E.CLIMAX_SUMMARY.build(runs_of(era5))
    assert list(tidy.columns) == list(R.TIDY_COLUMNS)
    for m in SPREADS:
        met, sp = load_json(era5["metrics"][m]), load_json(era5["spatial"][m])
        assert value(tidy, m, "acc_ensemble_mean") == sp["acc_ensemble_mean"]
        assert value(tidy, m, "acc_single_sample") == sp["acc_single_sample"]
        assert value(tidy, m, "rmse_ensemble_mean") == sp["rmse_ensemble_mean"]
        assert value(tidy, m, "w1_native") == met["native"]["w1"]
        assert value(tidy, m, "coverage_95_native") == met["native"]["coverage_95"]
        # beside it: a perfectly calibrated S = 5 ensemble's interpolated PI-95 (Gaussian; simulated: 0.6448)
        assert value(tidy, m, "coverage_95_calibrated") == M.calibrated_coverage(S, 0.95) == pytest.approx(0.6447,
                                                                                                       abs=1e-3)
        if m == "sa":
            assert value(tidy, m, "w1_scaled") == met["native"]["w1"]
            assert value(tidy, m, "width_95_matched") == met["native"]["width_95"]
            assert value(tidy, m, "width_95_scaled") == met["native"]["width_95"]
        else:
            assert value(tidy, m, "w1_scaled") == met["scaled"]["w1"] != met["native"]["w1"]
            assert value(tidy, m, "width_95_matched") == met["matched"]["width_95"]
            assert value(tidy, m, "width_95_scaled") == met["scaled"]["width_95"]  # the paper's PI-95
    assert set(tidy["n"]) == {1}


def test_summary_bold_marks_follow_the_paper(era5):
    tidy = E.CLIMAX_SUMMARY.build(runs_of(era5))
    short = {m: R.method_label(m) for m in SPREADS}
    short["sa"] = "SA (nu=4)"  # SA's row names its calibrated nu, as the paper's "SA (nu=4)"
    for metric, title, pick in (("acc_ensemble_mean", "ACC ens.", max), ("w1_native", "W1 native", min),
                                ("w1_scaled", "W1 scaled", min), ("width_95_scaled", "PI-95", min),
                                ("width_95_matched", "PI-95 @SA cov.", min)):  # fmt: skip
        best = pick(SPREADS, key=lambda m: value(tidy, m, metric))
        assert short[best] in bold_columns(tidy, E.CLIMAX_SUMMARY, title), metric
    closest = min(SPREADS, key=lambda m: abs(value(tidy, m, "coverage_95_native") - 0.95))
    assert short[closest] in bold_columns(tidy, E.CLIMAX_SUMMARY, "Cov95")


def test_crps_decomposition_and_score_oriented_row(era5):
    tidy = E.CLIMAX_CRPS_DECOMP.build(runs_of(era5), era5["an"])
    for m in SPREADS:
        sp = load_json(era5["spatial"][m])
        for key in ("crps", "crps_error", "crps_spread", "energy"):
            assert value(tidy, m, key) == sp[key]
        assert value(tidy, m, "crps") == pytest.approx(sp["crps_error"] - sp["crps_spread"])
        # the fair estimator beside it (beyond the paper), against scoringrules on the run's own samples
        d = load_npz(era5["samples"][m])
        fair = sr.crps_ensemble(d["y"], d["samples"], m_axis=0, estimator="fair", backend="numpy").mean()
        assert value(tidy, m, "crps_fair") == pytest.approx(fair, rel=1e-10)
        assert value(tidy, m, "crps_fair") < value(tidy, m, "crps")
    assert value(tidy, "SA (score-oriented nu=25)", "crps") == 135.4
    assert value(tidy, "SA (score-oriented nu=25)", "energy") == 209.7
    widest = max(SPREADS, key=lambda m: value(tidy, m, "crps_spread"))
    assert widest == "hsa"
    assert bold_columns(tidy, E.CLIMAX_CRPS_DECOMP, "Spread") == {R.method_label("hsa")}
    assert bold_columns(tidy, E.CLIMAX_CRPS_DECOMP, "CRPS") == {"SA (score-oriented nu=25)"}
    # without an.json: no extra row; SA's nu and boundary flag label its row
    assert len(E.CLIMAX_CRPS_DECOMP.build(runs_of(era5))) == 5 * len(SPREADS) + 2


def test_swag_sweep_tables(era5):
    sweep = load_json(era5["sweep"])
    val = E.SWAG_SWEEP_VAL.build(era5["sweep"])
    assert R.method_order(val["method"]) == ["scale  1", "scale  2", "scale 16", "scale 64"]  # numeric order
    for row in sweep["rows"]:
        for key in ("rmse", "w1", "coverage_95", "width_95"):
            assert value(val, f"scale {row['scale']:>2g}", key) == row["val"][key]
    assert bold_columns(val, E.SWAG_SWEEP_VAL, "W1") == {"scale 64"}
    assert bold_columns(val, E.SWAG_SWEEP_VAL, "Cov@95") == {"scale 64"}  # closest to 0.95
    assert bold_columns(val, E.SWAG_SWEEP_VAL, "Sharp@95") == {"scale  1"}
    assert bold_columns(val, E.SWAG_SWEEP_VAL, "RMSE") == {"scale 16"}
    assert value(val, "scale 16", "coverage_95_calibrated") == M.calibrated_coverage(S, 0.95)  # the sweep's S
    test = E.SWAG_SWEEP_TEST.build(era5["sweep"])
    by_scale = {r["scale"]: r["test"] for r in sweep["rows"]}
    assert R.method_order(test["method"]) == ["compromise (scale 16)", "val.-selected (scale 64)"]
    for label, scale in (("compromise (scale 16)", 16.0), ("val.-selected (scale 64)", 64.0)):
        for key in ("rmse", "w1", "coverage_95", "width_95"):
            assert value(test, label, key) == by_scale[scale][key]


def test_scale_labels_sort_numerically():
    labels = E._scale_labels([64, 0.5, 2, 16])
    assert sorted(labels.values()) == [labels[s] for s in sorted(labels)]


def test_skill_table(era5):
    tidy = E.CLIMAX_SKILL.build(era5["adapter"])
    skill = load_json(era5["adapter"])["test_skill"]
    for key, column in E.SKILL_COLUMNS.items():
        assert value(tidy, column, "rmse") == skill[key]["rmse"]
        assert value(tidy, column, "acc") == skill[key]["acc"]
    assert value(tidy, "persistence", "rmse_over_climatology") == pytest.approx(0.9)
    assert bold_columns(tidy, E.CLIMAX_SKILL, "RMSE") == {"LoRA-adapted"}


def test_every_table_writes(era5, tmp_path):
    tidies = {
        "climax_summary": E.CLIMAX_SUMMARY.build(runs_of(era5)),
        "climax_crps_decomp": E.CLIMAX_CRPS_DECOMP.build(runs_of(era5), era5["an"]),
        "swag_sweep_val": E.SWAG_SWEEP_VAL.build(era5["sweep"]),
        "swag_sweep_test": E.SWAG_SWEEP_TEST.build(era5["sweep"]),
        "climax_skill": E.CLIMAX_SKILL.build(era5["adapter"]),
        "climax_cost": E.CLIMAX_COST.build(era5["metas"]),
        "climax_summary_cases": E.CLIMAX_SUMMARY_CASES.build({"Z500 72 h": runs_of(era5),
                                                              "T850 24 h": runs_of(era5)}),  # fmt: skip
    }
    assert set(tidies) == set(E.ERA5_TABLE_SPECS)
    prov = {"rule": "test", "inputs": [], "config_subset": {}, "seeds": {}}
    for name, tidy in tidies.items():
        written = R.write_table(tidy, tmp_path / name, CAPTION, prov, spec=E.ERA5_TABLE_SPECS[name])
        assert all(p.stat().st_size > 0 for p in written)
        assert CAPTION in (tmp_path / f"{name}.md").read_text()


# --------------------------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------------------------
def test_sharpness_figure_widths_are_temperature_scaled_over_sas_mean_width(era5, monkeypatch, tmp_path):
    """The paper's climax_sharpness: every (forecast, cell) width of a baseline temperature-scaled by its fitted T,
    divided by SA's MEAN native width, so the mean of a method's values is the ratio of mean widths."""
    samples, metrics = era5["samples"], era5["metrics"]
    drawn = {}
    monkeypatch.setattr(E, "draw_sharpness", lambda ax, widths, level: drawn.update(widths))
    E.sharpness_figure(samples, metrics, 95, out_base=tmp_path / "sharp", marker=MARKER)
    sa, sw = load_npz(samples["sa"]), load_npz(samples["swag"])
    t = load_json(metrics["swag"])["temperature"]
    w_sa = np.subtract(*central_interval(sa["samples"], 0.95)[::-1]).ravel()
    w_sw = np.subtract(*central_interval(apply_scale(sw["samples"], sw["point"], t), 0.95)[::-1]).ravel()
    np.testing.assert_allclose(drawn["swag"], w_sw / w_sa.mean(), rtol=1e-10)
    assert drawn["sa"].mean() == pytest.approx(1.0)
    scaled = load_json(metrics["swag"])["scaled"]["width_95"] / load_json(metrics["sa"])["native"]["width_95"]
    assert drawn["swag"].mean() == pytest.approx(scaled, rel=1e-6)  # = the summary table's PI-95 ratio


def test_bo_sensitivity_draws_the_second_search_range(era5, tmp_path, monkeypatch):
    """App. BO sensitivity: the same seeds on a second search range, drawn dashed beside the first; both ranges'
    surrogate optimum lands at the synthetic nu* = 4."""
    an = load_json(era5["an"])
    for run in (*an["bo_seeds"], *an["bo_second_range"]):
        assert abs(math.log(run["nu_surrogate_continuous"] / 4.0)) < 0.3
    assert {r["domain"]["low"] for r in an["bo_second_range"]} == {2}
    figures = []
    monkeypatch.setattr(E, "save_figure", lambda fig, base: figures.append(fig) or [])
    E.bo_sensitivity(era5["an"], out_base=tmp_path / "bo", marker=MARKER)
    top = figures[0].axes[0]
    dashed = [ln for ln in top.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 3 and all("[2, 64]" in ln.get_label() for ln in dashed)
    assert "second search range [2, 64]" in top.get_title()


def test_beta_star_is_ln_nu_cont(era5):
    an = load_json(era5["an"])
    betas = E.beta_star(era5["an"])
    assert list(betas) == ["seed 0", "seed 1", "seed 2"]
    for run, beta in zip(an["bo_seeds"], betas.values()):
        np.testing.assert_array_equal(beta, np.log(run["posterior_draws"]["nu_cont"]))
    pooled = np.concatenate(list(betas.values()))
    assert abs(np.median(pooled) - np.log(4.0)) < 0.5  # the synthetic optimum nu* = 4


def test_total_seconds_sums_every_component(era5):
    assert E.total_seconds(era5["metas"]["sa"]) == 0.0 + 2.0 + 1.0 + 5.0


def test_cost_table_puts_each_method_against_sas_bo_seconds(era5):
    """climax_cost (the paper's cost contrast as numbers): adaptation = train + calibrate (SA: its 2 s of BO),
    ratio to SA's BO, totals; the same numbers as build_table from the workflow's meta.json list."""
    tidy = E.CLIMAX_COST.build(era5["metas"])
    for m, path in era5["metas"].items():
        sec = load_json(path)["seconds"]
        assert value(tidy, m, "seconds_adaptation") == sec["train"] + sec["calibrate"]
        adaptation = sec["train"] + sec["calibrate"]
        assert value(tidy, m, "adaptation_over_sa_calibration") == pytest.approx(adaptation / 2.0)
        assert value(tidy, m, "seconds_total") == pytest.approx(E.total_seconds(path))
    _, again = E.build_table("climax_cost", metas=list(era5["metas"].values()))
    pd.testing.assert_frame_equal(again, tidy)
    md = R.to_markdown(tidy, E.CLIMAX_COST)
    assert "SA (nu=4)" in md


def test_every_figure_writes_png_and_pdf(era5, tmp_path):
    out = tmp_path
    m, sp, me, sm = era5["metrics"], era5["spatial"], era5["metas"], era5["samples"]
    calls = {
        "pit": lambda b: E.pit_combined(m, out_base=b, marker=MARKER),
        "cost": lambda b: E.cost_figure(me, out_base=b, marker=MARKER),
        "sharp95": lambda b: E.sharpness_figure(sm, m, 0.95, out_base=b, marker=MARKER),
        "sharp25": lambda b: E.sharpness_figure(sm, m, 25, out_base=b, marker=MARKER),
        "sharp_levels": lambda b: E.sharpness_figure(sm, m, [25, 50, 75], out_base=b, marker=MARKER),
        "latency": lambda b: E.latency_figure(era5["an"], out_base=b, marker=MARKER),
        "bo": lambda b: E.bo_sensitivity(era5["an"], out_base=b, marker=MARKER),
        "beta": lambda b: E.bo_beta_hist(era5["an"], out_base=b, marker=MARKER),
        "nu": lambda b: E.nu_ablation(era5["an"], out_base=b, marker=MARKER),
        "maps": lambda b: E.teaser_maps(sm["sa"], era5["pairs"], out_base=b, marker=MARKER, index=1),
        "axes": lambda b: E.teaser_axes(m, sp, me, out_base=b, marker=MARKER),
    }
    for name, call in calls.items():
        assert_figure_files(call(out / name), out / name)


def _stand_in_lines(fig):
    """Every line of text drawn on ``fig`` that speaks of the stand-in / caption."""
    from matplotlib.text import Text

    lines = [ln for t in fig.findobj(Text) for ln in t.get_text().splitlines()]
    return [ln for ln in lines if any(w in ln.lower() for w in ("stand-in", "caption", "aquaplanet", "era5"))]


def test_teaser_panels_carry_one_line_of_stand_in_text(era5, tmp_path, monkeypatch):
    """The composed teaser's panels (a) and (b) of a stand-in run: the one-line marker each, none of the long caption
    (which the rule puts in the report's caption and the .prov.json sidecar); composed, a single file."""
    from stochattn import figures as F

    figures, save = {}, E.save_figure

    def keep(fig, base):
        figures[Path(base).name] = fig
        return save(fig, base)

    monkeypatch.setattr(E, "save_figure", keep)
    m, sp, me, sm = era5["metrics"], era5["spatial"], era5["metas"], era5["samples"]
    maps = E.teaser_maps(sm["sa"], era5["pairs"], tmp_path / "maps", MARKER, index=1)[0]
    axes = E.teaser_axes(m, sp, me, tmp_path / "axes", marker=MARKER)[0]
    for name, fig in figures.items():
        assert _stand_in_lines(fig) == [MARKER], name
    teaser = tmp_path / "teaser"
    assert_figure_files(F.compose_panels([[maps], [axes]], teaser, title="Useful uncertainty is multi-dimensional"),
                        teaser)  # fmt: skip
    # the paper's setting: no marker, nothing of the kind drawn
    figures.clear()
    E.teaser_axes(m, sp, me, tmp_path / "axes_paper")
    assert _stand_in_lines(figures["axes_paper"]) == []


def test_teaser_maps_refuses_samples_of_another_file(era5, tmp_path):
    with pytest.raises(ValueError, match="index 7"):
        E.teaser_maps(era5["samples"]["sa"], era5["pairs"], tmp_path / "x", MARKER, index=7)
    other = tmp_path / "pairs.npz"
    prep = load_npz(era5["pairs"])
    save_npz(other, **dict(prep, y_test=prep["y_test"][::-1].copy()))
    with pytest.raises(ValueError, match="not the truth"):
        E.teaser_maps(era5["samples"]["sa"], other, tmp_path / "x", MARKER, index=0)


def test_tables_of_another_target_name_its_label_and_units(era5):
    """A T850 case: the row label names the target and lead, every description its units (K), none the paper's
    Z500 or m^2 s^-2; the paper's own target keeps the paper's text."""
    for spec in E.ERA5_TABLE_SPECS.values():
        t850 = E.for_target(spec, "T850", "K")
        for text in (t850.description, t850.latex_description):
            assert "Z500" not in text and "Z_{500}" not in text and "m^2 s^-2" not in text and "m$^2$" not in text
        assert E.for_target(spec) is spec
    assert "(K)" in E.for_target(E.CLIMAX_SUMMARY, "T850", "K").description
    assert r"kg\,kg$^{-1}$" in E.for_target(E.CLIMAX_SUMMARY, "Q700", "kg kg^-1").latex_description
    spec, tidy = E.build_table("climax_summary", metrics=[era5["metrics"][m] for m in SPREADS],
                               spatial=[era5["spatial"][m] for m in SPREADS], lead_hours=24, target="T850",
                               units="K")  # fmt: skip
    assert set(tidy["dataset"]) == {"T850 24 h"} and "(K)" in spec.description
    assert E.row_label() == E.ROW == "Z500 72 h"


def test_pooled_cases_table_has_one_row_per_case_and_unit_free_columns_only(era5):
    tidy = E.CLIMAX_SUMMARY_CASES.build({"Z500 72 h": runs_of(era5), "T850 24 h": runs_of(era5)})
    assert list(dict.fromkeys(tidy["dataset"])) == ["Z500 72 h", "T850 24 h"]
    assert set(tidy["metric"]) == {"acc_ensemble_mean", "w1_native", "w1_scaled", "coverage_95_native",
                                   "coverage_95_calibrated", "nu", "at_boundary"}  # fmt: skip
    one = E.CLIMAX_SUMMARY.build(runs_of(era5))
    for metric in ("w1_native", "coverage_95_native"):
        assert value(tidy[tidy["dataset"] == "T850 24 h"], "sa", metric) == value(one, "sa", metric)
