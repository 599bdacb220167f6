"""Staging: every public file a configuration needs, fetched before any job runs, resumable file by file.

The *store* (config ``data.store``, default ``downloads/`` in the working directory) is laid out like a data mirror
(``UCI_Datasets/<gal_name>/data/<file>``, ``ETT-small/<name>.csv``, ``weatherbench/5.625deg/<folder>/<file>``,
``checkpoints/climax/5.625deg.ckpt``); the workflow reads it as its first mirror, so once it is filled the fetch
rules only link files into ``results/`` and no job downloads anything. The TimesFM checkpoint goes to the
Hugging Face cache the configuration names (``ett.backbone.checkpoint.cache``), which ``huggingface_hub`` resumes
itself.

    plan_downloads(config, workdir)   what the configuration needs that no mirror holds yet (a list of Download)
    disk_estimate(config, plan)       bytes per slice: data (download + unpacked), ERA5 shards, results
    stage(plan, ...)                  check free space (refuse with the numbers), then fetch, ``connections`` at once
    fetch_url(url, dest, ...)         one file over HTTP(S): a ``.part`` file resumed with a Range request, the
                                      length and SHA-256 checked, renamed into place only when complete

Entry points: ``stochattn download`` (a transfer node, or ``sbatch --wrap``) and the Snakemake target ``download``
(``snakemake download --profile slurm`` runs it as one CPU job).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stochattn.extras import requires
from stochattn.io import atomic_path, sha256_file

__all__ = [
    "Download",
    "DownloadError",
    "InsufficientDiskError",
    "NetworkForbiddenError",
    "forbid_network",
    "fetch_url",
    "remote_size",
    "plan_downloads",
    "disk_estimate",
    "stage",
    "link_or_copy",
]

CHUNK = 1 << 20
GRID_POINTS = 32 * 64  # WeatherBench 5.625 deg
VERIFIED = ".verified.json"  # the store's record {relative path: {"sha256", "bytes", "mtime_ns"}}


class DownloadError(OSError):
    """A file could not be fetched whole with the expected SHA-256; what was received is kept for a resume only
    when it is a prefix of the file (an interrupted transfer)."""


class InsufficientDiskError(RuntimeError):
    """The target file system has less free space than the staging (and what follows it) needs."""


class NetworkForbiddenError(RuntimeError):
    """A download was attempted in a process that must not download (a GPU job)."""


_FORBIDDEN: list[str] = []


def forbid_network(reason: str) -> None:
    """From now on every :func:`fetch_url` in this process raises :class:`NetworkForbiddenError` naming ``reason``
    (and ``huggingface_hub`` runs offline): model jobs call it, so that a GPU job never downloads."""
    _FORBIDDEN.append(reason)
    os.environ["HF_HUB_OFFLINE"] = "1"


STAGE_HINT = ("stage the data first on a node with network access: `stochattn download --configfile <your config>` "
              "(a transfer node, or `sbatch --wrap`), or `snakemake download --profile slurm`")


_STAGED_ONLY = "STOCHATTN_STAGED_ONLY"


def set_staged_only() -> None:
    """Mark this process and its children (the fetch rules' scripts) as part of a run that submits jobs to a
    cluster (the workflow calls it)."""
    os.environ[_STAGED_ONLY] = "1"


def staged_only() -> bool:
    """Whether this run submits jobs to a cluster (set by the workflow): its local fetch rules, on the login node,
    then link staged files and never download the large ones."""
    return os.environ.get(_STAGED_ONLY) == "1"


def _check_network_allowed(url: str) -> None:
    if _FORBIDDEN and not url.startswith("file:"):
        raise NetworkForbiddenError(
            f"{_FORBIDDEN[-1]}: it must not download {url}; {STAGE_HINT}"
        )


# ------------------------------------------------------------------------------------------------------------------
# one file
# ------------------------------------------------------------------------------------------------------------------
def remote_size(url: str, timeout: float = 60.0) -> int | None:
    """The size in bytes a server announces for ``url`` (HEAD, redirects followed); None when it does not say."""
    _check_network_allowed(url)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            return int(length) if length is not None and length.isdigit() else None
    except (OSError, ValueError):
        return None


def remote_sizes(urls: Sequence[str], connections: int = 4) -> dict[str, int | None]:
    """{url: :func:`remote_size`}, ``connections`` requests at once."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, connections)) as pool:
        return dict(zip(urls, pool.map(remote_size, urls)))


def _part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def fetch_url(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Download ``url`` to ``dest``: bytes go to ``<dest>.part``; an existing ``.part`` (an interrupted transfer) is
    continued with ``Range: bytes=<size>-`` when the server answers 206 with that offset, else restarted. Redirects
    are followed (the Hub's ``resolve`` URLs redirect to a CDN). The transfer must deliver the announced length
    (a connection that closes early raises :class:`DownloadError` and keeps the ``.part`` for the next try) and,
    with ``sha256``, that digest (a mismatch removes the ``.part``: the bytes are wrong, not short). Only then is the
    file renamed to ``dest``. Returns {"url": the final URL, "sha256",
    "bytes", "resumed_from": bytes kept from an earlier try}."""
    _check_network_allowed(url)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = _part_path(dest)
    offset = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        resp = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the .part is at least as long as the file: start again
            part.unlink()
            return fetch_url(url, dest, sha256=sha256, timeout=timeout)
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from err
    except OSError as err:
        raise DownloadError(f"{url}: {err}") from err
    with resp:
        final_url = resp.geturl()
        length = resp.headers.get("Content-Length")
        resumed = offset if resp.status == 206 and _range_start(resp.headers.get("Content-Range")) == offset else 0
        expected_total = resumed + int(length) if length is not None and length.isdigit() else None
        digest = hashlib.sha256() if resumed == 0 else None
        written = resumed
        with open(part, "ab" if resumed else "wb") as out:
            try:
                while chunk := resp.read(CHUNK):
                    out.write(chunk)
                    written += len(chunk)
                    if digest is not None:
                        digest.update(chunk)
            except Exception as err:  # a reset connection, http.client.IncompleteRead: the .part is kept
                raise DownloadError(f"{url}: interrupted after {written} bytes ({err!r}); run again to resume") from err
            out.flush()
            os.fsync(out.fileno())
    if expected_total is not None and written != expected_total:
        # NOTE: http.client returns a short body without an error when the server closes early: the length check
        # is what catches a truncated transfer
        raise DownloadError(f"{url}: received {written} of {expected_total} bytes; run again to resume")
    got = digest.hexdigest() if digest is not None else sha256_file(part)
    if sha256 is not None and got != sha256.lower():
        part.unlink()
        raise DownloadError(f"{url}: SHA-256 {got}, expected {sha256} (the file changed or the server sent another "
                            "one); the partial file was removed")  # fmt: skip
    os.replace(part, dest)
    return {"url": final_url, "sha256": got, "bytes": written, "resumed_from": resumed}


def _range_start(content_range: str | None) -> int | None:
    """The first byte of a ``Content-Range: bytes <start>-<end>/<total>`` header."""
    if not content_range or not content_range.startswith("bytes "):
        return None
    start = content_range[6:].split("-", 1)[0]
    return int(start) if start.isdigit() else None


def link_or_copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Put ``src``'s bytes at ``dest`` atomically: a hard link where both lie on one file system (no second copy of
    a 230 GB store, and nothing for a login node to copy), else a copy."""
    dest = Path(dest)
    with atomic_path(dest) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
    return dest


# ------------------------------------------------------------------------------------------------------------------
# the plan
# ------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Download:
    """One file to put in the store. ``kind``: "file" (``url`` -> ``path``), "zip" (``url`` -> a zip, its
    ``members`` extracted into ``path``'s folder, the zip removed), "hf" (``url`` the Hub's resolve URL, fetched by
    ``huggingface_hub`` into the cache folder ``path``). ``size``: bytes to download where known
    (:func:`public_sizes`; None: asked from the server), ``size_bound``: an upper bound counted when no server
    announces the size (a zip: its members' unpacked bytes), ``unpacked``: bytes on disk after unpacking."""

    slice: str
    kind: str
    url: str
    path: Path
    sha256: str | None = None
    size: int | None = None
    size_bound: int | None = None
    unpacked: int | None = None
    members: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.path.name if self.kind != "zip" else f"{self.path.parent.name}.zip"


def store_of(config: Mapping[str, Any], workdir: str | os.PathLike = ".") -> Path:
    """The store folder: config ``data.store`` (relative to the working directory)."""
    return (Path(workdir) / Path(config["data"].get("store") or "downloads").expanduser()).resolve()


def _in_mirror(mirrors: Sequence[Path], rel: str) -> bool:
    return any((m / rel).is_file() or (m / f"{rel}.gz").is_file() for m in mirrors)


def workflow_config(configfiles: Sequence[str | os.PathLike], workflow_dir: str | os.PathLike = ".") -> dict:
    """The configuration a Snakemake run of the workflow in ``workflow_dir`` sees: ``config/config.yaml`` with
    ``configfiles`` merged over it (Snakemake's own merge), validated against the schema (defaults filled), relative
    mirrors resolved against ``workflow_dir``."""
    with requires("workflow"):
        import yaml
        from snakemake.utils import update_config, validate

    workflow_dir = Path(workflow_dir).resolve()
    config = yaml.safe_load((workflow_dir / "config" / "config.yaml").read_text())
    for path in configfiles:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    validate(config, str(workflow_dir / "config" / "schema.yaml"))
    data = config["data"]
    data["mirrors"] = [str((workflow_dir / Path(m).expanduser()).resolve()) for m in data["mirrors"]]
    return config


def public_sizes() -> dict[str, int]:
    """{store path: bytes} of the public files whose size is fixed (``stochattn/data/public_sizes.txt``: the UCI and
    ETT-small files, as their checksum tables hash them)."""
    from importlib import resources

    text = resources.files("stochattn.data").joinpath("public_sizes.txt").read_text(encoding="utf-8")
    rows = (line.split(maxsplit=1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {rel.strip(): int(n) for n, rel in rows}


# The years every WeatherBench 5.625 deg zip holds (hourly 1979-2018, one netCDF file per year), whatever the
# configuration extracts from it
WEATHERBENCH_YEARS = tuple(range(1979, 2019))
# a zip's size is at most its members' bytes plus its headers and deflate's worst-case overhead (< 0.1 %)
_ZIP_OVERHEAD = 1.001


def plan_downloads(config: Mapping[str, Any], workdir: str | os.PathLike = ".") -> list[Download]:
    """Every public file ``config`` (the workflow's merged configuration) needs that no configured mirror holds:
    the UCI data sets of ``datasets``, the ETT CSVs and the TimesFM checkpoint (``ett.enabled``; the checkpoint when
    ``ett.backbone.source`` is ``checkpoint``), the WeatherBench folders and ClimaX checkpoint (``era5.enabled``,
    ``era5.source`` / ``era5.backbone.source``). Offline stand-ins need nothing."""
    from stochattn.data.ett import ETT_URL_TEMPLATE, load_ett_checksums, resolve_ett
    from stochattn.data.uci import GAL_URL_TEMPLATE, dataset_registry, load_uci_checksums, uci_files

    store = store_of(config, workdir)
    mirrors = [m for m in (Path(workdir, m).expanduser().resolve() for m in config["data"].get("mirrors", []))
               if m != store]  # fmt: skip
    can_download = bool(config["data"].get("allow_download", True))
    plan: list[Download] = []
    known = public_sizes()

    registry = dataset_registry(config.get("custom_datasets"))
    table = load_uci_checksums()
    for name in config.get("datasets", []):
        ds = registry[name]
        if ds.source is not None or (not ds.builtin and ds.url is None):
            continue  # a custom data set read from its own folder
        for file in uci_files(ds):
            rel = f"UCI_Datasets/{ds.gal_name}/data/{file}"
            if not _in_mirror(mirrors, rel) and can_download:
                url = (ds.url or GAL_URL_TEMPLATE).format(gal_name=ds.gal_name, file=file)
                plan.append(Download("uci", "file", url, store / rel, table.get(f"{ds.gal_name}/data/{file}"),
                                     known.get(rel)))  # fmt: skip

    ett = config.get("ett", {})
    if ett.get("enabled"):
        ett_table = load_ett_checksums()
        for name in ett.get("datasets", []):
            file = resolve_ett(name).file
            if not _in_mirror(mirrors, f"ETT-small/{file}") and can_download:
                plan.append(Download("ett", "file", ETT_URL_TEMPLATE.format(file=file), store / "ETT-small" / file,
                                     ett_table.get(file), known.get(f"ETT-small/{file}")))  # fmt: skip
        backbone = ett.get("backbone", {})
        if backbone.get("source") == "checkpoint":
            from stochattn.backbones.timesfm import TIMESFM_FILENAME

            ckpt = backbone["checkpoint"]
            rev = ckpt.get("revision") or "main"
            url = f"https://huggingface.co/{ckpt['repo_id']}/resolve/{rev}/{TIMESFM_FILENAME}"
            plan.append(Download("ett", "hf", url,
                                 (Path(workdir) / ckpt["cache"]).resolve(), ckpt.get("sha256"),
                                 extra={"repo_id": ckpt["repo_id"], "revision": ckpt.get("revision")}))  # fmt: skip

    era5 = config.get("era5", {})
    if era5.get("enabled") and era5.get("source") == "weatherbench":
        from stochattn.data.era5 import CONSTANT_FIELDS, constants_path, weatherbench_path, weatherbench_url

        wb = era5["weatherbench"]
        years = sorted({int(y) for ys in wb["years"].values() for y in ys})
        root = store / "weatherbench" / "5.625deg"
        for folder in [*wb["folders"], "constants"]:
            if folder == "constants":
                path = constants_path(root)
                if not _in_mirror(mirrors, f"weatherbench/5.625deg/constants/{path.name}"):
                    # one float32 field per constant on the grid (the netCDF header is small)
                    plan.append(Download("era5", "file", weatherbench_url(folder), path,
                                         size_bound=len(CONSTANT_FIELDS) * GRID_POINTS * 4 + (1 << 20)))
                continue
            files = [weatherbench_path(root, folder, y) for y in years]
            if all(_in_mirror(mirrors, f"weatherbench/5.625deg/{folder}/{f.name}") for f in files):
                continue
            unpacked = sum(_netcdf_bytes(folder, y) for y in years)
            bound = int(_ZIP_OVERHEAD * sum(_netcdf_bytes(folder, y) for y in WEATHERBENCH_YEARS)) + (1 << 20)
            plan.append(Download("era5", "zip", weatherbench_url(folder, wb.get("url_template")),
                                 root / folder / f"{folder}_5.625deg.zip", size_bound=bound, unpacked=unpacked,
                                 members=tuple(f.name for f in files)))  # fmt: skip
    if era5.get("enabled") and era5.get("backbone", {}).get("source") == "checkpoint":
        ckpt = era5["backbone"]["checkpoint"]
        from stochattn.backbones.climax import CLIMAX_MIRROR_PATH as rel

        if not _in_mirror(mirrors, rel):
            plan.append(Download("era5", "file", ckpt["url"], store / rel, ckpt.get("sha256")))
    return plan


def _hours(year: int) -> int:
    return 24 * (366 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 365)


def _netcdf_bytes(folder: str, year: int) -> int:
    """Bytes of one yearly WeatherBench file: hourly float32 fields on the 32 x 64 grid, 13 levels for the
    pressure-level folders (the netCDF header is negligible)."""
    from stochattn.data.era5 import _variable

    _, single_level = _variable(folder)
    return _hours(year) * GRID_POINTS * 4 * (1 if single_level else 13)


# ------------------------------------------------------------------------------------------------------------------
# disk
# ------------------------------------------------------------------------------------------------------------------
def disk_estimate(config: Mapping[str, Any], plan: Sequence[Download], sizes: Mapping[str, int | None]) -> dict:
    """Bytes per slice: ``download`` (what the plan still fetches, ``sizes``: url -> bytes), ``data`` (the store
    after unpacking), ``shards`` (ERA5: ClimaX's preprocessing, hourly float32 fields of every channel) and
    ``results`` (the dominant outputs: ERA5 forecast pairs and samples; UCI sample arrays). A file whose size is
    neither known nor announced counts at its ``size_bound`` (``bounded``), else as 0 (``unknown``). Returns
    {slice: {kind: bytes, "unknown": files counted as 0, "bounded": files counted at their bound, "zips": their
    sizes}}."""
    out: dict[str, dict[str, int]] = {}
    for d in plan:
        row = out.setdefault(d.slice, {"download": 0, "data": 0, "unknown": 0, "bounded": 0, "zips": []})
        size = d.size if d.size is not None else sizes.get(d.url)
        if size is None and d.size_bound is not None:
            size = d.size_bound
            row["bounded"] += 1
        row["unknown"] += size is None
        if d.kind == "zip":
            row["zips"].append(size or 0)
        row["download"] += size or 0
        row["data"] += (d.unpacked if d.kind == "zip" else size) or 0
    n = int(config.get("num_samples", 19))
    methods = len(config.get("methods", [])) + 1
    from stochattn.data.uci import dataset_registry

    registry = dataset_registry(config.get("custom_datasets"))
    uci = 0
    for name in config.get("datasets", []):
        ds = registry[name]
        if ds.n_rows:
            uci += min(ds.n_splits, int(config.get("splits", ds.n_splits))) * methods * n * (ds.n_rows // 10 + 1) * 8
    out.setdefault("uci", {}).update(results=uci)
    era5 = config.get("era5", {})
    if era5.get("enabled") and era5.get("source") == "weatherbench":
        from stochattn.data.era5 import CLIMAX_DEFAULT_VARS

        wb = era5["weatherbench"]
        years = sorted({int(y) for ys in wb["years"].values() for y in ys})
        channels = len(CLIMAX_DEFAULT_VARS)
        row = out.setdefault("era5", {})
        row["shards"] = sum(_hours(y) for y in years) * channels * GRID_POINTS * 4
        pairs = era5.get("max_pairs", {})
        n_pairs = sum(int(v) for v in pairs.values())
        leads = era5.get("lead_hours", 72)
        cases = len(era5.get("targets", [None])) * (len(leads) if isinstance(leads, list) else 1)
        test = int(pairs.get("test", 0))
        row["results"] = cases * (n_pairs * (channels + 1) * GRID_POINTS * 4 + methods * test * n * GRID_POINTS * 4)
    return out


def _free_bytes(path: Path) -> tuple[int, int]:
    """(free bytes, device id) of the file system that holds ``path`` (or its nearest existing parent)."""
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free, path.stat().st_dev


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _cell(row: Mapping[str, int], key: str) -> str:
    if key not in row:
        return "-"
    return ("<=" if key == "download" and row.get("bounded") else "") + _gb(row[key]) + (
        "+?" if key in ("download", "data") and row.get("unknown") else "")


def estimate_table(estimate: Mapping[str, Mapping[str, int]]) -> str:
    """The disk estimate as a small text table (one row per slice)."""
    cols = ("download", "data", "shards", "results")
    lines = [f"{'slice':6s} " + " ".join(f"{c:>11s}" for c in cols)]
    for sl, row in estimate.items():
        lines.append(f"{sl:6s} " + " ".join(f"{_cell(row, c):>11s}" for c in cols))
    if any(row.get("bounded") for row in estimate.values()):
        lines.append("(<=: an upper bound: WeatherBench zips whose size no server announced, counted at their "
                     "members' unpacked bytes)")  # fmt: skip
    if any(row.get("unknown") for row in estimate.values()):
        lines.append("(+?: files whose size no server announced and no registry knows (the checkpoints), counted as "
                     "0)")  # fmt: skip
    return "\n".join(lines)


def disk_needs(
    estimate: Mapping[str, Mapping[str, Any]], store: Path, workdir: Path, connections: int = 4
) -> list[tuple[int, int, list[str]]]:
    """(free bytes, bytes needed, paths) per file system: the store's holds the data and the ``connections``
    largest zips (which lie beside their unpacked files until they are out), the working directory's the shards and
    results."""
    need: dict[int, list] = {}
    for path, keys in ((store, ("data",)), (workdir, ("shards", "results"))):
        free, dev = _free_bytes(path)
        entry = need.setdefault(dev, [free, 0, []])
        for row in estimate.values():
            for k in keys:
                entry[1] += row.get(k) or 0
        if keys == ("data",):
            zips = sorted((z for row in estimate.values() for z in row.get("zips", [])), reverse=True)
            entry[1] += sum(zips[:connections])
        entry[2].append(str(path))
    return [tuple(v) for v in need.values()]


def check_free_space(
    estimate: Mapping[str, Mapping[str, Any]], store: Path, workdir: Path, connections: int = 4
) -> None:
    """Raise :class:`InsufficientDiskError` (with the numbers) when a file system has less free space than what it
    must hold (:func:`disk_needs`)."""
    for free, needed, paths in disk_needs(estimate, store, workdir, connections):
        if needed > free:
            raise InsufficientDiskError(
                f"not enough disk: {_gb(needed)} needed on the file system of {' and '.join(paths)}, {_gb(free)} free "
                f"(per slice:\n{estimate_table(estimate)}\n). Free space, or point data.store / --directory at a "
                "larger file system (e.g. your cluster's scratch); nothing was downloaded"
            )


# ------------------------------------------------------------------------------------------------------------------
# staging
# ------------------------------------------------------------------------------------------------------------------
class _Verified:
    """The store's record of verified files (path, size and mtime -> SHA-256), so that a rerun keeps a 230 GB
    store without reading it again; thread-safe, written atomically."""

    def __init__(self, store: Path):
        self.path = store / VERIFIED
        self.lock = threading.Lock()
        self.table = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.store = store

    def _key(self, path: Path) -> str:
        return os.path.relpath(path, self.store)

    def sha256(self, path: Path) -> str | None:
        """The recorded SHA-256 of ``path`` when its size and mtime are those recorded."""
        rec = self.table.get(self._key(path))
        if rec is None or not path.is_file():
            return None
        st = path.stat()
        return rec["sha256"] if (rec["bytes"], rec["mtime_ns"]) == (st.st_size, st.st_mtime_ns) else None

    def add(self, path: Path, sha256: str, **extra: Any) -> None:
        st = path.stat()
        with self.lock:
            self.table[self._key(path)] = {"sha256": sha256, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, **extra}
            with atomic_path(self.path) as tmp:
                tmp.write_text(json.dumps(self.table, indent=1, sort_keys=True) + "\n")


def _present(d: Download, verified: _Verified) -> bool:
    """Whether the store already holds ``d`` (its SHA-256 checked, or recorded for an unchanged file)."""
    if d.kind == "zip":
        folder = d.path.parent
        return all(verified.sha256(folder / m) is not None for m in d.members)
    if d.kind == "hf":  # verified again (Hub LFS id, recorded SHA-256) by the fetch rule that reads it
        with requires("timesfm"):
            from huggingface_hub import try_to_load_from_cache

        from stochattn.backbones.timesfm import TIMESFM_FILENAME

        cached = try_to_load_from_cache(d.extra["repo_id"], TIMESFM_FILENAME, cache_dir=d.path,
                                        revision=d.extra.get("revision"))  # fmt: skip
        return isinstance(cached, str)
    if not d.path.is_file():
        return False
    got = verified.sha256(d.path)
    if got is None:
        got = sha256_file(d.path)
        if d.sha256 is None or got == d.sha256.lower():
            verified.add(d.path, got)
    return d.sha256 is None or got == d.sha256.lower()


def _fetch(d: Download, verified: _Verified, timeout: float) -> dict[str, Any]:
    if d.kind == "hf":
        from stochattn.backbones.timesfm import fetch_timesfm_checkpoint

        local = fetch_timesfm_checkpoint(d.path, repo_id=d.extra["repo_id"], revision=d.extra.get("revision"),
                                         sha256=d.sha256)  # fmt: skip
        return {"url": d.url, "path": str(local)}
    if d.kind == "file":
        got = fetch_url(d.url, d.path, sha256=d.sha256, timeout=timeout)
        verified.add(d.path, got["sha256"], url=got["url"])
        return got
    # a zip: fetched unless a complete copy is left from an earlier run, its missing members extracted, then removed
    folder = d.path.parent
    got = fetch_url(d.url, d.path, timeout=timeout) if not d.path.is_file() else {
        "url": d.url, "sha256": sha256_file(d.path), "bytes": d.path.stat().st_size, "resumed_from": None}
    with zipfile.ZipFile(d.path) as archive:
        names = {Path(m).name: m for m in archive.namelist()}
        missing = [m for m in d.members if m not in names]
        if missing:
            raise DownloadError(f"{d.url}: the zip lacks {missing[:3]}")
        for m in d.members:
            if verified.sha256(folder / m) is None:
                with atomic_path(folder / m) as tmp, archive.open(names[m]) as src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
                verified.add(folder / m, sha256_file(folder / m), zip=d.url, zip_sha256=got["sha256"])
    d.path.unlink()
    return got


def stage(
    plan: Sequence[Download],
    config: Mapping[str, Any],
    *,
    workdir: str | os.PathLike = ".",
    connections: int = 4,
    timeout: float = 600.0,
    check_space: bool = True,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Put every file of ``plan`` in the store: a file already there whose SHA-256 matches is kept, the others are
    fetched ``connections`` at a time (an interrupted file resumes from its ``.part``). First the disk it needs per
    slice is stated and checked against the free space (:class:`InsufficientDiskError` before anything is written).
    Returns {"kept": [...], "fetched": [{path, url, bytes, resumed_from}], "failed": [...]} and raises
    :class:`DownloadError` naming every failed file after the others finished."""
    from stochattn.progress import progress as bar

    workdir = Path(workdir).resolve()
    store = store_of(config, workdir)
    verified = _Verified(store)
    todo = [d for d in plan if not _present(d, verified)]
    kept = [str(d.path) for d in plan if d not in todo]
    sizes = remote_sizes([d.url for d in todo if d.size is None], connections)
    for d in todo:  # bytes already in a .part are not needed again
        part = _part_path(d.path)
        if part.is_file() and sizes.get(d.url):
            sizes[d.url] = max(0, sizes[d.url] - part.stat().st_size)
    estimate = disk_estimate(config, todo, sizes)
    echo(f"store {store}: {len(plan)} files needed, {len(kept)} present and verified, {len(todo)} to fetch "
         f"({connections} at a time)")  # fmt: skip
    echo(estimate_table(estimate))
    if check_space:
        check_free_space(estimate, store, workdir, connections)
    fetched, failed = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, int(connections))) as pool:
        futures = {pool.submit(_fetch, d, verified, timeout): d for d in todo}
        done = bar(concurrent.futures.as_completed(futures), desc="download", total=len(todo), unit="file",
                   disable=not progress)  # fmt: skip
        for fut in done:
            d = futures[fut]
            try:
                got = fut.result()
                fetched.append({"path": str(d.path), **got})
                echo(f"  fetched {d.label} ({_gb(got.get('bytes'))}"
                     + (f", resumed at {_gb(got['resumed_from'])}" if got.get("resumed_from") else "") + ")")
            except Exception as err:  # every file is tried; the failures are listed together
                failed.append({"path": str(d.path), "url": d.url, "error": f"{type(err).__name__}: {err}"})
    summary = {"store": str(store), "kept": kept, "fetched": fetched, "failed": failed, "estimate": estimate}
    if failed:
        raise DownloadError(f"{len(failed)} of {len(todo)} files failed (the others are in place; run again to "
                            "resume):\n" + "\n".join(f"  {f['path']}: {f['error']}" for f in failed))  # fmt: skip
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``stochattn download``: stage what a configuration needs (on a transfer node, or in ``sbatch --wrap``)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="stochattn download", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="*", default=[], help="configuration files merged over the default")
    parser.add_argument("-d", "--directory", default=".", help="the working directory of the run (default: .)")
    parser.add_argument("-s", "--workflow", default=".", help="the folder holding the Snakefile (default: .)")
    parser.add_argument("-j", "--connections", type=int, default=4, help="files fetched at once (default: 4)")
    parser.add_argument("-n", "--dry-run", action="store_true", help="state the plan and the disk it needs; fetch "
                        "nothing")  # fmt: skip
    args = parser.parse_args(argv)
    config = workflow_config(args.configfile, args.workflow)
    plan = plan_downloads(config, Path(args.directory).resolve())
    try:
        if args.dry_run:
            asked = [d.url for d in plan if d.size is None]
            sizes = remote_sizes(asked, args.connections)
            store = store_of(config, args.directory)
            print(f"{len(plan)} files to stage into {store}")
            for d in plan:
                print(f"  {d.slice:5s} {d.kind:4s} {d.url} -> {d.path}")
            if asked and not any(v is not None for v in sizes.values()):
                print(f"no server announced a size for the {len(asked)} files the registry does not size (offline "
                      "here, or a firewall): counted at their upper bounds where known, else as 0")  # fmt: skip
            estimate = disk_estimate(config, plan, sizes)
            print(estimate_table(estimate))
            short = False
            for free, needed, paths in disk_needs(estimate, store, Path(args.directory).resolve(), args.connections):
                short |= needed > free
                print(f"disk: {_gb(needed)} needed on the file system of {' and '.join(paths)}, {_gb(free)} free"
                      + (" -> NOT ENOUGH" if needed > free else ""))  # fmt: skip
            return 1 if short else 0
        summary = stage(plan, config, workdir=args.directory, connections=args.connections)
    except (InsufficientDiskError, DownloadError) as err:
        print(f"download: {err}", file=sys.stderr)
        return 1
    print(f"download: {len(summary['fetched'])} fetched, {len(summary['kept'])} kept; the store is complete")
    return 0
