"""Rehearsal assets: full-size, random-weight / synthetic stand-ins of the three public inputs of the cluster
configuration, written in their exact public formats, so that the cluster code paths (fetch, strict checkpoint
loading, ClimaX preprocessing) can be rehearsed offline at the real model sizes.

* :func:`write_timesfm_checkpoint`: ``model.safetensors`` of ``google/timesfm-2.5-200m-pytorch`` (tensor names,
  shapes and float32 dtype of ``TimesFM_2p5_200M_torch_module``; 231,289,280 numbers at full size), as a plain
  snapshot folder or inside a Hugging Face cache folder that :func:`stochattn.backbones.timesfm.
  fetch_timesfm_checkpoint` resolves offline.
* :func:`write_weatherbench_mirror`: WeatherBench 5.625 deg netCDF files (every folder ClimaX's 48 inputs need, plus
  ``constants/constants_5.625deg.nc``) in the mirror layout :func:`stochattn.data.era5.fetch_weatherbench` reads,
  ``<root>/weatherbench/5.625deg/<folder>/<file>``; short years of hourly steps around climatological means.
* :func:`write_climax_checkpoint`: a PyTorch-Lightning file like ClimaX's ``5.625deg.ckpt`` (``state_dict`` keys
  prefixed ``net.``, pre-release ``channel_*`` names); full 5.625 deg architecture by default (108,088,512 numbers).

Every artefact is labelled: safetensors metadata / Lightning top-level key / netCDF global attribute ``rehearsal``
(:data:`REHEARSAL_WEIGHTS`, :data:`REHEARSAL_DATA`). Nothing written here is a result.

CLI (for a Snakemake rule)::

    python -m stochattn.rehearsal timesfm OUT_DIR [--seed S] [--hf-cache] [--num-layers N --model-dims D ...]
    python -m stochattn.rehearsal weatherbench ROOT --years 2015 2016 --steps-per-year 48 [--folders ...] [--levels ...]
    python -m stochattn.rehearsal climax OUT.ckpt [--seed S] [--embed-dim D --depth N --num-heads H ...]
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import inspect
import json
import os
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from stochattn.extras import requires

__all__ = [
    "REHEARSAL_WEIGHTS",
    "REHEARSAL_DATA",
    "TIMESFM_FULL_DIMS",
    "CLIMAX_FULL_ARCH",
    "climax_weatherbench_folders",
    "timesfm_dims",
    "save_timesfm_checkpoint",
    "write_timesfm_checkpoint",
    "write_weatherbench_mirror",
    "climax_arch",
    "climax_official_state_dict",
    "lightning_checkpoint",
    "write_climax_checkpoint",
    "main",
]

REHEARSAL_WEIGHTS = "rehearsal: random weights, not a result"
REHEARSAL_DATA = "rehearsal: synthetic data (not ERA5), not a result"

PathLike = str | os.PathLike


# ------------------------------------------------------------------------------------------------------------------
# TimesFM 2.5
# ------------------------------------------------------------------------------------------------------------------
#: The public 200M model (``TimesFM_2p5_200M_Definition``): 20 layers, d 1280, 16 heads, feed-forward width d,
#: continuous-quantile head of length 1024. ``hidden_dims`` None means ``model_dims``.
TIMESFM_FULL_DIMS: dict[str, Optional[int]] = {
    "num_layers": 20, "model_dims": 1280, "num_heads": 16, "hidden_dims": None, "output_quantile_len": 1024,
}  # fmt: skip


def timesfm_dims(dims: Optional[Mapping[str, Any]] = None) -> dict[str, Optional[int]]:
    """:data:`TIMESFM_FULL_DIMS` updated with ``dims`` (unknown keys raise ValueError)."""
    dims = dict(dims or {})
    unknown = sorted(set(dims) - set(TIMESFM_FULL_DIMS))
    if unknown:
        raise ValueError(f"unknown TimesFM dims {unknown}; known: {list(TIMESFM_FULL_DIMS)}")
    return {**TIMESFM_FULL_DIMS, **dims}


def _hf_cache_file(cache_dir: Path, repo_id: str, filename: str, source: Path, xet: bool = True) -> Path:
    """Move ``source`` into Hugging Face's cache layout under ``cache_dir`` and return the snapshot path:
    ``models--<org>--<name>/blobs/<sha256>`` (an LFS file's blob is named by its SHA-256), ``refs/main`` (a commit
    id, here a made-up one derived from the SHA-256), ``snapshots/<commit>/<filename>`` -> ``../../blobs/<sha256>``.

    ``xet=True`` (the Hub's repositories since their move to Xet storage, huggingface_hub >= 1.x with hf_xet): the
    content lives in the cache-wide shared store ``<cache_dir>/blobs/<2 hex>/<xet hash>`` and the repository's
    ``blobs/<sha256>`` is a relative link to it (the Xet hash here a made-up one, 64 hex digits);
    ``xet=False``: the plain layout, the content in ``blobs/<sha256>`` itself."""
    from stochattn.io import sha256_file

    repo = cache_dir / f"models--{repo_id.replace('/', '--')}"
    digest = sha256_file(source)
    commit = hashlib.sha1(f"stochattn rehearsal {digest}".encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    blob = repo / "blobs" / digest
    if blob.is_symlink() or blob.exists():
        blob.unlink()
    if xet:
        xet_hash = hashlib.sha256(f"stochattn rehearsal xet {digest}".encode()).hexdigest()
        shared = cache_dir / "blobs" / xet_hash[:2] / xet_hash
        shared.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, shared)
        blob.symlink_to(Path("..") / ".." / "blobs" / xet_hash[:2] / xet_hash)
    else:
        os.replace(source, blob)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    link = repo / "snapshots" / commit / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path("..") / ".." / "blobs" / digest)
    return link


def save_timesfm_checkpoint(
    module: Any, directory: PathLike, *, metadata: Optional[Mapping[str, str]] = None, hf_cache: bool = False,
    xet: bool = True,
) -> Path:
    """Write a TimesFM module's weights as ``<directory>/model.safetensors``, the layout of
    ``google/timesfm-2.5-200m-pytorch`` (the module's own ``state_dict`` names, no renaming, as timesfm saves and
    loads it), atomically; ``metadata`` goes into the safetensors header (with more than one key in random order,
    so the bytes then vary from run to run). Returns the file's path.

    ``hf_cache=True``: ``directory`` is a Hugging Face cache folder; the file is put into its layout for repository
    ``google/timesfm-2.5-200m-pytorch`` (see :func:`_hf_cache_file`), so that ``fetch_timesfm_checkpoint(directory)``
    finds it without network; the returned path is the snapshot's ``model.safetensors`` (a link to the blob), in
    the Xet layout of today's Hub unless ``xet=False``.
    """
    with requires("timesfm"):
        from safetensors.torch import save_file

    from stochattn.backbones.timesfm import TIMESFM_FILENAME, TIMESFM_REPO_ID, module_of
    from stochattn.io import atomic_path

    tensors = {k: v.detach().cpu().contiguous() for k, v in module_of(module).state_dict().items()}
    directory = Path(directory)
    target = directory / (".rehearsal-upload.safetensors" if hf_cache else TIMESFM_FILENAME)
    with atomic_path(target) as tmp:
        save_file(tensors, str(tmp), metadata=dict(metadata) if metadata else None)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # safetensors creates 0o600 files; share like any other output
    if hf_cache:
        return _hf_cache_file(directory, TIMESFM_REPO_ID, TIMESFM_FILENAME, target, xet=xet)
    return target


def write_timesfm_checkpoint(
    directory: PathLike, *, seed: int = 0, dims: Optional[Mapping[str, Any]] = None, hf_cache: bool = False,
    xet: bool = True,
) -> Path:
    """A random-weight TimesFM 2.5 checkpoint ``<directory>/model.safetensors`` in the public layout; returns its
    path (see :func:`save_timesfm_checkpoint` for ``hf_cache``).

    Default: the full 200M architecture (:data:`TIMESFM_FULL_DIMS`; 20 x ``stacked_xf.{i}.attn.qkv_proj.weight``
    (3840, 1280), ``tokenizer.hidden_layer.weight`` (1280, 64), ``output_projection_quantiles.output_layer.weight``
    (10240, 1280), ...; 232 tensors, all float32, 925 MB), which :func:`stochattn.backbones.timesfm.
    build_timesfm_200m` (the ETT rules' loader) loads strictly. ``dims`` overrides sizes (keys of
    :data:`TIMESFM_FULL_DIMS`) for a reduced checkpoint that loads strictly into :func:`~stochattn.backbones.
    timesfm.build_timesfm` of the same sizes. Weights: torch's default init drawn under ``seed`` with every RMSNorm
    scale set to one (timesfm's zeros would make every branch output zero). The header metadata holds one key,
    ``rehearsal``: :data:`REHEARSAL_WEIGHTS` followed by the seed and dims. Same seed and dims, same bytes.
    """
    from stochattn.backbones.timesfm import build_timesfm

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    d = timesfm_dims(dims)
    model = build_timesfm(d["num_layers"], d["model_dims"], d["num_heads"], seed=int(seed),
                          hidden_dims=d["hidden_dims"], output_quantile_len=d["output_quantile_len"])  # fmt: skip
    # one metadata key: safetensors writes several in random order, and the bytes should depend on the seed only
    meta = {"rehearsal": f"{REHEARSAL_WEIGHTS}; seed={int(seed)}; dims={json.dumps(d)}"}
    return save_timesfm_checkpoint(model, directory, metadata=meta, hf_cache=hf_cache, xet=xet)


# ------------------------------------------------------------------------------------------------------------------
# WeatherBench 5.625 deg
# ------------------------------------------------------------------------------------------------------------------

# Rough global climatological means (ERA5 order of magnitude) per WeatherBench short name, per pressure level (hPa)
# for the pressure-level variables, and the SD of the seeded noise around them; (lower, upper) clip bounds.
_P_MEANS: dict[str, tuple[float, ...]] = {  # on PRESSURE_LEVELS = 50, 100, ..., 925, 1000
    "z": (2.02e5, 1.59e5, 1.33e5, 1.16e5, 1.02e5, 8.97e4, 7.06e4, 5.4e4, 4.12e4, 2.96e4, 1.43e4, 7.5e3, 1.1e3),
    "t": (211.0, 205.0, 210.0, 216.0, 222.0, 230.0, 244.0, 254.0, 262.0, 268.0, 280.0, 284.0, 288.0),
    "u": (5.0, 8.0, 12.0, 14.0, 14.0, 13.0, 10.0, 8.0, 6.0, 5.0, 2.0, 1.0, 0.5),
    "v": (0.0,) * 13,
    "r": (2.0, 10.0, 20.0, 35.0, 50.0, 55.0, 50.0, 45.0, 48.0, 52.0, 65.0, 75.0, 78.0),
    "q": (2.5e-6, 2.5e-6, 5e-6, 2e-5, 5e-5, 1.2e-4, 4e-4, 9e-4, 1.7e-3, 2.8e-3, 5.5e-3, 7.5e-3, 9.5e-3),
}
_SINGLE_MEANS: dict[str, float] = {"t2m": 287.0, "u10": -0.5, "v10": 0.2, "tisr": 1.2e6, "tp": 1e-4}
_NOISE_SD: dict[str, float] = {"z": 500.0, "t": 2.0, "u": 5.0, "v": 4.0, "r": 10.0, "t2m": 3.0, "u10": 3.0,
                               "v10": 3.0, "tisr": 1e5, "tp": 5e-5}  # fmt: skip
_RELATIVE_SD = {"q": 0.1}  # noise SD as a fraction of the mean
_BOUNDS: dict[str, tuple[float, float]] = {"r": (0.0, 100.0), "q": (0.0, np.inf), "tisr": (0.0, np.inf),
                                           "tp": (0.0, np.inf)}  # fmt: skip


def climax_weatherbench_folders() -> list[str]:
    """The WeatherBench folders ClimaX's 48 input variables come from, in ``CLIMAX_DEFAULT_VARS`` order (the
    constant fields come from the constants file): 2m_temperature, 10m_u/v_component_of_wind, then the six
    pressure-level folders (at :data:`~stochattn.data.era5.CLIMAX_LEVELS`)."""
    from stochattn.data.era5 import CLIMAX_CONSTANTS, CLIMAX_DEFAULT_VARS, WEATHERBENCH_VARIABLES

    folders: list[str] = []
    for var in CLIMAX_DEFAULT_VARS:
        if var in CLIMAX_CONSTANTS:
            continue
        prefix, _, level = var.rpartition("_")
        # "geopotential_500" is a level of the pressure-level folder, not WeatherBench's single-level extract
        pressure = level.isdigit() and WEATHERBENCH_VARIABLES.get(prefix, ("", False))[1]
        folder = prefix if pressure else var
        if folder not in WEATHERBENCH_VARIABLES:
            raise AssertionError(f"no WeatherBench folder for ClimaX variable {var!r}")
        if folder not in folders:
            folders.append(folder)
    return folders


def _field_rng(seed: int, name: str, year: int) -> np.random.Generator:
    # one stream per (seed, file): a file's content does not depend on which other files are written
    return np.random.default_rng([int(seed), zlib.crc32(name.encode()), int(year)])


def _synthetic(short: str, shape: tuple[int, ...], rng: np.random.Generator, level_means: Any = None) -> np.ndarray:
    """float32 values of ``shape`` (T, [L,] 32, 64): the climatological mean (per level when ``level_means``) plus
    seeded Gaussian noise, clipped to the variable's physical range."""
    mean = np.float32(_SINGLE_MEANS[short]) if level_means is None else \
        np.asarray(level_means, np.float32)[None, :, None, None]  # fmt: skip
    noise = rng.standard_normal(shape, dtype=np.float32)
    sd = np.float32(_NOISE_SD[short]) if short in _NOISE_SD else np.float32(_RELATIVE_SD[short]) * mean
    values = mean + sd * noise
    if short in _BOUNDS:
        np.clip(values, *_BOUNDS[short], out=values)
    return values.astype(np.float32, copy=False)


def _labelled_netcdf(dest: Path, write: Any) -> Path:
    """Write a netCDF file with ``write(tmp_path)`` and add the rehearsal label as global attributes, atomically."""
    with requires("climax"):
        import netCDF4

    from stochattn.io import atomic_path

    with atomic_path(dest) as tmp:
        write(tmp)
        with netCDF4.Dataset(tmp, "a") as ds:
            ds.setncattr("rehearsal", REHEARSAL_DATA)
            ds.setncattr("history", "synthetic rehearsal data written by stochattn.rehearsal (not ERA5)")
    return dest


def _year_times(year: int, steps: int, at_end: bool) -> np.ndarray:
    """``steps`` hourly datetime64 steps of ``year``: its first hours, or its last ones when ``at_end``."""
    start = np.datetime64(f"{year + 1}-01-01T00", "h") - steps if at_end else np.datetime64(f"{year}-01-01T00", "h")
    return start + np.arange(steps) * np.timedelta64(1, "h")


def _check_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def write_weatherbench_mirror(
    root: PathLike,
    *,
    years: Sequence[int],
    steps_per_year: Optional[int],
    folders: Optional[Sequence[str]] = None,
    levels: Optional[Sequence[int]] = None,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, str]:
    """Synthetic WeatherBench 5.625 deg files under ``root`` in the mirror layout of
    :func:`stochattn.data.era5.fetch_weatherbench` (``mirrors=[root]``); returns ``{relative path: sha256}``.

    Files: ``<root>/weatherbench/5.625deg/<folder>/<folder>_<year>_5.625deg.nc`` (``<folder>hPa_`` for the
    geopotential_500 / temperature_850 extracts) for every folder of ``folders`` (default
    :func:`climax_weatherbench_folders`, the nine folders of ClimaX's 48 inputs) and year of ``years``, plus
    ``<root>/weatherbench/5.625deg/constants/constants_5.625deg.nc`` (orography, lsm, slt, lat2d, lon2d), written by
    :func:`stochattn.data.era5.write_weatherbench_file` / ``write_weatherbench_constants`` (public variable names,
    dims (time, [level,] lat, lon), float32, ERA5's units, the 32 x 64 grid). Each year holds ``steps_per_year``
    hourly steps (``None``: the full year, 8760 or 8784): the LAST hours of the earliest year and the FIRST hours of
    every other year, so that two consecutive short years form one gap-free hourly series across the year boundary,
    as ``fetch_weatherbench`` checks (it opens all years of a folder at once and requires evenly spaced times; with
    three or more short years, or years with a gap, that check fails: only full years are gap-free then; the
    per-year ClimaX preprocessing accepts any of them). Pressure-level folders hold ``levels`` (default all 13
    :data:`~stochattn.data.era5.PRESSURE_LEVELS`; ClimaX reads :data:`~stochattn.data.era5.CLIMAX_LEVELS`). Values:
    a rough global climatological mean per variable and level (z500 5.4e4 m^2 s^-2, t850 280 K, t2m 287 K, q850
    5.5e-3 kg/kg, ...)
    plus seeded Gaussian noise, clipped to the physical range (r in [0, 100] %, q, tisr, tp >= 0); one random
    stream per (seed, file). Every file carries the global attribute ``rehearsal`` (:data:`REHEARSAL_DATA`);
    ``<root>/weatherbench/rehearsal.json`` records the label, arguments and the returned manifest.
    """
    from stochattn.data import era5
    from stochattn.io import save_json, sha256_file
    from stochattn.progress import progress as show_progress

    root = Path(root)
    if isinstance(years, (str, bytes)) or not isinstance(years, Sequence) or not years:
        raise ValueError(f"years must be a non-empty sequence of ints, got {years!r}")
    years = [_check_int("year", y, 1900) for y in years]
    if len(set(years)) != len(years):
        raise ValueError(f"years contain duplicates: {years}")
    steps_of = {y: (366 if calendar.isleap(y) else 365) * 24 for y in years}  # full years by default
    if steps_per_year is not None:
        steps = _check_int("steps_per_year", steps_per_year)
        too_short = [y for y in years if steps > steps_of[y]]
        if too_short:
            raise ValueError(f"steps_per_year={steps} hourly steps do not fit in year(s) {too_short}")
        steps_of = {y: steps for y in years}
    folders = climax_weatherbench_folders() if folders is None else list(folders)
    if not folders or len(set(folders)) != len(folders):
        raise ValueError(f"folders must be non-empty and distinct, got {folders!r}")
    for folder in folders:
        if folder not in era5.WEATHERBENCH_VARIABLES:
            raise ValueError(f"unknown WeatherBench folder {folder!r}; known: {', '.join(era5.WEATHERBENCH_VARIABLES)}")
    levels = list(era5.PRESSURE_LEVELS) if levels is None else [int(lv) for lv in levels]
    bad = [lv for lv in levels if lv not in era5.PRESSURE_LEVELS]
    if not levels or bad or len(set(levels)) != len(levels):
        raise ValueError(f"levels must be distinct WeatherBench pressure levels {era5.PRESSURE_LEVELS}, got {levels}")
    seed = _check_int("seed", seed, 0)

    base = root / "weatherbench" / "5.625deg"
    grid = (era5.LAT.size, era5.LON.size)
    first = min(years)
    jobs = [(f, y) for f in folders for y in years]
    written: list[Path] = []
    for folder, year in show_progress(jobs, desc="weatherbench rehearsal", unit="file", disable=not progress):
        short, pressure = era5.WEATHERBENCH_VARIABLES[folder]
        steps = steps_of[year]
        times = _year_times(year, steps, at_end=year == first)
        rng = _field_rng(seed, folder, year)
        extract = {"geopotential_500": 500, "temperature_850": 850}.get(folder)
        if pressure:
            means = [_P_MEANS[short][era5.PRESSURE_LEVELS.index(lv)] for lv in levels]
            values = _synthetic(short, (steps, len(levels), *grid), rng, means)
        elif extract is not None:
            values = _synthetic(short, (steps, 1, *grid), rng, [_P_MEANS[short][era5.PRESSURE_LEVELS.index(extract)]])
            values = values[:, 0]
        else:
            values = _synthetic(short, (steps, *grid), rng)
        path = era5.weatherbench_path(base, folder, year)
        _labelled_netcdf(path, lambda tmp: era5.write_weatherbench_file(
            tmp, folder, short, values, times, levels=levels if pressure else None))  # noqa: B023 - keeps the code hash
        written.append(path)

    rng = _field_rng(seed, "constants", 0)
    lsm = (rng.uniform(size=grid) < 0.29).astype(np.float32)  # ~29 % land
    const = {"lsm": lsm, "orography": lsm * np.abs(rng.normal(0.0, 600.0, grid)).astype(np.float32),
             "slt": lsm * rng.integers(1, 8, grid).astype(np.float32)}  # fmt: skip
    cpath = base / "constants" / "constants_5.625deg.nc"
    _labelled_netcdf(cpath, lambda tmp: era5.write_weatherbench_constants(tmp, const))
    written.append(cpath)

    manifest = {p.relative_to(root).as_posix(): sha256_file(p) for p in written}
    save_json(root / "weatherbench" / "rehearsal.json", {
        "rehearsal": REHEARSAL_DATA, "years": years, "steps_per_year": steps_of, "step_hours": 1, "folders": folders,
        "levels": levels, "seed": seed, "files": manifest})  # fmt: skip
    return manifest


# ------------------------------------------------------------------------------------------------------------------
# ClimaX
# ------------------------------------------------------------------------------------------------------------------
def _climax_full_arch() -> dict[str, Any]:
    from stochattn.data.era5 import CLIMAX_DEFAULT_VARS

    return {"default_vars": CLIMAX_DEFAULT_VARS, "img_size": (32, 64), "patch_size": 2, "embed_dim": 1024,
            "depth": 8, "decoder_depth": 2, "num_heads": 16, "mlp_ratio": 4.0, "drop_path": 0.1,
            "drop_rate": 0.1}  # fmt: skip


#: ClimaX's 5.625 deg architecture (``configs/global_forecast_climax.yaml``): 48 variables, 32 x 64 grid, patch 2,
#: D 1024, 8 blocks, decoder depth 2, 16 heads (the defaults of :class:`stochattn.backbones.climax.ClimaX`).
CLIMAX_FULL_ARCH: dict[str, Any] = _climax_full_arch()

#: Pre-release names of the official checkpoints (ClimaX's loader replaces "channel" by "var").
_LEGACY = (("var_embed", "channel_embed"), ("var_query", "channel_query"), ("var_agg.", "channel_agg."))


def climax_arch(**overrides: Any) -> dict[str, Any]:
    """:data:`CLIMAX_FULL_ARCH` updated with ``overrides`` (names of :class:`~stochattn.backbones.climax.ClimaX`'s
    arguments; others raise ValueError)."""
    from stochattn.backbones.climax import ClimaX

    known = [p for p in inspect.signature(ClimaX.__init__).parameters if p != "self"]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown ClimaX argument(s) {unknown}; known: {known}")
    return {**CLIMAX_FULL_ARCH, **overrides}


def climax_official_state_dict(model: Any) -> dict[str, Any]:
    """``model``'s tensors under the official checkpoint names: prefix ``net.`` (the Lightning module's attribute)
    and the pre-release names ``channel_embed`` / ``channel_query`` / ``channel_agg.*`` for ``var_embed`` /
    ``var_query`` / ``var_agg.*`` (e.g. ``net.token_embeds.0.proj.weight``, ``net.channel_agg.in_proj_weight``,
    ``net.blocks.7.attn.qkv.weight``, ``net.head.4.weight``)."""
    out = {}
    for key, value in model.state_dict().items():
        for new, old in _LEGACY:
            if key.startswith(new):
                key = old + key[len(new) :]
        out["net." + key] = value.detach().cpu().clone()
    return out


def lightning_checkpoint(state_dict: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A PyTorch-Lightning checkpoint dict around ``state_dict`` with Lightning's top-level keys (``epoch``,
    ``global_step``, ``pytorch-lightning_version``, ``state_dict``, ``loops``, ``callbacks``, ``optimizer_states``,
    ``lr_schedulers``, ``hyper_parameters``), plain containers only (``torch.load(weights_only=True)`` reads it);
    ``extra`` adds or replaces keys. The optimizer state is empty (the loaders read ``state_dict`` only)."""
    ckpt: dict[str, Any] = {
        "epoch": 0, "global_step": 0, "pytorch-lightning_version": "0.0.0+rehearsal", "state_dict": dict(state_dict),
        "loops": {}, "callbacks": {}, "optimizer_states": [], "lr_schedulers": [], "hyper_parameters": {},
    }  # fmt: skip
    ckpt.update(extra)
    return ckpt


def write_climax_checkpoint(path: PathLike, *, seed: int = 0, **arch_overrides: Any) -> Path:
    """A random-weight ClimaX checkpoint at ``path`` in the layout of the official ``5.625deg.ckpt`` (a Lightning
    file: :func:`lightning_checkpoint` around :func:`climax_official_state_dict`), written atomically; returns
    ``path``.

    Architecture :func:`climax_arch` (default the full 5.625 deg one: 209 float32 tensors, 108,088,512 numbers,
    432 MB; e.g. ``net.blocks.{0..7}.attn.qkv.weight`` (3072, 1024), ``net.pos_embed`` (1, 512, 1024),
    ``net.channel_embed`` (1, 48, 1024), ``net.head.4.weight`` (192, 1024)). Weights: ClimaX's own initialisation
    drawn under ``seed``. Labelled by the top-level key ``rehearsal`` (:data:`REHEARSAL_WEIGHTS`) and in
    ``hyper_parameters`` (with the architecture and seed). :func:`stochattn.backbones.climax.
    load_climax_checkpoint` loads it strictly into ``ClimaX(**arch)`` (with or without ``allow_pickle``).
    """
    from stochattn.backbones.climax import ClimaX
    from stochattn.io import save_torch
    from stochattn.training import seeded

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    arch = climax_arch(**arch_overrides)
    with seeded(int(seed)):
        model = ClimaX(**arch)
    hparams = {"rehearsal": REHEARSAL_WEIGHTS, "seed": int(seed),
               "net": {k: (list(v) if isinstance(v, tuple) else v) for k, v in arch.items()}}  # fmt: skip
    ckpt = lightning_checkpoint(climax_official_state_dict(model), hyper_parameters=hparams,
                                rehearsal=REHEARSAL_WEIGHTS)  # fmt: skip
    return save_torch(path, ckpt)  # byte-reproducible: the same seed gives the same SHA-256


# ------------------------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------------------------
def _steps_arg(text: str) -> Optional[int]:
    if text == "full":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or 'full', got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m stochattn.rehearsal", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="asset", required=True)
    t = sub.add_parser("timesfm", help="random-weight TimesFM 2.5 model.safetensors (default: full 200M)")
    t.add_argument("out", help="folder for model.safetensors (with --hf-cache: a Hugging Face cache folder)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--hf-cache", action="store_true", help="write into Hugging Face's cache layout")
    for key in TIMESFM_FULL_DIMS:
        t.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int, default=None)
    w = sub.add_parser("weatherbench", help="synthetic WeatherBench 5.625 deg mirror (<OUT>/weatherbench/5.625deg)")
    w.add_argument("out", help="mirror root")
    w.add_argument("--years", type=int, nargs="+", required=True)
    w.add_argument("--steps-per-year", type=_steps_arg, required=True,
                   help="hourly steps per (short) year, or 'full' for whole years")
    w.add_argument("--folders", nargs="+", default=None, help="default: the nine folders of ClimaX's 48 inputs")
    w.add_argument("--levels", type=int, nargs="+", default=None, help="default: all 13 WeatherBench levels")
    w.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("climax", help="random-weight ClimaX Lightning checkpoint (default: full 5.625 deg)")
    c.add_argument("out", help="checkpoint file, e.g. 5.625deg.ckpt")
    c.add_argument("--seed", type=int, default=0)
    for key in ("patch_size", "embed_dim", "depth", "decoder_depth", "num_heads"):
        c.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int, default=None)
    c.add_argument("--default-vars", nargs="+", default=None, help="default: ClimaX's 48 variables")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The CLI (see the module docstring); prints a JSON summary (paths, SHA-256) on stdout."""
    from stochattn.io import sha256_file

    args = _parser().parse_args(argv)
    if args.asset == "timesfm":
        dims = {k: getattr(args, k) for k in TIMESFM_FULL_DIMS if getattr(args, k) is not None}
        path = write_timesfm_checkpoint(args.out, seed=args.seed, dims=dims, hf_cache=args.hf_cache)
        summary: dict[str, Any] = {"path": str(path), "sha256": sha256_file(path), "dims": timesfm_dims(dims)}
    elif args.asset == "weatherbench":
        files = write_weatherbench_mirror(args.out, years=args.years, steps_per_year=args.steps_per_year,
                                          folders=args.folders, levels=args.levels, seed=args.seed,
                                          progress=True)  # fmt: skip
        summary = {"root": args.out, "files": len(files), "manifest": str(Path(args.out) / "weatherbench" /
                                                                           "rehearsal.json")}  # fmt: skip
    else:
        keys = ("patch_size", "embed_dim", "depth", "decoder_depth", "num_heads", "default_vars")
        arch = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
        path = write_climax_checkpoint(args.out, seed=args.seed, **arch)
        summary = {"path": str(path), "sha256": sha256_file(path), "arch": climax_arch(**arch)}
    summary["rehearsal"] = REHEARSAL_DATA if args.asset == "weatherbench" else REHEARSAL_WEIGHTS
    json.dump(summary, sys.stdout, indent=2, default=list)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
