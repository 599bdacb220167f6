"""Outputs computed from files that no longer exist, set aside so that the workflow rebuilds them.

Snakemake does not rebuild a missing intermediate file while the files made from it are present (it treats it as a
removed ``temp()`` file: snakemake/snakemake#1978). A job that fails or is killed while it reruns (after a code or
settings change, at a cluster time limit, when the Snakemake process itself is stopped) has its outputs removed by
Snakemake; the next run then says "Nothing to be done", and the metrics and tables made from the removed outputs
keep the numbers of before the change: ``stochattn audit`` reports their inputs missing, and nothing rebuilds them.

:func:`stale_outputs` finds them from the provenance records the rules write (a ``<file>.prov.json``, or the
``provenance`` block of a JSON record with its ``outputs``): every record with an input under ``results/`` that is
gone, and, transitively, every record with an input among their outputs (a table made from a stale metric). The
Snakefile calls :func:`set_aside_stale` when a run starts: it moves those files (outputs and records) to
``results/.stale/<UTC time>/`` keeping their paths, so that Snakemake sees them missing and rebuilds the chain from
the removed file down. A dry run only lists them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["STALE_DIR", "stale_outputs", "set_aside_stale"]

STALE_DIR = Path("results") / ".stale"
"""Where :func:`set_aside_stale` moves stale files, relative to the working directory."""

_PROV_SUFFIX = ".prov.json"


def _records(work: Path) -> Iterable[tuple[list[str], list[str]]]:
    """(outputs, inputs) of every provenance record under ``work/results``, the record file among its outputs;
    paths relative to ``work``, as the records write them. Skips directory outputs (Snakemake's
    ``.snakemake_timestamp``: staged data, never a record) and set-aside files."""
    for folder, subdirs, names in os.walk(work / "results"):
        here = Path(folder)
        kept = [d for d in subdirs if here / d != work / STALE_DIR]
        subdirs[:] = sorted(d for d in kept if not (here / d / ".snakemake_timestamp").exists())
        for name in sorted(names):
            if not name.endswith(".json"):
                continue
            path = here / name
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # unreadable or half-written: the audit's business, not a sign of a removed input
            if not isinstance(data, dict):
                continue
            rel = path.relative_to(work)
            if name.endswith(_PROV_SUFFIX):
                rec, own = data, [rel.with_name(name[: -len(_PROV_SUFFIX)])]
            elif isinstance(data.get("provenance"), dict):
                rec, own = data["provenance"], []
            else:
                continue
            outputs = [str(rel), *map(str, own), *(o["path"] for o in rec.get("outputs") or [] if "path" in o)]
            inputs = [i["path"] for i in rec.get("inputs") or [] if isinstance(i, dict) and "path" in i]
            yield [os.path.normpath(p) for p in outputs], [os.path.normpath(p) for p in inputs]


def _find(work: Path) -> tuple[list[Path], list[Path]]:
    """(stale files that exist, the removed ``results/`` files they were made from), relative to ``work``, sorted."""
    records = list(_records(work)) if (work / "results").is_dir() else []
    stale: set[str] = set()
    gone: set[str] = set()
    pending = True
    while pending:  # to a fixed point: a record made from a stale output is stale
        pending = False
        for outputs, inputs in records:
            if stale.issuperset(outputs):
                continue
            removed = [p for p in inputs if p.startswith("results" + os.sep) and not (work / p).exists()]
            if removed or any(p in stale for p in inputs):
                gone.update(removed)
                stale.update(outputs)
                pending = True
    return sorted(Path(p) for p in stale if os.path.lexists(work / p)), sorted(map(Path, gone - stale))


def stale_outputs(workdir: str | os.PathLike = ".") -> list[Path]:
    """Files under ``workdir/results`` made from a ``results/`` file that no longer exists, directly or through
    other stale files: each stale record's outputs and the record itself, those that exist, relative to
    ``workdir``, sorted. Inputs outside ``results/`` (fetched data, a mirror) are not followed: they are verified by
    checksum where they are read, and removing a download does not change what was computed from it."""
    return _find(Path(workdir))[0]


def set_aside_stale(workdir: str | os.PathLike = ".", *, dry_run: bool = False, log=print) -> list[Path]:
    """Move :func:`stale_outputs` to ``results/.stale/<UTC time>/<path>`` (``dry_run``: only report them; nothing
    moves either while another Snakemake holds ``workdir``, whose running jobs may be rewriting them), logging one
    message through ``log`` when there are any. Returns the moved (or, on a dry run, the stale) paths."""
    work = Path(workdir)
    stale, gone = _find(work)
    if not stale:
        return []
    locks = work / ".snakemake" / "locks"
    if not dry_run and locks.is_dir() and any(locks.iterdir()):
        log(f"stochattn: {len(stale)} stale file(s) under results/ left in place: another Snakemake holds this "
            "directory (.snakemake/locks)")  # fmt: skip
        return []

    def listed(paths: list[Path]) -> str:
        return ", ".join(map(str, paths[:8])) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")

    what = (f"{len(stale)} stale file(s), made from {listed(gone)}, which no longer exist(s) (removed by hand, or by "
            "Snakemake after a rerun that failed or was killed; Snakemake does not rebuild a missing intermediate "
            "file: snakemake/snakemake#1978)")  # fmt: skip
    if dry_run:
        log(f"stochattn: {what}: {listed(stale)}. A run moves them to {STALE_DIR}/ and rebuilds them; this dry run "
            "does not list those jobs.")  # fmt: skip
        return stale
    dest = STALE_DIR / _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    for path in stale:
        target = work / dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(work / path, target)
    log(f"stochattn: moved {what} to {dest}/ so that this run rebuilds them: {listed(stale)}")
    return stale
