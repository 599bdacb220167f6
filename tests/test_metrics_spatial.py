"""Tests for the spatial metrics of stochattn.metrics: latitude weights, lat-weighted RMSE and ACC on small fields
computed by hand, ClimaX's batch ACC, and the (normalised) energy score against scoringrules and against CRPS."""

import math

import numpy as np
import pytest

from stochattn import metrics as M

LAT32 = np.arange(-87.1875, 90.0, 5.625)


def test_latitude_weights_mean_one_and_cosine():
    w = M.latitude_weights(LAT32)
    assert w.shape == (32,)
    assert w.mean() == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(w / w[16], np.cos(np.deg2rad(LAT32)) / np.cos(np.deg2rad(LAT32[16])), rtol=1e-14)
    np.testing.assert_allclose(w, w[::-1], rtol=1e-14)  # symmetric grid


def test_lat_weighted_rmse_by_hand():
    lat = np.array([-60.0, 0.0, 60.0])  # cos = 0.5, 1, 0.5 -> mean 2/3 -> w = 0.75, 1.5, 0.75
    np.testing.assert_allclose(M.latitude_weights(lat), [0.75, 1.5, 0.75], rtol=1e-12)
    truth = np.zeros((2, 3, 2))
    pred = np.zeros((2, 3, 2))
    pred[0, 1, :] = 2.0  # sample 0: error 2 on the equator row only -> weighted mean (1.5 * 4 * 2) / 6 = 2
    pred[1] = 1.0  # sample 1: error 1 everywhere -> weighted mean 1
    # ClimaX order: per sample sqrt(weighted spatial mean), then the mean over samples
    expected = (math.sqrt(2.0) + 1.0) / 2.0
    assert M.lat_weighted_rmse(pred, truth, lat) == pytest.approx(expected, rel=1e-12)
    # not sqrt of the mean over samples (that would be sqrt(1.5))
    assert abs(M.lat_weighted_rmse(pred, truth, lat) - math.sqrt(1.5)) > 1e-3


def test_lat_weighted_acc_by_hand():
    lat = np.array([-60.0, 0.0, 60.0])
    w = np.array([0.75, 1.5, 0.75])[:, None]
    clim = np.arange(6.0).reshape(3, 2)
    a = np.array([[1.0, -1.0], [2.0, 0.0], [0.0, 1.0]])  # prediction anomaly
    b = np.array([[1.0, 0.0], [1.0, -1.0], [0.0, 2.0]])  # truth anomaly
    ap, bp = a - a.mean(), b - b.mean()  # unweighted spatial demeaning (ClimaX)
    expected = np.sum(w * ap * bp) / np.sqrt(np.sum(w * ap**2) * np.sum(w * bp**2))
    got = M.lat_weighted_acc((clim + a)[None], (clim + b)[None], clim, lat)
    assert got == pytest.approx(expected, rel=1e-12)
    # one field: ClimaX's batch computation is the same number
    batch = M.climax_lat_weighted_acc((clim + a)[None], (clim + b)[None], clim, lat)
    assert batch == pytest.approx(expected, rel=1e-12)


def test_climax_batch_acc_differs_from_per_field_mean():
    rng = np.random.default_rng(0)
    lat = np.array([-45.0, 0.0, 45.0, 80.0])
    clim = rng.normal(size=(4, 5))
    truth = clim + rng.normal(size=(3, 4, 5)) + np.array([0.0, 2.0, -2.0])[:, None, None]
    pred = truth + rng.normal(scale=0.7, size=truth.shape)
    w = M.latitude_weights(lat)[:, None]
    a, b = pred - clim, truth - clim
    ap, bp = a - a.mean(), b - b.mean()  # over the whole batch
    expected = np.sum(w * ap * bp) / np.sqrt(np.sum(w * ap**2) * np.sum(w * bp**2))
    pooled = M.climax_lat_weighted_acc(pred, truth, clim, lat)
    assert pooled == pytest.approx(expected, rel=1e-12)
    per_field = np.mean([M.lat_weighted_acc(pred[i : i + 1], truth[i : i + 1], clim, lat) for i in range(3)])
    assert M.lat_weighted_acc(pred, truth, clim, lat) == pytest.approx(per_field, rel=1e-12)
    assert abs(pooled - per_field) > 1e-4  # batching changes ClimaX's number
    with pytest.raises(ValueError, match="B, n_lat, n_lon"):
        M.climax_lat_weighted_acc(pred[0], truth[0], clim, lat)


def _brute_es(x, y, fair):
    s = x.shape[0]
    err = np.mean([np.linalg.norm(x[i] - y) for i in range(s)])
    pairs = sum(np.linalg.norm(x[i] - x[j]) for i in range(s) for j in range(s))
    return err - 0.5 * pairs / (s * (s - 1) if fair else s * s)


@pytest.mark.parametrize("estimator", ["nrg", "fair"])
def test_energy_score_matches_scoringrules_and_brute_force(estimator):
    sr = pytest.importorskip("scoringrules")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 5, 4))
    y = rng.normal(size=(5, 4))
    got = M.normalised_energy_score(x, y, normalise=None, estimator=estimator)
    ref = np.asarray(sr.es_ensemble(y, x, m_axis=0, v_axis=-1, estimator=estimator), dtype=np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, [_brute_es(x[:, i], y[i], estimator == "fair") for i in range(5)], rtol=1e-10)
    # tiny blocks give the same numbers
    np.testing.assert_allclose(
        M.normalised_energy_score(x, y, normalise=None, estimator=estimator, max_block_elements=1), got, rtol=1e-12
    )


def test_energy_score_nrg_unnormalised_equals_existing_energy_score():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 4, 3))
    y = rng.normal(size=(4, 3))
    np.testing.assert_allclose(M.normalised_energy_score(x, y, normalise=None), M.energy_score(x, y), rtol=1e-10)


@pytest.mark.parametrize("estimator", ["nrg", "fair"])
def test_energy_score_d1_equals_crps_same_estimator(estimator):
    sr = pytest.importorskip("scoringrules")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 6, 1))
    y = rng.normal(size=(6, 1))
    es = M.normalised_energy_score(x, y, normalise="sqrt_d", estimator=estimator)  # sqrt(1) = 1
    crps = np.asarray(sr.crps_ensemble(y[:, 0], x[..., 0], m_axis=0, estimator=estimator), dtype=np.float64)
    np.testing.assert_allclose(es, crps, rtol=1e-10, atol=1e-12)
    if estimator == "nrg":  # the project's CRPS ("qd" == "nrg")
        np.testing.assert_allclose(es, M.crps(x[..., 0], y[:, 0]), rtol=1e-10, atol=1e-12)


def test_energy_score_normalisation_and_weights():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 3, 4, 6))  # (S, n, lat, lon) fields
    y = rng.normal(size=(3, 4, 6))
    plain = M.normalised_energy_score(x, y, normalise=None)
    np.testing.assert_allclose(M.normalised_energy_score(x, y), plain / math.sqrt(24), rtol=1e-12)
    np.testing.assert_allclose(plain, M.energy_score(x.reshape(5, 3, 24), y.reshape(3, 24)), rtol=1e-10)
    # a deterministic forecast (all members equal) off by e everywhere scores e when normalised
    e = 0.3
    same = np.broadcast_to(y + e, (4, 3, 4, 6))
    np.testing.assert_allclose(M.normalised_energy_score(same, y), e, rtol=1e-12)
    # weights: the same as scaling every dimension by sqrt(w); latitude weights -> the lat-weighted RMS
    w = M.latitude_weights(np.array([-60.0, -20.0, 20.0, 60.0]))[:, None]
    rw = np.sqrt(np.broadcast_to(w, (4, 6)))
    np.testing.assert_allclose(
        M.normalised_energy_score(x, y, weights=w), M.normalised_energy_score(x * rw, y * rw), rtol=1e-12
    )
    one = M.normalised_energy_score(x[:1], y, weights=w)
    np.testing.assert_allclose(one, np.sqrt(np.mean(w * (x[0] - y) ** 2, axis=(-2, -1))), rtol=1e-12)


def test_energy_score_errors():
    x = np.zeros((3, 2, 4))
    y = np.zeros((2, 4))
    with pytest.raises(ValueError, match="estimator"):
        M.normalised_energy_score(x, y, estimator="akr")
    with pytest.raises(ValueError, match="normalise"):
        M.normalised_energy_score(x, y, normalise="d")
    with pytest.raises(ValueError, match="at least 2"):
        M.normalised_energy_score(x[:1], y, estimator="fair")
    with pytest.raises(ValueError, match="shape"):
        M.normalised_energy_score(x, y[:, :3])
    with pytest.raises(ValueError, match="non-negative"):
        M.normalised_energy_score(x, y, weights=-np.ones(4))
