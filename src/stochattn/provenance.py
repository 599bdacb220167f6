"""Provenance records for every table and figure (``<file>.prov.json``, design notes "Output contracts").

A record states what produced a file: the rule, the input files with SHA-256 and size, the outputs, the config
subset and seeds that mattered, the git commit of the code (and whether the tree was dirty), package versions,
host, device, and start/end times.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from stochattn.io import save_json, sha256_file, to_jsonable

__all__ = [
    "PROVENANCE_VERSION",
    "file_record",
    "git_state",
    "package_versions",
    "device_info",
    "provenance_record",
    "provenance_path",
    "write_provenance",
]

PROVENANCE_VERSION = 1
"""Bumped when the record's fields change meaning."""

# distribution name (as pip knows it) -> key in the record
_PACKAGES = {
    "stochattn": "stochattn",
    "torch": "torch",
    "numpy": "numpy",
    "scipy": "scipy",
    "numba": "numba",
    "pandas": "pandas",
    "scoringrules": "scoringrules",
    "rtdl-revisiting-models": "rtdl_revisiting_models",
    "ivon-opt": "ivon-opt",
    "snakemake": "snakemake",
}


def file_record(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "sha256", "size"}`` of a file; for a directory, ``"sha256"`` hashes the sorted lines
    ``"<relative path>\\0<sha256 of file>\\n"`` of every file below it, ``"size"`` is their total and
    ``"n_files"`` their number. A missing path raises FileNotFoundError naming it."""
    p = Path(path)
    if p.is_file():
        return {"path": os.fspath(path), "sha256": sha256_file(p), "size": p.stat().st_size}
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
        digest = hashlib.sha256()
        size = 0
        for q in files:
            digest.update(f"{q.relative_to(p).as_posix()}\0{sha256_file(q)}\n".encode())
            size += q.stat().st_size
        return {
            "path": os.fspath(path),
            "sha256": digest.hexdigest(),
            "size": size,
            "n_files": len(files),
            "kind": "directory",
        }
    raise FileNotFoundError(f"provenance: input/output {os.fspath(path)!r} does not exist")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        res = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(repo_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{"git_commit": sha or "unknown", "git_dirty": bool or None}`` of the repository containing
    ``repo_dir`` (default: the working directory).

    "unknown"/None when git is missing, the folder is not in a repository, or the repository has no commit.
    Dirty means tracked files differ from HEAD (``git status --porcelain --untracked-files=no``, the same rule
    as ``git describe --dirty``); untracked files do not count.
    """
    cwd = Path.cwd() if repo_dir is None else Path(repo_dir)
    commit = _git(["rev-parse", "--verify", "HEAD"], cwd)
    if not commit:
        return {"git_commit": "unknown", "git_dirty": None}
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str | None]:
    """Python and package versions (``importlib.metadata``); None for a package that is not installed."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist, key in _PACKAGES.items():
        try:
            versions[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[key] = None
    return versions


def device_info() -> dict[str, Any]:
    """``{"device": CUDA device name or "cpu", "torch_threads": int or None}`` (CUDA device 0 when available)."""
    try:
        import torch
    except ImportError:
        return {"device": "cpu", "torch_threads": None}
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"device": device, "torch_threads": torch.get_num_threads()}


def _as_datetime(value: Any, name: str) -> _dt.datetime:
    if isinstance(value, _dt.datetime):
        return value.astimezone() if value.tzinfo is None else value  # naive = local time
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(float(value), tz=_dt.timezone.utc).astimezone()
    raise TypeError(f"{name} must be a datetime or epoch seconds (time.time()), got {type(value).__name__}")


def _paths(value: Any, name: str) -> list[str | os.PathLike]:
    if isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a list of paths, got a single {type(value).__name__}: {value!r}")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of paths, got {type(value).__name__}")
    return list(value)


def provenance_record(
    *,
    rule: str,
    inputs: Iterable[str | os.PathLike],
    outputs: Iterable[str | os.PathLike],
    config_subset: Mapping[str, Any],
    seeds: Any,
    started: _dt.datetime | float,
    finished: _dt.datetime | float,
    extra: Mapping[str, Any] | None = None,
    repo_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Build the provenance dict of one rule run (JSON-ready; see :func:`write_provenance`).

    Fields: ``provenance_version``, ``rule``, ``inputs`` (list of :func:`file_record`, SHA-256 + size; every input
    must exist), ``outputs`` (file records for outputs that exist when called, else just ``{"path"}``),
    ``config`` (``config_subset``), ``seeds``, ``git_commit`` / ``git_dirty`` (:func:`git_state` of ``repo_dir``,
    default the working directory), ``packages`` (:func:`package_versions`), ``host`` (``platform.node()``),
    ``platform``, ``device`` / ``torch_threads`` (:func:`device_info`), ``started`` / ``finished`` (ISO 8601
    with UTC offset), ``seconds``, and ``extra`` (any extra JSON-able mapping, default empty).

    ``started`` / ``finished``: datetimes (naive ones are local time) or epoch seconds from ``time.time()``.
    """
    if not isinstance(rule, str) or not rule:
        raise ValueError(f"rule must be a non-empty string, got {rule!r}")
    if not isinstance(config_subset, Mapping):
        raise TypeError(f"config_subset must be a mapping, got {type(config_subset).__name__}")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a mapping or None, got {type(extra).__name__}")
    t0 = _as_datetime(started, "started")
    t1 = _as_datetime(finished, "finished")
    seconds = (t1 - t0).total_seconds()
    if seconds < 0:
        raise ValueError(f"finished ({t1.isoformat()}) is before started ({t0.isoformat()})")

    outs = []
    for out in _paths(outputs, "outputs"):
        outs.append(file_record(out) if Path(out).exists() else {"path": os.fspath(out)})

    record: dict[str, Any] = {
        "provenance_version": PROVENANCE_VERSION,
        "rule": rule,
        "inputs": [file_record(p) for p in _paths(inputs, "inputs")],
        "outputs": outs,
        "config": to_jsonable(dict(config_subset)),
        "seeds": to_jsonable(seeds),
        **git_state(repo_dir),
        "packages": package_versions(),
        "host": platform.node(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
        **device_info(),
        "started": t0.isoformat(),
        "finished": t1.isoformat(),
        "seconds": seconds,
        "extra": to_jsonable(dict(extra or {})),
    }
    return record


def provenance_path(target_file: str | os.PathLike) -> Path:
    """``<target_file>.prov.json`` (the suffix is appended, e.g. ``table.csv`` -> ``table.csv.prov.json``)."""
    return Path(os.fspath(target_file) + ".prov.json")


def write_provenance(target_file: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """Write ``record`` atomically to ``<target_file>.prov.json`` (sorted keys, indented); return that path."""
    if not isinstance(record, Mapping):
        raise TypeError(f"record must be a mapping, got {type(record).__name__}")
    return save_json(provenance_path(target_file), record)
