"""Tests for stochattn.baselines.hsa (Hierarchical Stochastic Attention baseline)."""

from __future__ import annotations

import math

import pytest
import torch
from rtdl_revisiting_models import FTTransformer, MultiheadAttention
from torch import nn

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.baselines.hsa import (
    HierarchicalStochasticAttention,
    gumbel_noise,
    gumbel_softmax,
    hsa_centroid_keys,
    hsa_ft_transformer,
    hsa_generator,
    hsa_samples,
    replace_attention_with_hsa,
)
from stochattn.training import fit_regressor

D, H = 16, 4


def _hsa(**kw) -> HierarchicalStochasticAttention:
    torch.manual_seed(0)
    kw.setdefault("dropout", 0.0)
    return HierarchicalStochasticAttention(d_embedding=D, n_heads=H, **kw).eval()


def _ft_kwargs(**kw) -> dict:
    base = dict(
        d_out=1,
        n_blocks=2,
        d_block=D,
        attention_n_heads=H,
        attention_dropout=0.1,
        ffn_d_hidden=None,
        ffn_d_hidden_multiplier=2.0,
        ffn_dropout=0.0,
        residual_dropout=0.0,
    )
    base.update(kw)
    return base


def _small_ft(**kw) -> dict:
    """Arguments of the project's build_ft_transformer for a tiny model."""
    base = dict(
        n_blocks=2,
        d_block=D,
        attention_n_heads=H,
        attention_dropout=0.1,
        ffn_d_hidden_multiplier=2.0,
        ffn_dropout=0.0,
        residual_dropout=0.0,
        seed=0,
    )
    base.update(kw)
    return base


# ----------------------------------------------------------------------------------------------- module basics


@pytest.mark.parametrize("n_q,n_k", [(5, 5), (1, 7), (3, 6)])
def test_output_shape_matches_rtdl(n_q, n_k):
    torch.manual_seed(1)
    x_q, x_kv = torch.randn(2, n_q, D), torch.randn(2, n_k, D)
    ref = MultiheadAttention(d_embedding=D, n_heads=H, dropout=0.0)
    hsa = _hsa()
    assert hsa(x_q, x_kv).shape == ref(x_q, x_kv).shape == (2, n_q, D)
    assert hsa.attention_weights(x_q, x_kv).shape == (2 * H, n_q, n_k)
    # one head: no output mixing layer, as rtdl
    one = HierarchicalStochasticAttention(d_embedding=D, n_heads=1, dropout=0.0)
    assert one.W_out is None and one(x_q, x_kv).shape == (2, n_q, D)


def test_eval_mode_is_stochastic_and_generator_reproducible():
    torch.manual_seed(2)
    x = torch.randn(3, 6, D)
    hsa = _hsa()
    assert not hsa.training
    a, b = hsa(x, x), hsa(x, x)
    assert (a - b).abs().max() > 1e-3  # Gumbel sampling stays on at test time
    outs = []
    for _ in range(2):
        with hsa_generator(hsa, torch.Generator().manual_seed(123)):
            outs.append(torch.stack([hsa(x, x), hsa(x, x)]))
    assert torch.equal(outs[0], outs[1])
    assert hsa.generator is None  # restored after the context


def test_forward_matches_closed_form_with_same_noise():
    """Reproduce the forward pass by hand from the same Gumbel draws (level 1 first, then level 2)."""
    torch.manual_seed(3)
    b, n_q, n_k, k = 2, 3, 5, 3
    x_q, x_kv = torch.randn(b, n_q, D), torch.randn(b, n_k, D)
    hsa = _hsa(n_centroids=k, tau1=0.7, tau2=1.3)
    with hsa_generator(hsa, torch.Generator().manual_seed(7)):
        out = hsa(x_q, x_kv)

    g = torch.Generator().manual_seed(7)
    d_head = D // H

    def heads(t):
        return t.reshape(b, -1, H, d_head).transpose(1, 2).reshape(b * H, -1, d_head)

    q, key, v = heads(hsa.W_q(x_q)), heads(hsa.W_k(x_kv)), heads(hsa.W_v(x_kv))
    C = hsa.centroids
    g1 = gumbel_noise((b * H, n_k, k), generator=g)
    prob = torch.softmax((key @ C + g1) / 0.7, dim=-1)
    k_tilde = prob @ C.T
    g2 = gumbel_noise((b * H, n_q, n_k), generator=g)
    w = torch.softmax((q @ k_tilde.transpose(1, 2) / math.sqrt(d_head) + g2) / 1.3, dim=-1)
    o = (w @ v).reshape(b, H, n_q, d_head).transpose(1, 2).reshape(b, n_q, D)
    torch.testing.assert_close(out, hsa.W_out(o), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- weights and limits


@pytest.mark.parametrize("tau1,tau2", [(1.0, 1.0), (0.05, 0.05), (20.0, 5.0)])
def test_weights_on_simplex(tau1, tau2):
    torch.manual_seed(4)
    x = torch.randn(4, 7, D) * 3
    w = _hsa(tau1=tau1, tau2=tau2).attention_weights(x, x)
    assert torch.isfinite(w).all() and (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), rtol=0, atol=1e-5)


def test_small_tau_gives_one_hot_weights_and_centroid_keys():
    torch.manual_seed(5)
    x = torch.randn(4, 7, D)
    hsa = _hsa(n_centroids=3, tau1=1e-4, tau2=1e-4)
    w = hsa.attention_weights(x, x)
    assert w.max(-1).values.min() > 0.999  # every row nearly one-hot
    keys = hsa._split_heads(hsa.W_k(x))
    k_tilde, prob = hsa.centroid_keys(keys)
    assert prob.max(-1).values.min() > 0.999
    # each K~ row is (nearly) one centroid column
    dist = torch.cdist(k_tilde.reshape(-1, D // H), hsa.centroids.T.detach())
    assert dist.min(-1).values.max() < 1e-3


def test_large_tau_gives_uniform_weights():
    torch.manual_seed(6)
    x = torch.randn(2, 5, D)
    w = _hsa(tau2=1e6).attention_weights(x, x)
    torch.testing.assert_close(w, torch.full_like(w, 1 / 5), rtol=0, atol=1e-4)


def test_gumbel_max_frequencies_match_softmax():
    """tau -> 0 limit is the Gumbel-max trick: arg-max frequencies equal softmax(logits).

    N = 20000 draws; the largest binomial SE is sqrt(0.25 / N) = 0.0035; tolerance 4.5 SE = 0.016.
    """
    p = torch.tensor([0.5, 0.3, 0.2])
    n = 20_000
    logits = p.log().expand(n, 3)
    y = gumbel_softmax(logits, 1e-3, generator=torch.Generator().manual_seed(8))
    # near-ties (gap < tau) leave a few rows soft; almost all rows are one-hot
    assert torch.quantile(y.max(-1).values, 0.01) > 0.99
    freq = torch.bincount(y.argmax(-1), minlength=3).float() / n
    assert (freq - p).abs().max() < 4.5 * math.sqrt(0.25 / n)


def test_hard_mode_is_one_hot_with_straight_through_gradient():
    torch.manual_seed(9)
    x = torch.randn(2, 5, D)
    hsa = _hsa(hard=True)
    w = hsa.attention_weights(x, x)
    assert torch.equal(w.max(-1).values, torch.ones(w.shape[:-1]))
    assert torch.equal((w > 0).sum(-1), torch.ones(w.shape[:-1], dtype=torch.long))
    hsa(x, x).pow(2).sum().backward()
    assert hsa.centroids.grad is not None and hsa.centroids.grad.abs().sum() > 0


def test_gradients_reach_centroids_and_projections():
    torch.manual_seed(10)
    x_q, x_kv = torch.randn(3, 4, D), torch.randn(3, 6, D)
    hsa = _hsa().train()
    hsa(x_q, x_kv).pow(2).mean().backward()
    for name in ("centroids", "W_q.weight", "W_k.weight", "W_v.weight", "W_out.weight"):
        grad = hsa.get_parameter(name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_invalid_arguments():
    with pytest.raises(ValueError, match="d_embedding"):
        HierarchicalStochasticAttention(d_embedding=10, n_heads=4, dropout=0.0)
    with pytest.raises(ValueError, match="tau1"):
        HierarchicalStochasticAttention(d_embedding=D, n_heads=H, dropout=0.0, tau1=0.0)
    with pytest.raises(ValueError, match="n_centroids"):
        HierarchicalStochasticAttention(d_embedding=D, n_heads=H, dropout=0.0, n_centroids=0)
    with pytest.raises(ValueError, match="x_kv"):
        _hsa()(torch.randn(2, 3, D), torch.randn(2, 3, D + 1))
    lin = MultiheadAttention(
        d_embedding=D,
        n_heads=H,
        dropout=0.0,
        n_tokens=4,
        linformer_kv_compression_ratio=0.5,
        linformer_kv_compression_sharing="headwise",
    )
    with pytest.raises(ValueError, match="Linformer"):
        HierarchicalStochasticAttention.from_rtdl(lin)
    with pytest.raises(ValueError, match="no rtdl"):
        replace_attention_with_hsa(nn.Linear(3, 3))


# ---------------------------------------------------------------------------------------- model surgery


def test_replace_attention_in_fttransformer():
    torch.manual_seed(11)
    ft = FTTransformer(n_cont_features=3, cat_cardinalities=[], **_ft_kwargs(n_blocks=3))
    before = {k: v.clone() for k, v in ft.state_dict().items()}
    n_before = sum(p.numel() for p in ft.parameters())
    n_attn = sum(isinstance(m, MultiheadAttention) for m in ft.modules())
    assert n_attn == 3

    replace_attention_with_hsa(ft, n_centroids=3, seed=0)
    assert not any(isinstance(m, MultiheadAttention) for m in ft.modules())
    hsa = [m for m in ft.modules() if isinstance(m, HierarchicalStochasticAttention)]
    assert len(hsa) == n_attn
    assert all(m.dropout is not None and m.dropout.p == 0.1 for m in hsa)  # dropout rate carried over
    # parameter count grows by exactly the centroid parameters
    n_after = sum(p.numel() for p in ft.parameters())
    assert n_after - n_before == n_attn * (D // H) * 3
    # every other tensor (incl. copied W_q/W_k/W_v/W_out) is unchanged
    after = ft.state_dict()
    assert set(after) - set(before) == {f"backbone.blocks.{i}.attention.centroids" for i in range(3)}
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    # reproducible centroid init
    ft2 = FTTransformer(n_cont_features=3, cat_cardinalities=[], **_ft_kwargs(n_blocks=3))
    replace_attention_with_hsa(ft2, n_centroids=3, seed=0)
    assert torch.equal(ft2.backbone.blocks[1].attention.centroids, hsa[1].centroids)
    # still a working model
    assert ft(torch.randn(4, 3), None).shape == (4, 1)


def test_hsa_ft_transformer_uses_project_builder():
    rng_before = torch.get_rng_state()
    model = hsa_ft_transformer(5, n_centroids=3, tau1=0.5, tau2=2.0, **_small_ft(seed=3))
    assert torch.equal(rng_before, torch.get_rng_state())  # seeded build leaves the caller's RNG alone
    reference = build_ft_transformer(5, **_small_ft(seed=3))
    assert not any(isinstance(m, MultiheadAttention) for m in model.modules())
    hsa = [m for m in model.modules() if isinstance(m, HierarchicalStochasticAttention)]
    assert len(hsa) == 2 and all((m.n_centroids, m.tau1, m.tau2) == (3, 0.5, 2.0) for m in hsa)
    # same seed -> the same backbone weights as the plain builder, plus centroids
    ref_state, state = reference.state_dict(), model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in ref_state.items())
    assert set(state) - set(ref_state) == {f"ft.backbone.blocks.{i}.attention.centroids" for i in range(2)}
    assert model(torch.randn(6, 5)).shape == (6,)


def test_hsa_ft_transformer_logits_unscaled_as_the_reference_code():
    """Trained from scratch, HSA's level-2 logits are the reference code's Q K~^T (scale 1); None keeps rtdl's
    1/sqrt(d_head), and a converted trained attention keeps that by default."""
    d_head = D // H
    q, k = torch.randn(3, 4, d_head), torch.randn(3, 5, d_head)
    for scale, expected in ((1.0, 1.0), (None, 1.0 / math.sqrt(d_head)), (0.5, 0.5)):
        kw = {} if scale == 1.0 else {"logit_scale": scale}
        model = hsa_ft_transformer(4, tau2=1e-6, **kw, **_small_ft(seed=0))
        for m in model.modules():
            if isinstance(m, HierarchicalStochasticAttention):
                assert m.logit_scale == pytest.approx(expected)
                # the scale reaches the sampled weights: at tau2 -> 0 the sample is the arg-max of the logits
                # plus Gumbel noise, so compare with the same noise drawn again
                g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
                m.generator = g1
                w = m.sample_weights(q, k)
                k_tilde, _ = hsa_centroid_keys(k, m.centroids, tau1=m.tau1, generator=g2)
                logits = q @ k_tilde.transpose(-2, -1) * expected + gumbel_noise((3, 4, 5), generator=g2)
                assert torch.equal(w.argmax(-1), logits.argmax(-1))
    ft = build_ft_transformer(4, **_small_ft(seed=0))
    replace_attention_with_hsa(ft)
    scales = [m.logit_scale for m in ft.modules() if isinstance(m, HierarchicalStochasticAttention)]
    assert len(scales) == 2 and scales == pytest.approx([1.0 / math.sqrt(d_head)] * 2)


# ------------------------------------------------------------------------------------------------ sampling


def test_hsa_samples_shapes_reproducibility_and_mode():
    torch.manual_seed(12)
    model = hsa_ft_transformer(4, **_small_ft()).train()
    x = torch.randn(5, 4)
    s = hsa_samples(model, x, 7, generator=3, batch_size=8)  # 8 rows per pass -> chunked
    assert s.shape == (7, 5)
    assert model.training  # mode restored
    assert torch.equal(s, hsa_samples(model, x, 7, generator=3, batch_size=8))
    assert s.std(0).min() > 0  # samples differ at every input
    assert torch.equal(hsa_samples(model, x, 7, generator=torch.Generator().manual_seed(3), batch_size=8), s)
    with pytest.raises(ValueError, match="num_samples"):
        hsa_samples(model, x, 0)
    with pytest.raises(ValueError, match="no HierarchicalStochasticAttention"):
        hsa_samples(build_ft_transformer(4, **_small_ft()), x, 2)


def test_hsa_samples_folding_keeps_rows_aligned():
    """With huge temperatures HSA is deterministic (uniform weights), so every sample equals model(x) row-wise."""
    torch.manual_seed(13)
    model = hsa_ft_transformer(4, tau1=1e7, tau2=1e7, **_small_ft()).eval()
    x = torch.randn(9, 4)
    expected = model(x)
    assert expected.std() > 1e-3  # rows differ, so a misalignment would show
    for bs in (3, 8, 1000):
        s = hsa_samples(model, x, 5, batch_size=bs)
        torch.testing.assert_close(s, expected.expand(5, 9), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ training


def test_training_with_shared_loop_reduces_loss():
    torch.manual_seed(14)
    n, f = 256, 4
    x = torch.randn(n, f)
    y = x @ torch.tensor([1.0, -0.5, 0.3, 0.8])
    y = (y - y.mean()) / y.std()
    model = hsa_ft_transformer(f, **_small_ft(n_blocks=1, attention_dropout=0.0))

    def mse() -> float:  # MSE of the HSA predictive mean (8 samples), eval mode
        return ((hsa_samples(model, x, 8, generator=0).mean(0) - y) ** 2).mean().item()

    start = mse()
    # 75 epochs x 4 mini-batches = 300 steps; HSA needs nothing special (MSE on an ordinary nn.Module)
    res = fit_regressor(
        model, x, y, seed=0, lr=3e-3, batch_size=64, max_epochs=75, patience=None, progress=False, device="cpu"
    )
    end = mse()
    assert res.epochs_run == 75
    assert start > 0.8  # untrained: about the target variance (1)
    assert end < 0.2 * start
    assert res.history["train_loss"][-1] < 0.2 * res.history["train_loss"][0]
