"""Evaluation of one run (``metrics.json``): native, temperature-scaled and coverage-matched scores from
``samples.npz``.

Every factor (temperature, conformal) is fitted on the calibration part of ``samples.npz`` (``cal_samples``,
``cal_point``, ``cal_y``) and only applied to the test part. Kept free of torch imports; the workflow evaluates
all runs of a split in one job (:func:`evaluate_split`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from .. import metrics, scaling
from ..io import load_json, load_npz, save_json, verified

REFERENCE = "sa"
"""The method every other one is matched to (SA at Algorithm 2's nu); reported native."""


def _flattened(run: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Multi-output runs (forecasts: ``samples`` (S, n, H), ``y`` (n, H)) as S x (n H) scalar predictions: every
    (series, step) is one coordinate, so PIT, coverage and CRPS are coordinate-wise, then pooled (L403)."""
    out = dict(run)
    for key in ("samples", "cal_samples"):
        out[key] = run[key].reshape(run[key].shape[0], -1)
    for key in ("point", "y", "cal_point", "cal_y"):
        out[key] = run[key].reshape(-1)
    return out


def calibration_coverage(run: Mapping[str, np.ndarray], levels: Sequence[float]) -> Dict[float, float]:
    """Empirical coverage of a run's central intervals on its calibration part: {level: fraction}.

    run: ``cal_samples`` (S, n_cal), ``cal_y`` (n_cal,).
    """
    per_level = metrics.coverage_and_width(run["cal_samples"], run["cal_y"], levels)
    return {lvl: cw["coverage"] for lvl, cw in per_level.items()}


def matched_block(
    run: Mapping[str, np.ndarray], levels: Sequence[float], target: Optional[Mapping[float, float]] = None
) -> Dict[str, float]:
    """Sharpness at matched coverage: per level L (key ``k`` = L in percent), a conformal factor c fitted on the
    calibration part so that the central L-interval, scaled by c around the point prediction, covers ``target[L]``
    of the calibration entries (the reference method's empirical coverage there; empirical-quantile mode of
    :func:`stochattn.scaling.fit_conformal_scale`, so within 1/n_cal of the target), then applied to the test part.

    ``target=None`` describes the reference itself: c = 1 (native) and its own calibration coverage as target.
    Keys: ``target_coverage_k``, ``factor_k``, ``cal_coverage_k`` (achieved on the calibration part),
    ``coverage_k`` and ``width_k`` (achieved test coverage and mean test width). Where no factor reaches the
    target (the point outside too many narrow intervals, only at low levels), the level's values are NaN.
    run: ``samples`` (S, n), ``point``, ``y`` (n,), ``cal_samples`` (S, n_cal), ``cal_point``, ``cal_y`` (n_cal,).
    """
    own = calibration_coverage(run, levels) if target is None else None
    out: Dict[str, float] = {}
    for level in levels:
        key = metrics._level_key(level)
        goal = own[level] if target is None else float(target[level])
        if target is None:
            factor = 1.0
        else:
            try:
                factor = scaling.fit_conformal_scale(run["cal_samples"], run["cal_point"], run["cal_y"], coverage=goal,
                                                     level=level, finite_sample=False)
            except ValueError:
                factor = math.nan
        out[f"target_coverage_{key}"] = goal
        out[f"factor_{key}"] = factor
        if not math.isfinite(factor):
            out.update({f"{m}_{key}": math.nan for m in ("cal_coverage", "coverage", "width")})
            continue
        cal = scaling.apply_scale(run["cal_samples"], run["cal_point"], factor)
        test = scaling.apply_scale(run["samples"], run["point"], factor)
        out[f"cal_coverage_{key}"] = metrics.coverage_and_width(cal, run["cal_y"], (level,))[level]["coverage"]
        cw = metrics.coverage_and_width(test, run["y"], (level,))[level]
        out[f"coverage_{key}"], out[f"width_{key}"] = cw["coverage"], cw["width"]
    return out


def evaluate(
    samples_path: str | Path,
    out_path: str | Path,
    *,
    seed: int,
    levels: Sequence[float] = (0.25, 0.5, 0.75, 0.95),
    dataset: Optional[str] = None,
    split: Optional[int] = None,
    reference_path: Optional[str | Path] = None,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Native, temperature-scaled and coverage-matched metrics of one run (``metrics.json``).

    * ``native``: the samples as drawn.
    * ``scaled``: every method but SA temperature-scaled around its point prediction, T fitted on the calibration
      part by the S-corrected (unbiased) Gaussian sigma scaling of :func:`stochattn.scaling.fit_temperature`;
      SA native (``scaled`` = ``native``, T = 1), as in the paper.
    * ``matched`` (:func:`matched_block`): every method but SA conformally rescaled, per level, to SA's empirical
      coverage on the same calibration part (``reference_path``: SA's samples.npz of the same split); SA native.
      Absent for a non-reference method without ``reference_path``.

    Args:
        samples_path: the run's samples.npz (meta.json beside it).
        out_path: metrics.json to write.
        seed: PIT randomisation seed.
        levels: central-interval levels for coverage / width / matching.
        dataset: recorded in the file.
        split: recorded in the file.
        reference_path: SA's samples.npz of the same split (ignored for SA itself).
        provenance: recorded as ``provenance`` (stochattn.provenance.stage_provenance).
    """
    run = _flattened(load_npz(verified(samples_path)))  # checked against the SHA-256 in meta.json
    meta = load_json(Path(samples_path).with_name("meta.json"))
    method = meta["method"]
    for key in ("samples", "point", "cal_samples", "cal_point"):
        if not np.all(np.isfinite(run[key])):
            raise ValueError(f"{samples_path}: NaN or inf in {key!r} of method {method!r}")
    levels = tuple(float(v) for v in levels)
    native, pit_native = metrics.summarize(run["samples"], run["point"], run["y"], seed, levels)
    matched: Optional[Dict[str, float]] = None
    if method == REFERENCE:
        temperature, scaled, pit_scaled = 1.0, dict(native), pit_native
        matched = matched_block(run, levels)
    else:
        temperature = scaling.fit_temperature(run["cal_samples"], run["cal_point"], run["cal_y"])
        scaled_samples = scaling.apply_scale(run["samples"], run["point"], temperature)
        scaled, pit_scaled = metrics.summarize(scaled_samples, run["point"], run["y"], seed, levels)
        if reference_path is not None:
            ref = _flattened(load_npz(verified(reference_path)))
            if ref["cal_y"].shape != run["cal_y"].shape or not np.array_equal(ref["cal_y"], run["cal_y"]):
                raise ValueError(f"{reference_path} and {samples_path} have different calibration targets "
                                 f"(not the same split)")
            matched = matched_block(run, levels, calibration_coverage(ref, levels))
    sigma_y = float(run["sigma_y"])
    for block in (native, scaled):
        block["nrmse"] = block["rmse"] / sigma_y
    out = {
        "dataset": dataset, "split": split, "method": method, "sigma_y": sigma_y, "native": native, "scaled": scaled,
        "temperature": float(temperature), "pit_native": np.asarray(pit_native).ravel().tolist(),
        "pit_scaled": np.asarray(pit_scaled).ravel().tolist(), "seconds": meta["seconds"],
        "nu": meta.get("nu"), "at_boundary": meta.get("at_boundary"), "operating_point": meta.get("operating_point"),
        "num_samples": int(run["samples"].shape[0]), "n_test": int(run["samples"].shape[1]),
        "n_cal": int(run["cal_y"].shape[0]),
    }
    # the point's own bias (for SA: the backbone's), test and calibration parts, in sigma_y units: pooled exactly
    # over splits by the tables (metrics.pooled_moments), it names a PIT-mean bias's cause
    test_res = metrics.point_residual(run["point"], run["y"], sigma_y)
    cal_res = metrics.point_residual(run["cal_point"], run["cal_y"], sigma_y)
    out["point_residual"] = {**test_res, **{f"cal_{k}": v for k, v in cal_res.items()}}
    if matched is not None:
        out["matched"] = matched
        out["matched_reference"] = REFERENCE
    if provenance is not None:  # stochattn.provenance.stage_provenance: input hashes, code version
        out["provenance"] = dict(provenance)
    save_json(out_path, out)
    return out


def evaluate_split(
    samples_paths: Mapping[str, str | Path],
    out_paths: Mapping[str, str | Path],
    *,
    seed: int,
    levels: Sequence[float] = (0.25, 0.5, 0.75, 0.95),
    dataset: Optional[str] = None,
    split: Optional[int] = None,
    provenance: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> Dict[str, Dict[str, Any]]:
    """:func:`evaluate` for every run of one split, in one process: ``{method: metrics}``.

    One job per split instead of one per run: the scoring libraries load once (importing scoringrules compiles its
    numba ufuncs, ~3.5 s, which dominated the workflow's many small evaluate jobs). Each run is evaluated exactly
    as alone; the reference method's samples (``REFERENCE``, when among the runs) give every other run's
    coverage target. ``samples_paths`` and ``out_paths`` have the same methods as keys; ``provenance`` (optional)
    maps a method to its record.
    """
    if set(samples_paths) != set(out_paths):
        raise ValueError(f"samples_paths and out_paths name different methods: {sorted(samples_paths)} vs "
                         f"{sorted(out_paths)}")
    reference = samples_paths.get(REFERENCE)
    return {
        method: evaluate(
            path, out_paths[method], seed=seed, levels=levels, dataset=dataset, split=split,
            reference_path=None if method == REFERENCE else reference,
            provenance=None if provenance is None else provenance.get(method),
        )
        for method, path in samples_paths.items()
    }
