"""Statistical checks of SA weight rows, shared by the fused kernel's interpreter tests (test_triton_sa.py) and its
CUDA tests (test_triton_sa_cuda.py): the law Multinomial(nu, pi) / nu in mean and covariance, and exact counts."""

import math

import numpy as np
import torch
from scipy.stats import binom, norm

# |z| bound for standard-normal statistics over up to a few hundred comparisons per test: P(|z| > 5) ~ 6e-7 each.
Z_MAX = 5.0


def binomial_z(total, trials: int, p):
    """The exact two-sided binomial test of counts ``total`` ~ Binomial(trials, p) (arrays), as the |z| of a normal
    statistic with the same p-value (0 at the median, inf where the count is impossible)."""
    total, p = np.asarray(total, dtype=np.float64), np.asarray(p, dtype=np.float64)
    tail = np.minimum(binom.cdf(total, trials, p), binom.sf(total - 1, trials, p))
    return norm.isf(np.minimum(1.0, 2 * tail) / 2)


def product_variance(pi, nu):
    """Var((w_i - pi_i)(w_j - pi_j)) (S, S) for one row w ~ Multinomial(nu, pi) / nu, in closed form: w is the mean
    of nu independent one-hot rows Y, whose cumulants are k2_ij = delta_ij pi_i - pi_i pi_j and, for i != j,
    k4_iijj = -pi_i pi_j + 2 pi_i pi_j (pi_i + pi_j) - 6 pi_i^2 pi_j^2 (k4_iiii = pi_i (1 - pi_i)(1 - 6 pi_i (1 -
    pi_i))); w's cumulants of order r are Y's over nu^(r - 1), and for zero-mean D, Var(D_i D_j) = k4_iijj + k2_ii
    k2_jj + k2_ij^2. (Checked against 2,000,000 draws of numpy's multinomial at nu 1, 3, 20: ratios 0.99-1.00.)"""
    k2 = torch.diag(pi) - torch.outer(pi, pi)
    pp = torch.outer(pi, pi)
    k4 = -pp + 2 * pp * (pi[:, None] + pi[None, :]) - 6 * pp**2
    k4.diagonal().copy_(pi * (1 - pi) * (1 - 6 * pi * (1 - pi)))
    return k4 / nu**3 + (torch.outer(k2.diagonal(), k2.diagonal()) + k2**2) / nu**2


def assert_law(w, pi, nu):
    """w (N, S) weight rows drawn from one pi (S,) float64: E = pi and Cov = (diag(pi) - pi pi^T) / nu. Returns the
    largest |z| of the means and of the covariances.

    The mean: each key's count over the N rows is exactly Binomial(N nu, pi_k) (independent rows), tested exactly
    (:func:`binomial_z`).

    The covariance: the z-score of the mean of the products (w_i - pi_i)(w_j - pi_j) with their exact SD under the
    law (:func:`product_variance`), where the mean is near-normal: keys expected in at least 30 rows and, for nu >
    1, pairs (i, j) expected to be drawn together in at least 30 rows (N nu (nu - 1) pi_i pi_j >= 30); below that the
    products' mean is a few rare joint events. Before 2026-12-05 the SD was the products' sample SD, which is small
    in a sample that happens to hold few of the large products (a Wald statistic), and so heavy-tailed: under the
    exact law (numpy's multinomial, the pi of the 104 law cases of test_triton_sa_cuda.py, 20 samples of each),
    |z| >= 5 in 6 of 2,080 (max 5.52), a false failure of that file in about one run of four; with the exact SD in
    none (max 4.61)."""
    w, N = w.double(), w.shape[0]
    cov = (torch.diag(pi) - torch.outer(pi, pi)) / nu
    keep = pi > 1e-12
    totals = (w.sum(0) * nu).round()  # rows are counts / nu
    z_mean = torch.from_numpy(binomial_z(totals[keep].numpy(), N * nu, pi[keep].numpy()))
    assert z_mean.max() < Z_MAX, (z_mean, totals[keep], N * nu * pi[keep])
    frequent = pi * N >= 30
    pairs = frequent[:, None] & frequent[None, :]
    if nu > 1:
        pairs &= (N * nu * (nu - 1) * torch.outer(pi, pi) >= 30) | torch.eye(len(pi), dtype=torch.bool)
    var = product_variance(pi, nu)
    # a constant product (nu 1, pi_k = 1/2) says nothing
    pairs &= var > 1e-12 * torch.outer(cov.diagonal(), cov.diagonal())
    dev = w - pi
    prods = dev[:, :, None] * dev[:, None, :]
    z_cov = (prods.mean(0) - cov)[pairs] / torch.sqrt(var[pairs] / N)
    assert pairs.sum() >= 3 and z_cov.abs().max() < Z_MAX, z_cov
    return float(z_mean.max()), float(z_cov.abs().max())


def assert_counts(w, nu, allowed):
    """Rows of w * nu are non-negative integer counts summing to nu, zero wherever ``allowed`` is False."""
    counts = w.double() * nu  # w = counts / nu rounded to float32
    assert torch.all((counts - counts.round()).abs() <= nu * 2.0**-22) and (counts >= 0).all()
    counts = counts.round()
    assert torch.all(counts.sum(-1) == nu)
    assert torch.all(counts[~allowed.expand_as(counts)] == 0)


def assert_uncorrelated(a, b, pi, nu):
    """a, b (N, S) weight rows that should be independent draws of Multinomial(nu, pi) / nu: per key, the z-score of
    the mean of (a - pi)(b - pi), whose expectation is 0 (and is Var(w_k) > 0 if the two share their random numbers:
    |z| = sqrt(N) then), with its exact SD under independence, Var(w_k) / sqrt(N), Var(w_k) = pi_k (1 - pi_k) / nu.

    Tested on the keys that both rows draw together in at least 30 rows in expectation (N (1 - (1 - pi_k)^nu)^2 >=
    30), as the covariance in :func:`assert_law`. Before 2026-12-05 the SD was the products' sample SD and the keys
    those expected in 30 rows: in a sample with few joint draws of a key that SD collapses and |z| explodes, and
    independent draws of the CUDA independence test's pi (nu 3, 20 keys, numpy's multinomial) failed it in 66 % of
    1,000 repetitions (max |z| 10.1); as now, in none (max 4.6)."""
    n = a.shape[0]
    prods = (a.double() - pi) * (b.double() - pi)
    z = prods.mean(0) / (pi * (1 - pi) / nu / math.sqrt(n))
    drawn = 1 - (1 - pi) ** nu  # P(a row draws key k at least once)
    tested = (pi * n >= 30) & (n * drawn**2 >= 30)
    assert tested.sum() >= 3 and z[tested].abs().max() < Z_MAX, z
