"""Tests for stochattn.baselines.mc_dropout."""

import pytest
import torch
from torch import nn

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.baselines.mc_dropout import dropout_enabled, mc_dropout_samples


pytestmark = pytest.mark.usefixtures("one_thread")


def linear_dropout_model(w, p):
    """y = sum_j w_j x_j m_j / (1 - p), m_j ~ Bernoulli(1 - p): mean w.x, variance p/(1-p) sum (w_j x_j)^2."""
    lin = nn.Linear(len(w), 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w[None])
    return nn.Sequential(nn.Dropout(p), lin, nn.Flatten(0))


@pytest.mark.parametrize("batch_size", [1, 100_000])  # 1: one row per pass; large: all S passes folded in one
def test_linear_model_moments_match_closed_form(batch_size):
    p, S = 0.3, 4000
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.5, -1.0, 2.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    model = linear_dropout_model(w, p)
    s = mc_dropout_samples(model, x, S, 0, batch_size=batch_size).double()
    assert s.shape == (S, 3)
    mean = (x * w).sum(1).double()
    var = (p / (1 - p) * ((x * w) ** 2).sum(1)).double()
    # Tolerances: 4 standard errors; SE of the mean sqrt(var/S), SE of the sample variance
    # sqrt((m4 - var^2)/S) with the fourth central moment m4 estimated from the samples.
    c = s - s.mean(0)
    m4 = (c**4).mean(0)
    assert torch.all((s.mean(0) - mean).abs() <= 4 * (var / S).sqrt())
    assert torch.all((s.var(0) - var).abs() <= 4 * ((m4 - s.var(0) ** 2) / S).sqrt())
    # Folded passes must use independent masks: lag-1 correlation across samples ~ N(0, 1/S).
    r = (c[1:] * c[:-1]).mean(0) / c.pow(2).mean(0)
    assert torch.all(r.abs() <= 4 / S**0.5)


def test_ft_samples_spread_reproducible_and_rng_untouched():
    model = build_ft_transformer(4, n_blocks=1, d_block=16, attention_n_heads=2, attention_dropout=0.2,
                                 ffn_dropout=0.1, seed=0)
    x = torch.randn(30, 4)
    rng = torch.get_rng_state()
    a = mc_dropout_samples(model, x, 16, 7, batch_size=64)  # 2 copies of x per pass
    b = mc_dropout_samples(model, x, 16, torch.Generator().manual_seed(7), batch_size=64)
    c = mc_dropout_samples(model, x, 16, 7, batch_size=64)
    d = mc_dropout_samples(model, x, 16, 8, batch_size=64)
    assert torch.equal(rng, torch.get_rng_state())
    assert a.shape == (16, 30)
    assert torch.all(a.std(0) > 0)
    assert torch.equal(a, c) and not torch.equal(a, d) and b.shape == a.shape


@pytest.mark.parametrize("train", [True, False])
def test_modes_restored_and_only_dropout_switched_on(train):
    model = build_ft_transformer(4, n_blocks=2, d_block=16, attention_n_heads=2, seed=0)
    model.train(train)
    with dropout_enabled(model):
        for m in model.modules():
            expected = isinstance(m, nn.Dropout) and m.p > 0
            assert m.training == expected
    assert all(m.training == train for m in model.modules())
    mc_dropout_samples(model, torch.randn(5, 4), 3, 0)
    assert all(m.training == train for m in model.modules())
    with pytest.raises(RuntimeError), dropout_enabled(model):
        raise RuntimeError("boom")
    assert all(m.training == train for m in model.modules())


def test_error_without_dropout():
    model = build_ft_transformer(4, n_blocks=1, d_block=16, attention_n_heads=2, attention_dropout=0.0,
                                 ffn_dropout=0.0, residual_dropout=0.0, seed=0)
    with pytest.raises(ValueError, match="no nn.Dropout"):
        mc_dropout_samples(model, torch.randn(5, 4), 3, 0)
    with pytest.raises(ValueError, match="num_samples"):
        mc_dropout_samples(linear_dropout_model(torch.ones(2), 0.5), torch.randn(5, 2), 0, 0)
