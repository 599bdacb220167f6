"""The ETT experiment's stages (stochattn.experiments.ett) and the differentiable TimesFM forecast they train.

The stand-in pretraining and window tests read the shared offline mirror of ETT-small (skipped where missing); the
forecast / LoRA / loss tests use tiny TimesFM modules built here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from stochattn.backbones import timesfm as tfm
from stochattn.data import ett as ett_data
from stochattn.experiments import ett, methods

MIRROR = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
HAVE_MIRROR = (MIRROR / "ETT-small" / "ETTh1.csv.gz").is_file()
needs_mirror = pytest.mark.skipif(not HAVE_MIRROR, reason=f"offline ETT mirror {MIRROR} not present")
TINY = {"num_layers": 1, "model_dims": 32, "num_heads": 2}


@pytest.fixture(scope="module")
def csvs(tmp_path_factory):
    if not HAVE_MIRROR:
        pytest.skip("offline ETT mirror not present")
    out = tmp_path_factory.mktemp("ett")
    return {n: ett_data.fetch_ett(n, out, mirrors=[MIRROR], allow_download=False) for n in ett_data.ETT_DATASETS}


# -- the differentiable forecast -----------------------------------------------------------------------------------
@pytest.mark.parametrize("horizon", [96, 192, 300])
def test_forecast_equals_timesfm_decode(horizon):
    """The autograd path (full causal pass, no cache) is timesfm's cached decode, AR steps and left padding too."""
    model = tfm.build_timesfm(2, 32, 2, seed=0)
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(3, 200, generator=gen).cumsum(1)  # 200: left-padded to 224
    mask = torch.zeros_like(context, dtype=torch.bool)
    mask[0, :40] = True  # the first series has 40 more padded steps
    got = tfm.forecast(model, context, mask, horizon=horizon)
    want = tfm.point_forecast(model, context, mask, horizon=horizon)
    assert got.shape == (3, horizon)
    # float32 round-off grows with each autoregressive step (measured up to 2.7e-5 at H = 300 on values ~1, on
    # one machine and not another); a wrong position, mask or normalisation errs by O(1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.requires_grad


def test_pretraining_loss_is_mse_plus_pinball_on_the_next_128_steps(monkeypatch):
    """Position i is scored against series[(i+1) p : (i+1) p + 128]; with zero outputs the loss is known."""
    model = tfm.build_timesfm(1, 32, 2, seed=0)
    series = torch.arange(2 * (64 + 128), dtype=torch.float32).reshape(2, 192) / 100
    captured = {}

    def zeros(module, context, mask=None):
        captured["context"] = context
        return torch.zeros(context.shape[0], context.shape[1] // 32, 128, 10)

    monkeypatch.setattr(tfm, "patch_outputs", zeros)
    loss = tfm.pretraining_loss(model, series, 64)
    torch.testing.assert_close(captured["context"], series[:, :64])
    targets = torch.stack([series[:, 32:160], series[:, 64:192]], dim=1)  # (B, 2 patches, 128)
    q = torch.tensor(model.config.quantiles)
    pinball = torch.maximum(q * targets[..., None], (q - 1) * targets[..., None]).mean()
    torch.testing.assert_close(loss, (targets**2).mean() + pinball)
    with pytest.raises(ValueError, match="context \\+ 128"):
        tfm.pretraining_loss(model, series[:, :100], 64)


def test_lora_starts_as_the_backbone_and_trains_only_adapters():
    from stochattn.lora import add_lora, lora_parameter_names

    model = tfm.build_timesfm(2, 32, 2, seed=0)
    x = torch.randn(4, 128).cumsum(1)
    before = tfm.forecast(model, x, horizon=96).detach()
    names = add_lora(model, tfm.LORA_TARGETS, r=4, alpha=4)
    assert names == lora_parameter_names(model) and len(names) == 2 * 4 * 2  # A, B x 4 targets x 2 layers
    assert all(p.requires_grad == (n in names) for n, p in model.named_parameters())
    net = tfm.TimesFMForecaster(model, 96)
    torch.testing.assert_close(net(x), before)  # B = 0
    net(x).pow(2).mean().backward()
    assert all((p.grad is not None) == (n in names) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match="already holds LoRA"):
        add_lora(model, tfm.LORA_TARGETS, r=4, alpha=4)
    with pytest.raises(ValueError, match="match no module"):
        add_lora(tfm.build_timesfm(1, 32, 2), ["no_such_layer"], r=4, alpha=4)


# -- data stages ------------------------------------------------------------------------------------------------------
@needs_mirror
def test_prepare_splits_validation_windows_into_val_and_cal(csvs, tmp_path):
    meta = ett.prepare(csvs["ETTh1"], "ETTh1", 96, tmp_path / "p.npz", context=512, adaptation_percent=10,
                       max_series={"train": 70, "val": 56, "test": 35})  # fmt: skip
    data = ett.load_windows(tmp_path / "p.npz")
    assert meta["n_series"] == {"train": 70, "val": 28, "cal": 28, "test": 35}
    assert data["x_test"].shape == (35, 512) and data["y_test"].shape == (35, 96)
    val_starts, cal_starts = set(data["val_start"]), set(data["cal_start"])
    assert not val_starts & cal_starts  # no window is used for both
    train_end = ett_data.adaptation_end("ETTh1", 512, 10)
    assert data["train_start"].max() + 512 + 96 <= train_end  # the 10 % rule
    lo, hi = ett_data.part_rows("ETTh1", "test")
    assert data["test_start"].min() + 512 == lo and data["test_start"].max() + 512 + 96 <= hi
    assert np.array_equal(data["test_column"][:7], np.arange(7))  # whole windows, window 0 kept


@needs_mirror
def test_standin_never_reads_the_evaluated_station(csvs, tmp_path, monkeypatch):
    """Every file the pretraining opens is recorded: none belongs to the evaluated station."""
    opened = []
    real = Path.read_bytes

    def spy(self):
        if self.suffix != ".py":  # pytest reads the sources of modules named *_test.py (scipy.stats') as they import
            opened.append(self.name)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    sources = {n: csvs[n] for n in ett_data.pretraining_sources("ETTh1")}
    meta = ett.pretrain_standin(
        sources, 1, tmp_path / "station1.pt", model=TINY, context=64, seed=0, progress=False,
        pretrain={"steps": 2, "batch_size": 4, "lr": 1e-3, "stride": 512, "val_fraction": 0.1, "eval_every": 1,
                  "synthetic": 6},
    )
    assert opened and all(name.startswith(("ETTh2", "ETTm2")) for name in opened), opened
    assert sorted(meta["sources"]) == ["ETTh2", "ETTm2"] and meta["stand_in"] is True
    # the synthetic series join the training windows only; the other station's windows are all still there
    real_train, real_val, _ = ett.pretraining_series(sources, 1, context=64, stride=512, val_fraction=0.1)
    assert meta["n_windows"] == {"train": len(real_train), "synthetic": 6, "val": len(real_val)}
    assert (tmp_path / "station1.pt").is_file()
    with pytest.raises(ValueError, match="evaluated station"):
        ett.pretraining_series({"ETTm1": csvs["ETTm1"]}, 1, context=64, stride=512, val_fraction=0.1)


def test_naive_forecasts():
    x = np.arange(20.0)[None]
    f = ett.naive_forecasts(x, 7, 3)
    assert np.array_equal(f["seasonal_naive"], [[17, 18, 19, 17, 18, 19, 17]])
    assert np.array_equal(f["last_value"], [[19.0] * 7])


# -- one configuration end to end (library calls) ---------------------------------------------------------------------
@needs_mirror
def test_adapt_and_methods_write_runs_in_the_contract(csvs, tmp_path):
    """Adapter (best epoch incl. epoch 0), then SA and one training baseline: finite samples (S, n, H), both SA
    operating points, evaluation pooled over series x steps."""
    from stochattn.experiments.evaluate import evaluate_split

    ett.prepare(csvs["ETTh1"], "ETTh1", 96, tmp_path / "p.npz", context=64, adaptation_percent=10,
                max_series={"train": 42, "val": 28, "test": 14})  # fmt: skip
    ett.pretrain_standin({n: csvs[n] for n in ("ETTh2", "ETTm2")}, 1, tmp_path / "bb.pt", model=TINY, context=64,
                         seed=0, progress=False, pretrain={"steps": 5, "batch_size": 8, "lr": 1e-3, "stride": 512,
                                                           "val_fraction": 0.1, "eval_every": 5})  # fmt: skip
    lora = {"targets": list(tfm.LORA_TARGETS), "r": 2, "alpha": 2}
    train = {"lr": 1e-3, "batch_size": 16, "max_epochs": 1, "patience": None}
    meta = ett.adapt(tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", dataset="ETTh1", horizon=96,
                     lora=lora, train=train, seed=0, progress=False)  # fmt: skip
    assert meta["best_epoch"] in (0, 1) and meta["val_rmse_adapted"] <= meta["val_rmse_zero_shot"]
    assert set(meta["test_mae"]) >= {"zero_shot_backbone", "adapted", "seasonal_naive", "last_value"}
    sa_cfg = {"budget": 3, "initial_design": 3, "num_batches": 1, "num_passes": 2, "batch_size": 8, "nu_min": 1,
              "nu_max": 256}  # fmt: skip
    ett.run_method("sa", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "sa", lora=lora,
                   train=train, method_cfg=sa_cfg, num_samples=4, seed=1, progress=False)  # fmt: skip
    ett.run_method("hsa", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "hsa",
                   lora=lora, train=train, method_cfg={"max_epochs": 1, "patience": None, "lr": 1e-3}, num_samples=4,
                   seed=2, progress=False)  # fmt: skip
    ett.run_method("swag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "swag",
                   lora=lora, train=train, method_cfg={"epochs": 2, "grid": [{"lr": 1e-3}, {"lr": 3e-3}]},
                   num_samples=4, seed=3, progress=False)  # fmt: skip
    sel = json.loads((tmp_path / "swag" / "meta.json").read_text())["selection"]
    # SWAG-LoRA's recipe by default: the adapter's AdamW, annealed from its training rate, 5 snapshots an epoch
    assert all(c["optimizer"] == "adamw" and c["start_lr"] == train["lr"] and c["anneal_epochs"] == 1
               and c["collect_per_epoch"] == 5 and c["batch_size"] == 16 for c in sel["grid"])  # fmt: skip
    assert sel["metric"] == "val_crps" and all(v is not None for v in sel["val_crps"] + sel["val_coverage_95"])
    ett.run_method("contextual_dropout", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt",
                   tmp_path / "contextual_dropout", lora=lora, train=train, num_samples=4, seed=4, progress=False,
                   method_cfg={"max_epochs": 1, "patience": None, "lr": 1e-3, "grid": [{"kl_weight": "elbo"}]})
    cd = json.loads((tmp_path / "contextual_dropout" / "meta.json").read_text())
    n_fit = len(np.load(tmp_path / "p.npz")["y_train"])  # the ELBO's weight 2 sigma^2 n / H, sigma^2 as estimated
    assert cd["elbo_kl_weight"] == pytest.approx(2 * cd["elbo_noise_variance"] * n_fit / 96)
    assert cd["selection"]["grid"][0]["kl_weight"] == "elbo"
    for m in ("sa", "sa_match", "hsa", "swag", "contextual_dropout"):
        run = np.load(tmp_path / m / "samples.npz")
        assert run["samples"].shape == (4, 14, 96) and run["cal_samples"].shape == (4, 14, 96)
        assert np.all(np.isfinite(run["samples"]))
    assert json.loads((tmp_path / "sa" / "meta.json").read_text())["operating_point"] == "loss_argmin"
    out = evaluate_split({m: tmp_path / m / "samples.npz" for m in ("sa", "sa_match", "hsa")},
                         {m: tmp_path / m / "metrics.json" for m in ("sa", "sa_match", "hsa")}, seed=0)  # fmt: skip
    assert out["hsa"]["n_test"] == 14 * 96 and "matched" in out["hsa"]
    with pytest.raises(ValueError, match="unknown method"):
        ett.run_method("mc_dropout", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "x",
                       lora=lora, train=train, method_cfg={}, num_samples=3, seed=0)  # fmt: skip
    # MultiSWAG-LoRA: member 0 is the SWAG-LoRA run, which keeps its posterior, its record (the candidates it
    # scored) and its share of the samples at each of them (the same when its grid is fitted one candidate a job);
    # member 1, one job, draws its share at each of them; the pool chooses one setting on the pooled validation
    # samples, the very samples of the same members run inside one job for the same seed
    ms_cfg = {"components": 2, "epochs": 1, "collect_per_epoch": 3, "grid": [{"lr": 1e-3}, {"lr": 3e-3}]}
    swag_cfg = {k: v for k, v in ms_cfg.items() if k != "components"}
    post = tmp_path / "swag_m" / "posterior.pt"
    swag_meta = ett.run_method("swag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt",
                               tmp_path / "swag_m", lora=lora, train=train, method_cfg=swag_cfg, num_samples=4, seed=5,
                               swag_member=post, multiswag_components=2, progress=False)  # fmt: skip
    rec = json.loads(post.with_suffix(".json").read_text())
    kept = methods.load_multiswag_component(post)
    assert [{k: v.shape for k, v in d.items()} for d in kept["draws"]] == [
        {"val": (2, 14, 96), "test": (2, 14, 96), "cal": (2, 14, 96)}] * 2  # its share, 2 of 4, at both rates
    np.testing.assert_allclose(  # at SWAG's choice: the first rows of its own samples
        np.load(tmp_path / "swag_m" / "samples.npz")["samples"][:2],
        methods.to_original(kept["draws"][swag_meta["selection"]["chosen"]["index"]]["test"].numpy(),
                            ett.load_windows(tmp_path / "p.npz")), rtol=1e-5, atol=1e-6)  # fmt: skip
    paths = [tmp_path / "swag_c" / f"{k}.pt" for k in range(2)]
    for k, path in enumerate(paths):
        ett.fit_candidate("swag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", path, index=k,
                          lora=lora, train=train, method_cfg=swag_cfg, num_samples=4, seed=5, progress=False)
    ett.run_method("swag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "swag_s",
                   lora=lora, train=train, method_cfg=swag_cfg, num_samples=4, seed=5, candidates=paths,
                   swag_member=tmp_path / "swag_s" / "posterior.pt", multiswag_components=2, progress=False)
    for a, b in zip(kept["draws"], methods.load_multiswag_component(tmp_path / "swag_s" / "posterior.pt")["draws"]):
        for part in ("val", "test", "cal"):
            torch.testing.assert_close(a[part], b[part], rtol=1e-5, atol=1e-6)
    adapter_seconds = json.loads((tmp_path / "adapter.json").read_text())["seconds"]
    assert rec["component"] == 0 and rec["selection"]["member_of"] == "swag"
    assert rec["seconds"] == pytest.approx(adapter_seconds + swag_meta["seconds"]["train"])
    m1 = tmp_path / "members" / "1.pt"
    rec1 = ett.train_multiswag_member(tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", m1, component=1,
                                      lora=lora, train=train, method_cfg=ms_cfg, num_samples=4, seed=5,
                                      first_path=post.with_suffix(".json"), progress=False)  # fmt: skip
    assert rec1["component"] == 1 and rec1["grid"] == rec["selection"]["grid"] and len(rec1["grid"]) == 2
    for name, kw in (("ms_jobs", {"members": [post, m1]}), ("ms_one_job", {})):
        ett.run_method("multiswag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / name,
                       lora=lora, train=train, method_cfg=ms_cfg, num_samples=4, seed=5, progress=False, **kw)
    jobs, one = np.load(tmp_path / "ms_jobs" / "samples.npz"), np.load(tmp_path / "ms_one_job" / "samples.npz")
    np.testing.assert_allclose(jobs["samples"], one["samples"], rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(jobs["samples"])) and np.std(jobs["samples"], axis=0).mean() > 0
    sel = json.loads((tmp_path / "ms_jobs" / "meta.json").read_text())["selection"]
    assert sel["grid"] == rec1["grid"] and len(sel["val_crps"]) == 2 and sel["chosen_on"].startswith("pooled")
    with pytest.raises(ValueError, match="member 0"):
        ett.train_multiswag_member(tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "m.pt",
                                   component=0, lora=lora, train=train, method_cfg=ms_cfg, num_samples=4, seed=5,
                                   first_path=post.with_suffix(".json"))  # fmt: skip
    with pytest.raises(ValueError, match="swag_member"):
        ett.run_method("hsa", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "x",
                       lora=lora, train=train, method_cfg={}, num_samples=3, seed=0, swag_member=post,
                       multiswag_components=2)  # fmt: skip
    with pytest.raises(ValueError, match="needs multiswag_components"):
        ett.run_method("swag", tmp_path / "p.npz", tmp_path / "bb.pt", tmp_path / "adapter.pt", tmp_path / "x",
                       lora=lora, train=train, method_cfg={}, num_samples=3, seed=0, swag_member=post)  # fmt: skip
