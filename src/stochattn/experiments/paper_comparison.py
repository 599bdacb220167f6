"""The reproduction report: every number the paper reports (``config/paper_results.yaml``) next to ours.

    paper_cells        the reference file -> one row per paper number (block, source, table, row, method, metric)
    compare            paper cells x our tidy tables -> the comparison (paper, ours, ratio, verdict, run)
    write_comparison   results/tables/paper_comparison.{csv,md} (atomic) with a provenance record beside each

The paper's values live only in the reference file, each block with its source label; our values are read from the
tidy CSVs of the run's own tables (``results/tables/<table>.csv``), the same statistic under the same name. Rows of a
slice that ran on a stand-in (or a reduced protocol) say so in the ``run`` column and in the report's header.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stochattn.extras import requires
from stochattn.io import atomic_path
from stochattn.provenance import provenance_record, write_provenance
from stochattn.report import method_label

with requires("workflow"):
    import pandas as pd
    import yaml

__all__ = ["COLUMNS", "VERDICTS", "paper_cells", "slice_of", "compare", "to_markdown", "write_comparison",
           "load_tables"]

COLUMNS = ("source", "table", "row", "method", "metric", "paper", "ours", "ratio", "verdict", "run")
VERDICTS = ("within 10%", "within 2x", "differs > 2x", "not run")
"""Verdicts by the ratio ours / paper: within [1/1.1, 1.1], within [1/2, 2], outside; no number of ours."""

_SLICES = {"uci_": "uci", "ett_": "ett", "climax_": "era5", "swag_sweep_": "era5"}


def slice_of(table: str) -> str:
    """The slice (``uci``, ``ett``, ``era5``) a table of ours belongs to, by its name."""
    for prefix, name in _SLICES.items():
        if table.startswith(prefix):
            return name
    raise ValueError(f"table {table!r} belongs to no slice (prefixes {', '.join(_SLICES)})")


def paper_cells(path_or_blocks: str | os.PathLike | Mapping[str, Any]) -> pd.DataFrame:
    """One row per paper number: ``block, source, table, row, method, metric, paper`` (the paper's value times the
    block's ``scale``). A block gives ``methods`` and either ``metric`` with ``rows`` (row -> value or one value
    per method) or ``row`` with ``metrics`` (metric -> one value per method). ValueError for a block without a
    source, a table of no slice, or values that do not match its methods."""
    blocks = path_or_blocks
    if not isinstance(blocks, Mapping):
        blocks = yaml.safe_load(Path(path_or_blocks).read_text())
    out = []
    for name, b in blocks.items():
        if not str(b.get("source", "")).strip():
            raise ValueError(f"paper results block {name!r} has no source")
        table, methods, scale = str(b["table"]), list(b["methods"]), float(b.get("scale", 1.0))
        slice_of(table)
        if "rows" in b:
            cells = [(row, str(b["metric"]), v) for row, v in b["rows"].items()]
        else:
            cells = [(str(b["row"]), metric, v) for metric, v in b["metrics"].items()]
        for row, metric, values in cells:
            values = values if isinstance(values, list) else [values]
            if len(values) != len(methods):
                raise ValueError(f"paper results block {name!r}, {row} / {metric}: {len(values)} values for "
                                 f"{len(methods)} methods")  # fmt: skip
            out.extend({"block": name, "source": str(b["source"]), "table": table, "row": str(row), "method": m,
                        "metric": metric, "paper": float(v) * scale} for m, v in zip(methods, values))  # fmt: skip
    return pd.DataFrame(out, columns=["block", "source", "table", "row", "method", "metric", "paper"])


def _verdict(ratio: float) -> str:
    if not math.isfinite(ratio):
        return VERDICTS[3]
    r = max(ratio, 1.0 / ratio) if ratio > 0 else math.inf
    return VERDICTS[0] if r <= 1.1 else VERDICTS[1] if r <= 2.0 else VERDICTS[2]


def compare(cells: pd.DataFrame, tables: Mapping[str, pd.DataFrame], runs: Mapping[str, str],
            aliases: Mapping[str, str] | None = None) -> pd.DataFrame:  # fmt: skip
    """The comparison (:data:`COLUMNS`): for each paper cell our value of the same (table, row, method, metric)
    from ``tables`` (table name -> its tidy frame; a table this run did not make gives "not run"), the ratio
    ours / paper, the verdict (:data:`VERDICTS`) and ``run``: what ran for the cell's slice (``runs``: slice ->
    e.g. "stand-in TimesFM (not the public checkpoint)", which must then also name any such difference).
    ``aliases`` maps a paper row to the row of ours that stands for it (e.g. "Z500 72 h" -> "Z500 24 h" on a
    stand-in run at another lead); the report keeps the paper's row name."""
    aliases = dict(aliases or {})
    rows = []
    for c in cells.itertuples(index=False):
        tidy = tables.get(c.table)
        ours = math.nan
        if tidy is not None:
            hit = tidy[(tidy["dataset"].astype(str) == aliases.get(c.row, c.row)) & (tidy["method"] == c.method) &
                       (tidy["metric"] == c.metric)]  # fmt: skip
            if len(hit):
                ours = float(hit["value"].iloc[0])
        ratio = ours / c.paper if math.isfinite(ours) and c.paper != 0 else math.nan
        rows.append({"source": c.source, "table": c.table, "row": c.row, "method": c.method, "metric": c.metric,
                     "paper": c.paper, "ours": ours, "ratio": ratio, "verdict": _verdict(ratio),
                     "run": runs.get(slice_of(c.table), "not run")})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _num(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}"


def to_markdown(comparison: pd.DataFrame, header: str) -> str:
    """The report as markdown: the header, a verdict count per source, then one table per source (the paper's
    label in its heading) with row, method, metric, paper, ours, ratio, verdict."""
    lines = ["# Reproduction report: the paper's numbers next to ours", "", header, ""]
    counts = comparison.groupby("verdict").size().reindex(list(VERDICTS), fill_value=0)
    lines.append("Verdicts (ours / paper): " + ", ".join(f"{v}: {n}" for v, n in counts.items()))
    for source, d in comparison.groupby("source", sort=False):
        lines += ["", f"## {source}", "", f"Ours: results/tables/{d['table'].iloc[0]}.csv ({d['run'].iloc[0]})", "",
                  "| Row | Method | Metric | Paper | Ours | Ours/Paper | Verdict |",
                  "|:---|:---|:---|---:|---:|---:|:---|"]
        for r in d.itertuples(index=False):
            lines.append(f"| {r.row} | {method_label(r.method)} | {r.metric} | {_num(r.paper)} | {_num(r.ours)} | "
                         f"{_num(r.ratio)} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def write_comparison(comparison: pd.DataFrame, basename: str | os.PathLike, header: str,
                     provenance_kwargs: Mapping[str, Any]) -> list[Path]:  # fmt: skip
    """Write ``<basename>.csv`` and ``.md`` atomically and a ``<file>.prov.json`` beside each (the kwargs of
    :func:`stochattn.provenance.provenance_record`: rule, inputs, config_subset, seeds, ...)."""
    started = time.time()
    base = os.fspath(basename)
    csv, md = Path(base + ".csv"), Path(base + ".md")
    with atomic_path(csv) as tmp:
        comparison.to_csv(tmp, index=False)
    with atomic_path(md) as tmp:
        tmp.write_text(to_markdown(comparison, header), encoding="utf-8")
    kwargs = dict(provenance_kwargs)
    kwargs.setdefault("outputs", [csv, md])
    kwargs.setdefault("started", started)
    kwargs.setdefault("finished", time.time())
    kwargs["extra"] = {**dict(kwargs.get("extra") or {}), "table_kind": "paper_comparison", "caption": header}
    record = provenance_record(**kwargs)
    return [csv, md, *(write_provenance(p, record) for p in (csv, md))]


def load_tables(paths: Sequence[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """``{table name (file stem): tidy frame}`` of our tables' CSVs."""
    return {Path(p).stem: pd.read_csv(p) for p in paths}
