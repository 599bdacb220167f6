"""WeatherBench 5.625° ERA5 (Rasp et al. 2020) and ClimaX's preprocessing of it, for the 72 h Z500 forecast.

Layout of the public data (one folder per variable, one netCDF file per year, hourly 1979-2018)::

    <root>/<folder>/<folder>_<year>_5.625deg.nc             e.g. 2m_temperature/2m_temperature_1979_5.625deg.nc
    <root>/geopotential_500/geopotential_500hPa_<year>_5.625deg.nc   (variable ``z``, dims (time, lat, lon))
    <root>/constants/constants_5.625deg.nc                   orography, lsm, slt, lat2d, lon2d, dims (lat, lon)

Pressure-level folders (geopotential, temperature, u/v_component_of_wind, relative/specific_humidity) hold a
variable with dims (time, level, lat, lon) on 13 levels (:data:`PRESSURE_LEVELS`); single-level folders one with
dims (time, lat, lon). Grid: lat = arange(-87.1875, 90, 5.625) (32, south to north), lon = arange(0, 360, 5.625)
(64). The offline stand-in (a later task) writes the same layout with :func:`write_weatherbench_file`, 6-hourly
instead of hourly, so lead times are counted in steps of the data's own time step (:func:`lead_steps`).

ClimaX's preprocessing (microsoft/ClimaX ``src/data_preprocessing/nc2np_equally_era5.py``), reimplemented by
:func:`preprocess_climax`, writes::

    <out>/{train,val,test}/<year>_<shard>.npz    one array (T_shard, 1, 32, 64) float32 per variable key
    <out>/{train,val,test}/climatology.npz        time mean (1, 32, 64) per variable key, of that partition
    <out>/normalize_mean.npz, normalize_std.npz   (1,) per key, training partition only
    <out>/lat.npy (32,), lon.npy (64,)

Keys: the folder name for a single-level variable (``2m_temperature``), ``<folder>_<level>`` for a pressure level
(``geopotential_500``), ClimaX's names for the constant fields (``land_sea_mask``, ``orography``, ``lattitude``
[sic]). ClimaX's years: train 1979-2015, val 2016, test 2017-2018 (:data:`CLIMAX_YEARS`). Forecast pairs (input
at t, target at t + lead) are built inside one shard and never cross it (ClimaX's ``Forecast`` dataset;
:func:`forecast_pairs`).

Pipeline:
    weatherbench_path / open_weatherbench    read yearly files (grid, variable and time axis checked)
    time_step_hours / lead_steps             the data's step, a lead time in steps
    write_weatherbench_file / write_weatherbench_constants   write files in the public layout (tests, stand-in)
    preprocess_climax                        netCDF -> ClimaX npz shards + statistics
    shard_paths / load_shards / load_normalisation / load_climatology / forecast_pairs   read them back
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.extras import requires
from stochattn.io import atomic_path, save_json, save_npz

__all__ = [
    "ROW",
    "row_label",
    "GRID_DEG",
    "LAT",
    "LON",
    "PRESSURE_LEVELS",
    "WEATHERBENCH_VARIABLES",
    "CONSTANT_FIELDS",
    "CLIMAX_CONSTANTS",
    "CLIMAX_DEFAULT_VARS",
    "CLIMAX_LEVELS",
    "CLIMAX_YEARS",
    "PARTITIONS",
    "WEATHERBENCH_URL_TEMPLATE",
    "WEATHERBENCH_CONSTANTS_URL",
    "WeatherBenchFormatError",
    "weatherbench_url",
    "weatherbench_path",
    "constants_path",
    "open_weatherbench",
    "open_weatherbench_constants",
    "time_step_hours",
    "lead_steps",
    "write_weatherbench_file",
    "write_weatherbench_constants",
    "preprocess_climax",
    "shard_paths",
    "load_shard",
    "load_shards",
    "load_normalisation",
    "load_climatology",
    "ForecastPairs",
    "forecast_pairs",
    "Target",
    "TARGET_UNITS",
    "resolve_target",
    "ForecastCase",
    "forecast_cases",
]

# ------------------------------------------------------------------------------------------------------------------
# constants
# ------------------------------------------------------------------------------------------------------------------
GRID_DEG = 5.625
"""Grid spacing in degrees."""

LAT: np.ndarray = np.arange(-87.1875, 90.0, GRID_DEG)
"""(32,) float64 latitudes of the cell centres, south to north (-87.1875 ... 87.1875)."""

LON: np.ndarray = np.arange(0.0, 360.0, GRID_DEG)
"""(64,) float64 longitudes, 0 ... 354.375."""

LAT.setflags(write=False)
LON.setflags(write=False)

PRESSURE_LEVELS: tuple[int, ...] = (50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000)
"""The 13 pressure levels (hPa) of the pressure-level folders, in file order."""

WEATHERBENCH_VARIABLES: dict[str, tuple[str, bool]] = {
    "geopotential": ("z", True),
    "temperature": ("t", True),
    "u_component_of_wind": ("u", True),
    "v_component_of_wind": ("v", True),
    "relative_humidity": ("r", True),
    "specific_humidity": ("q", True),
    "2m_temperature": ("t2m", False),
    "10m_u_component_of_wind": ("u10", False),
    "10m_v_component_of_wind": ("v10", False),
    "toa_incident_solar_radiation": ("tisr", False),
    "total_precipitation": ("tp", False),
    "geopotential_500": ("z", False),
    "temperature_850": ("t", False),
}
"""Folder name -> (netCDF variable name, pressure-level variable?). ``geopotential_500`` and ``temperature_850`` are
WeatherBench's single-level extracts (files ``<folder>hPa_<year>_5.625deg.nc``, a scalar ``level`` coordinate)."""

_SINGLE_LEVEL_EXTRACTS = {"geopotential_500": 500, "temperature_850": 850}

CONSTANT_FIELDS: tuple[str, ...] = ("orography", "lsm", "slt", "lat2d", "lon2d")
"""Variables of ``constants/constants_5.625deg.nc``, each (lat, lon)."""

CLIMAX_CONSTANTS: dict[str, str] = {"land_sea_mask": "lsm", "orography": "orography", "lattitude": "lat2d"}
"""ClimaX key -> constants variable, the constant input fields of ClimaX's preprocessing (its spelling)."""

#: Pressure levels (hPa) of ClimaX's 48 inputs (:data:`CLIMAX_DEFAULT_VARS`).
CLIMAX_LEVELS: tuple[int, ...] = (50, 250, 500, 600, 700, 850, 925)
_CLIMAX_PRESSURE_VARS = (
    "geopotential",
    "u_component_of_wind",
    "v_component_of_wind",
    "temperature",
    "relative_humidity",
    "specific_humidity",
)
#: The 48 input/output variables of ClimaX's 5.625 deg global forecasting model, in order: ``model.net.init_args.
#: default_vars`` of microsoft/ClimaX ``configs/global_forecast_climax.yaml`` (commit 8a37186; the ``data.variables``
#: list of the same file is identical). 6 single-level fields, then 6 pressure-level fields x 7 levels, level fastest.
#: "lattitude" is ClimaX's spelling (it is a key in their .npz files), kept as is.
CLIMAX_DEFAULT_VARS: tuple[str, ...] = (
    "land_sea_mask",
    "orography",
    "lattitude",
    "2m_temperature",
    "10m_u_component_of_wind",
    "10m_v_component_of_wind",
) + tuple(f"{name}_{level}" for name in _CLIMAX_PRESSURE_VARS for level in CLIMAX_LEVELS)

PARTITIONS = ("train", "val", "test")

CLIMAX_YEARS: dict[str, tuple[int, ...]] = {
    "train": tuple(range(1979, 2016)),
    "val": (2016,),
    "test": (2017, 2018),
}
"""ClimaX's default split of the WeatherBench years."""

# The TUM server's public share of WeatherBench (mediaTUM 1524895), one zip per folder.
# NOTE: taken from WeatherBench's README and scripts that use it (e.g. climate-learn); NOT checked from this (offline)
# machine. Check it on a networked machine before relying on it; the same share is also served by rsync
# (rsync://m1524895@dataserv.ub.tum.de/m1524895/5.625deg/<folder>/<folder>_5.625deg.zip, password m1524895) and,
# on newer Nextcloud versions, as https://dataserv.ub.tum.de/public.php/dav/files/m1524895/5.625deg/<folder>/.
WEATHERBENCH_URL_TEMPLATE = (
    "https://dataserv.ub.tum.de/s/m1524895/download?path=%2F5.625deg%2F{folder}&files={folder}_5.625deg.zip"
)
"""Download URL of one folder's zip; ``{folder}`` is a key of :data:`WEATHERBENCH_VARIABLES` (unverified here)."""

WEATHERBENCH_CONSTANTS_URL = (
    "https://dataserv.ub.tum.de/s/m1524895/download?path=%2F5.625deg%2Fconstants&files=constants_5.625deg.nc"
)
"""Download URL of the (unzipped) constants file (unverified here, as :data:`WEATHERBENCH_URL_TEMPLATE`)."""

# CF attributes as ERA5's grib_to_netcdf writes them (z's checked against a listing of a public file; the others
# are ERA5's usual names, used only for files this module writes).
_ATTRS: dict[str, dict[str, str]] = {
    "z": {"units": "m**2 s**-2", "long_name": "Geopotential", "standard_name": "geopotential"},
    "t": {"units": "K", "long_name": "Temperature", "standard_name": "air_temperature"},
    "u": {"units": "m s**-1", "long_name": "U component of wind", "standard_name": "eastward_wind"},
    "v": {"units": "m s**-1", "long_name": "V component of wind", "standard_name": "northward_wind"},
    "r": {"units": "%", "long_name": "Relative humidity", "standard_name": "relative_humidity"},
    "q": {"units": "kg kg**-1", "long_name": "Specific humidity", "standard_name": "specific_humidity"},
    "t2m": {"units": "K", "long_name": "2 metre temperature"},
    "u10": {"units": "m s**-1", "long_name": "10 metre U wind component"},
    "v10": {"units": "m s**-1", "long_name": "10 metre V wind component"},
    "tisr": {"units": "J m**-2", "long_name": "TOA incident solar radiation"},
    "tp": {"units": "m", "long_name": "Total precipitation"},
    "orography": {"units": "m", "long_name": "orography"},
    "lsm": {"units": "(0 - 1)", "long_name": "Land-sea mask", "standard_name": "land_binary_mask"},
    "slt": {"units": "~", "long_name": "Soil type"},
    "lat2d": {"units": "degrees_north", "long_name": "latitude"},
    "lon2d": {"units": "degrees_east", "long_name": "longitude"},
}
_LEVEL_ATTRS = {"units": "millibars", "long_name": "pressure_level"}
_TIME_ENCODING = {"units": "hours since 1900-01-01 00:00:00.0", "calendar": "gregorian", "dtype": "int32"}
_HOURS_PER_YEAR = 8760  # ClimaX: a 365-day year; the last day of a leap year is dropped
_SHARD_RE = re.compile(r"^(\d+)_(\d+)\.npz$")
_MANIFEST = "stochattn_preprocess.json"


class WeatherBenchFormatError(ValueError):
    """A file that is not in the WeatherBench 5.625° layout (or is unreadable); the message names the file."""


# ------------------------------------------------------------------------------------------------------------------
# paths
# ------------------------------------------------------------------------------------------------------------------
def _variable(folder: str) -> tuple[str, bool]:
    if folder not in WEATHERBENCH_VARIABLES:
        raise ValueError(f"unknown WeatherBench folder {folder!r}; known: {', '.join(WEATHERBENCH_VARIABLES)}")
    return WEATHERBENCH_VARIABLES[folder]


def weatherbench_url(folder: str, url_template: str | None = None) -> str:
    """Download URL of ``folder``'s zip (``constants``: the constants file); see :data:`WEATHERBENCH_URL_TEMPLATE`."""
    if folder == "constants":
        return WEATHERBENCH_CONSTANTS_URL
    _variable(folder)
    return (url_template or WEATHERBENCH_URL_TEMPLATE).format(folder=folder)


def weatherbench_path(root: str | os.PathLike, folder: str, year: int) -> Path:
    """``root/<folder>/<folder>_<year>_5.625deg.nc`` (``<folder>hPa_`` for geopotential_500 / temperature_850)."""
    _variable(folder)
    if isinstance(year, bool) or not isinstance(year, (int, np.integer)):
        raise TypeError(f"year must be an int, got {year!r}")
    stem = f"{folder}hPa" if folder in _SINGLE_LEVEL_EXTRACTS else folder
    return Path(root) / folder / f"{stem}_{int(year)}_5.625deg.nc"


def constants_path(root: str | os.PathLike) -> Path:
    """The constants file: ``root/constants/constants_5.625deg.nc`` (WeatherBench's layout) if it exists, else
    ``root/constants.nc`` (the name ClimaX's preprocessing reads) if that exists, else the WeatherBench path."""
    wb = Path(root) / "constants" / "constants_5.625deg.nc"
    climax = Path(root) / "constants.nc"
    return climax if not wb.exists() and climax.exists() else wb


# ------------------------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------------------------
def _open_dataset(path: Path):
    with requires("climax"):
        import xarray as xr

    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file (expected the WeatherBench 5.625° layout <root>/<folder>/<file>_<year>_5.625deg.nc)"
        )
    try:
        return xr.open_dataset(path, engine="netcdf4", cache=False)
    except Exception as err:  # netCDF4/HDF5 raise OSError, ValueError or RuntimeError for a damaged file
        raise WeatherBenchFormatError(
            f"{path}: cannot be read as a netCDF file ({type(err).__name__}: {err}); truncated or corrupt? "
            "Fetch it again"
        ) from err


def _check_grid(da, path: Path) -> None:
    for name, expected in (("lat", LAT), ("lon", LON)):
        if name not in da.coords:
            raise WeatherBenchFormatError(f"{path}: no {name!r} coordinate (coordinates: {list(da.coords)})")
        got = np.asarray(da[name].values, dtype=np.float64)
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=0.0, atol=1e-6):
            shown = np.array2string(got, threshold=8, precision=4) if got.size else "[]"
            raise WeatherBenchFormatError(
                f"{path}: {name} has {got.size} values {shown}, expected the 5.625° grid's {expected.size} values "
                f"{expected[0]} ... {expected[-1]} in steps of {GRID_DEG} (ascending)"
            )


def _read_one(path: Path, folder: str, year: int, levels: Sequence[int] | None):
    """One yearly file as a loaded DataArray (time, [level,] lat, lon), checked."""
    short, pressure = _variable(folder)
    ds = _open_dataset(path)
    try:
        if short not in ds.data_vars:
            raise WeatherBenchFormatError(
                f"{path}: no variable {short!r} (WeatherBench's name for {folder}); variables found: "
                f"{sorted(ds.data_vars) or 'none'}"
            )
        da = ds[short]
        expected_dims = ("time", "level", "lat", "lon") if pressure else ("time", "lat", "lon")
        if set(da.dims) != set(expected_dims):
            raise WeatherBenchFormatError(
                f"{path}: {short!r} has dims {da.dims}, expected {expected_dims} for {folder!r}"
            )
        da = da.transpose(*expected_dims)
        _check_grid(da, path)
        if pressure:
            found = [int(v) for v in np.asarray(da["level"].values)]
            wanted = found if levels is None else [int(v) for v in levels]
            missing = [lv for lv in wanted if lv not in found]
            if missing:
                raise WeatherBenchFormatError(f"{path}: level(s) {missing} not in the file; levels found: {found}")
            da = da.sel(level=wanted)
        elif levels is not None:
            raise ValueError(f"levels= applies to pressure-level folders only; {folder!r} is a single-level folder")
        try:
            da = da.load()
        except Exception as err:  # a file whose header reads but whose data is cut off
            raise WeatherBenchFormatError(
                f"{path}: reading {short!r} failed ({type(err).__name__}: {err}); truncated or corrupt? Fetch it again"
            ) from err
    finally:
        ds.close()
    times = np.asarray(da["time"].values)
    if not np.issubdtype(times.dtype, np.datetime64):
        raise WeatherBenchFormatError(f"{path}: time is not decoded as datetimes (dtype {times.dtype})")
    if times.size == 0:
        raise WeatherBenchFormatError(f"{path}: no time steps")
    years = times.astype("datetime64[Y]").astype(int) + 1970
    if np.any(years != year):
        bad = times[np.flatnonzero(years != year)[0]]
        raise WeatherBenchFormatError(f"{path}: the file of year {year} holds time {bad}")
    _check_times(times, str(path))
    return da


def _check_times(times: np.ndarray, where: str) -> None:
    if times.size < 2:
        return
    steps = np.diff(times)
    if np.any(steps <= np.timedelta64(0)):
        i = int(np.flatnonzero(steps <= np.timedelta64(0))[0])
        raise WeatherBenchFormatError(
            f"{where}: times are not strictly increasing: {times[i]} is followed by {times[i + 1]}"
        )
    if np.any(steps != steps[0]):
        i = int(np.flatnonzero(steps != steps[0])[0])
        raise WeatherBenchFormatError(
            f"{where}: times are not evenly spaced: step {steps[0].astype('timedelta64[m]')} at first, but "
            f"{times[i]} -> {times[i + 1]} ({steps[i].astype('timedelta64[m]')}); a missing or duplicate step?"
        )


def open_weatherbench(
    root: str | os.PathLike,
    folder: str,
    years: Iterable[int],
    *,
    levels: Sequence[int] | None = None,
):
    """One variable of the WeatherBench 5.625° data for ``years``, loaded into memory as an ``xarray.DataArray``.

    ``root``: the ``5.625deg`` folder; ``folder``: a key of :data:`WEATHERBENCH_VARIABLES`; ``years``: the yearly
    files to read, concatenated along time in the order given; ``levels``: pressure levels (hPa) to keep, for a
    pressure-level folder (``None``: all in the file).

    Returns a DataArray named after the netCDF variable (``z``, ``t2m`` ...) with dims (time, lat, lon) or (time,
    level, lat, lon) (a file with the same dims in another order is transposed), float32 as stored, coordinates
    time (datetime64), [level,] lat (32,), lon (64,).

    Raises FileNotFoundError for a missing file; :class:`WeatherBenchFormatError` (a ValueError), naming the file,
    when a file cannot be read (truncated, corrupt), lacks the variable (the variables found are listed), has other
    dims, another grid (the values found are shown), lacks a requested level, holds times outside its year, or
    when the times (within a file and across the files, which must follow each other without a gap) are not
    strictly increasing and evenly spaced.
    """
    with requires("climax"):
        import xarray as xr

    years = [int(y) for y in years]
    if not years:
        raise ValueError("years is empty")
    parts = [_read_one(weatherbench_path(root, folder, y), folder, y, levels) for y in years]
    da = parts[0] if len(parts) == 1 else xr.concat(parts, dim="time")
    names = ", ".join(str(weatherbench_path(root, folder, y)) for y in years)
    _check_times(np.asarray(da["time"].values), f"{folder} years {years} (files {names})")
    return da


def open_weatherbench_constants(
    root: str | os.PathLike, names: Iterable[str] = CONSTANT_FIELDS
) -> dict[str, np.ndarray]:
    """Constant fields ``{name: (32, 64) float32}`` from :func:`constants_path` (grid and variables checked)."""
    path = constants_path(root)
    ds = _open_dataset(path)
    try:
        out = {}
        for name in names:
            if name not in ds.data_vars:
                raise WeatherBenchFormatError(
                    f"{path}: no constant field {name!r}; variables found: {sorted(ds.data_vars) or 'none'}"
                )
            da = ds[name]
            if set(da.dims) != {"lat", "lon"}:
                raise WeatherBenchFormatError(f"{path}: {name!r} has dims {da.dims}, expected ('lat', 'lon')")
            da = da.transpose("lat", "lon")
            _check_grid(da, path)
            try:
                out[name] = np.asarray(da.values, dtype=np.float32)
            except Exception as err:
                raise WeatherBenchFormatError(
                    f"{path}: reading {name!r} failed ({type(err).__name__}: {err}); truncated or corrupt?"
                ) from err
    finally:
        ds.close()
    return out


def time_step_hours(da: Any) -> int:
    """The time step (whole hours) of a DataArray from :func:`open_weatherbench` (or of datetime64 ``times``).

    Raises ValueError for fewer than two times, uneven spacing, or a step that is not a whole number of hours.
    """
    times = np.asarray(da["time"].values if hasattr(da, "coords") else da)
    if times.size < 2:
        raise ValueError(f"need at least two time steps to know the time step, got {times.size}")
    _check_times(times, "time axis")
    step = (times[1] - times[0]).astype("timedelta64[s]").astype(np.int64)
    if step % 3600:
        raise ValueError(f"the time step is {step} s, not a whole number of hours")
    return int(step // 3600)


def lead_steps(lead_hours: int | float, step_hours: int | float) -> int:
    """A lead time in steps of the data: ``lead_hours / step_hours`` (72 h -> 72 for hourly data, 12 for 6-hourly).

    ClimaX's ``Forecast`` gives the model ``lead_time = hrs_each_step * steps / 100`` (0.72 for 72 h either way).
    Raises ValueError when either is not positive or the lead time is not a whole multiple of the step.
    """
    for name, value in (("lead_hours", lead_hours), ("step_hours", step_hours)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    ratio = float(lead_hours) / float(step_hours)
    if not math.isclose(ratio, round(ratio), rel_tol=0.0, abs_tol=1e-9):
        raise ValueError(
            f"lead time {lead_hours} h is not a multiple of the data's time step {step_hours} h; use a lead time "
            f"in steps of {step_hours} h (e.g. {math.floor(ratio) * step_hours:g} h or "
            f"{math.ceil(ratio) * step_hours:g} h)"
        )
    return int(round(ratio))


# ------------------------------------------------------------------------------------------------------------------
# forecast targets
# ------------------------------------------------------------------------------------------------------------------
TARGET_UNITS: dict[str, tuple[str, str]] = {
    "z": ("geopotential", "m^2 s^-2"),
    "t": ("temperature", "K"),
    "u": ("u_component_of_wind", "m s^-1"),
    "v": ("v_component_of_wind", "m s^-1"),
    "q": ("specific_humidity", "kg kg^-1"),
    "r": ("relative_humidity", "%"),
    "t2m": ("2m_temperature", "K"),
    "u10": ("10m_u_component_of_wind", "m s^-1"),
    "v10": ("10m_v_component_of_wind", "m s^-1"),
}
"""WeatherBench short name -> (ClimaX variable stem, units): a target is ``<short><level>`` on a pressure level
(``z500``, ``t850``) or a surface short name (``t2m``, ``u10``, ``v10``)."""

_SURFACE_LABELS = {"t2m": "T2m", "u10": "U10", "v10": "V10"}


def row_label(lead_hours: float = 72, target: str = "Z500") -> str:
    """The row label of the ClimaX tables for a target label and lead time: ``"Z500 72 h"`` (:data:`ROW`) at the
    paper's, e.g. ``"T850 120 h"`` for another."""
    return f"{target} {float(lead_hours):g} h"


ROW = row_label()
"""The row label (tidy ``dataset``) of the ClimaX tables at the paper's lead (:func:`row_label` for another)."""


@dataclass(frozen=True)
class Target:
    """A forecast target: ``name`` as configured (``z500``), ``variable`` the ClimaX key (``geopotential_500``),
    ``label`` as tables print it (``Z500``), ``units`` of its scores (``m^2 s^-2``)."""

    name: str
    variable: str
    label: str
    units: str


def resolve_target(name: str, available: Sequence[str] | None = None) -> Target:
    """The :class:`Target` of a name such as ``z500``, ``t850`` or ``t2m``, checked against ``available`` (the
    forecast's input keys, e.g. ClimaX's 48 variables) when given. ValueError naming the allowed values otherwise."""
    allowed = sorted(
        {f"{s}{lv}" for s, (stem, _) in TARGET_UNITS.items() if s not in _SURFACE_LABELS for lv in PRESSURE_LEVELS
         if available is None or f"{stem}_{lv}" in available}
        | {s for s, (stem, _) in TARGET_UNITS.items()
           if s in _SURFACE_LABELS and (available is None or stem in available)},
        key=lambda t: (t[0], len(t), t))  # fmt: skip
    match = re.fullmatch(r"([a-z]+?)(\d+)", name) if isinstance(name, str) else None
    target = None
    if isinstance(name, str) and name in _SURFACE_LABELS:
        stem, units = TARGET_UNITS[name]
        target = Target(name, stem, _SURFACE_LABELS[name], units)
    elif match and match.group(1) in TARGET_UNITS and match.group(1) not in _SURFACE_LABELS \
            and int(match.group(2)) in PRESSURE_LEVELS:  # fmt: skip
        stem, units = TARGET_UNITS[match.group(1)]
        target = Target(name, f"{stem}_{int(match.group(2))}", f"{match.group(1).upper()}{int(match.group(2))}", units)
    if target is None or (available is not None and target.variable not in available):
        raise ValueError(f"unknown forecast target {name!r}; allowed here: {', '.join(allowed)}")
    return target


@dataclass(frozen=True)
class ForecastCase:
    """One (target, lead) case of the ERA5 slice: ``name`` ``<target>_<lead>h``; ``sub`` the suffix of its folder
    ``results/era5<sub>`` and ``sfx`` that of its table and figure names (both empty for the main case, which keeps
    the paper's names); ``row`` its table row label (``"T850 72 h"``)."""

    name: str
    target: Target
    lead: int
    sub: str
    sfx: str

    @property
    def row(self) -> str:
        return row_label(self.lead, self.target.label)


def forecast_cases(targets: Sequence[str], lead_hours: int | Sequence[int], variables: Sequence[str],
                   step_hours: int, cases: Sequence[Mapping[str, Any]] | None = None,
                   ) -> list[ForecastCase]:  # fmt: skip
    """The cases of ``targets`` x ``lead_hours`` (or the explicit ``cases``, ``[{"target", "lead_hours"}]``), the
    first being the main one, each checked against the data: the target among ``variables`` (:func:`resolve_target`)
    and the lead a multiple of ``step_hours`` (:func:`lead_steps`). ValueError naming the config key and the allowed
    values otherwise, or when a case repeats."""
    leads = [lead_hours] if isinstance(lead_hours, (int, np.integer)) else list(lead_hours)
    pairs = [(c["target"], c["lead_hours"]) for c in cases or []] or [(t, h) for t in targets for h in leads]
    out: list[ForecastCase] = []
    for name, lead in pairs:
        try:
            target = resolve_target(str(name), variables)
        except ValueError as e:
            raise ValueError(f"config era5.targets: {e}") from None
        try:
            lead_steps(lead, step_hours)
        except ValueError as e:
            raise ValueError(f"config era5.lead_hours: {e} (the data are {step_hours}-hourly)") from None
        case = f"{target.name}_{int(lead)}h"
        main = not out
        out.append(ForecastCase(case, target, int(lead), "" if main else f"/{case}", "" if main else f"_{case}"))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"config era5: targets and lead_hours repeat a case: {names}")
    return out


# ------------------------------------------------------------------------------------------------------------------
# writing (tests now, the stand-in generator later)
# ------------------------------------------------------------------------------------------------------------------
def _grid_coords() -> dict[str, Any]:
    return {"lat": ("lat", np.array(LAT, dtype=np.float64)), "lon": ("lon", np.array(LON, dtype=np.float64))}


def _to_netcdf(ds, path: Path, encoding: dict[str, Any]) -> Path:
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, mode="w", format="NETCDF4", engine="netcdf4", encoding=encoding)
    return path


def write_weatherbench_file(
    path: str | os.PathLike,
    folder: str,
    short_name: str,
    values: Any,
    times: Any,
    levels: Sequence[int] | None = None,
) -> Path:
    """Write one yearly file of ``folder`` in the public WeatherBench layout at ``path``, atomically.

    ``values``: (T, 32, 64) for a single-level folder, (T, n_levels, 32, 64) for a pressure-level folder (then
    ``levels`` (n_levels,) hPa is required); stored as float32. ``times``: (T,) datetime64 on whole hours,
    strictly increasing. ``short_name`` must be the folder's variable name (:data:`WEATHERBENCH_VARIABLES`).

    The file matches the public ones: variable ``short_name`` with dims (time, [level,] lat, lon) float32 and
    ERA5's units/long_name attributes, ``lat``/``lon`` float64 (the 5.625° grid), ``time`` datetime64 stored as
    int32 "hours since 1900-01-01" (grib_to_netcdf's encoding), ``level`` int32 with units millibars (a scalar
    coordinate in the geopotential_500 / temperature_850 extracts), global attribute Conventions CF-1.6.
    NOTE[DIFF]: the ``history`` attribute says the file was written by stochattn, not by grib_to_netcdf.
    """
    with requires("climax"):
        import xarray as xr

    short, pressure = _variable(folder)
    if short_name != short:
        raise ValueError(f"{folder!r} holds variable {short!r}, got short_name={short_name!r}")
    arr = np.asarray(values, dtype=np.float32)
    t = np.asarray(times).astype("datetime64[ns]")
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"times must be a non-empty 1-D datetime64 array, got shape {t.shape}")
    _check_times(t, "times")
    if np.any(t.astype("datetime64[h]") != t):
        raise ValueError("times must lie on whole hours (they are stored as int32 hours since 1900-01-01)")
    grid = (LAT.size, LON.size)
    if pressure:
        if levels is None:
            raise ValueError(f"{folder!r} is a pressure-level folder: pass levels=")
        lv = np.asarray(levels, dtype=np.int32)
        if arr.shape != (t.size, lv.size, *grid):
            raise ValueError(
                f"values must have shape (T, n_levels, 32, 64) = {(t.size, lv.size, *grid)}, got {arr.shape}"
            )
        dims: tuple[str, ...] = ("time", "level", "lat", "lon")
        coords: dict[str, Any] = {"time": t, "level": ("level", lv, dict(_LEVEL_ATTRS)), **_grid_coords()}
    else:
        if levels is not None:
            raise ValueError(f"{folder!r} is a single-level folder: levels= does not apply")
        if arr.shape != (t.size, *grid):
            raise ValueError(f"values must have shape (T, 32, 64) = {(t.size, *grid)}, got {arr.shape}")
        dims = ("time", "lat", "lon")
        coords = {"time": t, **_grid_coords()}
        if folder in _SINGLE_LEVEL_EXTRACTS:
            coords["level"] = ((), np.int32(_SINGLE_LEVEL_EXTRACTS[folder]), dict(_LEVEL_ATTRS))
    da = xr.DataArray(arr, dims=dims, coords=coords, attrs=dict(_ATTRS.get(short, {})))
    ds = xr.Dataset({short: da}, attrs={"Conventions": "CF-1.6", "history": "written by stochattn.data.era5"})
    ds["time"].attrs["long_name"] = "time"
    encoding: dict[str, Any] = {
        short: {"dtype": "float32"},
        "time": dict(_TIME_ENCODING),
        "lat": {"dtype": "float64", "_FillValue": None},
        "lon": {"dtype": "float64", "_FillValue": None},
    }
    if "level" in ds.coords:
        encoding["level"] = {"dtype": "int32", "_FillValue": None}
    return _to_netcdf(ds, Path(path), encoding)


def write_weatherbench_constants(path: str | os.PathLike, fields: Mapping[str, Any]) -> Path:
    """Write a constants file like ``constants/constants_5.625deg.nc`` at ``path``, atomically.

    ``fields``: ``{name: (32, 64)}`` for ``orography``, ``lsm``, ``slt`` (required) and optionally ``lat2d`` /
    ``lon2d`` (default: the grid's latitude / longitude of each cell). Every field is stored float32 with dims
    (lat, lon). NOTE[DIFF]: the public file's dtypes are not checked here; float32 is assumed.
    """
    with requires("climax"):
        import xarray as xr

    data = dict(fields)
    lat2d, lon2d = np.meshgrid(LAT, LON, indexing="ij")
    data.setdefault("lat2d", lat2d)
    data.setdefault("lon2d", lon2d)
    unknown = sorted(set(data) - set(CONSTANT_FIELDS))
    missing = [n for n in CONSTANT_FIELDS if n not in data]
    if unknown or missing:
        raise ValueError(f"constant fields: unknown {unknown}, missing {missing} (expected {list(CONSTANT_FIELDS)})")
    variables = {}
    for name in CONSTANT_FIELDS:
        arr = np.asarray(data[name], dtype=np.float32)
        if arr.shape != (LAT.size, LON.size):
            raise ValueError(f"constant field {name!r} must have shape (32, 64), got {arr.shape}")
        variables[name] = xr.DataArray(arr, dims=("lat", "lon"), attrs=dict(_ATTRS[name]))
    ds = xr.Dataset(variables, coords=_grid_coords(),
                    attrs={"Conventions": "CF-1.6", "history": "written by stochattn.data.era5"})  # fmt: skip
    encoding: dict[str, Any] = {name: {"dtype": "float32"} for name in CONSTANT_FIELDS}
    encoding.update({"lat": {"dtype": "float64", "_FillValue": None}, "lon": {"dtype": "float64", "_FillValue": None}})
    return _to_netcdf(ds, Path(path), encoding)


# ------------------------------------------------------------------------------------------------------------------
# ClimaX preprocessing
# ------------------------------------------------------------------------------------------------------------------
def _check_years(years: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    unknown = sorted(set(years) - set(PARTITIONS))
    if unknown:
        raise ValueError(f"years: unknown partition(s) {unknown}; partitions are {PARTITIONS}")
    if "train" not in years:
        raise ValueError("years needs a 'train' partition: the normalisation statistics come from it")
    out: dict[str, list[int]] = {}
    seen: dict[int, str] = {}
    for part in PARTITIONS:
        if part not in years:
            continue
        ys = [int(y) for y in years[part]]
        if not ys:
            raise ValueError(f"years[{part!r}] is empty")
        for y in ys:
            if y in seen:
                raise ValueError(f"year {y} is in both {seen[y]!r} and {part!r}; partitions must not share years")
            seen[y] = part
        out[part] = ys
    return out


def _variable_keys(root: Path, variables: Sequence[str], levels: Sequence[int] | None, year: int) -> list[str]:
    keys = []
    for folder in variables:
        _, pressure = _variable(folder)
        if not pressure:
            keys.append(folder)
            continue
        if levels is None:
            with _open_dataset(weatherbench_path(root, folder, year)) as ds:
                found = [int(v) for v in np.asarray(ds["level"].values)] if "level" in ds.coords else []
            chosen = [lv for lv in found if lv in PRESSURE_LEVELS]
            if not chosen:
                raise WeatherBenchFormatError(
                    f"{weatherbench_path(root, folder, year)}: none of the standard pressure levels {PRESSURE_LEVELS} "
                    f"(levels found: {found})"
                )
        else:
            chosen = [int(lv) for lv in levels]
        keys.extend(f"{folder}_{lv}" for lv in chosen)
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"variables give duplicate keys {dup} (e.g. geopotential level 500 and geopotential_500)")
    return keys


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def preprocess_climax(
    root: str | os.PathLike,
    out_dir: str | os.PathLike,
    variables: Sequence[str],
    years: Mapping[str, Iterable[int]],
    *,
    num_shards: int = 8,
    levels: Sequence[int] | None = None,
    constants: Mapping[str, str] | None = None,
    progress_file: Any = None,
) -> dict[str, Any]:
    """ClimaX's ``nc2np_equally_era5.py``: WeatherBench netCDF under ``root`` -> npz shards under ``out_dir``.

    ``variables``: folder names (keys of :data:`WEATHERBENCH_VARIABLES`); ``years``: ``{"train": [...], "val":
    [...], "test": [...]}`` (train required, val/test optional, no year in two partitions); ``num_shards``: shards
    per year; ``levels``: pressure levels kept for every pressure-level folder (``None``: those in the file, as
    ClimaX's intersection with its 13 levels); ``constants``: ClimaX key -> constants variable of the constant
    input fields (default :data:`CLIMAX_CONSTANTS`; ``{}`` for none), read by :func:`open_weatherbench_constants`.

    Per year, every variable is read with :func:`open_weatherbench` (checked; all variables must share the same
    times), cut to the first ``8760 / step_hours`` steps (ClimaX drops the last day of a leap year) and split into
    ``num_shards`` consecutive shards ``<partition>/<year>_<shard>.npz`` of (T / num_shards, 1, 32, 64) float32 per
    key; a constant field is repeated along time in every shard. Writes ``normalize_mean.npz`` /
    ``normalize_std.npz`` ((1,) float64 per key, from the training years only), ``<partition>/climatology.npz``
    ((1, 32, 64) float32 time mean per variable key, constants excluded), ``lat.npy``, ``lon.npy`` and, last, a
    manifest ``stochattn_preprocess.json`` (variables, years, step, shard length of the first year; returned as a
    dict). Every file is written atomically; the manifest comes last, so its absence marks an unfinished run (an
    error at a later year leaves the earlier years' shards behind). Progress lines go to ``progress_file``
    (default stderr).

    NOTE[DIFF] (ClimaX, src/data_preprocessing/nc2np_equally_era5.py):
      * ClimaX hard-codes hourly data (HOURS_PER_YEAR = 8760); here the year length is 8760 / step_hours steps,
        so 6-hourly data gives 1460 steps (then num_shards must divide 1460, e.g. 4 or 5; the error lists the
        divisors). A year with fewer steps (a test file) is kept whole and must also divide into equal shards.
      * ClimaX's statistics of a pressure-level key keep only the LAST training year (its check ``if var not in
        normalize_mean`` tests the folder name, never a key, so every year overwrites the list); here every
        training year counts, for every key.
      * Yearly means/variances are combined weighted by the number of steps per year (the pooled population
        statistics); ClimaX weights years equally, which is the same when all years have equal length (always,
        after the cut to 8760 / step_hours, for full years). The same holds for the climatology. Statistics are
        accumulated in float64 and stored float64 (ClimaX: float32 means of float32 data).
      * ClimaX reads ``<root>/constants.nc`` and ``<root>/<folder>/*<year>*.nc`` by glob; here the WeatherBench
        names (:func:`weatherbench_path`, :func:`constants_path`), and the single-level extracts
        geopotential_500 / temperature_850 are accepted (ClimaX's NAME_TO_VAR lacks them).
      * The manifest file is an addition (ClimaX's loaders read only ``*.npz`` inside the partition folders).
    """
    from stochattn.progress import progress

    root = Path(root)
    out = Path(out_dir)
    parts = _check_years(years)
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}")
    variables = list(variables)
    if not variables:
        raise ValueError("variables is empty")
    for folder in variables:
        _variable(folder)
    const_map = dict(CLIMAX_CONSTANTS if constants is None else constants)
    const_fields = open_weatherbench_constants(root, const_map.values()) if const_map else {}
    keys = _variable_keys(root, variables, levels, parts["train"][0])

    # accumulators: per training year (steps, mean, variance) of each key; per partition sum of steps * time mean
    stat: dict[str, list[tuple[int, float, float]]] = {k: [] for k in keys}
    step_hours: int | None = None
    shard_len: int | None = None
    jobs = [(part, y) for part in PARTITIONS if part in parts for y in parts[part]]
    clim: dict[str, dict[str, Any]] = {part: {} for part in parts}
    clim_n: dict[str, int] = {part: 0 for part in parts}
    for part, year in (bar := progress(jobs, desc="climax preprocessing", unit="year", file=progress_file)):
        bar.set_postfix(part=part, year=year)
        arrays: dict[str, np.ndarray] = {}
        times_ref: np.ndarray | None = None
        for folder in variables:
            pressure = WEATHERBENCH_VARIABLES[folder][1]
            folder_levels = None
            if pressure:
                folder_levels = [int(k.rsplit("_", 1)[1]) for k in keys if k.rsplit("_", 1)[0] == folder]
            da = open_weatherbench(root, folder, [year], levels=folder_levels)
            times = np.asarray(da["time"].values)
            if times_ref is None:
                times_ref = times
            elif times.shape != times_ref.shape or np.any(times != times_ref):
                raise WeatherBenchFormatError(
                    f"{weatherbench_path(root, folder, year)}: its times differ from those of "
                    f"{weatherbench_path(root, variables[0], year)} ({times.size} vs {times_ref.size} steps, first "
                    f"{times[0]} vs {times_ref[0]}); all variables of a year must share one time axis"
                )
            values = np.asarray(da.values, dtype=np.float32)
            if pressure:
                for i, lv in enumerate(folder_levels or []):
                    arrays[f"{folder}_{lv}"] = values[:, i : i + 1]
            else:
                arrays[folder] = values[:, None]
        assert times_ref is not None
        if times_ref.size >= 2:
            step = time_step_hours(times_ref)
            if step_hours is None:
                step_hours = step
            elif step != step_hours:
                raise WeatherBenchFormatError(f"year {year} has a {step} h time step, earlier years {step_hours} h")
        step_for_year = step_hours if step_hours is not None else 1
        if _HOURS_PER_YEAR % step_for_year:
            raise ValueError(f"the time step {step_for_year} h does not divide a 365-day year ({_HOURS_PER_YEAR} h)")
        steps_per_year = _HOURS_PER_YEAR // step_for_year
        n_t = min(times_ref.size, steps_per_year)
        arrays = {k: v[:n_t] for k, v in arrays.items()}
        if n_t % num_shards:
            raise ValueError(
                f"year {year} has {n_t} time steps, not divisible into num_shards={num_shards} equal shards; "
                f"choose num_shards among {_divisors(n_t)}"
            )
        this_len = n_t // num_shards
        shard_len = this_len if shard_len is None else shard_len
        for k, v in arrays.items():
            v64 = v.astype(np.float64)
            if part == "train":  # this year's (steps, mean, population variance) over time and space
                year_mean = float(v64.mean())
                stat[k].append((n_t, year_mean, float(np.mean(np.square(v64 - year_mean)))))
            clim[part][k] = clim[part].get(k, 0.0) + n_t * v64.mean(axis=0)  # (1, 32, 64)
        clim_n[part] += n_t
        const_arrays = {
            ck: np.broadcast_to(const_fields[cv][None, None], (this_len, 1, LAT.size, LON.size)).astype(np.float32)
            for ck, cv in const_map.items()
        }
        for shard in range(num_shards):
            sl = slice(shard * this_len, (shard + 1) * this_len)
            save_npz(out / part / f"{year}_{shard}.npz", **const_arrays, **{k: arrays[k][sl] for k in keys})

    # pooled over the training years: mean = sum n_y m_y / N, var = sum n_y (v_y + (m_y - mean)^2) / N
    mean_out: dict[str, np.ndarray] = {}
    std_out: dict[str, np.ndarray] = {}
    for ck, cv in const_map.items():
        field = const_fields[cv].astype(np.float64)
        mean_out[ck] = np.array([field.mean()])
        std_out[ck] = np.array([field.std()])
    for k in keys:
        n_y, m_y, v_y = (np.array(c, dtype=np.float64) for c in zip(*stat[k]))
        mean = float(np.sum(n_y * m_y) / np.sum(n_y))
        var = float(np.sum(n_y * (v_y + (m_y - mean) ** 2)) / np.sum(n_y))
        mean_out[k] = np.array([mean])
        std_out[k] = np.array([math.sqrt(var)])
    save_npz(out / "normalize_mean.npz", **mean_out)
    save_npz(out / "normalize_std.npz", **std_out)
    for part in parts:
        save_npz(out / part / "climatology.npz",
                 **{k: (clim[part][k] / clim_n[part]).astype(np.float32) for k in keys})  # fmt: skip
    for name, arr in (("lat.npy", LAT), ("lon.npy", LON)):
        with atomic_path(out / name) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, np.array(arr, dtype=np.float64))
    manifest = {
        "source_root": str(root),
        "variables": list(variables),
        "keys": keys,
        "constants": const_map,
        "years": parts,
        "step_hours": step_hours,
        "num_shards": int(num_shards),
        "shard_len": shard_len,
    }
    save_json(out / _MANIFEST, manifest)
    return manifest


# ------------------------------------------------------------------------------------------------------------------
# reading the shards back
# ------------------------------------------------------------------------------------------------------------------
def _check_partition(partition: str) -> None:
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")


def shard_paths(out_dir: str | os.PathLike, partition: str) -> list[Path]:
    """The shard files ``<out_dir>/<partition>/<year>_<shard>.npz`` sorted by (year, shard) numerically
    (``climatology.npz`` excluded). Raises FileNotFoundError when the folder or every shard is missing."""
    _check_partition(partition)
    folder = Path(out_dir) / partition
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder; run preprocess_climax first")
    found = []
    for p in folder.iterdir():
        m = _SHARD_RE.match(p.name)
        if m:
            found.append(((int(m.group(1)), int(m.group(2))), p))
    if not found:
        raise FileNotFoundError(f"{folder}: no shard files <year>_<shard>.npz")
    return [p for _, p in sorted(found)]


def _load_npz(path: Path, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of ``path`` (only those of ``names`` that it holds, when given: the others are never read)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            wanted = data.files if names is None else [n for n in names if n in data.files]
            return {name: data[name] for name in wanted}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise WeatherBenchFormatError(f"{path}: not a readable .npz file ({err}); truncated? Preprocess again") from err


def load_shard(path: str | os.PathLike, variables: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """One shard ``{key: (T, 1, 32, 64)}`` (only ``variables``, in that order, when given; all keys otherwise).

    Raises :class:`WeatherBenchFormatError` naming the file for a missing key, a shape other than (T, 1, 32,
    64) or keys of different lengths T."""
    path = Path(path)
    data = _load_npz(path, variables)
    wanted = list(data) if variables is None else list(variables)
    missing = [k for k in wanted if k not in data]
    if missing:
        with np.load(path, allow_pickle=False) as found:
            raise WeatherBenchFormatError(f"{path}: no key(s) {missing}; keys found: {sorted(found.files)}")
    out = {k: data[k] for k in wanted}
    lengths = set()
    for k, v in out.items():
        if v.ndim != 4 or v.shape[1:] != (1, LAT.size, LON.size):
            raise WeatherBenchFormatError(f"{path}: {k!r} has shape {v.shape}, expected (T, 1, 32, 64)")
        lengths.add(v.shape[0])
    if len(lengths) > 1:
        raise WeatherBenchFormatError(f"{path}: keys have different lengths {sorted(lengths)}")
    return out


def load_shards(
    out_dir: str | os.PathLike, partition: str, variables: Sequence[str] | None = None
) -> list[dict[str, np.ndarray]]:
    """Every shard of ``partition`` in :func:`shard_paths` order (by year, then shard), read by :func:`load_shard`."""
    return [load_shard(p, variables) for p in shard_paths(out_dir, partition)]


def load_normalisation(out_dir: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(mean, std)``: ``{key: (1,)}`` from ``normalize_mean.npz`` / ``normalize_std.npz`` (training years only)."""
    out = Path(out_dir)
    return _load_npz(out / "normalize_mean.npz"), _load_npz(out / "normalize_std.npz")


def load_climatology(out_dir: str | os.PathLike, partition: str) -> dict[str, np.ndarray]:
    """``{key: (1, 32, 64)}``: the time mean of ``partition``'s data (ClimaX's ACC climatology for that partition)."""
    _check_partition(partition)
    return _load_npz(Path(out_dir) / partition / "climatology.npz")


@dataclass(frozen=True)
class ForecastPairs:
    """(input at t, target at t + lead) pairs of a partition.

    ``x`` (N, C_in, 32, 64) float32 inputs (the ``in_variables`` stacked on axis 1), ``y`` (N, C_out, 32, 64)
    float32 targets, ``shard`` (N,) int64 index of the shard (in the list given) and ``t`` (N,) int64 time index of
    the input inside it (the target is at ``t + lead``); ordered shard by shard, time ascending.
    """

    x: np.ndarray
    y: np.ndarray
    shard: np.ndarray
    t: np.ndarray
    in_variables: tuple[str, ...]
    out_variables: tuple[str, ...]
    lead_steps: int

    @property
    def n_pairs(self) -> int:
        return int(self.x.shape[0])


def forecast_pairs(
    shards: Sequence[Mapping[str, np.ndarray]],
    lead_steps: int,
    *,
    in_variables: Sequence[str] | None = None,
    out_variables: Sequence[str] | None = None,
) -> ForecastPairs:
    """All (input at t, target at t + ``lead_steps``) pairs inside each shard, as ClimaX's ``Forecast`` with a fixed
    lead (``inputs = x[:-lead]``, ``outputs = y[lead:]``): a pair never crosses a shard, so a shard of T steps gives
    T - lead pairs (none when T <= lead).

    ``shards``: from :func:`load_shards` (``{key: (T, 1, 32, 64)}`` each); ``in_variables``: input keys (default:
    the first shard's keys, in order); ``out_variables``: target keys (default: ``in_variables``).
    Raises ValueError for a non-positive lead or when no shard is longer than the lead.
    """
    if isinstance(lead_steps, bool) or not isinstance(lead_steps, (int, np.integer)) or lead_steps < 1:
        raise ValueError(f"lead_steps must be a positive int, got {lead_steps!r}")
    if not shards:
        raise ValueError("no shards given")
    ins = tuple(shards[0]) if in_variables is None else tuple(in_variables)
    outs = ins if out_variables is None else tuple(out_variables)
    xs, ys, sid, tid = [], [], [], []
    for i, shard in enumerate(shards):
        missing = [k for k in (*ins, *outs) if k not in shard]
        if missing:
            raise ValueError(f"shard {i} has no key(s) {missing}; keys: {sorted(shard)}")
        n_t = shard[ins[0]].shape[0]
        n = n_t - lead_steps
        if n <= 0:
            continue
        xs.append(np.concatenate([np.asarray(shard[k][:n], dtype=np.float32) for k in ins], axis=1))
        ys.append(np.concatenate([np.asarray(shard[k][lead_steps:], dtype=np.float32) for k in outs], axis=1))
        sid.append(np.full(n, i, dtype=np.int64))
        tid.append(np.arange(n, dtype=np.int64))
    if not xs:
        longest = max(s[ins[0]].shape[0] for s in shards)
        raise ValueError(
            f"no forecast pair: every shard has at most {longest} steps, not more than lead_steps={lead_steps}"
        )
    return ForecastPairs(np.concatenate(xs), np.concatenate(ys), np.concatenate(sid), np.concatenate(tid),
                         ins, outs, int(lead_steps))  # fmt: skip


# ------------------------------------------------------------------------------------------------------------------
# fetching the public files
# ------------------------------------------------------------------------------------------------------------------
def fetch_weatherbench(
    root: str | os.PathLike,
    folders: Sequence[str],
    years: Iterable[int],
    *,
    mirrors: Iterable[str | os.PathLike] = (),
    allow_download: bool = True,
    url_template: str | None = None,
    constants_url: str | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Put the yearly files of every folder of ``folders`` (and ``constants``) for ``years`` under ``root`` in the
    public layout, and return a record {folder: {"source": ..., "sha256": ...}}.

    A folder whose files are all present already is kept. Else each mirror is tried (``<mirror>/weatherbench/
    5.625deg/<folder>/<file>``, files copied), else, when ``allow_download``, the folder's zip is downloaded from
    ``url_template`` (:data:`WEATHERBENCH_URL_TEMPLATE`; the constants file from ``constants_url``,
    :data:`WEATHERBENCH_CONSTANTS_URL`), its SHA-256 recorded (WeatherBench publishes none), and the
    needed members extracted. Every file is written atomically, and every written file is opened and checked by
    :func:`open_weatherbench` (grid, variable, times), one year at a time, so a broken download fails here. Raises
    FileNotFoundError naming the folder, mirrors and URL when no source has the files.
    """
    import shutil
    import tempfile

    from stochattn.data.uci import _download_verified
    from stochattn.io import sha256_file
    from stochattn.staging import link_or_copy

    root = Path(root)
    years = [int(y) for y in years]
    record: dict[str, Any] = {}
    mirror_dirs = [Path(m) for m in mirrors]
    constants_url = constants_url or WEATHERBENCH_CONSTANTS_URL
    for folder in list(folders) + ["constants"]:
        names = ([constants_path(root).name] if folder == "constants"
                 else [weatherbench_path(root, folder, y).name for y in years])  # fmt: skip
        if folder != "constants":
            _variable(folder)
        dest = root / folder
        if all((dest / n).is_file() for n in names):
            record[folder] = {"source": "present"}
            continue
        found = next((m / "weatherbench" / "5.625deg" / folder for m in mirror_dirs
                      if all((m / "weatherbench" / "5.625deg" / folder / n).is_file() for n in names)),
                     None)  # fmt: skip
        if found is not None:
            for n in names:
                link_or_copy(found / n, dest / n)  # a hard link into a store on the same file system
            record[folder] = {"source": str(found)}
        elif allow_download:
            url = constants_url if folder == "constants" else weatherbench_url(folder, url_template)
            with tempfile.TemporaryDirectory(dir=root if root.is_dir() else None) as tmpdir:
                download = Path(tmpdir) / ("constants.nc" if folder == "constants" else f"{folder}.zip")
                _download_verified(url, download, None, timeout)
                digest = sha256_file(download)
                if folder == "constants":
                    with atomic_path(dest / names[0]) as tmp:
                        shutil.copyfile(download, tmp)
                else:
                    with zipfile.ZipFile(download) as archive:
                        members = {Path(m).name: m for m in archive.namelist()}
                        missing = [n for n in names if n not in members]
                        if missing:
                            raise WeatherBenchFormatError(f"{url}: the zip lacks {missing[:3]}")
                        for n in names:
                            with atomic_path(dest / n) as tmp, archive.open(members[n]) as src, open(tmp, "wb") as out:
                                shutil.copyfileobj(src, out)
            record[folder] = {"source": url, "sha256": digest}
        else:
            raise FileNotFoundError(
                f"WeatherBench {folder!r}: files {names[:2]}... not under {dest}, in no mirror "
                f"({[str(m) for m in mirror_dirs]}), and downloads are off (URL "
                f"{constants_url if folder == 'constants' else weatherbench_url(folder, url_template)})"
            )
        if folder == "constants":
            open_weatherbench_constants(root, CONSTANT_FIELDS)
        else:
            # NOTE[DIFF]: each year's file on its own (grid, variable, times within the year): all of a folder's
            # years at once would hold ~37 GB of one pressure-level variable for the 37 training years, and the
            # preprocessing reads year by year anyway
            for y in years:
                open_weatherbench(root, folder, [y])
    return record
