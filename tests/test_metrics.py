"""Tests for stochattn.metrics: PIT/W1 calibration, intervals, CRPS/ES, accuracy and ClimaX-style scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stochattn import metrics as M

# scoringrules itself (the reference these tests score against), imported with its numba kernels cached on disk:
# a plain import compiles them again in every pytest worker (~4 CPU-s each)
sr = M._scoringrules()

# ClimaX 5.625 deg grid: 32 latitudes, 64 longitudes
LAT32 = -87.1875 + 5.625 * np.arange(32)


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------
def w1_null_quantile(n: int, q: float, reps: int, seed: int) -> float:
    """Simulated q-quantile of W1 between n iid U(0,1) values and U(0,1) (the law of W1 for exact PIT)."""
    rng = np.random.default_rng(seed)
    sims = [M.w1_uniform(rng.uniform(size=n)) for _ in range(reps)]
    return float(np.quantile(sims, q))


def gaussian_ensemble(n: int, s: int, member_scale: float, seed: int):
    """Per-point N(mu_i, s_i^2) truth; members N(mu_i, (member_scale * s_i)^2). Returns samples (S, n), y (n,)."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0.0, 3.0, size=n)
    sd = rng.uniform(0.5, 2.0, size=n)
    y = rng.normal(mu, sd)
    samples = rng.normal(mu, member_scale * sd, size=(s, n))
    return samples, y, mu, sd


def brute_crps(samples: np.ndarray, y: np.ndarray) -> np.ndarray:
    err = np.abs(samples - y).mean(axis=0)
    pair = np.abs(samples[:, None] - samples[None, :]).mean(axis=(0, 1))
    return err - 0.5 * pair


# ------------------------------------------------------------------------------------------------------------
# W1
# ------------------------------------------------------------------------------------------------------------
def test_w1_closed_forms():
    # a single value v: W1 = int_0^1 |v - p| dp = (v^2 + (1 - v)^2) / 2
    for v in (0.0, 0.3, 0.5, 1.0):
        assert M.w1_uniform([v]) == pytest.approx((v**2 + (1 - v) ** 2) / 2, abs=1e-15)
    # n values at cell centres (k - 1/2)/n: each cell contributes 1/(4 n^2), total 1/(4 n)
    n = 37
    assert M.w1_uniform((np.arange(n) + 0.5) / n) == pytest.approx(1 / (4 * n), abs=1e-15)
    # order and shape do not matter (flattened)
    v = np.random.default_rng(0).uniform(size=(4, 6))
    assert M.w1_uniform(v) == pytest.approx(M.w1_uniform(v.ravel()[::-1]), abs=1e-15)


def test_w1_matches_grid_integration_and_scipy():
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.uniform(size=9), [0.2, 0.2]])  # includes a tie
    exact = M.w1_uniform(v)
    # midpoint rule for int_0^1 |G(u) - u| du on a fine grid; error O(jumps * h) ~ 1e-6
    m = 1_000_000
    u = (np.arange(m) + 0.5) / m
    g = np.searchsorted(np.sort(v), u, side="right") / v.size
    grid = float(np.mean(np.abs(g - u)))
    assert abs(exact - grid) < 1e-5
    # scipy with many equally spaced points standing in for U(0,1): discretisation error <= 1/(2 m)
    m2 = 200_000
    ref = stats.wasserstein_distance(v, (np.arange(m2) + 0.5) / m2)
    assert abs(exact - ref) < 1e-5


@pytest.mark.parametrize("n", [1, 5, 31, 206])
def test_w1_null_floor_matches_simulation(n):
    """The closed form (finite n) against a stated simulation (fixed seed) within 4 SE."""
    reps = 4000
    rng = np.random.default_rng(2)
    sims = np.array([M.w1_uniform(rng.uniform(size=n)) for _ in range(reps)])
    se = sims.std(ddof=1) / np.sqrt(reps)
    assert abs(sims.mean() - M.w1_null_floor(n)) < 4 * se
    assert M.w1_null_floor(1) == pytest.approx(1.0 / 3.0)  # E int |1{U <= t} - t| dt = 1/3


def test_w1_null_floor_rejects_a_non_integer_count():
    with pytest.raises(ValueError, match="integer"):
        M.w1_null_floor(10.5)
    with pytest.raises(ValueError, match="integer"):
        M.w1_null_floor("10")
    assert M.w1_null_floor(10.0) == M.w1_null_floor(np.int64(10)) == M.w1_null_floor(10)


def test_w1_null_floor_tends_to_its_limit():
    assert M.w1_null_floor(20_000) * np.sqrt(20_000) == pytest.approx(np.sqrt(np.pi / 32.0), rel=1e-4)
    assert M.w1_null_floor(100_001) == pytest.approx(np.sqrt(np.pi / (32.0 * 100_001)))


def test_spread_tracking_tells_heteroscedastic_from_homoscedastic():
    rng = np.random.default_rng(3)
    n, s = 2000, 19
    scale = rng.uniform(0.1, 2.0, size=n)
    y = scale * rng.standard_normal(n)
    tracking = M.spread_tracking(scale * rng.standard_normal((s, n)), np.zeros(n), y)
    flat = M.spread_tracking(rng.standard_normal((s, n)), np.zeros(n), y)
    assert tracking["spearman"] > 0.4 and tracking["spearman_binned"] > 0.9 and tracking["n"] == n
    assert abs(flat["spearman"]) < 0.1 and len(flat["spread"]) == len(flat["abs_residual"]) == 10
    assert np.all(np.diff(tracking["spread"]) >= 0)


def test_pit_mean_flag_fires_on_biased_pit_only():
    rng = np.random.default_rng(7)
    n = 600  # yacht's 20 splits x 31 test rows
    calibrated = rng.uniform(size=n)
    biased = rng.uniform(size=n) ** 0.7  # PIT piled at high values: the truth mostly above the samples
    mean_c, z_c = M.pit_mean_z(calibrated)
    mean_b, z_b = M.pit_mean_z(biased)
    assert abs(z_c) <= M.PIT_BIAS_Z < z_b
    assert mean_b > 0.55 and abs(mean_c - 0.5) < 0.05
    _, z_low = M.pit_mean_z(1.0 - biased)
    assert z_low < -M.PIT_BIAS_Z
    # over-dispersion alone (PIT piled at 1/2, symmetric) is no point bias
    assert abs(M.pit_mean_z(0.5 + 0.2 * (calibrated - 0.5))[1]) <= M.PIT_BIAS_Z


# ------------------------------------------------------------------------------------------------------------
# PIT
# ------------------------------------------------------------------------------------------------------------
def test_pit_calibrated_gaussian_w1_within_null_and_underdispersed_u_shape():
    n, s = 5000, 19
    # W1 of exact-uniform PIT has the law of W1 of n iid uniforms: simulate its 99.9 % quantile (fixed seed)
    bound = w1_null_quantile(n, 0.999, reps=2000, seed=123)
    assert bound < 0.02  # sanity: mean is ~0.313/sqrt(n) = 0.0044

    samples, y, _, _ = gaussian_ensemble(n, s, member_scale=1.0, seed=10)
    w1_cal = M.w1_uniform(M.pit(samples, y, rng=11))
    assert w1_cal < bound

    samples_u, y_u, _, _ = gaussian_ensemble(n, s, member_scale=0.3, seed=12)
    p_u = M.pit(samples_u, y_u, rng=13)
    hist, _ = np.histogram(p_u, bins=10, range=(0, 1))
    frac = hist / n
    # U shape: each outer bin well above 1/10, middle bins well below; with 0.3x spread the outer bins hold ~0.3
    assert frac[0] > 3 * frac[4:6].max() and frac[-1] > 3 * frac[4:6].max()
    assert frac[0] > 0.2 and frac[-1] > 0.2
    assert M.w1_uniform(p_u) > 10 * bound


def test_pit_exactly_uniform_with_ties():
    # discrete data: y and members iid Poisson(2) -> many ties; randomised PIT must still be exactly uniform
    n, s = 40_000, 9
    rng = np.random.default_rng(20)
    lam = rng.uniform(0.5, 3.0, size=n)
    y = rng.poisson(lam).astype(float)
    samples = rng.poisson(lam, size=(s, n)).astype(float)
    assert (samples == y).mean() > 0.2  # ties are common
    p = M.pit(samples, y, rng=21)
    # mean: Var(U) = 1/12 -> SE = sqrt(1/(12 n)); variance: Var((U - 1/2)^2) = 1/80 - 1/144
    assert abs(p.mean() - 0.5) < 4 * np.sqrt(1 / (12 * n))
    assert abs(p.var() - 1 / 12) < 4 * np.sqrt((1 / 80 - 1 / 144) / n)
    assert stats.kstest(p, "uniform").pvalue > 1e-3
    # a non-randomised mid-rank PIT would fail the same KS test (shows the test can fail)
    below = (samples < y).sum(0)
    ties = (samples == y).sum(0)
    mid = (below + 0.5 * (ties + 1)) / (s + 1)
    assert stats.kstest(mid, "uniform").pvalue < 1e-6


def test_pit_rank_cells_and_rng():
    samples = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])  # S=4, n=2
    y = np.array([1.5, 1.0])
    p = M.pit(samples, y, rng=np.random.default_rng(0))
    # first point: r=2, e=0 -> in [2/5, 3/5); second: r=0, e=4 -> anywhere in [0, 1)
    assert 2 / 5 <= p[0] < 3 / 5
    assert 0 <= p[1] < 1
    np.testing.assert_array_equal(M.pit(samples, y, rng=5), M.pit(samples, y, rng=5))
    with pytest.raises(TypeError, match="rng"):
        M.pit(samples, y, rng=None)


# ------------------------------------------------------------------------------------------------------------
# intervals
# ------------------------------------------------------------------------------------------------------------
def test_central_interval_interpolates():
    samples = np.arange(19.0)[:, None]  # S=19 members 0..18, n=1
    lo, hi = M.central_interval(samples, 0.95)
    # np.quantile linear: position q * (S - 1) = 0.025 * 18 = 0.45 and 0.975 * 18 = 17.55
    np.testing.assert_allclose([lo[0], hi[0]], [0.45, 17.55], atol=1e-12)
    lo, hi = M.central_interval(samples, 0.5)
    np.testing.assert_allclose([lo[0], hi[0]], [4.5, 13.5], atol=1e-12)


@pytest.mark.parametrize("s", [10, 19, 100])
def test_calibrated_coverage_of_the_interpolated_interval_matches_simulation(s):
    """A perfectly calibrated Gaussian ensemble (truth and S members iid): the interpolated PI-95 covers what
    calibrated_coverage says (0.7915 / 0.8679 / 0.9324 at S = 10 / 19 / 100), within 4 binomial SE, which is far
    below 95 % (more than 10 SE at every S here); the uniform law's closed form (S-1) L / (S+1) likewise."""
    n = 200_000
    rng = np.random.default_rng(s)
    x, y = rng.normal(size=(s, n)), rng.normal(size=n)
    cov = M.coverage_and_width(x, y, (0.95,))[0.95]["coverage"]
    expected = M.calibrated_coverage(s, 0.95)
    se = np.sqrt(expected * (1 - expected) / n)
    assert abs(cov - expected) < 4 * se
    assert 0.95 - cov > 10 * se
    assert expected == pytest.approx({10: 0.7915, 19: 0.8679, 100: 0.9324}[s], abs=1e-4)
    u, v = rng.uniform(size=(s, n)), rng.uniform(size=n)
    cov_u = M.coverage_and_width(u, v, (0.95,))[0.95]["coverage"]
    assert M.calibrated_coverage(s, 0.95, law="uniform") == pytest.approx((s - 1) * 0.95 / (s + 1), abs=1e-12)
    assert abs(cov_u - (s - 1) * 0.95 / (s + 1)) < 4 * se
    # any law lies within 1/(S+1) of the uniform value
    assert abs(expected - (s - 1) * 0.95 / (s + 1)) < 1 / (s + 1)


def test_calibrated_coverage_quadrature_against_direct_integration():
    """The Gauss-Jacobi value of P(y <= Q_hi) for S = 19 against scipy's adaptive 2-D integration over the joint
    density of the two order statistics around Q_hi (x_(18), x_(19)), to 1e-7."""
    from scipy import integrate, special

    s, p = 19, 0.975
    h = (s - 1) * p
    k, g = int(np.floor(h)) + 1, h - np.floor(h)  # 1-based rank of the lower member, weight of the upper
    logc = special.gammaln(s + 1) - special.gammaln(k) - special.gammaln(s - k)

    def density(b, a):
        return np.exp(logc + (k - 1) * stats.norm.logcdf(a) + (s - k - 1) * stats.norm.logsf(b)
                      + stats.norm.logpdf(a) + stats.norm.logpdf(b)) * stats.norm.cdf((1 - g) * a + g * b)

    direct, _ = integrate.dblquad(density, -9, 9, lambda a: a, lambda a: 9, epsabs=1e-10, epsrel=1e-9)
    assert M.calibrated_coverage(s, 0.95) == pytest.approx(2 * direct - 1, abs=1e-7)
    # a level whose quantile positions are whole ranks is law-free: S = 11, 80 %: positions 1 and 9 (0-based)
    assert M.calibrated_coverage(11, 0.8) == pytest.approx(8 / 12, abs=1e-12)  # positions 1 and 9: x_(2), x_(10)


@pytest.mark.parametrize("s", [39, 100])
def test_order_statistic_interval_holds_its_level_for_any_exchangeable_law(s):
    """[x_(k), x_(S+1-k)] covers (S + 1 - 2k)/(S + 1) >= level exactly, whatever the law (here exponential)."""
    k, achieved = M.order_statistic_rank(s, 0.95)
    assert (k, achieved) == {39: (1, 38 / 40), 100: (2, 97 / 101)}[s]
    assert achieved >= 0.95 and M.calibrated_coverage(s, 0.95, method="order") == achieved
    n = 100_000
    rng = np.random.default_rng(7)
    x, y = rng.exponential(size=(s, n)), rng.exponential(size=n)
    lo, hi = M.central_interval(x, 0.95, method="order")
    np.testing.assert_array_equal(lo, np.sort(x, 0)[k - 1])
    cov = M.coverage_and_width(x, y, (0.95,), method="order")[0.95]["coverage"]
    assert abs(cov - achieved) < 4 * np.sqrt(achieved * (1 - achieved) / n)


def test_order_statistic_interval_out_of_reach_says_how_many_members():
    x = np.random.default_rng(0).normal(size=(19, 5))
    with pytest.raises(ValueError, match=r"needs S >= 39 members; with S = 19 .* covers .* 0.9"):
        M.central_interval(x, 0.95, method="order")
    assert M.order_statistic_rank(19, 0.95) == (0, 1.0) and np.isnan(M.calibrated_coverage(19, 0.95, "order"))
    lo, hi = M.central_interval(x, 0.9, method="order")  # 18/20 = 0.90: [min, max]
    np.testing.assert_array_equal(lo, x.min(0))
    np.testing.assert_array_equal(hi, x.max(0))
    with pytest.raises(ValueError, match="method"):
        M.central_interval(x, 0.9, method="nearest")
    with pytest.raises(ValueError, match="num_members"):
        M.calibrated_coverage(1, 0.9)


def test_coverage_and_width_gaussian():
    n, s = 4000, 1000
    rng = np.random.default_rng(30)
    sigma = rng.uniform(0.5, 2.0, size=n)
    samples = rng.normal(0.0, 1.0, size=(s, n)) * sigma
    y = rng.normal(0.0, 1.0, size=n) * sigma
    res = M.coverage_and_width(samples, y)
    assert set(res) == {0.25, 0.5, 0.75, 0.95}
    for level, cw in res.items():
        # coverage: binomial SE sqrt(l(1-l)/n); the O(1/S) quantile-estimation bias (~1e-3) is inside 4 SE
        assert abs(cw["coverage"] - level) < 4 * np.sqrt(level * (1 - level) / n)
        # width: E[hi - lo] = 2 sigma E[interpolated order statistic]; E[Z_(k)] from Blom's approximation
        # Phi^-1((k - 3/8)/(S + 1/4)) (error ~1e-3). Per-point SE of a sample quantile is
        # sqrt(p(1-p)/S)/phi(z) * sigma <= 0.17, so the mean over n has SE < 0.003: tolerance 0.012 ~ 4 SE.
        pos = (1 + level) / 2 * (s - 1)  # 0-based position used by np.quantile's linear interpolation
        j, f = int(np.floor(pos)), pos - np.floor(pos)
        blom = stats.norm.ppf((np.array([j + 1, j + 2]) - 0.375) / (s + 0.25))
        expected_hi = (1 - f) * blom[0] + f * blom[1]
        assert cw["width"] == pytest.approx(2 * expected_hi * sigma.mean(), abs=0.012)
        # and the nominal 2 z sigma up to the O(1/S) sample-quantile bias (< 1 % at S = 1000)
        z = stats.norm.ppf((1 + level) / 2)
        assert cw["width"] == pytest.approx(2 * z * sigma.mean(), rel=0.01)


# ------------------------------------------------------------------------------------------------------------
# CRPS and Energy Score
# ------------------------------------------------------------------------------------------------------------
def test_crps_matches_scoringrules_brute_force_and_decomposition():
    rng = np.random.default_rng(40)
    samples = rng.normal(size=(19, 50, 3)) * 2 + 1
    y = rng.normal(size=(50, 3))
    c = M.crps(samples, y)
    assert c.shape == (50, 3)
    ref = sr.crps_ensemble(y, np.moveaxis(samples, 0, -1))  # scoringrules' default estimator, ensemble last
    np.testing.assert_allclose(c, ref, atol=1e-12)
    np.testing.assert_allclose(c, brute_crps(samples, y), atol=1e-12)
    dec = M.crps_decomposition(samples, y)
    np.testing.assert_allclose(dec["crps"], dec["error"] - dec["spread"], atol=1e-12)
    np.testing.assert_allclose(dec["error"], np.abs(samples - y).mean(0), atol=1e-12)
    # not the "fair" 1/(S(S-1)) estimator, which estimator="fair" gives
    fair = sr.crps_ensemble(y, np.moveaxis(samples, 0, -1), estimator="fair")
    assert np.abs(c - fair).max() > 1e-3
    np.testing.assert_allclose(M.crps(samples, y, estimator="fair"), fair, atol=1e-12)
    np.testing.assert_allclose(M.crps(samples, y, estimator="fair"),
                               dec["error"] - dec["spread"] * 19 / 18, atol=1e-12)  # fmt: skip
    with pytest.raises(ValueError, match="at least 2"):
        M.crps(samples[:1], y, estimator="fair")
    with pytest.raises(ValueError, match="estimator"):
        M.crps(samples, y, estimator="qd")


@pytest.mark.parametrize("s", [2, 19])
def test_ensemble_crps_exceeds_the_fair_one_by_1_over_s_for_a_calibrated_ensemble(s):
    """y and S members iid (any law; here Gaussian): E[fair] = E|X - X'|/2 is the law's expected CRPS
    (1/sqrt(pi) for N(0, 1)), and E[ensemble] = (1 + 1/S) E[fair] (5.3 % above at S = 19, 50 % at S = 2)."""
    n = 400_000
    rng = np.random.default_rng(s)
    x, y = rng.normal(size=(s, n)), rng.normal(size=n)
    ens, fair = M.crps(x, y), M.crps(x, y, estimator="fair")
    assert abs(fair.mean() - 1 / np.sqrt(np.pi)) < 4 * fair.std(ddof=1) / np.sqrt(n)
    d = ens - (1 + 1 / s) * fair  # mean 0 exactly under calibration
    assert abs(d.mean()) < 4 * d.std(ddof=1) / np.sqrt(n)


def test_crps_point_mass_is_absolute_error():
    y = np.array([0.0, 1.5, -2.0])
    x = np.array([1.0, 1.5, 3.0])
    np.testing.assert_allclose(M.crps(x[None], y), np.abs(x - y), atol=1e-15)
    np.testing.assert_allclose(M.crps(np.repeat(x[None], 7, axis=0), y), np.abs(x - y), atol=1e-12)
    dec = M.crps_decomposition(np.repeat(x[None], 7, axis=0), y)
    np.testing.assert_allclose(dec["spread"], 0.0, atol=1e-15)


def test_energy_score_brute_force():
    rng = np.random.default_rng(41)
    samples = rng.normal(size=(6, 4, 3))
    y = rng.normal(size=(4, 3))
    es = M.energy_score(samples, y)
    err = np.linalg.norm(samples - y, axis=-1).mean(0)
    pair = np.linalg.norm(samples[:, None] - samples[None], axis=-1).mean((0, 1))
    np.testing.assert_allclose(es, err - 0.5 * pair, atol=1e-12)
    # d = 1 reduces to the CRPS
    np.testing.assert_allclose(M.energy_score(samples[..., :1], y[:, :1]), M.crps(samples[..., 0], y[:, 0]),
                               atol=1e-12)
    with pytest.raises(ValueError, match="samples"):
        M.energy_score(samples[..., 0], y[:, 0])


# ------------------------------------------------------------------------------------------------------------
# accuracy
# ------------------------------------------------------------------------------------------------------------
def test_point_errors():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    p = np.array([2.0, 2.0, 1.0, 4.0])
    assert M.mae(p, y) == pytest.approx(0.75)
    assert M.rmse(p, y) == pytest.approx(np.sqrt(5 / 4))
    assert M.nrmse(p, y, 2.0) == pytest.approx(np.sqrt(5 / 4) / 2)
    with pytest.raises(ValueError, match="sigma_y"):
        M.nrmse(p, y, 0.0)


def test_latitude_weights():
    w = M.latitude_weights(LAT32)
    assert w.shape == (32,)
    assert w.mean() == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(w, w[::-1], atol=1e-14)  # symmetric grid -> symmetric weights
    assert w[15] > w[0]  # equator heavier than poles
    np.testing.assert_allclose(w, np.cos(np.deg2rad(LAT32)) / np.cos(np.deg2rad(LAT32)).mean())


def test_lat_weighted_rmse():
    rng = np.random.default_rng(50)
    truth = rng.normal(size=(5, 32, 64))
    for c in (0.7, -2.0):
        assert M.lat_weighted_rmse(truth + c, truth, LAT32) == pytest.approx(abs(c), rel=1e-12)
    # general case against an explicit formula: mean over time of sqrt(mean_{lat,lon} w (e)^2)
    pred = truth + rng.normal(size=truth.shape) * np.linspace(0.1, 2, 32)[:, None]
    w = M.latitude_weights(LAT32)
    expected = np.mean([np.sqrt(np.mean(w[:, None] * (pred[t] - truth[t]) ** 2)) for t in range(5)])
    assert M.lat_weighted_rmse(pred, truth, LAT32) == pytest.approx(expected, rel=1e-12)
    # an error at the equator weighs more than the same error at a pole
    eq = truth.copy()
    eq[:, 15, :] += 1
    pole = truth.copy()
    pole[:, 0, :] += 1
    assert M.lat_weighted_rmse(eq, truth, LAT32) > M.lat_weighted_rmse(pole, truth, LAT32)
    with pytest.raises(ValueError, match="lat_deg"):
        M.lat_weighted_rmse(pred, truth, LAT32[:-1])


def test_lat_weighted_acc():
    rng = np.random.default_rng(51)
    clim = rng.normal(size=(32, 64)) * 10
    truth = clim + rng.normal(size=(4, 32, 64))
    assert M.lat_weighted_acc(truth, truth, clim, LAT32) == pytest.approx(1.0, abs=1e-12)
    assert M.lat_weighted_acc(2 * clim - truth, truth, clim, LAT32) == pytest.approx(-1.0, abs=1e-12)
    # invariant to a spatially constant offset of the anomalies (spatial demeaning) and to positive scaling
    pred = clim + 0.5 * (truth - clim) + rng.normal(size=truth.shape)
    acc = M.lat_weighted_acc(pred, truth, clim, LAT32)
    assert -1 < acc < 1
    assert M.lat_weighted_acc(clim + 3 * (pred - clim) + 5.0, truth, clim, LAT32) == pytest.approx(acc, abs=1e-12)
    # explicit formula for one field
    w = M.latitude_weights(LAT32)[:, None]
    a = pred - clim
    b = truth - clim
    per = []
    for t in range(4):
        ap, bp = a[t] - a[t].mean(), b[t] - b[t].mean()
        per.append(np.sum(w * ap * bp) / np.sqrt(np.sum(w * ap**2) * np.sum(w * bp**2)))
    assert acc == pytest.approx(np.mean(per), abs=1e-12)
    with pytest.raises(ValueError, match="pred anomalies"):
        M.lat_weighted_acc(np.broadcast_to(clim, truth.shape), truth, clim, LAT32)
    with pytest.raises(ValueError, match="climatology"):
        M.lat_weighted_acc(pred, truth, clim[:5], LAT32)


# ------------------------------------------------------------------------------------------------------------
# summary
# ------------------------------------------------------------------------------------------------------------
def test_summarize():
    samples, y, mu, _ = gaussian_ensemble(300, 19, 1.0, seed=60)
    point = samples.mean(0)
    out, p = M.summarize(samples, point, y, rng=61)
    expected_keys = {"mae", "rmse", "crps", "crps_error", "crps_spread", "crps_fair", "w1"} | {
        f"{k}_{lv}" for k in ("coverage", "width") for lv in ("25", "50", "75", "95")
    } | {f"coverage_{lv}_calibrated" for lv in ("25", "50", "75", "95")}
    assert set(out) == expected_keys
    assert out["crps_fair"] == pytest.approx(float(M.crps(samples, y, estimator="fair").mean()), rel=1e-12)
    assert out["coverage_95_calibrated"] == M.calibrated_coverage(19, 0.95)
    assert all(isinstance(v, float) for v in out.values())
    assert out["crps"] == pytest.approx(out["crps_error"] - out["crps_spread"], abs=1e-12)
    assert out["w1"] == pytest.approx(M.w1_uniform(p))
    assert out["mae"] == pytest.approx(M.mae(point, y))
    assert out["coverage_95"] == pytest.approx(M.coverage_and_width(samples, y, (0.95,))[0.95]["coverage"])


def test_torch_tensors_accepted():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(70)
    samples = rng.normal(size=(5, 8))
    y = rng.normal(size=8)
    np.testing.assert_allclose(M.crps(torch.tensor(samples, requires_grad=True), torch.tensor(y)),
                               M.crps(samples, y))


# ------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------
def test_bad_input():
    rng = np.random.default_rng(80)
    samples = rng.normal(size=(10, 6))
    y = rng.normal(size=6)
    bad = samples.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="samples contains NaN"):
        M.pit(bad, y, rng=0)
    with pytest.raises(ValueError, match="samples contains NaN"):
        M.crps(bad, y)
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="samples contains inf"):
        M.central_interval(bad, 0.5)
    y_bad = y.copy()
    y_bad[0] = np.nan
    with pytest.raises(ValueError, match="y contains NaN"):
        M.coverage_and_width(samples, y_bad)
    with pytest.raises(ValueError, match="y has shape"):
        M.crps(samples, y[:5])
    with pytest.raises(ValueError, match="y has shape"):
        M.pit(samples, y[:, None], rng=0)
    with pytest.raises(ValueError, match="point has shape"):
        M.rmse(y[:5], y)
    for level in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="level"):
            M.central_interval(samples, level)
        with pytest.raises(ValueError, match="level"):
            M.coverage_and_width(samples, y, levels=(0.5, level))
    with pytest.raises(ValueError, match="at least 2"):
        M.central_interval(samples[:1], 0.5)
    with pytest.raises(ValueError, match="pit_values contains NaN"):
        M.w1_uniform([0.1, np.nan])


def test_scoringrules_loaded_with_cached_kernels_scores_as_its_numpy_backend(tmp_path):
    """metrics._scoringrules imports scoringrules with numba.guvectorize defaulting cache=True (its kernels kept on
    disk) and then restores numba's decorator; the kernels so compiled, and those loaded from the cache in a second
    process, give scoringrules' own numpy-backend CRPS and Energy Score."""
    import os
    import subprocess
    import sys

    code = """
import numba, numpy as np
plain = numba.guvectorize
from stochattn import metrics
sr = metrics._scoringrules()
assert numba.guvectorize is plain, "numba.guvectorize left patched"
rng = np.random.default_rng(0)
x, y = rng.normal(size=(19, 50, 3)), rng.normal(size=(50, 3))
np.testing.assert_allclose(metrics.crps(x, y), sr.crps_ensemble(y, x, m_axis=0, estimator="qd", backend="numpy"),
                           rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(metrics.energy_score(x, y),
                           sr.es_ensemble(y, x, m_axis=0, v_axis=-1, estimator="nrg", backend="numpy"), rtol=1e-12)
"""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}  # numba's first choice when set
    for _ in range(2):  # compile (and store), then load
        subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
        # scoringrules marks only its energy-score kernels cache=True itself; the CRPS kernels are cached by the patch
        assert any("crps" in str(p) for p in tmp_path.rglob("*.nbi")), "the CRPS kernels were not cached"


def test_scoringrules_without_numba_falls_back_to_its_numpy_backend():
    """Where numba cannot be imported, metrics._scoringrules imports scoringrules as it is (its numpy backend
    active) instead of failing, and scores as that backend."""
    import subprocess
    import sys

    code = """
import sys
sys.modules["numba"] = None  # import numba -> ImportError
import numpy as np
from stochattn import metrics
sr = metrics._scoringrules()
assert sr.backends.active.name == "numpy", sr.backends.active.name
rng = np.random.default_rng(1)
x, y = rng.normal(size=(9, 20)), rng.normal(size=20)
np.testing.assert_allclose(metrics.crps(x, y), sr.crps_ensemble(y, x, m_axis=0, estimator="qd", backend="numpy"),
                           rtol=1e-12)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_point_residual_pools_exactly_and_flags_a_biased_point():
    """point_residual's moments of (y - point) / sigma_y; pooled_moments of groups of 1, 7 and 500 values equals the
    moments of the concatenation (the parallel sums of squares, no approximation). A point off by 0.1 sd over 20000
    rows is flagged (z ~ +14, its SE is 1); an unbiased one is not."""
    rng = np.random.default_rng(3)
    groups = [rng.normal(mu, sd, n) for mu, sd, n in ((2.0, 1.0, 1), (0.5, 3.0, 7), (-0.2, 0.5, 500))]
    parts = [{"n": 1, "mean": float(groups[0][0]), "sd": 0.0}]  # one value (point_residual itself needs 2)
    parts += [M.point_residual(np.zeros_like(g), 2.0 * g, sigma_y=2.0) for g in groups[1:]]
    assert parts[2]["n"] == 500 and parts[2]["mean"] == pytest.approx(groups[2].mean(), rel=1e-12)
    all_ = np.concatenate(groups)
    pooled = M.pooled_moments(parts)
    assert pooled["n"] == all_.size and pooled["mean"] == pytest.approx(all_.mean(), rel=1e-12)
    assert pooled["sd"] == pytest.approx(all_.std(ddof=1), rel=1e-12)
    assert pooled["z"] == pytest.approx(all_.mean() / (all_.std(ddof=1) / math.sqrt(all_.size)), rel=1e-12)
    y = rng.standard_normal(20000)
    noisy = y + rng.standard_normal(20000)
    assert M.point_residual(y - 0.1, noisy)["z"] > M.PIT_BIAS_Z
    assert abs(M.point_residual(y, noisy)["z"]) < M.PIT_BIAS_Z
    with pytest.raises(ValueError, match="sigma_y"):
        M.point_residual(y, noisy, sigma_y=0.0)
    with pytest.raises(ValueError, match="at least 2"):
        M.point_residual(y[:1], noisy[:1])
    with pytest.raises(ValueError, match=">= 2 values"):
        M.pooled_moments([{"n": 1, "mean": 0.0, "sd": 0.0}])


def test_bias_sources_tells_an_offset_ensemble_from_a_biased_point():
    """Truth y = point + noise (sd 1). (a) An ensemble of the right spread shifted off the point by +0.5: its PIT mean
    is biased (truth below the samples, z << 0), and recentring the samples on the point removes it; the point's own
    residual is unbiased. (b) The point itself biased by -0.5 with the ensemble centred on it: the PIT bias stays
    after recentring, and the point's residual mean says where it comes from."""
    rng = np.random.default_rng(0)
    n, s = 2000, 50
    point = rng.standard_normal(n)
    y = point + rng.standard_normal(n)
    shifted = point + 0.5 + rng.standard_normal((s, n))
    a = M.bias_sources(shifted, point, y, 1, sigma_y=2.0)
    assert a["ensemble_offset_mean"] == pytest.approx(0.25, abs=0.01)  # 0.5 in units of sigma_y = 2
    assert a["pit_mean_z"] < -M.PIT_BIAS_Z and abs(a["pit_mean_z_recentred"]) < M.PIT_BIAS_Z
    assert abs(a["point_residual_z"]) < M.PIT_BIAS_Z and a["w1_recentred"] < a["w1"]
    b = M.bias_sources(point - 0.5 + rng.standard_normal((s, n)), point - 0.5, y, 1)
    assert b["point_residual_mean"] == pytest.approx(0.5, abs=0.06) and b["point_residual_z"] > M.PIT_BIAS_Z
    assert abs(b["ensemble_offset_mean"]) < 0.01
    assert b["pit_mean_z"] > M.PIT_BIAS_Z and b["pit_mean_z_recentred"] > M.PIT_BIAS_Z
    with pytest.raises(ValueError, match="sigma_y"):
        M.bias_sources(shifted, point, y, 1, sigma_y=0.0)


def test_bias_sources_shift_removes_a_known_offset():
    """A point biased by -0.5 (the ensemble centred on it): adding the offset +0.5, known from elsewhere (say the
    training part), removes the PIT bias and lowers W1 to the floor of n uniform PITs; the same samples shifted the
    wrong way are worse. Per-input shifts equal to a scalar give the same numbers (same seed); shapes are checked."""
    rng = np.random.default_rng(2)
    n, s = 3000, 40
    point = rng.standard_normal(n)
    y = point + rng.standard_normal(n)
    samples = point - 0.5 + rng.standard_normal((s, n))
    right = M.bias_sources(samples, point - 0.5, y, 3, shift=0.5)
    assert right["pit_mean_z"] > M.PIT_BIAS_Z and abs(right["pit_mean_z_shifted"]) < M.PIT_BIAS_Z
    assert right["w1_shifted"] < 3 * M.w1_null_floor(n) < right["w1"] / 3  # calibrated once shifted: at its floor
    assert M.bias_sources(samples, point - 0.5, y, 3, shift=-0.5)["w1_shifted"] > right["w1"]
    per_input = M.bias_sources(samples, point - 0.5, y, 3, shift=np.full(n, 0.5))
    for key in ("w1_shifted", "pit_mean_z_shifted"):
        assert per_input[key] == right[key]
    assert "w1_shifted" not in M.bias_sources(samples, point - 0.5, y, 3)
    with pytest.raises(ValueError, match="shift"):
        M.bias_sources(samples, point - 0.5, y, 3, shift=np.zeros(n - 1))
    with pytest.raises(ValueError, match="shift contains NaN"):
        M.bias_sources(samples, point - 0.5, y, 3, shift=np.nan)
