"""Tests for stochattn.io: atomic writers, JSON/NPZ helpers, SHA-256."""

import hashlib
import json

import numpy as np
import pytest

from stochattn import io as sio


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_atomic_path_renames_on_success_and_creates_dirs(tmp_path):
    target = tmp_path / "a" / "b" / "out.txt"
    with sio.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        assert not target.exists()  # nothing visible before the body finishes
        tmp.write_text("hello")
    assert target.read_text() == "hello"
    assert _leftovers(target.parent) == []


def test_atomic_path_leaves_no_file_when_writer_raises(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with pytest.raises(RuntimeError, match="boom"):
        with sio.atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_atomic_path_keeps_old_content_when_writer_raises(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(KeyError):
        with sio.atomic_path(target) as tmp:
            tmp.write_text("new but broken")
            raise KeyError("x")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_save_npz_roundtrip_exact_name(tmp_path):
    target = tmp_path / "d" / "arrays.bin"  # numpy.savez(name) would append .npz
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    sio.save_npz(target, a=a, b=np.int64(7))
    assert target.is_file() and not (tmp_path / "d" / "arrays.bin.npz").exists()
    back = sio.load_npz(target)
    np.testing.assert_array_equal(back["a"], a)
    assert back["a"].dtype == np.float32 and back["b"].item() == 7


def test_save_npz_writer_failure_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "x.npz"

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", broken)
    with pytest.raises(OSError, match="disk full"):
        sio.save_npz(target, a=np.zeros(3))
    assert list(tmp_path.iterdir()) == []


def test_save_npz_refuses_object_arrays(tmp_path):
    with pytest.raises(TypeError, match="'bad'"):
        sio.save_npz(tmp_path / "x.npz", bad=np.array([{"a": 1}], dtype=object))
    assert list(tmp_path.iterdir()) == []


def test_save_json_sorted_indented_numpy(tmp_path):
    target = tmp_path / "j" / "meta.json"
    obj = {
        "z": np.float64(1.5),
        "a": np.arange(3),
        "m": {np.int64(2): np.bool_(True), "k": (1, 2)},
        "p": tmp_path / "file.txt",
    }
    sio.save_json(target, obj)
    text = target.read_text()
    assert text.endswith("\n")
    assert text.index('"a"') < text.index('"m"') < text.index('"p"') < text.index('"z"')
    assert "\n  " in text  # indented
    back = sio.load_json(target)
    assert back == {"a": [0, 1, 2], "m": {"2": True, "k": [1, 2]}, "p": str(tmp_path / "file.txt"), "z": 1.5}
    assert json.loads(text) == back


def test_save_json_unconvertible_leaves_old_file(tmp_path):
    target = tmp_path / "meta.json"
    sio.save_json(target, {"v": 1})
    with pytest.raises(TypeError, match="object"):
        sio.save_json(target, {"v": object()})
    assert sio.load_json(target) == {"v": 1}
    assert _leftovers(tmp_path) == []


def test_sha256_file_matches_hashlib(tmp_path):
    data = np.random.default_rng(0).bytes(100_003)
    path = tmp_path / "blob"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert sio.sha256_file(path) == expected
    assert sio.sha256_file(path, chunk_size=4096) == expected  # many chunks, same digest
    with pytest.raises(ValueError, match="chunk_size"):
        sio.sha256_file(path, chunk_size=0)


def test_save_npz_is_byte_reproducible_and_numpy_readable(tmp_path):
    import time

    arrays = {"y": np.arange(5.0), "samples": np.random.default_rng(0).normal(size=(3, 5)), "sigma_y": np.float64(2.0)}
    a = sio.save_npz(tmp_path / "a.npz", **arrays)
    time.sleep(2.1)  # zip timestamps have a 2 s resolution: a time-stamped writer would differ now
    b = sio.save_npz(tmp_path / "b.npz", **arrays)
    assert a.read_bytes() == b.read_bytes()
    with np.load(a, allow_pickle=False) as back:
        assert sorted(back.files) == sorted(arrays)
        for name, value in arrays.items():
            np.testing.assert_array_equal(back[name], value)
