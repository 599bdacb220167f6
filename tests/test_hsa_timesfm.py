"""Tests for stochattn.baselines.hsa_timesfm (HSA inside TimesFM 2.5's attention) and the masked HSA weights of
stochattn.baselines.hsa it is built on. Tiny models (2 layers, d 64, 2 heads), fixed seeds."""

from __future__ import annotations

import pytest
import torch
from timesfm.torch import transformer as tfm_transformer
from torch import nn

from stochattn.backbones.timesfm import build_timesfm, point_forecast
from stochattn.baselines.hsa import (
    HSAAttentionBase,
    HierarchicalStochasticAttention,
    gumbel_noise,
    hsa_attention_weights,
    hsa_generator,
    hsa_samples,
)
from stochattn.baselines.hsa_timesfm import TimesFMHSAAttention, add_hsa_to_timesfm, remove_hsa_from_timesfm

pytestmark = pytest.mark.usefixtures("one_thread")

B, L, H, D = 3, 6, 2, 8
HORIZON = 24


def _tiny(seed: int = 0):
    return build_timesfm(num_layers=2, model_dims=64, num_heads=2, seed=seed)


def _qkv(seed: int = 0, s: int = L):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, L, H, D, generator=g), torch.randn(B, s, H, D, generator=g),
            torch.randn(B, s, H, D, generator=g))  # fmt: skip


def _mask(num_masked=(0, 2, 4), kv_length: int = 0):
    """timesfm's own mask (B, 1, L, S): causal + left padding; rows < num_masked attend to nothing."""
    return tfm_transformer.make_attn_mask(L, torch.tensor(num_masked), kv_length=kv_length)


def _context(seed: int = 0, t: int = 100, pads=(0, 40, 70)):
    """Left-padded contexts (B, t) and their padding mask (True = padding), as point_forecast takes them."""
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randn(len(pads), t, generator=g).cumsum(-1)
    mask = torch.zeros(len(pads), t, dtype=torch.bool)
    for i, p in enumerate(pads):
        mask[i, :p] = True
        ctx[i, :p] = 0.0
    return ctx, mask


class _Forecaster(nn.Module):
    """context (B, T) -> point forecast (B, HORIZON) of a TimesFM module."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        return point_forecast(self.backbone, context, horizon=HORIZON)


# --------------------------------------------------------------------------------------------- attention weights


@pytest.mark.parametrize("hard", [False, True])
def test_weights_masked_keys_zero_rows_on_simplex_fully_masked_rows_zero(hard):
    q, k, v = _qkv(1)
    mask = _mask()
    hsa = TimesFMHSAAttention(D, n_centroids=3, hard=hard, init_generator=torch.Generator().manual_seed(0))
    w = hsa.attention_weights(q, k, mask)  # (B, H, L, S)
    assert w.shape == (B, H, L, L)
    full = mask.expand_as(w)
    assert torch.equal(w[~full], torch.zeros_like(w[~full]))  # exactly 0 on masked keys
    attended = full.any(-1)
    assert (~attended).any() and attended.any()  # both kinds of rows occur
    assert torch.isfinite(w).all() and (w >= 0).all()
    torch.testing.assert_close(w.sum(-1)[attended], torch.ones(int(attended.sum())), rtol=0, atol=1e-6)
    assert torch.equal(w[~attended], torch.zeros_like(w[~attended]))  # fully masked rows: all zero
    if hard:  # one-hot on the attended keys
        assert torch.equal(w.max(-1).values[attended], torch.ones(int(attended.sum())))
        assert torch.equal((w > 0).sum(-1)[attended], torch.ones(int(attended.sum()), dtype=torch.long))

    out = hsa(q, k, v, mask=mask)
    assert out.shape == (B, L, H, D) and torch.isfinite(out).all()
    rows_empty = ~mask[:, 0].any(-1)  # (B, L)
    assert torch.equal(out[rows_empty], torch.zeros_like(out[rows_empty]))  # zero output, as timesfm's SDPA


def test_fully_masked_rows_give_finite_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv(2))
    hsa = TimesFMHSAAttention(D, init_generator=torch.Generator().manual_seed(0))
    hsa(q, k, v, mask=_mask()).square().sum().backward()
    for t in (q, k, v, hsa.centroids):
        assert torch.isfinite(t.grad).all()
    assert hsa.centroids.grad.abs().sum() > 0


def test_forward_matches_closed_form_with_same_noise():
    """Level 1 noise (B, H, S, k) first, then level 2 (B, H, L, S); logits Q K~^T with scale 1; masked softmax."""
    q, k, v = _qkv(3, s=9)
    mask = _mask(kv_length=9)  # decode-cache layout: more keys than queries
    hsa = TimesFMHSAAttention(D, n_centroids=3, tau1=0.7, tau2=1.3, init_generator=torch.Generator().manual_seed(1))
    with hsa_generator(hsa, torch.Generator().manual_seed(7)):
        out = hsa(q, k, v, mask=mask)
    g = torch.Generator().manual_seed(7)
    qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    C = hsa.centroids.detach()
    prob = torch.softmax((kh @ C + gumbel_noise((B, H, 9, 3), generator=g)) / 0.7, dim=-1)
    logits = (qh @ (prob @ C.T).transpose(-2, -1) + gumbel_noise((B, H, L, 9), generator=g)) / 1.3
    w = torch.nan_to_num(torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1), nan=0.0)
    torch.testing.assert_close(out, (w @ vh).permute(0, 2, 1, 3), rtol=1e-5, atol=1e-6)


def test_small_temperatures_give_one_hot_weights_on_attended_keys():
    q, k, _ = _qkv(4)
    mask = _mask()
    w = hsa_attention_weights(q.transpose(1, 2), k.transpose(1, 2), torch.rand(D, 2) - 0.5, tau1=1e-4, tau2=1e-4,
                              mask=mask, generator=torch.Generator().manual_seed(0))  # fmt: skip
    attended = mask.expand_as(w).any(-1)
    assert w.max(-1).values[attended].min() > 0.999
    assert torch.equal(w[~mask.expand_as(w)], torch.zeros(int((~mask.expand_as(w)).sum())))


def test_hsa_attention_weights_checks_mask():
    q, k, _ = _qkv(5)
    C = torch.rand(D, 2) - 0.5
    with pytest.raises(TypeError, match="bool"):
        hsa_attention_weights(q, k, C, mask=torch.ones(L, L))
    with pytest.raises(ValueError, match="broadcast"):
        hsa_attention_weights(q, k, C, mask=torch.ones(L, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="centroids"):
        hsa_attention_weights(q, k, torch.rand(D + 1, 2))
    with pytest.raises(ValueError, match="head_dim"):
        TimesFMHSAAttention(D + 2)(q, k, k)


# -------------------------------------------------------------------------------------------------- whole model


def test_install_names_parameters_and_errors():
    model = _tiny()
    n_before = len(model.state_dict())
    names = add_hsa_to_timesfm(model, n_centroids=3, seed=0)
    assert names == ["stacked_xf.0.attn", "stacked_xf.1.attn"]
    cents = [n for n, _ in model.named_parameters() if "centroids" in n]
    assert cents == ["stacked_xf.0.attn.attention_fn.centroids", "stacked_xf.1.attn.attention_fn.centroids"]
    assert set(model.state_dict()) - {*cents} == set(_tiny().state_dict()) and len(model.state_dict()) == n_before + 2
    c0 = model.stacked_xf[0].attn.attention_fn.centroids
    assert c0.shape == (32, 3) and c0.abs().max() <= 0.5 and c0.requires_grad
    assert not torch.equal(c0, model.stacked_xf[1].attn.attention_fn.centroids)  # one draw per layer
    # same seed -> same centroids; no other parameter touched
    other = _tiny()
    add_hsa_to_timesfm(other, n_centroids=3, seed=0)
    assert torch.equal(other.state_dict()["stacked_xf.1.attn.attention_fn.centroids"],
                       model.state_dict()["stacked_xf.1.attn.attention_fn.centroids"])  # fmt: skip
    with pytest.raises(ValueError, match="already installed"):
        add_hsa_to_timesfm(model)
    with pytest.raises(ValueError, match="no timesfm"):
        add_hsa_to_timesfm(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no HSA installed"):
        remove_hsa_from_timesfm(_tiny())


def test_install_remove_round_trip_restores_deterministic_outputs():
    model = _tiny()
    ctx, mask = _context()
    ref = point_forecast(model, ctx, mask, horizon=HORIZON)
    keys = list(model.state_dict())
    add_hsa_to_timesfm(model, seed=0)
    assert not torch.allclose(point_forecast(model, ctx, mask, horizon=HORIZON), ref)
    assert remove_hsa_from_timesfm(model) == ["stacked_xf.0.attn", "stacked_xf.1.attn"]
    assert model.stacked_xf[0].attn.attention_fn is tfm_transformer._torch_dot_product_attention
    assert list(model.state_dict()) == keys
    assert torch.equal(point_forecast(model, ctx, mask, horizon=HORIZON), ref)
    add_hsa_to_timesfm(model, seed=0)  # can be installed again after removal


def test_left_padded_forecasts_finite_stochastic_and_reproducible():
    model = _tiny()
    add_hsa_to_timesfm(model, seed=0)
    ctx, mask = _context()
    a = point_forecast(model, ctx, mask, horizon=136)  # > 128: one autoregressive step through the decode cache
    b = point_forecast(model, ctx, mask, horizon=136)
    assert a.shape == (3, 136) and torch.isfinite(a).all() and torch.isfinite(b).all()
    assert ((a - b).abs().amax(-1) > 1e-4).all()  # stochastic in eval mode, every series
    outs = []
    for _ in range(2):
        with hsa_generator(model, torch.Generator().manual_seed(11)):
            outs.append(point_forecast(model, ctx, mask, horizon=136))
    assert torch.equal(outs[0], outs[1])
    assert all(m.generator is None for m in model.modules() if isinstance(m, TimesFMHSAAttention))


def test_padded_patches_do_not_leak_into_real_patches():
    """With the same noise, changing the padded inputs (and so the padded tokens, keys and values of every layer)
    leaves every real patch's output unchanged, and the padded rows stay finite."""
    model = _tiny()
    add_hsa_to_timesfm(model, seed=0)
    n_patches, n_pad = 4, (0, 1, 3)
    g = torch.Generator().manual_seed(2)
    inputs = torch.randn(3, n_patches, 32, generator=g)
    masks = torch.zeros(3, n_patches, 32, dtype=torch.bool)
    for i, p in enumerate(n_pad):
        masks[i, :p] = True
    other = torch.where(masks, 100 * torch.randn(inputs.shape, generator=g), inputs)
    outs = []
    for x in (inputs, other):
        with hsa_generator(model, torch.Generator().manual_seed(5)):
            outs.append(model(x, masks)[0][2])  # output_ts (B, N, 1280)
    assert all(torch.isfinite(o).all() for o in outs)
    real = ~masks[..., -1]
    assert not torch.allclose(outs[0][~real], outs[1][~real])  # the padded tokens did change
    torch.testing.assert_close(outs[0][real], outs[1][real], rtol=0, atol=1e-6)


def test_gradients_reach_centroids_and_qkv_weights():
    model = _tiny().train()
    add_hsa_to_timesfm(model, seed=0)
    g = torch.Generator().manual_seed(3)
    inputs = torch.randn(2, 3, 32, generator=g)
    masks = torch.zeros(2, 3, 32, dtype=torch.bool)
    masks[1, :1] = True  # a fully masked query row
    with hsa_generator(model, torch.Generator().manual_seed(0)):
        model(inputs, masks)[0][2].square().mean().backward()
    for name, p in model.named_parameters():
        if "centroids" in name or "qkv_proj" in name:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert p.grad.abs().sum() > 0, name
    assert sum("centroids" in n for n, _ in model.named_parameters()) == 2


def test_peft_wrapped_model_trains_lora_and_centroids():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_tiny().train(), peft.LoraConfig(r=4, target_modules=["qkv_proj"]))
    names = add_hsa_to_timesfm(model, seed=0)
    assert names == ["base_model.model.stacked_xf.0.attn", "base_model.model.stacked_xf.1.attn"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {n for n in trainable if "centroids" in n} == {f"{n}.attention_fn.centroids" for n in names}
    inputs = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(4))
    model(inputs, torch.zeros(2, 3, 32, dtype=torch.bool))[0][2].square().mean().backward()
    for n, p in model.named_parameters():
        if "centroids" in n or "lora_B" in n:  # lora_A gets no gradient while lora_B is at its zero init
            assert p.grad is not None and p.grad.abs().sum() > 0, n


def test_hsa_samples_on_wrapped_forecast():
    model = _Forecaster(_tiny())
    assert add_hsa_to_timesfm(model, seed=0) == ["backbone.stacked_xf.0.attn", "backbone.stacked_xf.1.attn"]
    model.train()
    ctx, _ = _context(pads=(0, 0, 0))
    s = hsa_samples(model, ctx, 5, generator=3, batch_size=6)  # 6 rows per pass -> chunked
    assert s.shape == (5, 3, HORIZON) and torch.isfinite(s).all()
    assert model.training  # modes restored
    assert (s.std(0).amin(-1) > 0).all()  # the samples differ
    assert torch.equal(s, hsa_samples(model, ctx, 5, generator=3, batch_size=6))
    assert not torch.equal(s, hsa_samples(model, ctx, 5, generator=4, batch_size=6))


def test_both_hsa_modules_share_the_base_class():
    assert issubclass(TimesFMHSAAttention, HSAAttentionBase)
    assert issubclass(HierarchicalStochasticAttention, HSAAttentionBase)
