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
    CRPS_ESTIMATORS,
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


def _is_member_mean(x: np.ndarray, p: np.ndarray, sd: np.ndarray) -> bool:
    """True when ``p`` is the members' mean up to round-off (within 1e-3 ensemble SDs at every entry)."""
    return bool(np.all(np.abs(p - x.mean(axis=0)) <= 1e-3 * sd + 1e-12 * np.abs(p)))


def fit_temperature(
    samples_cal: Any,
    point_cal: Any,
    y_cal: Any,
    objective: str = "nll",
    bounds: tuple[float, float] = (1e-3, 1e3),
    *,
    point_is_mean: bool | None = None,
    crps_estimator: str = "fair",
) -> float:
    """Fit a temperature T > 0 for ``x' = point + T (x - point)`` on a calibration split.

    Objectives:
        ``"nll"`` (default): Gaussian sigma scaling (temperature scaling by NLL, Guo et al. 2017, the scaling the
            paper cites), corrected for the finite ensemble size S so that it is unbiased for T^2. Model: members
            x_1..x_S iid N(c, sigma^2) and y ~ N(c, T^2 sigma^2) independent of them, per entry; sd the members'
            standard deviation (ddof=1), z = (y - point) / sd. Because (S-1) sd^2 / sigma^2 ~ chi^2_{S-1}
            independently of y and of the members' mean, E[1 / sd^2] = (S-1) / ((S-3) sigma^2), hence

                point = c (independent of the members):  E[z^2] = (S-1)/(S-3) * T^2
                point = members' mean:                   E[z^2] = (S-1)/(S-3) * (T^2 + 1/S)

            and the estimator is ``T^2 = (S-3)/(S-1) * mean(z^2)`` (minus ``1/S`` in the second case), over
            entries with spread. The plain NLL minimiser ``T^2 = mean(z^2)`` is biased upward by the factor
            (S-1)/(S-3): a perfectly calibrated ensemble of S = 19 gets T = sqrt(18/16) = 1.061 from it (and
            1.087 when the point is the members' mean); this one gets T = 1 up to sampling error. Needs S >= 4.
            Deterministic, no optimiser. An estimate T^2 <= lower bound^2 (an over-dispersed ensemble whose point
            is its mean) is raised to ``bounds[0]``.
        ``"crps"``: minimise the mean CRPS of the scaled ensemble over log T in ``log(bounds)`` with
            ``scipy.optimize.minimize_scalar(method="bounded")``; makes no Gaussian assumption. The score is the
            fair (unbiased) CRPS by default (``crps_estimator``; :func:`stochattn.metrics.crps`): the ensemble
            estimator rewards spread by only (S-1)/S of the population value, so its minimiser shrinks a
            calibrated ensemble (Gaussian members: ``T = a / sqrt(2 - a^2)``, a = (S-1)/S, 0.90 at S = 19), while
            the fair one's minimiser is T = 1 there, and k for an ensemble under-dispersed by k.

    Args:
        samples_cal: (S, n, ...) calibration ensemble, S >= 2 (S >= 4 for ``"nll"``).
        point_cal: (n, ...) point predictions.
        y_cal: (n, ...) truth.
        objective: ``"nll"`` or ``"crps"``.
        bounds: (lower, upper) range for T (the search range of ``"crps"``; the floor of ``"nll"``).
        point_is_mean: whether ``point_cal`` is the members' mean (``"nll"`` only); None detects it (the point
            lies within 1e-3 ensemble SDs of the members' mean at every entry).
        crps_estimator: ``"fair"`` (default) or ``"ensemble"`` (the all-pairs estimator of the paper's CRPS
            tables), for ``"crps"`` only.

    Returns:
        T as a float.
    """
    x, p, t = _check_inputs(samples_cal, point_cal, y_cal, "_cal")
    lo, hi = float(bounds[0]), float(bounds[1])
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"bounds must satisfy 0 < lower < upper < inf, got {bounds!r}")
    if objective == "nll":
        s = x.shape[0]
        if s < 4:
            raise ValueError(f"the unbiased NLL temperature needs S >= 4 members (E[1/sd^2] is infinite), got S={s}")
        sd = x.std(axis=0, ddof=1)
        ok = np.ptp(x, axis=0) > 0  # exact test: std of identical members can round to ~1e-16
        if not ok.any():
            raise ValueError("samples_cal has zero spread at every entry; cannot fit a temperature")
        z2 = ((t[ok] - p[ok]) / sd[ok]) ** 2
        mean_z2 = float(np.mean(z2))
        if mean_z2 <= 0:
            raise ValueError("y_cal equals point_cal wherever samples_cal has spread; temperature would be 0")
        is_mean = _is_member_mean(x, p, sd) if point_is_mean is None else bool(point_is_mean)
        t2 = (s - 3) / (s - 1) * mean_z2 - (1.0 / s if is_mean else 0.0)
        return math.sqrt(max(t2, lo**2))
    if objective == "crps":
        if crps_estimator not in CRPS_ESTIMATORS:
            raise ValueError(f"crps_estimator must be one of {CRPS_ESTIMATORS}, got {crps_estimator!r}")
        dev = x - p  # deviations from the point prediction, (S, n, ...)
        resid = t - p
        # CRPS(T) = mean|T dev - resid| - T * 0.5 mean|dev - dev'|; the spread term is linear in T. The fair
        # estimator averages |dev - dev'| over the S (S - 1) pairs i != j: the all-pairs mean times S / (S - 1).
        s = x.shape[0]
        spread1 = float(np.mean(0.5 * mean_abs_pair_diff(dev))) * (s / (s - 1) if crps_estimator == "fair" else 1.0)

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
    *,
    finite_sample: bool = True,
) -> float:
    """Smallest factor c for which the scaled central interval covers >= ``coverage`` of calibration entries.

    The central interval [lo, hi] at ``level`` comes from sample quantiles (``metrics.central_interval``);
    scaling by c maps it to [point + c (lo - point), point + c (hi - point)] (quantiles are affine-equivariant).
    Per entry the set of c > 0 that cover y is an interval [L, U]: in the usual case lo <= point <= hi it is
    [score, inf) with the nonconformity score ``(y - point) / (hi - point)`` if y > point else
    ``(point - y) / (point - lo)`` (0 when y == point); when the point lies outside its interval (possible for a
    narrow central interval of a few members) covering needs c in a bounded range, and an entry whose interval
    has zero width on the side of y is never covered. c is the smallest value at which at least k of the n
    entries are covered (the k-th smallest score in the usual case):

    * ``finite_sample=True`` (default): split conformal, ``k = ceil((n + 1) * coverage)``, which gives
      >= ``coverage`` on exchangeable test data.
    * ``finite_sample=False``: the empirical quantile, ``k = max(1, ceil(n * coverage))``; the calibration
      coverage is then the smallest attainable fraction >= ``coverage``, i.e. in [coverage, coverage + 1/n) when
      the covering sets do not tie. The mode for matching another method's empirical coverage measured on the
      same n entries (``coverage`` may be anything in [0, 1]; 1.0 gives the smallest c covering every entry).

    Args:
        samples_cal: (S, n, ...) calibration ensemble, S >= 2.
        point_cal: (n, ...) point predictions.
        y_cal: (n, ...) truth.
        coverage: target coverage in (0, 1) (e.g. 0.95, or another method's empirical coverage); [0, 1] with
            ``finite_sample=False``.
        level: nominal level of the central interval that is scaled, in (0, 1).
        finite_sample: use the (n + 1) split-conformal correction (True) or the plain empirical quantile.

    Returns:
        c as a float (> 0).
    """
    x, p, t = _check_inputs(samples_cal, point_cal, y_cal, "_cal")
    if finite_sample:
        cov = check_level(coverage, "coverage")
    else:
        cov = float(as_array(coverage, "coverage"))
        if not 0.0 <= cov <= 1.0:
            raise ValueError(f"coverage must be in [0, 1], got {coverage!r}")
    lvl = check_level(level, "level")
    lo, hi = central_interval(x, lvl)
    d, a, b = (t - p).ravel(), (lo - p).ravel(), (hi - p).ravel()
    # covered  <=>  c a <= d <= c b; each side bounds c from below or above depending on the sign of a / b
    lower, upper = np.zeros_like(d), np.full_like(d, np.inf)
    empty = ((a == 0) & (d < 0)) | ((b == 0) & (d > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.where(a < 0, np.maximum(lower, d / a), lower)
        upper = np.where(a > 0, np.minimum(upper, d / a), upper)
        lower = np.where(b > 0, np.maximum(lower, d / b), lower)
        upper = np.where(b < 0, np.minimum(upper, d / b), upper)
    empty |= (lower > upper) | (upper <= 0)
    n = d.size
    # the 1e-9 absorbs round-off in a coverage that is itself a fraction j/n (e.g. 19/20 * 20 = 19.000000000000004)
    k = math.ceil((n + 1) * cov - 1e-9) if finite_sample else max(1, math.ceil(n * cov - 1e-9))
    if k > n:
        raise ValueError(
            f"coverage={cov} needs at least {math.ceil(cov / (1 - cov))} calibration entries "
            f"(ceil((n+1) coverage) <= n), got n={n}"
        )
    starts, ends = np.sort(lower[~empty]), np.sort(upper[~empty])
    # entries covered at c = starts[j]: those with L <= c minus those whose U < c
    count = np.searchsorted(starts, starts, side="right") - np.searchsorted(ends, starts, side="left")
    reached = np.flatnonzero(count >= k)
    if reached.size == 0:
        raise ValueError(
            "no finite factor reaches the target coverage: too many calibration entries have a zero-width "
            "interval on the side of y (samples_cal without spread) or cannot be covered by scaling"
        )
    c = float(starts[reached[0]])
    if c <= 0:
        raise ValueError("conformal factor is 0: y_cal equals point_cal for the required fraction of entries")
    # Inflate by a few ulps so the entry that defines c stays covered despite rounding in point + c (x - point).
    return c * (1.0 + 1e-12)
