"""Tests for stochattn.data.aquaplanet: a tiny Held–Suarez run written in the WeatherBench layout and read back by
era5.open_weatherbench (plausible values, 6-hourly times from each segment's Jan 1, deterministic per seed,
different across seeds, manifest last), arguments checked before anything is simulated or written, and the
persistence / climatology RMSE against a hand computation."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from stochattn.data import aquaplanet as A
from stochattn.data import era5 as E
from stochattn.io import load_json

needs_dinosaur = pytest.mark.skipif(importlib.util.find_spec("dinosaur") is None, reason="dinosaur not installed")

TINY = {
    "segments": {2001: 1, 2002: 1},
    "variables": ["geopotential", "temperature", "geopotential_500", "2m_temperature"],
    "levels": (500, 850),
    "spin_up_days": 1,
    "progress": False,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One tiny run (seed 0): ``(root, manifest)``. The model compiles once (~5 s); later runs with the same
    settings reuse it."""
    root = tmp_path_factory.mktemp("standin")
    return root, A.generate_held_suarez(root, **TINY)


def read(root, folder, year, levels=None):
    return E.open_weatherbench(root, folder, [year], levels=levels)


@needs_dinosaur
def test_tiny_run_reads_back_in_weatherbench_layout(tiny):
    root, manifest = tiny
    for year in (2001, 2002):
        z = read(root, "geopotential", year)
        t = read(root, "temperature", year)
        z500 = read(root, "geopotential_500", year)
        expected = np.datetime64(f"{year}-01-01T00") + np.arange(4) * np.timedelta64(6, "h")
        for da in (z, t, z500):
            np.testing.assert_array_equal(da["time"].values, expected.astype("datetime64[ns]"))
        assert z.shape == t.shape == (4, 2, 32, 64)
        assert z500.shape == (4, 32, 64)
        assert list(z["level"].values) == [500, 850]
        np.testing.assert_array_equal(z500.values, z.sel(level=500).values)
        assert 45_000 < float(z.sel(level=500).min()) and float(z.sel(level=500).max()) < 60_000
        assert 150 < float(t.sel(level=850).min()) and float(t.sel(level=850).max()) < 330
        assert z.attrs["units"] == "m**2 s**-2"
        # the stand-in's T2m: temperature of the lowest model level (~950 hPa), below 850 hPa: warmer on average
        # (after one day from the isothermal rest state the lapse rate has only begun: ~1 K)
        t2m = read(root, "2m_temperature", year)
        assert t2m.name == "t2m" and t2m.shape == (4, 32, 64)
        assert 0.2 < float((t2m - t.sel(level=850)).mean()) < 30.0
    # the two segments are one run: 2002 continues 2001 (not a fresh start)
    assert not np.array_equal(read(root, "geopotential", 2001).values[0], read(root, "geopotential", 2002).values[0])
    const = E.open_weatherbench_constants(root)
    for name in ("orography", "lsm", "slt"):
        assert np.all(const[name] == 0)
    assert load_json(root / A.MANIFEST) == manifest
    assert manifest["steps"] == {"2001": 4, "2002": 4}
    assert manifest["parameters"]["delta_t_y"] == 60.0 and manifest["parameters"]["levels"] == [500, 850]
    assert set(manifest["versions"]) == {"dinosaur", "jax", "jaxlib"}
    assert "NOT ERA5" in manifest["what"]
    assert sorted(manifest["files"]) == sorted(p.relative_to(root).as_posix() for p in root.rglob("*.nc"))


@needs_dinosaur
def test_deterministic_per_seed_and_different_across_seeds(tiny, tmp_path):
    root, _ = tiny
    A.generate_held_suarez(tmp_path / "same", **TINY)
    A.generate_held_suarez(tmp_path / "other", **{**TINY, "seed": 1})
    for year in (2001, 2002):
        ref = read(root, "geopotential", year).values
        np.testing.assert_array_equal(read(tmp_path / "same", "geopotential", year).values, ref)
        other = read(tmp_path / "other", "geopotential", year).values
        assert np.abs(other - ref).max() > 1.0  # m²/s²: a 0.1 K perturbation after one day of spin-up


BAD = [
    ({"variables": ["geopotential", "10m_u_component_of_wind"]}, "unknown or unsupported folder"),
    ({"variables": ["relative_humidity"]}, "unknown or unsupported folder"),
    ({"variables": []}, "variables is empty"),
    ({"levels": (500, 875)}, "875"),
    ({"levels": ()}, "levels is empty"),
    ({"segments": {}}, "non-empty mapping"),
    ({"segments": {2001: 0}}, "positive int"),
    ({"segments": {2001: 366}}, "does not fit"),
    ({"segments": {2002: 1, 2001: 1}}, "strictly increasing"),
    ({"spin_up_days": -1}, "spin_up_days"),
    ({"output_hours": 5}, "divide 24"),
    ({"dt_minutes": 25}, "not a multiple of dt_minutes"),
    ({"resolution": "T63"}, "resolution"),
    ({"delta_t_y": float("nan")}, "delta_t_y"),
    ({"seed": -1}, "seed"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m for _, m in BAD])
def test_bad_arguments_raise_before_anything_is_written(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        A.generate_held_suarez(tmp_path, **{**TINY, **change})
    assert list(tmp_path.iterdir()) == []


def test_imports_without_jax():
    code = "import sys, stochattn.data.aquaplanet; assert 'jax' not in sys.modules and 'dinosaur' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_persistence_and_climatology_rmse_by_hand(tmp_path):
    rng = np.random.default_rng(0)
    levels = (500, 850)
    data = {}
    for year, n in ((2001, 7), (2002, 5)):
        times = np.datetime64(f"{year}-01-01T00") + np.arange(n) * np.timedelta64(6, "h")
        data[year] = (5e4 + 100 * rng.normal(size=(n, 2, 32, 64))).astype(np.float32)
        E.write_weatherbench_file(E.weatherbench_path(tmp_path, "geopotential", year), "geopotential", "z",
                                  data[year], times, levels=levels)  # fmt: skip
    out = A.persistence_and_climatology_rmse(tmp_path, [2001, 2002], lead_hours=12)

    w = np.cos(np.deg2rad(E.LAT))
    w = (w / w.mean())[:, None]

    def rmse(pred, truth):  # per-field latitude-weighted RMSE, averaged over fields
        return np.mean([np.sqrt(np.mean(w * (p - t) ** 2)) for p, t in zip(pred, truth)])

    z = {y: data[y][:, 0].astype(np.float64) for y in data}
    inputs = np.concatenate([z[2001][:-2], z[2002][:-2]])
    targets = np.concatenate([z[2001][2:], z[2002][2:]])
    clim = np.concatenate([z[2001], z[2002]]).mean(axis=0)
    assert out["n_pairs"] == 5 + 3 and out["lead_steps"] == 2 and out["step_hours"] == 6
    assert out["persistence"] == pytest.approx(rmse(inputs, targets), rel=1e-9)
    assert out["climatology"] == pytest.approx(rmse([clim] * len(targets), targets), rel=1e-9)
    assert out["ratio"] == pytest.approx(out["persistence"] / out["climatology"])

    with pytest.raises(ValueError, match="no \\(t, t \\+ 72 h\\) pair"):
        A.persistence_and_climatology_rmse(tmp_path, [2002], lead_hours=72)
    with pytest.raises(ValueError, match="not a multiple"):
        A.persistence_and_climatology_rmse(tmp_path, [2001], lead_hours=8)
