"""Tests for stochattn.backbones.ft_transformer (FT-Transformer regressor built on rtdl-revisiting-models)."""

import inspect

import pytest
import rtdl_revisiting_models as rtdl
import torch

from stochattn.backbones.ft_transformer import TabularRegressor, build_ft_transformer, predict
from stochattn.training import fit_regressor


pytestmark = pytest.mark.usefixtures("one_thread")


def small(n_features=5, **kw):
    kw = {"n_blocks": 2, "d_block": 32, "attention_n_heads": 4, "seed": 0, **kw}
    return build_ft_transformer(n_features, **kw)


def test_output_shape_and_rtdl_modules_kept():
    model = small(n_features=5, n_blocks=2)
    assert isinstance(model, TabularRegressor) and isinstance(model.ft, rtdl.FTTransformer)
    out = model(torch.randn(7, 5))
    assert out.shape == (7,)
    attn = [n for n, m in model.named_modules() if isinstance(m, rtdl.MultiheadAttention)]
    assert attn == ["ft.backbone.blocks.0.attention", "ft.backbone.blocks.1.attention"]


def test_defaults_are_rtdl_defaults_for_three_blocks():
    ref = rtdl.FTTransformer.get_default_kwargs(3)
    sig = inspect.signature(build_ft_transformer).parameters
    for key in ("n_blocks", "d_block", "attention_n_heads", "attention_dropout", "ffn_d_hidden_multiplier",
                "ffn_dropout", "residual_dropout"):
        assert sig[key].default == ref[key], key


def test_parameter_count_per_block_closed_form():
    d, h = 32, int(32 * 4 / 3)
    counts = {k: sum(p.numel() for p in small(n_blocks=k).parameters()) for k in (1, 2, 3)}
    # A non-first block: W_q, W_k, W_v, W_out (d*d + d each), two LayerNorms (2d each),
    # ReGLU FFN linear1 d -> 2h and linear2 h -> d.
    per_block = 4 * (d * d + d) + 2 * 2 * d + (d * 2 * h + 2 * h) + (h * d + d)
    assert counts[3] - counts[2] == per_block
    assert counts[2] - counts[1] == per_block
    first = per_block - 2 * d  # the first block has no attention_normalization
    tokenizer = 5 * d + 5 * d + d  # LinearEmbeddings weight + bias, CLS embedding
    head = 2 * d + d + 1
    assert counts[1] == tokenizer + first + head


def test_bad_arguments_and_inputs_raise():
    with pytest.raises(ValueError, match="d_block"):
        build_ft_transformer(3, d_block=30, attention_n_heads=4)
    with pytest.raises(ValueError, match="n_features"):
        build_ft_transformer(0)
    with pytest.raises(ValueError, match="ffn_dropout"):
        build_ft_transformer(3, ffn_dropout=1.0)
    model = small(n_features=5)
    with pytest.raises(ValueError, match="x"):
        model(torch.randn(4, 6))


def test_seeded_build_is_reproducible_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = small(seed=1), small(seed=1), small(seed=2)
    assert torch.equal(state, torch.get_rng_state())
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_predict_is_deterministic_and_restores_mode():
    model = small(attention_dropout=0.5, ffn_dropout=0.5)
    x = torch.randn(50, 5)
    model.train()
    p1 = predict(model, x, batch_size=7)
    p2 = predict(model, x.numpy(), batch_size=1024)
    assert model.training and all(m.training for m in model.modules())
    assert p1.shape == (50,) and torch.allclose(p1, p2, atol=1e-6)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(p1, model(x), atol=1e-6)


def test_fit_learns_a_smooth_function():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(300, generator=g)
    model = build_ft_transformer(3, n_blocks=1, d_block=16, attention_n_heads=2, seed=0)
    res = fit_regressor(model, x[:200], y[:200], x[200:], y[200:], seed=0, lr=3e-3, batch_size=32,
                        max_epochs=40, patience=10, progress=False)
    std = float(y[200:].std())
    # A constant predictor has RMSE ~= std (0.75); noise floor 0.1. Typical result ~0.2.
    assert res.best_val_rmse < 0.5 * std
    rmse = float((predict(model, x[200:]) - y[200:]).pow(2).mean().sqrt())
    assert rmse == pytest.approx(res.best_val_rmse, abs=1e-5)
