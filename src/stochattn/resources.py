"""Runtime estimates from Snakemake's ``benchmark:`` records (``results/benchmarks/<rule>/<wildcards>.tsv``).

``python -m stochattn.resources [results/benchmarks]`` prints, per rule family (``run_method`` split by method), the
number of records, the median and largest wall clock and peak memory, and a SLURM runtime request: the largest
measured wall clock times ``safety`` (default 2), in whole minutes. ``--write FILE`` also writes the per-data-set
requests ``{family: {dataset: minutes}}`` as YAML; the workflow's config key ``runtime_estimates: FILE`` makes every
rule request them (rules/common.smk), falling back to its row-count cost model where nothing was measured.
Estimates measured on one machine transfer to another only up to the speed ratio of the two: measure on the
cluster's own nodes (one split per data set is enough: ``--config splits=1``) before running the full protocol.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
from pathlib import Path
from typing import Any

__all__ = ["read_benchmarks", "runtime_estimates", "dataset_estimates", "load_dataset_estimates", "pairs_mb",
           "windows_mb", "memory_needed", "write_measured", "load_measured", "main"]

_PER_METHOD = {"run_method", "calibrate_sa"}


def _dataset_of(parts: tuple[str, ...]) -> str | None:
    """The data set of a benchmark record's wildcard path: the folder before ``split<k>``."""
    for i, part in enumerate(parts):
        if re.fullmatch(r"split\d+", part) and i > 0:
            return parts[i - 1]
    return None


def read_benchmarks(root: str | Path) -> list[dict[str, Any]]:
    """One dict per record: ``rule``, ``family`` (rule, or ``rule/method`` for per-method rules), ``job`` (the
    wildcard path), ``seconds``, ``max_rss_mb`` (None when not measured)."""
    root = Path(root)
    rows = []
    for tsv in sorted(root.rglob("*.tsv")):
        rel = tsv.relative_to(root).with_suffix("")
        rule = rel.parts[0]
        family = f"{rule}/{rel.name}" if rule in _PER_METHOD else rule
        with open(tsv, newline="") as fh:
            for rec in csv.DictReader(fh, delimiter="\t"):
                rss = rec.get("max_rss", "NA")
                rows.append({
                    "rule": rule, "family": family, "job": "/".join(rel.parts[1:]), "dataset": _dataset_of(rel.parts),
                    "seconds": float(rec["s"]),
                    "max_rss_mb": None if rss in ("NA", "", None) else float(rss),
                })  # fmt: skip
    return rows


def runtime_estimates(root: str | Path, safety: float = 2.0) -> dict[str, dict[str, Any]]:
    """``{family: {"n", "median_s", "max_s", "max_rss_mb", "runtime_min"}}`` (``runtime_min`` = ceil(max_s *
    safety / 60), at least 1)."""
    if safety < 1:
        raise ValueError(f"safety must be >= 1, got {safety}")
    by_family: dict[str, list[dict[str, Any]]] = {}
    for row in read_benchmarks(root):
        by_family.setdefault(row["family"], []).append(row)
    out = {}
    for family, rows in sorted(by_family.items()):
        secs = [r["seconds"] for r in rows]
        rss = [r["max_rss_mb"] for r in rows if r["max_rss_mb"] is not None]
        out[family] = {
            "n": len(rows), "median_s": statistics.median(secs), "max_s": max(secs),
            "max_rss_mb": max(rss) if rss else None, "runtime_min": max(1, math.ceil(max(secs) * safety / 60)),
        }  # fmt: skip
    return out


def dataset_estimates(root: str | Path, safety: float = 2.0) -> dict[str, dict[str, int]]:
    """``{family: {dataset: runtime_min}}``: the largest measured wall clock of each family on each data set times
    ``safety``, in whole minutes (at least 1)."""
    if safety < 1:
        raise ValueError(f"safety must be >= 1, got {safety}")
    out: dict[str, dict[str, int]] = {}
    for row in read_benchmarks(root):
        if row["dataset"] is None:
            continue
        minutes = max(1, math.ceil(row["seconds"] * safety / 60))
        per = out.setdefault(row["family"], {})
        per[row["dataset"]] = max(per.get(row["dataset"], 1), minutes)
    return out


def load_dataset_estimates(path: str | Path | None) -> dict[str, dict[str, int]]:
    """Read a file written by ``--write`` (``{}`` for None); a clear error when it is missing or malformed."""
    if path is None:
        return {}
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"runtime_estimates: {path} does not exist (write it with "
                                f"`python -m stochattn.resources results/benchmarks --write {path}`)")
    with open(path, encoding="utf-8") as fh:
        est = yaml.safe_load(fh) or {}
    ok = isinstance(est, dict) and all(
        isinstance(v, dict) and all(isinstance(m, int) and m >= 1 for m in v.values()) for v in est.values())
    if not ok:
        raise ValueError(f"runtime_estimates: {path} must map rule family -> data set -> minutes (int >= 1)")
    return est


def windows_mb(n_series: int, length: int) -> float:
    """MB of ``n_series`` ETT windows of ``length`` steps (context + horizon) as ``prepare`` stores them (float64)."""
    return int(n_series) * int(length) * 8 / 2**20


def pairs_mb(n_pairs: int, n_variables: int, cells: int = 32 * 64) -> float:
    """MB of ``n_pairs`` ERA5 forecast pairs as ``prepare`` stores them: float32 inputs of ``n_variables`` fields and
    one target field, ``cells`` grid cells each."""
    return int(n_pairs) * (int(n_variables) + 1) * int(cells) * 4 / 2**20


DATA_COPIES = 3
"""A job that loads its data (pairs.npz, prepared.npz) holds about three copies: the arrays, their tensors, the
samples (the memory model of the ERA5 and ETT rules)."""


def memory_needed(measured: dict[str, Any], data_mb: float) -> float:
    """MB a rule needs at a data size of ``data_mb``, from its measured record (``max_rss_mb`` at ``data_mb`` of the
    measurement, the record's ``data_mb``): the model part measured, the data part scaled, :data:`DATA_COPIES`
    copies."""
    return float(measured["max_rss_mb"]) + DATA_COPIES * (float(data_mb) - float(measured.get("data_mb", 0.0)))


def write_measured(root: str | Path, path: str | Path, note: str, data_mb: dict[str, float] | None = None) -> dict:
    """``{family: {"n", "max_s", "max_rss_mb", "data_mb"}}`` of the benchmark records under ``root`` -> ``path``
    (YAML, with ``note``: where and at what size it was measured). ``data_mb``: per family, the size of the data its
    jobs loaded (0 where not given)."""
    import yaml

    from .io import atomic_path

    est = runtime_estimates(root)
    out = {f: {"n": e["n"], "max_s": round(e["max_s"], 1), "max_rss_mb": e["max_rss_mb"],
               "data_mb": round(float((data_mb or {}).get(f, 0.0)), 1)} for f, e in est.items()}  # fmt: skip
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(f"# {line}\n" for line in note.splitlines()))
        yaml.safe_dump(out, fh, sort_keys=True)
    return out


def load_measured(path: str | Path) -> dict[str, dict[str, Any]]:
    """The records of :func:`write_measured`."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        rec = yaml.safe_load(fh) or {}
    if not all(isinstance(v, dict) and "max_rss_mb" in v for v in rec.values()):
        raise ValueError(f"{path}: expected {{family: {{max_rss_mb, max_s, n, data_mb}}}}")
    return rec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="results/benchmarks")
    parser.add_argument("--safety", type=float, default=2.0)
    parser.add_argument("--write", metavar="FILE", help="write {family: {dataset: minutes}} (YAML) for the config "
                        "key runtime_estimates")
    parser.add_argument("--write-measured", metavar="FILE", help="write {family: {max_rss_mb, max_s, n, data_mb}} "
                        "(YAML; config/measured_resources.yaml, checked by tests/test_workflow.py)")
    parser.add_argument("--data", metavar="FAMILY=PATH", action="append", default=[],
                        help="with --write-measured: the data file the family's jobs load (its size is data_mb)")
    parser.add_argument("--note", default="", help="with --write-measured: where and at what size it was measured")
    args = parser.parse_args(argv)
    est = runtime_estimates(args.root, args.safety)
    if not est:
        print(f"no benchmark records under {args.root}")
        return 1
    print(f"{'rule family':28s} {'n':>4s} {'median s':>9s} {'max s':>9s} {'max RSS MB':>10s} {'runtime min':>11s}")
    for family, e in est.items():
        rss = "NA" if e["max_rss_mb"] is None else f"{e['max_rss_mb']:.0f}"
        print(f"{family:28s} {e['n']:4d} {e['median_s']:9.1f} {e['max_s']:9.1f} {rss:>10s} {e['runtime_min']:11d}")
    if args.write:
        import yaml

        from .io import atomic_path

        with atomic_path(args.write) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"# runtime requests in minutes (largest measured wall clock x {args.safety}) from {args.root}\n")
            yaml.safe_dump(dataset_estimates(args.root, args.safety), fh, sort_keys=True)
        print(f"wrote {args.write}")
    if args.write_measured:
        sizes = {}
        for item in args.data:
            family, _, path = item.partition("=")
            sizes[family] = Path(path).stat().st_size / 2**20
        write_measured(args.root, args.write_measured, args.note or f"measured from {args.root}", sizes)
        print(f"wrote {args.write_measured}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
