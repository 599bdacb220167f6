"""Hyper-parameter selection on the validation part only (the baselines' "choose on validation" step).

A method lists candidate settings and gives a function that fits one candidate; :func:`select_on_validation`
fits each, scores it by a proper score of its predictive distribution on the validation part, the CRPS of its S
predictive samples averaged over every validation output (standardised target units, i.e. CRPS/sigma_y), keeps
the best and returns it with a JSON-able record of the search: every candidate's validation CRPS, RMSE of its
point prediction and PI-95 coverage. A score of the samples, not of the point prediction, so that of two settings
with the same mean the one whose spread fits the validation residuals wins (point RMSE would favour whichever
setting moves the weights least). ``metric="rmse"`` scores the point prediction alone (for a deterministic model).

Test data cannot reach the selection by construction: the fit function receives a :class:`ValidationSplit`,
which holds only the fitting and validation arrays (built from a prepared split by
:meth:`ValidationSplit.from_prepared`, which copies exactly those four arrays), and the score is computed here
from ``split.y_val``, not by the caller.

A candidate whose training diverges (``FloatingPointError`` from :func:`stochattn.training.fit_regressor`) or
whose validation prediction is not finite scores ``inf`` and is never chosen. Accuracy stays a requirement: a
candidate whose point prediction is not better than predicting the mean of the fitting targets (validation RMSE)
is not eligible, and when no candidate is, the method did not learn the data set: that is an error of the run
(:class:`SelectionError`), never a number in a table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, TypeVar

import numpy as np

__all__ = ["CandidateFit", "Selection", "SelectionError", "ValidationSplit", "select_on_validation"]

T = TypeVar("T")

METRICS = {"crps": "val_crps", "rmse": "val_rmse"}
COVERAGE_LEVEL = 0.95


class SelectionError(ValueError):
    """No candidate beat predicting the training mean on the validation part (or every candidate failed)."""


def _frozen(a: Any, name: str, ndim: int) -> np.ndarray:
    arr = np.array(a, dtype=np.float64)  # a copy: the caller's array stays writeable, this one is read-only
    if arr.ndim != ndim or len(arr) == 0:
        raise ValueError(f"{name}: expected a non-empty {ndim}-d array, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class ValidationSplit:
    """The only data hyper-parameter selection sees (read-only float64 copies).

    ``x_fit (n, F)``, ``y_fit (n,)``: the fitting part; ``x_val (m, F)``, ``y_val (m,)``: the validation part
    (targets ``(n, H)`` and ``(m, H)`` for a multi-output model such as a forecaster).
    """

    x_fit: np.ndarray
    y_fit: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray

    def __post_init__(self) -> None:
        y_ndim = 2 if np.ndim(self.y_fit) == 2 else 1  # (n,) targets, or (n, H) for multi-output models
        for name, ndim in (("x_fit", 2), ("y_fit", y_ndim), ("x_val", 2), ("y_val", y_ndim)):
            object.__setattr__(self, name, _frozen(getattr(self, name), name, ndim))
        if len(self.x_fit) != len(self.y_fit) or len(self.x_val) != len(self.y_val):
            raise ValueError("ValidationSplit: x and y of a part must have the same number of rows")
        if self.x_fit.shape[1] != self.x_val.shape[1]:
            raise ValueError(
                f"ValidationSplit: {self.x_fit.shape[1]} fitting vs {self.x_val.shape[1]} validation features"
            )

    @classmethod
    def from_prepared(cls, data: Mapping[str, Any]) -> "ValidationSplit":
        """From a prepared split (``stochattn.data.uci.load_prepared``): its ``x_train, y_train, x_val, y_val`` only."""
        return cls(data["x_train"], data["y_train"], data["x_val"], data["y_val"])

    def rmse(self, val_point: Any) -> float:
        """RMSE of a validation prediction ``(m,)`` against ``y_val`` (``inf`` if it has a NaN/inf)."""
        pred = np.asarray(val_point.detach().cpu().numpy() if hasattr(val_point, "detach") else val_point, np.float64)
        if pred.shape != self.y_val.shape:
            raise ValueError(f"val_point: expected shape {self.y_val.shape}, got {pred.shape}")
        if not np.all(np.isfinite(pred)):
            return math.inf
        return float(np.sqrt(np.mean((pred - self.y_val) ** 2)))

    def _samples(self, val_samples: Any) -> np.ndarray:
        x = np.asarray(val_samples.detach().cpu().numpy() if hasattr(val_samples, "detach") else val_samples,
                       np.float64)  # fmt: skip
        if x.ndim != self.y_val.ndim + 1 or x.shape[1:] != self.y_val.shape or len(x) < 2:
            raise ValueError(f"val_samples: expected shape (S >= 2, *{self.y_val.shape}), got {x.shape}")
        return x

    def crps(self, val_samples: Any) -> float:
        """Mean ensemble CRPS (:func:`stochattn.metrics.crps`, scoringrules) of validation samples ``(S, m)`` or
        ``(S, m, H)`` over every validation output (``inf`` if a sample is not finite)."""
        from stochattn.metrics import crps

        x = self._samples(val_samples)
        if not np.all(np.isfinite(x)):
            return math.inf
        return float(crps(x, self.y_val).mean())

    def coverage(self, val_samples: Any, level: float = COVERAGE_LEVEL) -> float:
        """Share of validation outputs inside the samples' central ``level`` interval (nan if not finite)."""
        from stochattn.metrics import coverage_and_width

        x = self._samples(val_samples)
        if not np.all(np.isfinite(x)):
            return math.nan
        return coverage_and_width(x, self.y_val, (level,))[level]["coverage"]

    def mean_predictor_rmse(self) -> float:
        """Validation RMSE of the constant prediction ``mean(y_fit)`` (about 1 on standardised targets)."""
        return float(np.sqrt(np.mean((self.y_val - self.y_fit.mean()) ** 2)))


@dataclass
class CandidateFit(Generic[T]):
    """What a fit function returns: ``result`` (whatever the method needs afterwards: model, posterior, ...),
    ``val_point`` ``(m,)`` (or ``(m, H)``), the method's point prediction on ``split.x_val``, and ``val_samples``
    ``(S, m)`` (or ``(S, m, H)``), its S predictive samples there (needed when selecting on the CRPS)."""

    result: T
    val_point: Any
    val_samples: Any = None


@dataclass
class Selection(Generic[T]):
    """The chosen candidate's ``result``, its ``index`` in the grid, its ``candidate`` dict and the ``record``."""

    result: T
    index: int
    candidate: Dict[str, Any]
    record: Dict[str, Any]


def select_on_validation(
    method: str,
    candidates: Sequence[Mapping[str, Any]],
    fit: Callable[[Dict[str, Any], ValidationSplit], CandidateFit[T]],
    split: ValidationSplit,
    *,
    reference: Optional[Mapping[str, float]] = None,
    label: str = "",
    require_skill: bool = True,
    metric: str = "crps",
) -> Selection[T]:
    """Fit every candidate with ``fit(candidate, split)`` and keep the eligible one with the lowest validation
    score: the mean CRPS of its ``val_samples`` (``metric="crps"``), or the RMSE of its ``val_point``
    (``metric="rmse"``). Eligible (with ``require_skill``): its point prediction's validation RMSE is below the
    mean predictor's.

    Ties go to the earlier candidate. Only the best fit so far is kept in memory. ``reference`` (e.g. the
    starting backbone's validation RMSE) is copied into the record for comparison; it plays no part in the choice.
    ``label`` (e.g. the prepared split's path, which names the data set) prefixes error messages.

    Returns a :class:`Selection` whose ``record`` is ``{"metric": "val_crps" | "val_rmse", "grid": [...],
    "scores": [...], "val_crps": [...], "val_rmse": [...], "val_coverage_95": [...], "chosen": {"index": i,
    "candidate": {...}}, "seconds": [...], "mean_predictor_rmse": float, "errors": [...], "reference": {...}}``
    (per candidate, in standardised target units, ``None`` for a failed candidate or one without samples; seconds
    of each candidate's fit).

    ``require_skill=False`` keeps the best candidate even when it does not beat the mean predictor (the record's
    ``beats_mean_predictor`` says so): for smoke runs whose models are too small to have skill.

    Raises:
        ValueError: ``metric="crps"`` and a fit returned no ``val_samples``.
        SelectionError: when no candidate produced a finite score, or (``require_skill``) none's point prediction
            beats the mean predictor's validation RMSE; the message names the method, the scores and the grid.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    grid = [dict(c) for c in candidates]
    if not grid:
        raise ValueError(f"{method}: the candidate grid is empty")
    if not isinstance(split, ValidationSplit):
        raise TypeError(f"split: expected a ValidationSplit, got {type(split).__name__}")
    mean_rmse = split.mean_predictor_rmse()
    scores: List[float] = []
    rmses: List[float] = []
    crpss: List[float] = []
    coverages: List[float] = []
    seconds: List[float] = []
    errors: List[Optional[str]] = []
    best: Optional[CandidateFit[T]] = None
    best_index = -1
    for i, candidate in enumerate(grid):
        t0 = time.perf_counter()
        rmse = crps = coverage = math.nan
        try:
            out = fit(dict(candidate), split)
            rmse, error = split.rmse(out.val_point), None
            if out.val_samples is not None:
                crps, coverage = split.crps(out.val_samples), split.coverage(out.val_samples)
            elif metric == "crps":
                raise ValueError(f"{method}: selection on the CRPS needs the candidates' val_samples")
            score = crps if metric == "crps" else rmse
            if not math.isfinite(score) or not math.isfinite(rmse):
                score, error = math.inf, "non-finite validation prediction"
        except FloatingPointError as exc:  # diverged training: a failed candidate, not a failed run
            out, score, error = None, math.inf, f"{type(exc).__name__}: {exc}"
        seconds.append(time.perf_counter() - t0)
        scores.append(score)
        rmses.append(rmse)
        crpss.append(crps)
        coverages.append(coverage)
        errors.append(error)
        eligible = math.isfinite(score) and (not require_skill or rmse < mean_rmse)
        if eligible and (best is None or score < scores[best_index]):
            best, best_index = out, i
    if best is None:
        where = f" on {label}" if label else ""
        shown = [None if not math.isfinite(r) else round(r, 4) for r in rmses]
        raise SelectionError(
            f"{method}{where}: no candidate beats predicting the training mean on the validation part (validation "
            f"RMSE/sigma_y of the mean predictor {mean_rmse:.4f}; candidates' RMSE/sigma_y {shown}; grid {grid}; "
            f"errors {[e for e in errors if e]})"
        )

    def finite(values: List[float]) -> List[Optional[float]]:
        return [v if math.isfinite(v) else None for v in values]

    record = {
        "metric": METRICS[metric],
        "unit": "standardised target (CRPS and RMSE / sigma_y of the fitting part)",
        "grid": grid,
        "scores": finite(scores),
        "val_crps": finite(crpss),
        "val_rmse": finite(rmses),
        f"val_coverage_{round(100 * COVERAGE_LEVEL)}": finite(coverages),
        "chosen": {"index": best_index, "candidate": grid[best_index]},
        "seconds": seconds,
        "mean_predictor_rmse": mean_rmse,
        "beats_mean_predictor": bool(rmses[best_index] < mean_rmse),
        "errors": errors,
        "reference": dict(reference or {}),
    }
    return Selection(result=best.result, index=best_index, candidate=grid[best_index], record=record)
