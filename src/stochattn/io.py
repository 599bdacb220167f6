"""Atomic file writers and small file utilities.

Every file the library or the workflow writes goes through :func:`atomic_path`: the content is written to a
temporary file in the *same* directory (so the final rename never crosses a file system) and moved over the
target with :func:`os.replace` only when writing succeeded. A reader therefore sees either the old file or the
complete new one, and a writer that raises leaves no file (and no temporary file) behind.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import pickle
import secrets
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_path",
    "save_npz",
    "load_npz",
    "save_json",
    "load_json",
    "save_torch",
    "load_torch",
    "save_model",
    "load_model",
    "sha256_record",
    "record_of",
    "recorded_problem",
    "verified",
    "UnreadableFileError",
    "RECORD_KEY",
    "to_jsonable",
    "sha256_file",
]

PathLike = str | os.PathLike

RECORD_KEY = "sha256"
"""Key of a record JSON (a meta.json, a ``<stem>.json``) that holds ``{file name: SHA-256}`` of the files its writer
wrote beside it (:func:`sha256_record`), checked by every reader of those files (:func:`verified`) and by
``stochattn audit``."""


class UnreadableFileError(ValueError):
    """A file that cannot be used as what its writer wrote: truncated or corrupt, or changed since its writer recorded
    its SHA-256 (:func:`verified`). The message names the file; the original error is chained."""


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success, remove it on error.

    Parent directories of ``path`` are created as needed. The temporary file already exists (empty, created
    with mode 0o666 minus the umask, like a plain ``open``) when the body runs; the body may overwrite it.
    If the body raises, or leaves no file at the temporary path, ``path`` is left untouched.

    Example::

        with atomic_path("out/table.csv") as tmp:
            df.to_csv(tmp, index=False)
    """
    target = Path(path)
    if target.name in ("", ".", ".."):
        raise ValueError(f"path must name a file, got {str(path)!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    # os.open with O_EXCL instead of tempfile.mkstemp so that the final file gets the usual umask-based mode
    # (mkstemp creates 0o600 files, which would be unreadable to collaborators on a shared cluster).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.close(fd)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(
                f"atomic write of {str(target)!r}: the writer removed its temporary file {str(tmp)!r}"
            )
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def save_npz(path: PathLike, **arrays: Any) -> Path:
    """Write ``arrays`` (name -> array-like) to an uncompressed ``.npz`` file at exactly ``path``, atomically.

    The file is what ``numpy.savez`` writes (one ``<name>.npy`` member per array, readable by ``numpy.load``) but
    byte-reproducible: every zip member carries the fixed date 1980-01-01 instead of the time of writing, so the
    same arrays always give the same bytes (and the same SHA-256 in provenance records and audits).
    Object arrays are refused, so that :func:`load_npz` never needs ``allow_pickle``.
    """
    if not arrays:
        raise ValueError("save_npz needs at least one array")
    converted = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"save_npz: array {name!r} has dtype object; store numbers or strings only")
        converted[name] = arr
    target = Path(path)
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as fh:
            with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, arr in converted.items():
                    info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                    info.external_attr = 0o600 << 16
                    with zf.open(info, "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, arr, allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
    return target


# what numpy, json and torch raise for a truncated or damaged file (torch: RuntimeError from its zip reader,
# UnpicklingError from its weights-only unpickler)
_READ_ERRORS = (OSError, ValueError, EOFError, RuntimeError, KeyError, zipfile.BadZipFile, zlib.error,
                pickle.UnpicklingError)


def _rebuild(path: PathLike) -> str:
    """How to replace a bad file: its job again, and every job that read it. In the workflow a missing intermediate
    file triggers nothing while the tables built from it exist, so the hint names Snakemake's --forcerun."""
    return (f"rebuild it and what was made from it (workflow: snakemake --forcerun {os.fspath(path)} with your usual "
            "target and options)")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else repr(err)


@contextlib.contextmanager
def _naming(path: PathLike, what: str) -> Iterator[None]:
    """Re-raise a reader's error (but a missing file, whose error names it already) as :class:`UnreadableFileError`
    naming ``path`` (``what``: the format expected), the original chained."""
    try:
        yield
    except (FileNotFoundError, IsADirectoryError, PermissionError, UnreadableFileError):  # these name the file
        raise
    except _READ_ERRORS as err:
        raise UnreadableFileError(
            f"{os.fspath(path)}: not a readable {what} ({type(err).__name__}: {_first_line(err)}); truncated or "
            f"corrupt? {_rebuild(path)}"
        ) from err


def load_npz(path: PathLike) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file into a dict (no pickles). A truncated or corrupt file raises
    :class:`UnreadableFileError` naming it."""
    with _naming(path, ".npz file"):
        with np.load(Path(path), allow_pickle=False) as data:
            return {name: data[name] for name in data.files}


def to_jsonable(obj: Any) -> Any:
    """Recursively convert ``obj`` into plain JSON types.

    numpy scalars -> Python scalars, numpy arrays -> nested lists, tuples/sets -> lists (sets sorted),
    ``Path`` -> str, ``datetime``/``date`` -> ISO string, mapping keys -> str. Anything else raises TypeError.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, float)) and not isinstance(obj, np.generic):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (_dt.datetime, _dt.date)):
        return obj.isoformat()
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            skey = key if isinstance(key, str) else str(to_jsonable(key))
            if skey in out:
                raise ValueError(f"to_jsonable: two keys map to the same string {skey!r}")
            out[skey] = to_jsonable(value)
        return out
    if isinstance(obj, (set, frozenset)):
        return sorted(to_jsonable(v) for v in obj)
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"to_jsonable: cannot convert object of type {type(obj).__name__} to JSON")


def save_json(path: PathLike, obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as JSON (sorted keys, indented, trailing newline) to ``path``, atomically.

    numpy scalars/arrays, paths, datetimes are converted by :func:`to_jsonable`. NaN/inf are written as the
    JavaScript literals ``NaN``/``Infinity`` (what Python's json module reads back).
    """
    text = json.dumps(to_jsonable(obj), sort_keys=True, indent=indent) + "\n"
    target = Path(path)
    with atomic_path(target) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    return target


def save_torch(path: PathLike, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path``, atomically and fsynced (e.g. a training checkpoint that a kill may hit).

    Byte-reproducible: the same object gives the same bytes whatever the target's name. ``torch.save`` given a *path*
    names the zip archive's folder after the file (here the random temporary name of :func:`atomic_path`), so two
    identical runs differed in their bytes; given an open file it names the folder ``archive`` and stamps every
    member with the same fixed date, which is what this writes."""
    import torch  # here, so that this module stays importable without torch

    target = Path(path)
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
    return target


def load_torch(path: PathLike) -> Any:
    """``torch.load(path)`` on the CPU with ``weights_only=True`` (tensors and plain containers, no pickled code);
    an unreadable file raises :class:`UnreadableFileError` naming it. Not checked against a record: a file that a
    later job trusts is read by :func:`load_model`."""
    import torch

    with _naming(path, "torch file"):
        return torch.load(Path(path), map_location="cpu", weights_only=True)


def sha256_record(*paths: PathLike) -> dict[str, str]:
    """``{file name: SHA-256}`` of files of one folder: the :data:`RECORD_KEY` entry of the record JSON its writer puts
    beside them (:func:`record_of`), e.g. ``meta["sha256"] = sha256_record(samples_path)``."""
    folders = {Path(p).parent.resolve() for p in paths}
    if len(folders) > 1:
        raise ValueError(f"sha256_record: the files of one record lie in one folder, got {[str(p) for p in paths]}")
    return {Path(p).name: sha256_file(p) for p in paths}


def save_model(path: PathLike, obj: Any) -> dict[str, str]:
    """:func:`save_torch` (atomic, byte-reproducible) and its :func:`sha256_record`: the writer puts it under
    :data:`RECORD_KEY` in the record JSON beside ``path`` (:func:`record_of`), which :func:`load_model` checks."""
    save_torch(path, obj)
    return sha256_record(path)


def record_of(path: PathLike) -> Path:
    """The record JSON of a file that a later job reads: ``<stem>.json`` beside it when that is another file and
    exists (a MultiSWAG component ``3.pt`` -> ``3.json``, ``adapter.pt`` -> ``adapter.json``), else ``meta.json`` in
    its folder (``backbone/model.pt``, a run's ``samples.npz`` and ``calibration.json``)."""
    p = Path(path)
    own = p.with_suffix(".json")
    return own if own != p and own.is_file() else p.with_name("meta.json")


def recorded_problem(path: PathLike) -> str | None:
    """None when ``path``'s SHA-256 is the one its record JSON (:func:`record_of`) holds under :data:`RECORD_KEY`;
    otherwise what is wrong, in a sentence naming ``path`` and the record (missing file, no record, no entry, or a
    different hash: the file changed after its writer recorded it)."""
    p, record = Path(path), record_of(path)
    if not p.is_file():
        return f"{os.fspath(path)}: missing"
    if not record.is_file():
        return f"{os.fspath(path)}: no record of its SHA-256 ({record} does not exist)"
    try:
        entry = load_json(record)
    except UnreadableFileError as err:
        return str(err)
    recorded = (entry.get(RECORD_KEY) or {}).get(p.name) if isinstance(entry, dict) else None
    if not isinstance(recorded, str):
        return (f"{os.fspath(path)}: {record} records no SHA-256 of {p.name!r} (written by an older version of "
                f"stochattn?); {_rebuild(path)}")
    actual = sha256_file(p)
    if actual != recorded.lower():
        return (f"{os.fspath(path)}: modified since it was written (corrupted or replaced): SHA-256 "
                f"{actual[:16]}... differs from {recorded[:16]}... recorded in {record}; {_rebuild(path)}")
    return None


def verified(path: PathLike) -> Path:
    """``path`` once its SHA-256 matches its record (:func:`recorded_problem`), else :class:`UnreadableFileError`
    naming it (FileNotFoundError when it does not exist); e.g. ``load_npz(verified(samples_path))``."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{os.fspath(path)}: no such file")
    problem = recorded_problem(path)
    if problem is not None:
        raise UnreadableFileError(problem)
    return Path(path)


def load_model(path: PathLike) -> Any:
    """A torch file that a later job trusts (a backbone, adapter, SWAG posterior, fitted candidate): checked against
    the SHA-256 its writer recorded (:func:`verified`), then :func:`load_torch`. Errors name the file."""
    return load_torch(verified(path))


def load_json(path: PathLike) -> Any:
    """Read a JSON file (UTF-8); invalid JSON raises :class:`UnreadableFileError` naming the file."""
    with _naming(path, "JSON file"):
        with open(Path(path), encoding="utf-8") as fh:
            return json.load(fh)


def read_sha256_table(
    path: str | os.PathLike | None, resource: str, strip_prefixes: tuple[str, ...] = ()
) -> dict[str, str]:
    """A ``sha256sum``-style table as ``{relative path: sha256}``: the file ``path``, or (``path=None``) the
    table ``resource`` shipped in ``stochattn.data``. A leading ``*``, ``./`` and then each of ``strip_prefixes``
    is removed from the names; a malformed line is a ValueError naming source and line."""
    if path is None:
        from importlib import resources

        text = resources.files("stochattn.data").joinpath(resource).read_text(encoding="utf-8")
        source = f"package resource stochattn/data/{resource}"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = str(path)
    table: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        digest = parts[0].lower()
        if len(parts) != 2 or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{source}, line {lineno}: expected '<sha256>  <file>', got {line!r}")
        rel = parts[1].lstrip("*").strip().removeprefix("./")
        for prefix in strip_prefixes:
            rel = rel.removeprefix(prefix)
        table[rel] = digest
    return table


def as_sha256_table(checksums, resource: str, strip_prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """``checksums`` as a table: a mapping (copied, digests lower-cased), a path or None (:func:`read_sha256_table`)."""
    if checksums is None or isinstance(checksums, (str, os.PathLike)):
        return read_sha256_table(checksums, resource, strip_prefixes)
    if isinstance(checksums, Mapping):
        return {str(k): str(v).lower() for k, v in checksums.items()}
    raise TypeError(f"checksums must be a mapping, a path or None, got {type(checksums).__name__}")


def sha256_file(path: PathLike, *, chunk_size: int = 1 << 20) -> str:
    """Lower-case hex SHA-256 of a file's bytes, read in chunks of ``chunk_size``."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    digest = hashlib.sha256()
    with open(Path(path), "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
