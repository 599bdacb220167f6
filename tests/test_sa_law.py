"""The law tests' own statistics (tests/sa_law.py), against numpy's exact multinomial sampler and scipy."""

import math

import numpy as np
import pytest
import torch
from sa_law import assert_law, assert_uncorrelated, binomial_z, product_variance
from scipy.stats import binomtest, norm

PI = torch.tensor([0.45, 0.3, 0.15, 0.07, 0.03], dtype=torch.float64)


@pytest.mark.parametrize("nu", [1, 3, 20])
def test_product_variance_is_that_of_multinomial_draws(nu):
    """The closed form against 400,000 draws: each entry within 4 standard errors of the sample variance (the
    standard error from the sample's fourth moment of the products)."""
    w = np.random.default_rng(nu).multinomial(nu, PI.numpy(), size=400_000) / nu
    d = w - PI.numpy()
    prods = d[:, :, None] * d[:, None, :]
    sample = prods.var(0)
    se = np.sqrt(((prods - prods.mean(0)) ** 4).mean(0) / len(w))
    exact = product_variance(PI, nu).numpy()
    assert np.all(np.abs(sample - exact) <= 4 * se + 1e-15), (sample, exact)


def test_binomial_z_is_the_exact_two_sided_test():
    """|z| with the p-value of scipy's two-sided binomial test wherever the two tails' definitions agree (the
    doubled smaller tail), 0 at the median, inf for an impossible count."""
    for k, n, p in ((3, 1000, 0.001), (30, 100, 0.2), (0, 50, 0.1)):
        tail = min(binomtest(k, n, p, alternative="less").pvalue, binomtest(k, n, p, alternative="greater").pvalue)
        assert binomial_z(k, n, p) == pytest.approx(norm.isf(min(1.0, 2 * tail) / 2))
    assert binomial_z(50, 100, 0.5) == 0
    assert math.isinf(binomial_z(5, 10, 0.0))


def test_the_checks_pass_exact_draws_and_fail_wrong_ones():
    """Exact independent draws pass both checks; a biased law fails assert_law, and draws sharing their random
    numbers in a tenth of the rows fail assert_uncorrelated."""
    rng = np.random.default_rng(0)
    nu, n = 3, 4000
    a, b = (torch.from_numpy(rng.multinomial(nu, PI.numpy(), size=n)) / nu for _ in range(2))
    assert_law(a, PI, nu)
    assert_uncorrelated(a, b, PI, nu)
    biased = PI * torch.tensor([1.2, 1.0, 1.0, 1.0, 0.5], dtype=torch.float64)
    with pytest.raises(AssertionError):
        assert_law(torch.from_numpy(rng.multinomial(nu, (biased / biased.sum()).numpy(), size=n)) / nu, PI, nu)
    shared = b.clone()
    shared[: n // 10] = a[: n // 10]
    with pytest.raises(AssertionError):
        assert_uncorrelated(a, shared, PI, nu)
