"""TimesFM-style synthetic pretraining series (stochattn.data.synthetic)."""

import numpy as np
import pytest

from stochattn.data.synthetic import _arma, synthetic_series


def test_series_are_reproducible_z_scored_and_distinct():
    a, b = synthetic_series(64, 640, seed=3), synthetic_series(64, 640, seed=3)
    assert a.shape == (64, 640) and a.dtype == np.float32 and np.isfinite(a).all()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, synthetic_series(64, 640, seed=4))
    np.testing.assert_allclose(a.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(a.std(axis=1), 1.0, atol=1e-4)
    # independent draws, not one pattern repeated (two near-linear trends may still correlate strongly)
    corr = np.abs(np.corrcoef(a)[~np.eye(64, dtype=bool)])
    assert np.median(corr) < 0.2 and (corr > 0.9).mean() < 0.05


def test_a_share_of_the_series_is_periodic_over_a_broad_range_of_periods():
    """Seasonal components: the dominant period of the detrended periodogram spreads over short and long periods
    (a mix, not one period), and many series have a clear spectral peak (peak / median power > 50)."""
    x = synthetic_series(400, 1024, seed=0).astype(np.float64)
    t = np.arange(1024)
    x = x - np.polynomial.polynomial.polyval(t, np.polynomial.polynomial.polyfit(t, x.T, 1)).reshape(x.shape)
    power = np.abs(np.fft.rfft(x, axis=1))[:, 1:] ** 2
    peak = power.argmax(axis=1) + 1
    periods = 1024 / peak
    peaked = power.max(axis=1) / np.median(power, axis=1) > 50
    assert 0.3 < peaked.mean() < 0.95
    assert (periods[peaked] < 24).mean() > 0.1 and (periods[peaked] > 96).mean() > 0.1


def test_arma_noise_is_stationary():
    """The AR roots lie inside the unit circle: the variance of the second half equals the first half's within
    sampling error (an explosive AR part would grow it by orders of magnitude)."""
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(200):
        path = _arma(rng, 4000)
        ratios.append(path[2000:].var() / path[:2000].var())
    ratios = np.array(ratios)
    assert np.isfinite(ratios).all() and 0.5 < np.median(ratios) < 2.0 and ratios.max() < 10


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="length"):
        synthetic_series(4, 3, seed=0)
