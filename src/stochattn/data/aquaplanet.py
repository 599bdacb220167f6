"""An offline, physically real stand-in for WeatherBench ERA5 at 5.625°: a Held–Suarez aquaplanet.

NOT ERA5. Google's ``dinosaur`` dynamical core integrates the dry hydrostatic primitive equations (spectral, T21 by
default, 10 equidistant sigma levels) under Held & Suarez's (1994) forcing: Newtonian relaxation towards a zonally
symmetric radiative-equilibrium temperature and Rayleigh friction in the boundary layer. The result is a turbulent
general circulation with jets and baroclinic eddies (weather), but an aquaplanet without seasons, diurnal cycle,
orography, land or moisture. Label it as such wherever its numbers appear.

:func:`generate_held_suarez` simulates once and writes the fields in the public WeatherBench layout through
:mod:`stochattn.data.era5`'s writers (read back by :func:`stochattn.data.era5.open_weatherbench`)::

    <root>/<folder>/<folder>_<year>_5.625deg.nc     geopotential, temperature, u/v_component_of_wind (time, level,
                                                     lat, lon) on the requested levels; geopotential_500 and
                                                     temperature_850 (time, lat, lon); 6-hourly by default
    <root>/constants/constants_5.625deg.nc           orography = lsm = slt = 0 (an aquaplanet)
    <root>/standin.json                              manifest, written last (parameters, versions, timings)

A run: rest state at 288 K plus a small seeded temperature perturbation -> ``spin_up_days`` (not written) -> the
segments, one after the other, each written as the files of its "year" (a short consecutive chunk of the one run).
Two runs with different ``delta_t_y`` / ``delta_theta_z`` are two different climates.

:func:`persistence_and_climatology_rmse` scores the persistence and climatology forecasts of the written data (a
check that the stand-in behaves like weather: persistence beats climatology at short leads only).

jax and dinosaur are imported inside the functions (this module imports without them) and run on the CPU.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.data import era5
from stochattn.extras import requires
from stochattn.io import save_json
from stochattn.metrics import lat_weighted_rmse
from stochattn.progress import progress as show_progress

__all__ = [
    "FOLDERS",
    "RESOLUTIONS",
    "MANIFEST",
    "SIGMA_LAYERS",
    "generate_held_suarez",
    "persistence_and_climatology_rmse",
]

FOLDERS: dict[str, tuple[str, int | None]] = {
    "geopotential": ("z", None),
    "temperature": ("t", None),
    "u_component_of_wind": ("u", None),
    "v_component_of_wind": ("v", None),
    "geopotential_500": ("z", 500),
    "temperature_850": ("t", 850),
    # NOTE[DIFF]: the dry dynamical core has no surface layer; its "2m_temperature" is the temperature of the lowest
    # model level (sigma 0.95, ~950 hPa), the nearest it has to a near-surface field (an extrapolation to 1000 hPa
    # turned non-finite where the surface pressure drops)
    "2m_temperature": ("t2m", None),
}
"""Folders the stand-in can write -> (quantity, fixed level in hPa for a single-level extract, else None; the
quantity ``t2m`` is a single-level field of the lowest model level)."""

_SURFACE_QUANTITIES = ("t2m",)

RESOLUTIONS: tuple[str, ...] = ("T21", "T31", "T42")
"""Spectral truncations supported (dinosaur's ``Grid.T21`` ...; Gaussian grids of 32 x 64, 48 x 96, 64 x 128)."""

MANIFEST = "standin.json"
"""Name of the manifest under ``root``, written last: its presence marks a complete run."""

SIGMA_LAYERS = 10
"""Equidistant sigma levels of the model (centres 0.05 ... 0.95)."""

_REFERENCE_TEMPERATURE_K = 288.0  # isothermal rest state (and the reference temperature of the semi-implicit scheme)
_SURFACE_PRESSURE_PA = 1e5
_PERTURBATION_K = 0.1  # std of the seeded white-noise temperature perturbation of the rest state
# dinosaur's Held-Suarez example: an exponential step filter on the top 20 % of total wavenumbers.
_FILTER = {"tau": 0.0087504, "order": 1.5, "cutoff": 0.8}


# ------------------------------------------------------------------------------------------------------------------
# validation (before anything is simulated or written)
# ------------------------------------------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _positive_int(value: Any, name: str) -> int:
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class _Plan:
    """Validated arguments of :func:`generate_held_suarez`."""

    segments: tuple[tuple[int, int], ...]  # (year, days), in run order
    folders: tuple[str, ...]
    levels: tuple[int, ...]  # hPa, ascending: the levels of the pressure-level files
    computed_levels: tuple[int, ...]  # hPa, ascending: levels + those of the single-level extracts
    quantities: tuple[str, ...]  # subset of z, t, u, v
    spin_up_days: int
    delta_t_y: float
    delta_theta_z: float
    resolution: str
    dt_minutes: int
    output_hours: int
    seed: int

    @property
    def steps_per_output(self) -> int:
        return self.output_hours * 60 // self.dt_minutes

    @property
    def outputs_per_day(self) -> int:
        return 24 // self.output_hours


def _check_segments(segments: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(segments, Mapping) or not segments:
        raise ValueError(f"segments must be a non-empty mapping {{year: n_days}}, got {segments!r}")
    out = []
    for year, days in segments.items():
        if not _is_int(year):
            raise ValueError(f"segments: year {year!r} is not an int")
        days = _positive_int(days, f"segments[{year}] (days)")
        days_in_year = 366 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 365
        if days > days_in_year:
            raise ValueError(f"segments[{year}] = {days} days does not fit in year {year} ({days_in_year} days)")
        out.append((int(year), days))
    years = [y for y, _ in out]
    if any(b <= a for a, b in zip(years, years[1:])):
        raise ValueError(f"segments: years must be strictly increasing in run order, got {years}")
    return tuple(out)


def _check_folders(variables: Any) -> tuple[str, ...]:
    if isinstance(variables, str) or not isinstance(variables, Iterable):
        raise ValueError(f"variables must be a sequence of folder names, got {variables!r}")
    folders = tuple(variables)
    if not folders:
        raise ValueError("variables is empty")
    unknown = [f for f in folders if f not in FOLDERS]
    if unknown:
        raise ValueError(f"unknown or unsupported folder(s) {unknown}; the stand-in writes: {', '.join(FOLDERS)}")
    if len(set(folders)) != len(folders):
        raise ValueError(f"variables has duplicates: {list(folders)}")
    return folders


def _check_levels(levels: Any, folders: Sequence[str]) -> tuple[int, ...]:
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Iterable):
        raise ValueError(f"levels must be a sequence of pressure levels (hPa), got {levels!r}")
    raw = tuple(levels)
    bad = [lv for lv in raw if not _is_int(lv) or int(lv) not in era5.PRESSURE_LEVELS]
    if bad:
        raise ValueError(f"level(s) {bad} not among WeatherBench's pressure levels {era5.PRESSURE_LEVELS} (hPa)")
    if len(set(raw)) != len(raw):
        raise ValueError(f"levels has duplicates: {list(raw)}")
    if not raw and any(FOLDERS[f][1] is None and FOLDERS[f][0] not in _SURFACE_QUANTITIES for f in folders):
        raise ValueError("levels is empty but a pressure-level folder is requested")
    return tuple(sorted(int(lv) for lv in raw))


def _plan(
    segments: Any,
    variables: Any,
    levels: Any,
    spin_up_days: Any,
    delta_t_y: Any,
    delta_theta_z: Any,
    resolution: Any,
    dt_minutes: Any,
    output_hours: Any,
    seed: Any,
) -> _Plan:
    segs = _check_segments(segments)
    folders = _check_folders(variables)
    lvls = _check_levels(levels, folders)
    if not _is_int(spin_up_days) or spin_up_days < 0:
        raise ValueError(f"spin_up_days must be a non-negative int, got {spin_up_days!r}")
    for name, value in (("delta_t_y", delta_t_y), ("delta_theta_z", delta_theta_z)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value) or value < 0:  # fmt: skip
            raise ValueError(f"{name} must be a finite number >= 0 (K), got {value!r}")
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {RESOLUTIONS}, got {resolution!r}")
    dt = _positive_int(dt_minutes, "dt_minutes")
    out_h = _positive_int(output_hours, "output_hours")
    if 24 % out_h:
        raise ValueError(f"output_hours must divide 24 (whole days per chunk), got {out_h}")
    if (out_h * 60) % dt:
        raise ValueError(f"output_hours = {out_h} h is not a multiple of dt_minutes = {dt} min")
    if not _is_int(seed) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    fixed = {FOLDERS[f][1] for f in folders} - {None}
    has_pressure = any(FOLDERS[f][1] is None and FOLDERS[f][0] not in _SURFACE_QUANTITIES for f in folders)
    computed = tuple(sorted(set(lvls if has_pressure else ()) | fixed))
    quantities = tuple(q for q in ("z", "t", "u", "v", *_SURFACE_QUANTITIES)
                       if any(FOLDERS[f][0] == q for f in folders))  # fmt: skip
    return _Plan(segs, folders, lvls if has_pressure else (), computed, quantities, int(spin_up_days),
                 float(delta_t_y), float(delta_theta_z), resolution, dt, out_h, int(seed))  # fmt: skip


# ------------------------------------------------------------------------------------------------------------------
# the model (jax / dinosaur from here on)
# ------------------------------------------------------------------------------------------------------------------
def _jax_on_cpu():
    """jax, restricted to the CPU (set before jax's first import; a no-op for an already started backend)."""
    import sys

    if "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"
    with requires("climax"):
        import jax

    try:
        jax.config.update("jax_platforms", "cpu")
    except Exception:  # pragma: no cover - an older jax or a backend already running; default_device still applies
        pass
    return jax


@dataclass(frozen=True)
class _Model:
    """A compiled model: ``initial_state(seed)`` and ``day(state) -> (state a day later, frames)``, where ``frames``
    is ``{quantity: (outputs_per_day, n_levels, 32, 64)}`` in SI units on the WeatherBench grid, the first frame
    being the input state."""

    initial_state: Callable[[int], Any]
    day: Callable[[Any], tuple[Any, dict[str, Any]]]
    device: Any


@functools.lru_cache(maxsize=4)
def _model(resolution: str, dt_minutes: int, output_hours: int, delta_t_y: float, delta_theta_z: float,
           levels_hpa: tuple[int, ...], quantities: tuple[str, ...]) -> _Model:  # fmt: skip
    """Build and compile the Held–Suarez model (cached: a second run with the same settings does not recompile)."""
    jax = _jax_on_cpu()
    with requires("climax"):
        import jax.numpy as jnp
        from dinosaur import (coordinate_systems, held_suarez, horizontal_interpolation, primitive_equations,
                              primitive_equations_states, scales, sigma_coordinates, spherical_harmonic,
                              time_integration, vertical_interpolation, xarray_utils)  # fmt: skip

    units = scales.units
    device = jax.devices("cpu")[0]
    grid = getattr(spherical_harmonic.Grid, resolution)()
    coords = coordinate_systems.CoordinateSystem(grid, sigma_coordinates.SigmaCoordinates.equidistant(SIGMA_LAYERS))
    specs = primitive_equations.PrimitiveEquationsSpecs.from_si()
    rest_state_fn, aux = primitive_equations_states.isothermal_rest_atmosphere(
        coords, specs, tref=_REFERENCE_TEMPERATURE_K * units.degK, p0=_SURFACE_PRESSURE_PA * units.pascal
    )
    ref_temps = aux[xarray_utils.REF_TEMP_KEY]
    orography = primitive_equations.truncated_modal_orography(aux[xarray_utils.OROGRAPHY], coords)
    dynamics = primitive_equations.PrimitiveEquations(ref_temps, orography, coords, specs)
    forcing = held_suarez.HeldSuarezForcingSigma(
        coords, specs, ref_temps, p0=_SURFACE_PRESSURE_PA * units.pascal,
        dTy=delta_t_y * units.degK, dThz=delta_theta_z * units.degK,
    )  # fmt: skip
    dt = specs.nondimensionalize(dt_minutes * units.minute)
    step = time_integration.imex_rk_sil3(time_integration.compose_equations([dynamics, forcing]), dt)
    step = time_integration.step_with_filters(step, [time_integration.exponential_step_filter(grid, dt, **_FILTER)])

    # The WeatherBench grid as a dinosaur grid: equiangular latitudes without poles (= era5.LAT), lon 0, 5.625 ...
    target = spherical_harmonic.Grid(longitude_nodes=era5.LON.size, latitude_nodes=era5.LAT.size,
                                     latitude_spacing="equiangular")  # fmt: skip
    if not (np.allclose(np.asarray(target.latitudes), np.deg2rad(era5.LAT))
            and np.allclose(np.asarray(target.longitudes), np.deg2rad(era5.LON))):  # fmt: skip
        raise RuntimeError("dinosaur's equiangular 32 x 64 grid is not WeatherBench's 5.625° grid")
    # NOTE[DIFF]: bilinear regridding from the model's Gaussian grid (at T21 its latitudes end at ±85.8°: the
    # outermost rows ±87.19° copy the nearest model row); ERA5's 5.625° files were conservatively coarsened.
    regrid = horizontal_interpolation.BilinearRegridder(grid, target)
    # NOTE[DIFF]: pressure levels are interpolated linearly in pressure from the 10 sigma levels (dinosaur's
    # interp_sigma_to_pressure); ERA5's pressure-level fields come from a 137-level model.
    pressure = vertical_interpolation.PressureCoordinates(
        np.asarray([specs.nondimensionalize(lv * 100.0 * units.pascal) for lv in levels_hpa])
    )
    si_units = {"z": units.m**2 / units.s**2, "t": units.degK, "u": units.m / units.s, "v": units.m / units.s,
                "t2m": units.degK}  # fmt: skip
    si = {q: float(specs.dimensionalize(1.0, si_units[q]).magnitude) for q in quantities}  # nondimensional -> SI
    nodal_orography = grid.to_nodal(orography)

    def diagnose(state):
        fields, surface = {}, {}
        if {"z", "t", "t2m"} & set(quantities):
            temperature = grid.to_nodal(state.temperature_variation) + ref_temps[:, np.newaxis, np.newaxis]
            if "z" in quantities:
                fields["z"] = primitive_equations.get_geopotential_on_sigma(
                    temperature, nodal_orography=nodal_orography, sigma=coords.vertical,
                    gravity_acceleration=specs.gravity_acceleration, ideal_gas_constant=specs.ideal_gas_constant,
                )  # fmt: skip
            if "t" in quantities:
                fields["t"] = temperature
            if "t2m" in quantities:  # the lowest sigma level, (1, lon, lat)
                surface["t2m"] = temperature[-1:]
        if "u" in quantities or "v" in quantities:
            u, v = spherical_harmonic.vor_div_to_uv_nodal(grid, state.vorticity, state.divergence)
            fields.update({k: x for k, x in (("u", u), ("v", v)) if k in quantities})
        surface_pressure = jnp.exp(grid.to_nodal(state.log_surface_pressure))
        on_levels = vertical_interpolation.interp_sigma_to_pressure(fields, pressure, coords.vertical,
                                                                    surface_pressure) if fields else {}  # fmt: skip
        on_levels.update(surface)
        # dinosaur's nodal order is (level, lon, lat); WeatherBench's (level, lat, lon)
        return {q: jnp.swapaxes(regrid(on_levels[q]), -1, -2) * si[q] for q in quantities}

    day = time_integration.trajectory_from_step(step, outer_steps=24 // output_hours,
                                                inner_steps=output_hours * 60 // dt_minutes,
                                                start_with_input=True, post_process_fn=diagnose)  # fmt: skip
    perturbation = specs.nondimensionalize(_PERTURBATION_K * units.degK)

    def initial_state(seed: int):
        """The rest state plus white noise (std _PERTURBATION_K) in the nodal temperature of every level."""
        state = rest_state_fn(jax.random.PRNGKey(0))  # p1 = 0: the key is unused, the rest state is exact
        noise = perturbation * jax.random.normal(jax.random.PRNGKey(seed), coords.nodal_shape)
        state.temperature_variation = state.temperature_variation + grid.to_modal(noise)
        return state

    with jax.default_device(device):
        compiled = jax.jit(day).lower(initial_state(0)).compile()
    return _Model(initial_state, compiled, device)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("dinosaur", "jax", "jaxlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "unknown"
    return out


# ------------------------------------------------------------------------------------------------------------------
# public
# ------------------------------------------------------------------------------------------------------------------
def generate_held_suarez(
    root: str | os.PathLike,
    *,
    segments: Mapping[int, int],
    variables: Sequence[str],
    levels: Sequence[int],
    spin_up_days: int,
    delta_t_y: float = 60.0,
    delta_theta_z: float = 10.0,
    resolution: str = "T21",
    dt_minutes: int = 20,
    output_hours: int = 6,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Simulate one Held–Suarez aquaplanet run and write it under ``root`` in the WeatherBench 5.625° layout.

    ``segments``: ``{year: n_days}`` in run order (years strictly increasing, ``n_days`` >= 1 and within the year):
    after ``spin_up_days`` (>= 0, not written) the run continues and each segment's days are written as that year's
    files, times ``<year>-01-01T00:00`` + k * ``output_hours`` (``n_days * 24 / output_hours`` steps; the first is
    the state at the segment's start). ``variables``: folders of :data:`FOLDERS` (pressure-level folders get
    ``levels``, hPa among :data:`stochattn.data.era5.PRESSURE_LEVELS`, written in ascending order; the extracts
    geopotential_500 / temperature_850 their own level). Units as ERA5: z in m²/s², t in K, u/v in m/s.
    ``delta_t_y`` / ``delta_theta_z``: Held–Suarez's equator-pole temperature difference and static stability (K)
    of the radiative equilibrium (60 / 10 in the paper): other values give another climate. ``resolution``: one of
    :data:`RESOLUTIONS`; ``dt_minutes``: model time step; ``output_hours``: output interval (divides 24, a
    multiple of the time step); ``seed``: the seeded perturbation of the rest state (deterministic per seed).

    Also writes ``constants/constants_5.625deg.nc`` (orography, lsm, slt all 0) and, last, the manifest
    ``root/standin.json`` (returned as a dict: "parameters", "versions", "seconds" {compile (build + compile; ~0
    when this process compiled the same model before), spin_up, output (incl. writing), total}, "steps" per year,
    "files" relative to ``root``). Every argument is checked first (ValueError, nothing written).
    Raises RuntimeError if the integration becomes non-finite (files of finished segments remain, no manifest).
    """
    plan = _plan(segments, variables, levels, spin_up_days, delta_t_y, delta_theta_z, resolution, dt_minutes,
                 output_hours, seed)  # fmt: skip
    root = Path(root)
    (root / MANIFEST).unlink(missing_ok=True)  # the manifest marks a complete run: not while files are rewritten
    jax = _jax_on_cpu()
    wall = time.perf_counter()
    model = _model(plan.resolution, plan.dt_minutes, plan.output_hours, plan.delta_t_y, plan.delta_theta_z,
                   plan.computed_levels, plan.quantities)  # fmt: skip
    compile_seconds = time.perf_counter() - wall  # ~0 when an earlier run in this process compiled the same model
    n_out = plan.outputs_per_day
    segment_days = dict(plan.segments)
    total_days = plan.spin_up_days + sum(d for _, d in plan.segments)
    # each entry: (year or None for spin-up, day index within it)
    schedule = [(None, d) for d in range(plan.spin_up_days)]
    schedule += [(year, d) for year, days in plan.segments for d in range(days)]
    seconds = {"spin_up": 0.0, "output": 0.0}
    steps: dict[int, int] = {}
    files: list[str] = []
    buffers: dict[str, np.ndarray] = {}

    with jax.default_device(model.device):
        state = model.initial_state(plan.seed)
        bar = show_progress(schedule, desc="held-suarez", total=total_days, unit="day", disable=not progress)
        for year, d in bar:
            start = time.perf_counter()
            if d == 0:
                bar.set_postfix(phase="spin-up" if year is None else year)
                if year is not None:
                    n_t = segment_days[year] * n_out
                    buffers = {q: np.empty((n_t, 1 if q in _SURFACE_QUANTITIES else len(plan.computed_levels),
                                            era5.LAT.size, era5.LON.size),
                                           dtype=np.float32) for q in plan.quantities}  # fmt: skip
            state, frames = model.day(state)
            frames = {q: np.asarray(x) for q, x in frames.items()}
            bad = [q for q, x in frames.items() if not np.all(np.isfinite(x))]
            if bad:
                where = "spin-up" if year is None else f"year {year}"
                raise RuntimeError(
                    f"the simulation became non-finite ({bad}) on day {d + 1} of {where}; "
                    f"try a smaller dt_minutes (now {plan.dt_minutes})"
                )
            if year is not None:
                for q, x in frames.items():
                    buffers[q][d * n_out : (d + 1) * n_out] = x
            seconds["spin_up" if year is None else "output"] += time.perf_counter() - start
            if year is not None and d + 1 == segment_days[year]:
                start = time.perf_counter()
                files += _write_year(root, year, plan, buffers)
                steps[year] = int(next(iter(buffers.values())).shape[0])
                buffers = {}
                seconds["output"] += time.perf_counter() - start
        bar.close()

    const_path = era5.write_weatherbench_constants(
        root / "constants" / "constants_5.625deg.nc",
        {name: np.zeros((era5.LAT.size, era5.LON.size)) for name in ("orography", "lsm", "slt")},
    )
    files.append(const_path.relative_to(root).as_posix())
    manifest = {
        "what": "Held-Suarez aquaplanet (dinosaur dynamical core): a stand-in for WeatherBench ERA5, NOT ERA5 "
                "(no seasons, diurnal cycle, orography, land or moisture)",
        "parameters": {
            "segments": {str(y): d for y, d in plan.segments},
            "variables": list(plan.folders),
            "levels": list(plan.levels),
            "spin_up_days": plan.spin_up_days,
            "delta_t_y": plan.delta_t_y,
            "delta_theta_z": plan.delta_theta_z,
            "resolution": plan.resolution,
            "sigma_layers": SIGMA_LAYERS,
            "dt_minutes": plan.dt_minutes,
            "output_hours": plan.output_hours,
            "seed": plan.seed,
            "perturbation_K": _PERTURBATION_K,
            "filter": dict(_FILTER),
        },
        "versions": _versions(),
        "seconds": {"compile": round(compile_seconds, 3), "spin_up": round(seconds["spin_up"], 3),
                    "output": round(seconds["output"], 3), "total": round(time.perf_counter() - wall, 3)},
        "steps": {str(y): n for y, n in steps.items()},
        "files": files,
    }  # fmt: skip
    save_json(root / MANIFEST, manifest)
    return manifest


def _write_year(root: Path, year: int, plan: _Plan, buffers: Mapping[str, np.ndarray]) -> list[str]:
    """Write one segment's files; ``buffers``: ``{quantity: (T, n_computed_levels, 32, 64)}``. Relative paths."""
    n_t = next(iter(buffers.values())).shape[0]
    # NOTE[DIFF]: a "year" is a short consecutive chunk of one run labelled with a calendar year (from Jan 1, every
    # output_hours), not a calendar year of weather: ClimaX partitions (train/val/test) and shards by year.
    times = np.datetime64(f"{year:04d}-01-01T00:00") + np.arange(n_t) * np.timedelta64(plan.output_hours, "h")
    written = []
    for folder in plan.folders:
        quantity, fixed = FOLDERS[folder]
        short, _ = era5.WEATHERBENCH_VARIABLES[folder]
        path = era5.weatherbench_path(root, folder, year)
        if quantity in _SURFACE_QUANTITIES:
            era5.write_weatherbench_file(path, folder, short, buffers[quantity][:, 0], times)
        elif fixed is None:
            idx = [plan.computed_levels.index(lv) for lv in plan.levels]
            era5.write_weatherbench_file(path, folder, short, buffers[quantity][:, idx], times, levels=plan.levels)
        else:
            era5.write_weatherbench_file(path, folder, short, buffers[quantity][:, plan.computed_levels.index(fixed)],
                                         times)  # fmt: skip
        written.append(path.relative_to(root).as_posix())
    return written


def persistence_and_climatology_rmse(
    root: str | os.PathLike,
    years: Iterable[int],
    lead_hours: int = 72,
    folder: str = "geopotential",
    level: int = 500,
) -> dict[str, Any]:
    """Latitude-weighted RMSE of persistence and of climatology for one field of the written data.

    For every (t, t + lead) pair inside each year's file (pairs never cross a year), persistence forecasts the
    field at t + lead by the field at t; climatology by the time mean over all steps of ``years``. Both are scored
    on the same targets with :func:`stochattn.metrics.lat_weighted_rmse` (per-field RMSE averaged over pairs).
    ``folder``/``level``: a pressure-level folder and its level (hPa), or a single-level folder (``level`` must
    then be its own level, for the extracts geopotential_500 / temperature_850).

    Returns ``{"persistence", "climatology", "ratio" (persistence / climatology), "n_pairs", "lead_steps",
    "step_hours", "years", "folder", "level"}``; RMSEs in the field's units (m²/s² for z).
    """
    years = [int(y) for y in years]
    if not years:
        raise ValueError("years is empty")
    if folder not in era5.WEATHERBENCH_VARIABLES:
        raise ValueError(f"unknown WeatherBench folder {folder!r}")
    _, pressure = era5.WEATHERBENCH_VARIABLES[folder]
    fixed = FOLDERS.get(folder, (None, None))[1]
    if not pressure and fixed is not None and int(level) != fixed:
        raise ValueError(f"{folder!r} holds level {fixed} hPa only, got level={level}")
    fields = []
    step_hours = None
    for year in years:
        da = era5.open_weatherbench(root, folder, [year], levels=[int(level)] if pressure else None)
        x = np.asarray(da.values, dtype=np.float64)
        fields.append(x[:, 0] if pressure else x)  # (T, 32, 64)
        h = era5.time_step_hours(da)
        if step_hours not in (None, h):
            raise ValueError(f"years have different time steps ({step_hours} h and {h} h)")
        step_hours = h
    lead = era5.lead_steps(lead_hours, step_hours)
    inputs = [x[:-lead] for x in fields if x.shape[0] > lead]
    targets = [x[lead:] for x in fields if x.shape[0] > lead]
    if not targets:
        raise ValueError(f"no (t, t + {lead_hours} h) pair inside any of the years {years}")
    inp, tgt = np.concatenate(inputs), np.concatenate(targets)
    climatology = np.concatenate(fields).mean(axis=0)
    persistence = lat_weighted_rmse(inp, tgt, era5.LAT)
    clim = lat_weighted_rmse(np.broadcast_to(climatology, tgt.shape), tgt, era5.LAT)
    return {"persistence": persistence, "climatology": clim, "ratio": persistence / clim,
            "n_pairs": int(tgt.shape[0]), "lead_steps": lead, "step_hours": step_hours, "years": years,
            "folder": folder, "level": int(level)}  # fmt: skip
