"""Statistical checks of SA weight rows, shared by the fused kernel's interpreter tests (test_triton_sa.py) and its
CUDA tests (test_triton_sa_cuda.py): the law Multinomial(nu, pi) / nu in mean and covariance, and exact counts."""

import math

import torch

# |z| bound for standard-normal statistics over up to a few hundred comparisons per test: P(|z| > 5) ~ 6e-7 each.
Z_MAX = 5.0


def assert_law(w, pi, nu):
    """w (N, S) weight rows drawn from one pi (S,) float64: E = pi and Cov = (diag(pi) - pi pi^T) / nu, z-scores
    with the exact SD for the mean and the products' own spread for the covariance. The covariance is tested where
    its estimate is near-normal: keys expected in at least 30 rows and, for nu > 1, pairs (i, j) expected to be
    drawn together in at least 30 rows (N nu (nu - 1) pi_i pi_j >= 30). Below that the products' mean is a few rare
    joint events and its z-score heavy-tailed: with torch's exact Multinomial sampler and only the first condition,
    |z| > 5 somewhere in half of 40 repetitions at nu = 3 (N = 3000); with both, never (max 4.0). Returns the
    largest |z| of the means and of the covariances."""
    w, N = w.double(), w.shape[0]
    cov = (torch.diag(pi) - torch.outer(pi, pi)) / nu
    keep = pi > 1e-12
    z_mean = (w.mean(0) - pi)[keep] / torch.sqrt(torch.diag(cov)[keep] / N)
    assert z_mean.abs().max() < Z_MAX, z_mean
    frequent = pi * N >= 30
    pairs = frequent[:, None] & frequent[None, :]
    if nu > 1:
        pairs &= (N * nu * (nu - 1) * torch.outer(pi, pi) >= 30) | torch.eye(len(pi), dtype=torch.bool)
    dev = w - pi
    prods = dev[:, :, None] * dev[:, None, :]
    z_cov = (prods.mean(0) - cov)[pairs] / (prods.std(0)[pairs] / math.sqrt(N))
    assert pairs.sum() >= 3 and z_cov.abs().max() < Z_MAX, z_cov
    return float(z_mean.abs().max()), float(z_cov.abs().max())


def assert_counts(w, nu, allowed):
    """Rows of w * nu are non-negative integer counts summing to nu, zero wherever ``allowed`` is False."""
    counts = w.double() * nu  # w = counts / nu rounded to float32
    assert torch.all((counts - counts.round()).abs() <= nu * 2.0**-22) and (counts >= 0).all()
    counts = counts.round()
    assert torch.all(counts.sum(-1) == nu)
    assert torch.all(counts[~allowed.expand_as(counts)] == 0)


def assert_uncorrelated(a, b, pi):
    """a, b (N, S) weight rows that should be independent draws of one pi (S,): per key, the z-score of the mean of
    (a - pi)(b - pi), whose expectation is 0 (and is Var(w_k) > 0 if the two share their random numbers)."""
    prods = (a.double() - pi) * (b.double() - pi)
    z = prods.mean(0) / (prods.std(0).clamp_min(1e-300) / math.sqrt(a.shape[0]))
    frequent = pi * a.shape[0] >= 30
    assert frequent.sum() >= 3 and z[frequent].abs().max() < Z_MAX, z
