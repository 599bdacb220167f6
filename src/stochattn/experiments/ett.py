"""The ETT experiment (paper §5.1, §6.1, App. C.1, App. "TimesFM Details"): TimesFM 2.5 + LoRA on ETTh1, ETTh2,
ETTm1, ETTm2 at horizons 96 and 192 (8 configurations; 336, 720 or any horizon that fits by config), one function
per workflow stage:

    prepare            ETT CSV -> z-scored windows of one (data set, horizon): adaptation / val / cal / test
    pretrain_standin   the offline stand-in backbone of one station, pretrained on the OTHER station's training rows
    adapt              LoRA adapter of one configuration on the adaptation windows (best validation epoch kept),
                       plus the backbone's zero-shot test MAE next to the seasonal-naive and last-value forecasts
    run_method         one method's S predictive samples (``samples.npz``, ``meta.json``) as for UCI

Units: every series (a column of a window) is in z-scored units of its column (training-segment statistics), so
``y_mean = 0``, ``y_std = 1`` and the run files, metrics and tables are in normalised units (L1171).

Windows as arrays: ``x_*`` (n, context) inputs, ``y_*`` (n, H) targets, ``*_start`` (n,) first context row,
``*_column`` (n,) column index; the method stages of :mod:`stochattn.experiments.methods` take them as they take
UCI's features and targets (the model is the :class:`~stochattn.backbones.timesfm.TimesFMForecaster`).

NOTE[DIFF]: the validation segment serves early stopping and hyper-parameter selection (``val``) AND SA's nu,
temperature and conformal factors (``cal``); its windows are split alternately (even window index -> val, odd ->
cal) so no decision is fitted on the windows that score it, as in the UCI slice's separate parts. Test windows are
touched once, by the methods' sampling (and by the zero-shot report, which decides nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np
import torch

from ..data import ett as ett_data
from ..data.synthetic import synthetic_series
from ..io import RECORD_KEY, load_json, load_model, load_npz, save_json, save_model, save_npz, sha256_file
from ..provenance import device_info, package_versions, with_outputs
from ..training import predict, resolve_device
from . import adapters, methods
from .adapters import ADAPTED_METHODS, DERIVED_METHODS, METHODS, RUN_METHODS  # noqa: F401 (re-exported)

PARTS = ("train", "val", "cal", "test")


# --------------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------------
def _strided(windows: ett_data.ETTWindows, max_series: Optional[int]) -> ett_data.ETTWindows:
    """At most ``max_series`` series, whole windows (all columns) evenly spaced in time (None: all)."""
    n_cols = len(ett_data.ETT_COLUMNS)
    n_windows = windows.n_series // n_cols
    if max_series is None or windows.n_series <= max_series:
        return windows
    keep = np.unique(np.linspace(0, n_windows - 1, max(1, max_series // n_cols)).round().astype(int))
    rows = (keep[:, None] * n_cols + np.arange(n_cols)).ravel()
    return ett_data.ETTWindows(windows.x[rows], windows.y[rows], windows.start[rows], windows.column[rows])


def prepare(
    csv_path: str | Path,
    dataset: str,
    horizon: int,
    out_path: str | Path,
    *,
    context: int,
    adaptation_percent: int,
    max_series: Mapping[str, Optional[int]],
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Windows of one configuration -> ``out_path`` (npz) and ``<stem>.json`` (counts and rules; ``provenance``,
    a :func:`stochattn.provenance.stage_provenance` block, with the npz's hash added).

    ``max_series``: per part (train, val, test) a cap on the number of series (whole windows evenly spaced; None:
    every window, step 1). Validation windows alternate between ``val`` and ``cal`` (module NOTE[DIFF]).
    """
    ds = ett_data.resolve_ett(dataset)
    _, values, columns = ett_data.load_ett(csv_path, ds)
    z, mean, std = ett_data.normalise(values, ds)
    parts = {
        "train": ett_data.make_windows(z, ds, "train", context, horizon, adaptation_percent=adaptation_percent),
        "val": ett_data.make_windows(z, ds, "val", context, horizon),
        "test": ett_data.make_windows(z, ds, "test", context, horizon),
    }
    parts = {k: _strided(w, max_series.get(k)) for k, w in parts.items()}
    n_cols = len(columns)
    window_index = np.arange(parts["val"].n_series) // n_cols
    val, cal = (np.flatnonzero(window_index % 2 == r) for r in (0, 1))
    full_val = parts.pop("val")
    for name, rows in (("val", val), ("cal", cal)):
        parts[name] = ett_data.ETTWindows(full_val.x[rows], full_val.y[rows], full_val.start[rows],
                                          full_val.column[rows])  # fmt: skip
    arrays: Dict[str, Any] = {"y_mean": np.float64(0.0), "y_std": np.float64(1.0), "column_mean": mean,
                              "column_std": std}  # fmt: skip
    for name, w in parts.items():
        arrays.update({f"x_{name}": w.x, f"y_{name}": w.y, f"{name}_start": w.start, f"{name}_column": w.column})
    save_npz(out_path, **arrays)
    meta = {
        "dataset": ds.name, "horizon": horizon, "context": context, "columns": list(columns),
        "adaptation_percent": adaptation_percent,
        "adaptation_end_row": ett_data.adaptation_end(ds, context, adaptation_percent),
        "rows": {p: list(ds.rows(p)) for p in ("train", "val", "test")},
        "n_series": {name: int(w.n_series) for name, w in parts.items()}, "max_series": dict(max_series),
        "units": "z-scored per column with training-segment mean/std", "source_sha256": sha256_file(csv_path),
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_windows(path: str | Path) -> Dict[str, Any]:
    """The arrays of :func:`prepare` (``x_train`` ... ``y_test``, ``y_mean = 0``, ``y_std = 1``, starts, columns)."""
    data = load_npz(path)
    data["source"] = str(path)
    return data


# --------------------------------------------------------------------------------------------------------------
# backbone: the offline stand-in
# --------------------------------------------------------------------------------------------------------------
def pretraining_series(
    sources: Mapping[str, str | Path], for_station: int, *, context: int, stride: int, val_fraction: float
) -> tuple[np.ndarray, np.ndarray, Dict[str, Any]]:
    """Pretraining windows (n, context + 128) from ``sources`` ({data set: CSV path}), all of another station.

    Each source contributes windows of its training rows only (z-scored with its own training statistics), every
    column a series, every ``stride``-th start; the last ``val_fraction`` of its training rows is held out for the
    pretraining's own validation. Raises ValueError when a source belongs to ``for_station`` (leakage: ETTh1 is
    ETTm1 sampled hourly, see :func:`stochattn.data.ett.pretraining_sources`) or is not an ETT data set.
    """
    length = context + 128
    train, val, record = [], [], {}
    for name, path in sources.items():
        ds = ett_data.resolve_ett(name)
        if ds.station == for_station:
            raise ValueError(f"pretraining source {name} is station {ds.station}, the evaluated station: a stand-in "
                             f"for station {for_station} may only see the other station's training rows")
        _, values, _ = ett_data.load_ett(path, ds)
        z, _, _ = ett_data.normalise(values, ds)
        cut = int(round(ds.train_end * (1 - val_fraction)))
        for part, (lo, hi), out in (("train", (0, cut), train), ("val", (cut, ds.train_end), val)):  # noqa: B007 - keeps the code hash
            view = np.lib.stride_tricks.sliding_window_view(z[lo:hi], length, axis=0)[::stride]  # (n, C, L)
            out.append(view.reshape(-1, length))
        record[name] = {"file": str(path), "sha256": sha256_file(path), "rows": [0, ds.train_end],
                        "pretraining_val_rows": [cut, ds.train_end]}  # fmt: skip
    return np.concatenate(train), np.concatenate(val), record


def build_standin(model_cfg: Mapping[str, Any], seed: Optional[int] = None) -> torch.nn.Module:
    """The reduced TimesFM 2.5 module of the offline default (same class family as the 200M model)."""
    from ..backbones.timesfm import build_timesfm

    return build_timesfm(int(model_cfg["num_layers"]), int(model_cfg["model_dims"]), int(model_cfg["num_heads"]),
                         seed=seed, output_quantile_len=int(model_cfg.get("output_quantile_len", 128)))  # fmt: skip


def pretrain_standin(
    sources: Mapping[str, str | Path],
    station: int,
    out_path: str | Path,
    *,
    model: Mapping[str, Any],
    pretrain: Mapping[str, Any],
    context: int,
    seed: int,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Pretrain the stand-in backbone evaluated on ``station``'s data sets on ``sources`` (the other station's
    training rows) and write ``out_path`` (torch state) and ``<stem>.json``.

    NOTE[DIFF]: the paper uses the public TimesFM 2.5 200M checkpoint (pretrained by Google on a large corpus);
    offline this reduced module, pretrained here, stands in for it. It is labelled a stand-in wherever its numbers
    appear.
    """
    from ..backbones.timesfm import pretrain_timesfm

    x_train, x_val, record = pretraining_series(
        sources, station, context=context, stride=int(pretrain["stride"]), val_fraction=float(pretrain["val_fraction"])
    )
    n_real = len(x_train)
    if n_synthetic := int(pretrain.get("synthetic", 0)):
        # TimesFM-style synthetic series (trends, ARMA, seasonal patterns, steps) beside the other station's rows:
        # TimesFM's own corpus mixes such series with real ones; the validation windows stay real
        x_train = np.concatenate([x_train, synthetic_series(n_synthetic, x_train.shape[1], seed)])
    dev = resolve_device(None)  # CUDA when present
    net = build_standin(model, seed).to(dev)
    result = pretrain_timesfm(
        net,
        torch.tensor(x_train, dtype=torch.float32, device=dev),
        torch.tensor(x_val, dtype=torch.float32, device=dev),
        context=context,
        steps=int(pretrain["steps"]), batch_size=int(pretrain["batch_size"]), lr=float(pretrain["lr"]), seed=seed,
        warmup=int(pretrain.get("warmup", 0)), eval_every=int(pretrain.get("eval_every", 100)), progress=progress,
    )
    recorded = save_model(out_path, {"state_dict": {k: v.cpu() for k, v in net.state_dict().items()},
                                     "model": dict(model)})  # fmt: skip
    meta = {
        "stand_in": True, "station": station, "sources": record, "model": dict(model), "pretrain": dict(pretrain),
        "n_windows": {"train": n_real, "synthetic": len(x_train) - n_real, "val": len(x_val)},
        "best_step": result.best_step,
        "best_val_loss": result.best_val_loss, "history": result.history, "seconds": result.seconds, "seed": seed,
        "parameters": sum(p.numel() for p in net.parameters()), "device": device_info(),
        "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_backbone(path: str | Path) -> torch.nn.Module:
    """The backbone module of ``path``: a stand-in written by :func:`pretrain_standin` (``.pt``), or the public
    TimesFM 2.5 200M checkpoint (a safetensors file or its folder, :func:`stochattn.backbones.timesfm.
    fetch_timesfm_checkpoint`)."""
    from ..backbones.timesfm import build_timesfm_200m

    path = Path(path)
    if path.suffix == ".pt":
        ckpt = load_model(path)  # checked against the SHA-256 in <stem>.json
        net = build_standin(ckpt["model"])
        net.load_state_dict(ckpt["state_dict"])
        return net.eval()
    return build_timesfm_200m(path)


# --------------------------------------------------------------------------------------------------------------
# adaptation (LoRA)
# --------------------------------------------------------------------------------------------------------------
def lora_forecaster(backbone_path: str | Path, horizon: int, lora: Mapping[str, Any], seed: int) -> torch.nn.Module:
    """The backbone with fresh LoRA adapters (initialised under ``seed``; B = 0, so it starts as the backbone),
    wrapped as ``context (B, T) -> forecast (B, horizon)``; only the adapters are trainable."""
    from ..backbones.timesfm import TimesFMForecaster
    from ..lora import add_lora
    from ..training import seeded

    backbone = load_backbone(backbone_path)
    with seeded(seed):
        add_lora(backbone, tuple(lora["targets"]), r=int(lora["r"]), alpha=float(lora["alpha"]))
    return TimesFMForecaster(backbone, horizon).to(resolve_device(None)).eval()  # CUDA when present


def _mae(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred, np.float64) - y)))


def naive_forecasts(x: np.ndarray, horizon: int, season: int) -> Dict[str, np.ndarray]:
    """Seasonal-naive (repeat the last ``season`` steps) and last-value forecasts (n, horizon) of contexts x (n, T)."""
    reps = -(-horizon // season)
    return {"seasonal_naive": np.tile(x[:, -season:], (1, reps))[:, :horizon],
            "last_value": np.repeat(x[:, -1:], horizon, axis=1)}  # fmt: skip


def adapt(
    prepared_path: str | Path,
    backbone_path: str | Path,
    out_path: str | Path,
    *,
    dataset: str,
    horizon: int,
    lora: Mapping[str, Any],
    train: Mapping[str, Any],
    seed: int,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
    checkpoint: Optional[str | Path] = None,
) -> Dict[str, Any]:
    """Fit the configuration's LoRA adapter on the adaptation windows (AdamW, MSE on the forecast in z-units,
    early stopping on the val windows) and write ``out_path`` (adapter state) and ``<stem>.json``.

    The best validation epoch is kept, and epoch 0 (the backbone itself, LoRA B = 0) competes: on 10 % of the
    training rows adaptation can hurt (measured on the stand-in), and the paper's recipe keeps the best epoch.
    ``<stem>.json`` also reports the backbone's zero-shot test MAE next to the seasonal-naive (one day) and
    last-value forecasts; those numbers decide nothing. ``checkpoint``: a file that makes the training resumable
    (:func:`stochattn.training.fit_regressor`).
    NOTE[DIFF]: AdamW at a constant learning rate (the paper: Adam + cosine, batch 16, 50 epochs; the quick
    configuration caps the epochs, where a cosine schedule would decay over epochs never run).
    """
    data = load_windows(prepared_path)
    net = lora_forecaster(backbone_path, horizon, lora, seed)
    record = adapters.fit_adapter(net, data, train, seed=seed, progress=progress, desc=f"LoRA {dataset} H={horizon}",
                                  checkpoint=checkpoint)
    recorded = adapters.save_adapter(net, out_path, lora=dict(lora), horizon=horizon)
    test_point = predict(net, data["x_test"], 256).numpy()
    season = 24 if ett_data.resolve_ett(dataset).step_minutes == 60 else 96
    with torch.no_grad():
        backbone = lora_forecaster(backbone_path, horizon, lora, seed)  # B = 0: the backbone's zero-shot forecast
        zero_test = predict(backbone, data["x_test"], 256).numpy()
    naive = naive_forecasts(data["x_test"], horizon, season)
    meta = {
        "dataset": dataset, "horizon": horizon, "lora": dict(lora), "train": dict(train), "seed": seed, **record,
        "test_mae": {"zero_shot_backbone": _mae(zero_test, data["y_test"]), "adapted": _mae(test_point, data["y_test"]),
                     **{k: _mae(v, data["y_test"]) for k, v in naive.items()}, "season": season,
                     "n_series": int(len(data["y_test"]))},  # fmt: skip
        "device": device_info(), "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_adapted(backbone_path: str | Path, adapter_path: str | Path) -> torch.nn.Module:
    """The adapted forecaster of a configuration (backbone + its LoRA adapter of :func:`adapt`)."""
    ckpt = adapters.adapter_checkpoint(adapter_path)
    return adapters.load_adapter(lora_forecaster(backbone_path, int(ckpt["horizon"]), ckpt["lora"], seed=0),
                                 adapter_path)  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# methods (stochattn.experiments.adapters)
# --------------------------------------------------------------------------------------------------------------
def _add_hsa(net: torch.nn.Module, c: Mapping[str, Any], seed: int) -> None:
    """HSA put into the pretrained attention (centroids per layer)."""
    from ..baselines.hsa_timesfm import add_hsa_to_timesfm

    add_hsa_to_timesfm(net, n_centroids=int(c["n_centroids"]), tau1=c["tau1"], tau2=c["tau2"], seed=seed)


def _dropout_sites(net: torch.nn.Module) -> list:
    """Contextual Dropout sites of a TimesFM forecaster: the inputs of every block's attention output projection
    (the attention output) and second FFN linear (the FFN hidden layer)."""
    return [n for n, _ in net.named_modules() if n.endswith((".attn.out", ".ff1"))]


def setup(backbone_path: str | Path, adapter_path: str | Path, horizon: int, lora: Mapping[str, Any],
          train: Mapping[str, Any]) -> adapters.AdapterSetup:  # fmt: skip
    """The :class:`~stochattn.experiments.adapters.AdapterSetup` of one ETT configuration."""
    return adapters.AdapterSetup(
        fresh=lambda s: lora_forecaster(backbone_path, horizon, lora, s), add_hsa=_add_hsa,
        dropout_sites=_dropout_sites, train=train, adapter_path=adapter_path,
    )


def run_method(
    method: str,
    prepared_path: str | Path,
    backbone_path: str | Path,
    adapter_path: str | Path,
    out_dir: str | Path,
    *,
    lora: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    members: Optional[Sequence[str | Path]] = None,
    require_skill: bool = True,
    swag_member: Optional[str | Path] = None,
    multiswag_components: Optional[int] = None,
    candidates: Optional[Sequence[str | Path]] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """One method on one configuration: ``samples.npz`` (series flattened by the evaluation; arrays (S, n, H))
    and ``meta.json`` in ``out_dir`` (SA: also ``sa_match`` beside it and ``calibration.json``). MultiSWAG pools
    ``members`` (SWAG's member 0, then :func:`train_multiswag_member`'s files) when given, else runs them here.
    ``require_skill=False`` lets the baselines' selection keep a candidate that does not beat the training mean
    (recorded; the rehearsal's random weights). SWAG with ``swag_member``: also its posterior, as MultiSWAG-LoRA's
    member 0 (:func:`stochattn.experiments.adapters.write_swag_as_member`), with member 0's share of the samples of a
    MultiSWAG of ``multiswag_components`` (L) at every candidate. ``candidates``: the method's grid fitted one
    candidate per job (:func:`fit_candidate`'s files, in grid order): only the choice and the sampling run here."""
    adapters.check_method(method, num_samples, swag_member, multiswag_components)
    data = load_windows(prepared_path)
    data["require_skill"] = bool(require_skill)
    adapter_meta = load_json(Path(adapter_path).with_suffix(".json"))
    ctx = setup(backbone_path, adapter_path, int(adapter_meta["horizon"]), lora, train)
    ctx.extra["adapter_seconds"] = adapter_meta["seconds"]  # MultiSWAG's member 0 (the SWAG run) trained it
    if members:
        ctx.extra["multiswag_members"] = [str(m) for m in members]
    if swag_member is not None:
        adapters.keep_member_draws(ctx, data, num_samples, seed, multiswag_components)
    run = adapters.method_run(method, data, ctx, method_cfg, num_samples, seed, progress, candidates)
    if swag_member is not None:
        adapters.write_swag_as_member(swag_member, ctx, run, seed=seed, adapter_seconds=adapter_meta["seconds"],
                                      provenance=provenance)  # fmt: skip
    run["seconds"]["backbone_train"] = adapter_meta["seconds"] if method in ADAPTED_METHODS else 0.0
    model = {"backbone": str(backbone_path), "adapter": str(adapter_path) if method in ADAPTED_METHODS else None}
    return methods.write_runs(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance)


def train_multiswag_member(
    prepared_path: str | Path,
    backbone_path: str | Path,
    adapter_path: str | Path,
    out_path: str | Path,
    *,
    component: int,
    lora: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    first_path: str | Path,
    require_skill: bool = True,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """One MultiSWAG-LoRA member 1..L-1 of one configuration -> ``out_path`` and its record, drawn at every
    candidate member 0 (the SWAG-LoRA run, its record ``first_path``) scored
    (:func:`stochattn.experiments.adapters.write_multiswag_member`); ``seed``: the multiswag run's."""
    data = load_windows(prepared_path)
    data["require_skill"] = bool(require_skill)
    adapter_meta = load_json(Path(adapter_path).with_suffix(".json"))
    ctx = setup(backbone_path, adapter_path, int(adapter_meta["horizon"]), lora, train)
    return adapters.write_multiswag_member(data, ctx, method_cfg, out_path, component=component, seed=seed,
                                           num_samples=num_samples, first_path=first_path, progress=progress,
                                           provenance=provenance)  # fmt: skip


def fit_candidate(
    method: str,
    prepared_path: str | Path,
    backbone_path: str | Path,
    adapter_path: str | Path,
    out_path: str | Path,
    *,
    index: int,
    lora: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    require_skill: bool = True,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Candidate ``index`` of ``method``'s validation grid -> ``out_path`` (its fitted state) and its record
    (:func:`stochattn.experiments.adapters.write_candidate`); ``seed``: the method run's. :func:`run_method` with
    ``candidates`` chooses among them."""
    data = load_windows(prepared_path)
    data["require_skill"] = bool(require_skill)
    adapter_meta = load_json(Path(adapter_path).with_suffix(".json"))
    ctx = setup(backbone_path, adapter_path, int(adapter_meta["horizon"]), lora, train)
    return adapters.write_candidate(method, data, ctx, method_cfg, out_path, index=index, num_samples=num_samples,
                                    seed=seed, progress=progress, provenance=provenance)  # fmt: skip
