"""The four ETT-small data sets (ETTh1, ETTh2, ETTm1, ETTm2) for the TimesFM 2.5 experiment (App. C, L1168-1174).

Layout (github.com/zhouhaoyi/ETDataset, folder ``ETT-small/``): one CSV per data set, header
``date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT``, dates ``YYYY-MM-DD HH:MM:SS``, hourly (ETTh*, 17,420 rows) or every 15
minutes (ETTm*, 69,680 rows). A data mirror holds ``<mirror>/ETT-small/<name>.csv`` or ``<name>.csv.gz``.

Protocol (Informer's, which the paper follows): fixed borders train / val / test (:data:`ETT_DATASETS`); the rows
after the test border are unused. Every column is an independent univariate series. Values are z-scored per
column with the statistics of the full training segment. A (context, target) window of a part has its target
inside the part; its context is the ``context`` rows right before the target, so val/test contexts reach back
into the preceding part (Informer's ``border1 = border - seq_len``) and no window reaches into the next part.

Pipeline:
    fetch_ett         mirrors first (SHA-256 of the plain CSV verified), else download; writes ``<name>.csv``
    load_ett          (dates (T,), values (T, 7) float64, column names); truncated/ragged files are errors
    normalise         z-scored values with per-column mean/std of the training rows
    window_starts     start rows of the (context, target) windows of one part (10 % adaptation rule for train)
    make_windows      (n_windows * 7, context) inputs and (n_windows * 7, horizon) targets of one part
    station / pretraining_sources   which data a backbone may be pretrained on for an evaluated data set
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import logging
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.data.uci import DataFetchError, _check_mirrors, _download_verified, _Mismatch
from stochattn.extras import requires
from stochattn.io import as_sha256_table, atomic_path, read_sha256_table, sha256_file

__all__ = [
    "ETTDataset",
    "ETT_DATASETS",
    "ETT_COLUMNS",
    "ETT_URL_TEMPLATE",
    "PARTS",
    "DataFetchError",
    "UnknownDatasetError",
    "ETTWindows",
    "resolve_ett",
    "load_ett_checksums",
    "fetch_ett",
    "load_ett",
    "train_statistics",
    "normalise",
    "denormalise",
    "part_rows",
    "adaptation_end",
    "window_starts",
    "check_horizons",
    "make_windows",
    "station",
    "pretraining_sources",
]

log = logging.getLogger(__name__)

ETT_URL_TEMPLATE = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/{file}"
"""Raw-file URL pattern of the official repository; ``{file}`` is e.g. ``ETTh1.csv``."""

ETT_COLUMNS: tuple[str, ...] = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
"""The seven value columns, in file order (the first CSV column, ``date``, is not a value)."""

_HEADER = "date," + ",".join(ETT_COLUMNS)
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_CHECKSUM_RESOURCE = "ett_sha256.txt"

PARTS = ("train", "val", "test")
"""The three parts of Informer's split, in time order."""


@dataclass(frozen=True)
class ETTDataset:
    """One ETT-small data set: ``name`` (``ETTh1`` ...), CSV ``file`` name, public ``url``, transformer
    ``station`` (1 or 2), sampling ``step_minutes`` (60 or 15), ``n_rows`` (data rows of the public file) and
    Informer's borders ``train_end``, ``val_end``, ``test_end`` (train = rows [0, train_end), val = [train_end,
    val_end), test = [val_end, test_end); rows from ``test_end`` on are unused)."""

    name: str
    file: str
    url: str
    station: int
    step_minutes: int
    n_rows: int
    train_end: int
    val_end: int
    test_end: int

    def rows(self, part: str) -> tuple[int, int]:
        """``(start, end)`` rows of ``part`` (``"train"``, ``"val"`` or ``"test"``); the part is [start, end)."""
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, got {part!r}")
        return {"train": (0, self.train_end), "val": (self.train_end, self.val_end),
                "test": (self.val_end, self.test_end)}[part]  # fmt: skip


def _ett(name: str, station: int, step_minutes: int, n_rows: int, borders: tuple[int, int, int]) -> ETTDataset:
    file = f"{name}.csv"
    return ETTDataset(name, file, ETT_URL_TEMPLATE.format(file=file), station, step_minutes, n_rows, *borders)


# Informer: ETTh 12/4/4 months of 30 days x 24 h; ETTm the same months x 96 quarter hours.
_H_BORDERS = (12 * 30 * 24, (12 + 4) * 30 * 24, (12 + 8) * 30 * 24)  # 8640, 11520, 14400
_M_BORDERS = tuple(4 * b for b in _H_BORDERS)  # 34560, 46080, 57600

ETT_DATASETS: dict[str, ETTDataset] = {
    d.name: d
    for d in (
        _ett("ETTh1", 1, 60, 17420, _H_BORDERS),
        _ett("ETTh2", 2, 60, 17420, _H_BORDERS),
        _ett("ETTm1", 1, 15, 69680, _M_BORDERS),
        _ett("ETTm2", 2, 15, 69680, _M_BORDERS),
    )
}
"""Name -> :class:`ETTDataset` for ETTh1, ETTh2, ETTm1, ETTm2."""


class UnknownDatasetError(DataFetchError, ValueError):
    """An ETT data set name that is not in :data:`ETT_DATASETS` (a DataFetchError, as for UCI, and a ValueError)."""


def resolve_ett(name: str | ETTDataset) -> ETTDataset:
    """``name`` looked up in :data:`ETT_DATASETS`; an :class:`ETTDataset` is returned as is.

    Raises :class:`UnknownDatasetError` naming the unknown name and the known ones.
    """
    if isinstance(name, ETTDataset):
        return name
    if not isinstance(name, str) or name not in ETT_DATASETS:
        raise UnknownDatasetError(f"unknown ETT data set name {name!r}; known: {', '.join(ETT_DATASETS)}")
    return ETT_DATASETS[name]


# ------------------------------------------------------------------------------------------------------------------
# fetch
# ------------------------------------------------------------------------------------------------------------------
def load_ett_checksums(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Read a ``sha256sum``-style table into ``{"<name>.csv": sha256}`` (SHA-256 of the PLAIN, uncompressed CSV).

    ``path=None`` reads the table shipped with the package (``stochattn/data/ett_sha256.txt``). A leading ``./``
    or ``ETT-small/`` is stripped from the file names. Entries for ``.gz`` files (e.g. from a mirror's own
    ``SHA256SUMS``) are kept under their ``.gz`` name and therefore never used: :func:`fetch_ett` looks up the
    plain ``<name>.csv`` only, so a table of gzip digests fails with "no expected SHA-256" instead of silently
    comparing the wrong form.
    """
    return read_sha256_table(path, _CHECKSUM_RESOURCE, ("ETT-small/",))


def _copy_verified(src: Path, dest: Path, expected: str) -> None:
    """Copy ``src`` (plain or ``.gz``: decompressed) to ``dest`` atomically if the plain bytes' SHA-256 equals
    ``expected``; else raise _Mismatch (or OSError/EOFError/zlib.error for a broken gzip), ``dest`` untouched."""
    opener = gzip.open if src.name.endswith(".gz") else open
    with atomic_path(dest) as tmp:
        digest = hashlib.sha256()
        with opener(src, "rb") as fin, open(tmp, "wb") as out:
            while chunk := fin.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        got = digest.hexdigest()
        if got != expected:
            raise _Mismatch(got)


def fetch_ett(
    name: str | ETTDataset,
    out_dir: str | os.PathLike,
    *,
    mirrors: Iterable[str | os.PathLike],
    allow_download: bool = True,
    url_template: str | None = None,
    timeout: float = 60.0,
    checksums: Mapping[str, str] | str | os.PathLike | None = None,
) -> Path:
    """Put the verified plain CSV of ETT data set ``name`` at ``out_dir/<name>.csv`` and return that path.

    A copy already there with the right SHA-256 is kept (a copy with the wrong one is removed). Else each mirror
    in ``mirrors`` (a folder laid out like the shared data folder) is tried in order, first
    ``<mirror>/ETT-small/<name>.csv``, then ``<mirror>/ETT-small/<name>.csv.gz`` (decompressed); else, when
    ``allow_download``, the public CSV is downloaded from ``url_template`` (default :data:`ETT_URL_TEMPLATE`,
    formatted with ``file``; ``urllib``, ``timeout`` seconds). Every source is checked against the SHA-256 of the
    plain CSV (``checksums``: ``{"<name>.csv": sha256}``, a path to a ``sha256sum``-style table, or ``None`` for
    the shipped table), so a gzip mirror and the public file are checked the same way.

    The CSV is written atomically: a source with the wrong SHA-256 (or a broken gzip) is skipped and leaves
    nothing behind. Raises :class:`DataFetchError` (naming the file, the URL, the mirrors and what each source
    gave) when no source delivered the expected bytes; ``out_dir/<name>.csv`` then does not exist.
    """
    ds = resolve_ett(name)
    mirror_dirs = _check_mirrors(mirrors)
    table = as_sha256_table(checksums, _CHECKSUM_RESOURCE, ("ETT-small/",))
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    url = (url_template or ETT_URL_TEMPLATE).format(file=ds.file)
    mirror_setting = f"mirrors={[str(m) for m in mirror_dirs]!r}"
    expected = table.get(ds.file)
    if expected is None:
        raise DataFetchError(
            f"ETT {ds.name!r}: no expected SHA-256 of the plain CSV {ds.file!r} in the checksum table, refusing to "
            f"use it unverified (URL {url}, {mirror_setting})"
        )

    target = Path(out_dir) / ds.file
    if target.is_file():
        if sha256_file(target) == expected:
            return target
        log.warning("ETT %s: %s has the wrong SHA-256; removing it and fetching again", ds.name, target)
        target.unlink()

    attempts: list[str] = [] if mirror_dirs else ["no mirror configured"]
    for mirror in mirror_dirs:
        folder = mirror / "ETT-small"
        candidates = [folder / ds.file, folder / f"{ds.file}.gz"]
        present = [c for c in candidates if c.is_file()]
        if not present:
            where = "folder does not exist" if not folder.is_dir() else f"neither {ds.file} nor {ds.file}.gz found"
            attempts.append(f"mirror {folder}: {where}")
            continue
        for src in present:
            try:
                _copy_verified(src, target, expected)
                return target
            except _Mismatch as err:
                attempts.append(f"mirror file {src}: checksum mismatch (of the plain CSV): expected {expected}, "
                                f"got {err.got}")  # fmt: skip
                log.warning("ETT %s: %s has SHA-256 %s, expected %s; trying the next source",
                            ds.name, src, err.got, expected)  # fmt: skip
            except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
                attempts.append(f"mirror file {src}: unreadable: {err!r}")
    if allow_download:
        try:
            _download_verified(url, target, expected, timeout)
            return target
        except _Mismatch as err:
            attempts.append(f"download {url}: checksum mismatch: expected {expected}, got {err.got}")
        except (OSError, ValueError, http.client.HTTPException) as err:  # URLError is an OSError
            attempts.append(f"download {url}: failed: {err!r}")
    else:
        attempts.append(f"download {url}: not attempted (allow_download=False)")
    details = "\n  ".join(attempts)
    raise DataFetchError(
        f"ETT {ds.name!r}: cannot obtain {ds.file!r} (expected SHA-256 of the plain CSV {expected}) from any source; "
        f"URL {url}, {mirror_setting}, allow_download={allow_download}.\n  {details}\n"
        f"Nothing was written to {target}. Put a verified copy under <mirror>/ETT-small/{ds.file}[.gz], or allow "
        "network access."
    )


# ------------------------------------------------------------------------------------------------------------------
# load
# ------------------------------------------------------------------------------------------------------------------
def _infer_name(path: Path) -> str:
    stem = path.name.removesuffix(".gz").removesuffix(".csv")
    if stem not in ETT_DATASETS:
        raise UnknownDatasetError(
            f"{path}: cannot tell which ETT data set this is from its name; pass name= (one of "
            f"{', '.join(ETT_DATASETS)})"
        )
    return stem


def load_ett(
    path: str | os.PathLike, name: str | ETTDataset | None = None
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Read an ETT-small CSV (plain, or ``.gz``) in the public format.

    ``name``: the data set whose borders the file must cover; ``None`` infers it from the file name
    (``ETTh1.csv`` / ``ETTh1.csv.gz`` -> ``ETTh1``).

    Returns ``(dates (T,) datetime64[s], values (T, 7) float64, columns)`` with ``columns`` =
    :data:`ETT_COLUMNS` (HUFL ... OT), original units, all ``T`` data rows of the file.

    Raises ValueError naming the file and what is wrong when: the header is not
    ``date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT``; the file does not end with a newline or a row has a missing,
    extra or non-numeric field (a ragged / cut-off last line); a date does not parse or the dates are not
    evenly spaced at the data set's step (a lost row would shift every border); or there are fewer rows than
    the test border (``test_end``) needs (a truncated file).
    """
    with requires("workflow"):
        import pandas as pd  # pandas only where a CSV is parsed

    path = Path(path)
    ds = resolve_ett(name) if name is not None else resolve_ett(_infer_name(path))
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"{path}: not a readable gzip file ({err!r}); truncated?") from err
    if not raw:
        raise ValueError(f"{path}: the file is empty")
    first_line = raw.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    if first_line != _HEADER:
        raise ValueError(f"{path}: header is {first_line!r}, expected {_HEADER!r} (the public ETT-small format)")
    if not raw.endswith(b"\n"):
        last = raw.rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace")
        raise ValueError(
            f"{path}: the last line {last!r} is incomplete (the file does not end with a newline); the file is "
            "truncated: fetch it again"
        )
    try:
        df = pd.read_csv(io.BytesIO(raw), header=0, dtype={c: np.float64 for c in ETT_COLUMNS})
    except (ValueError, pd.errors.ParserError) as err:  # extra fields, non-numeric text
        raise ValueError(f"{path}: cannot parse as an ETT-small CSV: {err}") from err
    values = df[list(ETT_COLUMNS)].to_numpy(dtype=np.float64, copy=True)
    bad = ~np.isfinite(values).all(axis=1) | df["date"].isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        what = "is ragged (missing fields)" if row == len(df) - 1 else "has a missing or non-finite value"
        raise ValueError(f"{path}: data row {row} (line {row + 2}) {what}; the file is damaged or truncated")
    try:
        dates = pd.to_datetime(df["date"], format=_DATE_FORMAT).to_numpy().astype("datetime64[s]")
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path}: a date does not match {_DATE_FORMAT!r}: {err}") from err
    if len(dates) > 1:
        steps = np.diff(dates)
        wrong = np.flatnonzero(steps != np.timedelta64(ds.step_minutes * 60, "s"))
        if wrong.size:
            i = int(wrong[0])
            raise ValueError(
                f"{path}: dates are not evenly spaced at {ds.step_minutes} min ({ds.name}): data row {i} is "
                f"{dates[i]} and row {i + 1} is {dates[i + 1]}; a missing or extra row would shift the split borders"
            )
    if len(df) < ds.test_end:
        raise ValueError(
            f"{path}: {len(df)} data rows, fewer than the {ds.test_end} that {ds.name}'s test part (rows "
            f"{ds.val_end}-{ds.test_end}) needs ({ds.n_rows} in the public file); the file is truncated"
        )
    return dates, values, ETT_COLUMNS


# ------------------------------------------------------------------------------------------------------------------
# normalisation
# ------------------------------------------------------------------------------------------------------------------
def _check_values(values: Any, ds: ETTDataset) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] < ds.test_end:
        raise ValueError(
            f"values must be 2-D (T, n_columns) with T >= {ds.test_end} ({ds.name}'s test border), got shape "
            f"{values.shape}"
        )
    return values


def train_statistics(values: np.ndarray, name: str | ETTDataset) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(mean (C,), std (C,))`` of the training rows ``values[:train_end]`` of data set ``name``.

    ``values``: (T, C), T >= the data set's ``test_end``.

    NOTE[DIFF]: the paper says "statistics on the full training segment" (L1171). We use all rows [0, train_end)
    (not the 10 % adaptation subset, as GPT4TS/Time-LLM do with ``percent``) and the population std (ddof=0,
    sklearn's StandardScaler, as Informer). A column constant on the training rows gets std 1.
    """
    ds = resolve_ett(name)
    train = _check_values(values, ds)[: ds.train_end]
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    constant = std <= 1e-12 * np.maximum(1.0, np.abs(mean))
    return mean, np.where(constant, 1.0, std)


def normalise(values: np.ndarray, name: str | ETTDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(z (T, C), mean (C,), std (C,))``: ``values`` (T, C) z-scored per column with :func:`train_statistics`
    (statistics of the training rows only; val/test rows never influence them)."""
    mean, std = train_statistics(values, name)
    return (np.asarray(values, dtype=np.float64) - mean) / std, mean, std


def denormalise(z: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Back to original units: ``z * std + mean`` (broadcast over the last axis = columns)."""
    return np.asarray(z, dtype=np.float64) * np.asarray(std) + np.asarray(mean)


# ------------------------------------------------------------------------------------------------------------------
# windows
# ------------------------------------------------------------------------------------------------------------------
def part_rows(name: str | ETTDataset, part: str) -> tuple[int, int]:
    """``(start, end)``: the rows [start, end) of ``part`` of data set ``name``, where that part's targets lie."""
    return resolve_ett(name).rows(part)


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return int(value)


def adaptation_end(name: str | ETTDataset, context: int, percent: int) -> int:
    """End row (exclusive) of the adaptation data: ``(train_end - context) * percent // 100 + context``.

    NOTE[DIFF]: the paper adapts on "only the first 10% of the training portion" (L1171) without saying 10 % of
    what. This is the GPT4TS/Time-LLM ``percent`` reading (their ``border2 = (border2 - seq_len) * percent // 100
    + seq_len`` for the training set): 10 % of the training rows that can be a target (all but the first
    ``context``), plus the context before them. Training windows must end (last target row + 1) at or before it.
    Other readings (the first 10 % of rows, 864 for ETTh, or 10 % of the training windows) give slightly fewer
    windows. For ETTh, context 512, percent 10: 1324 rows; for ETTm: 3916.
    """
    ds = resolve_ett(name)
    context = _positive_int(context, "context")
    if isinstance(percent, bool) or not isinstance(percent, (int, np.integer)) or not 0 < percent <= 100:
        raise ValueError(f"adaptation_percent must be an int in (0, 100], got {percent!r}")
    if context > ds.train_end:
        raise ValueError(f"context={context} is longer than {ds.name}'s training segment ({ds.train_end} rows)")
    return (ds.train_end - context) * int(percent) // 100 + context


def window_starts(
    name: str | ETTDataset,
    part: str,
    context: int,
    horizon: int,
    *,
    adaptation_percent: int | None = None,
) -> np.ndarray:
    """Start rows ``s`` (n_windows,) int64 of every (context, target) window of ``part``, in time order, step 1.

    Window ``s``: context rows [s, s + context), target rows [s + context, s + context + horizon). Every target
    lies inside the part ([start, end) of :func:`part_rows`) and the context ends exactly where the target
    begins. Train: s from 0 (the first target starts at row ``context``); val/test: the first context starts
    ``context`` rows before the part (Informer's ``border1 = border - seq_len``; it is made of the preceding
    part's rows, which is allowed: only the target must be unseen), the last target ends at the part's end.

    ``adaptation_percent`` (train only, e.g. 10): only windows whose target ends at or before
    :func:`adaptation_end` (the 10 % adaptation rule).

    Raises ValueError when ``context`` is longer than the training segment, when the part has no window of
    this size, or for ``adaptation_percent`` with a part other than train; :class:`UnknownDatasetError` for an
    unknown ``name``.
    """
    ds = resolve_ett(name)
    context = _positive_int(context, "context")
    horizon = _positive_int(horizon, "horizon")
    start, end = ds.rows(part)
    if context > ds.train_end:
        raise ValueError(
            f"context={context} is longer than {ds.name}'s training segment ({ds.train_end} rows): val windows "
            "would take context from before the first row, and there would be no training window"
        )
    if adaptation_percent is not None:
        if part != "train":
            raise ValueError(f"adaptation_percent applies to the train part only, got part={part!r}")
        end = adaptation_end(ds, context, adaptation_percent)
    first_target = max(start, context)  # train: the first `context` rows only serve as context
    last_start = end - horizon - context
    first_start = first_target - context
    if last_start < first_start:
        rule = f" with adaptation_percent={adaptation_percent} (rows 0-{end})" if adaptation_percent else ""
        raise ValueError(
            f"{ds.name} {part}{rule}: no window with context={context} and horizon={horizon} fits "
            f"(targets must lie in rows {first_target}-{end}, {end - first_target} rows)"
        )
    return np.arange(first_start, last_start + 1, dtype=np.int64)


def check_horizons(datasets: Sequence[str], horizons: Sequence[int], context: int, adaptation_percent: int) -> None:
    """Every (data set, horizon) has adaptation windows under the ``adaptation_percent`` rule and val / test windows
    inside the Informer borders (:func:`window_starts`); ValueError naming the config key, the horizon and the rule
    it breaks otherwise (a config error before anything runs: e.g. H = 1000 has no ETTh adaptation window)."""
    for dataset in datasets:
        for horizon in horizons:
            for part, percent in (("train", adaptation_percent), ("val", None), ("test", None)):
                try:
                    window_starts(dataset, part, context, horizon, adaptation_percent=percent)
                except ValueError as e:
                    raise ValueError(f"config ett.horizons: horizon {horizon} does not fit: {e}") from None


@dataclass(frozen=True)
class ETTWindows:
    """The windows of one part as independent univariate series, window-major: series ``i`` is column
    ``column[i]`` of the window starting at row ``start[i]``.

    ``x`` (N, context) inputs and ``y`` (N, horizon) targets (float64, in the units of the values given),
    ``start`` (N,) int64 first context row, ``column`` (N,) int64 column index (into :data:`ETT_COLUMNS`);
    N = n_windows * n_columns, ordered window by window, columns in file order within a window.
    """

    x: np.ndarray
    y: np.ndarray
    start: np.ndarray
    column: np.ndarray

    @property
    def n_series(self) -> int:
        return int(self.x.shape[0])


def make_windows(
    values: np.ndarray,
    name: str | ETTDataset,
    part: str,
    context: int,
    horizon: int,
    *,
    adaptation_percent: int | None = None,
    stride: int = 1,
) -> ETTWindows:
    """Cut the windows of ``part`` (:func:`window_starts`) out of ``values`` (T, C), every column on its own.

    ``values``: (T, C) rows of the data set's file (usually z-scored by :func:`normalise`), T >= ``test_end``.
    ``stride``: keep every ``stride``-th window start (the first one always; 1 = all), for CPU stand-ins.

    NOTE[DIFF]: "each column is treated as an independent univariate series" (L1171): all seven columns, one
    series per (window, column), and no multivariate channel mixing.

    Returns :class:`ETTWindows` with ``x`` (n_windows * C, context) and ``y`` (n_windows * C, horizon).
    """
    ds = resolve_ett(name)
    values = _check_values(values, ds)
    stride = _positive_int(stride, "stride")
    starts = window_starts(ds, part, context, horizon, adaptation_percent=adaptation_percent)[::stride]
    n_cols = values.shape[1]
    view = np.lib.stride_tricks.sliding_window_view(values, context + horizon, axis=0)  # (T - L + 1, C, L), no copy
    series = view[starts].reshape(len(starts) * n_cols, context + horizon)
    return ETTWindows(
        x=np.ascontiguousarray(series[:, :context]),
        y=np.ascontiguousarray(series[:, context:]),
        start=np.repeat(starts, n_cols),
        column=np.tile(np.arange(n_cols, dtype=np.int64), len(starts)),
    )


# ------------------------------------------------------------------------------------------------------------------
# stations (leakage)
# ------------------------------------------------------------------------------------------------------------------
def station(name: str | ETTDataset) -> int:
    """Transformer station of data set ``name``: 1 for ETTh1/ETTm1, 2 for ETTh2/ETTm2."""
    return resolve_ett(name).station


def pretraining_sources(name: str | ETTDataset) -> dict[str, tuple[int, int]]:
    """Data a backbone may be pretrained on when ``name`` is evaluated: ``{source name: (0, train_end)}``.

    NOTE[DIFF]: not from the paper (it uses the public TimesFM 2.5 checkpoint). For an offline backbone: ETTh1 is
    ETTm1 sampled hourly (same station, same dates), likewise ETTh2/ETTm2, so a backbone for a station-1 target
    must not see station 1 at all. Only the OTHER station's data sets are allowed, and only their training rows
    [0, train_end), which end at the same date as the target's training rows (before its val/test dates).
    """
    ds = resolve_ett(name)
    return {other.name: (0, other.train_end) for other in ETT_DATASETS.values() if other.station != ds.station}
