"""Tests for stochattn.data.ett: verified fetch (gzip mirror / plain CSV / download), strict CSV loading, training-only
normalisation, Informer windows that never cross a split border, the 10 % adaptation rule, and the station rule."""

import gzip
import hashlib
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import served, url_of

from stochattn.data.ett import (
    ETT_COLUMNS,
    ETT_DATASETS,
    ETT_URL_TEMPLATE,
    DataFetchError,
    UnknownDatasetError,
    adaptation_end,
    fetch_ett,
    load_ett,
    load_ett_checksums,
    make_windows,
    normalise,
    part_rows,
    pretraining_sources,
    station,
    train_statistics,
    window_starts,
)

SHARED_DATA = Path("/work/shared/data")
HEADER = "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT"
KNOWN = "ETTh1, ETTh2, ETTm1, ETTm2"


def ett_csv_bytes(name: str = "ETTh1", n_rows: int | None = None, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A synthetic CSV in the exact public ETT-small format (header, ``2016-07-01 00:00:00`` dates at the data set's
    step, 7 float columns, trailing newline); returns its bytes and the (n_rows, 7) values written."""
    ds = ETT_DATASETS[name]
    n_rows = ds.test_end + 5 if n_rows is None else n_rows
    rng = np.random.default_rng(seed)
    values = np.round(rng.normal(loc=np.arange(7) * 3.0, scale=1.0 + np.arange(7), size=(n_rows, 7)), 6)
    dates = np.datetime64("2016-07-01T00:00:00") + np.arange(n_rows) * np.timedelta64(ds.step_minutes, "m")
    lines = [HEADER]
    for d, row in zip(dates.astype(str), values):
        lines.append(d.replace("T", " ") + "," + ",".join(repr(float(v)) for v in row))
    return ("\n".join(lines) + "\n").encode(), values


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def all_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def no_network(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise urllib.error.URLError("network unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture(scope="module")
def h1():
    """(bytes, values) of a synthetic ETTh1 file (test border + 5 rows)."""
    return ett_csv_bytes("ETTh1")


def make_mirror(root: Path, name: str, data: bytes, *, gz: bool = True) -> Path:
    folder = root / "ETT-small"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (f"{name}.csv.gz" if gz else f"{name}.csv")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# ------------------------------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------------------------------
def test_registry_borders_urls_stations():
    assert list(ETT_DATASETS) == ["ETTh1", "ETTh2", "ETTm1", "ETTm2"]
    for name, ds in ETT_DATASETS.items():
        assert ds.file == f"{name}.csv"
        assert ds.url == f"https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/{name}.csv"
        assert ds.url == ETT_URL_TEMPLATE.format(file=ds.file)
        got = (ds.train_end, ds.val_end, ds.test_end, ds.n_rows, ds.step_minutes)
        if name.startswith("ETTh"):
            assert got == (8640, 11520, 14400, 17420, 60)
        else:
            assert got == (34560, 46080, 57600, 69680, 15)
        assert part_rows(name, "train") == (0, ds.train_end)
        assert part_rows(name, "val") == (ds.train_end, ds.val_end)
        assert part_rows(name, "test") == (ds.val_end, ds.test_end)
    with pytest.raises(ValueError, match="part must be one of"):
        part_rows("ETTh1", "validation")


def test_station_mapping_and_pretraining_sources():
    assert [station(n) for n in ("ETTh1", "ETTm1", "ETTh2", "ETTm2")] == [1, 1, 2, 2]
    for target in ("ETTh1", "ETTm1"):
        assert pretraining_sources(target) == {"ETTh2": (0, 8640), "ETTm2": (0, 34560)}
    for target in ("ETTh2", "ETTm2"):
        assert pretraining_sources(target) == {"ETTh1": (0, 8640), "ETTm1": (0, 34560)}
    for target in ETT_DATASETS:
        assert all(station(src) != station(target) for src in pretraining_sources(target))


def test_unknown_dataset_is_a_clear_error(tmp_path):
    for call in (
        lambda: window_starts("ETTh3", "test", 512, 96),
        lambda: station("etth1"),
        lambda: pretraining_sources("ETTx"),
        lambda: fetch_ett("ETTh3", tmp_path / "out", mirrors=[], allow_download=False),
        lambda: normalise(np.zeros((20000, 7)), "ETT"),
    ):
        with pytest.raises(UnknownDatasetError, match=f"unknown ETT data set name .*; known: {KNOWN}"):
            call()
    # both a DataFetchError (like UCI's resolve_dataset) and a ValueError
    assert issubclass(UnknownDatasetError, DataFetchError) and issubclass(UnknownDatasetError, ValueError)
    # a file whose name does not say which data set it is
    path = tmp_path / "ett.csv"
    path.write_bytes(ett_csv_bytes("ETTh1", n_rows=10)[0])
    with pytest.raises(UnknownDatasetError, match=f"ett.csv: cannot tell which ETT data set.*{KNOWN}"):
        load_ett(path)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------------------------
# fetch
# ------------------------------------------------------------------------------------------------------------------
def test_shipped_checksums_hash_the_plain_csv():
    table = load_ett_checksums()
    assert sorted(table) == ["ETTh1.csv", "ETTh2.csv", "ETTm1.csv", "ETTm2.csv"]
    assert table["ETTh1.csv"] == "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066"
    from importlib import resources

    header = resources.files("stochattn.data").joinpath("ett_sha256.txt").read_text()
    assert "PLAIN, UNCOMPRESSED CSV" in header


@pytest.mark.parametrize("gz", [True, False], ids=["gz-mirror", "plain-mirror"])
def test_fetch_from_mirror_writes_the_verified_plain_csv(tmp_path, h1, monkeypatch, gz):
    data, _ = h1
    table = {"ETTh1.csv": sha(data)}  # one table (of the plain bytes) for both mirror forms
    mirror = tmp_path / "mirror"
    make_mirror(mirror, "ETTh1", data, gz=gz)
    no_network(monkeypatch)
    out = tmp_path / "out"
    path = fetch_ett("ETTh1", out, mirrors=[tmp_path / "missing", mirror], allow_download=False, checksums=table)
    assert path == out / "ETTh1.csv"
    assert path.read_bytes() == data
    assert all_files(out) == ["ETTh1.csv"]
    # second call: verified in place, the mirror is not needed any more
    assert fetch_ett("ETTh1", out, mirrors=[], allow_download=False, checksums=table) == path


def test_fetch_checksum_mismatch_raises_and_leaves_nothing(tmp_path, h1, monkeypatch):
    data, _ = h1
    table = {"ETTh1.csv": sha(data)}
    mirror = tmp_path / "mirror"
    make_mirror(mirror, "ETTh1", data.replace(b"2016-07-01 00:00:00,", b"2016-07-01 00:00:00,1"), gz=True)
    make_mirror(mirror, "ETTh1", data[:-100], gz=False)  # a truncated plain copy beside it
    no_network(monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(DataFetchError) as info:
        fetch_ett("ETTh1", out, mirrors=[mirror], allow_download=False, checksums=table)
    msg = str(info.value)
    assert "'ETTh1.csv'" in msg and "checksum mismatch" in msg
    assert str(mirror / "ETT-small" / "ETTh1.csv.gz") in msg and str(mirror / "ETT-small" / "ETTh1.csv") in msg
    assert f"Nothing was written to {out / 'ETTh1.csv'}" in msg
    assert all_files(out) == []  # no CSV, no temporary file


def test_fetch_broken_gzip_falls_through_to_next_mirror(tmp_path, h1, monkeypatch):
    data, _ = h1
    table = {"ETTh1.csv": sha(data)}
    bad, good = tmp_path / "bad", tmp_path / "good"
    gz_path = make_mirror(bad, "ETTh1", data, gz=True)
    gz_path.write_bytes(gz_path.read_bytes()[:5000])  # cut-off gzip stream
    make_mirror(good, "ETTh1", data, gz=True)
    no_network(monkeypatch)
    out = tmp_path / "out"
    path = fetch_ett("ETTh1", out, mirrors=[bad, good], allow_download=False, checksums=table)
    assert path.read_bytes() == data and all_files(out) == ["ETTh1.csv"]


def test_fetch_download_verified_and_mismatch(tmp_path, h1, monkeypatch):
    data, _ = h1
    table = {"ETTh1.csv": sha(data)}
    answer = {"bytes": data[:-7] + b"9999999\n"}
    asked = []

    def fake_urlopen(request, timeout=None):
        asked.append(url_of(request))
        return served(answer["bytes"], request)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    out = tmp_path / "out"
    with pytest.raises(DataFetchError, match=r"(?s)'ETTh1.csv'.*download https://raw.*ETTh1.csv: checksum mismatch"):
        fetch_ett("ETTh1", out, mirrors=[tmp_path / "none"], checksums=table)
    assert asked == [ETT_DATASETS["ETTh1"].url]
    assert all_files(out) == []
    answer["bytes"] = data
    path = fetch_ett("ETTh1", out, mirrors=[tmp_path / "none"], checksums=table)
    assert path.read_bytes() == data and all_files(out) == ["ETTh1.csv"]


def test_fetch_replaces_a_stale_copy_and_refuses_unlisted_files(tmp_path, h1, monkeypatch):
    data, _ = h1
    table = {"ETTh1.csv": sha(data)}
    out = tmp_path / "out"
    out.mkdir()
    (out / "ETTh1.csv").write_bytes(data[: len(data) // 2])  # an interrupted earlier copy
    no_network(monkeypatch)
    with pytest.raises(DataFetchError, match="no mirror configured"):
        fetch_ett("ETTh1", out, mirrors=[], allow_download=False, checksums=table)
    assert all_files(out) == []  # the stale copy is gone, nothing new written
    mirror = tmp_path / "mirror"
    make_mirror(mirror, "ETTh1", data)
    assert fetch_ett("ETTh1", out, mirrors=[mirror], checksums=table).read_bytes() == data
    # a table without the plain CSV (e.g. the mirror's SHA256SUMS, which lists the .gz) is refused
    gz_table = tmp_path / "SHA256SUMS"
    gz_table.write_text(f"{'0' * 64}  ./ETT-small/ETTh1.csv.gz\n")
    with pytest.raises(DataFetchError, match="no expected SHA-256 of the plain CSV 'ETTh1.csv'"):
        fetch_ett("ETTh1", tmp_path / "out2", mirrors=[mirror], checksums=gz_table)
    with pytest.raises(TypeError, match="mirrors must be a list"):
        fetch_ett("ETTh1", out, mirrors=str(mirror), checksums=table)


# ------------------------------------------------------------------------------------------------------------------
# load
# ------------------------------------------------------------------------------------------------------------------
def test_load_synthetic_csv(tmp_path, h1):
    data, values = h1
    path = tmp_path / "ETTh1.csv"
    path.write_bytes(data)
    dates, got, columns = load_ett(path)
    assert columns == ETT_COLUMNS == ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
    assert got.dtype == np.float64 and got.shape == (len(values), 7)
    np.testing.assert_array_equal(got, values)
    assert dates.dtype == np.dtype("datetime64[s]") and dates.shape == (len(values),)
    assert str(dates[0]) == "2016-07-01T00:00:00" and str(dates[1]) == "2016-07-01T01:00:00"
    # a gzip copy (as in the mirror) reads the same
    gz = tmp_path / "ETTh1.csv.gz"
    gz.write_bytes(gzip.compress(data))
    np.testing.assert_array_equal(load_ett(gz)[1], values)


def test_load_too_few_rows_names_the_file(tmp_path):
    ds = ETT_DATASETS["ETTm1"]
    path = tmp_path / "ETTm1.csv"
    path.write_bytes(ett_csv_bytes("ETTm1", n_rows=ds.test_end - 1)[0])
    with pytest.raises(ValueError, match=rf"{path}: 57599 data rows, fewer than the 57600 .*truncated"):
        load_ett(path)
    # the same file under another name, told explicitly which data set it is
    other = tmp_path / "copy.csv"
    other.write_bytes(path.read_bytes())
    with pytest.raises(ValueError, match=rf"{other}: 57599 data rows"):
        load_ett(other, name="ETTm1")


def test_load_ragged_or_cut_last_line_names_the_file(tmp_path, h1):
    data, _ = h1
    path = tmp_path / "ETTh1.csv"
    path.write_bytes(data[:-30])  # cut inside the last line: no final newline
    with pytest.raises(ValueError, match=rf"{path}: the last line .* is incomplete .*truncated"):
        load_ett(path)
    lines = data.decode().splitlines()
    lines[-1] = ",".join(lines[-1].split(",")[:5])  # a last line with too few fields, newline intact
    path.write_text("\n".join(lines) + "\n")
    n = len(lines) - 1
    with pytest.raises(ValueError, match=rf"{path}: data row {n - 1} \(line {n + 1}\) is ragged"):
        load_ett(path)
    lines[-1] = lines[-2] + ",1.0"  # too many fields
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{path}: cannot parse"):
        load_ett(path)


def test_load_rejects_wrong_header_and_uneven_dates(tmp_path, h1):
    data, _ = h1
    path = tmp_path / "ETTh1.csv"
    path.write_bytes(data.replace(b"HUFL,HULL", b"HULL,HUFL", 1))
    with pytest.raises(ValueError, match=rf"{path}: header is"):
        load_ett(path)
    lines = data.decode().splitlines()
    del lines[100]  # a lost row shifts every border
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{path}: dates are not evenly spaced at 60 min"):
        load_ett(path)


# ------------------------------------------------------------------------------------------------------------------
# normalisation
# ------------------------------------------------------------------------------------------------------------------
def test_normalisation_uses_training_rows_only(h1):
    _, values = h1
    train_end = ETT_DATASETS["ETTh1"].train_end
    z, mean, std = normalise(values, "ETTh1")
    assert z.shape == values.shape and mean.shape == std.shape == (7,)
    np.testing.assert_allclose(mean, values[:train_end].mean(axis=0))
    np.testing.assert_allclose(std, values[:train_end].std(axis=0))
    np.testing.assert_allclose(z[:train_end].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z[:train_end].std(axis=0), 1.0, atol=1e-12)
    changed = values.copy()
    changed[train_end:] += 1e6  # every val/test (and unused) row
    m2, s2 = train_statistics(changed, "ETTh1")
    np.testing.assert_array_equal(m2, mean)
    np.testing.assert_array_equal(s2, std)
    changed[train_end - 1, 6] += 1.0  # the last training row does count
    assert train_statistics(changed, "ETTh1")[0][6] != mean[6]
    with pytest.raises(ValueError, match="T >= 14400"):
        normalise(values[:14399], "ETTh1")


# ------------------------------------------------------------------------------------------------------------------
# windows
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ETT_DATASETS))
def test_windows_never_cross_split_borders(name):
    for context in (512, 96):
        for horizon in (96, 192):
            for part in ("train", "val", "test"):
                start, end = part_rows(name, part)
                s = window_starts(name, part, context, horizon)
                target_start = s + context  # the context ends exactly where the target starts
                target_end = target_start + horizon
                assert np.all(np.diff(s) == 1)
                assert np.all(target_start >= start) and np.all(target_end <= end)
                assert s[0] >= 0 and target_end[-1] == end  # every target row of the part is used
                if part == "train":
                    assert s[0] == 0
                else:
                    assert target_start[0] == start and s[0] == start - context  # Informer's border - seq_len
                assert len(s) == end - max(start, context) - horizon + 1
    assert len(window_starts(name, "test", 512, 96)) == (2785 if name.startswith("ETTh") else 11425)


def test_window_contents_follow_the_starts():
    name, context, horizon = "ETTh2", 512, 96
    t = np.arange(ETT_DATASETS[name].test_end + 20, dtype=np.float64)
    values = t[:, None] * 10 + np.arange(7)[None, :]  # value encodes (row, column)
    for part in ("val", "test"):
        w = make_windows(values, name, part, context, horizon, stride=7)
        starts = window_starts(name, part, context, horizon)[::7]
        assert w.x.shape == (len(starts) * 7, context) and w.y.shape == (len(starts) * 7, horizon)
        assert w.n_series == len(starts) * 7
        np.testing.assert_array_equal(w.start, np.repeat(starts, 7))
        np.testing.assert_array_equal(w.column, np.tile(np.arange(7), len(starts)))
        rows_x, cols_x = np.divmod(w.x, 10)
        rows_y, cols_y = np.divmod(w.y, 10)
        np.testing.assert_array_equal(cols_x, np.broadcast_to(w.column[:, None], w.x.shape))
        np.testing.assert_array_equal(cols_y, np.broadcast_to(w.column[:, None], w.y.shape))
        np.testing.assert_array_equal(rows_x, w.start[:, None] + np.arange(context))
        np.testing.assert_array_equal(rows_y, w.start[:, None] + context + np.arange(horizon))
        start, end = part_rows(name, part)
        assert rows_y.min() >= start and rows_y.max() < end


def test_adaptation_rule_uses_the_first_training_rows_only(h1):
    _, values = h1
    context, horizon = 512, 96
    limit = adaptation_end("ETTh1", context, 10)
    assert limit == (8640 - 512) * 10 // 100 + 512 == 1324
    assert adaptation_end("ETTm1", context, 10) == (34560 - 512) * 10 // 100 + 512 == 3916
    s = window_starts("ETTh1", "train", context, horizon, adaptation_percent=10)
    assert s[0] == 0 and s[-1] + context + horizon == limit and len(s) == limit - context - horizon + 1 == 717
    full = window_starts("ETTh1", "train", context, horizon)
    assert np.array_equal(full[: len(s)], s)
    assert np.array_equal(window_starts("ETTh1", "train", context, horizon, adaptation_percent=100), full)

    z, _, _ = normalise(values, "ETTh1")
    w = make_windows(z, "ETTh1", "train", context, horizon, adaptation_percent=10)
    changed = values.copy()
    changed[limit:] = -123.0  # rest of the training rows, all val and test rows
    w2 = make_windows(changed, "ETTh1", "train", context, horizon, adaptation_percent=10)
    z3, _, _ = normalise(np.where(np.arange(len(values))[:, None] >= 8640, 77.0, values), "ETTh1")  # val/test only
    w3 = make_windows(z3, "ETTh1", "train", context, horizon, adaptation_percent=10)
    np.testing.assert_array_equal(w3.x, w.x)
    np.testing.assert_array_equal(w3.y, w.y)
    raw = make_windows(values, "ETTh1", "train", context, horizon, adaptation_percent=10)
    np.testing.assert_array_equal(w2.x, raw.x)
    np.testing.assert_array_equal(w2.y, raw.y)
    with pytest.raises(ValueError, match="train part only"):
        window_starts("ETTh1", "val", context, horizon, adaptation_percent=10)
    with pytest.raises(ValueError, match="adaptation_percent must be an int in"):
        window_starts("ETTh1", "train", context, horizon, adaptation_percent=0)
    with pytest.raises(ValueError, match="no window with context=512 and horizon=96 fits"):
        window_starts("ETTh1", "train", context, horizon, adaptation_percent=1)


def test_too_long_context_and_bad_sizes_are_clear_errors(h1):
    for part in ("train", "val", "test"):
        with pytest.raises(ValueError, match=r"context=8641 is longer than ETTh1's training segment \(8640 rows\)"):
            window_starts("ETTh1", part, 8641, 96)
    with pytest.raises(ValueError, match="context=40000 is longer than ETTm2's training segment"):
        make_windows(np.zeros((57600, 7)), "ETTm2", "test", 40000, 96)
    with pytest.raises(ValueError, match="ETTh1 train: no window with context=8600 and horizon=96 fits"):
        window_starts("ETTh1", "train", 8600, 96)
    with pytest.raises(ValueError, match="ETTh1 val: no window"):
        window_starts("ETTh1", "val", 512, 2881)
    with pytest.raises(ValueError, match="horizon must be a positive int"):
        window_starts("ETTh1", "val", 512, 0)
    with pytest.raises(ValueError, match="stride must be a positive int"):
        make_windows(h1[1], "ETTh1", "val", 512, 96, stride=0)


# ------------------------------------------------------------------------------------------------------------------
# the real offline mirror
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(
    not (SHARED_DATA / "ETT-small").is_dir(),
    reason=f"offline data mirror {SHARED_DATA}/ETT-small not present (the synthetic tests above cover the code)",
)
def test_real_mirror_checksums_and_row_counts(tmp_path, monkeypatch):
    no_network(monkeypatch)
    table = load_ett_checksums()
    for name, ds in ETT_DATASETS.items():
        gz = SHARED_DATA / "ETT-small" / f"{name}.csv.gz"
        assert sha(gzip.decompress(gz.read_bytes())) == table[ds.file]  # the shipped table = the mirror's bytes
        path = fetch_ett(name, tmp_path, mirrors=[SHARED_DATA], allow_download=False)
        dates, values, columns = load_ett(path)
        assert values.shape == (ds.n_rows, 7) == ((17420, 7) if name.startswith("ETTh") else (69680, 7))
        assert columns == ETT_COLUMNS and np.isfinite(values).all()
        assert str(dates[0]) == "2016-07-01T00:00:00"
        assert str(dates[ds.train_end]) == "2017-06-26T00:00:00" and str(dates[ds.val_end]) == "2017-10-24T00:00:00"
    assert all_files(tmp_path) == sorted(d.file for d in ETT_DATASETS.values())


def test_check_horizons_accepts_the_long_horizons_and_names_the_rule_a_horizon_breaks():
    from stochattn.data.ett import check_horizons

    check_horizons(["ETTh1", "ETTh2", "ETTm1", "ETTm2"], [96, 192, 336, 720], 512, 10)
    # ETTh: adaptation targets must end by row (8640 - 512) * 10 // 100 + 512 = 1324: no room for 512 + 1000 rows
    with pytest.raises(ValueError, match=r"config ett.horizons: horizon 1000 does not fit: .*adaptation_percent=10"):
        check_horizons(["ETTh1"], [96, 1000], 512, 10)
    with pytest.raises(ValueError, match=r"horizon 3000 does not fit: ETTh1 val"):  # 2880 val rows cannot hold it
        check_horizons(["ETTh1"], [3000], 512, 100)
