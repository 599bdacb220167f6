"""Tables of the paper's UCI results (paper Tables ``tab:uci_master``, ``tab:uci_crps`` and the cost comparison):
the tidy-table builders and their :class:`stochattn.report.TableSpec` layouts.

    uci_master_table   tidy rows for the master table (Acc, Panel A native pooled-PIT W1, Panel B PI-95 ratio)
    uci_crps_table     tidy rows for the CRPS table (mean and std over splits)
    uci_cost_table     tidy rows of wall-clock seconds per method and the adaptation-cost ratio to SA
    MASTER_TABLE, MATCHED_TABLE, CRPS_TABLE, COST_TABLE, COVERAGE_TABLE   their layouts (MATCHED_TABLE: Panel B
                       conformally matched to SA's coverage, beyond the paper) (COVERAGE_TABLE: another view of the
                       master table's tidy rows); UCI_TABLE_SPECS maps each ``name`` to its spec

The workflow (rule ``uci_table``) runs ``load_runs -> spec.build -> write_table(spec=spec)`` for
``stochattn.experiments.uci_tables:<TABLE>_TABLE``.

Conventions chosen here (the contract leaves them open):
    * Pooled-PIT W1 (``w1_native_pooled``) is one number per (dataset, method): ``std`` is NaN there. The spread
      over splits of the per-split W1 is given by the separate audit metric ``w1_native_per_split``.
    * ``pi95_width_ratio`` (Panel B, the paper's) is a ratio of means (mean over splits of the method's
      temperature-scaled test width / mean over splits of SA's native width); its ``std`` is the std over the
      splits both methods share of the per-split ratio. Temperature-scaled: every method but SA rescaled by the
      factor T fitted on the calibration part (``metrics.json["scaled"]``, stochattn.scaling.fit_temperature), as
      the paper post-scales its UCI baselines.
    * ``pi95_width_ratio_matched`` (beyond the paper, table ``uci_matched``): the same ratio with every method but
      SA rescaled instead by a split-conformal factor fitted on the calibration part to SA's empirical coverage
      there (``metrics.json["matched"]``, stochattn.experiments.evaluate).
    * Two SA runs share one calibration: ``sa`` at Algorithm 2's nu (loss arg-min; "SA", the reference) and
      ``sa_match`` at the BO surrogate's scale-matching nu ("SA (scale-match)", short "SA-sm"), treated like a
      baseline (temperature-scaled and coverage-matched).
    * Each mean uses the splits present for that (dataset, method); ``n`` says how many.
    * Coverage is the paper's statistic: numpy's interpolated sample quantiles of the S members. Beside it, as the
      W1 floor beside W1, ``pi95_coverage_calibrated`` (beyond the paper): what that interval covers for a
      perfectly calibrated S-member ensemble (``metrics.calibrated_coverage``, Gaussian members: 0.868 at S = 19),
      the value a calibrated method's "Cov." sits at, below 0.95 by construction.
    * CRPS is the paper's ensemble estimator (all S^2 pairs); ``crps_fair`` (beyond the paper) the fair estimator
      (S (S - 1) pairs, unbiased for the CRPS of the law the members come from; the ensemble one exceeds it by
      1/S of it for a calibrated ensemble, 5.3 % at S = 19).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stochattn.extras import requires
from stochattn.metrics import pit_mean_z, pooled_moments, w1_null_floor, w1_uniform
from stochattn.report import (
    SCALAR_BLOCKS,
    SECONDS_KEYS,
    ColumnGroup,
    TableSpec,
    check_runs,
    column,
    dataset_order,
    finite_mean,
    finite_std,
    mean_row,
    method_order,
    tidy_frame,
)

with requires("workflow"):
    import pandas as pd

__all__ = [
    "uci_master_table",
    "uci_crps_table",
    "uci_cost_table",
    "MASTER_TABLE",
    "MATCHED_TABLE",
    "CRPS_TABLE",
    "COST_TABLE",
    "COVERAGE_TABLE",
    "UCI_TABLE_SPECS",
]


# --------------------------------------------------------------------------------------------------------------
# tidy tables
# --------------------------------------------------------------------------------------------------------------
def uci_master_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of the master UCI table (paper ``tab:uci_master``) plus audit rows.

    Metrics (per data set; ``n`` = number of splits):
        ``rmse_over_sigma``  (method ``sa`` only) mean over splits of SA's native ``nrmse`` (RMSE/sigma_y of its
                             point, the deterministic backbone prediction); std over splits.
        ``w1_native_pooled`` per method: native PIT values of all splits concatenated, then ``w1_uniform``;
                             ``std`` = NaN (one pooled number).
        ``w1_floor``         per method (beyond the paper): the expected W1 of that many perfectly calibrated PIT
                             values (``w1_null_floor``, ~0.31/sqrt(n)): a pooled W1 near it reads as calibrated.
        ``pit_mean``, ``pit_mean_z``  per method: the pooled native PIT's mean and its z = (mean - 1/2) / SE; the
                             reproduction report flags |z| > ``PIT_BIAS_Z`` (a point bias, not a dispersion result).
        ``point_bias``, ``point_bias_z`` per method (beyond the paper): the mean of ``(y - point) / sigma_y`` over
                             the test rows of all splits and its z (:func:`stochattn.metrics.pooled_moments` of each
                             split's ``point_residual`` block; NaN where a metrics file has none): a biased point
                             (SA's: the backbone's) that a PIT-mean bias comes from.
        ``pi95_width_ratio`` per method: mean over splits of the method's temperature-scaled test ``width_95``
                             (``scaled`` block: factor T fitted on the calibration part; SA's own is native) / SA's
                             mean native ``width_95``; SA = 1.0 exactly. ``std``: std over the shared splits of
                             the per-split ratio. NaN without SA.
        ``pi95_coverage``    per method: mean over splits of the achieved PI-95 TEST coverage at that scaling
                             (SA: native), shown beside Panel B ("Cov.").
        ``pi95_coverage_calibrated`` per method (beyond the paper): the expected PI-95 coverage of a perfectly
                             calibrated ensemble of the run's S members (``native_coverage_95_calibrated``,
                             :func:`stochattn.metrics.calibrated_coverage`; NaN for metrics files without it).
        ``pi95_width_ratio_matched``, ``pi95_coverage_matched``: the same with the ``matched`` block (conformal
                             factor fitted on the calibration part to SA's empirical PI-95 coverage there; NaN
                             without a matched block): the extra table ``uci_matched``.
    Audit metrics: ``pi<L>_width_ratio[_matched]`` and ``pi<L>_coverage[_matched]`` for the other levels L (25,
    50, 75), ``matched_target_coverage_<L>`` (SA's calibration coverage), ``matched_factor_<L>``,
    ``matched_cal_coverage_<L>`` (achieved on the calibration part), ``w1_native_per_split`` (mean/std over splits
    of per-split native W1), ``w1_scaled_pooled`` (pooled scaled PIT), ``coverage_95_native``,
    ``coverage_95_scaled``, ``width_95_native``, ``width_95_scaled`` (mean/std over splits) and ``temperature``
    (mean/std of the fitted T).
    For ``sa`` the reported numbers are native whatever its ``scaled`` / ``matched`` blocks hold.
    """
    runs = check_runs(runs, ["native_nrmse", "native_width_95", "scaled_width_95", "pit_native"])
    rows: list[dict[str, Any]] = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        methods = method_order(d["method"])
        sa = d[d["method"] == "sa"]
        if not sa.empty:
            rows.append(mean_row(dataset, "sa", "rmse_over_sigma", sa["native_nrmse"]))
        for method in methods:
            m = d[d["method"] == method]
            pooled = np.concatenate(list(m["pit_native"]))
            rows.append({"dataset": dataset, "method": method, "metric": "w1_native_pooled",
                         "value": w1_uniform(pooled), "std": math.nan, "n": len(m)})
            rows += _pit_rows(dataset, method, pooled, len(m))
            rows += _point_bias_rows(dataset, method, m)
        for key in _matched_levels(d):
            rows += _width_ratio_rows(dataset, d, methods, key, "scaled")
            rows += _width_ratio_rows(dataset, d, methods, key, "matched")
        for method in methods:
            m = d[d["method"] == method]
            rows.append(mean_row(dataset, method, "w1_native_per_split", m["native_w1"]
                                 if "native_w1" in m else np.full(len(m), np.nan)))
            pooled_s = np.concatenate(list(m["pit_native" if method == "sa" else "pit_scaled"]))
            rows.append({"dataset": dataset, "method": method, "metric": "w1_scaled_pooled",
                         "value": w1_uniform(pooled_s), "std": math.nan, "n": len(m)})
            for block in SCALAR_BLOCKS:
                src = "native" if method == "sa" else block
                for key in ("coverage_95", "width_95"):
                    col = f"{src}_{key}"
                    vals = m[col] if col in m else np.full(len(m), np.nan)
                    rows.append(mean_row(dataset, method, f"{key}_{block}", vals))
            rows.append(mean_row(dataset, method, "temperature", m["temperature"]))
            rows.append(mean_row(dataset, method, "pi95_coverage_calibrated",
                                 column(m, "native_coverage_95_calibrated")))  # fmt: skip
    return tidy_frame(rows)


def _pit_rows(dataset: str, method: str, pooled: np.ndarray, n_splits: int) -> list[dict[str, Any]]:
    """``w1_floor`` (the expected W1 of as many calibrated PIT values, :func:`stochattn.metrics.w1_null_floor`),
    ``pit_count``, ``pit_mean`` and ``pit_mean_z`` (:func:`stochattn.metrics.pit_mean_z`) of one pooled native PIT."""
    mean, z = pit_mean_z(pooled)
    values = {"w1_floor": w1_null_floor(pooled.size), "pit_count": float(pooled.size), "pit_mean": mean,
              "pit_mean_z": z}  # fmt: skip
    return [{"dataset": dataset, "method": method, "metric": k, "value": v, "std": math.nan, "n": n_splits}
            for k, v in values.items()]


def _point_bias_rows(dataset: str, method: str, m: pd.DataFrame) -> list[dict[str, Any]]:
    """``point_bias`` and ``point_bias_z``: the test residual moments of ``m``'s splits pooled exactly
    (:func:`stochattn.metrics.pooled_moments`); NaN unless every split's metrics file has them."""
    parts = [{"n": n, "mean": mu, "sd": sd} for n, mu, sd in
             zip(column(m, "point_residual_n"), column(m, "point_residual_mean"), column(m, "point_residual_sd"))]
    known = bool(parts) and all(np.isfinite([p["n"], p["mean"], p["sd"]]).all() for p in parts)
    pooled = pooled_moments(parts) if known else {"mean": math.nan, "z": math.nan}
    return [{"dataset": dataset, "method": method, "metric": f"point_bias{k}", "value": pooled[key],
             "std": math.nan, "n": len(m)} for k, key in (("", "mean"), ("_z", "z"))]


def _matched_levels(runs: pd.DataFrame) -> list[str]:
    """Level keys of the matched block in ``runs`` ("95" first, then the others ascending)."""
    keys = {c[len("matched_width_"):] for c in runs.columns if c.startswith("matched_width_")}
    keys |= {"95"}
    return ["95"] + sorted(keys - {"95"}, key=float)


def _width_ratio_rows(dataset: str, d: pd.DataFrame, methods: list[str], key: str, block: str
                      ) -> list[dict[str, Any]]:  # fmt: skip
    """Width ratio to SA and achieved test coverage at level ``key`` with every method but SA post-scaled by
    ``block``: ``"scaled"`` (temperature, the paper's: metrics ``pi<key>_width_ratio``, ``pi<key>_coverage``) or
    ``"matched"`` (conformal to SA's calibration coverage: the same names + ``_matched``, and its audit rows)."""
    rows: list[dict[str, Any]] = []
    col = column
    suffix = "" if block == "scaled" else f"_{block}"
    sa = d[d["method"] == "sa"]
    sa_width = finite_mean(col(sa, f"native_width_{key}")) if not sa.empty else math.nan
    sa_by_split = dict(zip(sa["split"], col(sa, f"native_width_{key}")))
    for method in methods:
        m = d[d["method"] == method]
        is_sa = method == "sa"
        width = col(m, f"native_width_{key}" if is_sa else f"{block}_width_{key}")
        cover = col(m, f"native_coverage_{key}" if is_sa else f"{block}_coverage_{key}")
        ratio = (1.0 if math.isfinite(sa_width) else math.nan) if is_sa else finite_mean(width) / sa_width
        per_split = [w / sa_by_split[k] for k, w in zip(m["split"], width) if k in sa_by_split]
        rows.append({"dataset": dataset, "method": method, "metric": f"pi{key}_width_ratio{suffix}", "value": ratio,
                     "std": finite_std(np.asarray(per_split)), "n": len(m)})
        rows.append(mean_row(dataset, method, f"pi{key}_coverage{suffix}", cover))
        if block == "matched":
            for name in ("target_coverage", "factor", "cal_coverage"):
                rows.append(mean_row(dataset, method, f"matched_{name}_{key}", col(m, f"matched_{name}_{key}")))
    return rows


def uci_crps_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of the UCI CRPS table (paper ``tab:uci_crps``): metric ``crps`` per (dataset, method), the mean
    over splits of the native mean CRPS (the paper's ensemble estimator), ``std`` over splits (ddof=1), ``n`` =
    number of splits; and ``crps_fair`` (beyond the paper), the same for the fair estimator
    (``native_crps_fair``; NaN rows for metrics files without it)."""
    runs = check_runs(runs, ["native_crps"])
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        for method in method_order(d["method"]):
            m = d[d["method"] == method]
            rows.append(mean_row(dataset, method, "crps", m["native_crps"]))
            rows.append(mean_row(dataset, method, "crps_fair", column(m, "native_crps_fair")))
    return tidy_frame(rows)


def uci_cost_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of wall-clock cost per (dataset, method), mean/std over splits.

    Metrics: ``seconds_train``, ``seconds_calibrate``, ``seconds_predict``, ``seconds_total`` (their sum per
    split), ``seconds_adaptation`` (train + calibrate per split: everything a method spends before it can
    predict), and ``adaptation_over_sa_calibration`` = mean ``seconds_adaptation`` / SA's mean
    ``seconds_calibrate`` (a ratio of means, ``std`` NaN; NaN without SA); ``nu`` (mean/std over splits) for the
    methods that record one (``sa``: Algorithm 2's nu, ``sa_match``: the surrogate's scale-matching nu).
    ``sa`` and ``sa_match`` share one calibration: each run's ``calibrate`` seconds are that calibration.

    NOTE: the shared deterministic backbone (``backbone/meta.json``) is not in any method's seconds; SA and MC
    Dropout run on it as a frozen model, so their ``train`` is what their ``meta.json`` recorded (normally 0).
    """
    runs = check_runs(runs, [f"seconds_{k}" for k in SECONDS_KEYS])
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        sa = d[d["method"] == "sa"]
        sa_cal = finite_mean(sa["seconds_calibrate"]) if not sa.empty else math.nan
        for method in method_order(d["method"]):
            m = d[d["method"] == method]
            parts = {k: m[f"seconds_{k}"].to_numpy(dtype=np.float64) for k in SECONDS_KEYS}
            for k in SECONDS_KEYS:
                rows.append(mean_row(dataset, method, f"seconds_{k}", parts[k]))
            total = np.nan_to_num(parts["train"]) + np.nan_to_num(parts["calibrate"]) + np.nan_to_num(parts["predict"])
            adapt = np.nan_to_num(parts["train"]) + np.nan_to_num(parts["calibrate"])
            rows.append(mean_row(dataset, method, "seconds_total", total))
            rows.append(mean_row(dataset, method, "seconds_adaptation", adapt))
            ratio = finite_mean(adapt) / sa_cal if sa_cal and math.isfinite(sa_cal) and sa_cal > 0 else math.nan
            rows.append({"dataset": dataset, "method": method, "metric": "adaptation_over_sa_calibration",
                         "value": ratio, "std": math.nan, "n": len(m)})
            if "nu" in m and np.isfinite(m["nu"].to_numpy(dtype=np.float64)).any():
                rows.append(mean_row(dataset, method, "nu", m["nu"]))
                if "at_boundary" in m:  # the fraction of splits whose calibration ended at nu's low end
                    rows.append(mean_row(dataset, method, "at_boundary", m["at_boundary"]))
    return tidy_frame(rows)


# --------------------------------------------------------------------------------------------------------------
# layouts
# --------------------------------------------------------------------------------------------------------------
_CALIBRATED_COVERAGE = ColumnGroup(
    "pi95_coverage_calibrated", "Cov. if calibrated", r"\textbf{if calibrated}", methods=("sa",),
    header="Cov. if calibrated", latex_header=r"$S$ members",
)
"""The expected PI-95 coverage of a perfectly calibrated ensemble of the runs' S members (beyond the paper)."""

MASTER_TABLE = TableSpec(
    name="master",
    label="tab:uci_master",
    build=uci_master_table,
    wide=True,
    groups=(
        ColumnGroup("rmse_over_sigma", "Acc.", r"\textbf{Acc.}", methods=("sa",), header="Acc. RMSE/σ_y",
                    latex_header=r"RMSE/$\sigma_y$"),
        ColumnGroup("w1_native_pooled", "W1", r"\textbf{Panel A: Native $W_1$ $\downarrow$}", bold=1),
        ColumnGroup("w1_floor", "W1 floor", r"\textbf{$W_1$ floor}", methods=("sa",), header="W1 floor",
                    latex_header=r"calibrated"),
        ColumnGroup("pi95_width_ratio", "PI95/SA", r"\textbf{Panel B: Sharp/SA $\downarrow$ (SA\,${=}$\,1.0)}",
                    bold=1),
        ColumnGroup("pi95_coverage", "Cov.", r"\textbf{Cov.: PI-95 test coverage}"),
        _CALIBRATED_COVERAGE,
    ),
    description=(
        "UCI regression across data sets. SA: nu at Algorithm 2's arg-min of the observed calibration loss (as in "
        "the paper); SA-sm: the same calibration's BO-surrogate scale-matching nu (App. B). Acc.: SA's "
        "deterministic-mean RMSE/sigma_y (mean over splits). Panel A: native pooled-PIT W1 (PIT values of all "
        "splits pooled); W1 floor (beyond the paper): the expected W1 of as many perfectly calibrated PIT values "
        "(exact finite-n mean, ~0.31/sqrt(n)), so a W1 near it is within sampling noise of calibrated. Panel B: "
        "mean PI-95 test width normalized to SA's mean width (SA = 1.0, native); every "
        "other method (baselines and SA-sm) temperature-scaled, as in the paper: its ensemble rescaled around its "
        "point by a factor fitted on the calibration split (Gaussian NLL). Cov.: each method's achieved PI-95 test "
        "coverage at that scaling (SA native). Cov. if calibrated (beyond the paper): the PI-95 coverage a perfectly "
        "calibrated ensemble of as many members would average (interpolated sample quantiles of S members cover "
        "less than 95 % by construction: 0.868 at S = 19, Gaussian members), what Cov. is to be read against. Lower "
        "is better in Panels A and B; bold marks the best per row in each. Conformal matching to SA's coverage "
        "instead: table uci_matched."
    ),
    latex_description=(
        r"UCI regression across data sets. SA: $\nu$ at Algorithm~2's arg-min of the observed calibration loss; "
        r"SA-sm: the same calibration's BO-surrogate scale-matching $\nu$ (App.~B). "
        r"\textbf{Acc.}: SA's deterministic-mean RMSE/$\sigma_y$. "
        r"\textbf{Panel~A}: native pooled-PIT $W_1$; \textbf{$W_1$ floor}: expected $W_1$ of as many calibrated PIT "
        r"values ($\approx 0.31/\sqrt{n}$). \textbf{Panel~B}: mean PI-95 test width normalized to SA's "
        r"per-dataset width (SA native); every other method (baselines and SA-sm) temperature-scaled on the "
        r"calibration split. \textbf{Cov.}: achieved PI-95 test coverage at that scaling; \textbf{if calibrated}: "
        r"the coverage a perfectly calibrated $S$-member ensemble's interpolated PI-95 averages (below 0.95 by "
        r"construction). Lower is better in Panels~A and~B."
    ),
)
"""Paper ``tab:uci_master``: Acc. | Panel A (bold: lowest W1) | Panel B (bold: lowest ratio) | Cov. (no bold)."""

MATCHED_TABLE = TableSpec(
    name="matched",
    label="tab:uci_matched",
    build=uci_master_table,
    groups=(
        ColumnGroup("pi95_width_ratio_matched", "PI95/SA", r"\textbf{Sharp/SA at SA's coverage $\downarrow$}",
                    bold=1),
        ColumnGroup("pi95_coverage_matched", "Cov.", r"\textbf{PI-95 test coverage}"),
        _CALIBRATED_COVERAGE,
    ),
    description=(
        "Beyond the paper (its Panel B temperature-scales; see uci_master): mean PI-95 test width normalized to SA's "
        "mean native width (SA = 1.0) with every other method (baselines and SA-sm) conformally rescaled, by a "
        "factor fitted on the calibration split, to SA's empirical PI-95 coverage on that split; Cov.: the "
        "achieved PI-95 test coverage at that scaling; Cov. if calibrated: what a perfectly calibrated ensemble of "
        "as many members covers with the same interpolated PI-95. Lower width is better; bold marks the best per row."
    ),
    latex_description=(
        r"Beyond the paper: mean PI-95 test width normalized to SA's (SA native) with every other method "
        r"conformally rescaled on the calibration split to SA's empirical PI-95 coverage there, and the achieved "
        r"PI-95 test coverage."
    ),
)
"""Panel B at matched coverage (conformal), the project's extra beside the paper's temperature-scaled Panel B."""

CRPS_TABLE = TableSpec(
    name="crps",
    label="tab:uci_crps",
    build=uci_crps_table,
    groups=(
        ColumnGroup("crps", "CRPS", r"\textbf{CRPS (ensemble estimator, the paper's)}", short_labels=False,
                    fmt="adaptive", show_std=True, bold=2),
        ColumnGroup("crps_fair", "CRPS fair", r"\textbf{CRPS (fair estimator; beyond the paper)}", short_labels=False,
                    fmt="adaptive", show_std=True, bold=2),
    ),
    wide=True,
    description=(
        "Ensemble CRPS on UCI regression (native predictions, mean±std over splits; the mean alone where one split "
        "was run). CRPS: the paper's ensemble estimator E|X - y| - 0.5 E|X - X'| over all S^2 member pairs (the CRPS "
        "of the members' empirical law); CRPS fair (beyond the paper): the fair estimator, the spread term over the "
        "S (S - 1) pairs of distinct members, unbiased for the CRPS of the law the members are drawn from (for a "
        "calibrated ensemble the ensemble estimator is (1 + 1/S) times it on average: 5.3 % higher at S = 19). "
        "SA: nu at Algorithm 2's loss arg-min; SA (scale-match): the BO surrogate's scale-matching nu of the same "
        "calibration. Lower is better; bold marks the two best per row in each panel."
    ),
    latex_description=(
        r"Ensemble CRPS on UCI regression (native predictions, mean$\pm$std over splits; the mean alone where one "
        r"split was run): the paper's ensemble estimator (all $S^2$ member pairs) and, beyond the paper, the fair "
        r"estimator ($S(S{-}1)$ pairs of distinct members; unbiased for the members' law, the ensemble one is "
        r"$(1{+}1/S)$ times it for a calibrated ensemble). SA: $\nu$ at "
        r"Algorithm~2's loss arg-min; SA (scale-match): the BO surrogate's scale-matching $\nu$. Lower is better; "
        r"\textbf{bold} marks the two best per row in each panel."
    ),
)
"""Paper ``tab:uci_crps``: mean±std, long method labels, the two lowest per row bold; the fair CRPS beside it."""

COST_TABLE = TableSpec(
    name="cost",
    label="tab:uci_cost",
    build=uci_cost_table,
    groups=(
        ColumnGroup("seconds_total", "Total s", r"\textbf{Total seconds $\downarrow$}", fmt="significant", bold=1),
        ColumnGroup("adaptation_over_sa_calibration", "Adapt/SA-cal",
                    r"\textbf{Adaptation / SA calibration $\downarrow$}", fmt="significant", bold=1),
        ColumnGroup("nu", "nu", r"\textbf{$\nu$}", fmt="significant"),
    ),
    description=(
        "Wall-clock cost on UCI (mean over splits). Total: train + calibrate + predict seconds. "
        "Adapt./SA cal.: (train + calibrate) seconds over SA's calibration seconds. nu: mean calibrated nu over "
        "splits (SA: Algorithm 2's loss arg-min; SA-sm: the surrogate's scale-matching point; one shared "
        "calibration, whose seconds both count), '(boundary)' where the calibration ended at nu = 1 still wanting "
        "more dispersion (on every split; 'boundary on k%' of splits otherwise). Lower is better; bold marks the "
        "lowest per row in each seconds panel."
    ),
    latex_description=(
        r"Wall-clock cost on UCI (mean over splits). \textbf{Total}: train + calibrate + predict seconds. "
        r"\textbf{Adapt./SA cal.}: (train + calibrate) seconds over SA's calibration seconds. $\nu$: mean "
        r"calibrated $\nu$ (SA: Algorithm~2's loss arg-min; SA-sm: scale-matching point; one shared calibration). "
        r"Lower is better."
    ),
)
"""The cost comparison: total seconds and adaptation/SA-calibration (bold: lowest per row), nu."""

COVERAGE_TABLE = TableSpec(
    name="coverage",
    label="tab:uci_coverage",
    build=uci_master_table,
    groups=(
        ColumnGroup("coverage_95_native", "Native", r"\textbf{Native PI-95 coverage}"),
        ColumnGroup("coverage_95_scaled", "Scaled", r"\textbf{Scaled PI-95 coverage (SA native)}"),
        ColumnGroup("pi95_coverage_matched", "Matched", r"\textbf{Matched PI-95 coverage (SA native)}"),
    ),
    description=(
        "Empirical PI-95 test coverage on UCI (mean over splits): native; every method but SA temperature-scaled "
        "(S-corrected Gaussian NLL on the calibration split); every method but SA conformally matched to SA's "
        "calibration-split coverage. SA native in all panels."
    ),
    latex_description=(
        r"Empirical PI-95 test coverage on UCI (mean over splits): native; temperature-scaled; conformally matched "
        r"to SA's calibration-split coverage (SA native in all panels)."
    ),
)
"""PI-95 coverage native / temperature-scaled / matched, from the master table's audit rows (no rule writes it)."""

UCI_TABLE_SPECS: dict[str, TableSpec] = {s.name: s for s in (MASTER_TABLE, MATCHED_TABLE, CRPS_TABLE, COST_TABLE,
                                                               COVERAGE_TABLE)}  # fmt: skip
"""Table name (the ``{table}`` of ``results/tables/uci_{table}``) -> its spec."""


# --------------------------------------------------------------------------------------------------------------
# one run of the paper configuration beside the paper (benchmarks/uci_paper_slice.py)
# --------------------------------------------------------------------------------------------------------------
SLICE_METRICS = ("rmse_over_sigma", "w1_native_pooled", "w1_floor", "coverage_95_native", "pit_mean_z",
                 "point_bias", "point_bias_z", "crps")
"""The metrics the slice comparison shows per (data set, method): the master table's, and :func:`uci_crps_table`'s
``crps`` where its rows are given too."""


def uci_slice_comparison(master: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Per (data set, method) of a master table (:func:`uci_master_table`'s tidy rows): ``n`` (splits),
    ``rmse_over_sigma`` (SA's row only, the deterministic backbone's), native pooled-PIT ``w1`` with its calibrated
    ``w1_floor``, the native PI-95 test ``coverage_95`` (mean over splits), ``pit_mean_z``, the point's ``point_bias``
    and its ``point_bias_z`` (beyond the paper: NaN for metrics files without them), and the paper's
    ``paper_rmse_over_sigma`` / ``paper_w1`` (``cells``: :func:`stochattn.experiments.paper_comparison.paper_cells`;
    the scale-matching SA run is read against the paper's SA), ``ratio`` = ``w1 / paper_w1`` and ``within``: the
    cell is within a factor 2 of the paper either way, or within 1.5x our floor (a paper value below the floor of as
    many test rows as ours cannot be shown by a calibrated method). With :func:`uci_crps_table`'s rows among
    ``master``'s, also ``crps`` (mean over splits, target units) beside the paper's ``paper_crps`` (its appendix
    Table ``tab:uci_crps``). NaN where the paper or the run has no number (``within`` then missing: ``pd.NA``)."""
    paper = cells[cells["table"].isin(["uci_master", "uci_crps"])]

    def paper_value(dataset: str, method: str, metric: str) -> float:
        m = "sa" if method == "sa_match" else method
        hit = paper[(paper["row"] == dataset) & (paper["method"] == m) & (paper["metric"] == metric)]
        return float(hit["paper"].iloc[0]) if len(hit) else math.nan

    rows = []
    for dataset in dataset_order(master["dataset"]):
        d = master[master["dataset"] == dataset]
        for method in method_order(d["method"]):
            m = d[d["method"] == method]
            value = {k: float(m.loc[m["metric"] == k, "value"].iloc[0]) if (m["metric"] == k).any() else math.nan
                     for k in SLICE_METRICS}  # fmt: skip
            rows.append({
                "dataset": dataset, "method": method, "n": int(m["n"].max()),
                "rmse_over_sigma": value["rmse_over_sigma"],
                "paper_rmse_over_sigma": (paper_value(dataset, method, "rmse_over_sigma") if method == "sa"
                                          else math.nan),
                "w1": value["w1_native_pooled"], "w1_floor": value["w1_floor"],
                "paper_w1": paper_value(dataset, method, "w1_native_pooled"),
                "coverage_95": value["coverage_95_native"], "pit_mean_z": value["pit_mean_z"],
                "point_bias": value["point_bias"], "point_bias_z": value["point_bias_z"],
                "crps": value["crps"], "paper_crps": paper_value(dataset, method, "crps"),
            })  # fmt: skip
    table = pd.DataFrame(rows)
    table["ratio"] = table["w1"] / table["paper_w1"]
    reach = table["ratio"].between(0.5, 2.0) | (table["w1"] <= 1.5 * table["w1_floor"])
    table["within"] = reach.astype("boolean").where(table["ratio"].notna(), pd.NA)
    return table
