"""Tests for stochattn.data.era5: WeatherBench 5.625° files written in the public layout and read back (grid,
variable, time axis checked; clear errors naming the file), lead times in steps of the data, ClimaX's preprocessing
into npz shards with training-only normalisation, and forecast pairs that never cross a shard."""

import io
import zipfile

import netCDF4
import numpy as np
import pytest
import xarray as xr

from stochattn.data import era5 as E

STEP = np.timedelta64(6, "h")


def times_of(start: str, n: int) -> np.ndarray:
    return np.datetime64(start) + np.arange(n) * STEP


def field(rng, *shape, offset=0.0):
    return (offset + rng.normal(size=(*shape, 32, 64))).astype(np.float32)


@pytest.fixture
def two_years(tmp_path):
    """geopotential (13 levels), geopotential_500 and 2m_temperature for 2000 (last 3 steps) and 2001 (first 3
    steps): one contiguous 6-hourly series across the year boundary."""
    rng = np.random.default_rng(0)
    root = tmp_path / "5.625deg"
    data = {}
    for year, start in ((2000, "2000-12-31T06"), (2001, "2001-01-01T00")):
        t = times_of(start, 3)
        z = field(rng, 3, 13, offset=5e4)
        t2m = field(rng, 3, offset=280.0)
        E.write_weatherbench_file(E.weatherbench_path(root, "geopotential", year), "geopotential", "z", z, t,
                                  levels=E.PRESSURE_LEVELS)  # fmt: skip
        E.write_weatherbench_file(E.weatherbench_path(root, "geopotential_500", year), "geopotential_500", "z",
                                  z[:, E.PRESSURE_LEVELS.index(500)], t)  # fmt: skip
        E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", year), "2m_temperature", "t2m", t2m, t)
        data[year] = {"t": t, "z": z, "t2m": t2m}
    return root, data


def test_grid_and_paths():
    assert E.LAT.shape == (32,) and E.LON.shape == (64,)
    assert E.LAT[0] == -87.1875 and E.LAT[-1] == 87.1875 and E.LON[0] == 0.0 and E.LON[-1] == 354.375
    assert E.weatherbench_path("/r", "2m_temperature", 1979).as_posix() == (
        "/r/2m_temperature/2m_temperature_1979_5.625deg.nc"
    )
    assert E.weatherbench_path("/r", "geopotential_500", 2017).as_posix() == (
        "/r/geopotential_500/geopotential_500hPa_2017_5.625deg.nc"
    )
    assert E.weatherbench_url("geopotential_500") == (
        "https://dataserv.ub.tum.de/s/m1524895/download?path=%2F5.625deg%2Fgeopotential_500"
        "&files=geopotential_500_5.625deg.zip"
    )
    with pytest.raises(ValueError, match="unknown WeatherBench folder 'z500'"):
        E.weatherbench_path("/r", "z500", 2000)


def test_written_file_has_the_public_layout(two_years):
    root, _ = two_years
    with netCDF4.Dataset(E.weatherbench_path(root, "geopotential", 2000)) as nc:
        assert nc["z"].dimensions == ("time", "level", "lat", "lon")
        assert nc["z"].dtype == np.float32 and nc["z"].units == "m**2 s**-2"
        assert nc["lat"].dtype == np.float64 and nc["lon"].dtype == np.float64
        assert nc["level"].dtype == np.int32 and list(nc["level"][:]) == list(E.PRESSURE_LEVELS)
        assert nc["time"].dtype == np.int32 and nc["time"].units.startswith("hours since 1900-01-01")
        assert nc.Conventions == "CF-1.6"
    with netCDF4.Dataset(E.weatherbench_path(root, "geopotential_500", 2000)) as nc:
        assert nc["z"].dimensions == ("time", "lat", "lon")
        assert nc["level"].dimensions == () and int(nc["level"][...]) == 500


def test_open_reads_back_two_years(two_years):
    root, data = two_years
    da = E.open_weatherbench(root, "geopotential", [2000, 2001], levels=[500, 850])
    assert da.dims == ("time", "level", "lat", "lon") and da.dtype == np.float32 and da.shape == (6, 2, 32, 64)
    np.testing.assert_array_equal(da["level"].values, [500, 850])
    np.testing.assert_array_equal(da["lat"].values, E.LAT)
    np.testing.assert_array_equal(da["time"].values, np.concatenate([data[2000]["t"], data[2001]["t"]]))
    i500, i850 = E.PRESSURE_LEVELS.index(500), E.PRESSURE_LEVELS.index(850)
    np.testing.assert_array_equal(da.values[:3], data[2000]["z"][:, [i500, i850]])
    z500 = E.open_weatherbench(root, "geopotential_500", [2000, 2001])
    assert z500.dims == ("time", "lat", "lon")
    np.testing.assert_array_equal(z500.values, da.sel(level=500).values)
    assert E.time_step_hours(z500) == 6
    assert E.lead_steps(72, E.time_step_hours(z500)) == 12
    assert E.lead_steps(72, 1) == 72


def test_lead_time_not_a_multiple_of_the_step():
    with pytest.raises(ValueError, match="lead time 3 h is not a multiple of the data's time step 6 h"):
        E.lead_steps(3, 6)
    with pytest.raises(ValueError, match="not a multiple"):
        E.lead_steps(72, 5)
    with pytest.raises(ValueError, match="positive"):
        E.lead_steps(0, 6)


def test_missing_variable_names_file_and_variables_found(two_years):
    root, data = two_years
    path = E.weatherbench_path(root, "2m_temperature", 2002)
    # a geopotential_500 file under the 2m_temperature name
    E.write_weatherbench_file(path, "geopotential_500", "z", data[2000]["z"][:, 7], times_of("2002-01-01", 3))
    with pytest.raises(E.WeatherBenchFormatError, match=r"no variable 't2m'.*variables found: \['z'\]") as err:
        E.open_weatherbench(root, "2m_temperature", [2002])
    assert str(path) in str(err.value)


def test_wrong_grid_is_refused_with_the_values_found(tmp_path):
    path = E.weatherbench_path(tmp_path, "2m_temperature", 2000)
    lat = np.arange(-90.0, 90.1, 5.625)  # 33 edges instead of 32 centres
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), np.zeros((2, lat.size, 64), np.float32))},
                    coords={"time": times_of("2000-01-01", 2), "lat": lat, "lon": E.LON.copy()})  # fmt: skip
    path.parent.mkdir(parents=True)
    ds.to_netcdf(path)
    with pytest.raises(E.WeatherBenchFormatError, match=r"lat has 33 values \[-90\.") as err:
        E.open_weatherbench(tmp_path, "2m_temperature", [2000])
    assert str(path) in str(err.value) and "32 values" in str(err.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_file_names_the_file(two_years, damage):
    root, _ = two_years
    path = E.weatherbench_path(root, "2m_temperature", 2001)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else b"not a netcdf file" * 100)
    with pytest.raises(E.WeatherBenchFormatError, match="truncated or corrupt") as err:
        E.open_weatherbench(root, "2m_temperature", [2000, 2001])
    assert str(path) in str(err.value)


def test_missing_file_level_and_time_errors(two_years):
    root, data = two_years
    with pytest.raises(FileNotFoundError, match="2m_temperature_1999_5.625deg.nc"):
        E.open_weatherbench(root, "2m_temperature", [1999])
    with pytest.raises(E.WeatherBenchFormatError, match=r"level\(s\) \[775\] not in the file"):
        E.open_weatherbench(root, "geopotential", [2000], levels=[500, 775])
    # a gap between the two years' files
    E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", 2001), "2m_temperature", "t2m",
                              data[2001]["t2m"], times_of("2001-01-01T06", 3))  # fmt: skip
    with pytest.raises(E.WeatherBenchFormatError, match="not evenly spaced"):
        E.open_weatherbench(root, "2m_temperature", [2000, 2001])
    # times outside the file's year
    E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", 2003), "2m_temperature", "t2m",
                              data[2001]["t2m"], times_of("2001-01-01T06", 3))  # fmt: skip
    with pytest.raises(E.WeatherBenchFormatError, match="file of year 2003 holds time 2001"):
        E.open_weatherbench(root, "2m_temperature", [2003])
    with pytest.raises(ValueError, match="strictly increasing"):
        E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", 2004), "2m_temperature", "t2m",
                                  data[2001]["t2m"], times_of("2004-01-01", 3)[::-1])  # fmt: skip


# ------------------------------------------------------------------------------------------------------------------
# ClimaX preprocessing
# ------------------------------------------------------------------------------------------------------------------
YEARS = {"train": [2000, 2001], "val": [2002], "test": [2003]}
OFFSET = {2000: 0.0, 2001: 10.0, 2002: 1000.0, 2003: -1000.0}  # val/test far off: any leakage shows


@pytest.fixture
def climax_root(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "5.625deg"
    data = {}
    for year in (2000, 2001, 2002, 2003):
        t = times_of(f"{year}-01-01", 4)
        z = field(rng, 4, 13, offset=OFFSET[year])
        t2m = field(rng, 4, offset=OFFSET[year] + 5.0)
        E.write_weatherbench_file(E.weatherbench_path(root, "geopotential", year), "geopotential", "z", z, t,
                                  levels=E.PRESSURE_LEVELS)  # fmt: skip
        E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", year), "2m_temperature", "t2m", t2m, t)
        data[year] = {"geopotential_500": z[:, 7:8], "geopotential_850": z[:, 10:11], "2m_temperature": t2m[:, None]}
    const = {"orography": rng.normal(size=(32, 64)), "lsm": rng.uniform(size=(32, 64)), "slt": np.ones((32, 64))}
    E.write_weatherbench_constants(root / "constants" / "constants_5.625deg.nc", const)
    return root, data, const


def test_preprocess_writes_climax_layout(climax_root, tmp_path):
    root, data, const = climax_root
    out = tmp_path / "npz"
    log = io.StringIO()
    manifest = E.preprocess_climax(root, out, ["geopotential", "2m_temperature"], YEARS, num_shards=2,
                                   levels=[500, 850], progress_file=log)  # fmt: skip
    keys = ["geopotential_500", "geopotential_850", "2m_temperature"]
    assert manifest["keys"] == keys and manifest["step_hours"] == 6 and manifest["shard_len"] == 2
    assert "climax preprocessing" in log.getvalue()
    for part, years in YEARS.items():
        assert [p.name for p in E.shard_paths(out, part)] == [f"{y}_{s}.npz" for y in years for s in (0, 1)]
    shard = E.load_shard(out / "train" / "2001_1.npz")
    assert list(shard) == ["land_sea_mask", "orography", "lattitude", *keys]
    for k in keys:
        assert shard[k].shape == (2, 1, 32, 64) and shard[k].dtype == np.float32
        np.testing.assert_array_equal(shard[k], data[2001][k][2:4])
    np.testing.assert_allclose(shard["land_sea_mask"][1, 0], const["lsm"], rtol=1e-6)
    np.testing.assert_allclose(shard["lattitude"][0, 0], np.broadcast_to(E.LAT[:, None], (32, 64)))
    # normalisation: the training years only (pooled over time and space), constants: spatial statistics
    mean, std = E.load_normalisation(out)
    for k in keys:
        train = np.concatenate([data[y][k] for y in YEARS["train"]]).astype(np.float64)
        assert mean[k].shape == (1,) and std[k].shape == (1,)
        np.testing.assert_allclose(mean[k], [train.mean()], rtol=1e-10)
        np.testing.assert_allclose(std[k], [train.std()], rtol=1e-9)
        assert abs(mean[k][0]) < 100  # val (+1000) and test (-1000) would drag it far off
    np.testing.assert_allclose(mean["orography"], [const["orography"].astype(np.float32).mean()], rtol=1e-6)
    # climatology per partition: the time mean of that partition's years
    for part, years in YEARS.items():
        clim = E.load_climatology(out, part)
        assert sorted(clim) == sorted(keys)
        for k in keys:
            expected = np.concatenate([data[y][k] for y in years]).astype(np.float64).mean(axis=0)
            assert clim[k].shape == (1, 32, 64)
            np.testing.assert_allclose(clim[k], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.load(out / "lat.npy"), E.LAT)
    np.testing.assert_array_equal(np.load(out / "lon.npy"), E.LON)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_preprocess_argument_errors(climax_root, tmp_path):
    root, _, _ = climax_root
    out = tmp_path / "npz"
    with pytest.raises(ValueError, match=r"not divisible into num_shards=3 .* among \[1, 2, 4\]"):
        E.preprocess_climax(root, out, ["2m_temperature"], YEARS, num_shards=3)
    with pytest.raises(ValueError, match="year 2001 is in both 'train' and 'test'"):
        E.preprocess_climax(root, out, ["2m_temperature"], {"train": [2000, 2001], "test": [2001]})
    with pytest.raises(ValueError, match="needs a 'train' partition"):
        E.preprocess_climax(root, out, ["2m_temperature"], {"test": [2003]})
    # a constants file without lsm (ClimaX's land_sea_mask)
    xr.Dataset({"orography": (("lat", "lon"), np.zeros((32, 64), np.float32))},
               coords={"lat": E.LAT.copy(), "lon": E.LON.copy()}).to_netcdf(root / "constants.nc")  # fmt: skip
    (root / "constants" / "constants_5.625deg.nc").unlink()
    assert E.constants_path(root) == root / "constants.nc"  # ClimaX's name, used when WeatherBench's is absent
    with pytest.raises(E.WeatherBenchFormatError, match=r"constants.nc: no constant field 'lsm'"):
        E.preprocess_climax(root, out, ["2m_temperature"], YEARS, num_shards=2)


def test_preprocess_drops_the_last_day_of_a_leap_year(tmp_path):
    root = tmp_path / "5.625deg"
    t = times_of("2000-01-01", 366 * 4)  # 6-hourly leap year
    values = np.broadcast_to(np.arange(t.size, dtype=np.float32)[:, None, None], (t.size, 32, 64))
    E.write_weatherbench_file(E.weatherbench_path(root, "2m_temperature", 2000), "2m_temperature", "t2m", values, t)
    out = tmp_path / "npz"
    m = E.preprocess_climax(root, out, ["2m_temperature"], {"train": [2000]}, num_shards=4, constants={},
                            progress_file=io.StringIO())  # fmt: skip
    assert m["shard_len"] == 365  # 1460 = 8760 h / 6 h steps, in 4 shards
    shards = E.load_shards(out, "train")
    assert len(shards) == 4 and list(shards[0]) == ["2m_temperature"]
    assert shards[-1]["2m_temperature"][-1, 0, 0, 0] == 1459.0


# ------------------------------------------------------------------------------------------------------------------
# forecast pairs
# ------------------------------------------------------------------------------------------------------------------
def test_pairs_never_cross_a_shard():
    # shard i holds steps with value = global time index, lengths 5, 3, 2
    lengths, start, shards = (5, 3, 2), 0, []
    for n in lengths:
        v = np.broadcast_to(np.arange(start, start + n, dtype=np.float32)[:, None, None, None], (n, 1, 32, 64))
        shards.append({"a": v, "b": -v})
        start += n
    pairs = E.forecast_pairs(shards, 2)
    assert pairs.n_pairs == (5 - 2) + (3 - 2) + 0
    assert pairs.x.shape == (4, 2, 32, 64) and pairs.y.shape == (4, 2, 32, 64)
    np.testing.assert_array_equal(pairs.shard, [0, 0, 0, 1])
    np.testing.assert_array_equal(pairs.t, [0, 1, 2, 0])
    np.testing.assert_array_equal(pairs.y[:, 0, 0, 0] - pairs.x[:, 0, 0, 0], 2.0)  # exactly lead apart, same shard
    assert np.all(pairs.t + 2 < np.array(lengths)[pairs.shard])
    only_b = E.forecast_pairs(shards, 1, in_variables=["a", "b"], out_variables=["b"])
    assert only_b.y.shape == (4 + 2 + 1, 1, 32, 64)
    np.testing.assert_array_equal(only_b.y[:, 0], -only_b.x[:, 0] - 1.0)
    with pytest.raises(ValueError, match="no forecast pair"):
        E.forecast_pairs(shards, 5)
    with pytest.raises(ValueError, match="no key"):
        E.forecast_pairs(shards, 1, in_variables=["c"])


def test_pairs_from_preprocessed_shards(climax_root, tmp_path):
    root, data, _ = climax_root
    out = tmp_path / "npz"
    E.preprocess_climax(root, out, ["2m_temperature"], YEARS, num_shards=2, constants={}, progress_file=io.StringIO())
    shards = E.load_shards(out, "train", ["2m_temperature"])
    pairs = E.forecast_pairs(shards, 1)
    assert pairs.n_pairs == 4  # 4 shards of 2 steps, one pair each
    np.testing.assert_array_equal(pairs.x[2], data[2001]["2m_temperature"][0])
    np.testing.assert_array_equal(pairs.y[2], data[2001]["2m_temperature"][1])
    (out / "train" / "2000_1.npz").write_bytes(b"PK broken")
    with pytest.raises(E.WeatherBenchFormatError, match="2000_1.npz: not a readable .npz"):
        E.load_shards(out, "train")
    with pytest.raises(E.WeatherBenchFormatError, match=r"no key\(s\) \['z'\]"):
        E.load_shard(out / "val" / "2002_0.npz", ["z"])


# ---------------------------------------------------------------------------------------------------------------
# fetching the public files (a file:// URL stands in for the server; mirrors laid out as <mirror>/weatherbench/...)
# ---------------------------------------------------------------------------------------------------------------
def _constants(root):
    zeros = np.zeros((32, 64), np.float32)
    return E.write_weatherbench_constants(E.constants_path(root), {"orography": zeros, "lsm": zeros, "slt": zeros})


def test_fetch_downloads_zips_extracts_and_checks(two_years, tmp_path):
    import zipfile

    src, data = two_years
    server = tmp_path / "server"
    server.mkdir()
    with zipfile.ZipFile(server / "geopotential_500.zip", "w") as archive:
        for year in (2000, 2001):
            path = E.weatherbench_path(src, "geopotential_500", year)
            archive.write(path, f"geopotential_500/{path.name}")
    _constants(src)
    out = tmp_path / "fetched"
    record = E.fetch_weatherbench(out, ["geopotential_500"], [2000, 2001], mirrors=[],
                                  url_template=f"file://{server}/{{folder}}.zip",
                                  constants_url=f"file://{E.constants_path(src)}")  # fmt: skip
    z500 = record["geopotential_500"]
    assert z500["source"].startswith("file://") and len(z500["sha256"]) == 64
    da = E.open_weatherbench(out, "geopotential_500", [2000, 2001])
    np.testing.assert_array_equal(da.values[3:], data[2001]["z"][:, E.PRESSURE_LEVELS.index(500)])
    # present files are kept; a folder in no mirror with downloads off is a clear error that writes nothing
    assert E.fetch_weatherbench(out, ["geopotential_500"], [2000, 2001], allow_download=False)[
        "geopotential_500"]["source"] == "present"
    with pytest.raises(FileNotFoundError, match="2m_temperature"):
        E.fetch_weatherbench(tmp_path / "none", ["2m_temperature"], [2000], allow_download=False)
    assert not (tmp_path / "none" / "2m_temperature").exists()


def test_fetch_from_a_mirror_and_a_broken_zip(two_years, tmp_path):
    import shutil

    src, _ = two_years
    mirror = tmp_path / "mirror"
    shutil.copytree(src / "2m_temperature", mirror / "weatherbench" / "5.625deg" / "2m_temperature")
    _constants(mirror / "weatherbench" / "5.625deg")
    out = tmp_path / "fetched"
    record = E.fetch_weatherbench(out, ["2m_temperature"], [2000, 2001], mirrors=[mirror], allow_download=False)
    assert record["2m_temperature"]["source"].endswith("2m_temperature")
    assert E.open_weatherbench(out, "2m_temperature", [2000, 2001]).shape == (6, 32, 64)
    server = tmp_path / "server"
    server.mkdir()
    (server / "geopotential.zip").write_bytes(b"not a zip")
    with pytest.raises(zipfile.BadZipFile):
        E.fetch_weatherbench(tmp_path / "f2", ["geopotential"], [2000], mirrors=[mirror],
                             url_template=f"file://{server}/{{folder}}.zip")  # fmt: skip
    assert not list((tmp_path / "f2").rglob("*.nc"))


def test_resolve_target_names_labels_and_units_and_refuses_what_the_data_lack():
    from stochattn.backbones.climax import CLIMAX_DEFAULT_VARS

    z = E.resolve_target("z500", CLIMAX_DEFAULT_VARS)
    assert (z.variable, z.label, z.units) == ("geopotential_500", "Z500", "m^2 s^-2")
    assert E.resolve_target("t850").variable == "temperature_850" and E.resolve_target("t850").units == "K"
    t2m = E.resolve_target("t2m", CLIMAX_DEFAULT_VARS)
    assert (t2m.variable, t2m.label) == ("2m_temperature", "T2m")
    assert E.resolve_target("q700", CLIMAX_DEFAULT_VARS).units == "kg kg^-1"
    for bad in ("z501", "x500", "Z500", "t2", ""):
        with pytest.raises(ValueError, match="unknown forecast target"):
            E.resolve_target(bad, CLIMAX_DEFAULT_VARS)
    with pytest.raises(ValueError, match=r"allowed here: t850, z500, z850$"):  # the stand-in's keys
        E.resolve_target("t2m", ["geopotential_500", "geopotential_850", "temperature_850"])


def test_forecast_cases_product_explicit_list_and_config_errors():
    keys = ["geopotential_500", "temperature_850", "geopotential_850"]
    cases = E.forecast_cases(["z500", "t850"], [72, 24], keys, 6)
    assert [c.name for c in cases] == ["z500_72h", "z500_24h", "t850_72h", "t850_24h"]
    main, other = cases[0], cases[3]
    assert (main.sub, main.sfx, main.row) == ("", "", "Z500 72 h")  # the paper's names
    assert (other.sub, other.sfx, other.row) == ("/t850_24h", "_t850_24h", "T850 24 h")
    assert other.target.units == "K"
    assert [c.name for c in E.forecast_cases(["z500"], 72, keys, 1)] == ["z500_72h"]  # one lead, an int
    explicit = E.forecast_cases(["z500"], 72, keys, 6, [{"target": "t850", "lead_hours": 12},
                                                        {"target": "z500", "lead_hours": 120}])  # fmt: skip
    assert [(c.name, c.sub) for c in explicit] == [("t850_12h", ""), ("z500_120h", "/z500_120h")]
    with pytest.raises(ValueError, match=r"config era5.targets: unknown forecast target 't2m'; allowed here: t850"):
        E.forecast_cases(["t2m"], 72, keys, 6)
    with pytest.raises(ValueError, match=r"config era5.lead_hours: lead time 7 h is not a multiple .* 6-hourly"):
        E.forecast_cases(["z500"], [72, 7], keys, 6)
    with pytest.raises(ValueError, match="repeat a case"):
        E.forecast_cases(["z500"], [72, 72], keys, 6)
