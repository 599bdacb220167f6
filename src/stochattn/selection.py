"""Hyper-parameter selection on the validation part only (the baselines' "choose on validation" step).

A method lists candidate settings and gives a function that fits one candidate; :func:`select_on_validation`
fits each, scores it by the validation RMSE of the candidate's point prediction (standardised target units, i.e.
RMSE/sigma_y), keeps the best and returns it with a JSON-able record of the search.

Test data cannot reach the selection by construction: the fit function receives a :class:`ValidationSplit`,
which holds only the fitting and validation arrays (built from a prepared split by
:meth:`ValidationSplit.from_prepared`, which copies exactly those four arrays), and the score is computed here
from ``split.y_val``, not by the caller.

A candidate whose training diverges (``FloatingPointError`` from :func:`stochattn.training.fit_regressor`) or
whose validation prediction is not finite scores ``inf`` and is never chosen. If even the best candidate is not
better than predicting the mean of the fitting targets, the method did not learn the data set: that is an error
of the run (:class:`SelectionError`), never a number in a table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, TypeVar

import numpy as np

__all__ = ["CandidateFit", "Selection", "SelectionError", "ValidationSplit", "select_on_validation"]

T = TypeVar("T")

METRIC = "val_rmse"


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

    def mean_predictor_rmse(self) -> float:
        """Validation RMSE of the constant prediction ``mean(y_fit)`` (about 1 on standardised targets)."""
        return float(np.sqrt(np.mean((self.y_val - self.y_fit.mean()) ** 2)))


@dataclass
class CandidateFit(Generic[T]):
    """What a fit function returns: ``result`` (whatever the method needs afterwards: model, posterior, ...) and
    ``val_point`` ``(m,)``, the method's point prediction on ``split.x_val``."""

    result: T
    val_point: Any


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
) -> Selection[T]:
    """Fit every candidate with ``fit(candidate, split)`` and keep the one with the lowest validation RMSE.

    Ties go to the earlier candidate. Only the best fit so far is kept in memory. ``reference`` (e.g. the
    starting backbone's validation RMSE) is copied into the record for comparison; it plays no part in the choice.
    ``label`` (e.g. the prepared split's path, which names the data set) prefixes error messages.

    Returns a :class:`Selection` whose ``record`` is ``{"metric": "val_rmse", "grid": [...], "scores": [...],
    "chosen": {"index": i, "candidate": {...}}, "seconds": [...], "mean_predictor_rmse": float, "errors": [...],
    "reference": {...}}`` (scores in standardised target units, ``None`` for a failed candidate; seconds of each
    candidate's fit).

    ``require_skill=False`` keeps the best candidate even when it does not beat the mean predictor (the record's
    ``beats_mean_predictor`` says so): for smoke runs whose models are too small to have skill.

    Raises:
        SelectionError: when no candidate produced a finite score, or (``require_skill``) the best score is not
            below the mean predictor's validation RMSE; the message names the method, the scores and the grid.
    """
    grid = [dict(c) for c in candidates]
    if not grid:
        raise ValueError(f"{method}: the candidate grid is empty")
    if not isinstance(split, ValidationSplit):
        raise TypeError(f"split: expected a ValidationSplit, got {type(split).__name__}")
    scores: List[float] = []
    seconds: List[float] = []
    errors: List[Optional[str]] = []
    best: Optional[CandidateFit[T]] = None
    best_index = -1
    for i, candidate in enumerate(grid):
        t0 = time.perf_counter()
        try:
            out = fit(dict(candidate), split)
            score, error = split.rmse(out.val_point), None
            if not math.isfinite(score):
                error = "non-finite validation prediction"
        except FloatingPointError as exc:  # diverged training: a failed candidate, not a failed run
            out, score, error = None, math.inf, f"{type(exc).__name__}: {exc}"
        seconds.append(time.perf_counter() - t0)
        scores.append(score)
        errors.append(error)
        if math.isfinite(score) and (best is None or score < scores[best_index]):
            best, best_index = out, i
    mean_rmse = split.mean_predictor_rmse()
    shown = [None if not math.isfinite(s) else round(s, 4) for s in scores]
    if best is None or (require_skill and not scores[best_index] < mean_rmse):
        where = f" on {label}" if label else ""
        raise SelectionError(
            f"{method}{where}: no candidate beats predicting the training mean on the validation part (validation "
            f"RMSE/sigma_y of the mean predictor {mean_rmse:.4f}; candidates' scores {shown}; grid {grid}; "
            f"errors {[e for e in errors if e]})"
        )
    record = {
        "metric": METRIC,
        "unit": "standardised target (RMSE / sigma_y of the fitting part)",
        "grid": grid,
        "scores": [s if math.isfinite(s) else None for s in scores],
        "chosen": {"index": best_index, "candidate": grid[best_index]},
        "seconds": seconds,
        "mean_predictor_rmse": mean_rmse,
        "beats_mean_predictor": bool(scores[best_index] < mean_rmse),
        "errors": errors,
        "reference": dict(reference or {}),
    }
    return Selection(result=best.result, index=best_index, candidate=grid[best_index], record=record)
