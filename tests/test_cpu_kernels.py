"""The compiled CPU kernels: exact binomial variates, both multinomial constructions, the gather output path,
reproducibility across thread counts, masks and deterministic rows."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from sa_law import assert_law

from stochattn import cpu_kernels
from stochattn.attention import stochastic_attention, stochastic_weights

Z_MAX = 4.5  # as in test_attention: P(|z| > 4.5) ~ 7e-6 per comparison


def _weights(p: np.ndarray, nu, seed: int, limit=None) -> np.ndarray:
    """Kernel weights for rows p (R, n) float64 with one nu (or per-row nu)."""
    out = np.empty_like(p)
    nu_rows = np.atleast_1d(np.asarray(nu, dtype=np.int64))
    cpu_kernels.multinomial_weights(p, nu_rows, seed, out, limit=limit)
    return out


@pytest.mark.parametrize(
    "n, prob",
    [
        (5, 0.3),  # BINV, tiny n
        (40, 0.1),  # BINV, mean 4
        (40, 0.5),  # BTRS, mean 20
        (1000, 0.93),  # BTRS on the flipped probability 0.07 (mean 70)
        (10_000, 0.0005),  # BINV, mean 5, large n
        (10_000, 0.3),  # BTRS, mean 3000, log-factorials from the table
        (200_000, 0.4),  # BTRS beyond the log-factorial table (Stirling's series)
    ],
)
def test_binomial_variates_follow_the_binomial_pmf(n, prob):
    """A two-key row makes the chain draw exactly one Binomial(n, prob): chi-square against the exact pmf."""
    N = 60_000
    p = np.tile([prob, 1 - prob], (N, 1))
    counts = np.rint(_weights(p, n, seed=11, limit=0)[:, 0] * n).astype(np.int64)
    law = stats.binom(n, prob)
    # bins: every value with expected count >= 20 on its own, the two tails pooled
    lo, hi = int(law.ppf(1e-4)), int(law.isf(1e-4))
    edges = np.arange(lo, hi + 1)
    expected = N * np.diff(np.concatenate([[0.0], law.cdf(edges[:-1]), [1.0]]))
    observed = np.bincount(np.clip(counts, lo, hi) - lo, minlength=hi - lo + 1)[: len(expected)]
    # merge sparse bins left to right until each expects >= 20
    obs_m, exp_m, o_acc, e_acc = [], [], 0.0, 0.0
    for o, e in zip(observed, expected):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= 20:
            obs_m.append(o_acc), exp_m.append(e_acc)
            o_acc = e_acc = 0.0
    obs_m[-1] += o_acc
    exp_m[-1] += e_acc
    chi2 = stats.chisquare(obs_m, exp_m)
    assert chi2.pvalue > 1e-4, (chi2, len(obs_m))
    z = (counts.mean() - law.mean()) / math.sqrt(law.var() / N)
    assert abs(z) < Z_MAX


@pytest.mark.parametrize("nu, limit", [(3, 0), (64, 0), (200, 10**9), (5000, 10**9)])
def test_both_constructions_are_exact_at_any_nu(nu, limit):
    """The chain forced at small nu and the categorical draws forced at large nu: mean and covariance (Props 1-2)."""
    g = torch.Generator().manual_seed(0)
    pi = torch.softmax(torch.randn(9, generator=g, dtype=torch.float64) * 2, -1)
    pi[[1, 6]] = 0.0
    pi /= pi.sum()
    N = 40_000 if nu < 1000 else 8_000
    w = torch.from_numpy(_weights(pi.expand(N, -1).contiguous().numpy(), nu, seed=nu, limit=limit))
    assert torch.all(w[:, [1, 6]] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(N, dtype=torch.float64))
    assert_law(w, pi, nu)  # exact binomial means, covariances with their exact SD (tests/sa_law.py)


@pytest.mark.parametrize("n_k", [7, 100])
@pytest.mark.parametrize("nu", [1, 2, 8])
def test_gather_output_matches_proposition_2(n_k, nu):
    """The small-nu output path (mean of drawn value rows): E = pi^T V, Cov = V^T (diag pi - pi pi^T) V / nu."""
    assert nu <= cpu_kernels.gather_limit(n_k)
    g = torch.Generator().manual_seed(n_k)
    pi = torch.softmax(torch.randn(n_k, generator=g, dtype=torch.float64), -1)
    pi[0] = 0.0
    pi /= pi.sum()
    V = torch.randn(n_k, 3, generator=g, dtype=torch.float64)
    V[0] = 1e6  # a zero-probability key with a huge value: any selection would be visible
    N = 40_000
    out = stochastic_attention(pi.expand(1, N, -1).contiguous(), V.unsqueeze(0), nu, generator=g)[0]
    mean_true = pi @ V
    cov_true = V.T @ (torch.diag(pi) - torch.outer(pi, pi)) @ V / nu
    assert out.abs().max() < 1e5
    assert ((out.mean(0) - mean_true) / torch.sqrt(torch.diag(cov_true) / N)).abs().max() < Z_MAX
    dev = out - mean_true
    prods = dev[:, :, None] * dev[:, None, :]
    assert ((prods.mean(0) - cov_true) / (prods.std(0) / math.sqrt(N))).abs().max() < Z_MAX


def test_gather_output_equals_weights_times_values_for_the_same_generator_state():
    g = torch.Generator().manual_seed(3)
    pi = torch.softmax(torch.randn(2, 4, 30, 70, generator=g), -1)
    V = torch.randn(2, 4, 70, 5, generator=g)
    for nu in (1, 3, cpu_kernels.gather_limit(70)):
        a = stochastic_attention(pi, V, nu, generator=torch.Generator().manual_seed(nu))
        b = stochastic_weights(pi, nu, generator=torch.Generator().manual_seed(nu)) @ V
        assert torch.allclose(a, b, atol=1e-5)


def test_results_do_not_depend_on_the_thread_count():
    pi = torch.softmax(torch.randn(5000, 40), -1)
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append([stochastic_weights(pi, nu, generator=torch.Generator().manual_seed(9))
                         for nu in (1, 50, 10_000)])  # fmt: skip
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_long_rows_masked_rows_and_deterministic_rows():
    """Rows of 600 keys (bisection search), fully masked rows, per-row nu with 0 = deterministic."""
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(300, 600, generator=g, dtype=torch.float64), -1)
    p[:, ::3] = 0.0
    p /= p.sum(-1, keepdim=True)
    p[7] = 0.0  # fully masked row
    nu = torch.tensor([0, 1, 37, 2000, 100_000]).repeat(60)
    w = torch.from_numpy(_weights(p.numpy(), nu.numpy(), seed=1))
    assert torch.all(w[:, ::3] == 0)
    assert torch.all(w[7] == 0)
    det = nu == 0
    det[7] = False
    assert torch.equal(w[det], p[det])
    rest = ~det
    rest[7] = False
    counts = w[rest] * nu[rest, None]
    assert torch.allclose(counts, counts.round(), atol=1e-6)
    assert torch.equal(counts.round().sum(-1), nu[rest].double())


def test_kernel_method_is_cpu_only_and_auto_uses_it_on_cpu():
    pi = torch.softmax(torch.randn(50, 6), -1)
    a = stochastic_weights(pi, 12, generator=torch.Generator().manual_seed(1))
    b = stochastic_weights(pi, 12, generator=torch.Generator().manual_seed(1), method="kernel")
    assert torch.equal(a, b)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="CPU only"):
            stochastic_weights(pi.cuda(), 12, method="kernel")


@pytest.mark.parametrize("nu", [10, 40, 250, 5000])
def test_long_row_marginals_for_each_draw_method(nu):
    """150 keys with zeros: bisection draws (nu 10, 40, 250) and the binomial chain (5000) give
    W_j ~ Binomial(nu, p_j): mean and variance of every count against the exact values."""
    n_k, N = 150, 20_000
    assert cpu_kernels.categorical_limit(n_k) >= 250 and cpu_kernels.categorical_limit(n_k) < 5000
    g = torch.Generator().manual_seed(nu)
    pi = torch.softmax(torch.randn(n_k, generator=g, dtype=torch.float64) * 2, -1)
    pi[::5] = 0.0
    pi /= pi.sum()
    counts = torch.from_numpy(_weights(pi.expand(N, -1).contiguous().numpy(), nu, seed=nu)) * nu
    assert torch.all(counts[:, ::5] == 0)
    keep = pi > 0
    mean, var = nu * pi[keep], nu * pi[keep] * (1 - pi[keep])
    c = counts[:, keep]
    assert ((c.mean(0) - mean) / torch.sqrt(var / N)).abs().max() < Z_MAX
    mu4 = var * (1 + 3 * (nu - 2) * pi[keep] * (1 - pi[keep]))
    se_var = torch.sqrt((mu4 - var**2 * (N - 3) / (N - 1)) / N)
    assert ((c.var(0) - var) / se_var).abs().max() < Z_MAX


def test_gradients_reach_the_values_when_recorded():
    """The gather path is skipped while autograd records a graph through V, so V still receives gradients."""
    pi = torch.softmax(torch.randn(3, 5, 20), -1)
    V = torch.randn(3, 20, 4, requires_grad=True)
    out = stochastic_attention(pi, V, 2, generator=torch.Generator().manual_seed(0))
    out.sum().backward()
    assert V.grad is not None and V.grad.abs().sum() > 0
    with torch.no_grad():
        a = stochastic_attention(pi, V, 2, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(a, out.detach(), atol=1e-5)  # same draws either way
