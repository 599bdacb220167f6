"""Evaluation of one run (``metrics.json``): native and temperature-scaled scores from ``samples.npz``.

Kept free of torch imports so the many small evaluate jobs of the workflow start quickly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

from .. import metrics, scaling
from ..io import load_json, load_npz, save_json


def evaluate(
    samples_path: str | Path,
    out_path: str | Path,
    *,
    seed: int,
    levels: Sequence[float] = (0.25, 0.5, 0.75, 0.95),
    dataset: Optional[str] = None,
    split: Optional[int] = None,
) -> Dict[str, Any]:
    """Native and temperature-scaled metrics of one run (``metrics.json``).

    SA is reported native (its ``scaled`` block equals ``native``, T = 1), as in the paper; every baseline is also
    temperature-scaled around its point prediction with T fitted on the calibration split (Gaussian-NLL
    sigma-scaling, :func:`stochattn.scaling.fit_temperature`).
    """
    run = load_npz(samples_path)
    meta = load_json(Path(samples_path).with_name("meta.json"))
    method = meta["method"]
    for key in ("samples", "point", "cal_samples", "cal_point"):
        if not np.all(np.isfinite(run[key])):
            raise ValueError(f"{samples_path}: NaN or inf in {key!r} of method {method!r}")
    native, pit_native = metrics.summarize(run["samples"], run["point"], run["y"], seed, levels)
    if method == "sa":
        temperature, scaled, pit_scaled = 1.0, dict(native), pit_native
    else:
        temperature = scaling.fit_temperature(run["cal_samples"], run["cal_point"], run["cal_y"])
        scaled_samples = scaling.apply_scale(run["samples"], run["point"], temperature)
        scaled, pit_scaled = metrics.summarize(scaled_samples, run["point"], run["y"], seed, levels)
    sigma_y = float(run["sigma_y"])
    for block in (native, scaled):
        block["nrmse"] = block["rmse"] / sigma_y
    out = {
        "dataset": dataset, "split": split, "method": method, "sigma_y": sigma_y, "native": native, "scaled": scaled,
        "temperature": float(temperature), "pit_native": np.asarray(pit_native).ravel().tolist(),
        "pit_scaled": np.asarray(pit_scaled).ravel().tolist(), "seconds": meta["seconds"],
        "nu": meta.get("nu"), "num_samples": int(run["samples"].shape[0]), "n_test": int(run["samples"].shape[1]),
    }
    save_json(out_path, out)
    return out
