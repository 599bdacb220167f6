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
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

__all__ = ["CandidateFit", "Selection", "SelectionError", "ValidationSplit", "Widening", "best_index", "choose",
           "entry_from_record", "entry_record", "fit_candidate", "grid_entries", "select_on_validation"]

T = TypeVar("T")

METRICS = {"crps": "val_crps", "rmse": "val_rmse"}
COVERAGE_LEVEL = 0.95
COVERAGE_KEY = f"val_coverage_{round(100 * COVERAGE_LEVEL)}"
ENTRY_KEYS = ("score", "val_rmse", "val_crps", COVERAGE_KEY, "seconds", "error")


def grid_entries(cfg: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The grid of a method's settings ``cfg``: its ``grid`` entries (overrides), one empty entry without a grid
    (the workflow fits each entry of a grid with more than one in its own job)."""
    return [dict(e) for e in cfg.get("grid", [{}])]


@dataclass(frozen=True)
class Widening:
    """Widen a grid where its edge was chosen: a candidate beyond the edge, fitted and scored like the others.

    ``keys``: the settings that move together along the grid's axis (e.g. ``("lr",)``, or both dropout rates); the
    first orders the candidates. A candidate's *line* is the grid entries that agree with it on every other setting
    (e.g. SWAG's SGD rates and its AdamW rates are two lines). When the chosen candidate has the largest (smallest)
    first key of a line of at least two, the next candidate is the chosen one with every key multiplied (divided) by
    ``factor``, clipped to ``[low, high]``; it is fitted, scored on the same validation part and joins the choice.
    This repeats while the chosen candidate lies on an edge, at most ``max_steps`` times, and stops at a bound (the
    clipped candidate is one already fitted). The record says what was added (``widened``) and whether the final
    choice still lies on an edge (``edge_chosen``): a grid that could not be widened enough."""

    keys: Tuple[str, ...]
    factor: float
    low: float
    high: float
    max_steps: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        if not self.keys:
            raise ValueError("widen.keys: name at least one setting")
        if not (self.factor > 1):
            raise ValueError(f"widen.factor: must be > 1, got {self.factor}")
        if not (0 < self.low < self.high):
            raise ValueError(f"widen: needs 0 < low < high, got low {self.low}, high {self.high}")
        if int(self.max_steps) != self.max_steps or self.max_steps < 0:
            raise ValueError(f"widen.max_steps: must be a non-negative int, got {self.max_steps}")

    @classmethod
    def from_config(cls, cfg: Optional[Mapping[str, Any]]) -> Optional[Widening]:
        """A method's ``widen`` setting (a mapping of this class's fields), or None without one."""
        if not cfg:
            return None
        return cls(keys=tuple(cfg["keys"]), factor=float(cfg["factor"]), low=float(cfg["low"]),
                   high=float(cfg["high"]), max_steps=int(cfg.get("max_steps", 3)))  # fmt: skip

    def edge(self, grid: Sequence[Mapping[str, Any]], index: int) -> int:
        """+1 (-1) when ``grid[index]`` has the largest (smallest) first key of its line of >= 2 entries, else 0."""
        chosen, lead = grid[index], self.keys[0]
        if lead not in chosen:
            raise ValueError(f"widen.keys: {lead!r} is not a setting of the candidates ({sorted(chosen)})")
        others = (set(chosen) - set(self.keys))
        line = [float(c[lead]) for c in grid if all(c.get(k) == chosen.get(k) for k in others)]
        if len(set(line)) < 2:
            return 0
        value = float(chosen[lead])
        return 1 if value == max(line) else -1 if value == min(line) else 0

    def extension(self, grid: Sequence[Mapping[str, Any]], index: int) -> Optional[Dict[str, Any]]:
        """The candidate beyond the edge that ``grid[index]`` lies on, or None (not on an edge, or at a bound)."""
        direction = self.edge(grid, index)
        if direction == 0:
            return None
        step = self.factor if direction > 0 else 1.0 / self.factor
        new = dict(grid[index])
        for k in self.keys:
            new[k] = float(min(self.high, max(self.low, float(new[k]) * step)))
        if any(new == dict(c) for c in grid):
            return None
        return new

    def max_added(self, grid: Sequence[Mapping[str, Any]]) -> int:
        """The most candidates a search over ``grid`` can add (the chosen candidate on an edge at every step, each
        step's new candidate chosen in turn), at most ``max_steps``: e.g. 1 where one step reaches a bound."""
        most = 0
        for index in range(len(grid)):
            steps, path = 0, [dict(c) for c in grid]
            while steps < self.max_steps:
                new = self.extension(path, index if steps == 0 else len(path) - 1)
                if new is None:
                    break
                path.append(new)
                steps += 1
            most = max(most, steps)
        return most

    def grow(self, grid: List[Dict[str, Any]], entries: List[Mapping[str, Any]], run: Callable[[Dict[str, Any]], None],
             mean_rmse: float, require_skill: bool = True) -> List[Dict[str, Any]]:  # fmt: skip
        """The widening steps after ``grid``'s candidates were scored (``entries``, in grid order): while the best
        (:func:`best_index`) lies on an edge, the candidate beyond it is appended to ``grid`` and ``run(candidate)``
        fits it and appends its entry. Returns the candidates added."""
        added: List[Dict[str, Any]] = []
        while len(added) < self.max_steps:
            index = best_index(entries, mean_rmse, require_skill)
            new = None if index < 0 else self.extension(grid, index)
            if new is None:
                break
            grid.append(new)
            added.append(new)
            run(new)
        return added

    def record(self, grid: Sequence[Mapping[str, Any]], index: int,
               added: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:  # fmt: skip
        """What a selection record says of the widening: its settings, the candidates ``added`` and whether the
        chosen ``grid[index]`` still lies on an edge (``edge_chosen``)."""
        return {"widen": {"keys": list(self.keys), "factor": self.factor, "low": self.low, "high": self.high,
                          "max_steps": self.max_steps},
                "widened": list(added), "edge_chosen": self.edge(grid, index) != 0}  # fmt: skip


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
    def from_prepared(cls, data: Mapping[str, Any]) -> "ValidationSplit":  # noqa: UP037 - keeps the code hash
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


def fit_candidate(
    method: str,
    candidate: Mapping[str, Any],
    fit: Callable[[Dict[str, Any], ValidationSplit], CandidateFit[T]],
    split: ValidationSplit,
    metric: str = "crps",
) -> Tuple[Optional[CandidateFit[T]], Dict[str, Any]]:
    """Fit one candidate with ``fit(candidate, split)`` and score it on the validation part: ``(fit, entry)``,
    ``fit`` None when its training diverged. ``entry``: ``score`` (``inf`` when failed or not finite),
    ``val_rmse``, ``val_crps``, ``val_coverage_95`` (nan when not computed), ``seconds``, ``error``.

    Raises:
        ValueError: ``metric="crps"`` and the fit returned no ``val_samples``.
    """
    from .training import TrainingClock

    rmse = crps = coverage = math.nan
    with TrainingClock() as clock:  # a resumed candidate's training counts its earlier attempts
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
    return out, {"score": score, "val_rmse": rmse, "val_crps": crps, COVERAGE_KEY: coverage,
                 "seconds": clock.seconds(), "error": error}  # fmt: skip


def entry_record(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """A candidate's entry (:func:`fit_candidate`) as JSON: non-finite numbers as ``None``."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in entry.items()}


def entry_from_record(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The entry of :func:`entry_record` back (``None``: score ``inf``, other scores nan); the choice it gives is
    the one the entry itself gives."""
    out = {k: record[k] for k in ENTRY_KEYS}
    for k in ("score", "val_rmse", "val_crps", COVERAGE_KEY):
        out[k] = (math.inf if k == "score" else math.nan) if out[k] is None else float(out[k])
    return out


def best_index(entries: Sequence[Mapping[str, Any]], mean_rmse: float, require_skill: bool = True) -> int:
    """Index of the eligible entry with the lowest score (ties: the earlier), -1 when none is eligible. Eligible: a
    finite score and (``require_skill``) a validation RMSE below the mean predictor's ``mean_rmse``."""
    best = -1
    for i, e in enumerate(entries):
        eligible = math.isfinite(e["score"]) and (not require_skill or e["val_rmse"] < mean_rmse)
        if eligible and (best < 0 or e["score"] < entries[best]["score"]):
            best = i
    return best


def choose(
    method: str,
    candidates: Sequence[Mapping[str, Any]],
    entries: Sequence[Mapping[str, Any]],
    mean_rmse: float,
    *,
    reference: Optional[Mapping[str, float]] = None,
    label: str = "",
    require_skill: bool = True,
    metric: str = "crps",
) -> Tuple[int, Dict[str, Any]]:
    """The choice among fitted candidates (their ``entries``, :func:`fit_candidate`, in grid order): ``(index,
    record)``, the record as :func:`select_on_validation` describes it. Pure: no fitting here.

    Raises:
        SelectionError: no entry is eligible (:func:`best_index`).
    """
    grid = [dict(c) for c in candidates]
    if len(entries) != len(grid):
        raise ValueError(f"{method}: {len(entries)} scored candidates for a grid of {len(grid)}")
    index = best_index(entries, mean_rmse, require_skill)
    rmses = [e["val_rmse"] for e in entries]
    errors = [e["error"] for e in entries]
    if index < 0:
        where = f" on {label}" if label else ""
        shown = [None if not math.isfinite(r) else round(r, 4) for r in rmses]
        raise SelectionError(
            f"{method}{where}: no candidate beats predicting the training mean on the validation part (validation "
            f"RMSE/sigma_y of the mean predictor {mean_rmse:.4f}; candidates' RMSE/sigma_y {shown}; grid {grid}; "
            f"errors {[e for e in errors if e]})"
        )

    def finite(key: str) -> List[Optional[float]]:
        return [e[key] if math.isfinite(e[key]) else None for e in entries]

    record = {
        "metric": METRICS[metric],
        "unit": "standardised target (CRPS and RMSE / sigma_y of the fitting part)",
        "grid": grid,
        "scores": finite("score"),
        "val_crps": finite("val_crps"),
        "val_rmse": finite("val_rmse"),
        COVERAGE_KEY: finite(COVERAGE_KEY),
        "chosen": {"index": index, "candidate": grid[index]},
        "seconds": [e["seconds"] for e in entries],
        "mean_predictor_rmse": mean_rmse,
        "beats_mean_predictor": bool(rmses[index] < mean_rmse),
        "errors": errors,
        "reference": dict(reference or {}),
    }
    return index, record


def check_search(method: str, candidates: Sequence[Mapping[str, Any]], split: Any, metric: str) -> List[Dict[str, Any]]:
    """The grid as a list of dicts; ValueError / TypeError for an unknown metric, an empty grid or a split that is
    not a :class:`ValidationSplit`."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    grid = [dict(c) for c in candidates]
    if not grid:
        raise ValueError(f"{method}: the candidate grid is empty")
    if not isinstance(split, ValidationSplit):
        raise TypeError(f"split: expected a ValidationSplit, got {type(split).__name__}")
    return grid


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
    widen: Optional[Widening] = None,
) -> Selection[T]:
    """Fit every candidate with ``fit(candidate, split)`` (:func:`fit_candidate`) and keep the eligible one with the
    lowest validation score (:func:`choose`): the mean CRPS of its ``val_samples`` (``metric="crps"``), or the
    RMSE of its ``val_point`` (``metric="rmse"``). Eligible (with ``require_skill``): its point prediction's
    validation RMSE is below the mean predictor's.

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

    ``widen`` (:class:`Widening`): where the grid's edge is chosen, candidates beyond it are fitted and scored too
    (the record's ``grid`` and lists include them, in the order fitted; ``widened`` lists them and ``edge_chosen``
    says whether the final choice still lies on an edge).

    The workflow runs the same search split in jobs: one :func:`fit_candidate` per candidate, then :func:`choose`
    over their entries.

    Raises:
        ValueError: ``metric="crps"`` and a fit returned no ``val_samples``.
        SelectionError: when no candidate produced a finite score, or (``require_skill``) none's point prediction
            beats the mean predictor's validation RMSE; the message names the method, the scores and the grid.
    """
    grid = check_search(method, candidates, split, metric)
    mean_rmse = split.mean_predictor_rmse()
    entries: List[Dict[str, Any]] = []
    best: Optional[CandidateFit[T]] = None

    def run(candidate: Dict[str, Any]) -> None:
        nonlocal best
        out, entry = fit_candidate(method, candidate, fit, split, metric)
        entries.append(entry)
        if best_index(entries, mean_rmse, require_skill) == len(entries) - 1:
            best = out

    for candidate in list(grid):
        run(candidate)
    added = [] if widen is None else widen.grow(grid, entries, run, mean_rmse, require_skill)
    index, record = choose(method, grid, entries, mean_rmse, reference=reference, label=label,
                           require_skill=require_skill, metric=metric)  # fmt: skip
    if widen is not None:
        record.update(widen.record(grid, index, added))
    return Selection(result=best.result, index=index, candidate=grid[index], record=record)
