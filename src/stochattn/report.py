"""Tables of the paper's UCI results from per-run ``metrics.json`` files (paper Tables ``tab:uci_master``,
``tab:uci_crps`` and the cost comparison).

Pipeline:
    load_runs          metrics.json files -> one row per (dataset, split, method), scalars + PIT arrays
    uci_master_table   tidy rows for the master table (Acc, Panel A native pooled-PIT W1, Panel B PI-95 ratio)
    uci_crps_table     tidy rows for the CRPS table (mean and std over splits)
    uci_cost_table     tidy rows of wall-clock seconds per method and the adaptation-cost ratio to SA
    to_markdown / to_latex   render a tidy table laid out like the paper (rows = datasets, columns = methods)
    write_table        ``<basename>.csv/.md/.tex`` (atomic) and a ``.prov.json`` beside each

Tidy format (design notes, "Output contracts"): a DataFrame with exactly the columns
``dataset, method, metric, value, std, n``; one row per number (``n`` = number of splits that went into it).

Conventions chosen here (the contract leaves them open):
    * ``std`` is the sample standard deviation over splits (``ddof=1``, :data:`STD_DDOF`); NaN for one split.
    * Pooled-PIT W1 (``w1_native_pooled``) is one number per (dataset, method): ``std`` is NaN there. The spread
      over splits of the per-split W1 is given by the separate audit metric ``w1_native_per_split``.
    * ``pi95_width_ratio`` is a ratio of means (mean over splits of the method's coverage-matched test width /
      mean over splits of SA's native width); its ``std`` is the std over the splits both methods share of the
      per-split ratio. Matched: every method but SA rescaled by a split-conformal factor fitted on the calibration
      part to SA's empirical coverage there (``metrics.json["matched"]``, stochattn.experiments.evaluate).
    * Two SA runs share one calibration: ``sa`` at Algorithm 2's nu (loss arg-min; "SA", the reference) and
      ``sa_match`` at the BO surrogate's scale-matching nu ("SA (scale-match)", short "SA-sm"), treated like a
      baseline (temperature-scaled and coverage-matched).
    * Each mean uses the splits present for that (dataset, method); ``n`` says how many.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stochattn.data.uci import UCI_DATASETS
from stochattn.io import atomic_path, load_json
from stochattn.metrics import w1_uniform
from stochattn.progress import progress as show_progress
from stochattn.provenance import provenance_record, write_provenance

__all__ = [
    "METHODS",
    "METHOD_LABELS",
    "METHOD_SHORT",
    "TIDY_COLUMNS",
    "STD_DDOF",
    "KINDS",
    "dataset_label",
    "method_label",
    "dataset_order",
    "method_order",
    "load_runs",
    "uci_master_table",
    "uci_crps_table",
    "uci_cost_table",
    "to_markdown",
    "to_latex",
    "latex_escape",
    "write_table",
]

METHODS: tuple[str, ...] = ("sa", "sa_match", "mc_dropout", "swag", "multiswag", "hsa", "ivon")
"""Display order of the methods (the paper's column order, SA's scale-matching run after SA)."""

METHOD_LABELS: dict[str, str] = {
    "sa": "SA",
    "sa_match": "SA (scale-match)",
    "mc_dropout": "MC Dropout",
    "swag": "SWAG",
    "multiswag": "MultiSWAG",
    "hsa": "HSA",
    "ivon": "IVON",
}
"""Long method labels (CRPS table, figures)."""

METHOD_SHORT: dict[str, str] = {
    "sa": "SA",
    "sa_match": "SA-sm",
    "mc_dropout": "MC",
    "swag": "SW",
    "multiswag": "MS",
    "hsa": "HSA",
    "ivon": "IV",
}
"""Short method labels (master and cost tables)."""

TIDY_COLUMNS: tuple[str, ...] = ("dataset", "method", "metric", "value", "std", "n")
STD_DDOF = 1
"""Degrees of freedom of every ``std`` over splits (sample standard deviation)."""

KINDS: tuple[str, ...] = ("master", "crps", "cost", "coverage")
"""Table layouts known to :func:`to_markdown` / :func:`to_latex`."""

_SCALAR_BLOCKS = ("native", "scaled")
_OPTIONAL_BLOCKS = ("matched",)  # absent: NaN columns (a run evaluated without SA as the coverage reference)
_MATCHED_KEYS = ("target_coverage", "factor", "cal_coverage", "coverage", "width")
_SECONDS = ("train", "calibrate", "predict")


# --------------------------------------------------------------------------------------------------------------
# labels and ordering
# --------------------------------------------------------------------------------------------------------------
def dataset_label(name: str) -> str:
    """Display name of a built-in data set (``UCI_DATASETS[name].display_name``); other names (a data set added
    by configuration, ``sinusoid``) as given, so a table row names the config's data set exactly."""
    return UCI_DATASETS[name].display_name if name in UCI_DATASETS else str(name)


def method_label(name: str, short: bool = False) -> str:
    """Display label of a method (:data:`METHOD_SHORT` if ``short``, else :data:`METHOD_LABELS`)."""
    table = METHOD_SHORT if short else METHOD_LABELS
    return table.get(name, str(name))


def _ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """Unique ``names`` in the order of ``order``, unknown ones after, alphabetically."""
    uniq = set(names)
    known = [x for x in order if x in uniq]
    return known + sorted(uniq - set(order))


def dataset_order(names: Iterable[str]) -> list[str]:
    """Unique data set names in registry (paper row) order; other names (data sets added by configuration) after,
    alphabetically, as in :func:`stochattn.data.uci.dataset_registry`."""
    return _ordered(names, list(UCI_DATASETS))


def method_order(names: Iterable[str]) -> list[str]:
    """Unique method names in :data:`METHODS` order; unknown names after, alphabetically."""
    return _ordered(names, METHODS)


# --------------------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------------------
_PATH_RE = re.compile(r"(?:^|/)(?P<dataset>[^/]+)/split(?P<split>\d+)/(?P<method>[^/]+)/[^/]+$")


def _parse_split(value: Any, path: str) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"(?:split)?(\d+)", value.strip())
        if m:
            return int(m.group(1))
    raise ValueError(f"{path}: 'split' must be an int or 'split<k>', got {value!r}")


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def load_runs(metrics_paths: Iterable[str | os.PathLike], *, progress: bool = True) -> pd.DataFrame:
    """Read per-run ``metrics.json`` files (UCI contract) into one DataFrame, one row per (dataset, split, method).

    Columns: ``dataset, split (int), method, sigma_y, temperature, nu`` (NaN for methods without one),
    ``native_<key>`` and ``scaled_<key>`` for every scalar of the file's ``"native"`` / ``"scaled"`` blocks
    (``mae, rmse, nrmse, crps, ..., coverage_95, width_95, w1``), ``matched_<key>`` for the optional ``"matched"``
    block (``target_coverage_95, factor_95, cal_coverage_95, coverage_95, width_95``, ... per level; NaN when
    the file has none), ``seconds_train, seconds_calibrate, seconds_predict`` (NaN when absent), ``pit_native`` and
    ``pit_scaled`` (1-D float arrays, object columns) and ``path``. Rows are sorted by data set (registry order),
    method (:data:`METHODS` order) and split.

    ``dataset`` / ``split`` / ``method`` come from the file; where the file lacks one, from the path
    ``.../<dataset>/split<k>/<method>/metrics.json``. Raises FileNotFoundError for a missing file and
    ValueError for a file without ``native`` / ``pit_native`` or for a duplicated (dataset, split, method).
    """
    if isinstance(metrics_paths, (str, bytes, os.PathLike)):
        raise TypeError(f"metrics_paths must be a list of paths, got a single path {metrics_paths!r}")
    paths = [Path(p) for p in metrics_paths]
    if not paths:
        raise ValueError("metrics_paths is empty")
    rows: list[dict[str, Any]] = []
    for path in show_progress(paths, desc="load metrics", unit="file", disable=not progress):
        if not path.is_file():
            raise FileNotFoundError(f"metrics file {os.fspath(path)!r} does not exist")
        rec = load_json(path)
        if not isinstance(rec, Mapping):
            raise ValueError(f"{path}: expected a JSON object")
        where = _PATH_RE.search(path.as_posix())
        row: dict[str, Any] = {}
        for key in ("dataset", "split", "method"):
            value = rec.get(key)
            if value is None and where is not None:
                value = where.group(key)
            if value is None:
                raise ValueError(f"{path}: no {key!r} in the file and the path is not .../<dataset>/split<k>/<method>/")
            row[key] = value
        row["dataset"] = str(row["dataset"])
        row["method"] = str(row["method"])
        row["split"] = _parse_split(row["split"], os.fspath(path))
        row["sigma_y"] = _as_float(rec.get("sigma_y"))
        row["temperature"] = _as_float(rec.get("temperature", 1.0 if row["method"] == "sa" else math.nan))
        row["nu"] = _as_float(rec.get("nu"))
        for block in _SCALAR_BLOCKS:
            values = rec.get(block)
            if values is None and block == "scaled":
                values = rec.get("native")  # NOTE: a file without "scaled" is reported native
            if not isinstance(values, Mapping):
                raise ValueError(f"{path}: missing the {block!r} block of scalar metrics")
            for key, value in values.items():
                row[f"{block}_{key}"] = _as_float(value)
        for block in _OPTIONAL_BLOCKS:
            values = rec.get(block) or {}
            if not isinstance(values, Mapping):
                raise ValueError(f"{path}: the {block!r} block must be a mapping of scalars")
            for key, value in values.items():
                row[f"{block}_{key}"] = _as_float(value)
        seconds = rec.get("seconds") or {}
        for key in _SECONDS:
            row[f"seconds_{key}"] = _as_float(seconds.get(key))
        if "pit_native" not in rec:
            raise ValueError(f"{path}: missing 'pit_native'")
        row["pit_native"] = np.asarray(rec["pit_native"], dtype=np.float64).ravel()
        row["pit_scaled"] = np.asarray(rec.get("pit_scaled", rec["pit_native"]), dtype=np.float64).ravel()
        row["path"] = os.fspath(path)
        rows.append(row)
    df = pd.DataFrame(rows)
    for key in _MATCHED_KEYS:  # the Panel B columns exist even when no file has a matched block
        if f"matched_{key}_95" not in df.columns:
            df[f"matched_{key}_95"] = math.nan
    dup = df.duplicated(["dataset", "split", "method"], keep=False)
    if dup.any():
        bad = df.loc[dup, ["dataset", "split", "method", "path"]].to_dict("records")
        raise ValueError(f"duplicated (dataset, split, method) in metrics_paths: {bad}")
    d_rank = {d: i for i, d in enumerate(dataset_order(df["dataset"]))}
    m_rank = {m: i for i, m in enumerate(method_order(df["method"]))}
    df = df.assign(_d=df["dataset"].map(d_rank), _m=df["method"].map(m_rank))
    df = df.sort_values(["_d", "_m", "split"], kind="stable").drop(columns=["_d", "_m"]).reset_index(drop=True)
    return df


# --------------------------------------------------------------------------------------------------------------
# tidy tables
# --------------------------------------------------------------------------------------------------------------
def _check_runs(runs: Any, needed: Iterable[str]) -> pd.DataFrame:
    if not isinstance(runs, pd.DataFrame):
        raise TypeError(f"runs must be the DataFrame of load_runs, got {type(runs).__name__}")
    missing = [c for c in ("dataset", "split", "method", *needed) if c not in runs.columns]
    if missing:
        raise ValueError(f"runs lacks columns {missing}; build it with load_runs")
    if runs.empty:
        raise ValueError("runs is empty")
    return runs


def _std(values: np.ndarray) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.std(v, ddof=STD_DDOF)) if v.size > STD_DDOF else math.nan


def _mean(values: np.ndarray) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.mean(v)) if v.size else math.nan


def _tidy(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(TIDY_COLUMNS))
    df["value"] = df["value"].astype(np.float64)
    df["std"] = df["std"].astype(np.float64)
    df["n"] = df["n"].astype(np.int64)
    return df.reset_index(drop=True)


def _mean_row(dataset: str, method: str, metric: str, values: Any) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    return {"dataset": dataset, "method": method, "metric": metric, "value": _mean(v), "std": _std(v),
            "n": int(np.isfinite(v).sum())}


def uci_master_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of the master UCI table (paper ``tab:uci_master``) plus audit rows.

    Metrics (per data set; ``n`` = number of splits):
        ``rmse_over_sigma``  (method ``sa`` only) mean over splits of SA's native ``nrmse`` (RMSE/sigma_y of its
                             point, the deterministic backbone prediction); std over splits.
        ``w1_native_pooled`` per method: native PIT values of all splits concatenated, then ``w1_uniform``;
                             ``std`` = NaN (one pooled number).
        ``pi95_width_ratio`` per method: mean over splits of the method's coverage-matched test ``width_95``
                             (``matched`` block: conformal factor fitted on the calibration part to SA's empirical
                             PI-95 coverage there; SA's own is native) / SA's mean native ``width_95``; SA = 1.0
                             exactly. ``std``: std over the shared splits of the per-split ratio. NaN without SA
                             or without a matched block.
        ``pi95_coverage``    per method: mean over splits of the achieved PI-95 TEST coverage at that scaling
                             (SA: native), shown beside Panel B ("Cov.").
    Audit metrics: ``pi<L>_width_ratio`` and ``pi<L>_coverage`` for the other matched levels L (25, 50, 75),
    ``matched_target_coverage_<L>`` (SA's calibration coverage), ``matched_factor_<L>``,
    ``matched_cal_coverage_<L>`` (achieved on the calibration part), ``w1_native_per_split`` (mean/std over splits
    of per-split native W1), ``w1_scaled_pooled`` (pooled scaled PIT), ``coverage_95_native``,
    ``coverage_95_scaled``, ``width_95_native``, ``width_95_scaled`` (mean/std over splits) and ``temperature``
    (mean/std of the fitted T).
    For ``sa`` the reported numbers are native whatever its ``scaled`` / ``matched`` blocks hold.
    """
    runs = _check_runs(runs, ["native_nrmse", "native_width_95", "scaled_width_95", "pit_native"])
    rows: list[dict[str, Any]] = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        methods = method_order(d["method"])
        sa = d[d["method"] == "sa"]
        if not sa.empty:
            rows.append(_mean_row(dataset, "sa", "rmse_over_sigma", sa["native_nrmse"]))
        for method in methods:
            m = d[d["method"] == method]
            pooled = np.concatenate(list(m["pit_native"]))
            rows.append({"dataset": dataset, "method": method, "metric": "w1_native_pooled",
                         "value": w1_uniform(pooled), "std": math.nan, "n": len(m)})
        for key in _matched_levels(d):
            rows += _matched_rows(dataset, d, methods, key)
        for method in methods:
            m = d[d["method"] == method]
            rows.append(_mean_row(dataset, method, "w1_native_per_split", m["native_w1"]
                                  if "native_w1" in m else np.full(len(m), np.nan)))
            pooled_s = np.concatenate(list(m["pit_native" if method == "sa" else "pit_scaled"]))
            rows.append({"dataset": dataset, "method": method, "metric": "w1_scaled_pooled",
                         "value": w1_uniform(pooled_s), "std": math.nan, "n": len(m)})
            for block in _SCALAR_BLOCKS:
                src = "native" if method == "sa" else block
                for key in ("coverage_95", "width_95"):
                    col = f"{src}_{key}"
                    vals = m[col] if col in m else np.full(len(m), np.nan)
                    rows.append(_mean_row(dataset, method, f"{key}_{block}", vals))
            rows.append(_mean_row(dataset, method, "temperature", m["temperature"]))
    return _tidy(rows)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame[name]``, or NaN of the same length where the column is absent."""
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index, dtype=np.float64)


def _matched_levels(runs: pd.DataFrame) -> list[str]:
    """Level keys of the matched block in ``runs`` ("95" first, then the others ascending)."""
    keys = {c[len("matched_width_"):] for c in runs.columns if c.startswith("matched_width_")}
    keys |= {"95"}
    return ["95"] + sorted(keys - {"95"}, key=float)


def _matched_rows(dataset: str, d: pd.DataFrame, methods: list[str], key: str) -> list[dict[str, Any]]:
    """Width ratio to SA and achieved test coverage at matched coverage (level ``key``), and the audit rows."""
    rows: list[dict[str, Any]] = []
    col = _column
    sa = d[d["method"] == "sa"]
    sa_width = _mean(col(sa, f"native_width_{key}")) if not sa.empty else math.nan
    sa_by_split = dict(zip(sa["split"], col(sa, f"native_width_{key}")))
    for method in methods:
        m = d[d["method"] == method]
        is_sa = method == "sa"
        width = col(m, f"native_width_{key}" if is_sa else f"matched_width_{key}")
        cover = col(m, f"native_coverage_{key}" if is_sa else f"matched_coverage_{key}")
        ratio = (1.0 if math.isfinite(sa_width) else math.nan) if is_sa else _mean(width) / sa_width
        per_split = [w / sa_by_split[k] for k, w in zip(m["split"], width) if k in sa_by_split]
        rows.append({"dataset": dataset, "method": method, "metric": f"pi{key}_width_ratio", "value": ratio,
                     "std": _std(np.asarray(per_split)), "n": len(m)})
        rows.append(_mean_row(dataset, method, f"pi{key}_coverage", cover))
        for name in ("target_coverage", "factor", "cal_coverage"):
            rows.append(_mean_row(dataset, method, f"matched_{name}_{key}", col(m, f"matched_{name}_{key}")))
    return rows


def uci_crps_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows of the UCI CRPS table (paper ``tab:uci_crps``): metric ``crps`` per (dataset, method), the mean
    over splits of the native mean CRPS, ``std`` over splits (ddof=1), ``n`` = number of splits."""
    runs = _check_runs(runs, ["native_crps"])
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        for method in method_order(d["method"]):
            rows.append(_mean_row(dataset, method, "crps", d.loc[d["method"] == method, "native_crps"]))
    return _tidy(rows)


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
    runs = _check_runs(runs, [f"seconds_{k}" for k in _SECONDS])
    rows = []
    for dataset in dataset_order(runs["dataset"]):
        d = runs[runs["dataset"] == dataset]
        sa = d[d["method"] == "sa"]
        sa_cal = _mean(sa["seconds_calibrate"]) if not sa.empty else math.nan
        for method in method_order(d["method"]):
            m = d[d["method"] == method]
            parts = {k: m[f"seconds_{k}"].to_numpy(dtype=np.float64) for k in _SECONDS}
            for k in _SECONDS:
                rows.append(_mean_row(dataset, method, f"seconds_{k}", parts[k]))
            total = np.nan_to_num(parts["train"]) + np.nan_to_num(parts["calibrate"]) + np.nan_to_num(parts["predict"])
            adapt = np.nan_to_num(parts["train"]) + np.nan_to_num(parts["calibrate"])
            rows.append(_mean_row(dataset, method, "seconds_total", total))
            rows.append(_mean_row(dataset, method, "seconds_adaptation", adapt))
            ratio = _mean(adapt) / sa_cal if sa_cal and math.isfinite(sa_cal) and sa_cal > 0 else math.nan
            rows.append({"dataset": dataset, "method": method, "metric": "adaptation_over_sa_calibration",
                         "value": ratio, "std": math.nan, "n": len(m)})
            if "nu" in m and np.isfinite(m["nu"].to_numpy(dtype=np.float64)).any():
                rows.append(_mean_row(dataset, method, "nu", m["nu"]))
    return _tidy(rows)


# --------------------------------------------------------------------------------------------------------------
# layout (shared by the markdown and LaTeX renderers)
# --------------------------------------------------------------------------------------------------------------
@dataclass
class _Cell:
    text: str  # plain text, "" for missing
    bold: bool = False
    latex: str | None = None  # LaTeX body when it differs from text


@dataclass
class _Group:
    title: str  # markdown title (plain)
    latex_title: str
    metric: str
    methods: list[str]
    labels: list[str]


@dataclass
class _Layout:
    groups: list[_Group]
    rows: list[tuple[str, list[list[_Cell]]]]  # (dataset label, cells per group)
    description: str


_DESCRIPTIONS = {
    "master": (
        "UCI regression across data sets. SA: nu at Algorithm 2's arg-min of the observed calibration loss (as in "
        "the paper); SA-sm: the same calibration's BO-surrogate scale-matching nu (App. B). Acc.: SA's "
        "deterministic-mean RMSE/sigma_y (mean over splits). Panel A: native pooled-PIT W1 (PIT values of all "
        "splits pooled). Panel B: mean PI-95 test width normalized to SA's mean width (SA = 1.0, native); every "
        "other method (baselines and SA-sm) conformally rescaled, with a factor fitted on the calibration split, to "
        "SA's empirical PI-95 coverage on that calibration split. Cov.: each method's achieved PI-95 test coverage "
        "at that scaling (SA native). Lower is better in Panels A and B; bold marks the best per row in each."
    ),
    "crps": (
        "Ensemble CRPS on UCI regression (native predictions, mean±std over splits; the mean alone where one split "
        "was run). SA: nu at Algorithm 2's "
        "loss arg-min; SA (scale-match): the BO surrogate's scale-matching nu of the same calibration. "
        "Lower is better; bold marks the two best per row."
    ),
    "cost": (
        "Wall-clock cost on UCI (mean over splits). Total: train + calibrate + predict seconds. "
        "Adapt./SA cal.: (train + calibrate) seconds over SA's calibration seconds. nu: mean calibrated nu over "
        "splits (SA: Algorithm 2's loss arg-min; SA-sm: the surrogate's scale-matching point; one shared "
        "calibration, whose seconds both count). Lower is better; bold marks the lowest per row in each seconds "
        "panel."
    ),
    "coverage": (
        "Empirical PI-95 test coverage on UCI (mean over splits): native; every method but SA temperature-scaled "
        "(S-corrected Gaussian NLL on the calibration split); every method but SA conformally matched to SA's "
        "calibration-split coverage. SA native in all panels."
    ),
}

_LATEX_DESCRIPTIONS = {
    "master": (
        r"UCI regression across data sets. SA: $\nu$ at Algorithm~2's arg-min of the observed calibration loss; "
        r"SA-sm: the same calibration's BO-surrogate scale-matching $\nu$ (App.~B). "
        r"\textbf{Acc.}: SA's deterministic-mean RMSE/$\sigma_y$. "
        r"\textbf{Panel~A}: native pooled-PIT $W_1$. \textbf{Panel~B}: mean PI-95 test width normalized to SA's "
        r"per-dataset width (SA native); every other method (baselines and SA-sm) conformally rescaled on the "
        r"calibration split to SA's empirical PI-95 coverage there. \textbf{Cov.}: achieved PI-95 test coverage "
        r"at that scaling. Lower is better in Panels~A and~B."
    ),
    "crps": (
        r"Ensemble CRPS on UCI regression (native predictions, mean$\pm$std over splits; the mean alone where one "
        r"split was run). SA: $\nu$ at "
        r"Algorithm~2's loss arg-min; SA (scale-match): the BO surrogate's scale-matching $\nu$. Lower is better; "
        r"\textbf{bold} marks the two best per row."
    ),
    "cost": (
        r"Wall-clock cost on UCI (mean over splits). \textbf{Total}: train + calibrate + predict seconds. "
        r"\textbf{Adapt./SA cal.}: (train + calibrate) seconds over SA's calibration seconds. $\nu$: mean "
        r"calibrated $\nu$ (SA: Algorithm~2's loss arg-min; SA-sm: scale-matching point; one shared calibration). "
        r"Lower is better."
    ),
    "coverage": (
        r"Empirical PI-95 test coverage on UCI (mean over splits): native; temperature-scaled; conformally matched "
        r"to SA's calibration-split coverage (SA native in all panels)."
    ),
}


def _lookup(tidy: pd.DataFrame) -> dict[tuple[str, str, str], tuple[float, float]]:
    return {(r.dataset, r.method, r.metric): (float(r.value), float(r.std)) for r in tidy.itertuples(index=False)}


def _decimals_for(values: Iterable[float], base: int = 3) -> int:
    """``base`` decimals, more when the row's largest |value| would show fewer than 2 significant digits
    (the paper's Naval CRPS row: 0.0015, 0.0045 with 4 decimals)."""
    v = np.abs(np.asarray([x for x in values if math.isfinite(x) and x != 0.0], dtype=np.float64))
    if v.size == 0:
        return base
    return max(base, 1 - int(math.floor(math.log10(float(v.max())))))


def _fmt_auto(x: float) -> str:
    """Seconds and large ratios: 0 decimals from 100 up, else 3 significant digits."""
    if not math.isfinite(x):
        return ""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 0.001 or x == 0 else f"{x:.2e}"


def _best_mask(shown: list[float], k: int) -> list[bool]:
    """Bold the ``k`` smallest of the displayed (rounded) values; ties at the k-th value are all bold."""
    finite = sorted(v for v in shown if math.isfinite(v))
    if not finite:
        return [False] * len(shown)
    threshold = finite[min(k, len(finite)) - 1]
    return [math.isfinite(v) and v <= threshold for v in shown]


def _layout(tidy: pd.DataFrame, kind: str) -> _Layout:
    if not isinstance(tidy, pd.DataFrame):
        raise TypeError(f"tidy must be a DataFrame, got {type(tidy).__name__}")
    missing = [c for c in TIDY_COLUMNS if c not in tidy.columns]
    if missing:
        raise ValueError(f"tidy lacks columns {missing}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    look = _lookup(tidy)
    datasets = dataset_order(tidy["dataset"])

    def methods_with(metric: str) -> list[str]:
        return method_order(tidy.loc[tidy["metric"] == metric, "method"])

    def group(title: str, latex_title: str, metric: str, methods: list[str], short: bool) -> _Group:
        return _Group(title, latex_title, metric, methods, [method_label(m, short) for m in methods])

    if kind == "master":
        groups = [group("Acc.", r"\textbf{Acc.}", "rmse_over_sigma", ["sa"], True),
                  group("W1", r"\textbf{Panel A: Native $W_1$ $\downarrow$}", "w1_native_pooled",
                        methods_with("w1_native_pooled"), True),
                  group("PI95/SA", r"\textbf{Panel B: Sharp/SA $\downarrow$ (SA\,${=}$\,1.0)}",
                        "pi95_width_ratio", methods_with("pi95_width_ratio"), True),
                  group("Cov.", r"\textbf{Cov.: PI-95 test coverage}", "pi95_coverage",
                        methods_with("pi95_coverage"), True)]
        bold_k = [0, 1, 1, 0]
    elif kind == "crps":
        groups = [group("CRPS", "CRPS", "crps", methods_with("crps"), False)]
        bold_k = [2]
    elif kind == "cost":
        groups = [group("Total s", r"\textbf{Total seconds $\downarrow$}", "seconds_total",
                        methods_with("seconds_total"), True),
                  group("Adapt/SA-cal", r"\textbf{Adaptation / SA calibration $\downarrow$}",
                        "adaptation_over_sa_calibration", methods_with("adaptation_over_sa_calibration"), True),
                  group("nu", r"\textbf{$\nu$}", "nu", methods_with("nu"), True)]
        bold_k = [1, 1, 0]
    else:  # coverage
        groups = [group("Native", r"\textbf{Native PI-95 coverage}", "coverage_95_native",
                        methods_with("coverage_95_native"), True),
                  group("Scaled", r"\textbf{Scaled PI-95 coverage (SA native)}", "coverage_95_scaled",
                        methods_with("coverage_95_scaled"), True),
                  group("Matched", r"\textbf{Matched PI-95 coverage (SA native)}", "pi95_coverage",
                        methods_with("pi95_coverage"), True)]
        bold_k = [0, 0, 0]
    groups_k = [(g, k) for g, k in zip(groups, bold_k) if g.methods]
    if not groups_k:
        raise ValueError(f"tidy has none of the metrics a {kind!r} table shows")
    groups = [g for g, _ in groups_k]

    rows = []
    for dataset in datasets:
        cells_per_group = []
        for g, k in groups_k:
            pairs = [look.get((dataset, m, g.metric), (math.nan, math.nan)) for m in g.methods]
            values = [p[0] for p in pairs]
            if kind in ("master", "coverage"):
                dec = 3
                shown = [round(v, dec) if math.isfinite(v) else math.nan for v in values]
                texts = [f"{v:.{dec}f}" if math.isfinite(v) else "" for v in values]
                latex = [None] * len(values)
            elif kind == "crps":
                dec = _decimals_for(values)
                shown = [round(v, dec) if math.isfinite(v) else math.nan for v in values]
                texts, latex = [], []
                for v, s in pairs:
                    if not math.isfinite(v):
                        texts.append("")
                        latex.append(None)
                        continue
                    if not math.isfinite(s):  # one split: no spread to show
                        texts.append(f"{v:.{dec}f}")
                        latex.append(f"{v:.{dec}f}")
                        continue
                    texts.append(f"{v:.{dec}f}±{s:.{dec}f}")
                    latex.append(f"{v:.{dec}f}{{\\pm}}{s:.{dec}f}")
            else:  # cost
                texts = [_fmt_auto(v) for v in values]
                shown = [float(t) if t else math.nan for t in texts]
                latex = [None] * len(values)
            bold = _best_mask(shown, k) if k > 0 else [False] * len(values)
            cells_per_group.append([_Cell(t, b and bool(t), lt) for t, b, lt in zip(texts, bold, latex)])
        rows.append((dataset_label(dataset), cells_per_group))
    return _Layout(groups, rows, _DESCRIPTIONS[kind])


def _full_caption(caption: str | None, description: str, describe: bool) -> str:
    parts = [p.strip() for p in (description if describe else "", caption or "") if p and p.strip()]
    return " ".join(parts)


def _check_caption(caption: Any) -> str:
    if caption is None:
        return ""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a string or None, got {type(caption).__name__}")
    return caption


def to_markdown(tidy: pd.DataFrame, kind: str, caption: str | None = None, *, describe: bool = True) -> str:
    """Render a tidy table as a GitHub/pandoc markdown table laid out like the paper.

    Rows = data sets (registry order, display names), columns = methods (:data:`METHODS` order) in column groups
    (``kind``: ``"master"`` Acc. | Panel A | Panel B, ``"crps"``, ``"cost"``, ``"coverage"``; see :data:`KINDS`).
    Bold (``**x**``) follows the paper: master, lowest W1 and lowest
    width ratio per row; CRPS, the two lowest per row; cost, the lowest per row and group; coverage, none. Bold is
    decided on the displayed (rounded) numbers, so equal displayed values are bold together. Missing cells: "–".

    Column headers are ``"<group> <method>"`` (e.g. ``W1 SA``, ``PI95/SA MC``). The first line is
    ``Table: <description> <caption>`` (pandoc caption syntax): the standard description of the kind (left out
    with ``describe=False``), then ``caption``, which names the configuration.
    """
    caption = _check_caption(caption)
    lay = _layout(tidy, kind)
    header = ["Dataset"]
    for g in lay.groups:
        if g.metric == "rmse_over_sigma":
            header.append("Acc. RMSE/σ_y")
        elif len(lay.groups) > 1:
            header += [f"{g.title} {lbl}" for lbl in g.labels]
        else:
            header += list(g.labels)
    lines = [f"Table: {_full_caption(caption, lay.description, describe)}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|")
    for label, groups in lay.rows:
        cells = [label]
        for g_cells in groups:
            for c in g_cells:
                cells.append("–" if not c.text else (f"**{c.text}**" if c.bold else c.text))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(
    tidy: pd.DataFrame,
    kind: str,
    caption: str | None = None,
    *,
    label: str | None = None,
    describe: bool = True,
    escape: bool = True,
) -> str:
    """Render a tidy table as a LaTeX ``table*`` (booktabs; the master table in ``\\resizebox``, needs graphicx).

    Same layout and bold rule as :func:`to_markdown`, with the paper's column groups (``\\multicolumn`` headers,
    ``\\cmidrule``, an empty spacer column between groups as in ``tab:uci_master``). CRPS cells are
    ``$3.176{\\pm}0.311$``, bold ones ``$\\mathbf{...}$``. The caption is the standard (LaTeX) description of
    the kind (unless ``describe=False``) followed by ``caption``, plain text escaped for LaTeX unless
    ``escape=False``.
    ``label`` defaults to ``tab:uci_<kind>``. Missing cells: ``--``.
    """
    caption = _check_caption(caption)
    lay = _layout(tidy, kind)
    cap = _full_caption(latex_escape(caption) if escape else caption, _LATEX_DESCRIPTIONS[kind], describe)
    label = label or f"tab:uci_{kind}"
    ngroups = len(lay.groups)
    spacer = ngroups > 1
    colspec = "l"
    for i, g in enumerate(lay.groups):
        if spacer and i > 0:
            colspec += " c"
        colspec += " " + "c" * len(g.methods)
    out = [
        r"% requires \usepackage{booktabs} (and graphicx for \resizebox)",
        r"\begin{table*}[!ht]",
        rf"\caption{{{cap}}}",
        rf"\label{{{label}}}",
        r"\centering",
        r"\setlength{\tabcolsep}{4pt}",
    ]
    wide = kind == "master"
    if wide:
        out.append(r"\resizebox{\textwidth}{!}{%")
    out.append(rf"\begin{{tabular}}{{@{{}}{colspec}@{{}}}}")
    out.append(r"\toprule")
    if spacer:
        top, rules, col = [""], [], 2
        for i, g in enumerate(lay.groups):
            if i > 0:
                top.append("")
                col += 1
            width = len(g.methods)
            top.append(rf"\multicolumn{{{width}}}{{c}}{{{g.latex_title}}}" if width > 1 else g.latex_title)
            rules.append(rf"\cmidrule(lr){{{col}-{col + width - 1}}}")
            col += width
        out.append(" & ".join(top) + r" \\")
        out.append(" ".join(rules))
    header = ["Dataset"]
    for i, g in enumerate(lay.groups):
        if spacer and i > 0:
            header.append("")
        if kind == "master" and g.metric == "rmse_over_sigma":
            header.append(r"RMSE/$\sigma_y$")
        else:
            header += [latex_escape(lbl) for lbl in g.labels]
    out.append(" & ".join(header) + r" \\")
    out.append(r"\midrule")
    for dlabel, groups in lay.rows:
        cells = [latex_escape(dlabel)]
        for i, g_cells in enumerate(groups):
            if spacer and i > 0:
                cells.append("")
            for c in g_cells:
                if not c.text:
                    cells.append("--")
                elif c.latex is not None:
                    cells.append(rf"$\mathbf{{{c.latex}}}$" if c.bold else f"${c.latex}$")
                else:
                    cells.append(rf"\textbf{{{c.text}}}" if c.bold else c.text)
        out.append(" & ".join(cells) + r" \\")
    out.append(r"\bottomrule")
    out.append(r"\end{tabular}" + ("%" if wide else ""))
    if wide:
        out.append("}")
    out.append(r"\end{table*}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------------------------
def _infer_kind(tidy: pd.DataFrame) -> str:
    metrics = set(tidy["metric"]) if "metric" in tidy.columns else set()
    for kind, marker in (("master", "pi95_width_ratio"), ("master", "w1_native_pooled"), ("crps", "crps"),
                         ("cost", "seconds_total")):
        if marker in metrics:
            return kind
    raise ValueError(f"cannot infer the table kind from metrics {sorted(metrics)}; pass kind=")


def write_table(
    tidy: pd.DataFrame,
    basename: str | os.PathLike,
    caption: str | None,
    provenance_kwargs: Mapping[str, Any],
    *,
    kind: str | None = None,
    label: str | None = None,
) -> list[Path]:
    """Write ``<basename>.csv`` (tidy, columns :data:`TIDY_COLUMNS`), ``.md`` and ``.tex`` atomically, and a
    ``<file>.prov.json`` beside each.

    Args:
        tidy: a tidy table from :func:`uci_master_table` / :func:`uci_crps_table` / :func:`uci_cost_table`.
        basename: output path without suffix, e.g. ``results/tables/uci_master``.
        caption: plain-text caption naming the configuration (goes into the .md and .tex).
        provenance_kwargs: keyword arguments of :func:`stochattn.provenance.provenance_record` (``rule``,
            ``inputs``, ``config_subset``, ``seeds``; optionally ``started``/``finished``, ``extra``, ``repo_dir``).
            ``outputs`` defaults to the three table files; ``started``/``finished`` to the time of this call.
        kind: layout (:data:`KINDS`); inferred from the metrics when None.
        label: LaTeX label (default ``tab:uci_<kind>``).

    Returns:
        ``[csv, md, tex, csv.prov.json, md.prov.json, tex.prov.json]``.
    """
    started = time.time()
    if not isinstance(provenance_kwargs, Mapping):
        raise TypeError(f"provenance_kwargs must be a mapping, got {type(provenance_kwargs).__name__}")
    if not isinstance(tidy, pd.DataFrame) or list(tidy.columns) != list(TIDY_COLUMNS):
        raise ValueError(f"tidy must be a DataFrame with exactly the columns {list(TIDY_COLUMNS)}")
    missing = [k for k in ("rule", "inputs", "config_subset", "seeds") if k not in provenance_kwargs]
    if missing:
        raise ValueError(f"provenance_kwargs lacks {missing} (keyword arguments of provenance_record)")
    kind = kind or _infer_kind(tidy)
    base = os.fspath(basename)
    csv_path, md_path, tex_path = Path(base + ".csv"), Path(base + ".md"), Path(base + ".tex")
    md = to_markdown(tidy, kind, caption)
    tex = to_latex(tidy, kind, caption, label=label)
    with atomic_path(csv_path) as tmp:
        tidy.to_csv(tmp, index=False)
    for path, text in ((md_path, md), (tex_path, tex)):
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    outputs = [csv_path, md_path, tex_path]
    kwargs = dict(provenance_kwargs)
    kwargs.setdefault("outputs", outputs)
    kwargs.setdefault("started", started)
    kwargs.setdefault("finished", time.time())
    extra = dict(kwargs.get("extra") or {})
    extra.setdefault("table_kind", kind)
    extra.setdefault("caption", caption or "")
    kwargs["extra"] = extra
    record = provenance_record(**kwargs)
    provs = [write_provenance(p, record) for p in outputs]
    return [*outputs, *provs]
