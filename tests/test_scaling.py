"""Tests for stochattn.scaling: temperature and conformal scaling of ensembles around the point prediction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stochattn import metrics as M
from stochattn.scaling import apply_scale, fit_conformal_scale, fit_temperature


def underdispersed(n: int, s: int, k: float, seed: int):
    """Members N(mu_i, s_i^2), truth N(mu_i, (k s_i)^2), point = mu_i. Returns samples (S, n), point, y."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0.0, 5.0, size=n)
    sd = rng.uniform(0.5, 2.0, size=n)
    samples = rng.normal(mu, sd, size=(s, n))
    y = rng.normal(mu, k * sd)
    return samples, mu, y


def test_apply_scale():
    rng = np.random.default_rng(0)
    samples = rng.normal(size=(7, 5, 2))
    point = rng.normal(size=(5, 2))
    np.testing.assert_allclose(apply_scale(samples, point, 1.0), samples, atol=1e-15)
    scaled = apply_scale(samples, point, 2.5)
    np.testing.assert_allclose(scaled - point, 2.5 * (samples - point), atol=1e-12)
    # sample quantiles (linear interpolation) are equivariant: lo' = point + c (lo - point)
    lo, hi = M.central_interval(samples, 0.8)
    lo2, hi2 = M.central_interval(scaled, 0.8)
    np.testing.assert_allclose(lo2, point + 2.5 * (lo - point), atol=1e-12)
    np.testing.assert_allclose(hi2, point + 2.5 * (hi - point), atol=1e-12)


def test_temperature_nll_recovers_underdispersion():
    n, s, k = 4000, 50, 2.5
    samples, point, y = underdispersed(n, s, k, seed=1)
    t_hat = fit_temperature(samples, point, y)
    # z = (y - mu)/sd_hat; E[z^2] = k^2 E[s^2/sd_hat^2] = k^2 (S-1)/(S-3) (inverse chi^2, ddof=1): the estimator
    # divides that factor out
    z2 = ((y - point) / samples.std(0, ddof=1)) ** 2
    se = (s - 3) / (s - 1) * z2.std(ddof=1) / math.sqrt(n)
    assert t_hat**2 == pytest.approx((s - 3) / (s - 1) * float(np.mean(z2)), rel=1e-12)
    assert abs(t_hat**2 - k**2) < 4 * se
    # applying it calibrates a fresh test split (W1 of PIT drops to the sampling floor)
    samples_t, point_t, y_t = underdispersed(n, s, k, seed=2)
    w1_before = M.w1_uniform(M.pit(samples_t, y_t, rng=3))
    w1_after = M.w1_uniform(M.pit(apply_scale(samples_t, point_t, t_hat), y_t, rng=3))
    assert w1_after < 0.2 * w1_before
    assert w1_after < 4 * M.w1_null_floor(n)


@pytest.mark.parametrize("point_is_mean", [False, True])
def test_temperature_nll_is_unbiased_for_a_calibrated_ensemble_of_19(point_is_mean):
    """A perfectly calibrated Gaussian ensemble (truth and S = 19 members iid from the same law) gets T = 1 within
    its standard error; the plain NLL minimiser sqrt(mean z^2) would give sqrt(18/16) = 1.061 (1.087 when the
    point is the members' mean), more than 10 standard errors away."""
    n, s = 20000, 19
    samples, mu, y = underdispersed(n, s, 1.0, seed=30)
    point = samples.mean(0) if point_is_mean else mu
    t_hat = fit_temperature(samples, point, y)  # point_is_mean detected from the arrays
    assert t_hat == fit_temperature(samples, point, y, point_is_mean=point_is_mean)
    z2 = ((y - point) / samples.std(0, ddof=1)) ** 2
    se_t2 = (s - 3) / (s - 1) * z2.std(ddof=1) / math.sqrt(n)
    se_t = se_t2 / (2 * t_hat)  # delta method
    assert se_t < 0.01
    assert abs(t_hat - 1.0) < 3 * se_t
    naive = math.sqrt(float(np.mean(z2)))
    assert abs(naive - 1.0) > 10 * se_t and naive == pytest.approx(
        math.sqrt(18 / 16 * (1 + 1 / s if point_is_mean else 1.0)), abs=4 * se_t)
    with pytest.raises(ValueError, match="S >= 4"):
        fit_temperature(samples[:3], point, y)


@pytest.mark.parametrize("estimator", ["fair", "ensemble"])
@pytest.mark.parametrize("s, k", [(50, 2.0), (19, 1.0)])
def test_temperature_crps_recovers_underdispersion(estimator, s, k):
    """The expected-score minimiser for Gaussian members N(mu, sd^2), truth N(mu, (k sd)^2), point mu: from
    d/dT E|T X - Y| = a E|X - X'| / 2 with E|T X - Y| = sqrt(2/pi) sd sqrt(T^2 + k^2), T* = a k / sqrt(2 - a^2),
    where a is the spread reward's share of the population value: 1 for the fair CRPS (T* = k: a calibrated
    ensemble keeps T = 1), (S-1)/S for the all-pairs ensemble CRPS (T* = 0.902 for a calibrated 19-member one)."""
    n, reps = 2000, 8
    a = 1.0 if estimator == "fair" else (s - 1) / s
    t_star = a * k / math.sqrt(2 - a**2)
    fits = np.array([fit_temperature(*underdispersed(n, s, k, seed=100 + r), objective="crps",
                                     crps_estimator=estimator) for r in range(reps)])  # fmt: skip
    se = fits.std(ddof=1) / math.sqrt(reps)  # SE of the mean over independent replicate fits
    assert abs(fits.mean() - t_star) < 4 * se + 1e-3
    if estimator == "fair":
        assert np.all(np.abs(fits / k - 1) < 0.1)
        assert fit_temperature(*underdispersed(n, s, k, seed=100), objective="crps") == fits[0]  # the default
    elif k == 1.0:
        assert t_star == pytest.approx(0.902, abs=1e-3) and abs(fits.mean() - 1.0) > 4 * se  # shrinks: biased
    # the optimiser lands on the minimum: a small step either way does not lower the mean CRPS
    samples, point, y = underdispersed(n, s, k, seed=100)
    t_hat = fits[0]

    def score(t):
        return float(M.crps(apply_scale(samples, point, t), y, estimator=estimator).mean())

    assert score(t_hat) <= min(score(t_hat * 0.99), score(t_hat * 1.01)) + 1e-9
    with pytest.raises(ValueError, match="crps_estimator"):
        fit_temperature(samples, point, y, objective="crps", crps_estimator="qd")


def test_conformal_reaches_target_on_calibration_and_test():
    n_cal, n_test, s, k = 2000, 20000, 19, 2.0
    samples_c, point_c, y_c = underdispersed(n_cal, s, k, seed=10)
    samples_t, point_t, y_t = underdispersed(n_test, s, k, seed=11)
    for target in (0.95, 0.6):
        c = fit_conformal_scale(samples_c, point_c, y_c, coverage=target, level=0.95)
        assert c > 1  # the ensemble is under-dispersed, so intervals must widen
        cov_cal = M.coverage_and_width(apply_scale(samples_c, point_c, c), y_c, (0.95,))[0.95]["coverage"]
        assert cov_cal >= target
        # continuous data: exactly k = ceil((n+1) target) calibration points are covered
        assert cov_cal == pytest.approx(math.ceil((n_cal + 1) * target) / n_cal, abs=1e-12)
        # test coverage: conditional on the calibration split it is ~Beta(k, n_cal + 1 - k) with SD
        # ~sqrt(t(1-t)/n_cal), plus binomial noise sqrt(t(1-t)/n_test)
        cov_test = M.coverage_and_width(apply_scale(samples_t, point_t, c), y_t, (0.95,))[0.95]["coverage"]
        se = math.sqrt(target * (1 - target) * (1 / n_cal + 1 / n_test))
        assert abs(cov_test - target) < 4 * se


def test_conformal_matching_mode_reaches_an_empirical_target_within_1_over_n():
    """finite_sample=False: the calibration coverage is the smallest attainable fraction >= target, so it lies in
    [target, target + 1/n); a target that is itself j/n (another method's coverage on the same entries) is hit
    exactly."""
    n, s = 137, 19
    samples, point, y = underdispersed(n, s, 1.7, seed=40)
    for level in (0.25, 0.5, 0.75, 0.95):
        # at level 0.25 the point lies outside 23 % of the 19-member central intervals, which caps the attainable
        # coverage (see the next test); the targets below are attainable
        targets = (0.0, 0.31, 0.5) + ((0.777, 120 / n) if level > 0.25 else ()) + ((0.95, 1.0) if level > 0.5 else ())
        for target in targets:
            c = fit_conformal_scale(samples, point, y, coverage=target, level=level, finite_sample=False)
            cov = M.coverage_and_width(apply_scale(samples, point, c), y, (level,))[level]["coverage"]
            assert max(target, 1 / n) - 1e-12 <= cov < max(target, 1 / n) + 1 / n, (level, target, cov)
            if target == 120 / n:
                assert cov == pytest.approx(120 / n, abs=1e-12)
            # c is the smallest such factor: 0.1 % less drops at least one calibration entry
            cov_less = M.coverage_and_width(apply_scale(samples, point, c * 0.999), y, (level,))[level]["coverage"]
            assert cov_less < cov
    with pytest.raises(ValueError, match="coverage must be in"):
        fit_conformal_scale(samples, point, y, coverage=1.2, finite_sample=False)


def test_conformal_point_outside_its_interval_has_a_bounded_covering_range():
    # members {1, 2, 3} around point 0: the 50 % interval [1.5, 2.5] lies right of the point, so scaling by c
    # gives [1.5 c, 2.5 c]; y covers for c in [y / 2.5, y / 1.5], and y < 0 is never covered
    samples = np.tile(np.array([1.0, 2.0, 3.0])[:, None], (1, 4))
    point = np.zeros(4)
    y = np.array([3.0, 3.5, 6.0, -1.0])  # covering sets [1.2, 2], [1.4, 2.33], [2.4, 4], never
    c = fit_conformal_scale(samples, point, y, coverage=0.5, level=0.5, finite_sample=False)
    assert c == pytest.approx(1.4, rel=1e-9)  # first c covering 2 of 4 (the old score rule would say 1.2)
    c = fit_conformal_scale(samples, point, y, coverage=0.25, level=0.5, finite_sample=False)
    assert c == pytest.approx(1.2, rel=1e-9)
    with pytest.raises(ValueError, match="cannot be covered"):
        fit_conformal_scale(samples, point, y, coverage=0.75, level=0.5, finite_sample=False)  # 2.4 > 2.33


def test_conformal_scores_closed_form():
    # S = 3 members {-1, 0, 1} around point 0 -> 50 % interval [-0.5, 0.5]; scores |y| / 0.5
    samples = np.tile(np.array([-1.0, 0.0, 1.0])[:, None], (1, 9))
    point = np.zeros(9)
    y = np.array([0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9])
    scores = np.sort(np.abs(y) / 0.5)
    c = fit_conformal_scale(samples, point, y, coverage=0.5, level=0.5)
    assert c == pytest.approx(scores[math.ceil(10 * 0.5) - 1], rel=1e-9)
    with pytest.raises(ValueError, match="calibration entries"):
        fit_conformal_scale(samples, point, y, coverage=0.95, level=0.5)  # needs n >= 19


def test_bad_input():
    samples, point, y = underdispersed(50, 10, 1.0, seed=20)
    bad = samples.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="samples_cal contains NaN"):
        fit_temperature(bad, point, y)
    with pytest.raises(ValueError, match="samples_cal contains NaN"):
        fit_conformal_scale(bad, point, y, coverage=0.9)
    with pytest.raises(ValueError, match="y_cal has shape"):
        fit_temperature(samples, point, y[:-1])
    with pytest.raises(ValueError, match="point_cal has shape"):
        fit_conformal_scale(samples, point[:-1], y, coverage=0.9)
    for bad_level in (0.0, 1.0, 1.2):
        with pytest.raises(ValueError, match="coverage"):
            fit_conformal_scale(samples, point, y, coverage=bad_level)
        with pytest.raises(ValueError, match="level"):
            fit_conformal_scale(samples, point, y, coverage=0.5, level=bad_level)
    with pytest.raises(ValueError, match="objective"):
        fit_temperature(samples, point, y, objective="mse")
    with pytest.raises(ValueError, match="factor"):
        apply_scale(samples, point, 0.0)
    with pytest.raises(ValueError, match="factor contains NaN"):
        apply_scale(samples, point, float("nan"))
    with pytest.raises(ValueError, match="zero spread"):
        fit_temperature(np.repeat(point[None], 5, axis=0), point, y)
