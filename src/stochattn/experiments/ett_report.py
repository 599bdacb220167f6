"""Tables and figures of the ETT experiment (paper Table ``timesfm_sharpness``, Fig. ``timesfm_diagnostic``,
Fig. ``timesfm_scaled_appendix``) over the shared machinery of :mod:`stochattn.report` and :mod:`stochattn.figures`.

    load_ett_runs        metrics.json of every (configuration, method) -> tidy rows (row label "ETTh1 H=96")
    window_match         on ONE stated test window: SA's coverage k/H and each method's conformal factor matching
                         it on that window, and mean PI-95 width there (the paper's statistic)
    SHARPNESS_TABLE      the paper's Table timesfm_sharpness: per configuration, on the stated window (column,
                         window index), SA's coverage k/H and every method's mean PI-95 width matched to it on that
                         window; two sharpest bold
    SHARPNESS_POOLED_TABLE  beyond the paper: the same widths pooled over every test series and step, each method
                         matched by a factor fitted on the cal windows to SA's cal coverage
    POOLED_TABLE         beyond the paper: coverage at 25/50/75/95, W1, MAE, CRPS and cost, pooled over every
                         column and window of the test part (the conclusion does not rest on one window)
    ZERO_SHOT_TABLE      the backbone's zero-shot test MAE next to the seasonal-naive and last-value forecasts,
                         and the adapted model's
    coverage_figure      one stated window (data set, horizon, column, window): truth, point forecast and 95 %
                         interval per method, the window's coverage in each title; ``matched=True``: every method
                         but SA rescaled by its conformal factor (fitted on the cal windows, never on this window)

Tidy rows follow :mod:`stochattn.report` (``dataset`` = the configuration label, ``n`` = 1: one run each).
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.extras import requires
from stochattn.io import load_json, load_npz
from stochattn.metrics import calibrated_coverage
from stochattn.report import (
    COST_GROUPS,
    ColumnGroup,
    TableSpec,
    cost_rows,
    mean_row,
    method_label,
    method_order,
    nu_rows,
    tidy_frame,
)

with requires("workflow"):
    import pandas as pd

__all__ = ["config_label", "load_ett_runs", "SHARPNESS_TABLE", "POOLED_TABLE", "ZERO_SHOT_TABLE", "ETT_TABLE_SPECS",
           "coverage_figure", "window_row"]  # fmt: skip

_RUN_RE = re.compile(r"(?:^|/)(?P<dataset>ETT[hm][12])/H(?P<horizon>\d+)/(?P<method>[^/]+)/metrics\.json$")
LEVELS = ("25", "50", "75", "95")
ZERO_SHOT_COLUMNS = ("zero_shot_backbone", "adapted", "seasonal_naive", "last_value")


def config_label(dataset: str, horizon: int) -> str:
    """Row label of a configuration: ``"ETTh1 H=96"``."""
    return f"{dataset} H={int(horizon)}"


def _parse(path: str | os.PathLike) -> tuple[str, int, str]:
    m = _RUN_RE.search(Path(path).as_posix())
    if m is None:
        raise ValueError(f"{path}: not an ETT run path (.../<ETTxN>/H<horizon>/<method>/metrics.json)")
    return m["dataset"], int(m["horizon"]), m["method"]


def load_ett_runs(metrics_paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per run: ``dataset, horizon, config, method`` and the metrics (``native_<k>``, ``matched_<k>``,
    ``seconds_total``, ``nu``, ``at_boundary``), sorted by data set, horizon and method order."""
    rows = []
    for path in metrics_paths:
        dataset, horizon, method = _parse(path)
        m = load_json(path)
        row: dict[str, Any] = {"dataset": dataset, "horizon": horizon, "config": config_label(dataset, horizon),
                               "method": method, "nu": m.get("nu"), "at_boundary": m.get("at_boundary")}  # fmt: skip
        row.update({f"native_{k}": v for k, v in m["native"].items()})
        row.update({f"matched_{k}": v for k, v in m.get("matched", {}).items()})
        row["seconds_total"] = float(sum(v for v in m["seconds"].values() if isinstance(v, (int, float))))
        row["seconds"] = dict(m["seconds"])
        rows.append(row)
    if not rows:
        raise ValueError("load_ett_runs: no metrics.json given")
    runs = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(method_order(runs["method"].unique()))}
    runs["_m"] = runs["method"].map(order)
    return runs.sort_values(["dataset", "horizon", "_m"]).drop(columns="_m").reset_index(drop=True)


def _value(run: pd.Series, key: str) -> float:
    v = run.get(key, math.nan)
    return math.nan if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def sharpness_pooled_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows: ``sa_coverage_95`` (SA's native test coverage, pooled) and ``width_at_sa_95`` per method (SA
    native, every other run conformally matched to SA's cal coverage)."""
    rows = []
    for (_, _), d in runs.groupby(["dataset", "horizon"], sort=False):
        label = d["config"].iloc[0]
        for _, run in d.iterrows():
            if run["method"] == "sa":
                rows.append(mean_row(label, "sa", "sa_coverage_95", [_value(run, "native_coverage_95")]))
                rows.append(mean_row(label, "sa", "sa_coverage_95_calibrated",
                                     [_value(run, "native_coverage_95_calibrated")]))  # fmt: skip
                width = _value(run, "native_width_95")
            else:
                width = _value(run, "matched_width_95")
            rows.append(mean_row(label, run["method"], "width_at_sa_95", [width]))
            rows.extend(nu_rows(label, run["method"], run))
    return tidy_frame(rows)


def pooled_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of native pooled metrics: ``coverage_<L>``, ``w1``, ``mae``, ``crps`` and ``seconds``; beyond the
    paper ``coverage_<L>_calibrated`` (what a perfectly calibrated ensemble of the run's S members covers with the
    same interpolated interval, :func:`stochattn.metrics.calibrated_coverage`) and ``crps_fair`` (the fair CRPS
    estimator); NaN where metrics.json predates them."""
    rows = []
    for _, run in runs.iterrows():
        for key in (*(f"coverage_{lvl}" for lvl in LEVELS), *(f"coverage_{lvl}_calibrated" for lvl in LEVELS), "w1",
                    "mae", "crps", "crps_fair"):  # fmt: skip
            rows.append(mean_row(run["config"], run["method"], key, [_value(run, f"native_{key}")]))
        rows.append(mean_row(run["config"], run["method"], "seconds", [run["seconds_total"]]))
        rows.extend(nu_rows(run["config"], run["method"], run))
    return tidy_frame(rows)


def cost_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy cost rows per configuration (:func:`stochattn.report.cost_rows`): each method's adaptation seconds
    (its own training + calibration; SA: its BO alone), their ratio to SA's BO seconds, total seconds, SA's nu."""
    rows = []
    for (_, _), d in runs.groupby(["dataset", "horizon"], sort=False):
        sa = d[d["method"] == "sa"]
        sa_bo = float(sa["seconds"].iloc[0].get("calibrate", math.nan)) if not sa.empty else math.nan
        for _, run in d.iterrows():
            rows.extend(cost_rows(run["config"], run["method"], run["seconds"], sa_bo))
            rows.extend(nu_rows(run["config"], run["method"], run))
    return tidy_frame(rows)


def zero_shot_table(adapter_metas: Mapping[str, str | os.PathLike] | Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Tidy rows ``test_mae`` of the forecasters in :data:`ZERO_SHOT_COLUMNS` from each configuration's
    adapter.json (``.../<ETTxN>/H<horizon>/adapter.json``)."""
    paths = adapter_metas.values() if isinstance(adapter_metas, Mapping) else adapter_metas
    rows = []
    for path in sorted(paths, key=lambda p: _config_key(p)):
        meta = load_json(path)
        label = config_label(meta["dataset"], meta["horizon"])
        rows.extend(mean_row(label, name, "test_mae", [meta["test_mae"][name]]) for name in ZERO_SHOT_COLUMNS)
    return tidy_frame(rows)


def _config_key(path: str | os.PathLike) -> tuple[str, int]:
    m = re.search(r"(ETT[hm][12])/H(\d+)/", Path(path).as_posix())
    return (m[1], int(m[2])) if m else (str(path), 0)


_SHARP = "PI-95 width at SA's coverage"
_SHARP_GROUPS = (
    ColumnGroup("sa_coverage_95", "SA cov.", r"SA cov.", methods=("sa",), header="SA PI-95 cov.",
                latex_header=r"SA PI-95 cov."),  # fmt: skip
    ColumnGroup("sa_coverage_95_calibrated", "if calibrated", r"if calibrated", methods=("sa",),
                header="SA cov. if calibrated", latex_header=r"if calibrated"),  # fmt: skip
    ColumnGroup("width_at_sa_95", "Width", _SHARP, bold=2),
    ColumnGroup("nu", "nu", r"$\nu$", methods=("sa",), header="SA nu", latex_header=r"SA $\nu$", fmt="significant"),
)
SHARPNESS_TABLE = TableSpec(
    name="ett_sharpness",
    groups=_SHARP_GROUPS,
    description="TimesFM sharpness at matched coverage (the paper's Table timesfm_sharpness): on one stated test "
    "window per configuration (column and window in the caption), SA's empirical PI-95 coverage k/H and each "
    "method's mean PI-95 width on that window at SA's coverage (normalised units; SA native, every other method "
    "rescaled around its forecast by the smallest conformal factor that covers the same k of the H steps of that "
    "window, as the paper matches its window); beside SA's coverage (beyond the paper) what a perfectly calibrated "
    "ensemble of as many members averages with the same interpolated PI-95. Lower is sharper; the two sharpest are "
    "bold. SA nu: SA's calibrated "
    "nu, '(boundary)' where its calibration ended at nu = 1 still wanting more dispersion.",
    latex_description=r"TimesFM sharpness at matched coverage on one test window per configuration: SA's empirical "
    r"PI-95 coverage $k/H$ and each method's mean PI-95 width on that window, conformally matched to SA's coverage "
    r"there (normalised units). Two sharpest in bold.",
    label="tab:ett_sharpness",
    build=None,  # built from samples (sharpness_table), not from metrics.json
)
SHARPNESS_POOLED_TABLE = TableSpec(
    name="ett_sharpness_pooled",
    groups=_SHARP_GROUPS,
    description="Beyond the paper: sharpness at matched coverage pooled over every test series and step: SA's "
    "PI-95 coverage on all test windows (beside it what a perfectly calibrated ensemble of as many members covers "
    "with the same interpolated PI-95) and each method's mean PI-95 width at SA's coverage (normalised units; SA "
    "native, every other run rescaled by a conformal factor fitted on the cal windows to SA's cal coverage). Lower "
    "is sharper; the two sharpest are bold. SA nu: SA's calibrated nu, '(boundary)' where its calibration ended at "
    "nu = 1 still wanting more dispersion.",
    latex_description=r"Pooled over all test windows: SA's PI-95 coverage and each method's mean PI-95 width at "
    r"SA's coverage (baselines conformally rescaled on the cal windows). Two sharpest in bold.",
    label="tab:ett_sharpness_pooled",
    build=sharpness_pooled_table,
)

_POOLED = ("Beyond the paper: native metrics pooled over every column, test window and step of each configuration "
           "(normalised units). ")
POOLED_TABLE = TableSpec(
    name="ett_pooled",
    groups=(
        ColumnGroup("coverage_95", "Cov95", r"Cov.\,95\%", best="target", target=0.95, bold=1),
        ColumnGroup("coverage_95_calibrated", "Cov95 if calibrated", r"if calibrated", methods=("sa",),
                    header="Cov95 if calibrated", latex_header=r"$S$ members"),
        ColumnGroup("w1", "W1", r"$W_1$ (PIT)", bold=1),
        ColumnGroup("nu", "nu", r"$\nu$", methods=("sa", "sa_match"), fmt="significant"),
    ),
    description=_POOLED + "Calibration: coverage of the central 95 % interval (closest to nominal bold), beside it "
    "what a perfectly calibrated ensemble of as many members covers with the same interpolated interval (below "
    "95 % by construction), and PIT W1 (lowest bold; the steps of a window and the columns of a series are "
    "correlated, so a calibrated method's pooled W1 sits above the independent-values floor); nu: SA's calibrated "
    "nu (SA: Algorithm 2's loss arg-min, SA-sm: the surrogate's scale-matching point), '(boundary)' where the "
    "calibration ended at nu = 1 wanting more dispersion. Coverage at 25/50/75 %: "
    "ett_pooled_levels; MAE and CRPS: ett_pooled_scores; cost: ett_cost.",
    latex_description=r"Pooled over all columns, test windows and steps (normalised units): PI-95 coverage, PIT "
    r"$W_1$ and SA's $\nu$.",
    label="tab:ett_pooled",
    build=pooled_table,
    wide=True,
)
POOLED_LEVELS_TABLE = TableSpec(
    name="ett_pooled_levels",
    groups=tuple(ColumnGroup(f"coverage_{lvl}", f"Cov{lvl}", f"Cov.\\,{lvl}\\%", best="target", target=int(lvl) / 100,
                             bold=1) for lvl in LEVELS[:-1])
    + tuple(ColumnGroup(f"coverage_{lvl}_calibrated", f"Cov{lvl} if calibrated", r"if calibrated", methods=("sa",),
                        header=f"Cov{lvl} if calibrated", latex_header=f"{lvl}\\%, $S$ members")
            for lvl in LEVELS[:-1]),  # fmt: skip
    description=_POOLED + "Coverage of the central 25 / 50 / 75 % intervals (closest to nominal bold); beyond the "
    "paper, what a perfectly calibrated ensemble of as many members covers with the same interpolated intervals.",
    latex_description=r"Pooled over all columns, test windows and steps: coverage of the central 25/50/75\% "
    r"intervals.",
    label="tab:ett_pooled_levels",
    build=pooled_table,
    wide=True,
)
POOLED_SCORES_TABLE = TableSpec(
    name="ett_pooled_scores",
    groups=(ColumnGroup("mae", "MAE", "MAE", bold=1), ColumnGroup("crps", "CRPS", "CRPS", bold=1),
            ColumnGroup("crps_fair", "CRPS fair", "CRPS (fair)", bold=1)),
    description=_POOLED + "MAE of the point forecast and CRPS of the samples (lowest bold): CRPS the ensemble "
    "estimator (all S^2 member pairs, the paper's), CRPS fair the fair estimator (S (S - 1) pairs of distinct "
    "members, unbiased for the law the members come from; the ensemble one is (1 + 1/S) times it for a calibrated "
    "ensemble).",
    latex_description=r"Pooled over all columns, test windows and steps (normalised units): MAE and CRPS (ensemble "
    r"and fair estimators).",
    label="tab:ett_pooled_scores",
    build=pooled_table,
    wide=True,
)

COST_TABLE = TableSpec(
    name="ett_cost",
    groups=(*COST_GROUPS, ColumnGroup("nu", "nu", r"$\nu$", methods=("sa",), header="SA nu",
                                      latex_header=r"SA $\nu$", fmt="significant")),  # fmt: skip
    description="Cost per configuration (wall-clock seconds on the job's device): each method's adaptation (its own "
    "adapter training and calibration; SA: its BO calibration of nu alone, on the shared adapted model), that over "
    "SA's BO seconds (the paper's cost contrast), and the total (adaptation, sampling, and the shared adapter's "
    "training where the method starts from it). Lowest bold.",
    latex_description=r"Wall-clock cost per configuration: adaptation seconds (SA: its BO alone), their ratio to "
    r"SA's BO seconds, and total seconds. Lowest in bold.",
    label="tab:ett_cost",
    build=cost_table,
    wide=True,
)

ZERO_SHOT_TABLE = TableSpec(
    name="ett_zero_shot",
    groups=(ColumnGroup("test_mae", "MAE", "Test MAE", methods=ZERO_SHOT_COLUMNS, short_labels=False, bold=1),),
    description="Test MAE (normalised units) of the backbone's zero-shot forecast, the LoRA-adapted forecast, the "
    "seasonal-naive forecast (repeat the last day) and the last value, on the same test windows.",
    latex_description=r"Test MAE (normalised units): the backbone zero-shot, LoRA-adapted, seasonal-naive (one "
    r"day) and last-value forecasts on the same test windows.",
    label="tab:ett_zero_shot",
    build=None,
)

ETT_TABLE_SPECS = {spec.name: spec for spec in (SHARPNESS_TABLE, SHARPNESS_POOLED_TABLE, POOLED_TABLE,
                                                 POOLED_LEVELS_TABLE, POOLED_SCORES_TABLE, COST_TABLE,
                                                 ZERO_SHOT_TABLE)}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------------------------
def window_row(prepared: Mapping[str, np.ndarray], column: str, window: int, columns: Sequence[str]) -> int:
    """Index of the test series (column ``column`` of the ``window``-th kept test window) in a prepared file."""
    starts = np.unique(prepared["test_start"])
    if not 0 <= window < len(starts):
        raise ValueError(f"window {window}: the prepared file keeps {len(starts)} test windows")
    col = list(columns).index(column)
    rows = np.flatnonzero((prepared["test_start"] == starts[window]) & (prepared["test_column"] == col))
    return int(rows[0])


def _interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return lo, hi


def window_match(runs: Mapping[str, str | os.PathLike], row: int, level: float = 0.95) -> dict[str, dict[str, Any]]:
    """On test series ``row`` (one window of one column) of every run (``runs``: method -> samples.npz): SA's
    native central-``level`` coverage k/H, and per method the factor that matches it on that window and the
    window's mean interval width after matching.

    Returns ``{method: {"covered": k, "steps": H, "factor": c, "width": mean width, "coverage": k'/H,
    "native_coverage": the method's own coverage there before matching, "members": S}}``: SA native
    (c = 1); every other method rescaled around its forecast (:func:`stochattn.scaling.apply_scale`) by the
    smallest c that covers k of the H steps (:func:`stochattn.scaling.fit_conformal_scale` on the window itself,
    ``finite_sample=False``), as the paper matches its shown window; ``coverage`` is the matched coverage (k/H
    unless steps tie). A method without spread on the window cannot be matched: factor and width are NaN."""
    from stochattn.scaling import apply_scale, fit_conformal_scale

    loaded = {m: load_npz(p) for m, p in runs.items()}
    if "sa" not in loaded:
        raise ValueError("window_match: SA's run (the coverage reference) is missing")
    out = {}
    sa = loaded["sa"]
    lo, hi = _interval(sa["samples"][:, row], level)
    y = sa["y"][row]
    k = int(np.sum((y >= lo) & (y <= hi)))
    for method in method_order(loaded):
        run = loaded[method]
        samples, point, truth = run["samples"][:, row], run["point"][row], run["y"][row]
        n_lo, n_hi = _interval(samples, level)
        native = float(np.mean((truth >= n_lo) & (truth <= n_hi)))
        factor = 1.0
        if method != "sa":
            try:
                factor = fit_conformal_scale(samples, point, truth, k / len(truth), level, finite_sample=False)
            except ValueError:  # no spread on this window (or k = 0): nothing to match
                factor = math.nan
        if not math.isfinite(factor):
            out[method] = {"covered": k, "steps": len(truth), "factor": math.nan, "width": math.nan,
                           "coverage": math.nan, "native_coverage": native, "members": samples.shape[0]}  # fmt: skip
            continue
        m_lo, m_hi = _interval(apply_scale(samples, point, factor), level)
        out[method] = {"covered": k, "steps": len(truth), "factor": factor, "width": float(np.mean(m_hi - m_lo)),
                       "coverage": float(np.mean((truth >= m_lo) & (truth <= m_hi))), "native_coverage": native,
                       "members": samples.shape[0]}  # fmt: skip
    return out


def runs_by_config(samples: Iterable[str | os.PathLike], prepared: Iterable[str | os.PathLike]
                   ) -> dict[str, tuple[dict[str, str | os.PathLike], str | os.PathLike]]:  # fmt: skip
    """``{"ETTh1 H=96": ({method: samples.npz}, prepared.npz)}`` from the workflow's file lists
    (``.../<ETTxN>/H<h>/<method>/samples.npz`` and ``.../<ETTxN>/H<h>/prepared.npz``), in configuration order."""
    configs: dict[str, tuple[dict[str, str | os.PathLike], str | os.PathLike]] = {}
    for path in sorted(prepared, key=_config_key):
        folder = Path(path).parent
        runs = {Path(s).parent.name: s for s in samples if Path(s).parent.parent == folder}
        configs[config_label(*_config_key(path))] = (runs, path)
    return configs


def sharpness_table(
    configs: Mapping[str, tuple[Mapping[str, str | os.PathLike], str | os.PathLike]],
    *,
    column: str,
    window: int,
    columns: Sequence[str],
) -> pd.DataFrame:
    """Tidy rows of the paper's Table timesfm_sharpness: per configuration (``configs``: label -> (method ->
    samples.npz, prepared.npz)), on test window ``window`` of column ``column``: ``sa_coverage_95`` (k/H) and
    ``width_at_sa_95`` of every method matched to it there (:func:`window_match`)."""
    rows = []
    for label, (runs, prepared) in configs.items():
        row = window_row(load_npz(prepared), column, window, columns)
        match = window_match(runs, row)
        sa = match["sa"]
        rows.append(mean_row(label, "sa", "sa_coverage_95", [sa["covered"] / sa["steps"]]))
        rows.append(mean_row(label, "sa", "sa_coverage_95_calibrated", [calibrated_coverage(sa["members"], 0.95)]))
        rows.extend(mean_row(label, m, "width_at_sa_95", [v["width"]]) for m, v in match.items())
        # each method's own coverage on the window (the paper's Fig. timesfm_diagnostic; CSV only)
        rows.extend(mean_row(label, m, "native_coverage_95", [v["native_coverage"]]) for m, v in match.items())
        sa_meta = Path(runs["sa"]).with_name("meta.json")  # SA's nu (listed among the table's inputs)
        if sa_meta.is_file():
            rows.extend(nu_rows(label, "sa", load_json(sa_meta)))
    return tidy_frame(rows)


def coverage_figure(
    runs: Mapping[str, str | os.PathLike],
    prepared_path: str | os.PathLike,
    out_base: str | os.PathLike,
    *,
    column: str,
    window: int,
    columns: Sequence[str],
    title: str,
    marker: str = "",
    matched: str | None = None,
    metrics: Mapping[str, str | os.PathLike] | None = None,
    context_shown: int = 192,
) -> list[Path]:
    """One panel per method (``runs``: method -> samples.npz) on one test series: the last ``context_shown``
    context steps, the truth, the point forecast and the central 95 % interval of the samples (interpolated
    quantiles); each panel's title gives the window's coverage (k / H) and the interval's mean width; ``title``
    names the window, ``marker`` (:func:`stochattn.figures.figure_marker`) a stand-in / reduced run. ``matched``: None
    (native intervals); ``"window"``: every method but SA rescaled around its point forecast to SA's coverage on
    this window (:func:`window_match`, the paper's Fig. timesfm_scaled_appendix); ``"cal"``: by
    ``metrics[method]["matched"]["factor_95"]``, fitted on the cal windows to SA's cal coverage (never on this
    window). Returns the PNG and PDF paths."""
    from stochattn.figures import draw_marker, method_color, new_figure, save_figure, subplot_grid
    from stochattn.scaling import apply_scale

    if matched not in (None, "window", "cal"):
        raise ValueError(f"matched must be None, 'window' or 'cal', got {matched!r}")
    prepared = load_npz(prepared_path)
    row = window_row(prepared, column, window, columns)
    on_window = window_match(runs, row) if matched == "window" else {}
    ctx = prepared["x_test"][row][-context_shown:]
    methods = method_order(runs)
    nrows, ncols = subplot_grid(len(methods), max_cols=4)
    fig = new_figure(3.6 * ncols, 2.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, method in zip(axes, methods):
        run = load_npz(runs[method])
        samples, point, y = run["samples"][:, row], run["point"][row], run["y"][row]
        note = "native"
        if matched is not None and method != "sa":
            factor = (on_window[method]["factor"] if matched == "window"
                      else float(load_json(metrics[method])["matched"]["factor_95"]))  # fmt: skip
            if math.isfinite(factor):
                samples = apply_scale(samples, point, factor)
            note = f"x{factor:.2f}"
        lo, hi = _interval(samples)
        steps = np.arange(1, len(y) + 1)
        k = int(np.sum((y >= lo) & (y <= hi)))
        ax.plot(np.arange(-len(ctx) + 1, 1), ctx, color="0.5", lw=0.8)
        ax.fill_between(steps, lo, hi, color=method_color(method), alpha=0.3, lw=0)
        ax.plot(steps, y, color="black", lw=0.9, label="truth")
        ax.plot(steps, point, color=method_color(method), lw=1.0, label="forecast")
        ax.set_title(f"{method_label(method)} ({note}): {k}/{len(y)} = {k / len(y):.0%}, width "
                     f"{float(np.mean(hi - lo)):.2f}", fontsize=8)  # fmt: skip
        ax.tick_params(labelsize=7)
    for ax in axes[len(methods):]:
        ax.set_visible(False)
    fig.suptitle(textwrap.fill(title, 40 * ncols), fontsize=8)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)
