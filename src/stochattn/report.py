"""Shared table machinery: per-run ``metrics.json`` files -> tidy tables -> csv / markdown / LaTeX.

Every experiment's tables go through these steps; what is experiment-specific (which numbers a table holds, how it
is laid out, what its caption says) lives in the experiment's module (``stochattn.experiments.uci_tables``, ...):

    load_runs                metrics.json files -> one row per (dataset, split, method), scalars + PIT arrays
    <experiment>_<x>_table   runs -> tidy rows (built with :func:`mean_row` / :func:`tidy_frame`)
    TableSpec / ColumnGroup  how a tidy table is laid out: column groups, number format, which cells are bold,
                             descriptions for markdown and LaTeX
    to_markdown / to_latex   render a tidy table by a :class:`TableSpec` (rows = datasets, columns = methods)
    write_table              ``<basename>.csv/.md/.tex`` (atomic) and a ``.prov.json`` beside each

Tidy format (design notes, "Output contracts"): a DataFrame with exactly the columns
``dataset, method, metric, value, std, n``; one row per number (``n`` = number of splits that went into it).
``std`` is the sample standard deviation over splits (``ddof=1``, :data:`STD_DDOF`); NaN for one split.

Labels and orders are shared registries: :data:`METHOD_LABELS` (method -> long and short label, in column order)
and :data:`DATASET_LABELS` (dataset -> label, in row order). An experiment with a new method or data set adds one
entry there; names in neither show as given, after the known ones, alphabetically.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.data.uci import UCI_DATASETS
from stochattn.extras import requires
from stochattn.io import atomic_path, load_json
from stochattn.progress import progress as show_progress
from stochattn.provenance import provenance_record, write_provenance

with requires("workflow"):
    import pandas as pd

__all__ = [
    "METHOD_LABELS",
    "NU_METRICS",
    "COST_GROUPS",
    "cost_rows",
    "nu_label",
    "nu_rows",
    "DATASET_LABELS",
    "TIDY_COLUMNS",
    "STD_DDOF",
    "SCALAR_BLOCKS",
    "SECONDS_KEYS",
    "dataset_label",
    "method_label",
    "dataset_order",
    "method_order",
    "as_float",
    "load_runs",
    "check_runs",
    "column",
    "finite_mean",
    "finite_std",
    "mean_row",
    "tidy_frame",
    "ColumnGroup",
    "TableSpec",
    "to_markdown",
    "to_latex",
    "latex_escape",
    "write_table",
]

METHOD_LABELS: dict[str, tuple[str, str]] = {
    "sa": ("SA", "SA"),
    "sa_match": ("SA (scale-match)", "SA-sm"),
    "mc_dropout": ("MC Dropout", "MC"),
    "contextual_dropout": ("Contextual Dropout", "CD"),
    "swag": ("SWAG", "SW"),
    "multiswag": ("MultiSWAG", "MS"),
    "hsa": ("HSA", "HSA"),
    "ivon": ("IVON", "IV"),
}
"""Method -> (long label, short label); the order is the column order of every table and figure (the paper's,
SA's scale-matching run after SA). Long labels: CRPS table, figures; short: master and cost tables."""

DATASET_LABELS: dict[str, str] = {
    **{name: spec.display_name for name, spec in UCI_DATASETS.items()},
    **{name: name for name in ("ETTh1", "ETTh2", "ETTm1", "ETTm2")},
    # the ETT tables' rows are configurations (stochattn.experiments.ett_report.config_label)
    **{f"{name} H={h}": f"{name} H={h}" for name in ("ETTh1", "ETTh2", "ETTm1", "ETTm2") for h in (96, 192)},
}
"""Dataset -> display label; the order is the row order of every table (UCI: the paper's Table 3, then ETT)."""

TIDY_COLUMNS: tuple[str, ...] = ("dataset", "method", "metric", "value", "std", "n")
STD_DDOF = 1
"""Degrees of freedom of every ``std`` over splits (sample standard deviation)."""

SCALAR_BLOCKS: tuple[str, ...] = ("native", "scaled")
"""The blocks of scalar metrics every metrics.json has (``native_<key>`` / ``scaled_<key>`` columns of runs)."""
SECONDS_KEYS: tuple[str, ...] = ("train", "calibrate", "predict")
"""The ``seconds`` of a run (``seconds_<key>`` columns of runs)."""

# absent: NaN columns (a run evaluated without SA as the coverage reference; point_residual: metrics files written
# before it was recorded)
_OPTIONAL_BLOCKS = ("matched", "point_residual")
_MATCHED_KEYS = ("target_coverage", "factor", "cal_coverage", "coverage", "width")


# --------------------------------------------------------------------------------------------------------------
# labels and ordering
# --------------------------------------------------------------------------------------------------------------
def dataset_label(name: str) -> str:
    """Display label of a data set (:data:`DATASET_LABELS`); other names (a data set added by configuration,
    ``sinusoid``) as given, so a table row names the config's data set exactly."""
    return DATASET_LABELS.get(name, str(name))


def method_label(name: str, short: bool = False) -> str:
    """Display label of a method (:data:`METHOD_LABELS`, the short one if ``short``); other names as given."""
    labels = METHOD_LABELS.get(name)
    return str(name) if labels is None else labels[1 if short else 0]


def nu_label(label: str, nu: float, at_boundary: bool = False) -> str:
    """An SA label with its calibrated nu, as the paper labels it: ``"SA (nu=4)"``; ``"SA (nu=1, boundary)"`` when
    the calibration ended at the domain's low end wanting more dispersion (``calibration.json`` ``at_boundary``);
    ``label`` unchanged when nu is not finite."""
    if not math.isfinite(nu):
        return label
    return f"{label} (nu={nu:g}{', boundary' if at_boundary else ''})"


NU_METRICS = ("nu", "at_boundary")
"""Tidy metrics that label a method's row (:func:`nu_label`) instead of filling a column: a table of one data set
(``TableSpec.rows == "methods"``) labels each method that has them."""


def nu_rows(row: str, method: str, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tidy rows (:data:`NU_METRICS`) of an SA run's nu and boundary flag (a metrics.json or meta.json with
    ``nu``, ``at_boundary``), which label its row or fill a nu column; none for a run without nu."""
    nu = as_float(record.get("nu"))
    if not math.isfinite(nu):
        return []
    boundary = 1.0 if as_float(record.get("at_boundary")) == 1.0 else 0.0
    return [mean_row(row, method, "nu", [nu]), mean_row(row, method, "at_boundary", [boundary])]


def cost_rows(row: str, method: str, seconds: Mapping[str, Any], sa_calibrate: float) -> list[dict[str, Any]]:
    """Tidy cost rows of one run (its ``seconds``: train, calibrate, predict and, for a method starting from a
    shared adapted model, backbone_train): ``seconds_total`` (all of them), ``seconds_adaptation`` (train +
    calibrate: what the method itself spends to obtain its predictive distribution; SA: its BO alone) and
    ``adaptation_over_sa_calibration`` (that over SA's BO seconds ``sa_calibrate``; the paper's cost contrast)."""
    def part(key: str) -> float:
        v = as_float(seconds.get(key))
        return v if math.isfinite(v) else 0.0

    total = sum(part(k) for k, v in seconds.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    adaptation = part("train") + part("calibrate")
    ratio = adaptation / sa_calibrate if math.isfinite(sa_calibrate) and sa_calibrate > 0 else math.nan
    return [mean_row(row, method, "seconds_total", [total]), mean_row(row, method, "seconds_adaptation", [adaptation]),
            mean_row(row, method, "adaptation_over_sa_calibration", [ratio])]  # fmt: skip


def _ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """Unique ``names`` in the order of ``order``, unknown ones after, alphabetically."""
    uniq = set(names)
    known = [x for x in order if x in uniq]
    return known + sorted(uniq - set(order))


def dataset_order(names: Iterable[str]) -> list[str]:
    """Unique data set names in :data:`DATASET_LABELS` (paper row) order; other names (data sets added by
    configuration) after, alphabetically, as in :func:`stochattn.data.uci.dataset_registry`."""
    return _ordered(names, list(DATASET_LABELS))


def method_order(names: Iterable[str]) -> list[str]:
    """Unique method names in :data:`METHOD_LABELS` order; unknown names after, alphabetically."""
    return _ordered(names, list(METHOD_LABELS))


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


def as_float(value: Any) -> float:
    """``float(value)``, NaN where that fails (None, a string, ...)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def load_runs(metrics_paths: Iterable[str | os.PathLike], *, progress: bool = True) -> pd.DataFrame:
    """Read per-run ``metrics.json`` files (:func:`stochattn.experiments.evaluate.evaluate`'s format) into one
    DataFrame, one row per (dataset, split, method).

    Columns: ``dataset, split (int), method, sigma_y, temperature, nu`` (NaN for methods without one), ``native_<key>``
    and ``scaled_<key>`` for every scalar of the file's ``"native"`` / ``"scaled"`` blocks (``mae, rmse, nrmse, crps,
    ..., coverage_95, width_95, w1``), ``matched_<key>`` for the optional ``"matched"`` block (``target_coverage_95,
    factor_95, cal_coverage_95, coverage_95, width_95``, ... per level; NaN when the file has none),
    ``point_residual_<key>`` for its optional ``"point_residual"`` block (``n, mean, sd, z`` and ``cal_n, ...``: the
    point prediction's bias in sigma_y units; absent columns for files without one), ``seconds_train, seconds_calibrate,
    seconds_predict`` (NaN when absent), ``pit_native`` and ``pit_scaled`` (1-D float arrays, object columns) and
    ``path``. Rows are sorted by data set (:func:`dataset_order`), method (:func:`method_order`) and split.

    ``dataset`` / ``split`` / ``method`` come from the file; where the file lacks one, from the workflow's run
    layout ``.../<dataset>/split<k>/<method>/metrics.json``. Raises FileNotFoundError for a missing file and
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
        row["sigma_y"] = as_float(rec.get("sigma_y"))
        row["temperature"] = as_float(rec.get("temperature", 1.0 if row["method"] == "sa" else math.nan))
        row["nu"] = as_float(rec.get("nu"))
        row["at_boundary"] = as_float(rec.get("at_boundary"))
        for block in SCALAR_BLOCKS:
            values = rec.get(block)
            if values is None and block == "scaled":
                values = rec.get("native")  # NOTE: a file without "scaled" is reported native
            if not isinstance(values, Mapping):
                raise ValueError(f"{path}: missing the {block!r} block of scalar metrics")
            for key, value in values.items():
                row[f"{block}_{key}"] = as_float(value)
        for block in _OPTIONAL_BLOCKS:
            values = rec.get(block) or {}
            if not isinstance(values, Mapping):
                raise ValueError(f"{path}: the {block!r} block must be a mapping of scalars")
            for key, value in values.items():
                row[f"{block}_{key}"] = as_float(value)
        seconds = rec.get("seconds") or {}
        for key in SECONDS_KEYS:
            row[f"seconds_{key}"] = as_float(seconds.get(key))
        if "pit_native" not in rec:
            raise ValueError(f"{path}: missing 'pit_native'")
        row["pit_native"] = np.asarray(rec["pit_native"], dtype=np.float64).ravel()
        row["pit_scaled"] = np.asarray(rec.get("pit_scaled", rec["pit_native"]), dtype=np.float64).ravel()
        row["path"] = os.fspath(path)
        rows.append(row)
    df = pd.DataFrame(rows)
    for key in _MATCHED_KEYS:  # the PI-95 matched columns exist even when no file has a matched block
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
# building tidy tables
# --------------------------------------------------------------------------------------------------------------
def check_runs(runs: Any, needed: Iterable[str]) -> pd.DataFrame:
    """``runs`` itself after checking that it is a non-empty :func:`load_runs` frame with the columns ``needed``."""
    if not isinstance(runs, pd.DataFrame):
        raise TypeError(f"runs must be the DataFrame of load_runs, got {type(runs).__name__}")
    missing = [c for c in ("dataset", "split", "method", *needed) if c not in runs.columns]
    if missing:
        raise ValueError(f"runs lacks columns {missing}; build it with load_runs")
    if runs.empty:
        raise ValueError("runs is empty")
    return runs


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame[name]``, or NaN of the same length where the column is absent."""
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index, dtype=np.float64)


def finite_std(values: Any) -> float:
    """Sample standard deviation (``ddof`` :data:`STD_DDOF`) of the finite ``values``; NaN for too few."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.std(v, ddof=STD_DDOF)) if v.size > STD_DDOF else math.nan


def finite_mean(values: Any) -> float:
    """Mean of the finite ``values``; NaN for none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.mean(v)) if v.size else math.nan


def mean_row(dataset: str, method: str, metric: str, values: Any) -> dict[str, Any]:
    """One tidy row: mean and std over splits of the finite ``values``, ``n`` = how many are finite."""
    v = np.asarray(values, dtype=np.float64)
    return {"dataset": dataset, "method": method, "metric": metric, "value": finite_mean(v), "std": finite_std(v),
            "n": int(np.isfinite(v).sum())}


def tidy_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The tidy DataFrame (columns :data:`TIDY_COLUMNS`, float value/std, int64 n) of ``rows``."""
    df = pd.DataFrame(rows, columns=list(TIDY_COLUMNS))
    df["value"] = df["value"].astype(np.float64)
    df["std"] = df["std"].astype(np.float64)
    df["n"] = df["n"].astype(np.int64)
    return df.reset_index(drop=True)


# --------------------------------------------------------------------------------------------------------------
# table specifications
# --------------------------------------------------------------------------------------------------------------
_FORMATS = ("fixed", "adaptive", "significant")
_BEST = ("min", "max", "target")


@dataclass(frozen=True)
class ColumnGroup:
    """One column group of a table: the values of one ``metric``, one column per method.

    Attributes:
        metric: the tidy ``metric`` shown.
        title: markdown group title; column headers are ``"<title> <method label>"`` when the table shows more
            than one group, the method labels alone otherwise.
        latex_title: LaTeX group header (a ``\\multicolumn`` over the group's columns when it has several).
        methods: fixed columns (shown even where a method has no row); None: every method with rows of ``metric``,
            in :func:`method_order`.
        short_labels: short (:data:`METHOD_LABELS`' second) or long method labels.
        header / latex_header: the header of each column instead of ``"<title> <method>"`` / the method label
            (a one-column group such as the master table's "Acc. RMSE/σ_y").
        fmt: ``"fixed"``: ``decimals`` decimals; ``"adaptive"``: at least ``decimals``, more where the row's
            largest |value| would show fewer than 2 significant digits; ``"significant"``: 3 significant digits,
            none from 100 up (seconds, large ratios).
        decimals: see ``fmt``.
        show_std: cells ``mean±std`` (the std in the same format; LaTeX ``$m{\\pm}s$``), the mean alone where the
            std is NaN (one split).
        best: which cells are best: ``"min"``, ``"max"`` or ``"target"`` (closest to ``target``).
        target: the target value of ``best="target"``.
        bold: how many best cells of a row are bold (0: none); decided on the displayed (rounded) numbers, so
            ties at the last bold place are all bold.
    """

    metric: str
    title: str
    latex_title: str
    methods: tuple[str, ...] | None = None
    short_labels: bool = True
    header: str | None = None
    latex_header: str | None = None
    fmt: str = "fixed"
    decimals: int = 3
    show_std: bool = False
    best: str = "min"
    target: float | None = None
    bold: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in _FORMATS:
            raise ValueError(f"ColumnGroup {self.metric!r}: fmt must be one of {_FORMATS}, got {self.fmt!r}")
        if self.best not in _BEST:
            raise ValueError(f"ColumnGroup {self.metric!r}: best must be one of {_BEST}, got {self.best!r}")
        if self.best == "target" and self.target is None:
            raise ValueError(f"ColumnGroup {self.metric!r}: best='target' needs target=")
        if self.bold < 0 or self.decimals < 0:
            raise ValueError(f"ColumnGroup {self.metric!r}: bold and decimals must be >= 0")


@dataclass(frozen=True)
class TableSpec:
    """How one table is laid out and described; an experiment declares its tables as module-level constants.

    Attributes:
        name: the table's kind, recorded in the provenance (``extra.table_kind``).
        groups: the column groups, left to right; a group without any method is left out.
        description: the standard markdown description, put before the caller's caption.
        latex_description: the same for LaTeX (LaTeX markup, not escaped).
        label: the default LaTeX ``\\label``.
        build: the function ``runs -> tidy`` of the table (the workflow's ``load_runs -> build -> write_table``);
            None for a layout that only renders (e.g. another view of a table built elsewhere).
        wide: LaTeX: the tabular inside ``\\resizebox{\\textwidth}{!}`` (needs graphicx).
        rows: ``"datasets"`` (one row per data set, one column per method in each group) or ``"methods"`` (a table
            of ONE data set: one row per method, one column per group, bold decided down each column, as the
            paper's ClimaX tables).
    """

    name: str
    groups: tuple[ColumnGroup, ...]
    description: str
    latex_description: str
    label: str
    build: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    wide: bool = False
    rows: str = "datasets"

    def __post_init__(self) -> None:
        if self.rows not in ("datasets", "methods"):
            raise ValueError(f"TableSpec {self.name!r}: rows must be 'datasets' or 'methods', got {self.rows!r}")


COST_GROUPS = (
    ColumnGroup("seconds_adaptation", "Adapt. s", r"Adaptation (s) $\downarrow$", fmt="significant", bold=1),
    ColumnGroup("adaptation_over_sa_calibration", "Adapt./SA-BO", r"Adaptation / SA's BO $\downarrow$",
                fmt="significant", bold=1),
    ColumnGroup("seconds_total", "Total s", r"Total (s) $\downarrow$", fmt="significant", bold=1),
)
"""Column groups of a foundation-model cost table (:func:`cost_rows`): adaptation seconds (SA: its BO), their ratio
to SA's BO seconds, total seconds."""


# --------------------------------------------------------------------------------------------------------------
# layout (shared by the markdown and LaTeX renderers)
# --------------------------------------------------------------------------------------------------------------
@dataclass
class _Cell:
    text: str  # plain text, "" for missing
    bold: bool = False
    latex: str | None = None  # LaTeX (math mode) body when it differs from text


@dataclass
class _Group:
    spec: ColumnGroup
    methods: list[str]
    labels: list[str]


@dataclass
class _Layout:
    groups: list[_Group]
    rows: list[tuple[str, list[list[_Cell]]]]  # (row label, cells per group)
    by_method: bool = False  # rows are methods, one column per group (TableSpec.rows == "methods")


def _lookup(tidy: pd.DataFrame) -> dict[tuple[str, str, str], tuple[float, float]]:
    return {(r.dataset, r.method, r.metric): (float(r.value), float(r.std)) for r in tidy.itertuples(index=False)}


def _decimals_for(values: Iterable[float], base: int = 3) -> int:
    """``base`` decimals, more when the row's largest |value| would show fewer than 2 significant digits
    (the paper's Naval CRPS row: 0.0015, 0.0045 with 4 decimals)."""
    v = np.abs(np.asarray([x for x in values if math.isfinite(x) and x != 0.0], dtype=np.float64))
    if v.size == 0:
        return base
    return max(base, 1 - math.floor(math.log10(float(v.max()))))


def _fmt_significant(x: float) -> str:
    """Seconds and large ratios: 0 decimals from 100 up, else 3 significant digits."""
    if not math.isfinite(x):
        return ""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 0.001 or x == 0 else f"{x:.2e}"


def _best_mask(shown: list[float], g: ColumnGroup) -> list[bool]:
    """Bold the ``g.bold`` best of the displayed (rounded) values; ties at the last bold value are all bold."""
    if g.bold <= 0:
        return [False] * len(shown)
    if g.best == "min":
        keys = list(shown)
    elif g.best == "max":
        keys = [-v for v in shown]
    else:  # distance to the target, rounded so that equal displayed distances tie
        keys = [round(abs(v - float(g.target)), 12) for v in shown]  # type: ignore[arg-type]
    finite = sorted(k for k in keys if math.isfinite(k))
    if not finite:
        return [False] * len(shown)
    threshold = finite[min(g.bold, len(finite)) - 1]
    return [math.isfinite(k) and k <= threshold for k in keys]


def _cells(g: ColumnGroup, pairs: list[tuple[float, float]]) -> list[_Cell]:
    """The cells of one row of group ``g`` from its (value, std) pairs."""
    values = [v for v, _ in pairs]
    if g.fmt == "significant":
        fmt = _fmt_significant
    else:
        dec = _decimals_for(values, g.decimals) if g.fmt == "adaptive" else g.decimals

        def fmt(x: float) -> str:
            return f"{x:.{dec}f}" if math.isfinite(x) else ""

    texts = [fmt(v) for v in values]
    shown = [float(t) if t else math.nan for t in texts]
    cells = []
    for (v, s), text, bold in zip(pairs, texts, _best_mask(shown, g)):  # noqa: B007 - keeps the code hash
        latex = None
        if g.show_std and text:
            latex = text
            if math.isfinite(s):  # one split: no spread to show
                latex = f"{text}{{\\pm}}{fmt(s)}"
                text = f"{text}±{fmt(s)}"
        cells.append(_Cell(text, bold and bool(text), latex))
    return cells


def _layout(tidy: pd.DataFrame, spec: TableSpec) -> _Layout:
    if not isinstance(tidy, pd.DataFrame):
        raise TypeError(f"tidy must be a DataFrame, got {type(tidy).__name__}")
    if not isinstance(spec, TableSpec):
        raise TypeError(f"spec must be a TableSpec, got {type(spec).__name__}")
    missing = [c for c in TIDY_COLUMNS if c not in tidy.columns]
    if missing:
        raise ValueError(f"tidy lacks columns {missing}")
    look = _lookup(tidy)
    if spec.rows == "methods":
        return _method_rows_layout(tidy, spec, look)
    groups = []
    for g in spec.groups:
        methods = list(g.methods) if g.methods is not None else method_order(tidy.loc[tidy["metric"] == g.metric,
                                                                                     "method"])
        if methods:
            groups.append(_Group(g, methods, [method_label(m, g.short_labels) for m in methods]))
    if not groups:
        raise ValueError(f"tidy has none of the metrics a {spec.name!r} table shows")
    rows = []
    for dataset in dataset_order(tidy["dataset"]):
        cells = [_cells(g.spec, [look.get((dataset, m, g.spec.metric), (math.nan, math.nan)) for m in g.methods])
                 for g in groups]
        for g, g_cells in zip(groups, cells):
            if g.spec.metric == NU_METRICS[0]:
                for m, cell in zip(g.methods, g_cells):
                    _mark_boundary(cell, look.get((dataset, m, NU_METRICS[1]), (math.nan, math.nan))[0])
        rows.append((dataset_label(dataset), cells))
    return _Layout(groups, rows)


def _mark_boundary(cell: _Cell, fraction: float) -> None:
    """Append the boundary marker to a nu cell (``"1 (boundary)"``) when the calibration ended at the domain's low
    end (``at_boundary``: the fraction of the row's splits that did; ``"(boundary on 50% of splits)"`` when only
    some)."""
    if not cell.text or not math.isfinite(fraction) or fraction <= 0.0:
        return
    cell.text += " (boundary)" if fraction >= 1.0 else f" (boundary on {fraction:.0%} of splits)"


def _method_rows_layout(tidy: pd.DataFrame, spec: TableSpec, look: dict) -> _Layout:
    """Rows = methods of the table's one data set, one column per group; bold down each column."""
    datasets = dataset_order(tidy["dataset"])
    if len(datasets) != 1:
        raise ValueError(f"a {spec.name!r} table (rows = methods) shows one data set, got {datasets}")
    shown = [g for g in spec.groups if (tidy["metric"] == g.metric).any()]
    if not shown:
        raise ValueError(f"tidy has none of the metrics a {spec.name!r} table shows")
    fixed = next((g.methods for g in shown if g.methods is not None), None)
    methods = list(fixed) if fixed is not None else method_order(tidy.loc[tidy["metric"].isin([g.metric for g in
                                                                                               shown]), "method"])
    columns = [_cells(g, [look.get((datasets[0], m, g.metric), (math.nan, math.nan)) for m in methods]) for g in shown]

    def label(m: str) -> str:
        nu, boundary = (look.get((datasets[0], m, k), (math.nan, math.nan))[0] for k in NU_METRICS)
        return nu_label(method_label(m, False), nu, boundary == 1.0)

    rows = [(label(m), [[col[i]] for col in columns]) for i, m in enumerate(methods)]
    return _Layout([_Group(g, [""], [g.title]) for g in shown], rows, by_method=True)


# --------------------------------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------------------------------
def _full_caption(caption: str | None, description: str, describe: bool) -> str:
    parts = [p.strip() for p in (description if describe else "", caption or "") if p and p.strip()]
    return " ".join(parts)


def _check_caption(caption: Any) -> str:
    if caption is None:
        return ""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a string or None, got {type(caption).__name__}")
    return caption


def to_markdown(tidy: pd.DataFrame, spec: TableSpec, caption: str | None = None, *, describe: bool = True) -> str:
    """Render a tidy table as a GitHub/pandoc markdown table laid out by ``spec``.

    Rows = data sets (:func:`dataset_order`, display labels), columns = methods (:func:`method_order`) in the
    spec's column groups. Bold (``**x**``) as each :class:`ColumnGroup` says, decided on the displayed (rounded)
    numbers. Missing cells: "–".

    Column headers are ``"<group> <method>"`` (e.g. ``W1 SA``, ``PI95/SA MC``) when several groups are shown, the
    method labels alone for one group. The first line is ``Table: <description> <caption>`` (pandoc caption
    syntax): the spec's description (left out with ``describe=False``), then ``caption``, which names the
    configuration.
    """
    caption = _check_caption(caption)
    lay = _layout(tidy, spec)
    header = ["Method" if lay.by_method else "Dataset"]
    for g in lay.groups:
        if lay.by_method:
            header.append(g.spec.title)
        elif g.spec.header is not None:
            header += [g.spec.header] * len(g.methods)
        elif len(lay.groups) > 1:
            header += [f"{g.spec.title} {lbl}" for lbl in g.labels]
        else:
            header += list(g.labels)
    lines = [f"Table: {_full_caption(caption, spec.description, describe)}", ""]
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
    spec: TableSpec,
    caption: str | None = None,
    *,
    label: str | None = None,
    describe: bool = True,
    escape: bool = True,
) -> str:
    """Render a tidy table as a LaTeX ``table*`` (booktabs; in ``\\resizebox`` for a ``wide`` spec, needs graphicx).

    Same layout and bold rule as :func:`to_markdown`; with several column groups, ``\\multicolumn`` group headers,
    ``\\cmidrule`` and an empty spacer column between groups (as in the paper's ``tab:uci_master``). ``show_std``
    cells are ``$3.176{\\pm}0.311$``, bold ones ``$\\mathbf{...}$``; other bold cells ``\\textbf{...}``. The
    caption is the spec's LaTeX description (unless ``describe=False``) followed by ``caption``, plain text escaped
    for LaTeX unless ``escape=False``. ``label`` defaults to ``spec.label``. Missing cells: ``--``.
    """
    caption = _check_caption(caption)
    lay = _layout(tidy, spec)
    cap = _full_caption(latex_escape(caption) if escape else caption, spec.latex_description, describe)
    label = label or spec.label
    spacer = len(lay.groups) > 1 and not lay.by_method
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
    if spec.wide:
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
            top.append(rf"\multicolumn{{{width}}}{{c}}{{{g.spec.latex_title}}}" if width > 1 else g.spec.latex_title)
            rules.append(rf"\cmidrule(lr){{{col}-{col + width - 1}}}")
            col += width
        out.append(" & ".join(top) + r" \\")
        out.append(" ".join(rules))
    header = ["Method" if lay.by_method else "Dataset"]
    for i, g in enumerate(lay.groups):
        if spacer and i > 0:
            header.append("")
        if lay.by_method:
            header.append(g.spec.latex_title)
        elif g.spec.latex_header is not None:
            header += [g.spec.latex_header] * len(g.methods)
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
                    cells.append(rf"\textbf{{{latex_escape(c.text)}}}" if c.bold else latex_escape(c.text))
        out.append(" & ".join(cells) + r" \\")
    out.append(r"\bottomrule")
    out.append(r"\end{tabular}" + ("%" if spec.wide else ""))
    if spec.wide:
        out.append("}")
    out.append(r"\end{table*}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------------------------
def write_table(
    tidy: pd.DataFrame,
    basename: str | os.PathLike,
    caption: str | None,
    provenance_kwargs: Mapping[str, Any],
    *,
    spec: TableSpec,
    label: str | None = None,
) -> list[Path]:
    """Write ``<basename>.csv`` (tidy, columns :data:`TIDY_COLUMNS`), ``.md`` and ``.tex`` atomically, and a
    ``<file>.prov.json`` beside each.

    Args:
        tidy: a tidy table (e.g. ``spec.build(runs)``).
        basename: output path without suffix, e.g. ``results/tables/uci_master``.
        caption: plain-text caption naming the configuration (goes into the .md and .tex).
        provenance_kwargs: keyword arguments of :func:`stochattn.provenance.provenance_record` (``rule``,
            ``inputs``, ``config_subset``, ``seeds``; optionally ``started``/``finished``, ``extra``, ``repo_dir``).
            ``outputs`` defaults to the three table files; ``started``/``finished`` to the time of this call;
            ``extra`` gains ``table_kind`` (``spec.name``) and ``caption``.
        spec: the layout (:class:`TableSpec`).
        label: LaTeX label (default ``spec.label``).

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
    base = os.fspath(basename)
    csv_path, md_path, tex_path = Path(base + ".csv"), Path(base + ".md"), Path(base + ".tex")
    md = to_markdown(tidy, spec, caption)
    tex = to_latex(tidy, spec, caption, label=label)
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
    extra.setdefault("table_kind", spec.name)
    extra.setdefault("caption", caption or "")
    kwargs["extra"] = extra
    record = provenance_record(**kwargs)
    provs = [write_provenance(p, record) for p in outputs]
    return [*outputs, *provs]
