"""Tables and figures of the ETT experiment (paper Table ``timesfm_sharpness``, Fig. ``timesfm_diagnostic``,
Fig. ``timesfm_scaled_appendix``) over the shared machinery of :mod:`stochattn.report` and :mod:`stochattn.figures`.

    load_ett_runs        metrics.json of every (configuration, method) -> tidy rows (row label "ETTh1 H=96")
    SHARPNESS_TABLE      SA's PI-95 coverage and every method's mean PI-95 width at that coverage (matched by a
                         conformal factor fitted on the cal windows to SA's cal coverage), two sharpest bold
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
import pandas as pd

from stochattn.io import load_json, load_npz
from stochattn.report import ColumnGroup, TableSpec, mean_row, method_label, method_order, tidy_frame

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
    ``seconds_total``, ``nu``), sorted by data set, horizon and method order."""
    rows = []
    for path in metrics_paths:
        dataset, horizon, method = _parse(path)
        m = load_json(path)
        row: dict[str, Any] = {"dataset": dataset, "horizon": horizon, "config": config_label(dataset, horizon),
                               "method": method, "nu": m.get("nu")}  # fmt: skip
        row.update({f"native_{k}": v for k, v in m["native"].items()})
        row.update({f"matched_{k}": v for k, v in m.get("matched", {}).items()})
        row["seconds_total"] = float(sum(v for v in m["seconds"].values() if isinstance(v, (int, float))))
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


def sharpness_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows: ``sa_coverage_95`` (SA's native test coverage) and ``width_at_sa_95`` per method (SA native,
    every other run conformally matched to SA's cal coverage)."""
    rows = []
    for (_, _), d in runs.groupby(["dataset", "horizon"], sort=False):
        label = d["config"].iloc[0]
        for _, run in d.iterrows():
            if run["method"] == "sa":
                rows.append(mean_row(label, "sa", "sa_coverage_95", [_value(run, "native_coverage_95")]))
                width = _value(run, "native_width_95")
            else:
                width = _value(run, "matched_width_95")
            rows.append(mean_row(label, run["method"], "width_at_sa_95", [width]))
    return tidy_frame(rows)


def pooled_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of native pooled metrics: ``coverage_<L>``, ``w1``, ``mae``, ``crps`` and ``seconds``."""
    rows = []
    for _, run in runs.iterrows():
        for key in (*(f"coverage_{lvl}" for lvl in LEVELS), "w1", "mae", "crps"):
            rows.append(mean_row(run["config"], run["method"], key, [_value(run, f"native_{key}")]))
        rows.append(mean_row(run["config"], run["method"], "seconds", [run["seconds_total"]]))
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
SHARPNESS_TABLE = TableSpec(
    name="ett_sharpness",
    groups=(
        ColumnGroup("sa_coverage_95", "SA cov.", r"SA cov.", methods=("sa",), header="SA PI-95 cov.",
                    latex_header=r"SA PI-95 cov."),  # fmt: skip
        ColumnGroup("width_at_sa_95", "Width", _SHARP, bold=2),
    ),
    description="TimesFM sharpness at matched coverage (Table timesfm_sharpness): SA's empirical PI-95 coverage on "
    "the test windows and each method's mean PI-95 width at SA's coverage (normalised units; SA native, every other "
    "run rescaled by a conformal factor fitted on the cal windows to SA's cal coverage). Lower is sharper; the two "
    "sharpest are bold.",
    latex_description=r"TimesFM sharpness at matched coverage: SA's empirical PI-95 coverage and each method's mean "
    r"PI-95 width at SA's coverage (normalised units; baselines conformally rescaled on the cal windows). Two "
    r"sharpest in bold.",
    label="tab:ett_sharpness",
    build=sharpness_table,
)

POOLED_TABLE = TableSpec(
    name="ett_pooled",
    groups=(
        *(ColumnGroup(f"coverage_{lvl}", f"Cov{lvl}", f"Cov.\\,{lvl}\\%", best="target", target=int(lvl) / 100,
                      bold=1) for lvl in LEVELS),  # fmt: skip
        ColumnGroup("w1", "W1", r"$W_1$ (PIT)", bold=1),
        ColumnGroup("mae", "MAE", "MAE", bold=1),
        ColumnGroup("crps", "CRPS", "CRPS", bold=1),
        ColumnGroup("seconds", "s", "Cost (s)", fmt="significant", bold=1),
    ),
    description="Beyond the paper: native metrics pooled over every column, test window and step of each "
    "configuration (normalised units): central-interval coverage at 25/50/75/95 % (closest to nominal bold), PIT "
    "W1, MAE of the point forecast, CRPS (lower bold) and total wall-clock seconds of the method (training of its "
    "own adapters, calibration, sampling).",
    latex_description=r"Pooled over all columns, test windows and steps (normalised units): coverage of the "
    r"central 25/50/75/95\% intervals, PIT $W_1$, MAE, CRPS and wall-clock cost per method.",
    label="tab:ett_pooled",
    build=pooled_table,
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

ETT_TABLE_SPECS = {spec.name: spec for spec in (SHARPNESS_TABLE, POOLED_TABLE, ZERO_SHOT_TABLE)}


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


def coverage_figure(
    runs: Mapping[str, str | os.PathLike],
    prepared_path: str | os.PathLike,
    out_base: str | os.PathLike,
    *,
    column: str,
    window: int,
    columns: Sequence[str],
    title: str,
    matched: bool = False,
    metrics: Mapping[str, str | os.PathLike] | None = None,
    context_shown: int = 192,
) -> list[Path]:
    """One panel per method (``runs``: method -> samples.npz) on one test series: the last ``context_shown``
    context steps, the truth, the point forecast and the central 95 % interval of the samples (interpolated
    quantiles); the title gives the window's coverage (k / H). ``matched``: every method but SA rescaled around
    its point forecast by ``metrics[method]["matched"]["factor_95"]`` (fitted on the cal windows to SA's cal
    coverage). Returns the PNG and PDF paths."""
    from stochattn.figures import method_color, new_figure, save_figure, subplot_grid
    from stochattn.scaling import apply_scale

    prepared = load_npz(prepared_path)
    row = window_row(prepared, column, window, columns)
    ctx = prepared["x_test"][row][-context_shown:]
    methods = method_order(runs)
    nrows, ncols = subplot_grid(len(methods), max_cols=4)
    fig = new_figure(3.6 * ncols, 2.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, method in zip(axes, methods):
        run = load_npz(runs[method])
        samples, point, y = run["samples"][:, row], run["point"][row], run["y"][row]
        note = "native"
        if matched and method != "sa":
            factor = float(load_json(metrics[method])["matched"]["factor_95"])
            samples = apply_scale(samples, point, factor)
            note = f"x{factor:.2f}"
        lo, hi = _interval(samples)
        steps = np.arange(1, len(y) + 1)
        k = int(np.sum((y >= lo) & (y <= hi)))
        ax.plot(np.arange(-len(ctx) + 1, 1), ctx, color="0.5", lw=0.8)
        ax.fill_between(steps, lo, hi, color=method_color(method), alpha=0.3, lw=0)
        ax.plot(steps, y, color="black", lw=0.9, label="truth")
        ax.plot(steps, point, color=method_color(method), lw=1.0, label="forecast")
        ax.set_title(f"{method_label(method)} ({note}): {k}/{len(y)} = {k / len(y):.0%}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(methods):]:
        ax.set_visible(False)
    fig.suptitle(textwrap.fill(title, 40 * ncols), fontsize=8)
    return save_figure(fig, out_base)
