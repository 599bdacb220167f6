"""Post-hoc scalar scaling of predictive ensembles (temperature and conformal).

Both rescale an ensemble around the method's point prediction,

    x' = point + factor * (x - point),

with ``factor`` fitted on a calibration split only and then applied unchanged to the test split.

Shapes: ``samples`` (S, n, ...), ``point`` and ``y`` (n, ...).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from stochattn.metrics import (
    as_array,
    central_interval,
    check_level,
    check_samples,
    check_target,
    mean_abs_pair_diff,
)

__all__ = ["fit_temperature", "fit_conformal_scale", "apply_scale"]


def _check_inputs(samples: Any, point: Any, y: Any, suffix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = check_samples(samples, f"samples{suffix}", min_members=2)
    p = check_target(point, f"point{suffix}", x, f"samples{suffix}")
    t = check_target(y, f"y{suffix}", x, f"samples{suffix}")
    if t.size == 0:
        raise ValueError(f"y{suffix} is empty")
    return x, p, t


def apply_scale(samples: Any, point: Any, factor: float) -> np.ndarray:
    """Scale an ensemble around its point prediction: ``point + factor * (samples - point)``.

    Args:
        samples: (S, n, ...) ensemble.
        point: (n, ...) point prediction.
        factor: finite scalar > 0 (a temperature or conformal factor).

    Returns:
        (S, n, ...) scaled samples.
    """
    x = check_samples(samples)
    p = check_target(point, "point", x)
    f = float(as_array(factor, "factor"))
    if f <= 0:
        raise ValueError(f"factor must be > 0, got {factor!r}")
    return p + f * (x - p)


def fit_temperature(
    samples_cal: Any,
    point_cal: Any,
    y_cal: Any,
    objective: str = "nll",
    bounds: tuple[float, float] = (1e-3, 1e3),
) -> float:
    """Fit a temperature T > 0 for ``x' = point + T (x - point)`` on a calibration split.

    Objectives:
        ``"nll"`` (default): Gaussian negative log-likelihood of y under N(point, (T sd)^2), sd the ensemble
            standard deviation (ddof=1). Its minimiser is closed-form ("sigma scaling"),
            ``T^2 = mean(((y - point) / sd)^2)`` over entries with sd > 0. Default because it is the classical
            temperature scaling (NLL, Guo et al. 2017) the paper cites, is deterministic and needs no optimiser.
        ``"crps"``: minimise the mean ensemble CRPS of the scaled ensemble over log T in ``log(bounds)`` with
            ``scipy.optimize.minimize_scalar(method="bounded")``; makes no Gaussian assumption.

    Args:
        samples_cal: (S, n, ...) calibration ensemble, S >= 2.
        point_cal: (n, ...) point predictions.
        y_cal: (n, ...) truth.
        objective: ``"nll"`` or ``"crps"``.
        bounds: (lower, upper) search range for T with the ``"crps"`` objective.

    Returns:
        T as a float.
    """
    x, p, t = _check_inputs(samples_cal, point_cal, y_cal, "_cal")
    if objective == "nll":
        sd = x.std(axis=0, ddof=1)
        ok = np.ptp(x, axis=0) > 0  # exact test: std of identical members can round to ~1e-16
        if not ok.any():
            raise ValueError("samples_cal has zero spread at every entry; cannot fit a temperature")
        z2 = ((t[ok] - p[ok]) / sd[ok]) ** 2
        temperature = math.sqrt(float(np.mean(z2)))
        if temperature <= 0:
            raise ValueError("y_cal equals point_cal wherever samples_cal has spread; temperature would be 0")
        return temperature
    if objective == "crps":
        lo, hi = float(bounds[0]), float(bounds[1])
        if not (0 < lo < hi and math.isfinite(hi)):
            raise ValueError(f"bounds must satisfy 0 < lower < upper < inf, got {bounds!r}")
        dev = x - p  # deviations from the point prediction, (S, n, ...)
        resid = t - p
        # CRPS(T) = mean|T dev - resid| - T * 0.5 mean|dev - dev'|; the spread term is linear in T.
        spread1 = float(np.mean(0.5 * mean_abs_pair_diff(dev)))

        def mean_crps(log_t: float) -> float:
            temp = math.exp(log_t)
            return float(np.mean(np.abs(temp * dev - resid))) - temp * spread1

        res = minimize_scalar(mean_crps, bounds=(math.log(lo), math.log(hi)), method="bounded",
                              options={"xatol": 1e-6})
        return float(math.exp(res.x))
    raise ValueError(f"objective must be 'nll' or 'crps', got {objective!r}")


def fit_conformal_scale(
    samples_cal: Any,
    point_cal: Any,
    y_cal: Any,
    coverage: float = 0.95,
    level: float = 0.95,
) -> float:
    """Smallest factor c for which the scaled central interval covers >= ``coverage`` of calibration entries.

    The central interval [lo, hi] at ``level`` comes from sample quantiles (``metrics.central_interval``);
    scaling by c maps it to [point + c (lo - point), point + c (hi - point)] (quantiles are affine-equivariant).
    Nonconformity score per entry: ``(y - point) / (hi - point)`` if y > point else ``(point - y) / (point - lo)``
    (0 when y == point; +inf when the relevant half-width is <= 0 while y != point, i.e. never covered).
    c is the split-conformal quantile: the k-th smallest score with ``k = ceil((n + 1) * coverage)``, i.e. the
    ``ceil((n+1) coverage)/n`` empirical quantile, which gives >= ``coverage`` on exchangeable test data.

    The guarantee assumes lo <= point <= hi (true for the ensemble mean/median and any sensible ``level``);
    where the point lies outside its interval, covering needs c inside a bounded range and the score is only a
    lower bound.

    Args:
        samples_cal: (S, n, ...) calibration ensemble, S >= 2.
        point_cal: (n, ...) point predictions.
        y_cal: (n, ...) truth.
        coverage: target coverage in (0, 1) (e.g. 0.95, or another method's empirical coverage).
        level: nominal level of the central interval that is scaled, in (0, 1).

    Returns:
        c as a float (> 0).
    """
    x, p, t = _check_inputs(samples_cal, point_cal, y_cal, "_cal")
    cov = check_level(coverage, "coverage")
    lvl = check_level(level, "level")
    lo, hi = central_interval(x, lvl)
    above = t > p
    half = np.where(above, hi - p, p - lo).ravel()
    dist = np.abs(t - p).ravel()
    scores = np.full(dist.shape, np.inf)
    pos = half > 0
    scores[pos] = dist[pos] / half[pos]
    scores[dist == 0] = 0.0
    n = scores.size
    k = math.ceil((n + 1) * cov)
    if k > n:
        raise ValueError(
            f"coverage={cov} needs at least {math.ceil(cov / (1 - cov))} calibration entries "
            f"(ceil((n+1) coverage) <= n), got n={n}"
        )
    c = float(np.sort(scores)[k - 1])
    if not math.isfinite(c):
        raise ValueError(
            "no finite factor reaches the target coverage: too many calibration entries have a zero-width "
            "interval on the side of y (samples_cal without spread)"
        )
    if c <= 0:
        raise ValueError("conformal factor is 0: y_cal equals point_cal for the required fraction of entries")
    # Inflate by a few ulps so the entry that defines c stays covered despite rounding in point + c (x - point).
    return c * (1.0 + 1e-12)
