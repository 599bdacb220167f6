"""The ERA5 experiment's stages on a tiny synthetic data set in WeatherBench's layout: pairs, the stand-in
pretraining, LoRA adaptation, the methods (shared with ETT), field scores and HSA inside ClimaX."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stochattn.backbones.climax import ClimaXForecaster, build_climax
from stochattn.baselines.hsa_climax import ClimaXHSAAttention, add_hsa_to_climax
from stochattn.data import era5 as era5_data
from stochattn.experiments import era5

KEYS = ["geopotential_500", "geopotential_850", "temperature_500", "temperature_850"]
MODEL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "decoder_depth": 1, "drop_path": 0.0,
         "drop_rate": 0.0}  # fmt: skip
LORA = {"targets": ["attn.qkv", "mlp.fc2"], "r": 2, "alpha": 2}
TRAIN = {"lr": 1e-3, "batch_size": 8, "max_epochs": 1, "patience": None}


def _write_climate(root, years_days, seed):
    rng = np.random.default_rng(seed)
    lat = np.deg2rad(era5_data.LAT)[:, None]
    lon = np.deg2rad(era5_data.LON)[None, :]
    for year, days in years_days.items():
        n = days * 4
        times = np.datetime64(f"{year}-01-01T00") + np.arange(n) * np.timedelta64(6, "h")
        t = np.arange(n)[:, None, None, None]
        for folder, short, base, amp in (("geopotential", "z", 54000.0, 900.0), ("temperature", "t", 260.0, 10.0)):
            wave = np.cos(lat) * np.sin(2 * lon - 0.3 * t + np.array([0.0, 1.0])[None, :, None, None])
            values = base + amp * wave + rng.normal(0, 0.05 * amp, (n, 2, 32, 64))
            era5_data.write_weatherbench_file(era5_data.weatherbench_path(root, folder, year), folder, short,
                                              values, times, levels=[500, 850])  # fmt: skip


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    root = tmp_path_factory.mktemp("era5x")
    _write_climate(root / "raw", {2001: 8, 2002: 12, 2003: 5}, 0)
    proc = root / "proc"
    era5_data.preprocess_climax(root / "raw", proc, ["geopotential", "temperature"],
                                {"train": [2001], "val": [2002], "test": [2003]}, num_shards=1,
                                constants={})  # fmt: skip
    pre = {"steps": 4, "batch_size": 4, "lr": 1e-3, "warmup": 1, "eval_every": 2, "lead_hours": [6, 72],
           "val_pairs": 4}  # fmt: skip
    backbone = era5.pretrain_standin(proc, root / "bb.pt", model=MODEL, pretrain=pre, seed=0, progress=False)
    prepared = era5.prepare(proc, root / "pairs.npz", variables=KEYS, lead_hours=72,
                            max_pairs={"train": None, "val": None, "test": 4})  # fmt: skip
    adapter = era5.adapt(root / "pairs.npz", root / "bb.pt", root / "adapter.pt", lora=LORA, train=TRAIN, seed=1,
                         progress=False)  # fmt: skip
    return {"root": root, "proc": proc, "backbone": backbone, "prepared": prepared, "adapter": adapter}


def test_pairs_layout_and_disjoint_val_cal(stages):
    data = era5.load_pairs(stages["root"] / "pairs.npz")
    assert data["x_train"].shape == (32 - 12, 4 * 32 * 64) and data["y_test"].shape == (4, 2048)
    # 12 validation days = 48 steps, 36 pairs: val the first 18, cal those from one lead (12 steps) after the cut
    assert stages["prepared"]["n_pairs"] == {"train": 20, "val": 18, "cal": 6, "test": 4}
    assert list(data["val_t"]) == list(range(18)) and list(data["cal_t"]) == list(range(30, 36))
    assert data["val_t"].max() + 12 < data["cal_t"].min()  # no field is both a val and a cal input or target
    # targets are Z500 at t + 72 h, normalised with the training statistics
    mean, std = era5_data.load_normalisation(stages["proc"])
    shard = era5_data.load_shards(stages["proc"], "test", ["geopotential_500"])[0]["geopotential_500"]
    t = int(data["test_t"][1])
    np.testing.assert_allclose(data["y_test"][1] * data["y_std"] + data["y_mean"], shard[t + 12, 0].ravel(),
                               rtol=1e-5)  # fmt: skip
    assert float(data["y_mean"]) == pytest.approx(float(mean["geopotential_500"][0]))
    np.testing.assert_allclose(data["persistence_test"][1], shard[t, 0].ravel(), rtol=1e-5)


def test_read_pairs_caps_shard_by_shard_as_all_pairs_would(stages):
    shards = era5_data.load_shards(stages["proc"], "train", KEYS)
    every = era5_data.forecast_pairs(shards, 12, in_variables=KEYS, out_variables=["geopotential_500"])
    capped = era5.read_pairs(stages["proc"], "train", KEYS, 12, cap=5)
    rows = np.linspace(0, every.n_pairs - 1, 5).round().astype(int)
    np.testing.assert_array_equal(capped["t"], every.t[rows])
    np.testing.assert_array_equal(capped["step"], every.t[rows])  # one shard: its index is the partition's
    np.testing.assert_allclose(capped["y"], every.y[rows, 0])
    mean, std = era5_data.load_normalisation(stages["proc"])
    np.testing.assert_allclose(capped["x"][:, 1] * std[KEYS[1]][0] + mean[KEYS[1]][0], every.x[rows, 1], rtol=1e-5)
    with pytest.raises(ValueError, match="no forecast pair"):
        era5.read_pairs(stages["proc"], "test", KEYS, 40)


def test_val_cal_split_keeps_a_lead_between_the_blocks():
    parts = era5.val_cal_split(np.arange(0, 40, 2), 6)  # steps 0, 2, ..., 38; cut at 20
    assert list(parts["val"]) == list(range(10)) and list(parts["cal"]) == list(range(13, 20))
    with pytest.raises(ValueError, match="cannot give val and cal blocks"):
        era5.val_cal_split(np.arange(8), 12)
    with pytest.raises(ValueError, match="increasing"):
        era5.val_cal_split(np.array([3, 1, 2]), 1)


def test_pretraining_reads_its_own_climate_and_lead_validation(stages):
    meta = stages["backbone"]
    assert meta["source"]["source_root"].endswith("raw") and meta["variables"] == KEYS
    assert [h["step"] for h in meta["history"]] == [2, 4] and np.isfinite(meta["best_val_z500_rmse_72h"])
    net = era5.load_backbone(stages["root"] / "bb.pt")
    assert net.default_vars == tuple(KEYS) and not net.training


def test_adapter_starts_as_the_backbone_and_skill_is_recorded(stages):
    skill = stages["adapter"]["test_skill"]
    assert set(skill) == {"backbone", "adapted", "persistence", "climatology"}
    assert stages["adapter"]["persistence_over_climatology_rmse"] == pytest.approx(
        skill["persistence"]["rmse"] / skill["climatology"]["rmse"])
    fresh = era5.lora_forecaster(stages["root"] / "bb.pt", KEYS, 72, LORA, seed=5)
    plain = ClimaXForecaster(era5.load_backbone(stages["root"] / "bb.pt"), KEYS, "geopotential_500", 72)
    x = torch.as_tensor(era5.load_pairs(stages["root"] / "pairs.npz")["x_test"])
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), plain(x))
    assert all("lora_" in n for n, p in fresh.named_parameters() if p.requires_grad)


def test_methods_write_runs_and_field_scores(stages):
    root = stages["root"]
    sa_cfg = {"budget": 4, "initial_design": 3, "num_batches": 1, "num_passes": 2, "batch_size": 4, "nu_min": 1,
              "nu_max": 64}  # fmt: skip
    era5.run_method("sa", root / "pairs.npz", root / "bb.pt", root / "adapter.pt", root / "runs" / "sa", lora=LORA,
                    train=TRAIN, method_cfg=sa_cfg, num_samples=3, seed=2, sa_sites=("blocks",), progress=False)
    era5.run_method("hsa", root / "pairs.npz", root / "bb.pt", root / "adapter.pt", root / "runs" / "hsa",
                    lora=LORA, train=TRAIN, method_cfg={"max_epochs": 1, "patience": None}, num_samples=3, seed=2,
                    progress=False)  # fmt: skip
    for m in ("sa", "sa_match", "hsa"):
        run = np.load(root / "runs" / m / "samples.npz")
        assert run["samples"].shape == (3, 4, 2048) and np.all(np.isfinite(run["samples"]))
        assert 40000 < run["y"].mean() < 70000  # m^2 s^-2
    meta = json.loads((root / "runs" / "sa" / "meta.json").read_text())
    assert meta["sa_sites"] == ["blocks"]
    out = era5.spatial_metrics(root / "runs" / "sa" / "samples.npz", root / "pairs.npz")
    assert out["crps"] == pytest.approx(out["crps_error"] - out["crps_spread"], rel=1e-6)
    run = np.load(root / "runs" / "sa" / "samples.npz")
    single = np.mean([era5.field_skill(s, run["y"], era5.load_pairs(root / "pairs.npz"))["rmse"]
                      for s in run["samples"]])  # fmt: skip
    assert out["rmse_single_sample"] == pytest.approx(single)
    with pytest.raises(ValueError, match="unknown SA site"):
        era5.setup(root / "bb.pt", root / "adapter.pt", LORA, TRAIN, sa_sites=("heads",))
    with pytest.raises(ValueError, match="unknown method"):
        era5.run_method("mc_dropout", root / "x.npz", root / "bb.pt", root / "adapter.pt", root / "y", lora=LORA,
                        train=TRAIN, method_cfg={}, num_samples=3, seed=0)  # fmt: skip


def test_hsa_inside_climax_samples_and_keeps_the_weights():
    net = build_climax(("a", "b"), patch_size=8, embed_dim=32, depth=2, num_heads=2, seed=0)
    before = {n: p.clone() for n, p in net.named_parameters()}
    names = add_hsa_to_climax(net, seed=3)
    assert names == ["blocks.0.attn", "blocks.1.attn"]
    assert all(isinstance(b.attn, ClimaXHSAAttention) for b in net.blocks)
    for n, p in before.items():
        torch.testing.assert_close(dict(net.named_parameters())[n.replace(".attn.", ".attn.attention.")], p)
    x = torch.randn(2, 2, 32, 64)
    with torch.no_grad():
        a, b = net(x, 0.72), net(x, 0.72)
    assert not torch.equal(a, b) and torch.isfinite(a).all()
    with pytest.raises(ValueError, match="already"):
        add_hsa_to_climax(net)
