"""Provenance records for every table and figure (``<file>.prov.json``, design notes "Output contracts").

A record states what produced a file: the rule, the input files with SHA-256 and size, the outputs, the config
subset and seeds that mattered, the git commit of the code (and whether the tree was dirty), package versions,
host, device, and start/end times.
"""

from __future__ import annotations

import ast
import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import re
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
    "folder_files",
    "git_state",
    "package_versions",
    "device_info",
    "provenance_record",
    "provenance_path",
    "remove_finished_resumes",
    "write_provenance",
    "code_closure",
    "code_version",
    "stage_provenance",
    "library_git_state",
    "with_outputs",
    "write_sidecar",
    "JobProvenance",
    "check_gpu_request",
    "check_model_job",
    "check_gpu_arch",
    "resume_checkpoint",
    "record_earlier_attempts",
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


_SNAKEMAKE_MARKERS = frozenset({".snakemake_timestamp"})
"""Files Snakemake itself puts into a ``directory()`` output after its job: not part of the data."""


def folder_files(root: str | os.PathLike) -> list[Path]:
    """Every file below ``root``, sorted, without Snakemake's own markers (:data:`_SNAKEMAKE_MARKERS`)."""
    return sorted(q for q in Path(root).rglob("*") if q.is_file() and q.name not in _SNAKEMAKE_MARKERS)


def file_record(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "sha256", "size"}`` of a file; for a directory, ``"sha256"`` hashes the sorted lines
    ``"<relative path>\\0<sha256 of file>\\n"`` of every file below it (:func:`folder_files`), ``"size"`` is
    their total and ``"n_files"`` their number. A missing path raises FileNotFoundError naming it."""
    p = Path(path)
    if p.is_file():
        return {"path": os.fspath(path), "sha256": sha256_file(p), "size": p.stat().st_size}
    if p.is_dir():
        files = folder_files(p)
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
    """``{"device": CUDA device name or "cpu", "torch_threads": int}`` (CUDA device 0 when available) in a process
    that uses torch; ``{"device": None, "torch_threads": None}`` in one that never imported it (a table or figure job:
    importing torch only to name a device it does not use was about half of an ERA5 figure job's CPU)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {"device": None, "torch_threads": None}
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"device": device, "torch_threads": torch.get_num_threads()}


def cpu_info() -> dict[str, Any]:
    """``{"cpu": the processor's model name, "cpu_model": its family, model and stepping, "cpu_capability": the
    instruction set of torch's CPU kernels}`` (e.g. "AVX2", "AVX512"; None in a process that never imported torch;
    ``cpu_model`` e.g. "family 26, model 2, stepping 1", None where /proc/cpuinfo does not say). A CPU run repeats its
    floating-point results bit for bit only on the same kernels: an AVX-512 machine reproduces an AVX2 machine's with
    ``ATEN_CPU_CAPABILITY=avx2`` (docs/measurements.md#cpu-kernels). Virtual machines often name every generation
    alike ("AMD EPYC"): ``cpu_model`` tells them apart (2026-12-06: one commit's ``make run`` on two such VMs moved
    the reproduction report's verdict counts by four)."""
    name, fields = platform.processor() or None, {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if fields:  # the first processor's block ends at its blank line
                        break
                    continue
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name", name)
    labels = (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
    model = ", ".join(f"{label} {fields[key]}" for key, label in labels if key in fields) or None
    torch = sys.modules.get("torch")
    capability = torch.backends.cpu.get_cpu_capability() if torch is not None else None
    return {"cpu": name, "cpu_model": model, "cpu_capability": capability}


def _as_datetime(value: Any, name: str) -> _dt.datetime:
    if isinstance(value, _dt.datetime):
        return value.astimezone() if value.tzinfo is None else value  # naive = local time
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(float(value), tz=_dt.timezone.utc).astimezone()  # noqa: UP017 - keeps the code hash
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


# ---------------------------------------------------------------------------------------------------------------
# code versions: which library functions a stage runs, and a hash of exactly those (rerun trigger + audit)
# ---------------------------------------------------------------------------------------------------------------
_PACKAGE_ROOT = Path(__file__).resolve().parent
_PACKAGE = _PACKAGE_ROOT.name


@functools.lru_cache(maxsize=1024)
def _module_file(module: str) -> Path | None:
    """``stochattn.a.b`` -> the file defining it (``a/b.py`` or ``a/b/__init__.py``), None if not in the package."""
    parts = module.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = _PACKAGE_ROOT.joinpath(*parts[1:])
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


class _StripDocstrings(ast.NodeTransformer):
    """Docstrings do not change what code computes: leave them out of the hash."""

    def _strip(self, node):
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            if isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


def _resolve_from(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _import_bindings(stmts: Iterable[ast.stmt], module: str, is_package: bool) -> dict[str, tuple[str, str | None]]:
    """name -> (module, attribute or None) for the import statements among ``stmts`` (any depth)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in stmts:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                for alias in sub.names:
                    if alias.asname:
                        out[alias.asname] = (alias.name, None)
                    else:
                        out[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
            elif isinstance(sub, ast.ImportFrom):
                src = _resolve_from(module, is_package, sub.level, sub.module)
                for alias in sub.names:
                    if alias.name == "*":
                        continue
                    sub_module = f"{src}.{alias.name}"
                    # `from pkg import submodule` binds a module; `from module import name` binds an attribute
                    out[alias.asname or alias.name] = (
                        (sub_module, None) if _module_file(sub_module) else (src, alias.name)
                    )
    return out


@functools.lru_cache(maxsize=1)
def _summary_salt() -> bytes:
    """What a module's summary depends on besides its own text: this file (the hashing code), the Python version (the
    AST's dump) and the package's layout (which dotted names are modules, for ``from pkg import submodule``)."""
    layout = sorted(str(f.relative_to(_PACKAGE_ROOT)) for f in _PACKAGE_ROOT.rglob("*.py"))
    parts = [Path(__file__).read_bytes(), platform.python_version().encode(), "\n".join(layout).encode()]
    return hashlib.sha256(b"\0".join(parts)).digest()


def _summary_cache() -> Path:
    """Folder of the parsed-module summaries: ``$STOCHATTN_CACHE_DIR/code`` (default ``~/.cache/stochattn/code``)."""
    root = os.environ.get("STOCHATTN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "stochattn"
    )
    return Path(root) / "code"


def _summarise(source: str, path: str, module: str) -> dict:
    """{"digests": name -> sha256 of its docstring-free AST, "imports": name -> [module, attr or None], "references":
    name -> sorted [module, name] pairs of the package its definition refers to, "constants": the names bound by a
    module-level assignment} of one module's text."""
    tree = ast.parse(source, filename=path)
    is_package = path.endswith("__init__.py")
    imports = _import_bindings(tree.body, module, is_package)
    digests: dict[str, str] = {}
    nodes: dict[str, ast.AST] = {}
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        if not names:
            continue
        node = _StripDocstrings().visit(node)  # in place: the tree is this call's own (no docstring holds a reference)
        digest = hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()
        for name in names:
            if name in digests:  # a name bound twice at module level: hash both bindings
                digest = hashlib.sha256((digests[name] + digest).encode()).hexdigest()
            digests[name], nodes[name] = digest, node
    references = {name: sorted(_references(node, module, imports)) for name, node in nodes.items()}
    constants = sorted(n for n, node in nodes.items() if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)))
    return {"digests": digests, "imports": imports, "references": references, "constants": constants}


@functools.lru_cache(maxsize=256)
def _parse_module(path: str, mtime_ns: int, size: int, module: str) -> tuple[dict, dict, dict, frozenset]:
    """(digests, imports, references, constants) of :func:`_summarise` for the module's file at this version.
    Summaries are kept on disk by the sha256 of the module's text and :func:`_summary_salt`: each Snakemake process
    parses the workflow, which hashes its rules' code (code_version 2.66 s -> 0.54 s per start with config/test.yaml,
    2-core VM). A missing, unreadable or unwritable cache only costs the parse."""
    text = Path(path).read_bytes()
    key = hashlib.sha256(_summary_salt() + module.encode() + b"\0" + text).hexdigest()
    cached = _summary_cache() / f"{key}.json"
    try:
        summary = json.loads(cached.read_text())
    except (OSError, ValueError):
        summary = _summarise(text.decode("utf-8"), path, module)
        try:
            save_json(cached, summary)
        except OSError:
            pass
    imports = {name: (target[0], target[1]) for name, target in summary["imports"].items()}
    references = {name: frozenset((m, n) for m, n in refs) for name, refs in summary["references"].items()}
    return summary["digests"], imports, references, frozenset(summary["constants"])


def _module_info(module: str) -> tuple[dict, dict, dict, frozenset] | None:
    path = _module_file(module)
    if path is None:
        return None
    st = path.stat()
    return _parse_module(str(path), st.st_mtime_ns, st.st_size, module)


def _references(node: ast.AST, module: str, imports: Mapping[str, tuple[str, str | None]]) -> set[tuple[str, str]]:
    """(module, name) pairs of the package that ``node`` refers to: bare names, ``module.attr``, imports inside."""
    local_imports = dict(imports)
    is_package = str(_module_file(module) or "").endswith("__init__.py")
    local_imports.update(_import_bindings([node], module, is_package))
    refs: set[tuple[str, str]] = set()

    def bind(name: str) -> tuple[str, str | None] | None:
        return local_imports.get(name)

    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            target = bind(sub.value.id)
            if target and target[1] is None and _module_file(target[0]):
                refs.add((target[0], sub.attr))
        if isinstance(sub, ast.Name):
            target = bind(sub.id)
            if target is None:
                refs.add((module, sub.id))
            elif target[1] is not None:
                refs.add(target)
    return {r for r in refs if r[0].split(".")[0] == _PACKAGE}


def _resolve(module: str, name: str, seen_modules: frozenset = frozenset()) -> tuple[str, str] | None:
    """Follow re-exports (``from .evaluate import evaluate``) to the module that defines ``name``."""
    info = _module_info(module)
    if info is None:
        return None
    digests, imports, _, _ = info
    if name in digests:
        return module, name
    if name in imports and module not in seen_modules:
        target_module, attr = imports[name]
        if attr is not None:
            return _resolve(target_module, attr, seen_modules | {module})
    return None


def code_closure(entries: Iterable[str], exclude: Iterable[str] = ()) -> dict[str, str]:
    """``{"module:name": sha256 of its docstring-free AST}`` for every package-level function, class or constant that
    the ``entries`` (``"stochattn.module:function"``) reach through their bodies, transitively.

    Names in ``exclude`` are not followed from an entry's own body nor from a module-level constant (a dispatch table
    such as ``_STAGES = {"sa": _sa, ...}``); they are still followed when another function reaches them: e.g. a
    dispatcher that names every method's function, hashed for one method only. An
    entry that does not exist raises KeyError. Calls through objects (``obj.method()``) are covered because a class
    is hashed whole; dynamic lookups (``getattr``) are not seen and must be listed as entries.
    """
    excluded = set(exclude)
    out: dict[str, str] = {}
    stack: list[tuple[str, str, bool]] = []
    for entry in entries:
        module, _, name = entry.partition(":")
        resolved = _resolve(module, name)
        if resolved is None:
            raise KeyError(f"code_closure: {entry!r} is not a module-level definition of the {_PACKAGE} package")
        stack.append((*resolved, True))
    while stack:
        module, name, is_entry = stack.pop()
        key = f"{module}:{name}"
        if key in out:
            continue
        path = _module_file(module)
        st = path.stat()  # type: ignore[union-attr]
        digests, _, references, constants = _parse_module(str(path), st.st_mtime_ns, st.st_size, module)
        out[key] = digests[name]
        cut = is_entry or name in constants  # where an excluded name is not followed
        for ref_module, ref_name in sorted(references[name]):
            if cut and f"{ref_module}:{ref_name}" in excluded:
                continue
            resolved = _resolve(ref_module, ref_name)
            if resolved is not None and f"{resolved[0]}:{resolved[1]}" not in out:
                stack.append((*resolved, False))
    return dict(sorted(out.items()))


def code_version(entries: Iterable[str], exclude: Iterable[str] = ()) -> dict[str, Any]:
    """``{"sha256", "entries", "exclude", "n_definitions"}``: the hash of :func:`code_closure` (one line
    ``"<module:name> <sha256>"`` per definition). Used as a rule's ``params.code`` (reruns follow the library) and
    recorded in meta.json / metrics.json; :mod:`stochattn.audit` recomputes it from ``entries`` / ``exclude``."""
    entries, exclude = sorted(set(entries)), sorted(set(exclude))
    closure = code_closure(entries, exclude)
    text = "".join(f"{k} {v}\n" for k, v in closure.items())
    return {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "entries": entries,
        "exclude": exclude,
        "n_definitions": len(closure),
    }


def stage_provenance(
    *,
    rule: str,
    inputs: Iterable[str | os.PathLike],
    code: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``provenance`` block of a run's meta.json / metrics.json: ``{"rule", "inputs": [file_record],
    "code": code_version, "params", "git_commit", "git_dirty", "cpu", "cpu_model", "cpu_capability"}`` (``params``:
    the config values the rule read, seed included; the commit: :func:`library_git_state`; the CPU:
    :func:`cpu_info`). The code hash says which code ran, the commit where to read it, the CPU's kernels whether a CPU
    rerun can repeat its bits."""
    return {
        "rule": rule,
        "inputs": [file_record(p) for p in _paths(inputs, "inputs")],
        "code": to_jsonable(dict(code)) if code is not None else None,
        "params": to_jsonable(dict(params or {})),
        **library_git_state(),
        **cpu_info(),
    }


@functools.lru_cache(maxsize=1)
def library_git_state() -> dict[str, Any]:
    """:func:`git_state` of the source checkout this ``stochattn`` is imported from (an editable install, or
    ``src/`` on the path), asked once a process (a job); ``{"git_commit": "unknown", "git_dirty": None}`` for an
    installed copy, whose files no repository tracks (a wheel; also one inside a repository's ignored ``.venv``)."""
    package = Path(__file__).resolve().parent
    if _git(["ls-files", "--error-unmatch", Path(__file__).name], package) is None:
        return {"git_commit": "unknown", "git_dirty": None}
    return git_state(package)


def with_outputs(provenance: Mapping[str, Any] | None, *paths: str | os.PathLike) -> dict[str, Any] | None:
    """``provenance`` (a :func:`stage_provenance` block) with ``"outputs"``: the :func:`file_record` of each of
    ``paths`` (files the stage wrote before the record that describes them, e.g. samples.npz before meta.json), so
    :mod:`stochattn.audit` checks them against what their producing rule wrote. None stays None."""
    if provenance is None:
        return None
    return {**dict(provenance), "outputs": [file_record(p) for p in paths]}


def write_sidecar(
    output: str | os.PathLike,
    *,
    rule: str,
    inputs: Iterable[str | os.PathLike],
    config_subset: Mapping[str, Any],
    seeds: Any,
    started: _dt.datetime | float,
    code: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    repo_dir: str | os.PathLike | None = None,
) -> Path:
    """Write ``<output>.prov.json`` (:func:`provenance_record`, finished now) for a file or folder that cannot hold
    its own record: a prepared array file, a fetched file, a folder of shards or of generated data. ``code`` (a
    :func:`code_version`) goes to ``extra["code"]``; for a folder, ``extra["files"]`` lists the SHA-256 of every
    file in it, so the audit names the file that changed. Returns the written path."""
    import time

    more = dict(extra or {})
    if code is not None:
        more["code"] = dict(code)
    if Path(output).is_dir():
        root = Path(output)
        more["files"] = {q.relative_to(root).as_posix(): sha256_file(q) for q in folder_files(root)}
    record = provenance_record(rule=rule, inputs=inputs, outputs=[output], config_subset=config_subset, seeds=seeds,
                               started=started, finished=time.time(), extra=more, repo_dir=repo_dir)  # fmt: skip
    return write_provenance(output, record)


class JobProvenance:
    """The records of one Snakemake job, from the ``snakemake`` object its script is given: the job's rule, inputs,
    params (``params.code``: the library's code version; ``params.seed``) and the workflow's repository.

    ``stage(inputs)`` is the block a stage embeds in the JSON it writes (:func:`stage_provenance`);
    ``sidecar(output)`` writes ``<output>.prov.json`` for an output that cannot hold one (:func:`write_sidecar`).
    """

    def __init__(self, job: Any) -> None:
        import time

        self.job = job
        self.started = time.time()

    @property
    def params(self) -> dict[str, Any]:
        """The job's params but ``code``."""
        return {k: v for k, v in self.job.params.items() if k != "code"}

    def stage(self, inputs: Iterable[str | os.PathLike] | None = None) -> dict[str, Any]:
        """:func:`stage_provenance` of the job (``inputs``: default every input of the job)."""
        return stage_provenance(rule=self.job.rule, inputs=list(self.job.input) if inputs is None else inputs,
                                code=self.job.params.get("code"), params=self.params)  # fmt: skip

    def sidecar(self, output: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> Path:
        """:func:`write_sidecar` of ``output`` with every input of the job, its params but seed and its seed."""
        return write_sidecar(
            output, rule=self.job.rule, inputs=list(self.job.input), seeds=self.job.params.get("seed"),
            config_subset={k: v for k, v in self.params.items() if k != "seed"}, started=self.started,
            code=self.job.params.get("code"), extra=extra, repo_dir=os.path.dirname(self.job.scriptdir),
        )


def _gpu_count(requested: Any) -> int:
    """GPUs of a job's ``gpu`` resource; a gres string such as ``"gpu:a100:1"`` counts as 1."""
    try:
        return int(requested or 0)
    except (TypeError, ValueError):
        return 1


def check_gpu_request(requested_gpus: Any, require_gpu: bool = True) -> None:
    """Fail clearly when a job was given GPUs by the scheduler (``resources.gpu > 0``) but torch sees no CUDA:
    without this check the job would silently train on the node's CPU, for hours. The message names the cause (a
    CPU-only build, a driver older than the build's CUDA needs) and the install line of a build that fits
    (:mod:`stochattn.cuda_builds`). ``require_gpu=False`` (config key ``require_gpu``) skips the check, for runs
    meant to be on CPUs only."""
    if _gpu_count(requested_gpus) <= 0 or not require_gpu:
        return
    import torch

    if not torch.cuda.is_available():
        from stochattn.cuda_builds import local_driver_version, node_problems, torch_build

        driver = local_driver_version()
        why = node_problems(torch_build(), None, driver) or [
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no device with NVIDIA driver {driver}"
            if driver else "no NVIDIA driver answers on this node (nvidia-smi not found or failing): is it a GPU node?"]
        raise RuntimeError(
            f"this job requested {requested_gpus} GPU(s) but torch sees no CUDA device (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}): {'; '.join(why)}. `stochattn preflight` checks the GPU "
            "nodes against the environment's torch build before a run (docs/guide/cluster.md, \"Drivers and CUDA "
            "builds\")"
        )
    check_gpu_arch()


def resume_checkpoint(sm: Any) -> Path:
    """The training checkpoint of a workflow job (``sm``: its snakemake object): a hidden file beside its first
    output, named by a hash of the job's params (settings, seed, code version), so that a rerun after a kill resumes
    from it (:func:`stochattn.training.fit_regressor`) and a job with other settings never meets it. Snakemake does
    not delete it when the job fails, and a completed training leaves its final state there, so that a job killed
    after its training ended (in the teardown at its time limit) does not train again on its retry; the workflow
    deletes the file once the job's outputs are accepted (:func:`remove_finished_resumes`). Fits inside
    :func:`stochattn.training.resumable` use ``<stem>.<i>.pt`` beside it.

    Where the rule declares a log named ``attempts`` (``attempts_file`` in rules/common.smk, beside the job's
    benchmark record), the first call in a job writes there the training its earlier attempts saved (0 in a first
    attempt; :func:`record_earlier_attempts`): Snakemake's benchmark record times the last attempt only."""
    digest = hashlib.sha256(json.dumps(to_jsonable(dict(sm.params.items())), sort_keys=True).encode()).hexdigest()
    out = Path(sm.output[0])
    checkpoint = out.with_name(f".{out.name}.resume-{digest[:12]}.pt")
    record = getattr(getattr(sm, "log", None), "attempts", None)
    if record is not None and (checkpoint, str(record)) not in _EARLIER_RECORDED:
        _EARLIER_RECORDED.add((checkpoint, str(record)))  # later calls in the job would count its own saves
        record_earlier_attempts(record, checkpoint, rule=str(getattr(sm, "rule", "")), wildcards=dict(sm.wildcards))
    return checkpoint


_EARLIER_RECORDED: set[tuple[Path, str]] = set()


def record_earlier_attempts(path: str | os.PathLike, checkpoint: Path, *, rule: str, wildcards: Mapping) -> float:
    """Write ``path`` (JSON ``{"rule", "wildcards", "checkpoint", "earlier_seconds", "earlier_cpu_seconds"}``) before
    the job trains: the wall clock and CPU time of the training its checkpoint files (:func:`resume_checkpoint`) hold
    from earlier attempts (:func:`stochattn.training.saved_training_time`; 0.0 in a first attempt, CPU None where a
    checkpoint predates it), which :func:`stochattn.resources.read_benchmarks` adds to the job's benchmark record.
    Left out: the work after an attempt's last save (at most a few minutes by design) and each attempt's start-up.
    Returns the wall seconds."""
    from stochattn.training import saved_training_time

    seconds, cpu = saved_training_time(checkpoint)
    save_json(path, {"rule": rule, "wildcards": to_jsonable(wildcards), "checkpoint": checkpoint.name,
                     "earlier_seconds": seconds, "earlier_cpu_seconds": cpu})  # fmt: skip
    return seconds


_RESUME_FILE = re.compile(r"^\.(?P<output>.+)\.resume-[0-9a-f]{12}(\.\d+)?\.pt$")


def remove_finished_resumes(root: str | os.PathLike) -> list[Path]:
    """Delete the training checkpoints (:func:`resume_checkpoint`) under ``root`` whose job output exists: called
    when a workflow run succeeds (Snakefile ``onsuccess``), where every existing output has been accepted. The
    checkpoints of jobs that have not written their output yet (interrupted, or not part of this run) stay, to be
    resumed. The walk skips directory outputs (Snakemake marks them with ``.snakemake_timestamp``; a checkpoint sits
    beside a job's output, never inside it), such as the staged ERA5 data. Returns the deleted paths."""
    removed = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not (Path(folder) / d / ".snakemake_timestamp").exists())
        for name in sorted(names):
            match = _RESUME_FILE.match(name)
            if match and (Path(folder) / match["output"]).exists():
                (Path(folder) / name).unlink(missing_ok=True)
                removed.append(Path(folder) / name)
    return removed


def check_gpu_arch(device: int = 0) -> None:
    """Fail at once when torch's CUDA build has no kernels for the GPU (torch.cuda.is_available() is true then,
    and the first kernel fails with "no kernel image is available"): names the device, its capability, the build
    and the wheel index that has kernels for it."""
    import torch

    from stochattn.cuda_builds import TorchBuild, local_driver_version, node_problems

    capability = torch.cuda.get_device_capability(device)
    build = TorchBuild(torch.__version__, torch.version.cuda, tuple(torch.cuda.get_arch_list()))
    problems = node_problems(build, torch.cuda.get_device_name(device), local_driver_version(), capability)
    if problems:
        raise RuntimeError("; ".join(problems))


def check_model_job(sm: Any) -> None:
    """At the start of a job that trains or samples a model (``sm``: the job's snakemake object): its rule must
    declare the GPUs of config ``cluster.gpus_per_job`` (so no model job reaches a CPU partition because its rule
    forgot them: e.g. a ``use rule ... with: resources:`` block replaces the parent's whole block), and a GPU it
    was given must be usable (:func:`check_gpu_request`). From then on the job cannot download
    (:func:`stochattn.staging.forbid_network`): what it reads was staged before it started."""
    requested = sm.resources.get("gpu", 0)
    expected = int(sm.config.get("cluster", {}).get("gpus_per_job", 0))
    n = _gpu_count(requested)
    if n < expected:
        raise RuntimeError(
            f"rule {sm.rule} trains or samples a model but requests {n} GPU(s), config cluster.gpus_per_job is "
            f"{expected}: give the rule `gpu=GPUS_PER_JOB` in its resources and `threads: GPU_THREADS` "
            "(rules/common.smk)"
        )
    check_gpu_request(requested, sm.config.get("require_gpu", True))
    from stochattn.staging import forbid_network

    forbid_network(f"rule {sm.rule} is a model job (GPU jobs never download)")
