"""Rehearsal assets (stochattn.rehearsal): random-weight TimesFM 2.5 / ClimaX checkpoints and a synthetic WeatherBench
mirror in the public formats, read back through the project's real loaders, fetch and ClimaX preprocessing."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch
from safetensors import safe_open

from stochattn import rehearsal as R
from stochattn.backbones import climax as C
from stochattn.backbones import timesfm as T
from stochattn.data import era5 as E
from stochattn.io import sha256_file

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_TFM = {"num_layers": 2, "model_dims": 64, "num_heads": 4, "output_quantile_len": 128}


def tiny_timesfm(seed):
    return T.build_timesfm(TINY_TFM["num_layers"], TINY_TFM["model_dims"], TINY_TFM["num_heads"], seed=seed,
                           output_quantile_len=TINY_TFM["output_quantile_len"])  # fmt: skip


def walks(batch=2, length=96, seed=0):
    return torch.randn(batch, length, generator=torch.Generator().manual_seed(seed)).cumsum(1)


# ------------------------------------------------------------------------------------------------------------------
# TimesFM 2.5
# ------------------------------------------------------------------------------------------------------------------
def test_tiny_timesfm_checkpoint_loads_strictly_and_forecasts(tmp_path):
    path = R.write_timesfm_checkpoint(tmp_path / "snap", seed=1, dims=TINY_TFM)
    assert path == tmp_path / "snap" / "model.safetensors" and os.listdir(path.parent) == ["model.safetensors"]
    expected = tiny_timesfm(0).state_dict()
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        assert set(f.keys()) == set(expected)  # the public names: the module's own state_dict, no renaming
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert list(meta) == ["rehearsal"] and R.REHEARSAL_WEIGHTS == "rehearsal: random weights, not a result"
    assert meta["rehearsal"].startswith(R.REHEARSAL_WEIGHTS + "; seed=1; dims={")
    assert '"num_layers": 2' in meta["rehearsal"]
    assert all(t.dtype == torch.float32 and t.shape == expected[k].shape for k, t in tensors.items())
    assert "stacked_xf.1.attn.qkv_proj.weight" in tensors and tensors["stacked_xf.1.attn.qkv_proj.weight"].shape == (
        192, 64)
    assert torch.equal(tensors["stacked_xf.0.pre_attn_ln.scale"], torch.ones(64))  # RMSNorm scales set to one

    model = tiny_timesfm(7)  # other weights, then the project's strict loader (a folder holding model.safetensors)
    assert not torch.equal(model.stacked_xf[0].ff0.weight, tensors["stacked_xf.0.ff0.weight"])
    T.load_timesfm_checkpoint(model, path.parent)
    assert all(torch.equal(v, tensors[k]) for k, v in model.state_dict().items())
    y = T.point_forecast(model, walks(), horizon=160)  # one autoregressive step beyond 128
    assert y.shape == (2, 160) and torch.isfinite(y).all() and y.std() > 0

    # strict: a module of another size refuses it, naming the mismatches
    with pytest.raises(T.CheckpointMismatchError, match="shape mismatch"):
        T.load_timesfm_checkpoint(T.build_timesfm(2, 32, 4, seed=0, output_quantile_len=128), path)
    with pytest.raises(T.CheckpointMismatchError, match="missing key"):
        T.load_timesfm_checkpoint(T.build_timesfm(3, 64, 4, seed=0, output_quantile_len=128), path)
    # the seed decides the bytes
    again = R.write_timesfm_checkpoint(tmp_path / "again", seed=1, dims=TINY_TFM)
    other = R.write_timesfm_checkpoint(tmp_path / "other", seed=2, dims=TINY_TFM)
    assert sha256_file(again) == sha256_file(path) != sha256_file(other)


def test_timesfm_bad_dims_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown TimesFM dims"):
        R.write_timesfm_checkpoint(tmp_path, dims={"layers": 2})
    with pytest.raises(ValueError, match="even integer"):
        R.write_timesfm_checkpoint(tmp_path, dims={**TINY_TFM, "model_dims": 60, "num_heads": 4})
    with pytest.raises(TypeError, match="seed"):
        R.write_timesfm_checkpoint(tmp_path, seed=1.5, dims=TINY_TFM)
    assert not list(tmp_path.iterdir())
    assert R.timesfm_dims() == {"num_layers": 20, "model_dims": 1280, "num_heads": 16, "hidden_dims": None,
                                "output_quantile_len": 1024}  # fmt: skip


@pytest.mark.parametrize("xet", [True, False], ids=["xet-shared-store", "plain-lfs"])
def test_timesfm_hf_cache_is_found_by_the_offline_fetch(tmp_path, xet):
    """Both layouts the Hub's cache has today: a Xet-backed repository (the content in the cache-wide store
    blobs/<2 hex>/<xet hash>, the repository's blobs/<sha256> a link to it) and a plain LFS blob."""
    cache = tmp_path / "hf-cache"
    path = R.write_timesfm_checkpoint(cache, seed=3, dims=TINY_TFM, hf_cache=True, xet=xet)
    repo = cache / "models--google--timesfm-2.5-200m-pytorch"
    commit = (repo / "refs" / "main").read_text()
    digest = sha256_file(path)
    assert path == repo / "snapshots" / commit / "model.safetensors" and path.is_symlink()
    assert path.resolve() == (repo / "blobs" / digest).resolve()  # an LFS blob is named by its SHA-256
    assert (repo / "blobs" / digest).is_symlink() == xet
    if xet:  # resolving the link ends at the Xet hash, 64 hex digits that are not the SHA-256
        assert path.resolve().parent.parent == cache / "blobs" and path.resolve().name != digest
    # no temporary file left behind
    assert sorted(p.name for p in cache.iterdir()) == (["blobs", repo.name] if xet else [repo.name])
    # the ETT rule's fetch (hf_hub_download in Hugging Face's cache layout, SHA-256 recorded and checked)
    got = T.fetch_timesfm_checkpoint(cache, local_files_only=True)
    assert Path(got) == path and json.loads(next(cache.glob("*.sha256.json")).read_text())["sha256"] == digest
    model = tiny_timesfm(0)
    T.load_timesfm_checkpoint(model, got)
    assert torch.isfinite(T.point_forecast(model, walks(), horizon=32)).all()


@pytest.mark.slow
def test_full_size_timesfm_loads_through_the_ett_loader(tmp_path):
    """~5 s: write the full 200M checkpoint (925 MB) and load it with the ETT rules' loader (build_timesfm_200m)."""
    from stochattn.experiments import ett

    path = R.write_timesfm_checkpoint(tmp_path, seed=0)
    assert path.stat().st_size > 231_289_280 * 4
    model = ett.load_backbone(path)  # TimesFM_2p5_200M_torch_module + strict load_timesfm_checkpoint
    assert type(model).__name__ == "TimesFM_2p5_200M_torch_module"
    assert sum(p.numel() for p in model.parameters()) == 231_289_280  # 200M + the 30M continuous-quantile head
    with safe_open(str(path), "pt") as f:
        assert len(f.keys()) == 232 and f.metadata()["rehearsal"].startswith(R.REHEARSAL_WEIGHTS)
        assert torch.equal(f.get_tensor("stacked_xf.19.ff1.weight"), model.stacked_xf[19].ff1.weight)
        assert f.get_tensor("stacked_xf.0.attn.qkv_proj.weight").shape == (3840, 1280)
    y = T.point_forecast(model, walks(1, 64), horizon=32)
    assert y.shape == (1, 32) and torch.isfinite(y).all()


# ------------------------------------------------------------------------------------------------------------------
# WeatherBench 5.625 deg
# ------------------------------------------------------------------------------------------------------------------
def test_climax_folders_cover_the_48_inputs():
    folders = R.climax_weatherbench_folders()
    assert folders == ["2m_temperature", "10m_u_component_of_wind", "10m_v_component_of_wind", "geopotential",
                       "u_component_of_wind", "v_component_of_wind", "temperature", "relative_humidity",
                       "specific_humidity"]  # fmt: skip
    keys = [f for f in folders if not E.WEATHERBENCH_VARIABLES[f][1]]
    keys += [f"{f}_{lv}" for f in folders if E.WEATHERBENCH_VARIABLES[f][1] for lv in E.CLIMAX_LEVELS]
    assert sorted(keys + list(E.CLIMAX_CONSTANTS)) == sorted(C.CLIMAX_DEFAULT_VARS)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal") / "mirror"
    manifest = R.write_weatherbench_mirror(root, years=[2015, 2016], steps_per_year=4, seed=5)
    return root, manifest


def test_weatherbench_mirror_layout_labels_and_manifest(mirror, tmp_path):
    root, manifest = mirror
    base = root / "weatherbench" / "5.625deg"
    files = sorted(p.relative_to(root).as_posix() for p in base.rglob("*") if p.is_file())
    assert files == sorted(manifest) and len(files) == 9 * 2 + 1
    assert "weatherbench/5.625deg/geopotential/geopotential_2016_5.625deg.nc" in manifest
    assert "weatherbench/5.625deg/constants/constants_5.625deg.nc" in manifest
    assert all(sha256_file(root / rel) == digest for rel, digest in manifest.items())
    record = json.loads((root / "weatherbench" / "rehearsal.json").read_text())
    assert record["rehearsal"] == R.REHEARSAL_DATA and record["files"] == manifest
    for rel in manifest:
        with netCDF4.Dataset(root / rel) as ds:
            assert ds.getncattr("rehearsal") == R.REHEARSAL_DATA
    with netCDF4.Dataset(base / "geopotential" / "geopotential_2015_5.625deg.nc") as ds:
        assert ds["z"].dimensions == ("time", "level", "lat", "lon") and ds["z"].dtype == np.float32
        assert list(ds["level"][:]) == list(E.PRESSURE_LEVELS) and ds["z"].units == "m**2 s**-2"
    # a short year: the earliest year's last hours, the next year's first hours (one gap-free series)
    da = E.open_weatherbench(base, "2m_temperature", [2015, 2016])
    assert da.shape == (8, 32, 64) and E.time_step_hours(da) == 1
    assert str(da.time.values[0])[:13] == "2015-12-31T20" and str(da.time.values[-1])[:13] == "2016-01-01T03"
    # the seed decides every byte
    again = R.write_weatherbench_mirror(tmp_path / "again", years=[2015, 2016], steps_per_year=4, seed=5,
                                        folders=["2m_temperature"])  # fmt: skip
    assert all(manifest[rel] == digest for rel, digest in again.items())


def test_weatherbench_mirror_through_the_real_fetch_and_climax_preprocessing(mirror, tmp_path):
    root, _ = mirror
    folders = R.climax_weatherbench_folders()
    record = E.fetch_weatherbench(tmp_path / "data", folders, [2015, 2016], mirrors=[root], allow_download=False)
    assert set(record) == {*folders, "constants"}
    assert all(Path(r["source"]).is_relative_to(root / "weatherbench" / "5.625deg") for r in record.values())
    out = tmp_path / "npz"
    manifest = E.preprocess_climax(tmp_path / "data", out, folders, {"train": [2015], "val": [2016]}, num_shards=2,
                                   levels=E.CLIMAX_LEVELS, progress_file=io.StringIO())  # fmt: skip
    assert len(manifest["keys"]) == 45 and manifest["step_hours"] == 1
    for part, year in (("train", 2015), ("val", 2016)):
        shard = E.load_shard(out / part / f"{year}_1.npz")
        assert sorted(shard) == sorted(C.CLIMAX_DEFAULT_VARS)  # all 48 ClimaX inputs
        assert all(v.shape == (2, 1, 32, 64) and v.dtype == np.float32 for v in shard.values())
    mean, std = E.load_normalisation(out)
    assert set(mean) == set(C.CLIMAX_DEFAULT_VARS)
    plausible = {"geopotential_500": (5.3e4, 5.5e4), "geopotential_50": (1.9e5, 2.1e5), "temperature_850": (270, 290),
                 "temperature_50": (195, 225), "2m_temperature": (280, 295), "specific_humidity_850": (1e-3, 1e-2),
                 "relative_humidity_850": (40, 90), "u_component_of_wind_250": (0, 30), "land_sea_mask": (0.1, 0.5),
                 "lattitude": (-1, 1)}  # fmt: skip
    for key, (lo, hi) in plausible.items():
        assert lo < mean[key][0] < hi, (key, mean[key])
    assert 0 < std["geopotential_500"][0] < 0.05 * mean["geopotential_500"][0]  # small noise around the mean
    shard = E.load_shard(out / "train" / "2015_0.npz")
    assert shard["relative_humidity_50"].min() >= 0 and shard["relative_humidity_925"].max() <= 100
    assert shard["specific_humidity_50"].min() >= 0 and set(np.unique(shard["land_sea_mask"])) <= {0.0, 1.0}


def test_weatherbench_bad_input_is_refused(tmp_path):
    good = {"years": [2015], "steps_per_year": 2}
    cases = [({"years": []}, "years must be a non-empty"), ({"years": [2015, 2015]}, "duplicates"),
             ({"steps_per_year": 0}, "steps_per_year must be an int >= 1"),
             ({"steps_per_year": 8761}, r"do not fit in year\(s\) \[2015\]"),
             ({"folders": ["z500"]}, "unknown WeatherBench folder 'z500'"),
             ({"levels": [500, 123]}, "levels must be distinct WeatherBench pressure levels")]  # fmt: skip
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            R.write_weatherbench_mirror(tmp_path, **{**good, **change})
    assert not list(tmp_path.iterdir())


def test_weatherbench_single_level_extracts(tmp_path):
    R.write_weatherbench_mirror(tmp_path, years=[2000], steps_per_year=3, folders=["geopotential_500"],
                                levels=[500, 850])  # fmt: skip
    da = E.open_weatherbench(tmp_path / "weatherbench" / "5.625deg", "geopotential_500", [2000])
    assert da.dims == ("time", "lat", "lon") and int(da["level"]) == 500 and 5.3e4 < float(da.mean()) < 5.5e4


# ------------------------------------------------------------------------------------------------------------------
# ClimaX
# ------------------------------------------------------------------------------------------------------------------
TINY_CLIMAX = {"default_vars": ("geopotential_500", "temperature_850", "2m_temperature"), "img_size": (8, 16),
               "embed_dim": 32, "depth": 2, "num_heads": 4}  # fmt: skip
LIGHTNING_KEYS = ["epoch", "global_step", "pytorch-lightning_version", "state_dict", "loops", "callbacks",
                  "optimizer_states", "lr_schedulers", "hyper_parameters", "rehearsal"]  # fmt: skip


def test_tiny_climax_checkpoint_loads_strictly_and_forecasts(tmp_path):
    path = R.write_climax_checkpoint(tmp_path / "tiny.ckpt", seed=3, **TINY_CLIMAX)
    assert path == tmp_path / "tiny.ckpt" and os.listdir(tmp_path) == ["tiny.ckpt"]
    ckpt = torch.load(path, map_location="cpu", weights_only=True)  # plain containers: no pickle opt-in needed
    assert list(ckpt) == LIGHTNING_KEYS and ckpt["rehearsal"] == R.REHEARSAL_WEIGHTS
    assert ckpt["hyper_parameters"]["rehearsal"] == R.REHEARSAL_WEIGHTS and ckpt["hyper_parameters"]["seed"] == 3
    sd = ckpt["state_dict"]
    assert all(k.startswith("net.") for k in sd)
    assert sd["net.channel_embed"].shape == (1, 3, 32) and "net.channel_agg.in_proj_weight" in sd
    assert sd["net.blocks.1.attn.qkv.weight"].shape == (96, 32) and sd["net.head.4.weight"].shape == (3 * 4, 32)
    assert all(v.dtype == torch.float32 for v in sd.values())

    arch = dict(TINY_CLIMAX)
    model = C.build_climax(**arch, seed=9)
    assert not torch.equal(model.blocks[0].attn.qkv.weight, sd["net.blocks.0.attn.qkv.weight"])
    assert C.load_climax_checkpoint(model, path) == C.LoadResult([], [])  # strict
    assert torch.equal(model.var_embed, sd["net.channel_embed"])
    assert C.load_climax_checkpoint(C.build_climax(**arch), path, allow_pickle=True) == C.LoadResult([], [])
    x = torch.randn(2, 3, 8, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = model(x, C.lead_time_from_hours(72, batch=2))
    assert y.shape == (2, 3, 8, 16) and torch.isfinite(y).all() and y.std() > 0

    with pytest.raises(C.CheckpointMismatchError, match="unexpected key"):  # another variable list is refused
        C.load_climax_checkpoint(C.build_climax(**{**arch, "default_vars": ("geopotential_500",)}), path)
    again = R.write_climax_checkpoint(tmp_path / "again.ckpt", seed=3, **TINY_CLIMAX)
    assert torch.equal(torch.load(again, weights_only=True)["state_dict"]["net.head.4.weight"], sd["net.head.4.weight"])


def test_climax_defaults_are_the_full_architecture_and_bad_arguments_fail(tmp_path):
    arch = R.climax_arch()
    assert arch["default_vars"] == C.CLIMAX_DEFAULT_VARS and (arch["embed_dim"], arch["depth"], arch["num_heads"],
                                                                  arch["patch_size"]) == (1024, 8, 16, 2)  # fmt: skip
    with torch.device("meta"):  # shapes only, nothing written
        model = C.ClimaX(**arch)
    sd = model.state_dict()
    assert sum(v.numel() for v in sd.values()) == 108_088_512 and len(sd) == 209  # the paper's ~108 M
    with pytest.raises(ValueError, match=r"unknown ClimaX argument\(s\) \['layers'\]"):
        R.write_climax_checkpoint(tmp_path / "x.ckpt", layers=3)
    with pytest.raises(ValueError, match="multiple of 4"):
        R.write_climax_checkpoint(tmp_path / "x.ckpt", **{**TINY_CLIMAX, "embed_dim": 30})
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_full_size_climax_loads_through_the_era5_loader(tmp_path):
    """~4 s: write the full 5.625 deg checkpoint (432 MB) and load it with the ERA5 rules' loader (ClimaX())."""
    from stochattn.experiments import era5

    path = R.write_climax_checkpoint(tmp_path / "5.625deg.ckpt")
    net = era5.load_backbone(path, allow_pickle=True)  # as config.yaml runs it on the cluster
    assert sum(p.numel() for p in net.parameters()) == 108_088_512
    sd = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    assert len(sd) == 209 and torch.equal(sd["net.channel_query"], net.var_query)
    assert torch.equal(sd["net.blocks.7.mlp.fc2.weight"], net.blocks[7].mlp.fc2.weight)


# ------------------------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------------------------
def test_cli(tmp_path, capsys):
    argv = ["timesfm", str(tmp_path / "tfm"), "--seed", "4"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in TINY_TFM.items()]  # fmt: skip
    assert R.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == str(tmp_path / "tfm" / "model.safetensors") and out["dims"]["model_dims"] == 64
    assert out["sha256"] == sha256_file(out["path"]) and out["rehearsal"] == R.REHEARSAL_WEIGHTS
    T.load_timesfm_checkpoint(tiny_timesfm(0), out["path"])

    assert R.main(["climax", str(tmp_path / "c.ckpt"), "--embed-dim", "32", "--depth", "1", "--num-heads", "2",
                   "--default-vars", "geopotential_500", "2m_temperature"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["arch"]["default_vars"] == ["geopotential_500", "2m_temperature"] and out["arch"]["depth"] == 1
    net = C.ClimaX(default_vars=["geopotential_500", "2m_temperature"], embed_dim=32, depth=1, num_heads=2)
    assert C.load_climax_checkpoint(net, out["path"]) == C.LoadResult([], [])

    with pytest.raises(SystemExit):
        R.main(["weatherbench", str(tmp_path / "wb"), "--years", "2000", "--steps-per-year", "many"])
    # the module entry point, as a Snakemake rule calls it (a log file: plain progress lines, no tqdm bar)
    res = subprocess.run([sys.executable, "-m", "stochattn.rehearsal", "weatherbench", str(tmp_path / "wb"),
                          "--years", "2000", "--steps-per-year", "2", "--folders", "2m_temperature"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["files"] == 2 and "weatherbench rehearsal" in res.stderr
    written = tmp_path / "wb" / "weatherbench" / "5.625deg" / "2m_temperature" / "2m_temperature_2000_5.625deg.nc"
    assert written.is_file()
