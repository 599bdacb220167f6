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


def _dominant_periods(x):
    """Dominant period (steps) of each linearly detrended series x (n, T) and whether it is a clear peak."""
    t = np.arange(x.shape[1])
    coef = np.polynomial.polynomial.polyfit(t, x.T.astype(np.float64), 1)
    x = x - np.polynomial.polynomial.polyval(t, coef)
    power = np.abs(np.fft.rfft(x, axis=1))[:, 1:] ** 2
    return x.shape[1] / (power.argmax(axis=1) + 1), power.max(axis=1) / np.median(power, axis=1) > 50


def test_calendar_share_sets_how_often_a_calendar_period_dominates():
    """At calendar_share = 1 the clear dominant periods (5-200 steps, where a 2048-step FFT resolves them to a few %)
    sit at calendar periods; at 0 (log-uniform periods) only the few that fall near one by chance do."""
    from stochattn.data.synthetic import CALENDAR_PERIODS

    calendar = np.array(CALENDAR_PERIODS)
    share = {}
    for c in (0.0, 1.0):
        periods, peaked = _dominant_periods(synthetic_series(300, 2048, seed=1, calendar_share=c))
        keep = peaked & (periods > 5) & (periods < 200)
        near = np.min(np.abs(periods[keep, None] / calendar[None] - 1), axis=1) < 0.05
        share[c] = near.mean()
    assert share[1.0] > 0.8 and share[0.0] < 0.4, share
    with pytest.raises(ValueError, match="calendar_share"):
        synthetic_series(2, 64, seed=0, calendar_share=1.5)
