"""Calibration, sharpness, proper-score and accuracy metrics for predictive ensembles.

Shape conventions (numpy in, numpy out; torch tensors are accepted and converted):
    samples  (S, n, ...)   S ensemble members (predictive samples) for n cases
    y        (n, ...)      observed truth
    point    (n, ...)      the method's point prediction

Definitions chosen (see the docstrings for details):
    * PIT is the randomised rank ``(r + V) / (S + 1)``, ``V ~ Uniform(0, e + 1)``; it is exactly Uniform(0, 1)
      whenever y is exchangeable with the S members, ties included.
    * W1 is the exact Wasserstein-1 distance between the empirical PIT distribution and U(0, 1).
    * Central intervals are numpy's linearly interpolated sample quantiles (the paper's statistic). Their coverage
      under perfect calibration is below the nominal level for a finite ensemble (0.868 at nominal 0.95 with
      S = 19 Gaussian members): :func:`calibrated_coverage` computes it, to print beside any measured coverage;
      ``central_interval(..., method="order")`` gives order-statistic intervals whose coverage is exact and at
      least the nominal level for any exchangeable ensemble (where S allows it).
    * CRPS uses the ensemble estimator ``E|X - y| - 0.5 E|X - X'|`` over all S^2 pairs (scoringrules' default
      ``"qd"`` estimator, which equals it exactly; the paper's), so that ``crps == error - spread``; it exceeds the
      CRPS of the law the members are drawn from by ``E|X - X'| / (2 S)`` on average. ``crps(...,
      estimator="fair")`` is the unbiased ("fair") estimator, with ``S (S - 1)`` pairs.
    * Latitude weights, lat-weighted RMSE and ACC follow ClimaX (``w = cos(lat) / mean(cos(lat))``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable

import numpy as np

DEFAULT_LEVELS = (0.25, 0.5, 0.75, 0.95)

__all__ = [
    "DEFAULT_LEVELS",
    "pit",
    "w1_uniform",
    "central_interval",
    "INTERVAL_METHODS",
    "order_statistic_rank",
    "calibrated_coverage",
    "coverage_and_width",
    "crps",
    "CRPS_ESTIMATORS",
    "crps_decomposition",
    "energy_score",
    "mae",
    "rmse",
    "nrmse",
    "latitude_weights",
    "lat_weighted_rmse",
    "lat_weighted_acc",
    "summarize",
    "w1_null_floor",
    "PIT_BIAS_Z",
    "pit_mean_z",
    "spread_tracking",
    "point_residual",
    "pooled_moments",
    "bias_sources",
    "climax_lat_weighted_acc",
    "normalised_energy_score",
    "ENERGY_ESTIMATORS",
    "ENERGY_NORMALISATIONS",
]


@functools.cache
def _scoringrules():
    """scoringrules, imported on first use, its numba kernels cached on disk.

    scoringrules 0.10 JIT-compiles with numba and never sets ``cache=True`` (its issue #80): its ``njit`` kernels
    with explicit signatures (``_gauss_kern_uv`` / ``_mv``) compile at import, its gufuncs at first call, in every
    process that scores, i.e. in most workflow jobs. While it imports, ``numba.njit`` and ``numba.guvectorize``
    default ``cache=True``, so numba stores the machine code (next to scoringrules' sources, or in its user cache
    where those are read-only) and later processes load it. Measured 2026-11-26, import: 8.5 s cold, 4.5 s warm
    with only the gufuncs cached, 1.7 s with both. The kernels and results are scoringrules' own; only where the
    machine code is kept changes. Without numba, scoringrules runs its numpy backend."""
    try:
        import numba
    except ImportError:
        import scoringrules

        return scoringrules

    plain = {name: getattr(numba, name) for name in ("guvectorize", "njit")}

    def cached(decorator):
        def with_cache(*args, **kwargs):
            kwargs.setdefault("cache", True)
            return decorator(*args, **kwargs)

        return with_cache

    for name, decorator in plain.items():
        setattr(numba, name, cached(decorator))
    try:
        import scoringrules
    finally:
        for name, decorator in plain.items():
            setattr(numba, name, decorator)
    return scoringrules


# --------------------------------------------------------------------------------------------------------------
# input validation helpers (shared with stochattn.scaling)
# --------------------------------------------------------------------------------------------------------------
def as_array(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a finite float64 numpy array; raise ValueError naming ``name`` on NaN/inf."""
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a numeric array: {err}") from None
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains inf")
    return arr


def check_samples(samples: Any, name: str = "samples", min_members: int = 1) -> np.ndarray:
    """Validate an ensemble of shape (S, n, ...) with S >= ``min_members``."""
    arr = as_array(samples, name)
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (S, n, ...), got shape {arr.shape}")
    if arr.shape[0] < min_members:
        raise ValueError(f"{name} needs at least {min_members} ensemble members (axis 0), got {arr.shape[0]}")
    return arr


def check_target(arr_like: Any, name: str, samples: np.ndarray, samples_name: str = "samples") -> np.ndarray:
    """Validate an array of shape ``samples.shape[1:]`` (truth or point prediction)."""
    arr = as_array(arr_like, name)
    if arr.shape != samples.shape[1:]:
        raise ValueError(
            f"{name} has shape {arr.shape} but {samples_name} has shape {samples.shape}; "
            f"expected {name}.shape == {samples_name}.shape[1:]"
        )
    return arr


def check_level(level: float, name: str = "level") -> float:
    """Validate a probability level strictly inside (0, 1)."""
    try:
        value = float(level)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in (0, 1), got {level!r}") from None
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {level!r}")
    return value


def _check_same_shape(a: Any, b: Any, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    a_arr, b_arr = as_array(a, name_a), as_array(b, name_b)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"{name_a} has shape {a_arr.shape} but {name_b} has shape {b_arr.shape}; they must match")
    if a_arr.size == 0:
        raise ValueError(f"{name_a} is empty")
    return a_arr, b_arr


def _level_key(level: float) -> str:
    """0.95 -> '95', 0.5 -> '50', 0.975 -> '97.5'."""
    return f"{round(level * 100, 6):g}"


# --------------------------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------------------------
def pit(samples: Any, y: Any, rng: np.random.Generator | int) -> np.ndarray:
    """Randomised probability integral transform of ``y`` under the ensemble.

    With ``r = #{s: x_s < y}`` and ``e = #{s: x_s == y}``, returns ``(r + V) / (S + 1)`` with
    ``V ~ Uniform(0, e + 1)`` drawn independently per entry.

    Why this is exactly uniform: if y is exchangeable with the S members, its rank among the S + 1 values with
    ties broken uniformly at random is uniform on {0, ..., S}; given r and e that rank is ``r + K`` with
    ``K ~ UniformInt{0, ..., e}``. Adding an independent ``U ~ Uniform(0, 1)`` spreads each rank cell
    uniformly over ``[k/(S+1), (k+1)/(S+1))``, and ``K + U ~ Uniform(0, e + 1)``. Hence PIT ~ U(0, 1) exactly.

    NOTE[DIFF]: the paper computes PIT "from the empirical predictive CDF" (App. "Predictive Samples"), i.e.
    ``F_hat(y) = r / S`` (or ``(r + e) / S``), which is discrete (S + 1 values) and not uniform even for a
    perfectly calibrated ensemble: its W1 from U(0, 1) has a positive floor of order 1 / S, and ties (members
    equal to y, e.g. a deterministic method) pile up at one value. The randomised rank above is exactly uniform
    under calibration, ties included, so W1 and the histograms measure miscalibration alone; it draws one uniform
    per entry (``rng``), so the seed is part of every PIT number.

    Args:
        samples: (S, n, ...) ensemble, S >= 1.
        y: (n, ...) truth.
        rng: numpy Generator or int seed (required; no hidden global randomness).

    Returns:
        (n, ...) PIT values in [0, 1).
    """
    x = check_samples(samples)
    y_arr = check_target(y, "y", x)
    gen = _as_generator(rng)
    below = (x < y_arr).sum(axis=0)
    ties = (x == y_arr).sum(axis=0)
    v = gen.uniform(0.0, 1.0, size=y_arr.shape) * (ties + 1)
    return (below + v) / (x.shape[0] + 1)


def _as_generator(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def w1_uniform(pit_values: Any) -> float:
    """Exact Wasserstein-1 distance between the empirical distribution of ``pit_values`` and U(0, 1).

    ``W1 = int_0^1 |G(u) - u| du = int_0^1 |Q(p) - p| dp`` with G the empirical CDF and Q its quantile function.
    Q equals the k-th order statistic v_(k) on ((k-1)/n, k/n], so the integral is a sum of n integrals of
    ``|v_(k) - p|``, each evaluated in closed form with the antiderivative ``F(p) = (p - v)|p - v| / 2``.

    Args:
        pit_values: any shape; flattened. Values outside [0, 1] are allowed (the formula holds for any reals).

    Returns:
        W1 as a float.
    """
    v = np.sort(as_array(pit_values, "pit_values").ravel())
    n = v.size
    if n == 0:
        raise ValueError("pit_values is empty")
    p_hi = np.arange(1, n + 1) / n
    p_lo = np.arange(0, n) / n

    def antiderivative(p: np.ndarray) -> np.ndarray:
        d = p - v
        return 0.5 * d * np.abs(d)

    return float(np.sum(antiderivative(p_hi) - antiderivative(p_lo)))


INTERVAL_METHODS = ("interpolated", "order")


def order_statistic_rank(num_members: int, level: float) -> tuple[int, float]:
    """``(k, achieved)`` of the order-statistic central interval ``[x_(k), x_(S+1-k)]`` (1-based ranks) at ``level``.

    If y and the S members are exchangeable (a perfectly calibrated ensemble) and continuous, y's rank among the
    S + 1 values is uniform, so ``P(x_(k) <= y <= x_(S+1-k)) = (S + 1 - 2k) / (S + 1)`` exactly, whatever their
    law. ``k = floor((S + 1)(1 - level) / 2)`` is the largest rank whose coverage ``achieved`` is still >= level.
    ``k = 0`` means the level is out of reach with S members (``achieved`` is then 1, that of the unbounded
    interval): even ``[min, max]`` covers only ``(S - 1) / (S + 1)`` (0.90 at S = 19); :func:`central_interval`
    then raises.
    """
    s = _check_members(num_members)
    lvl = check_level(level)
    k = int(math.floor((s + 1) * (1.0 - lvl) / 2.0 + 1e-9))
    return k, (s + 1 - 2 * k) / (s + 1)


def _check_members(num_members: Any) -> int:
    if isinstance(num_members, bool) or not isinstance(num_members, (int, np.integer)) or num_members < 2:
        raise ValueError(f"num_members must be an integer >= 2, got {num_members!r}")
    return int(num_members)


def central_interval(samples: Any, level: float, method: str = "interpolated") -> tuple[np.ndarray, np.ndarray]:
    """Central prediction interval at ``level`` from an ensemble.

    ``method="interpolated"`` (default; the paper's statistic): numpy's linearly interpolated sample quantiles at
    (1 - level)/2 and (1 + level)/2. For a finite ensemble its coverage under perfect calibration is below
    ``level`` (the outermost members sit inside the tails they sample): at nominal 0.95 it is 0.791 with S = 10
    Gaussian members, 0.868 with S = 19 (the paper's S) and 0.932 with S = 100 (:func:`calibrated_coverage`,
    which a measured coverage should be read against).

    ``method="order"``: the order statistics ``[x_(k), x_(S+1-k)]`` with ``k`` from :func:`order_statistic_rank`,
    the narrowest such interval whose coverage for an exchangeable ensemble, ``(S + 1 - 2k) / (S + 1)``, is at
    least ``level`` (exact, for any continuous law; e.g. 0.96 for 95 % with S = 100). Raises when S is too small
    for the level (S = 19 reaches 0.90 at most; 95 % needs S >= 39).

    Args:
        samples: (S, n, ...) ensemble, S >= 2.
        level: nominal coverage in (0, 1).
        method: ``"interpolated"`` or ``"order"``.

    Returns:
        (lo, hi), each (n, ...).
    """
    x = check_samples(samples, min_members=2)
    lvl = check_level(level)
    if method == "interpolated":
        lo, hi = np.quantile(x, [(1.0 - lvl) / 2.0, (1.0 + lvl) / 2.0], axis=0)
        return lo, hi
    if method == "order":
        s = x.shape[0]
        k, _ = order_statistic_rank(s, lvl)
        if k < 1:
            need = math.ceil(2.0 / (1.0 - lvl) - 1.0 - 1e-9)
            raise ValueError(f"an order-statistic interval at level {lvl:g} needs S >= {need} members; with S = {s} "
                             f"the widest one, [min, max], covers (S - 1)/(S + 1) = {(s - 1) / (s + 1):.4g}")
        xs = np.sort(x, axis=0)
        return xs[k - 1], xs[s - k]
    raise ValueError(f"method must be one of {INTERVAL_METHODS}, got {method!r}")


@functools.lru_cache(maxsize=1024)
def _upper_end_probability(s: int, p: float, law: str) -> float:
    """``E F(Q_p)`` for numpy's interpolated sample quantile Q_p of S iid members from the continuous law F (y ~ F
    independent): the probability that y <= Q_p. See :func:`calibrated_coverage`."""
    h = (s - 1) * p
    j = int(math.floor(h + 1e-12))
    g = h - j
    if g < 1e-12 or j + 1 >= s:  # Q_p is the order statistic x_(j+1): E F(x_(j+1)) = (j + 1)/(S + 1), any law
        return (min(j, s - 1) + 1) / (s + 1)
    if law == "uniform":  # F(Q_p) = (1 - g) U_(j+1) + g U_(j+2)
        return (j + 1 + g) / (s + 1)
    from scipy import special

    def beta_nodes(a: float, b: float, n: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Gauss-Jacobi nodes and weights of the Beta(a, b) law on (0, 1)."""
        x, w = special.roots_jacobi(n, b - 1.0, a - 1.0)
        return (x + 1.0) / 2.0, w / w.sum()

    k = j + 1  # 1-based rank of the lower member; U_(k) ~ Beta(k, S - k + 1), and given it
    u, wu = beta_nodes(k, s - k + 1)  # U_(k+1) = U_(k) + (1 - U_(k)) B with B ~ Beta(1, S - k), independent
    b, wb = beta_nodes(1, s - k)
    upper = u[:, None] + (1.0 - u[:, None]) * b[None, :]
    val = special.ndtr((1.0 - g) * special.ndtri(u[:, None]) + g * special.ndtri(upper))
    return float(wu @ val @ wb)


def calibrated_coverage(num_members: int, level: float, method: str = "interpolated", law: str = "normal") -> float:
    """Expected coverage of :func:`central_interval` at ``level`` for a perfectly calibrated ensemble of S members:
    y and the members iid from one continuous law. What a measured coverage of S-member intervals should be read
    against, as a pooled-PIT W1 against :func:`w1_null_floor`.

    * ``method="order"``: ``(S + 1 - 2k) / (S + 1)`` (:func:`order_statistic_rank`), for any law; NaN where S is
      too small for the level (``central_interval`` raises there).
    * ``method="interpolated"`` (the paper's statistic): the interpolated quantile ``Q_p = (1 - g) x_(j) +
      g x_(j+1)`` (``(S - 1) p = j - 1 + g``) has ``P(y <= Q_p)`` between ``j / (S + 1)`` and ``(j + 1) / (S + 1)``,
      where the law decides through the spacing of the two members: ``law="normal"`` (default) is computed by
      Gauss-Jacobi quadrature over the two order statistics (error < 1e-7), ``law="uniform"`` is
      ``(S - 1) level / (S + 1)`` in closed form; heavier tails cover more. At nominal 0.95, normal: 0.7915
      (S = 10), 0.8679 (S = 19), 0.9324 (S = 100); any law: within 1/(S + 1) of the uniform value.
    """
    s = _check_members(num_members)
    lvl = check_level(level)
    if method == "order":
        k, achieved = order_statistic_rank(s, lvl)
        return achieved if k >= 1 else math.nan
    if method != "interpolated":
        raise ValueError(f"method must be one of {INTERVAL_METHODS}, got {method!r}")
    if law not in ("normal", "uniform"):
        raise ValueError(f"law must be 'normal' or 'uniform', got {law!r}")
    # both laws are symmetric and numpy's interpolation is too (position (S-1)(1-p) = (S-1) - (S-1)p), so
    # P(y < Q_lo) = 1 - P(y <= Q_hi)
    return 2.0 * _upper_end_probability(s, round((1.0 + lvl) / 2.0, 12), law) - 1.0


def coverage_and_width(
    samples: Any, y: Any, levels: Iterable[float] = DEFAULT_LEVELS, method: str = "interpolated"
) -> dict[float, dict[str, float]]:
    """Empirical coverage and mean width of the central intervals at each level.

    Args:
        samples: (S, n, ...) ensemble, S >= 2.
        y: (n, ...) truth.
        levels: nominal levels in (0, 1).
        method: the interval (:func:`central_interval`): ``"interpolated"`` (the paper's) or ``"order"``.

    Returns:
        ``{level: {"coverage": fraction of entries with lo <= y <= hi, "width": mean(hi - lo)}}``; read the
        coverage against ``calibrated_coverage(S, level, method)``, what a calibrated ensemble of S members gets.
    """
    x = check_samples(samples, min_members=2)
    y_arr = check_target(y, "y", x)
    out: dict[float, dict[str, float]] = {}
    for level in levels:
        lvl = check_level(level, "levels")
        lo, hi = central_interval(x, lvl, method)
        covered = (lo <= y_arr) & (y_arr <= hi)
        out[lvl] = {"coverage": float(covered.mean()), "width": float((hi - lo).mean())}
    return out


# --------------------------------------------------------------------------------------------------------------
# proper scores
# --------------------------------------------------------------------------------------------------------------
CRPS_ESTIMATORS = ("ensemble", "fair")


def crps(samples: Any, y: Any, estimator: str = "ensemble") -> np.ndarray:
    """Per-entry CRPS of an ensemble.

    * ``estimator="ensemble"`` (default; the paper's): ``E|X - y| - 0.5 E|X - X'|`` with E|X - X'| over all S^2
      pairs, the CRPS of the empirical law of the members (scoringrules' ``"qd"`` estimator, equal to it
      exactly). As an estimate of the CRPS of the law the members are drawn from it is biased upward by
      ``E|X - X'| / (2S)``: for a perfectly calibrated ensemble (y and members iid, any law) its mean is
      ``(1 + 1/S)`` times the fair one's, 5.3 % above at S = 19, 50 % at S = 2.
    * ``estimator="fair"``: ``E|X - y| - 1/(2 S (S - 1)) sum_{i != j} |x_i - x_j|`` (scoringrules' ``"fair"``;
      Ferro 2014), unbiased for that law's CRPS, so ensembles of different sizes compare; needs S >= 2.

    Args:
        samples: (S, n, ...) ensemble, S >= 1 (S >= 2 for ``"fair"``).
        y: (n, ...) truth.
        estimator: ``"ensemble"`` or ``"fair"``.

    Returns:
        (n, ...) CRPS values.
    """
    if estimator not in CRPS_ESTIMATORS:
        raise ValueError(f"estimator must be one of {CRPS_ESTIMATORS}, got {estimator!r}")
    x = check_samples(samples, min_members=2 if estimator == "fair" else 1)
    y_arr = check_target(y, "y", x)
    name = "qd" if estimator == "ensemble" else "fair"
    return np.asarray(_scoringrules().crps_ensemble(y_arr, x, m_axis=0, estimator=name), dtype=np.float64)


def mean_abs_pair_diff(x: np.ndarray) -> np.ndarray:
    """E|X - X'| over all S^2 ordered pairs along axis 0, via sorting: (2/S^2) sum_i (2i - S - 1) x_(i)."""
    s = x.shape[0]
    xs = np.sort(x, axis=0)
    coef = (2.0 * np.arange(1, s + 1) - s - 1).reshape((s,) + (1,) * (x.ndim - 1))
    return 2.0 * np.sum(coef * xs, axis=0) / s**2


def crps_decomposition(samples: Any, y: Any) -> dict[str, np.ndarray]:
    """CRPS split into prediction error and spread reward.

    Returns:
        dict of (n, ...) arrays: ``"crps"`` (scoringrules), ``"error"`` = E|X - y|,
        ``"spread"`` = 0.5 E|X - X'| (all S^2 pairs); ``crps == error - spread`` up to rounding.
    """
    x = check_samples(samples)
    y_arr = check_target(y, "y", x)
    error = np.abs(x - y_arr).mean(axis=0)
    spread = 0.5 * mean_abs_pair_diff(x)
    return {"crps": crps(x, y_arr), "error": error, "spread": spread}


def energy_score(samples: Any, y: Any) -> np.ndarray:
    """Energy Score for vector outputs, ``E||X - y|| - 0.5 E||X - X'||`` (all S^2 pairs, Euclidean norm).

    Uses ``scoringrules.es_ensemble`` with its ``"nrg"`` estimator (the formula above).

    Args:
        samples: (S, n, d) ensemble.
        y: (n, d) truth.

    Returns:
        (n,) Energy Scores.
    """
    x = check_samples(samples)
    if x.ndim != 3:
        raise ValueError(f"samples must have shape (S, n, d) for the energy score, got shape {x.shape}")
    y_arr = check_target(y, "y", x)
    return np.asarray(_scoringrules().es_ensemble(y_arr, x, m_axis=0, v_axis=-1, estimator="nrg"), dtype=np.float64)


# --------------------------------------------------------------------------------------------------------------
# accuracy
# --------------------------------------------------------------------------------------------------------------
def mae(point: Any, y: Any) -> float:
    """Mean absolute error over all entries; ``point`` and ``y`` have the same shape."""
    p, t = _check_same_shape(point, y, "point", "y")
    return float(np.mean(np.abs(p - t)))


def rmse(point: Any, y: Any) -> float:
    """Root mean squared error over all entries; ``point`` and ``y`` have the same shape."""
    p, t = _check_same_shape(point, y, "point", "y")
    return float(np.sqrt(np.mean((p - t) ** 2)))


def nrmse(point: Any, y: Any, sigma_y: float) -> float:
    """RMSE / sigma_y (the UCI accuracy metric); ``sigma_y`` > 0 is the target's standard deviation."""
    sigma = float(as_array(sigma_y, "sigma_y"))
    if sigma <= 0:
        raise ValueError(f"sigma_y must be > 0, got {sigma_y!r}")
    return rmse(point, y) / sigma


def latitude_weights(lat_deg: Any) -> np.ndarray:
    """ClimaX latitude weights ``w = cos(lat) / mean(cos(lat))`` (mean 1), shape (n_lat,)."""
    lat = as_array(lat_deg, "lat_deg")
    if lat.ndim != 1 or lat.size == 0:
        raise ValueError(f"lat_deg must be a non-empty 1-D array, got shape {lat.shape}")
    if np.any(np.abs(lat) > 90.0):
        raise ValueError("lat_deg must lie in [-90, 90] degrees")
    w = np.cos(np.deg2rad(lat))
    if w.mean() <= 0:
        raise ValueError("lat_deg has zero mean cos(lat) (only poles?)")
    return w / w.mean()


def _check_field(pred: Any, truth: Any, lat_deg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, t = _check_same_shape(pred, truth, "pred", "truth")
    if p.ndim < 2:
        raise ValueError(f"pred must have shape (..., n_lat, n_lon), got shape {p.shape}")
    w = latitude_weights(lat_deg)
    if w.shape[0] != p.shape[-2]:
        raise ValueError(f"lat_deg has {w.shape[0]} entries but pred has n_lat = {p.shape[-2]} (axis -2)")
    return p, t, w[:, None]


def lat_weighted_rmse(pred: Any, truth: Any, lat_deg: Any) -> float:
    """ClimaX latitude-weighted RMSE for fields of shape (..., n_lat, n_lon).

    ``mean over leading axes of sqrt(mean over (lat, lon) of w * (pred - truth)^2)``.
    """
    p, t, w = _check_field(pred, truth, lat_deg)
    per_field = np.sqrt(np.mean(w * (p - t) ** 2, axis=(-2, -1)))
    return float(np.mean(per_field))


def _anomalies(pred: Any, truth: Any, climatology: Any, lat_deg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pred - clim, truth - clim, latitude weights (n_lat, 1))`` of fields (..., n_lat, n_lon), checked."""
    p, t, w = _check_field(pred, truth, lat_deg)
    clim = as_array(climatology, "climatology")
    try:
        clim = np.broadcast_to(clim, t.shape)
    except ValueError:
        raise ValueError(f"climatology has shape {clim.shape}, not broadcastable to truth shape {t.shape}") from None
    return p - clim, t - clim, w


def lat_weighted_acc(pred: Any, truth: Any, climatology: Any, lat_deg: Any) -> float:
    """Latitude-weighted anomaly correlation coefficient for fields of shape (..., n_lat, n_lon).

    Anomalies ``a = pred - clim`` and ``b = truth - clim`` are each demeaned over space (unweighted mean over
    lat and lon, as ClimaX does), then per field ``ACC = sum(w a' b') / sqrt(sum(w a'^2) sum(w b'^2))``,
    averaged over the leading (time/sample) axes.

    Args:
        pred: (..., n_lat, n_lon).
        truth: (..., n_lat, n_lon).
        climatology: broadcastable to ``truth`` (typically (n_lat, n_lon)).
        lat_deg: (n_lat,).

    Raises:
        ValueError: if an anomaly field has zero spatial variance (ACC undefined).
    """
    # NOTE[DIFF]: ClimaX (src/climax/utils/metrics.py) demeans over the whole evaluation batch and sums over it,
    # so its value depends on the loader's batch size; we compute ACC per field (ClimaX with batch size 1) and
    # average over fields, the usual per-time-step ACC.
    a, b, w = _anomalies(pred, truth, climatology, lat_deg)
    a = a - a.mean(axis=(-2, -1), keepdims=True)
    b = b - b.mean(axis=(-2, -1), keepdims=True)
    saa = np.sum(w * a * a, axis=(-2, -1))
    sbb = np.sum(w * b * b, axis=(-2, -1))
    if np.any(saa <= 0):
        raise ValueError("pred anomalies (pred - climatology) have zero spatial variance in some field; ACC undefined")
    if np.any(sbb <= 0):
        raise ValueError(
            "truth anomalies (truth - climatology) have zero spatial variance in some field; ACC undefined"
        )
    acc = np.sum(w * a * b, axis=(-2, -1)) / np.sqrt(saa * sbb)
    return float(np.mean(acc))


# --------------------------------------------------------------------------------------------------------------
# one-call summary
# --------------------------------------------------------------------------------------------------------------
def summarize(
    samples: Any,
    point: Any,
    y: Any,
    rng: np.random.Generator | int,
    levels: Iterable[float] = DEFAULT_LEVELS,
) -> tuple[dict[str, float], np.ndarray]:
    """Scalar metrics of one run plus its PIT values (to pool across splits before computing W1).

    Args:
        samples: (S, n, ...) ensemble, S >= 2.
        point: (n, ...) point prediction.
        y: (n, ...) truth.
        rng: Generator or int seed for the PIT randomisation.
        levels: interval levels for coverage/width.

    Returns:
        ``(scalars, pit_values)``; scalars has keys ``mae, rmse, crps, crps_error, crps_spread,
        coverage_<L>, width_<L>`` (L = level in percent, e.g. ``coverage_95``), ``w1``, and beyond the paper
        ``crps_fair`` (:func:`crps` with ``estimator="fair"``) and ``coverage_<L>_calibrated``
        (:func:`calibrated_coverage` at this S: what a perfectly calibrated ensemble's ``coverage_<L>`` averages);
        pit_values has shape (n, ...).
    """
    x = check_samples(samples, min_members=2)
    y_arr = check_target(y, "y", x)
    p = check_target(point, "point", x)
    dec = crps_decomposition(x, y_arr)
    out: dict[str, float] = {
        "mae": mae(p, y_arr),
        "rmse": rmse(p, y_arr),
        "crps": float(dec["crps"].mean()),
        "crps_error": float(dec["error"].mean()),
        "crps_spread": float(dec["spread"].mean()),
        # the fair estimator from the same parts: error - spread * S / (S - 1)
        "crps_fair": float((dec["error"] - dec["spread"] * x.shape[0] / (x.shape[0] - 1)).mean()),
    }
    for level, cw in coverage_and_width(x, y_arr, levels).items():
        out[f"coverage_{_level_key(level)}"] = cw["coverage"]
        out[f"width_{_level_key(level)}"] = cw["width"]
        out[f"coverage_{_level_key(level)}_calibrated"] = calibrated_coverage(x.shape[0], level)
    pit_values = pit(x, y_arr, rng)
    out["w1"] = w1_uniform(pit_values)
    return out, pit_values


def w1_null_floor(n: int) -> float:
    """Expected W1 of n iid U(0, 1) values: what a perfectly calibrated method's pooled-PIT W1 averages over n test
    points (the randomised PIT is exactly uniform then), ~= 0.313 / sqrt(n).

    Assumes the n PIT values are independent. Pooled values that are correlated (the grid cells of one ClimaX
    field, the steps of one forecast window, the coordinates of one output) behave like fewer independent values:
    a calibrated method's W1 then averages above this floor, by up to sqrt(n / n_eff) with n_eff the effective
    number of independent values (e.g. the number of forecasts when the cells of a field move together). Read it
    as a lower bound there. ``n`` must be an integer >= 1 (a count of values).

    Exact for finite n: ``E W1 = int_0^1 E|G_n(t) - t| dt`` with ``n G_n(t) ~ Binomial(n, t)``, whose mean absolute
    deviation is ``2 k C(n, k) t^k (1 - t)^(n - k + 1)``, ``k = floor(n t) + 1`` (de Moivre). On ``[j/n, (j+1)/n)``
    the integral is a regularised incomplete beta function:
    ``E W1 = sum_j 2 (j + 1)(n - j) / (n (n + 1)(n + 2)) * [I_{(j+1)/n} - I_{j/n}](j + 2, n - j + 1)``.
    Beyond 1e5 values the Brownian-bridge limit ``sqrt(2/pi) int sqrt(u(1-u)) du / sqrt(n) = sqrt(pi / (32 n))``
    (relative difference < 1e-6 there).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        if isinstance(n, (float, np.floating)) and float(n).is_integer():
            n = int(n)
        else:
            raise ValueError(f"n must be an integer count of PIT values, got {n!r}")
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n > 100_000:
        return math.sqrt(math.pi / (32.0 * n))
    from scipy.special import betainc

    j = np.arange(n, dtype=np.float64)
    a, b = j + 2.0, n - j + 1.0
    cell = betainc(a, b, (j + 1.0) / n) - betainc(a, b, j / n)
    return float(np.sum(2.0 * (j + 1.0) * (n - j) / (n * (n + 1.0) * (n + 2.0)) * cell))


PIT_BIAS_Z = 3.0
"""A PIT mean more than this many standard errors from 1/2 flags a point bias (:func:`pit_mean_z`)."""


def pit_mean_z(pit_values: Any) -> tuple[float, float]:
    """(mean, z) of PIT values: ``z = (mean - 1/2) / SE``, ``SE = std / sqrt(n)`` (sample std, ddof 1).

    A calibrated method's PIT is uniform, mean 1/2; ``|z| > PIT_BIAS_Z`` says its predictive distribution sits off
    centre (the truth mostly above, z > 0, or below its samples): a point bias of the backbone, which a dispersion
    metric such as W1 does not tell apart from miscalibrated spread."""
    v = as_array(pit_values, "pit_values").ravel()
    if v.size < 2:
        raise ValueError(f"pit_mean_z needs at least 2 PIT values, got {v.size}")
    mean, se = float(v.mean()), float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, (mean - 0.5) / se if se > 0 else math.copysign(math.inf, mean - 0.5) if mean != 0.5 else 0.0


def spread_tracking(samples: Any, point: Any, y: Any, bins: int = 10) -> dict[str, Any]:
    """Does a method's per-input spread follow its error? Spearman rank correlation between the ensemble's
    per-input standard deviation and ``|y - point|``, over the inputs and over ``bins`` equal-count bins of the
    spread (deciles by default: the binned means, which average out the residual's own noise).

    Returns ``spearman`` (inputs), ``spearman_binned`` (bin means), ``spread`` and ``abs_residual`` (per-bin means,
    lowest spread first) and ``n``. A homoscedastic predictive has no rank signal (correlations near 0); a spread
    that tracks the error gives correlations near 1 over the bins."""
    from scipy.stats import spearmanr

    x = check_samples(samples, min_members=2)
    p, t = _check_same_shape(point, y, "point", "y")
    spread, err = x.std(axis=0, ddof=1).ravel(), np.abs(t - p).ravel()
    if spread.size != err.size or spread.size < bins:
        raise ValueError(f"spread_tracking: {spread.size} inputs for {err.size} residuals and {bins} bins")
    order = np.argsort(spread, kind="stable")
    groups = np.array_split(order, bins)
    s_bin = np.array([spread[g].mean() for g in groups])
    e_bin = np.array([err[g].mean() for g in groups])
    rho, rho_binned = spearmanr(spread, err).statistic, spearmanr(s_bin, e_bin).statistic
    return {"spearman": float(rho), "spearman_binned": float(rho_binned), "spread": s_bin.tolist(),
            "abs_residual": e_bin.tolist(), "n": int(spread.size)}


def point_residual(point: Any, y: Any, sigma_y: float = 1.0) -> dict[str, float]:
    """The point prediction's own bias: moments of ``(y - point) / sigma_y`` over the inputs.

    ``point``, ``y``: same shape (every entry one prediction). Returns ``n``, ``mean``, ``sd`` (ddof 1) and ``z`` =
    mean / (sd / sqrt(n)): ``|z| > PIT_BIAS_Z`` says the point (for SA: the deterministic backbone's) is biased,
    whatever its ensemble does. ``n``, ``mean`` and ``sd`` pool exactly over splits (:func:`pooled_moments`)."""
    p, t = _check_same_shape(point, y, "point", "y")
    if not (sigma_y > 0):
        raise ValueError(f"sigma_y: must be positive, got {sigma_y}")
    res = ((t - p) / sigma_y).ravel()
    if res.size < 2:
        raise ValueError(f"point_residual needs at least 2 predictions, got {res.size}")
    return _moments(res.size, float(res.mean()), float(res.std(ddof=1)))


def _moments(n: float, mean: float, sd: float) -> dict[str, float]:
    se = sd / math.sqrt(n)
    z = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean != 0 else 0.0)
    return {"n": float(n), "mean": mean, "sd": sd, "z": z}


def pooled_moments(parts: Any) -> dict[str, float]:
    """:func:`point_residual`'s ``n``, ``mean``, ``sd`` and ``z`` of several groups' values concatenated, from each
    group's ``{"n", "mean", "sd"}`` alone (exact: within-group plus between-group sums of squares). ``parts``: an
    iterable of such mappings; raises ValueError when they hold fewer than 2 values in all."""
    groups = [(float(g["n"]), float(g["mean"]), float(g["sd"])) for g in parts]
    total = sum(n for n, _, _ in groups)
    if total < 2 or any(not (n >= 1) for n, _, _ in groups):
        raise ValueError(f"pooled_moments needs groups of >= 1 value and >= 2 values in all, got {groups}")
    mean = sum(n * m for n, m, _ in groups) / total
    ss = sum((n - 1) * sd**2 + n * (m - mean) ** 2 for n, m, sd in groups)
    return _moments(total, mean, math.sqrt(ss / (total - 1)))


def bias_sources(
    samples: Any, point: Any, y: Any, rng: np.random.Generator | int, sigma_y: float = 1.0, shift: Any = None
) -> dict[str, float]:
    """Where a predictive's PIT bias comes from: the point prediction, or the ensemble sitting off the point.

    ``samples (S, n)``, ``point (n,)``, ``y (n,)``; offsets in units of ``sigma_y``. Returns

    * ``point_residual_mean`` / ``point_residual_z``: mean of ``y - point`` and its z (mean / SE): a biased point
      prediction (the backbone's, for SA), whatever the ensemble does;
    * ``ensemble_offset_mean`` / ``ensemble_offset_median``: mean over inputs of (ensemble mean - point) and of
      (ensemble median - point): how far the samples sit from the point they should be centred on (for SA, the
      deterministic prediction: the paper's mean preservation holds per attention row, not through the network's
      nonlinear layers);
    * ``ensemble_offset_z``: z of the per-input (mean - point) offsets;
    * ``spread_mean``: mean per-input sample SD;
    * ``pit_mean`` / ``pit_mean_z`` of the samples as drawn, and ``pit_mean_recentred`` / ``pit_mean_z_recentred``,
      ``w1``, ``w1_recentred``: the same with every input's samples shifted so that their mean is the point (the
      offset removed, the spread kept): what is left is the point's own bias. The same ``rng`` seed draws both PITs;
    * with ``shift`` (a scalar or ``(n,)``, in the units of ``y``: an offset known without these targets, such as the
      backbone's mean residual on its training part), ``pit_mean_shifted`` / ``pit_mean_z_shifted`` and
      ``w1_shifted``: the samples as drawn plus ``shift``, by the same seed (what removing that offset would give).
    """
    x = check_samples(samples, min_members=2)
    p, t = _check_same_shape(point, y, "point", "y")
    if x.ndim != 2 or x.shape[1:] != p.shape:
        raise ValueError(f"bias_sources: samples {x.shape} do not match point {p.shape} as (S, n)")
    if not (sigma_y > 0):
        raise ValueError(f"sigma_y: must be positive, got {sigma_y}")
    seed = int(_as_generator(rng).integers(2**31))
    offset = x.mean(axis=0) - p
    recentred = x - offset
    pit_raw, pit_rc = pit(x, t, seed), pit(recentred, t, seed)
    res = point_residual(p, t, sigma_y)
    shifted = {}
    if shift is not None:
        step = as_array(shift, "shift")
        if step.ndim and step.shape != p.shape:
            raise ValueError(f"bias_sources: shift {step.shape} is neither a scalar nor point's shape {p.shape}")
        pit_sh = pit(x + step, t, seed)
        shifted = {"pit_mean_shifted": pit_mean_z(pit_sh)[0], "pit_mean_z_shifted": pit_mean_z(pit_sh)[1],
                   "w1_shifted": w1_uniform(pit_sh)}  # fmt: skip
    se_off = offset.std(ddof=1) / math.sqrt(offset.size) if offset.size > 1 else math.nan
    return {
        "n": float(p.size),
        "point_residual_mean": res["mean"],
        "point_residual_z": res["z"],
        "ensemble_offset_mean": float(offset.mean() / sigma_y),
        "ensemble_offset_median": float((np.median(x, axis=0) - p).mean() / sigma_y),
        "ensemble_offset_z": float(offset.mean() / se_off) if se_off > 0 else math.nan,
        "spread_mean": float(x.std(axis=0, ddof=1).mean() / sigma_y),
        "pit_mean": pit_mean_z(pit_raw)[0], "pit_mean_z": pit_mean_z(pit_raw)[1],
        "pit_mean_recentred": pit_mean_z(pit_rc)[0], "pit_mean_z_recentred": pit_mean_z(pit_rc)[1],
        "w1": w1_uniform(pit_raw), "w1_recentred": w1_uniform(pit_rc), **shifted,
    }


# --------------------------------------------------------------------------------------------------------------
# spatial fields (ClimaX / WeatherBench evaluation)
# --------------------------------------------------------------------------------------------------------------
# Checked against microsoft/ClimaX src/climax/utils/metrics.py (read 2026): for one variable of a batch,
#   lat_weighted_rmse = mean over the batch of sqrt(mean over (H, W) of w_lat * (pred - y)^2)   [= lat_weighted_rmse]
#   lat_weighted_acc  = pred' = (pred - clim) - mean(pred - clim), y' likewise, each mean UNWEIGHTED over the whole
#                       (B, H, W) block; ACC = sum_{B,H,W}(w pred' y') / sqrt(sum(w pred'^2) sum(w y'^2))
#                       [= climax_lat_weighted_acc; lat_weighted_acc is the per-field version]
# with w_lat = cos(lat) / mean(cos(lat)) [= latitude_weights] and clim the test partition's time mean per cell.


def climax_lat_weighted_acc(pred: Any, truth: Any, climatology: Any, lat_deg: Any) -> float:
    """ClimaX's ``lat_weighted_acc`` for ONE batch of one variable, computed exactly as ClimaX does.

    ``pred``, ``truth``: (B, n_lat, n_lon); ``climatology``: broadcastable to them (ClimaX: the partition's
    time mean, (n_lat, n_lon)); ``lat_deg``: (n_lat,). Anomalies ``a = pred - clim``, ``b = truth - clim`` are
    demeaned by their unweighted mean over the WHOLE batch and grid (B, lat, lon), then
    ``ACC = sum(w a' b') / sqrt(sum(w a'^2) * sum(w b'^2))`` with the sums over the whole batch.

    The value depends on how the evaluation is batched (ClimaX then averages the per-batch values over batches);
    with B = 1 it equals :func:`lat_weighted_acc` of that field. Use it to reproduce a ClimaX number; use
    :func:`lat_weighted_acc` (per field, averaged) otherwise.
    """
    if np.ndim(pred) != 3:
        raise ValueError(f"pred must have shape (B, n_lat, n_lon) (one variable of one batch), got shape "
                         f"{np.shape(pred)}")  # fmt: skip
    a, b, w = _anomalies(pred, truth, climatology, lat_deg)
    a = a - a.mean()
    b = b - b.mean()
    saa, sbb = float(np.sum(w * a * a)), float(np.sum(w * b * b))
    if saa <= 0 or sbb <= 0:
        raise ValueError("pred or truth anomalies have zero variance over the batch; ACC undefined")
    return float(np.sum(w * a * b) / math.sqrt(saa * sbb))


ENERGY_ESTIMATORS = ("nrg", "fair")
ENERGY_NORMALISATIONS = ("sqrt_d", None)


def normalised_energy_score(
    samples: Any,
    y: Any,
    *,
    normalise: str | None = "sqrt_d",
    estimator: str = "nrg",
    weights: Any = None,
    max_block_elements: int = 1 << 24,
) -> np.ndarray:
    """Energy Score of vector (or field) forecasts, optionally divided by sqrt(d).

    ``ES = E||X - y|| - 0.5 E||X - X'||`` with the Euclidean norm over the d output dimensions, estimated from the
    S members x_1..x_S:

    * ``estimator="nrg"`` (default; scoringrules' ``"nrg"``, the naive / V-statistic estimator):
      ``(1/S) sum_i ||x_i - y|| - 1/(2 S^2) sum_{i,j} ||x_i - x_j||`` (all S^2 pairs; the i = j terms are 0).
      Same estimator as :func:`energy_score` and :func:`crps` (``"qd"`` == ``"nrg"`` for CRPS).
    * ``estimator="fair"`` (scoringrules' ``"fair"``, unbiased for the ES of the distribution the members are
      drawn from): the spread term is ``1/(2 S (S - 1)) sum_{i != j} ||x_i - x_j||`` (needs S >= 2).

    ``normalise="sqrt_d"`` divides by sqrt(d), so that the score is on the scale of one output (a field with the
    same error e at every cell scores e, whatever the grid size); ``None`` gives the plain ES (then, with the
    ``"nrg"`` estimator and no weights, equal to :func:`energy_score`). NOTE[DIFF]: the paper does not state a
    normalisation; its reported values imply the 1/sqrt(d) one, made explicit here.

    ``weights``: optional non-negative per-dimension weights broadcastable to ``y.shape[1:]`` (e.g. latitude
    weights (n_lat, 1) for fields), giving the norm ``||v||_w = sqrt(sum_k w_k v_k^2)``; with weights of mean 1
    and ``"sqrt_d"`` the norm of an error field is its latitude-weighted RMS (the quantity inside ClimaX's
    lat-weighted RMSE). NOTE[DIFF]: an addition; ``None`` (unweighted) is the usual ES.

    Args:
        samples: (S, n, d) ensemble, or (S, n, *field) (trailing axes are flattened into d).
        y: (n, d) or (n, *field) truth.
        max_block_elements: memory bound; cases are processed in blocks of about this many S * d elements.

    Returns:
        (n,) Energy Scores.
    """
    if estimator not in ENERGY_ESTIMATORS:
        raise ValueError(f"estimator must be one of {ENERGY_ESTIMATORS}, got {estimator!r}")
    if normalise not in ENERGY_NORMALISATIONS:
        raise ValueError(f"normalise must be one of {ENERGY_NORMALISATIONS}, got {normalise!r}")
    x = check_samples(samples, min_members=2 if estimator == "fair" else 1)
    if x.ndim < 3:
        raise ValueError(f"samples must have shape (S, n, d) or (S, n, *field), got shape {x.shape}")
    y_arr = check_target(y, "y", x)
    s, n = x.shape[:2]
    field_shape = x.shape[2:]
    d = int(np.prod(field_shape))
    if d == 0:
        raise ValueError("samples have no output dimension (d = 0)")
    if weights is not None:
        w = as_array(weights, "weights")
        try:
            w = np.broadcast_to(w, field_shape)
        except ValueError:
            raise ValueError(f"weights has shape {w.shape}, not broadcastable to the field {field_shape}") from None
        if np.any(w < 0):
            raise ValueError("weights must be non-negative")
        root_w = np.sqrt(w).reshape(d)
    else:
        root_w = None
    x = x.reshape(s, n, d)
    y_arr = y_arr.reshape(n, d)
    out = np.empty(n, dtype=np.float64)
    block = max(1, int(max_block_elements) // max(1, s * d))
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        xb = x[:, lo:hi] - y_arr[None, lo:hi]  # centred on y: the same distances, smaller numbers
        if root_w is not None:
            xb = xb * root_w
        err = np.linalg.norm(xb, axis=-1).mean(axis=0)  # (b,)
        pair_sum = np.zeros(hi - lo)
        for i in range(s - 1):
            pair_sum += np.linalg.norm(xb[i + 1 :] - xb[i], axis=-1).sum(axis=0)  # each unordered pair once
        pair_sum *= 2.0  # ordered pairs i != j
        denom = s * s if estimator == "nrg" else s * (s - 1)
        out[lo:hi] = err - 0.5 * pair_sum / denom
    if normalise == "sqrt_d":
        out /= math.sqrt(d)
    return out
