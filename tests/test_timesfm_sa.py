"""TimesFM 2.5 backbone: reduced builder, public checkpoint layout and loader, the stochastic-attention adapter."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors.torch import save_file
from scipy.stats import norm
from timesfm.timesfm_2p5.timesfm_2p5_torch import TimesFM_2p5_200M_torch_module
from timesfm.torch import transformer as tfm_transformer

from stochattn import patch
from stochattn.attention import masked_attention_probs
from stochattn.backbones import timesfm as T
from stochattn.io import sha256_file
from stochattn.patch import StochasticAttention, attention_modules
from stochattn.rehearsal import save_timesfm_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed=0, **kw):
    return T.build_timesfm(**{"num_layers": 2, "model_dims": 64, "num_heads": 4, "seed": seed, **kw})


def public_keys(num_layers):
    """The tensor names of google/timesfm-2.5-200m-pytorch's model.safetensors (timesfm 3.0.2 loads the file with
    load_state_dict(strict=True) into TimesFM_2p5_200M_torch_module, so these are that module's names)."""
    layers = ("hidden_layer", "output_layer", "residual_layer")
    keys = [f"tokenizer.{layer}.{p}" for layer in layers for p in ("weight", "bias")]
    per_layer = ["pre_attn_ln.scale", "post_attn_ln.scale", "attn.qkv_proj.weight", "attn.out.weight",
                 "attn.query_ln.scale", "attn.key_ln.scale", "attn.per_dim_scale.per_dim_scale", "pre_ff_ln.scale",
                 "post_ff_ln.scale", "ff0.weight", "ff1.weight"]  # fmt: skip
    keys += [f"stacked_xf.{i}.{k}" for i in range(num_layers) for k in per_layer]
    keys += [f"output_projection_{head}.{layer}.weight" for head in ("point", "quantiles") for layer in layers]
    return keys


def series(batch=3, length=256, pad=(0, 100, 200), seed=0):
    """Random walks (B, T) with left padding of ``pad[b]`` steps (mask True, value 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, generator=g).cumsum(1)
    mask = torch.zeros(batch, length, dtype=torch.bool)
    for b, p in enumerate(pad[:batch]):
        mask[b, :p] = True
        x[b, :p] = 0.0
    return x, mask


def forward_outputs(model, x, mask):
    """The module's forward(inputs, masks) on normalised patches (as decode feeds it), all four outputs."""
    b = x.shape[0]
    inputs, masks = x.view(b, -1, 32), mask.view(b, -1, 32)
    mu, sigma = inputs.mean((1, 2), keepdim=True), inputs.std((1, 2), keepdim=True)
    with torch.no_grad():
        outs, _ = model(torch.where(masks, 0.0, (inputs - mu) / sigma), masks)
    return outs


# ----------------------------------------------------------------------------------------------------------------
# builders and checkpoint layout
# ----------------------------------------------------------------------------------------------------------------
def test_full_architecture_is_the_public_200m_layout():
    assert T.timesfm_config(20, 1280, 16) == T.Definition()
    with torch.device("meta"):
        full = TimesFM_2p5_200M_torch_module()
    sd = full.state_dict()
    assert list(sd) == public_keys(20)
    assert sd["stacked_xf.0.attn.qkv_proj.weight"].shape == (3840, 1280)
    assert sum(v.numel() for v in sd.values()) == 231_289_280  # 200M + the 30M continuous-quantile head


def test_reduced_model_is_the_same_class_family_and_trainable_from_scratch():
    model = T.build_timesfm(seed=0)  # the offline stand-in: 4 layers, d 256, 4 heads
    assert isinstance(model, TimesFM_2p5_200M_torch_module)
    sizes = (model.x, model.md, model.h, model.hd, model.p, model.o, model.q, model.aridx)
    assert sizes == (4, 256, 4, 64, 32, 128, 10, 5)
    assert sum(p.numel() for p in model.parameters()) == 3_118_592
    assert list(model.state_dict()) == public_keys(4)
    scales = [m.scale for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert len(scales) == 4 * 6 and all(bool((s == 1).all()) for s in scales)
    assert len(attention_modules(model)) == 4
    assert torch.equal(tiny(seed=3).stacked_xf[0].ff0.weight, tiny(seed=3).stacked_xf[0].ff0.weight)
    x, mask = series()
    y = T.point_forecast(model, x, mask, horizon=192)  # one autoregressive step
    assert y.shape == (3, 192) and torch.isfinite(y).all() and y.std() > 0


def test_checkpoint_round_trip_in_the_public_layout(tmp_path):
    src = tiny(seed=1)
    sd = src.state_dict()
    public = {name: sd[name].contiguous() for name in public_keys(2)}  # the real file's names (no renaming needed)
    assert set(public) == set(sd)
    assert save_timesfm_checkpoint(src, tmp_path) == tmp_path / "model.safetensors"  # the public file name

    dst = tiny(seed=2)
    assert not torch.equal(dst.tokenizer.hidden_layer.weight, src.tokenizer.hidden_layer.weight)
    T.load_timesfm_checkpoint(dst, tmp_path)  # a folder holding model.safetensors, as timesfm accepts
    for name, value in dst.state_dict().items():
        assert torch.equal(value, sd[name]), name
    x, mask = series()
    assert torch.equal(T.point_forecast(dst, x, mask, horizon=96), T.point_forecast(src, x, mask, horizon=96))

    # missing and unexpected keys are named; nothing is loaded
    broken = dict(public)
    del broken["stacked_xf.1.attn.key_ln.scale"]
    broken["stacked_xf.1.attn.query.weight"] = torch.zeros(64, 64)
    save_file(broken, str(tmp_path / "broken.safetensors"))
    fresh = tiny(seed=4)
    before = fresh.tokenizer.hidden_layer.weight.clone()
    missing = r"1 missing key\(s\): stacked_xf\.1\.attn\.key_ln\.scale"
    with pytest.raises(T.CheckpointMismatchError, match=missing) as err:
        T.load_timesfm_checkpoint(fresh, tmp_path / "broken.safetensors")
    assert "unexpected key(s): stacked_xf.1.attn.query.weight" in str(err.value)
    assert torch.equal(fresh.tokenizer.hidden_layer.weight, before)

    # another size: shape mismatches are named
    with pytest.raises(T.CheckpointMismatchError, match="shape mismatch"):
        T.load_timesfm_checkpoint(T.build_timesfm(2, 32, 4, seed=0), tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError):
        T.load_timesfm_checkpoint(dst, tmp_path / "absent.safetensors")


def test_fetch_fails_clearly_offline(tmp_path, monkeypatch):
    def offline(**kwargs):
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub ...")

    monkeypatch.setattr(T, "hf_hub_download", offline)
    with pytest.raises(T.CheckpointUnavailableError, match="cannot be reached") as err:
        T.fetch_timesfm_checkpoint(tmp_path)
    assert "google/timesfm-2.5-200m-pytorch/model.safetensors" in str(err.value)
    assert isinstance(err.value.__cause__, LocalEntryNotFoundError)


def test_fetch_records_and_verifies_sha256(tmp_path, monkeypatch):
    blob = tmp_path / "hub" / "model.safetensors"
    blob.parent.mkdir()
    blob.write_bytes(b"weights v1")
    calls = []

    def fake(**kwargs):
        calls.append(kwargs)
        return str(blob)

    monkeypatch.setattr(T, "hf_hub_download", fake)
    cache = tmp_path / "cache"
    assert T.fetch_timesfm_checkpoint(cache) == blob
    assert calls[0]["repo_id"] == "google/timesfm-2.5-200m-pytorch" and calls[0]["filename"] == "model.safetensors"
    (record_path,) = cache.glob("*.sha256.json")
    record = json.loads(record_path.read_text())
    assert record["sha256"] == sha256_file(blob) and record["revision"] == "main"
    assert T.fetch_timesfm_checkpoint(cache) == blob  # verified against the record
    blob.write_bytes(b"weights v2")
    with pytest.raises(ValueError, match="SHA-256"):
        T.fetch_timesfm_checkpoint(cache)
    with pytest.raises(ValueError, match="sha256 argument"):
        T.fetch_timesfm_checkpoint(tmp_path / "other", sha256="0" * 64)
    # the Hub's LFS id (the blob's name in the HF cache, one link from the snapshot) is a SHA-256 too
    repo = tmp_path / "third" / "models--google--timesfm-2.5-200m-pytorch"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / ("ab" * 32)).write_bytes(b"weights")
    snapshot = repo / "snapshots" / ("c" * 40) / "model.safetensors"
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(Path("..") / ".." / "blobs" / ("ab" * 32))
    monkeypatch.setattr(T, "hf_hub_download", lambda **kw: str(snapshot))
    with pytest.raises(ValueError, match="LFS id"):
        T.fetch_timesfm_checkpoint(tmp_path / "third")


def test_hub_blob_id_reads_one_link_level(tmp_path):
    """A Xet-backed repository's blobs/<sha256> links on into the shared store (named by the Xet hash): the LFS id
    is the first link's name, not the resolved file's (which made a healthy download look corrupt)."""
    content = b"weights"
    digest = hashlib.sha256(content).hexdigest()
    shared = tmp_path / "blobs" / "ef" / ("ef" * 32)
    shared.parent.mkdir(parents=True)
    shared.write_bytes(content)
    repo = tmp_path / "models--google--timesfm-2.5-200m-pytorch"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / digest).symlink_to(Path("..") / ".." / "blobs" / "ef" / ("ef" * 32))
    snapshot = repo / "snapshots" / ("c" * 40) / "model.safetensors"
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(Path("..") / ".." / "blobs" / digest)
    assert snapshot.resolve() == shared and T.hub_blob_id(snapshot) == digest
    assert T.hub_blob_id(shared) is None  # a copy (no link): nothing to compare


# ----------------------------------------------------------------------------------------------------------------
# stochastic attention adapter
# ----------------------------------------------------------------------------------------------------------------
def test_nu_none_is_bit_identical():
    model = tiny()
    x, mask = series()
    ref_fwd = forward_outputs(model, x, mask)
    ref_pf = T.point_forecast(model, x, mask, horizon=192)  # decode caches + an autoregressive step
    for nu in (None, [None, None], {"*": None}):
        with StochasticAttention(model, nu=nu):
            for got, want in zip(forward_outputs(model, x, mask), ref_fwd):
                assert torch.equal(got, want)
            assert torch.equal(T.point_forecast(model, x, mask, horizon=192), ref_pf)
    # after a stochastic run and removal the model is the original one again
    T.sa_forecast_samples(model, x, mask, horizon=96, nu=2, num_samples=2, generator=torch.Generator().manual_seed(0))
    default_fn = tfm_transformer._torch_dot_product_attention
    assert all(m.attention_fn is default_fn for m in attention_modules(model).values())
    assert torch.equal(T.point_forecast(model, x, mask, horizon=192), ref_pf)


@pytest.mark.parametrize("attention_fn", [tfm_transformer._torch_dot_product_attention,
                                          tfm_transformer._dot_product_attention])  # fmt: skip
def test_adapter_recomputes_the_modules_attention(monkeypatch, attention_fn):
    """With sampling replaced by the identity (weights = probabilities) the patched model equals timesfm's own."""
    model = tiny()
    for m in attention_modules(model).values():
        m.attention_fn = attention_fn
    x, mask = series()
    ref_fwd = forward_outputs(model, x, mask)
    ref_pf = T.point_forecast(model, x, mask, horizon=192)
    monkeypatch.setattr(patch.SAState, "attend", lambda state, probs, value: probs @ value)
    # timesfm's SDPA function goes through state.sdpa: the masked softmax at its mask and scale, times V
    monkeypatch.setattr(patch.SAState, "sdpa", lambda state, q, k, v, mask, causal, scale, gqa, nu:
                        masked_attention_probs(q, k, mask, causal, scale) @ v)  # fmt: skip
    with StochasticAttention(model, nu=1):
        got_fwd = forward_outputs(model, x, mask)
        got_pf = T.point_forecast(model, x, mask, horizon=192)
    for got, want in zip(got_fwd, ref_fwd):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_pf, ref_pf, rtol=1e-4, atol=1e-4)


def test_unknown_attention_function_is_refused():
    model = tiny()
    model.stacked_xf[0].attn.attention_fn = lambda q, k, v, mask=None: q
    x, mask = series()
    with StochasticAttention(model, nu=4), pytest.raises(NotImplementedError, match="attention functions"):
        T.point_forecast(model, x, mask, horizon=96)


def _attention_samples(nu, num_samples, seed=0):
    """Deterministic output (B, N, d) of layer 0's attention module and ``num_samples`` SA outputs of it, with a
    left-padded row (its first 3 query rows are fully masked)."""
    model = tiny()
    attn = model.stacked_xf[0].attn
    g = torch.Generator().manual_seed(123)
    h = torch.randn(2, 8, 64, generator=g)
    patch_mask = torch.zeros(2, 8, dtype=torch.bool)
    patch_mask[1, :3] = True
    with torch.no_grad():
        det = attn(inputs_q=h, patch_mask=patch_mask)[0]
        with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(seed)):
            tiled = attn(inputs_q=h.repeat(num_samples, 1, 1), patch_mask=patch_mask.repeat(num_samples, 1))[0]
    return det, tiled.view(num_samples, *det.shape)


@pytest.mark.parametrize("nu", [1, 8])
def test_attention_output_is_mean_preserving(nu):
    """E[(W/nu) V] = pi V and the output projection is linear: the sample mean converges to the deterministic
    output. Each element is compared within z standard errors, z Bonferroni-corrected over the elements for a 1e-3
    family-wise false-alarm rate (about 5 SE here)."""
    m = 4000
    det, samples = _attention_samples(nu, m)
    mean, se = samples.mean(0), samples.std(0) / m**0.5
    z = norm.isf(1e-3 / (2 * det.numel()))
    assert 4.5 < z < 6
    assert ((mean - det).abs() <= z * se + 1e-5).all()
    assert se.max() > 0
    # fully masked query rows (left padding): zero probabilities, zero output (out has no bias), no NaN
    assert torch.isfinite(samples).all()
    assert torch.equal(samples[:, 1, :3], torch.zeros_like(samples[:, 1, :3]))
    assert torch.equal(det[1, :3], torch.zeros_like(det[1, :3]))


def test_attention_variance_shrinks_like_one_over_nu():
    """Cov(W/nu) = (diag(pi) - pi pi^T) / nu, so the output's variance is exactly proportional to 1/nu."""
    total = {nu: _attention_samples(nu, 2000, seed=nu)[1].var(0).sum().item() for nu in (1, 4, 16)}
    assert total[1] > 0
    for nu in (4, 16):
        assert abs(total[nu] * nu / total[1] - 1) < 0.15, total


def test_left_padding_gives_no_nan_through_all_layers():
    model = tiny()
    x, mask = series(batch=3, length=512, pad=(0, 255, 480))  # 7 and 15 of 16 patches fully padded
    for nu in (1, 16, 512):
        with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(nu)):
            for out in forward_outputs(model, x, mask):
                assert torch.isfinite(out).all()
            assert torch.isfinite(T.point_forecast(model, x, mask, horizon=192)).all()


def test_sa_forecast_samples():
    model = tiny()
    x, mask = series()
    det = T.point_forecast(model, x, mask, horizon=192)

    def draw(nu, seed):
        return T.sa_forecast_samples(model, x, mask, horizon=192, nu=nu, num_samples=16,
                                     generator=torch.Generator().manual_seed(seed))  # fmt: skip

    s1 = draw(1, 0)
    assert s1.shape == (16, 3, 192) and torch.isfinite(s1).all()
    assert torch.equal(s1, draw(1, 0))  # reproducible from the generator
    spread = [draw(nu, 1).std(0).mean().item() for nu in (1, 16, 256)]
    assert spread[0] > spread[1] > spread[2] > 0
    # large nu approaches the deterministic forecast
    assert (draw(10_000, 2).mean(0) - det).abs().mean() < 0.1 * (s1.mean(0) - det).abs().mean() + 1e-3
    assert "forward" not in model.stacked_xf[0].attn.__dict__  # patch removed
