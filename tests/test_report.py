"""Tests for stochattn.report (shared table machinery) and stochattn.experiments.uci_tables (the UCI tables): tables
from per-run metrics.json files (tidy CSV, markdown, LaTeX)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stochattn import metrics as M
from stochattn import report as R
from stochattn.experiments import uci_tables as U
from stochattn.experiments.evaluate import evaluate
from stochattn.io import load_json, load_npz, save_json, save_npz, sha256_record

# scoringrules itself (the reference these tests score against), imported with its numba kernels cached on disk:
# a plain import compiles them again in every pytest worker (~4 CPU-s each)
sr = M._scoringrules()

LEVELS = (0.25, 0.5, 0.75, 0.95)
SECONDS = {  # (train, calibrate, predict) per method, fixed so the cost table has closed-form values
    "sa": (0.0, 2.0, 1.0),
    "sa_match": (0.0, 2.0, 1.2),  # the same (shared) calibration
    "mc_dropout": (0.0, 0.1, 1.5),
    "swag": (100.0, 0.5, 3.0),
    "multiswag": (1000.0, 0.5, 30.0),
    "hsa": (50.0, 0.5, 1.0),
    "ivon": (60.0, 0.5, 2.0),
}
NUS = {"sa": 16, "sa_match": 40}
METHODS = ("sa", "sa_match", "mc_dropout", "swag", "multiswag", "hsa", "ivon")  # the UCI columns, display order
SIX = ("sa", "mc_dropout", "swag", "multiswag", "hsa", "ivon")  # the paper's six columns
# the fake's SA rescalings: same point as SA, spread x SA's (sa_match and swag over-, mc_dropout under-dispersed)
RESCALED = {"sa_match": 1.5, "swag": 2.0, "mc_dropout": 0.5}


# --------------------------------------------------------------------------------------------------------------
# fake runs in the UCI contract's format (also imported by test_figures.py)
# --------------------------------------------------------------------------------------------------------------
def make_fake_uci(
    root: Path,
    datasets=("yacht", "energy"),
    n_splits: int = 3,
    methods=METHODS,
    *,
    spreads: dict | None = None,
    offsets: dict | None = None,
    n: int = 40,
    n_cal: int = 60,
    s: int = 19,
    seed: int = 0,
) -> dict:
    """Write ``root/<dataset>/split<k>/<method>/{samples.npz, meta.json, metrics.json}`` from a known Gaussian
    setup; metrics.json by the real :func:`stochattn.experiments.evaluate.evaluate` (SA the coverage reference).

    Per (dataset, split): truth ``y = mu + eps``, ``eps ~ N(0, 1)``; one standard normal draw ``z`` (S, n) shared
    by all methods, so method m's samples are ``point + spreads[m] * z`` (SA: spread 1, calibrated) and its widths
    are exact multiples of SA's. The point is ``mu + offsets[m]`` (default: 0.1 * index for methods other than SA
    and sa_match, so CRPS differs). Returns ``{(dataset, split, method): {"samples": path, "metrics": path}}``.
    """
    spreads = {m: 1.0 for m in methods} | (spreads or {})
    offsets = {m: 0.0 if m in ("sa", "sa_match") else 0.1 * i for i, m in enumerate(methods)} | (offsets or {})
    out = {}
    for di, dataset in enumerate(datasets):
        for k in range(n_splits):
            rng = np.random.default_rng([seed, di, k])
            scale = 1.0 + di  # data sets in different units
            mu, mu_cal = rng.normal(0.0, 3.0, n) * scale, rng.normal(0.0, 3.0, n_cal) * scale
            y = mu + rng.normal(0.0, scale, n)
            y_cal = mu_cal + rng.normal(0.0, scale, n_cal)
            z, z_cal = rng.normal(0.0, scale, (s, n)), rng.normal(0.0, scale, (s, n_cal))
            sigma_y = 3.0 * scale
            split_dir = root / dataset / f"split{k}"
            for method in methods:
                point, point_cal = mu + offsets[method] * scale, mu_cal + offsets[method] * scale
                run_dir = split_dir / method
                save_npz(run_dir / "samples.npz", y=y, point=point, samples=point + spreads[method] * z, cal_y=y_cal,
                         cal_point=point_cal, cal_samples=point_cal + spreads[method] * z_cal,
                         sigma_y=np.float64(sigma_y))
                train, calibrate, predict = SECONDS.get(method, (1.0, 1.0, 1.0))
                save_json(run_dir / "meta.json", {"method": method, "nu": NUS.get(method),
                                                  "seconds": {"train": train, "calibrate": calibrate,
                                                              "predict": predict},
                                                  "sha256": sha256_record(run_dir / "samples.npz")})
            for method in methods:
                run_dir = split_dir / method
                ref = split_dir / "sa" / "samples.npz" if "sa" in methods and method != "sa" else None
                evaluate(run_dir / "samples.npz", run_dir / "metrics.json", seed=100 + k, levels=LEVELS,
                         dataset=dataset, split=k, reference_path=ref)
                out[(dataset, k, method)] = {"samples": run_dir / "samples.npz",
                                             "metrics": run_dir / "metrics.json"}
    return out


def sa_score_quantile(samples_path: Path, level: float = 0.95) -> float:
    """The j-th smallest conformal score of SA's calibration entries, j = the number SA covers natively: every
    pure rescaling of SA (same point, any spread) matched to SA's calibration coverage has width = this x SA's."""
    d = load_npz(samples_path)
    lo, hi = M.central_interval(d["cal_samples"], level)
    resid = d["cal_y"] - d["cal_point"]
    scores = np.where(resid > 0, resid / (hi - d["cal_point"]), -resid / (d["cal_point"] - lo))
    j = int(np.sum((lo <= d["cal_y"]) & (d["cal_y"] <= hi)))
    return float(np.sort(scores)[j - 1])


def metrics_paths(files: dict) -> list[Path]:
    return [v["metrics"] for v in files.values()]


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    root = tmp_path_factory.mktemp("uci")
    files = make_fake_uci(root, spreads=RESCALED, offsets={m: 0.0 for m in RESCALED})
    runs = R.load_runs(metrics_paths(files), progress=False)
    return files, runs


def _get(tidy, dataset, method, metric):
    row = tidy[(tidy.dataset == dataset) & (tidy.method == method) & (tidy.metric == metric)]
    assert len(row) == 1, (dataset, method, metric)
    return row.iloc[0]


# --------------------------------------------------------------------------------------------------------------
# load_runs
# --------------------------------------------------------------------------------------------------------------
def test_load_runs_one_row_per_run(fake):
    files, runs = fake
    assert len(runs) == 2 * 3 * 7 and set(runs.method) == set(METHODS)
    assert not runs.duplicated(["dataset", "split", "method"]).any()
    # registry order (energy before yacht), METHODS order, then split
    assert list(runs["dataset"].unique()) == ["energy", "yacht"]
    assert list(runs.loc[runs.dataset == "yacht", "method"].unique()) == list(METHODS)
    row = runs[(runs.dataset == "yacht") & (runs.split == 1) & (runs.method == "swag")].iloc[0]
    rec = load_json(files[("yacht", 1, "swag")]["metrics"])
    np.testing.assert_array_equal(row["pit_native"], rec["pit_native"])
    assert row["scaled_width_95"] == rec["scaled"]["width_95"]
    assert row["seconds_train"] == 100.0 and row["temperature"] == rec["temperature"]
    for key in ("target_coverage_95", "factor_95", "coverage_95", "width_95", "width_25"):
        assert row[f"matched_{key}"] == rec["matched"][key]
    both = runs[(runs.dataset == "yacht") & (runs.split == 1)].set_index("method")["nu"]
    assert both["sa"] == NUS["sa"] and both["sa_match"] == NUS["sa_match"] and np.isnan(both["swag"])


def test_load_runs_infers_keys_from_path_and_rejects_bad_input(tmp_path, fake):
    files, _ = fake
    rec = load_json(files[("yacht", 0, "sa")]["metrics"])
    for key in ("dataset", "split", "method"):
        rec.pop(key)
    p = tmp_path / "concrete" / "split4" / "hsa" / "metrics.json"
    save_json(p, rec)
    runs = R.load_runs([p], progress=False)
    assert runs.loc[0, ["dataset", "split", "method"]].tolist() == ["concrete", 4, "hsa"]
    with pytest.raises(ValueError, match="duplicated"):
        R.load_runs([p, p], progress=False)
    with pytest.raises(FileNotFoundError, match="nope"):
        R.load_runs([tmp_path / "nope.json"], progress=False)
    with pytest.raises(TypeError, match="metrics_paths"):
        R.load_runs(str(p), progress=False)


# --------------------------------------------------------------------------------------------------------------
# master table
# --------------------------------------------------------------------------------------------------------------
def test_tidy_columns_exact(fake):
    _, runs = fake
    for tidy in (U.uci_master_table(runs), U.uci_crps_table(runs), U.uci_cost_table(runs)):
        assert list(tidy.columns) == ["dataset", "method", "metric", "value", "std", "n"]
        assert tidy["n"].dtype == np.int64
        assert not tidy.duplicated(["dataset", "method", "metric"]).any()


def test_pooled_w1_is_w1_of_concatenated_pit(fake):
    files, runs = fake
    tidy = U.uci_master_table(runs)
    for dataset in ("yacht", "energy"):
        for method in METHODS:
            pits = [load_json(files[(dataset, k, method)]["metrics"])["pit_native"] for k in range(3)]
            row = _get(tidy, dataset, method, "w1_native_pooled")
            assert row.value == M.w1_uniform(np.concatenate(pits))
            assert math.isnan(row["std"]) and row.n == 3
            per_split = [M.w1_uniform(p) for p in pits]
            row = _get(tidy, dataset, method, "w1_native_per_split")
            assert row.value == pytest.approx(np.mean(per_split), rel=1e-12)
            assert row["std"] == pytest.approx(np.std(per_split, ddof=1), rel=1e-12)
            floor, mean_z = _get(tidy, dataset, method, "w1_floor"), _get(tidy, dataset, method, "pit_mean_z")
            assert floor.value == M.w1_null_floor(sum(len(p) for p in pits))
            assert mean_z.value == M.pit_mean_z(np.concatenate(pits))[1]
            # the point's bias: the test residuals of every split concatenated (each in its sigma_y units), from
            # the metrics files' moments alone
            res = []
            for k in range(3):
                z = load_npz(files[(dataset, k, method)]["samples"])
                res.append((z["y"] - z["point"]) / float(z["sigma_y"]))
            res = np.concatenate(res)
            bias, bias_z = _get(tidy, dataset, method, "point_bias"), _get(tidy, dataset, method, "point_bias_z")
            assert bias.value == pytest.approx(res.mean(), rel=1e-12, abs=1e-15)
            assert bias_z.value == pytest.approx(res.mean() / (res.std(ddof=1) / math.sqrt(res.size)), rel=1e-9)
    # pooling is not averaging: per-split W1 of 40 points carries a larger finite-sample floor
    sa_pooled = _get(tidy, "yacht", "sa", "w1_native_pooled").value
    assert sa_pooled != _get(tidy, "yacht", "sa", "w1_native_per_split").value


def test_panel_b_is_the_temperature_scaled_width_over_sa_as_the_paper(fake):
    """Panel B (the paper's): every method but SA rescaled around its point by its fitted temperature T, so its
    interval widths are T x its native ones, over SA's mean native width. The fake's rescaled methods are the same
    ensemble as SA times a known spread c (0.5, 1.5, 2): T ~ 1/c up to the fit, so T x c and the ratio agree
    across them; the achieved test coverage beside it is the scaled one."""
    files, runs = fake
    tidy = U.uci_master_table(runs)
    for dataset in ("yacht", "energy"):
        sa_runs = runs[(runs.dataset == dataset) & (runs.method == "sa")].sort_values("split")
        sa_width = sa_runs["native_width_95"].to_numpy()
        assert _get(tidy, dataset, "sa", "pi95_width_ratio").value == 1.0
        ratios, products = {}, {}
        for method in RESCALED:
            m = runs[(runs.dataset == dataset) & (runs.method == method)].sort_values("split")
            t = m["temperature"].to_numpy()
            np.testing.assert_allclose(m["scaled_width_95"], t * m["native_width_95"], rtol=1e-9)
            products[method] = t * RESCALED[method]  # the temperature undoes the known spread, split by split
            expected = np.mean(t * m["native_width_95"].to_numpy()) / np.mean(sa_width)
            row = _get(tidy, dataset, method, "pi95_width_ratio")
            assert row.value == pytest.approx(expected, rel=1e-12), method
            per_split = t * m["native_width_95"].to_numpy() / sa_width
            assert row["std"] == pytest.approx(np.std(per_split, ddof=1), rel=1e-9)
            cover = _get(tidy, dataset, method, "pi95_coverage").value
            assert cover == pytest.approx(m["scaled_coverage_95"].mean(), rel=1e-12)
            ratios[method] = row.value
        # the same ensemble at three known spreads: temperature scaling undoes the spread exactly
        for method in RESCALED:
            np.testing.assert_allclose(products[method], products["swag"], rtol=1e-5)
            assert ratios[method] == pytest.approx(ratios["swag"], rel=1e-5)
        assert ratios != {k: _get(tidy, dataset, k, "pi95_width_ratio_matched").value for k in ratios}


def test_matched_panel_is_conformal_width_over_sa_with_test_coverage(fake):
    """The extra table uci_matched: Panel B with every method but SA conformally matched to SA's coverage."""
    files, runs = fake
    tidy = U.uci_master_table(runs)
    for dataset in ("yacht", "energy"):
        sa = _get(tidy, dataset, "sa", "pi95_width_ratio_matched")
        assert sa.value == 1.0 and sa["std"] == 0.0
        sa_runs = runs[(runs.dataset == dataset) & (runs.method == "sa")]
        sa_width = sa_runs["native_width_95"].to_numpy()
        # SA rescaled by any spread, same point: matched to SA's calibration coverage every one has the same
        # width, s_(j) x SA's (s_(j): the j-th smallest SA calibration score, j = the entries SA covers)
        q = np.array([sa_score_quantile(files[(dataset, k, "sa")]["samples"]) for k in range(3)])
        expected = np.mean(q * sa_width) / np.mean(sa_width)
        for method in RESCALED:
            row = _get(tidy, dataset, method, "pi95_width_ratio_matched")
            assert row.value == pytest.approx(expected, rel=1e-9), method
            assert row["std"] == pytest.approx(np.std(q, ddof=1), rel=1e-6)
            m = runs[(runs.dataset == dataset) & (runs.method == method)]
            # no ties: the calibration coverage equals SA's exactly
            np.testing.assert_allclose(m["matched_cal_coverage_95"], m["matched_target_coverage_95"], atol=1e-12)
            sa_cal = [M.coverage_and_width(d["cal_samples"], d["cal_y"], (0.95,))[0.95]["coverage"]
                      for d in (load_npz(files[(dataset, k, "sa")]["samples"]) for k in range(3))]
            np.testing.assert_array_equal(m["matched_target_coverage_95"], sa_cal)
        for method in METHODS:
            m = runs[(runs.dataset == dataset) & (runs.method == method)]
            row = _get(tidy, dataset, method, "pi95_coverage_matched")  # achieved TEST coverage beside the width
            col = "native_coverage_95" if method == "sa" else "matched_coverage_95"
            assert row.value == pytest.approx(m[col].mean(), rel=1e-12) and row.n == 3
            if method != "sa":  # within 1/n_cal of the target on the calibration part
                gap = m["matched_cal_coverage_95"] - m["matched_target_coverage_95"]
                assert ((gap >= -1e-12) & (gap < 1 / 60)).all(), (method, gap)
            ratio = m["matched_width_95" if method != "sa" else "native_width_95"].mean() / sa_width.mean()
            assert _get(tidy, dataset, method, "pi95_width_ratio_matched").value == pytest.approx(ratio, rel=1e-12)
            for level in ("25", "50", "75"):  # the other levels as audit rows
                assert math.isfinite(_get(tidy, dataset, method, f"pi{level}_coverage_matched").value)


def test_sa_is_reported_native_whatever_its_scaled_block(fake):
    _, runs = fake
    tampered = runs.copy()
    is_sa = tampered.method == "sa"
    tampered.loc[is_sa, "scaled_width_95"] *= 3.0
    tampered.loc[is_sa, "scaled_coverage_95"] = 0.0
    tampered.loc[is_sa, "matched_width_95"] *= 5.0
    tampered.loc[is_sa, "matched_coverage_95"] = 0.0
    a, b = U.uci_master_table(runs), U.uci_master_table(tampered)
    pd.testing.assert_frame_equal(a, b)
    assert _get(b, "yacht", "sa", "coverage_95_scaled").value == _get(b, "yacht", "sa", "coverage_95_native").value


def test_rmse_and_coverage_rows(fake):
    files, runs = fake
    tidy = U.uci_master_table(runs)
    acc = tidy[tidy.metric == "rmse_over_sigma"]
    assert set(acc.method) == {"sa"} and len(acc) == 2
    nrmse = [load_json(files[("energy", k, "sa")]["metrics"])["native"]["nrmse"] for k in range(3)]
    row = _get(tidy, "energy", "sa", "rmse_over_sigma")
    assert row.value == pytest.approx(np.mean(nrmse), rel=1e-12)
    assert row["std"] == pytest.approx(np.std(nrmse, ddof=1), rel=1e-12)
    for method in METHODS:
        for block in ("native", "scaled"):
            cov = [load_json(files[("yacht", k, method)]["metrics"])[block]["coverage_95"] for k in range(3)]
            if method == "sa":
                cov = [load_json(files[("yacht", k, "sa")]["metrics"])["native"]["coverage_95"] for k in range(3)]
            assert _get(tidy, "yacht", method, f"coverage_95_{block}").value == pytest.approx(np.mean(cov))
    # mc_dropout is SA at half the spread: its unbiased temperature is ~2 and scaling raises its coverage
    temp = _get(tidy, "yacht", "mc_dropout", "temperature")
    assert temp.value == pytest.approx(2.0, rel=0.25)
    assert (_get(tidy, "yacht", "mc_dropout", "coverage_95_scaled").value
            > _get(tidy, "yacht", "mc_dropout", "coverage_95_native").value)


# --------------------------------------------------------------------------------------------------------------
# CRPS and cost
# --------------------------------------------------------------------------------------------------------------
def test_crps_mean_std_match_numpy(fake):
    files, runs = fake
    tidy = U.uci_crps_table(runs)
    assert set(tidy.metric) == {"crps", "crps_fair"} and len(tidy) == 2 * 2 * len(METHODS)
    for dataset in ("yacht", "energy"):
        for method in METHODS:
            vals = np.array([load_json(files[(dataset, k, method)]["metrics"])["native"]["crps"] for k in range(3)])
            row = _get(tidy, dataset, method, "crps")
            assert row.value == pytest.approx(vals.mean(), rel=1e-12)
            assert row["std"] == pytest.approx(vals.std(ddof=1), rel=1e-12)
            assert row.n == 3
            # the fair estimator (beyond the paper) against scoringrules' on the run's own samples
            fair = [float(sr.crps_ensemble(d["y"], d["samples"], m_axis=0, estimator="fair", backend="numpy").mean())
                    for d in (load_npz(files[(dataset, k, method)]["samples"]) for k in range(3))]
            row = _get(tidy, dataset, method, "crps_fair")
            assert row.value == pytest.approx(np.mean(fair), rel=1e-10) and row.n == 3
            assert row.value < _get(tidy, dataset, method, "crps").value  # the ensemble estimator is biased up


def test_cost_table_closed_form(fake):
    _, runs = fake
    tidy = U.uci_cost_table(runs)
    for method, (train, cal, pred) in SECONDS.items():
        assert _get(tidy, "yacht", method, "seconds_total").value == pytest.approx(train + cal + pred)
        assert _get(tidy, "yacht", method, "seconds_train").value == pytest.approx(train)
        ratio = _get(tidy, "yacht", method, "adaptation_over_sa_calibration").value
        assert ratio == pytest.approx((train + cal) / SECONDS["sa"][1])
    assert _get(tidy, "yacht", "sa", "adaptation_over_sa_calibration").value == 1.0
    # both operating points' nu, and only theirs
    nu = tidy[tidy.metric == "nu"]
    assert set(nu.method) == {"sa", "sa_match"}
    for method, value in NUS.items():
        assert _get(tidy, "yacht", method, "nu").value == value


def test_single_split_std_is_nan(tmp_path):
    files = make_fake_uci(tmp_path, datasets=("yacht",), n_splits=1, methods=("sa", "hsa"))
    runs = R.load_runs(metrics_paths(files), progress=False)
    tidy = U.uci_crps_table(runs)
    assert tidy["std"].isna().all() and (tidy["n"] == 1).all()
    for text in (R.to_markdown(tidy, U.CRPS_TABLE, CAPTION), R.to_latex(tidy, U.CRPS_TABLE, CAPTION)):
        row = [line for line in text.splitlines() if line.lstrip("| ").startswith("Yacht")]
        assert len(row) == 1 and "nan" not in row[0] and "±" not in row[0] and "pm" not in row[0]  # the mean alone


# --------------------------------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------------------------------
CAPTION = "quick config: 1 block, d=64, 3 splits, capped epochs; protein/naval subsampled"


@pytest.mark.parametrize("spec", [U.MASTER_TABLE, U.CRPS_TABLE, U.COST_TABLE, U.COVERAGE_TABLE], ids=lambda s: s.name)
def test_renderings_contain_datasets_methods_caption(fake, spec):
    _, runs = fake
    tidy = spec.build(runs)
    md = R.to_markdown(tidy, spec, CAPTION)
    tex = R.to_latex(tidy, spec, CAPTION)
    kind = spec.name
    short = kind != "crps"
    for text in (md, tex):
        assert CAPTION in text
        for name in ("Yacht", "Energy"):
            assert name in text
        for method in METHODS:
            assert R.method_label(method, short=short) in text
    # markdown: header + separator + one line per data set
    table_lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(table_lines) == 2 + 2
    header_lines = 2  # a group row (the panels; CRPS: the two estimators) and a method row
    assert sum(ln.rstrip().endswith("\\\\") for ln in tex.splitlines()) == header_lines + 2
    assert r"\begin{tabular}" in tex and r"\end{table*}" in tex


def _master_tidy():
    w1 = {"yacht": [0.021, 0.038, 0.037, 0.070, 0.061, 0.103], "naval": [0.022, 0.020, 0.053, 0.028, 0.073, 0.183]}
    ratio = {"yacht": [1.0, 1.301, 1.535, 1.308, 1.913, 1.471], "naval": [1.0, 1.328, 3.378, 3.018, 0.451, 2.158]}
    rows = []
    for ds in ("yacht", "naval"):
        rows.append((ds, "sa", "rmse_over_sigma", 0.05, 0.01, 20))
        rows.append((ds, "sa", "w1_floor", 0.0126, math.nan, 20))
        rows.append((ds, "sa", "pi95_coverage_calibrated", 0.8679, 0.0, 20))
        for m, w, r in zip(SIX, w1[ds], ratio[ds]):
            rows.append((ds, m, "w1_native_pooled", w, math.nan, 20))
            rows.append((ds, m, "pi95_width_ratio", r, 0.1, 20))
            rows.append((ds, m, "pi95_coverage", 0.7 + 0.001 * len(rows), 0.02, 20))
    return pd.DataFrame(rows, columns=list(R.TIDY_COLUMNS))


def _md_row(md, label):
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {label} "))
    return [c.strip() for c in line.strip("|").split("|")]


def test_master_bold_lowest_w1_and_ratio_per_row():
    tidy = _master_tidy()
    md = R.to_markdown(tidy, U.MASTER_TABLE, "cap")
    yacht, naval = _md_row(md, "Yacht"), _md_row(md, "Naval")
    # cells: Dataset, Acc, 6 x W1, the W1 floor, 6 x ratio, 6 x test coverage and the calibrated coverage beside
    # them (never bold)
    assert len(yacht) == 22 and not any(c.startswith("**") for c in yacht[15:] + naval[15:])
    assert yacht[1] == "0.050"  # Acc never bold
    assert yacht[8] == "0.013"  # the calibrated floor beside Panel A, never bold
    assert yacht[21] == "0.868"  # the calibrated coverage beside Cov., never bold
    assert [c.startswith("**") for c in yacht[2:8]] == [True, False, False, False, False, False]
    assert [c.startswith("**") for c in yacht[9:15]] == [True, False, False, False, False, False]
    assert [c.startswith("**") for c in naval[2:8]] == [False, True, False, False, False, False]
    assert [c.startswith("**") for c in naval[9:15]] == [False, False, False, False, True, False]
    assert naval[3] == "**0.020**" and naval[13] == "**0.451**"
    tex = R.to_latex(tidy, U.MASTER_TABLE, "cap")
    naval_tex = next(ln for ln in tex.splitlines() if ln.startswith("Naval"))
    assert naval_tex.count(r"\textbf") == 2
    assert r"\textbf{0.020}" in naval_tex and r"\textbf{0.451}" in naval_tex
    assert "Naval & 0.050 &  & 0.022" in naval_tex  # spacer column after Acc, as in the paper


def test_crps_bold_two_best_per_row_and_pm():
    vals = {"concrete": [3.176, 3.083, 3.181, 2.993, 3.920, 3.925], "naval": [0.0015, 0.0017, 0.0045, 0.0040,
                                                                             0.0006, 0.0029]}
    rows = [(ds, m, "crps", v, 0.3 * v, 20) for ds in vals for m, v in zip(SIX, vals[ds])]
    tidy = pd.DataFrame(rows, columns=list(R.TIDY_COLUMNS))
    md = R.to_markdown(tidy, U.CRPS_TABLE, "cap")
    concrete, naval = _md_row(md, "Concrete"), _md_row(md, "Naval")
    assert [c.startswith("**") for c in concrete[1:]] == [False, True, False, True, False, False]
    assert [c.startswith("**") for c in naval[1:]] == [True, False, False, False, True, False]
    assert concrete[2] == "**3.083±0.925**"
    assert naval[1] == "**0.0015±0.0004**"  # 4 decimals so the smallest value keeps 2 significant digits
    tex = R.to_latex(tidy, U.CRPS_TABLE, "cap")
    line = next(ln for ln in tex.splitlines() if ln.startswith("Concrete"))
    assert line.count(r"\mathbf") == 2 and r"$\mathbf{3.083{\pm}0.925}$" in line and r"$3.176{\pm}0.953$" in line


def test_bold_ties_on_displayed_values():
    rows = [("yacht", m, "crps", v, 0.0, 3) for m, v in zip(SIX, [0.5, 0.3001, 0.3004, 0.9, 0.8, 0.7])]
    md = R.to_markdown(pd.DataFrame(rows, columns=list(R.TIDY_COLUMNS)), U.CRPS_TABLE)
    # 0.3001 and 0.3004 both show as 0.300: the two best are a tie; 0.5 is third
    assert [c.startswith("**") for c in _md_row(md, "Yacht")[1:]] == [False, True, True, False, False, False]


def test_latex_escapes_caption_and_missing_cells():
    tidy = _master_tidy()
    tidy = tidy[~((tidy.dataset == "naval") & (tidy.method == "ivon"))]
    tex = R.to_latex(tidy, U.MASTER_TABLE, "50% of rows & d_block=64")
    assert r"50\% of rows \& d\_block=64" in tex
    naval = next(ln for ln in tex.splitlines() if ln.startswith("Naval"))
    assert naval.count("--") == 3  # W1, ratio and coverage of the missing run
    md = R.to_markdown(tidy, U.MASTER_TABLE, "c")
    assert _md_row(md, "Naval").count("–") == 3
    with pytest.raises(TypeError, match="TableSpec"):
        R.to_markdown(tidy, "master")
    with pytest.raises(TypeError, match="caption"):
        R.to_latex(tidy, U.MASTER_TABLE, 3)


def test_write_table_files_and_provenance(tmp_path, fake):
    files, runs = fake
    tidy = U.uci_crps_table(runs)
    inputs = metrics_paths(files)[:3]
    written = R.write_table(tidy, tmp_path / "tables" / "uci_crps", CAPTION,
                            {"rule": "uci_tables", "inputs": inputs, "config_subset": {"splits": 3},
                             "seeds": [0]}, spec=U.CRPS_TABLE)
    names = [p.name for p in written]
    assert names == ["uci_crps.csv", "uci_crps.md", "uci_crps.tex", "uci_crps.csv.prov.json",
                     "uci_crps.md.prov.json", "uci_crps.tex.prov.json"]
    assert all(p.stat().st_size > 0 for p in written)
    back = pd.read_csv(written[0])
    assert list(back.columns) == list(R.TIDY_COLUMNS)
    np.testing.assert_allclose(back["value"], tidy["value"], rtol=1e-15)
    assert CAPTION in written[1].read_text() and CAPTION in written[2].read_text()
    prov = json.loads(written[3].read_text())
    assert prov["rule"] == "uci_tables" and prov["extra"]["table_kind"] == "crps"
    assert [Path(o["path"]).name for o in prov["outputs"]] == names[:3]
    assert all("sha256" in o for o in prov["outputs"])
    assert not [p for p in (tmp_path / "tables").iterdir() if p.name.startswith(".")]  # no temp files left
    with pytest.raises(ValueError, match="columns"):
        R.write_table(tidy.rename(columns={"std": "sd"}), tmp_path / "x", "c", {"rule": "r"}, spec=U.CRPS_TABLE)
    with pytest.raises(ValueError, match="provenance_kwargs lacks"):
        R.write_table(tidy, tmp_path / "y", "c", {"rule": "r"}, spec=U.CRPS_TABLE)
    assert not list(tmp_path.glob("y.*"))  # nothing written before the provenance arguments are checked


def test_unknown_dataset_and_method_keep_their_names():
    rows = [("sinusoid", "sa", "crps", 1.0, 0.1, 2), ("sinusoid", "deep_ensemble", "crps", 2.0, 0.1, 2)]
    md = R.to_markdown(pd.DataFrame(rows, columns=list(R.TIDY_COLUMNS)), U.CRPS_TABLE, "toy")
    assert "sinusoid" in md and "deep_ensemble" in md
    assert re.search(r"\| SA \| deep_ensemble \|", md)


def test_both_sa_operating_points_in_every_table_and_the_descriptions_say_which_is_which(tmp_path, fake):
    files, runs = fake
    prov = {"rule": "uci_table", "inputs": metrics_paths(files)[:2], "config_subset": {}, "seeds": [0]}
    for kind in ("master", "crps", "cost"):
        spec = U.UCI_TABLE_SPECS[kind]
        written = R.write_table(spec.build(runs), tmp_path / f"uci_{kind}", "cap", prov, spec=spec)
        back = pd.read_csv(written[0])
        headline = {"master": "pi95_width_ratio", "crps": "crps", "cost": "nu"}[kind]
        for method in ("sa", "sa_match"):
            assert len(back[(back.method == method) & (back.metric == headline) & (back.dataset == "yacht")]) == 1
        md, tex = written[1].read_text(), written[2].read_text()
        assert "Algorithm" in md and "scale-match" in md and "Algorithm~2" in tex
    md = (tmp_path / "uci_master.md").read_text()
    assert "temperature-scaled" in md and "calibration split" in md and "Cov. SA-sm" in md
    assert "PI95/SA SA-sm" in md and "W1 SA-sm" in md
    back = pd.read_csv(tmp_path / "uci_master.csv")
    assert {"pi95_coverage", "matched_factor_95", "matched_target_coverage_95"} <= set(back.metric)


# --------------------------------------------------------------------------------------------------------------
# shared machinery: registries, an experiment's own TableSpec, code versions of the table rules
# --------------------------------------------------------------------------------------------------------------
def test_label_and_order_registries_cover_other_experiments():
    assert R.method_label("contextual_dropout") == "Contextual Dropout"
    assert R.method_label("contextual_dropout", short=True) == "CD"
    assert R.method_label("deep_ensemble", short=True) == "deep_ensemble"
    assert [R.dataset_label(d) for d in ("ETTh1", "ETTh2", "ETTm1", "ETTm2")] == ["ETTh1", "ETTh2", "ETTm1", "ETTm2"]
    assert R.dataset_order(["zzz", "ETTm2", "yacht", "ETTh1"]) == ["yacht", "ETTh1", "ETTm2", "zzz"]
    assert R.method_order(["ivon", "contextual_dropout", "sa", "zzz"]) == ["sa", "contextual_dropout", "ivon", "zzz"]


ETT_LIKE = R.TableSpec(
    name="forecast",
    label="tab:ett_forecast",
    groups=(
        R.ColumnGroup("crps", "CRPS", r"\textbf{CRPS}", fmt="adaptive", show_std=True, bold=1),
        R.ColumnGroup("coverage_90", "Cov90", r"\textbf{PI-90 coverage}", best="target", target=0.9, bold=1),
        R.ColumnGroup("skill", "Skill", r"\textbf{Skill}", methods=("sa",), header="Skill (SA)",
                      latex_header="Skill", best="max", bold=1, decimals=1),
    ),
    description="A test table.",
    latex_description=r"A \emph{test} table.",
)


def _ett_tidy():
    rows = []
    for ds in ("ETTm2", "ETTh1"):  # out of registry order on purpose
        for m, crps, cov in (("contextual_dropout", 0.31, 0.84), ("sa", 0.30, 0.93), ("mc_dropout", 0.52, 0.97)):
            rows.append((ds, m, "crps", crps, 0.01, 3))
            rows.append((ds, m, "coverage_90", cov, 0.01, 3))
        rows.append((ds, "sa", "skill", 0.25, 0.01, 3))
    return pd.DataFrame(rows, columns=list(R.TIDY_COLUMNS))


def test_an_experiment_declares_its_own_table(tmp_path):
    md = R.to_markdown(_ett_tidy(), ETT_LIKE, "cfg")
    assert md.startswith("Table: A test table. cfg\n")
    header = _md_row(md, "Dataset")
    assert header[1:4] == ["CRPS SA", "CRPS MC", "CRPS CD"]  # METHOD_LABELS order, short labels
    assert header[-1] == "Skill (SA)"
    assert [ln.split("|")[1].strip() for ln in md.splitlines()[4:]] == ["ETTh1", "ETTm2"]
    row = _md_row(md, "ETTh1")
    # lowest CRPS; coverage closest to 0.9 (0.93 beats 0.84 and 0.97); the one skill cell is the best
    assert row[1:] == ["**0.300±0.010**", "0.520±0.010", "0.310±0.010", "**0.930**", "0.970", "0.840", "**0.2**"]
    tex = R.to_latex(_ett_tidy(), ETT_LIKE, "cfg")
    assert r"\label{tab:ett_forecast}" in tex and r"A \emph{test} table. cfg" in tex and r"\resizebox{" not in tex
    assert r"\multicolumn{3}{c}{\textbf{CRPS}}" in tex and "& Skill \\\\" in tex
    line = next(ln for ln in tex.splitlines() if ln.startswith("ETTh1"))
    assert r"$\mathbf{0.300{\pm}0.010}$" in line and r"\textbf{0.930}" in line and r"\textbf{0.2}" in line
    written = R.write_table(_ett_tidy(), tmp_path / "ett_forecast", "cfg",
                            {"rule": "ett_table", "inputs": [], "config_subset": {}, "seeds": [0]}, spec=ETT_LIKE)
    assert json.loads(written[3].read_text())["extra"]["table_kind"] == "forecast"
    with pytest.raises(ValueError, match="none of the metrics"):
        R.to_markdown(_ett_tidy()[lambda t: t.metric == "skill"], U.CRPS_TABLE)


def test_column_group_rejects_bad_options():
    with pytest.raises(ValueError, match="fmt"):
        R.ColumnGroup("crps", "CRPS", "CRPS", fmt="pretty")
    with pytest.raises(ValueError, match="target"):
        R.ColumnGroup("cov", "Cov", "Cov", best="target", bold=1)
    with pytest.raises(ValueError, match="best"):
        R.ColumnGroup("cov", "Cov", "Cov", best="median")


def test_table_rule_entries_resolve_and_hash_their_own_table_only():
    from pkgutil import resolve_name

    from stochattn.provenance import code_closure

    for name, spec in U.UCI_TABLE_SPECS.items():  # params.table of rule uci_table
        assert resolve_name(f"stochattn.experiments.uci_tables:{name.upper()}_TABLE") is spec
    entries = ["stochattn.report:load_runs", "stochattn.report:write_table"]
    master = code_closure([*entries, "stochattn.experiments.uci_tables:MASTER_TABLE"])
    crps = code_closure([*entries, "stochattn.experiments.uci_tables:CRPS_TABLE"])
    for key in ("stochattn.experiments.uci_tables:uci_master_table",
                "stochattn.experiments.uci_tables:_width_ratio_rows", "stochattn.report:TableSpec",
                "stochattn.report:ColumnGroup", "stochattn.report:_cells",
                "stochattn.report:mean_row", "stochattn.report:METHOD_LABELS", "stochattn.report:to_latex"):
        assert key in master, key
    assert "stochattn.experiments.uci_tables:uci_crps_table" not in master
    assert "stochattn.experiments.uci_tables:uci_crps_table" in crps
    assert "stochattn.experiments.uci_tables:uci_master_table" not in crps


def test_sa_rows_name_their_nu_and_the_boundary():
    """A one-data-set table (rows = methods) labels each method with a recorded nu as the paper does ("SA (nu=4)"),
    and marks a calibration that ended at nu = 1 wanting more dispersion ("SA (nu=1, boundary)")."""
    spec = R.TableSpec(name="t", groups=(R.ColumnGroup(metric="crps", title="CRPS", latex_title="CRPS"),),
                       description="", latex_description="", label="tab:t", rows="methods")  # fmt: skip
    rows = [R.mean_row("Z500", m, "crps", [v]) for m, v in (("sa", 1.0), ("sa_match", 1.1), ("swag", 2.0))]
    rows += [R.mean_row("Z500", "sa", "nu", [1.0]), R.mean_row("Z500", "sa", "at_boundary", [1.0]),
             R.mean_row("Z500", "sa_match", "nu", [4.0]), R.mean_row("Z500", "sa_match", "at_boundary", [0.0])]
    md = R.to_markdown(R.tidy_frame(rows), spec)
    labels = [ln.split("|")[1].strip() for ln in md.splitlines() if ln.startswith("|")][2:]
    assert labels == ["SA (nu=1, boundary)", "SA (scale-match) (nu=4)", "SWAG"]
    assert R.nu_label("SA", float("nan")) == "SA"


def test_nu_columns_mark_the_boundary_by_the_fraction_of_splits(tmp_path):
    """A nu column (rows = data sets) prints "1 (boundary)" where every split's calibration ended at nu = 1
    wanting more dispersion, the share of splits where only some did, nothing otherwise; the cost table carries
    the fraction from the runs' metrics.json (at_boundary), and LaTeX escapes the marker."""
    files = make_fake_uci(tmp_path, datasets=("yacht", "energy"), n_splits=2, methods=("sa", "sa_match", "swag"))
    flags = {("yacht", 0): True, ("yacht", 1): True, ("energy", 0): True, ("energy", 1): False}
    for (dataset, split, method), f in files.items():
        if method == "sa":
            rec = load_json(f["metrics"])
            rec["nu"], rec["at_boundary"] = 1.0, flags[(dataset, split)]
            save_json(f["metrics"], rec)
    tidy = U.uci_cost_table(R.load_runs(metrics_paths(files), progress=False))
    assert _get(tidy, "yacht", "sa", "at_boundary").value == 1.0
    assert _get(tidy, "energy", "sa", "at_boundary").value == 0.5
    md = R.to_markdown(tidy, U.COST_TABLE)
    row = {ln.split("|")[1].strip(): ln for ln in md.splitlines() if ln.startswith("| ")}
    assert "| 1 (boundary) |" in row["Yacht"] and "| 1 (boundary on 50% of splits) |" in row["Energy"]
    assert "boundary" not in row["Yacht"].replace("1 (boundary)", "")  # SA-sm's nu (40) carries no marker
    tex = R.to_latex(tidy, U.COST_TABLE)
    assert r"1 (boundary on 50\% of splits)" in tex


def test_cost_rows_adaptation_is_train_plus_calibrate_over_sas_bo():
    """A foundation-model cost row: adaptation = the method's own train + calibrate seconds (SA: its BO alone),
    the ratio to SA's BO seconds, and the total of every recorded part."""
    swag = R.cost_rows("ETTh1 H=96", "swag", {"train": 30.0, "calibrate": 0.5, "predict": 2.0,
                                              "backbone_train": 5.0}, sa_calibrate=2.5)  # fmt: skip
    sa = R.cost_rows("ETTh1 H=96", "sa", {"train": 0.0, "calibrate": 2.5, "predict": 1.0}, sa_calibrate=2.5)
    look = {(r["method"], r["metric"]): r["value"] for r in swag + sa}
    assert look[("swag", "seconds_adaptation")] == 30.5 and look[("swag", "seconds_total")] == 37.5
    assert look[("swag", "adaptation_over_sa_calibration")] == pytest.approx(30.5 / 2.5)
    assert look[("sa", "adaptation_over_sa_calibration")] == 1.0 and look[("sa", "seconds_adaptation")] == 2.5
    nan = R.cost_rows("x", "swag", {"train": 1.0}, sa_calibrate=float("nan"))
    assert math.isnan(nan[2]["value"])
