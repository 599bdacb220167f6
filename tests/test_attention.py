"""Stochastic attention weights: exact law (Propositions 1-2), masks, dtypes, reproducibility, bad input."""

import math

import pytest
import torch
import torch.nn.functional as F

from stochattn.attention import (
    masked_attention_probs,
    scaled_dot_product_attention,
    stochastic_weights,
)

METHODS = ["categorical", "binomial", "kernel"]
# |z| bound for a standard-normal statistic checked over up to ~50 comparisons per test: P(|z| > 4.5) ~ 7e-6.
Z_MAX = 4.5


def _row(n_k=7, zeros=(2, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    pi = torch.softmax(torch.randn(n_k, generator=g, dtype=torch.float64) * 1.5, -1)
    pi[list(zeros)] = 0.0
    return pi / pi.sum()


def _values(n_k=7, d_v=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_k, d_v, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("nu", [1, 3, 64, 10_000])
def test_mean_and_covariance_of_output_match_propositions(method, nu):
    """Sample mean -> pi^T V and sample covariance -> V^T (diag(pi) - pi pi^T) V / nu, within SE bounds."""
    pi, V = _row(), _values()
    N = 40_000 if method != "categorical" or nu < 1000 else 10_000  # categorical costs O(N nu); the SEs adapt to N
    g = torch.Generator().manual_seed(1234 + nu)
    w = stochastic_weights(pi.expand(N, -1).contiguous(), nu, generator=g, method=method)
    out = w @ V  # (N, d_v)
    mean_true = pi @ V
    cov_true = V.T @ (torch.diag(pi) - torch.outer(pi, pi)) @ V / nu
    # mean: z-score with the exact standard deviation
    z_mean = (out.mean(0) - mean_true) / torch.sqrt(torch.diag(cov_true) / N)
    assert z_mean.abs().max() < Z_MAX, z_mean
    # covariance: products of deviations from the exact mean are unbiased for cov; SE from their own spread
    dev = out - mean_true
    prods = dev[:, :, None] * dev[:, None, :]  # (N, d, d)
    est, se = prods.mean(0), prods.std(0) / math.sqrt(N)
    z_cov = (est - cov_true) / se
    assert z_cov.abs().max() < Z_MAX, z_cov


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("nu", [1, 5, 200, 10_000])
def test_weights_are_multinomial_counts_and_skip_zero_probability_tokens(method, nu):
    pi = _row(n_k=13, zeros=(0, 4, 12))
    pi[7] = 1e-30  # a tiny but positive probability next to zeros
    pi = pi / pi.sum()
    g = torch.Generator().manual_seed(3)
    w = stochastic_weights(pi.expand(5000, -1).float().contiguous(), nu, generator=g, method=method)
    counts = (w.double() * nu).round()
    assert torch.allclose(w.double() * nu, counts, atol=1e-3 * max(1, nu) ** 0.5)
    assert torch.all(counts.sum(-1) == nu)
    assert torch.all(w[:, [0, 4, 12]] == 0)


@pytest.mark.parametrize("method", METHODS)
def test_weight_marginals_match_binomial_law(method):
    """Each W_j ~ Binomial(nu, pi_j): check E and Var of the counts per token against the exact values."""
    pi, nu, N = _row(n_k=9, zeros=(3,)), 11, 50_000
    g = torch.Generator().manual_seed(5)
    counts = stochastic_weights(pi.expand(N, -1).contiguous(), nu, generator=g, method=method) * nu
    mean, var = nu * pi, nu * pi * (1 - pi)
    z = (counts.mean(0) - mean) / torch.sqrt(var / N).clamp_min(1e-12)
    assert z.abs().max() < Z_MAX
    # variance of a binomial sample variance: (mu4 - var^2 (N-3)/(N-1)) / N, mu4 the 4th central moment
    mu4 = nu * pi * (1 - pi) * (1 + 3 * (nu - 2) * pi * (1 - pi))
    se_var = torch.sqrt((mu4 - var**2 * (N - 3) / (N - 1)) / N)
    keep = pi > 0
    assert ((counts.var(0)[keep] - var[keep]) / se_var[keep]).abs().max() < Z_MAX


def test_output_tends_to_deterministic_as_nu_grows():
    pi, V = _row(), _values()
    g = torch.Generator().manual_seed(7)
    rms = {}
    for nu in (16, 1600, 160_000):
        out = stochastic_weights(pi.expand(20_000, -1).contiguous(), nu, generator=g) @ V
        rms[nu] = float(((out - pi @ V) ** 2).sum(-1).mean().sqrt())
    # RMS deviation is exactly proportional to nu^-1/2 (Prop. 2); relative SE of each RMS estimate ~ 1 %.
    assert rms[16] / rms[1600] == pytest.approx(10.0, rel=0.06)
    assert rms[1600] / rms[160_000] == pytest.approx(10.0, rel=0.06)
    assert rms[160_000] < 5e-3


def test_nu_none_is_identity_and_sdpa_is_bit_identical():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    pi = torch.softmax(torch.randn(4, 6, generator=g), -1)
    assert stochastic_weights(pi, None) is pi
    mask = torch.rand(5, 5, generator=g) > 0.3
    for kwargs in ({}, {"attn_mask": mask}, {"is_causal": True}, {"scale": 0.3}):
        assert torch.equal(scaled_dot_product_attention(q, k, v, nu=None, **kwargs),
                           F.scaled_dot_product_attention(q, k, v, **kwargs))  # fmt: skip


@pytest.mark.parametrize(
    "mask_kind", ["bool", "float", "causal", "fully_masked_row"],
)
def test_masked_probs_follow_sdpa_semantics_and_sa_respects_masks(mask_kind):
    g = torch.Generator().manual_seed(11)
    B, H, L, S, E = 2, 3, 6, 6, 4
    q, k, v = (torch.randn(B, H, n, E, generator=g) for n in (L, S, S))
    kwargs = {}
    if mask_kind == "bool":
        kwargs["attn_mask"] = torch.rand(L, S, generator=g) > 0.4
        kwargs["attn_mask"][:, 0] = True
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.where(torch.rand(L, S, generator=g) > 0.4, 0.0, float("-inf"))
        kwargs["attn_mask"][:, 0] = 0.0
    elif mask_kind == "causal":
        kwargs["is_causal"] = True
    else:
        m = torch.rand(L, S, generator=g) > 0.4
        m[2] = False  # a query that may attend to nothing: SDPA gives 0
        kwargs["attn_mask"] = m
    probs = masked_attention_probs(q, k, kwargs.get("attn_mask"), kwargs.get("is_causal", False))
    ref = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert torch.allclose(probs @ v, ref, atol=1e-5)
    allowed = probs > 0
    for method in METHODS:
        for nu in (1, 4, 1000):
            w = stochastic_weights(probs, nu, generator=torch.Generator().manual_seed(nu), method=method)
            assert not torch.any((w > 0) & ~allowed), "a masked (zero-probability) key received weight"
    out = scaled_dot_product_attention(q, k, v, nu=8, generator=torch.Generator().manual_seed(0), **kwargs)
    assert out.shape == ref.shape and torch.isfinite(out).all()
    if mask_kind == "fully_masked_row":
        assert torch.all(out[:, :, 2] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))],
)
def test_dtypes_and_devices(dtype, device):
    g = torch.Generator(device=device).manual_seed(0)
    pi = torch.softmax(torch.randn(64, 10, generator=g, device=device), -1).to(dtype)
    for nu in (1, 7, 5000):
        w = stochastic_weights(pi, nu, generator=g)
        assert w.dtype == dtype and w.device.type == device
        assert torch.allclose(w.float().sum(-1), torch.ones(64, device=device), atol=10 * torch.finfo(dtype).eps)


def test_generator_reproducibility_and_independence_of_rows():
    pi = torch.softmax(torch.randn(100, 12), -1)
    a = stochastic_weights(pi, 5, generator=torch.Generator().manual_seed(42))
    b = stochastic_weights(pi, 5, generator=torch.Generator().manual_seed(42))
    c = stochastic_weights(pi, 5, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_tensor_nu_per_head_and_deterministic_rows():
    """nu of shape (H, 1) applies per head of (B, H, L, S) weights; 0 keeps a head deterministic."""
    B, H, L, S = 4000, 3, 2, 5
    pi = torch.softmax(torch.randn(1, H, L, S), -1).expand(B, H, L, S).contiguous()
    nu = torch.tensor([[0], [2], [200]])
    w = stochastic_weights(pi, nu, generator=torch.Generator().manual_seed(0))
    assert torch.equal(w[:, 0], pi[:, 0])
    var = w.var(0)  # (H, L, S)
    expected = pi[0] * (1 - pi[0])
    ratio2 = (var[1] / (expected[1] / 2)).mean()
    ratio200 = (var[2] / (expected[2] / 200)).mean()
    # relative SE of a variance from 4000 draws is ~sqrt(2/4000) ~ 2.2 %; averaged over 10 entries: tol 10 %
    assert ratio2 == pytest.approx(1.0, rel=0.1) and ratio200 == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize(
    "nu, match",
    [(0, "nu must be a positive integer"), (-3, "nu must be a positive integer"),
     (2.5, "nu must be a positive integer"), ("4", "nu must be a positive integer"),
     (torch.tensor([1.5]), "nu must hold integers")],
)
def test_bad_nu(nu, match):
    pi = torch.softmax(torch.randn(3, 4), -1)
    with pytest.raises(ValueError, match=match):
        stochastic_weights(pi, nu)


def test_bad_pi():
    good = torch.softmax(torch.randn(3, 4), -1)
    with pytest.raises(ValueError, match="pi has negative entries"):
        stochastic_weights(good - 0.3, 2)
    with pytest.raises(ValueError, match="pi rows must sum to 1"):
        stochastic_weights(good * 0.5, 2)
    bad = good.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="pi contains NaN"):
        stochastic_weights(bad, 2)
    with pytest.raises(TypeError, match="pi must be a floating tensor"):
        stochastic_weights(torch.ones(3, 4, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match="method must be"):
        stochastic_weights(good, 2, method="poisson")
