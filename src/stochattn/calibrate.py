"""Calibration of the concentration ``nu`` (paper §4 and App. A, Algorithms 2 and 3).

On a held-out calibration split with deterministic predictions ``f(x)`` and targets ``y``:

    Z = ||y - f(x)||_2,   R_nu = ||f_nu(x) - f(x)||_2,   L_SA(nu) = E[(R_nu - Z)^2],   s(nu) = E[R_nu],
    s0 = mean Z  (TargetScale).

``eval_stats`` is Algorithm 2's EvalStats: B mini-batches x M stochastic passes -> (loss, scale).
``bo_calibrate`` is the BO-under-uncertainty loop: a conjugate Bayesian regression of ``ln s`` on ``ln nu``
(:class:`LogLogPosterior`), a Thompson draw of ``(a, ln b, eps^2)``, the closed-form minimiser ``nu_cont`` of the
sampled surrogate objective ``E[(b nu^a zeta - s0)^2]``, and nearest-point projection onto the integer domain.

Operating points. Algorithm 2 returns the arg-min of the observed loss over the BO history
(``CalibrationResult.nu = nu_loss_argmin``, the paper-faithful choice); App. B reports the surrogate optimum
``nu_opt`` (a continuous value, e.g. 3.91-3.95 rounding to 4) and its posterior (``nu_surrogate``, the
scale-matching point). For scalar targets the two differ: with R and Z roughly independent half-normals,
E[(R - Z)^2] is minimised where E[R] = (2/pi) E[Z], i.e. the loss arg-min under-disperses (measured: 59-77 %
coverage of 95 % intervals), while the surrogate targets s(nu) = s0; :func:`loss_minimum_scale` measures where the
loss is least on a model's own deviations (kappa * rho of s0). Both are always computed and recorded; the
UCI experiment samples at both (``sa`` and ``sa_match``).

In one call: ``sampler = calibrate_sampler(model, x_cal, y_cal)`` runs all of it (also exported as
``stochattn.calibrate_sampler``) and returns a :class:`CalibratedSampler` holding both operating points, the boundary
flag and the BO record; ``sampler.sample(x, n)`` draws (n, B, ...) predictive samples. With ``rescale="conformal"``
(or ``"temperature"``) it also fits the paper's scalar post-scaling on a disjoint part of the calibration split, so
that ``sampler.interval(x, level)`` holds its level where SA's native spread does not (:class:`Rescaling`).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from .patch import NuSpec, StochasticAttention, predictive_samples
from .training import model_device

SampleFn = Callable[[int, Tensor, int], Tensor]  # (nu, x_batch (b, ...), M) -> (M, b, ...) stochastic predictions


# --------------------------------------------------------------------------------------------------------------
# residual scales and EvalStats
# --------------------------------------------------------------------------------------------------------------
def _norms(diff: Tensor, batch_dims: int) -> Tensor:
    """L2 norm over every dim after the first ``batch_dims`` (scalar outputs: absolute value)."""
    return diff.flatten(batch_dims).norm(dim=-1) if diff.dim() > batch_dims else diff.abs()


def residual_norms(y: Tensor, point: Tensor) -> Tensor:
    """Z_i = ||y_i - f(x_i)||_2. y, point: (n, ...) -> (n,)."""
    if y.shape != point.shape:
        raise ValueError(f"y {tuple(y.shape)} and point {tuple(point.shape)} must have the same shape")
    if not torch.isfinite(point).all():
        raise ValueError("point (the deterministic predictions) contains NaN or inf")
    if not torch.isfinite(y).all():
        raise ValueError("y contains NaN or inf")
    return _norms(y - point, 1)


def target_scale(y: Tensor, point: Tensor) -> float:
    """TargetScale of Algorithm 2: s0 = mean_i ||y_i - f(x_i)||_2 over the calibration split."""
    return float(residual_norms(y, point).mean())


@dataclass
class EvalResult:
    """One EvalStats evaluation at ``nu``: loss L_SA, scale s, their Monte Carlo standard errors."""

    nu: int
    loss: float
    scale: float
    loss_se: float = float("nan")
    scale_se: float = float("nan")
    seconds: float = 0.0


def eval_stats(
    nu: int,
    sample_fn: SampleFn,
    x: Tensor,
    y: Tensor,
    point: Tensor,
    *,
    batch_size: int,
    num_batches: int,
    num_passes: int,
    generator: Optional[torch.Generator] = None,
) -> EvalResult:
    """EvalStats(nu) of Algorithm 2.

    Draws ``num_batches`` mini-batches of ``batch_size`` calibration points (each without replacement; the whole
    split when it is smaller), runs ``num_passes`` stochastic passes per point and returns the mean of
    ``(R - Z)^2`` and of ``R`` over all points and passes. x: (n, ...), y and point: (n, ...).
    The standard errors treat the per-point averages as independent.

    NOTE[DIFF]: Algorithm 2 leaves SampleBatch unspecified. Here each batch is a uniform draw without replacement
    of ``min(batch_size, n)`` points (capped at the split size, so a small calibration split is used whole in
    every batch), the ``num_batches`` batches are drawn independently of each other (a point can appear in several
    batches), and the paper's running sums L / (N M), S / (N M) are computed as means of per-point averages over
    the M passes (identical, since every point gets the same M).
    """
    if not (isinstance(num_batches, int) and num_batches >= 1 and isinstance(num_passes, int) and num_passes >= 1):
        raise ValueError(f"num_batches and num_passes must be positive integers, got {num_batches}, {num_passes}")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
    z = residual_norms(y, point)
    n = len(x)
    b = min(batch_size, n)
    start = time.perf_counter()
    losses, scales = [], []
    for _ in range(num_batches):
        idx = torch.randperm(n, generator=generator)[:b]
        samples = sample_fn(nu, x[idx], num_passes)  # (M, b, ...)
        if samples.shape[:2] != (num_passes, b) or samples.shape[2:] != point.shape[1:]:
            raise ValueError(
                f"sample_fn returned shape {tuple(samples.shape)}, expected {(num_passes, b, *point.shape[1:])}"
            )
        if not torch.isfinite(samples).all():
            raise ValueError(f"stochastic predictions at nu={nu} contain NaN or inf")
        r = _norms(samples - point[idx].unsqueeze(0), 2)  # (M, b)
        losses.append(((r - z[idx].unsqueeze(0)) ** 2).mean(0))
        scales.append(r.mean(0))
    loss_i, scale_i = torch.cat(losses).double(), torch.cat(scales).double()
    k = len(loss_i)
    se = lambda v: float(v.std(unbiased=True) / math.sqrt(k)) if k > 1 else float("nan")  # noqa: E731
    return EvalResult(
        nu=int(nu), loss=float(loss_i.mean()), scale=float(scale_i.mean()), loss_se=se(loss_i), scale_se=se(scale_i),
        seconds=time.perf_counter() - start,
    )


def loss_minimum_scale(deviations: Tensor | np.ndarray, residuals: Tensor | np.ndarray) -> Dict[str, float]:
    """Where EvalStats' loss is least if ``nu`` only scaled the stochastic deviations (the surrogate's log-log
    model), against the scale-matching point.

    ``deviations``: (M, n) norms ``R_mi = ||f_nu(x_i) - f(x_i)||`` of M passes at one ``nu``; ``residuals``: (n,)
    ``Z_i = ||y_i - f(x_i)||``. Scaling every deviation by ``c``, the loss ``mean (c R - Z)^2`` is least at
    ``c* = mean(R Z) / mean(R^2)``, whose scale over ``s0 = mean Z`` is exactly

        ratio = c* mean(R) / mean(Z) = kappa * rho,   kappa = mean(R)^2 / mean(R^2) <= 1,
        rho = mean(R Z) / (mean(R) mean(Z)).

    ``kappa`` is 2/pi for Gaussian deviations of one spread on every input (smaller where the spread varies between
    inputs), ``rho`` is 1 where the deviations do not follow the residuals (above 1 where they do). A ratio below 1:
    Algorithm 2's loss arg-min is sharper than the residual scale that the surrogate's ``nu`` matches. Returns
    ``kappa``, ``rho``, ``ratio``, ``scale`` (mean R), ``s0`` and ``z2`` (mean Z^2): the loss at the scale ``q s0``
    is ``s0^2 (q^2 / kappa - 2 rho q) + z2``."""
    r = torch.as_tensor(deviations, dtype=torch.float64)
    z = torch.as_tensor(residuals, dtype=torch.float64)
    if r.dim() != 2 or z.dim() != 1 or r.shape[1] != z.shape[0] or r.numel() == 0:
        raise ValueError(f"deviations (M, n) and residuals (n,) expected, got {tuple(r.shape)} and {tuple(z.shape)}")
    if not (torch.isfinite(r).all() and torch.isfinite(z).all()) or (r < 0).any() or (z < 0).any():
        raise ValueError("deviations and residuals must be finite norms (>= 0)")
    if not (r.mean() > 0 and z.mean() > 0):
        raise ValueError("deviations and residuals must not all be zero")
    kappa = float(r.mean() ** 2 / (r**2).mean())
    rho = float((r * z).mean() / (r.mean() * z.mean()))
    return {"kappa": kappa, "rho": rho, "ratio": kappa * rho, "scale": float(r.mean()), "s0": float(z.mean()),
            "z2": float((z**2).mean())}  # fmt: skip


class SASampler:
    """``sample_fn`` for :func:`eval_stats` from a frozen model: SA patched once, ``nu`` changed per call.

    ``predict(model, x)`` maps a batch (b, ...) to predictions (b, ...) (default ``model(x)``). Use as a
    context manager (or call :meth:`close`) so the model is unpatched afterwards.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        generator: Optional[torch.Generator] = None,
        predict: Optional[Callable[[nn.Module, Tensor], Tensor]] = None,
        max_rows: Union[None, int, str] = "auto",
        nu_template: Callable[[int], NuSpec] = lambda nu: nu,
    ) -> None:
        self.model = model.eval()
        self.predict = predict or (lambda m, x: m(x))
        self.max_rows = max_rows
        self.nu_template = nu_template
        self.patch = StochasticAttention(model, None, generator=generator)

    def __call__(self, nu: int, x: Tensor, num_passes: int) -> Tensor:
        """``num_passes`` SA passes at ``nu``: x (B, ...) on any device -> (num_passes, B, ...) on the CPU (the
        passes run where the model's parameters are; its generator seeds a stream there, see ``patch``)."""
        self.patch.set_nu(self.nu_template(nu))
        x = x.to(model_device(self.model))
        samples = predictive_samples(lambda xb: self.predict(self.model, xb), x, num_samples=num_passes,
                                     max_rows=self.max_rows)  # fmt: skip
        return samples.cpu()

    def close(self) -> None:
        self.patch.remove()

    def __enter__(self) -> "SASampler":  # noqa: UP037 - keeps the code hash
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------------------------------------------
# the log-log surrogate: ln s = a ln nu + ln b + eps z
# --------------------------------------------------------------------------------------------------------------
@dataclass
class LogLogPosterior:
    """Normal-inverse-gamma posterior of ``beta = (a, ln b)`` and ``eps^2`` in ``ln s = a ln nu + ln b + eps z``.

    Prior ``beta | eps^2 ~ N(m0, eps^2 V0)``, ``eps^2 ~ InvGamma(alpha0, beta0)``. The default is the reference
    (Jeffreys) limit ``V0^-1 = 0, alpha0 = -1, beta0 = 0``: posterior mean = least squares, ``eps^2`` ~
    InvGamma((n-2)/2, SSR/2); it needs at least 3 evaluations at 2 or more distinct nu.
    NOTE[DIFF]: the paper does not state its prior; the reference prior adds no tuning constant. An informative
    prior (e.g. slope -1/2 from Proposition 2) can be passed through ``prior``.
    """

    mean: np.ndarray  # (2,) posterior mean of (a, ln b)
    precision: np.ndarray  # (2, 2) V_n^-1
    alpha: float
    beta: float
    n: int

    @classmethod
    def fit(
        cls,
        nu: Sequence[float],
        scale: Sequence[float],
        prior: Optional[Tuple[np.ndarray, np.ndarray, float, float]] = None,
    ) -> "LogLogPosterior":  # noqa: UP037 - keeps the code hash
        """nu, scale: the history (k,) -> posterior. ``prior = (m0, V0_inv, alpha0, beta0)``."""
        nu_a, s_a = np.asarray(nu, dtype=float), np.asarray(scale, dtype=float)
        if nu_a.shape != s_a.shape or nu_a.ndim != 1:
            raise ValueError(f"nu and scale must be 1-D of the same length, got {nu_a.shape} and {s_a.shape}")
        if np.any(nu_a <= 0) or np.any(s_a <= 0) or not np.all(np.isfinite(s_a)):
            raise ValueError("nu and scale must be positive and finite for the log-log surrogate")
        m0, v0_inv, alpha0, beta0 = prior if prior is not None else (np.zeros(2), np.zeros((2, 2)), -1.0, 0.0)
        X = np.column_stack([np.log(nu_a), np.ones_like(nu_a)])
        t = np.log(s_a)
        precision = v0_inv + X.T @ X
        if np.linalg.matrix_rank(precision) < 2:
            raise ValueError("the log-log posterior needs evaluations at two or more distinct nu")
        mean = np.linalg.solve(precision, v0_inv @ m0 + X.T @ t)
        alpha = alpha0 + len(t) / 2
        beta = beta0 + 0.5 * float(t @ t + m0 @ v0_inv @ m0 - mean @ precision @ mean)
        if alpha <= 0:
            raise ValueError(f"the posterior of eps^2 is improper with {len(t)} evaluations: need at least 3")
        return cls(mean=mean, precision=precision, alpha=alpha, beta=max(beta, 1e-300), n=len(t))

    def sample(self, rng: np.random.Generator, size: int) -> Dict[str, np.ndarray]:
        """Thompson draws: dict with arrays a, ln_b, eps2, each (size,)."""
        eps2 = self.beta / rng.gamma(self.alpha, 1.0, size=size)
        cov = np.linalg.inv(self.precision)
        chol = np.linalg.cholesky(cov)
        z = rng.standard_normal((size, 2))
        beta = self.mean + np.sqrt(eps2)[:, None] * (z @ chol.T)
        return {"a": beta[:, 0], "ln_b": beta[:, 1], "eps2": eps2}

    @property
    def eps2_mean(self) -> float:
        return self.beta / (self.alpha - 1) if self.alpha > 1 else float("inf")


def surrogate_objective(nu: Union[float, np.ndarray], a: float, ln_b: float, eps2: float, s0: float):
    """E[(b nu^a zeta - s0)^2] with zeta ~ LogNormal(0, eps2), in closed form (Eq. bo_surrogate_loss)."""
    mu = np.exp(ln_b) * np.power(nu, a)
    return mu**2 * np.exp(2 * eps2) - 2 * s0 * mu * np.exp(eps2 / 2) + s0**2


def nu_continuous(a, ln_b, eps2, s0: float, log_bounds: Tuple[float, float] = (-50.0, 50.0)):
    """Closed-form minimiser (s0 / (b exp(1.5 eps2)))^(1/a) of the surrogate objective (Eq. bo_continuous_minimizer).

    NOTE[DIFF]: the paper states the formula for a != 0 only. Here it is computed in log space and ln nu_cont is
    clipped to ``log_bounds`` (default [-50, 50], i.e. nu_cont in [2e-22, 5e21]) so extreme Thompson draws cannot
    overflow, and ``a == 0`` (no dependence on nu) maps to the upper bound exp(50). The projection onto Xi
    (:meth:`IntegerDomain.project`) then clamps to the domain, so both clippings only matter for draws far
    outside it.
    """
    a = np.asarray(a, dtype=float)
    num = math.log(s0) - np.asarray(ln_b, dtype=float) - 1.5 * np.asarray(eps2, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_nu = np.where(a != 0, num / np.where(a != 0, a, 1.0), log_bounds[1])
    return np.exp(np.clip(log_nu, *log_bounds))


class IntegerDomain:
    """The admissible integer set Xi: all integers in [low, high], or an explicit sorted list of integers."""

    def __init__(self, low: int = 1, high: int = 4096, values: Optional[Sequence[int]] = None) -> None:
        if values is not None:
            vals = sorted({int(v) for v in values})
            if not vals or vals[0] < 1:
                raise ValueError(f"domain values must be positive integers, got {values!r}")
            self.values: Optional[np.ndarray] = np.asarray(vals)
            self.low, self.high = vals[0], vals[-1]
        else:
            if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
                raise ValueError(f"domain must satisfy 1 <= low <= high (integers), got low={low!r}, high={high!r}")
            self.values, self.low, self.high = None, low, high

    def project(self, nu_cont: float) -> int:
        """Nearest-point projection (Algorithm 3) of a positive real onto the domain."""
        if self.values is not None:
            return int(self.values[np.argmin(np.abs(self.values - nu_cont))])
        return int(min(max(round(float(nu_cont)), self.low), self.high))

    def initial_design(self, k: int) -> List[int]:
        """k points spread evenly in log nu over the domain (endpoints included), projected and de-duplicated.

        NOTE[DIFF]: Algorithm 3 names an initial design size K0 but not the design; this log-spaced grid
        (``geomspace(low, high, k)``, endpoints included; the geometric midpoint when k = 1) is the labelled
        variant ``bo_calibrate(design="log_spaced")`` (the default design is :func:`scale_match_design`). Either
        way the K0 evaluations replace the BayesOptSuggest proposals of Algorithm 2's first K0 iterations (the
        posterior needs 3 points at 2 distinct nu under the reference prior).
        """
        if k < 1:
            return []
        grid = np.geomspace(self.low, self.high, k) if k > 1 else np.array([math.sqrt(self.low * self.high)])
        out: List[int] = []
        for g in grid:
            v = self.project(g)
            if v not in out:
                out.append(v)
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"low": self.low, "high": self.high, "values": None if self.values is None else self.values.tolist()}


# --------------------------------------------------------------------------------------------------------------
# the BO loop
# --------------------------------------------------------------------------------------------------------------
@dataclass
class BOStep:
    """One iteration of the calibration loop: the proposal and its evaluation."""

    k: int
    source: str  # "initial" or "thompson"
    nu_continuous: Optional[float]  # Thompson minimiser before projection (None for the initial design)
    draw: Dict[str, float]  # the Thompson draw (a, ln_b, eps2); empty for the initial design
    result: EvalResult


@dataclass
class CalibrationResult:
    """Outcome of :func:`bo_calibrate` with everything needed to draw the paper's BO figures."""

    nu: int  # Algorithm 2's nu*: the loss arg-min (= nu_loss_argmin), the paper-faithful operating point
    nu_loss_argmin: int  # Algorithm 2's last line: arg-min of the observed loss over the history
    nu_surrogate: int  # projection of the posterior median of nu_cont (App. B's nu_opt): the scale-matching point
    nu_surrogate_continuous: float
    s0: float
    domain: Dict[str, Any]
    steps: List[BOStep]
    # calibration ended at the domain's low end (nu = 1: SA's largest dispersion) with the surrogate asking for
    # more dispersion than SA can give there (its continuous optimum below the bound); sa / sa_match runs
    at_boundary: bool
    at_boundary_surrogate: bool
    posterior: Dict[str, Any]  # final posterior mean/precision/alpha/beta
    posterior_draws: Dict[str, List[float]]  # a, ln_b, eps2, nu_cont from the final posterior
    seed: int
    seconds: float = 0.0
    design: str = "scale_match"  # where the initial design lay (bo_calibrate's design)

    def history(self) -> List[Dict[str, float]]:
        """Flat list of (k, nu, loss, scale, ...) rows, one per evaluation."""
        rows = []
        for step in self.steps:
            row = {"k": step.k, "source": step.source, "nu_continuous": step.nu_continuous}
            row.update(asdict(step.result))
            rows.append(row)
        return rows

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["history"] = self.history()
        del out["steps"]
        return out


DESIGNS = ("scale_match", "log_spaced")


def scale_match_design(evaluated: Sequence[EvalResult], s0: float, domain: IntegerDomain) -> int:
    """The next initial-design point: where the scale matches ``s0``, by the evaluations so far (a pilot at nu = 1
    first). One evaluation: SA's variance law (Proposition: a row's SA covariance is ``1/nu`` that of one draw)
    gives ``s(nu) ~ s(nu_p) (nu / nu_p)^(-1/2)``, so ``nu = nu_p (s(nu_p) / s0)^2``. Several: the secant through the
    last two distinct nu in log-log (slope -1/2 where the secant is flat or rising). Projected on the domain; a
    value already evaluated gives way to the nearest one not yet evaluated (:func:`_top_up`).

    NOTE[DIFF]: Algorithm 3 names the initial design's size K0, not where it lies. A design spread over the
    whole domain (nu = 1, 64, 4096) decides the answer by itself on scalar targets: Algorithm 2 returns the
    arg-min of the observed loss over every evaluation, and a far design point often wins it (yacht with the
    paper's backbone: nu = 50 / 15 / 64 against the surrogate's 13 / 17 / 26). Here the K0 points close in on
    the scale-matching nu (a root search on the log-log law the surrogate itself fits), and the Thompson proposals
    refine it; the domain-spanning design stays available (``design="log_spaced"``)."""
    by_nu: Dict[int, float] = {}
    for r in evaluated:
        by_nu[int(r.nu)] = float(r.scale)
    last = evaluated[-1]
    ln_nu, ln_s = math.log(last.nu), math.log(last.scale)
    slope = -0.5
    others = [nu for nu in by_nu if nu != last.nu]
    if others:
        prev = others[-1]
        secant = (ln_s - math.log(by_nu[prev])) / (ln_nu - math.log(prev))
        if secant < -0.05:
            slope = secant
    target = math.exp(ln_nu + (math.log(s0) - ln_s) / slope)
    return _top_up([*by_nu, domain.project(target)], domain, len(by_nu) + 1)[-1]


def _top_up(points: List[int], domain: IntegerDomain, k: int) -> List[int]:
    """``points`` de-duplicated, then topped up to ``k`` distinct values (as far as the domain has them) with the
    domain values nearest (in log nu) to the last point given: a narrow domain or points collapsing on one value."""
    out: List[int] = []
    for v in points:
        if int(v) not in out:
            out.append(int(v))
    values = np.arange(domain.low, domain.high + 1) if domain.values is None else domain.values
    if len(out) >= k or len(out) >= len(values):
        return out
    ref = math.log(points[-1]) if points else math.log(domain.low)
    for v in sorted(values.tolist(), key=lambda v: (abs(math.log(v) - ref), v)):
        if len(out) >= k:
            break
        if int(v) not in out:
            out.append(int(v))
    return out


def _loss_by_nu(steps: Sequence[BOStep]) -> Dict[int, float]:
    """Mean observed loss per distinct nu (a nu proposed twice is evaluated twice; both estimates are pooled).

    NOTE[DIFF]: Algorithm 2 takes the arg-min over the history's triples, so a nu evaluated twice competes with
    its smaller (luckier) Monte Carlo estimate. Averaging the repeated estimates of one nu first removes that
    selection bias towards repeatedly proposed values; with distinct nu in the history the two rules coincide.
    """
    acc: Dict[int, List[float]] = {}
    for s in steps:
        acc.setdefault(s.result.nu, []).append(s.result.loss)
    return {nu: float(np.mean(v)) for nu, v in acc.items()}


def bo_calibrate(
    evaluate: Callable[[int], EvalResult],
    s0: float,
    *,
    domain: Optional[IntegerDomain] = None,
    budget: int = 12,
    initial_design: int = 3,
    design: str = "scale_match",
    seed: int = 0,
    num_posterior_draws: int = 4000,
    prior: Optional[Tuple[np.ndarray, np.ndarray, float, float]] = None,
    progress: bool = False,
) -> CalibrationResult:
    """Algorithms 2-3: BO under uncertainty for nu.

    Args:
        evaluate: nu -> :class:`EvalResult` (typically ``lambda nu: eval_stats(nu, sampler, ...)``).
        s0: target scale (:func:`target_scale` on the calibration split).
        domain: the integer search domain Xi (default all integers in [1, 4096]).
        budget: K, the total number of evaluations (initial design included).
        initial_design: K0 >= 3 evaluations before the first Thompson proposal (3 make the reference posterior
            proper).
        design: where the K0 points lie: ``"scale_match"`` (default; :func:`scale_match_design`: the domain's low
            end, then each point where the evaluations so far put the scale-matching nu: SA's 1/nu variance law,
            then the log-log secant) or ``"log_spaced"`` (:meth:`IntegerDomain.initial_design`: spread over the
            whole domain).
        seed: seeds the Thompson draws (the model's own sampling is seeded by whoever builds ``evaluate``).
        num_posterior_draws: draws of the final posterior used for ``nu_surrogate`` and the recorded draws.

    Returns:
        :class:`CalibrationResult` with both operating points: ``nu = nu_loss_argmin`` (Algorithm 2's return
        value) and ``nu_surrogate`` (the final posterior's scale-matching point, App. B's nu_opt).
    """
    domain = domain or IntegerDomain()
    if not (s0 > 0 and math.isfinite(s0)):
        raise ValueError(f"s0 must be positive and finite, got {s0!r}")
    if initial_design < 3 and prior is None:
        raise ValueError("initial_design must be >= 3 with the reference prior (the eps^2 posterior needs 3 points)")
    if budget < initial_design:
        raise ValueError(f"budget ({budget}) must be >= initial_design ({initial_design})")
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    steps: List[BOStep] = []
    # log_spaced: the whole design now; scale_match: the pilot now, each next point from the evaluations so far
    points = _top_up(domain.initial_design(initial_design), domain, initial_design) if design == "log_spaced" else [
        domain.low]
    iterator = range(budget)
    if progress:
        from .progress import progress as show_progress

        iterator = show_progress(iterator, desc="calibrating nu", unit="BO step")
    for k in iterator:
        if design == "scale_match" and 0 < k < initial_design:  # each design point from the evaluations so far
            points = points[:k] + [scale_match_design([st.result for st in steps], s0, domain)]
        if k < min(len(points), initial_design):
            nu_k, source, cont, draw = points[k], "initial", None, {}
        else:
            post = LogLogPosterior.fit([s.result.nu for s in steps], [s.result.scale for s in steps], prior)
            d = post.sample(rng, 1)
            draw = {key: float(v[0]) for key, v in d.items()}
            cont = float(nu_continuous(draw["a"], draw["ln_b"], draw["eps2"], s0))
            nu_k, source = domain.project(cont), "thompson"
        result = evaluate(nu_k)
        if not (result.scale > 0 and math.isfinite(result.scale) and math.isfinite(result.loss)):
            raise ValueError(f"evaluation at nu={nu_k} returned scale={result.scale}, loss={result.loss}")
        steps.append(BOStep(k=k, source=source, nu_continuous=cont, draw=draw, result=result))
        if progress:
            iterator.set_postfix(nu=nu_k, scale=f"{result.scale:.3g}", s0=f"{s0:.3g}")
    post = LogLogPosterior.fit([s.result.nu for s in steps], [s.result.scale for s in steps], prior)
    draws = post.sample(rng, num_posterior_draws)
    draws["nu_cont"] = nu_continuous(draws["a"], draws["ln_b"], draws["eps2"], s0)
    # NOTE[DIFF]: App. B reports nu_opt from the posterior without naming the estimator. We take the posterior
    # median of nu_cont over ``num_posterior_draws`` Thompson draws of the final posterior (median in log space =
    # median of nu_cont, since exp is monotone; robust to the heavy right tail of 1/a draws), then project it.
    nu_surr_cont = float(np.exp(np.median(np.log(draws["nu_cont"]))))
    losses = _loss_by_nu(steps)
    nu_argmin = min(losses, key=losses.get)
    nu_surr = domain.project(nu_surr_cont)
    below = nu_surr_cont < domain.low  # SA at its most dispersed still under-disperses, by the surrogate
    return CalibrationResult(
        nu=int(nu_argmin),
        nu_loss_argmin=int(nu_argmin),
        nu_surrogate=int(nu_surr),
        nu_surrogate_continuous=nu_surr_cont,
        s0=float(s0),
        domain=domain.to_dict(),
        steps=steps,
        at_boundary=bool(below and nu_argmin == domain.low),
        at_boundary_surrogate=bool(below and nu_surr == domain.low),
        posterior={
            "mean": post.mean.tolist(), "precision": post.precision.tolist(), "alpha": post.alpha, "beta": post.beta,
            "n": post.n,
        },
        posterior_draws={k: np.asarray(v).tolist() for k, v in draws.items()},
        seed=seed,
        seconds=time.perf_counter() - start,
        design=design,
    )


def grid_evaluate(
    evaluate: Callable[[int], EvalResult], grid: Sequence[int], progress: bool = False
) -> List[EvalResult]:
    """Evaluate the same loss on a fixed grid of nu (BO-landscape figure, and a check of the BO choice)."""
    iterator = list(grid)
    if progress:
        from .progress import progress as show_progress

        iterator = show_progress(iterator, desc="nu grid")
    return [evaluate(int(nu)) for nu in iterator]


def score_sweep(
    sample_fn: SampleFn,
    x: Tensor,
    y: Tensor,
    grid: Sequence[int],
    *,
    num_samples: int,
    score: Literal["crps", "energy"] = "crps",
    progress: bool = False,
) -> Dict[str, Any]:
    """Score-oriented selection (§6): the nu in ``grid`` minimising mean CRPS (scalar outputs, averaged over
    coordinates) or Energy Score (vector outputs) of ``num_samples`` predictive samples on the calibration split.

    Returns {"nu": best nu, "grid": [...], "scores": [...], "score": name}.
    """
    from . import metrics

    y_np = y.detach().cpu().numpy()
    scores = []
    iterator = list(grid)
    if progress:
        from .progress import progress as show_progress

        iterator = show_progress(iterator, desc=f"{score} sweep")
    for nu in iterator:
        s = sample_fn(int(nu), x, num_samples).detach().cpu().numpy()
        if score == "crps":
            scores.append(float(np.mean(metrics.crps(s, y_np))))
        elif score == "energy":
            flat = s.reshape(s.shape[0], s.shape[1], -1)
            scores.append(float(np.mean(metrics.energy_score(flat, y_np.reshape(len(y_np), -1)))))
        else:
            raise ValueError(f"score must be 'crps' or 'energy', got {score!r}")
    best = int(list(grid)[int(np.argmin(scores))])
    return {"nu": best, "grid": [int(v) for v in grid], "scores": scores, "score": score}


# --------------------------------------------------------------------------------------------------------------
# calibration in one call
# --------------------------------------------------------------------------------------------------------------
OperatingPoint = Literal["scale_match", "loss_argmin"]
OPERATING_POINTS = ("scale_match", "loss_argmin")


def _operating_point(name: str) -> str:
    if name not in OPERATING_POINTS:
        raise ValueError(f"operating_point must be one of {OPERATING_POINTS}, got {name!r}")
    return name


RESCALE_METHODS = ("temperature", "conformal")


@dataclass
class Rescaling:
    """The scalar post-scaling that :func:`calibrate_sampler` fitted after ``nu`` (``rescale=``): SA's samples are
    rescaled around the deterministic prediction, ``point + factor * (sample - point)``.

    ``method``: ``"temperature"`` (one factor T for every level: the S-corrected Gaussian NLL temperature of
    :func:`stochattn.scaling.fit_temperature`; approximate, it assumes Gaussian residuals) or ``"conformal"``
    (per level L a split-conformal factor, :func:`stochattn.scaling.fit_conformal_scale`: the central L-interval of
    ``num_samples`` draws, widened or narrowed so that it covers at least L of new exchangeable points). ``level``:
    the level whose factor :meth:`CalibratedSampler.sample` applies; ``factors``: level -> factor (conformal: the
    levels fitted so far; more are fitted on demand from the kept calibration draws). ``n_nu`` / ``n_scale``: the
    calibration points that fitted nu / the factor (disjoint); ``native_coverage`` / ``rescaled_coverage``: the
    ``level`` interval's coverage of the ``n_scale`` points before / after (conformal: by construction >= level).
    """

    method: str
    level: float
    factors: Dict[float, float]
    n_nu: int
    n_scale: int
    num_samples: int
    native_coverage: float
    rescaled_coverage: float

    @property
    def factor(self) -> float:
        """The factor at ``level`` (the one :meth:`CalibratedSampler.sample` applies)."""
        return self.factors[self.level]

    def __str__(self) -> str:
        return (f"{self.method} factor {self.factor:.3g} at {self.level:.0%} (fitted on {self.n_scale} held-out "
                f"points, nu on {self.n_nu} others): the {self.level:.0%} interval of {self.num_samples} draws "
                f"covered {self.native_coverage:.1%} of them natively, {self.rescaled_coverage:.1%} rescaled")


class CalibratedSampler:
    """SA predictive samples of a frozen model at a calibrated ``nu``: what :func:`calibrate_sampler` returns.

    Both operating points of the calibration (module docstring) are kept: ``nu_scale_match`` (the surrogate's
    optimum, where SA's mean deviation s(nu) matches the held-out residual scale s0: aims at nominal coverage) and
    ``nu_loss_argmin`` (Algorithm 2's nu*, the paper's choice; it under-disperses: the loss is least at
    s(nu) = kappa rho s0, 0.54-0.62 s0 on five UCI data sets, :func:`loss_minimum_scale`). ``operating_point``
    picks the one that ``nu``, ``at_boundary`` and :meth:`sample` use by default;
    ``result`` is the whole BO record (:class:`CalibrationResult`: history, posterior, both boundary flags).
    ``rescaling`` (:class:`Rescaling`, or None for SA native) is the post-scaling that :meth:`sample` and
    :meth:`interval` apply; ``num_samples`` their default number of draws (the number the rescaling was fitted
    with).
    """

    def __init__(
        self,
        model: nn.Module,
        result: CalibrationResult,
        *,
        forward: Optional[Callable[[Tensor], Tensor]] = None,
        operating_point: OperatingPoint = "scale_match",
        generator: Optional[torch.Generator] = None,
        max_rows: Union[None, int, str] = "auto",
        num_samples: int = 100,
        batch_size: int = 256,
    ) -> None:
        self.model, self.result, self.forward = model, result, forward
        self.operating_point = _operating_point(operating_point)
        self.generator, self.max_rows = generator, max_rows
        self.num_samples, self.batch_size = int(num_samples), int(batch_size)
        self.rescaling: Optional[Rescaling] = None
        self._scale_data: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None  # cal draws, point, y

    def _predict(self) -> Callable[[nn.Module, Tensor], Tensor]:
        return (lambda m, xb: m(xb)) if self.forward is None else _as_predict(self.forward)

    def _fit_rescaling(self, method: str, level: float, x: Tensor, y: Tensor, n_nu: int) -> Rescaling:
        """Fit ``method`` on the scale part (x, y): ``num_samples`` SA draws at the operating point's nu."""
        from . import metrics, scaling

        draws = self.sample(x, self.num_samples, rescaled=False).double().numpy()
        point = _deterministic(self.model, self._predict(), x, self.batch_size).double().numpy()
        target = y.double().cpu().numpy()
        self._scale_data = (draws, point, target)
        if method == "temperature":
            factor = scaling.fit_temperature(draws, point, target)
        else:
            factor = scaling.fit_conformal_scale(draws, point, target, coverage=level, level=level)
        cover = lambda f: metrics.coverage_and_width(scaling.apply_scale(draws, point, f), target,  # noqa: E731
                                                     (level,))[level]["coverage"]  # fmt: skip
        self.rescaling = Rescaling(method=method, level=level, factors={level: float(factor)}, n_nu=n_nu,
                                   n_scale=len(target), num_samples=self.num_samples, native_coverage=cover(1.0),
                                   rescaled_coverage=cover(factor))  # fmt: skip
        return self.rescaling

    def scale_factor(self, level: Optional[float] = None) -> float:
        """The factor that rescales SA's samples for intervals at ``level`` (default the rescaling's own level):
        the temperature (any level), or the conformal factor of that level (fitted now from the kept calibration
        draws if it was not yet); 1.0 without rescaling."""
        r = self.rescaling
        if r is None:
            return 1.0
        if r.method == "temperature":
            return r.factor
        from . import metrics, scaling

        lvl = r.level if level is None else metrics.check_level(level)
        if lvl not in r.factors:
            draws, point, target = self._scale_data
            r.factors[lvl] = float(scaling.fit_conformal_scale(draws, point, target, coverage=lvl, level=lvl))
        return r.factors[lvl]

    @property
    def nu_scale_match(self) -> int:
        return self.result.nu_surrogate

    @property
    def nu_loss_argmin(self) -> int:
        return self.result.nu_loss_argmin

    def nu_at(self, operating_point: Optional[OperatingPoint] = None) -> int:
        """nu at ``operating_point`` (default: the sampler's own)."""
        op = _operating_point(operating_point or self.operating_point)
        return self.nu_scale_match if op == "scale_match" else self.nu_loss_argmin

    @property
    def nu(self) -> int:
        return self.nu_at()

    @property
    def at_boundary(self) -> bool:
        """The operating point is the domain's low end (SA's largest dispersion) and the surrogate asks for more:
        SA's native intervals stay too narrow on this model. With a rescaling (:attr:`rescaling`) :meth:`sample`
        and :meth:`interval` are widened by its factor; ``str(sampler.rescaling)`` says by how much and what the
        held-out coverage was before and after; :meth:`describe` says both."""
        return self.result.at_boundary_surrogate if self.operating_point == "scale_match" else self.result.at_boundary

    def describe(self) -> str:
        """One line: nu, whether it is at the boundary, and what the rescaling did."""
        text = f"nu = {self.nu} ({self.operating_point})"
        if self.at_boundary:
            text += (f", at the domain's low end: SA's native spread is too small for this model (the surrogate "
                     f"asks for nu = {self.result.nu_surrogate_continuous:.3g})")  # fmt: skip
        if self.rescaling is None:
            return text + ("; no rescaling: native intervals will be too narrow (rescale='conformal' fixes the "
                           "level)" if self.at_boundary else "; SA native (no rescaling)")  # fmt: skip
        return f"{text}; rescaled: {self.rescaling}"

    def sample(self, x: Tensor, n: Optional[int] = None, *, operating_point: Optional[OperatingPoint] = None,
               rescaled: bool = True, level: Optional[float] = None) -> Tensor:  # fmt: skip
        """``n`` SA predictive samples (default :attr:`num_samples`): x (B, ...) -> (n, B, ...) on the CPU. The
        model is patched for this call only; the draws continue the sampler's generator (reproducible for a
        calibration seed). With a rescaling (and ``rescaled``, the default) the draws are rescaled around the
        deterministic prediction by :meth:`scale_factor` at ``level`` (conformal: the factor of that level, default
        the rescaling's own; temperature: one factor); ``rescaled=False`` gives SA's native draws."""
        n = self.num_samples if n is None else int(n)
        nu = self.nu_at(operating_point)
        scale = rescaled and self.rescaling is not None
        if scale and nu != self.nu:
            raise ValueError(f"the rescaling was fitted at the {self.operating_point} point (nu = {self.nu}), not at "
                             f"nu = {nu}: pass rescaled=False for native samples there")  # fmt: skip
        predict = None if self.forward is None else _as_predict(self.forward)
        with SASampler(self.model, generator=self.generator, predict=predict, max_rows=self.max_rows) as sampler:
            draws = sampler(nu, x, n)
        if not scale:
            return draws
        factor = self.scale_factor(level)
        point = _deterministic(self.model, self._predict(), torch.as_tensor(x), self.batch_size).to(draws.dtype)
        return point + factor * (draws - point)

    def interval(self, x: Tensor, level: Optional[float] = None, n: Optional[int] = None,
                 *, rescaled: bool = True) -> Tuple[Tensor, Tensor]:  # fmt: skip
        """The central ``level`` interval (default the rescaling's level, else 0.95) of ``n`` draws (default
        :attr:`num_samples`, the number the rescaling was fitted with: conformal's guarantee is for that many):
        x (B, ...) -> (lo, hi), each (B, ...) on the CPU. Interpolated sample quantiles
        (:func:`stochattn.metrics.central_interval`), the statistic the conformal factor is fitted for. Conformal:
        covers at least ``level`` of new points exchangeable with the calibration split (on average over splits);
        temperature: about ``level`` where the residuals are Gaussian; native (no rescaling, or
        ``rescaled=False``): SA's own spread, whose coverage is its calibration's."""
        from . import metrics

        lvl = metrics.check_level(level if level is not None else (self.rescaling.level if self.rescaling else 0.95))
        n = self.num_samples if n is None else int(n)
        if rescaled and self.rescaling is not None and self.rescaling.method == "conformal" and n != self.num_samples:
            warnings.warn(f"interval: the conformal factor was fitted for intervals of {self.num_samples} draws; "
                          f"with n = {n} its coverage guarantee is approximate", stacklevel=2)  # fmt: skip
        draws = self.sample(x, n, rescaled=rescaled, level=lvl)
        lo, hi = metrics.central_interval(draws.double().numpy(), lvl)
        return torch.as_tensor(lo), torch.as_tensor(hi)

    def __repr__(self) -> str:
        return (f"CalibratedSampler(nu_scale_match={self.nu_scale_match}, nu_loss_argmin={self.nu_loss_argmin}, "
                f"operating_point={self.operating_point!r}, s0={self.result.s0:.4g}, at_boundary={self.at_boundary}, "
                f"evaluations={len(self.result.steps)}, rescaling="
                f"{None if self.rescaling is None else repr(f'{self.rescaling.method} x{self.rescaling.factor:.3g}')})")


def _as_predict(forward: Callable[[Tensor], Tensor]) -> Callable[[nn.Module, Tensor], Tensor]:
    return lambda model, xb: forward(xb)


def _calibration_split(x: Any, y: Any) -> Tuple[Tensor, Tensor]:
    """Tensors x (n, ...) and y (n, ...) from tensors / arrays, or from an iterable of (x, y) batches (y None)."""
    if y is not None:
        return torch.as_tensor(x), torch.as_tensor(y)
    if isinstance(x, (Tensor, np.ndarray)):
        raise TypeError("y is missing: pass x and y, or a DataLoader of (x, y) batches")
    xs, ys = [], []
    for batch in x:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise TypeError(f"a calibration DataLoader must yield (x, y) batches, got {type(batch).__name__}")
        xs.append(torch.as_tensor(batch[0]))
        ys.append(torch.as_tensor(batch[1]))
    if not xs:
        raise ValueError("the calibration DataLoader yielded no batch")
    return torch.cat(xs), torch.cat(ys)


@torch.no_grad()
def _deterministic(model: nn.Module, predict: Callable[[nn.Module, Tensor], Tensor], x: Tensor, batch_size: int):
    """The deterministic predictions f(x) (n, ...) on the CPU, in eval mode, ``batch_size`` rows at a time."""
    device = model_device(model.eval())
    return torch.cat([predict(model, xb.to(device)).cpu() for xb in x.split(batch_size)])


def calibrate_sampler(
    model: nn.Module,
    x: Any,
    y: Any = None,
    *,
    forward: Optional[Callable[[Tensor], Tensor]] = None,
    operating_point: OperatingPoint = "scale_match",
    num_passes: int = 16,
    batch_size: int = 256,
    num_batches: int = 4,
    budget: int = 12,
    domain: Optional[IntegerDomain] = None,
    seed: int = 0,
    max_rows: Union[None, int, str] = "auto",
    progress: bool = False,
    rescale: Optional[str] = None,
    level: float = 0.95,
    scale_fraction: float = 0.5,
    num_samples: int = 100,
) -> CalibratedSampler:
    """Calibrate SA's ``nu`` for a frozen ``model`` on held-out data in one call (Algorithms 2-3); return its sampler.

    x (n, ...) inputs and y (n, ...) targets, or a DataLoader (any iterable) of ``(x, y)`` batches with y omitted.
    ``forward``: x (b, ...) -> the predictions (b, ...) that y is compared with, for a model whose output needs
    picking (default ``model(x)``; e.g. ``lambda x: model(x).prediction_outputs``). The budget: ``budget``
    EvalStats evaluations (:func:`eval_stats`), each of ``num_batches`` x ``batch_size`` points x ``num_passes`` SA
    passes, over nu in ``domain`` (default the integers 1..4096). One ``seed``: ``torch.Generator().manual_seed(seed)``
    draws the mini-batches and SA's multinomials (and later :meth:`CalibratedSampler.sample`'s), ``seed`` the
    Thompson draws: the nu of the low-level calls (:class:`SASampler`, :func:`target_scale`, :func:`eval_stats`,
    :func:`bo_calibrate`) with the same seed. The model is left in eval mode, unpatched. Warns when the chosen
    operating point is at the domain's low end with the surrogate asking for more dispersion (``at_boundary``).

    Intervals at their stated level: ``rescale="conformal"`` (or ``"temperature"``) then fits the paper's scalar
    post-scaling (§5.2: "scalar post-scaling on the calibration set via temperature scaling or conformal
    prediction") of SA's samples around the deterministic prediction, so that :meth:`CalibratedSampler.sample`
    and :meth:`CalibratedSampler.interval` return rescaled draws and intervals (:class:`Rescaling`;
    ``rescaled=False`` gives SA's native ones). The calibration points are split at random (``seed``) into two disjoint
    parts: ``nu`` is calibrated on ``1 - scale_fraction`` of them, the factor on the other ``scale_fraction`` (default
    half), from ``num_samples`` SA draws per point at the calibrated nu. Why disjoint: nu is chosen from the calibration
    points' residuals, so on the same points the rescaled intervals' scores are no longer exchangeable with a new
    point's and split conformal's guarantee (coverage >= ``level`` on average over calibration draws) would not hold;
    fitted on points that played no part in choosing nu, it holds exactly whatever nu is. Why half: the conformal
    quantile at 95 % needs at least 19 points and its coverage varies by about sqrt(L (1 - L) / n_scale), while
    nu only matches a mean residual scale, which fewer points pin down. ``"conformal"`` guarantees the level
    (per level: :meth:`CalibratedSampler.interval` fits each level's factor on first use, ``level`` is the one
    :meth:`CalibratedSampler.sample` applies); ``"temperature"`` is one factor for every level from the
    S-corrected Gaussian NLL, about right where residuals are Gaussian. For multi-output targets both treat every
    output coordinate as one scalar prediction (coverage pooled over coordinates). Without ``rescale`` (default)
    every point calibrates nu and the samples are SA's native ones, as in the paper.
    """
    _operating_point(operating_point)
    if rescale is not None and rescale not in RESCALE_METHODS:
        raise ValueError(f"rescale must be None or one of {RESCALE_METHODS}, got {rescale!r}")
    x, y = _calibration_split(x, y)
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
    x_scale = y_scale = None
    if rescale is not None:
        from .metrics import check_level

        level = check_level(level)
        if not (0.0 < scale_fraction < 1.0):
            raise ValueError(f"scale_fraction must be in (0, 1), got {scale_fraction!r}")
        if not (isinstance(num_samples, int) and num_samples >= 4):
            raise ValueError(f"num_samples must be an integer >= 4 for a rescaling, got {num_samples!r}")
        n_scale = int(round(scale_fraction * len(x)))
        need = math.ceil(level / (1.0 - level) - 1e-9)  # ceil((n + 1) L) <= n
        if n_scale < need or len(x) - n_scale < 3:
            raise ValueError(f"rescale={rescale!r} at level {level:g} needs at least {need} calibration points for the "
                             f"factor and 3 for nu: {len(x)} points x scale_fraction {scale_fraction:g} gives "
                             f"{n_scale} and {len(x) - n_scale}")  # fmt: skip
        order = torch.from_numpy(np.random.default_rng(seed).permutation(len(x)))
        x_scale, y_scale = x[order[:n_scale]], y[order[:n_scale]]
        x, y = x[order[n_scale:]], y[order[n_scale:]]
    predict = None if forward is None else _as_predict(forward)
    point = _deterministic(model, predict or (lambda m, xb: m(xb)), x, batch_size)
    if point.shape != y.shape:
        raise ValueError(f"the model's predictions {tuple(point.shape)} and y {tuple(y.shape)} differ in shape: pass "
                         f"forward= to pick the prediction from the model's output")  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    with SASampler(model, generator=gen, predict=predict, max_rows=max_rows) as sampler:
        result = bo_calibrate(
            lambda nu: eval_stats(nu, sampler, x, y, point, batch_size=batch_size, num_batches=num_batches,
                                  num_passes=num_passes, generator=gen),  # fmt: skip
            target_scale(y, point), domain=domain or IntegerDomain(1, 4096), budget=budget, seed=seed,
            progress=progress,
        )
    out = CalibratedSampler(model, result, forward=forward, operating_point=operating_point, generator=gen,
                            max_rows=max_rows, num_samples=num_samples, batch_size=batch_size)  # fmt: skip
    if rescale is not None:
        out._fit_rescaling(rescale, level, x_scale, y_scale, n_nu=len(x))
    if out.at_boundary:
        tail = ("native intervals will be too narrow (rescale='conformal' gives intervals at their level)"
                if out.rescaling is None else f"rescaled by the {out.rescaling}")  # fmt: skip
        warnings.warn(f"calibrate_sampler: nu = {out.nu} is the domain's low end and SA still under-disperses there "
                      f"(the surrogate's optimum is nu = {result.nu_surrogate_continuous:.3g}): {tail}",
                      stacklevel=2)  # fmt: skip
    return out
