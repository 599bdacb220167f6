"""The ERA5 experiment (paper §6.2, §7, App. C.2, App. "Additional ClimaX Results"): ClimaX + LoRA, 72 h global
Z500 forecasts (or another target and lead: ``prepare(target=..., lead_hours=...)``), six methods, one function per
workflow stage:

    prepare            ClimaX shards (stochattn.data.era5.preprocess_climax) -> normalised (input, 72 h Z500) pairs
                       of the train / val / cal / test parts, flattened to (n, V * 32 * 64) and (n, 32 * 64)
    pretrain_standin   the offline stand-in backbone: a reduced ClimaX pretrained with ClimaX's objective on a
                       SECOND stand-in climate (never the fine-tuning / test data)
    adapt              the LoRA adapter for 72 h Z500 (best validation epoch, the backbone competing as epoch 0)
                       and the test skill of the backbone, the adapter, persistence and climatology
    run_method         one method's S predictive samples (``samples.npz``, ``meta.json``) as for ETT and UCI
    spatial_metrics    the field scores of a run: latitude-weighted RMSE / ACC (ensemble mean, single samples),
                       CRPS decomposition, Energy Score over the field
    analyses           SA's operating-point analyses on the calibration part: score-oriented nu sweep (CRPS, ES),
                       BO over several seeds (surrogate posterior samples, beta* = ln nu*), per-pass latency vs nu,
                       and the SWAG variance-scale sweep on validation and test

Units: targets (Z500 unless configured otherwise) are normalised by the training years' mean / std (ClimaX's
normalisation); ``y_mean`` and ``y_std`` turn them back into the target's units (m^2 s^-2 for Z500, geopotential, ERA5's
``z``), the units of every run file and table.

The validation partition serves early stopping and the baselines' selection (``val``: its first half in time)
AND SA's nu, temperatures and conformal factors (``cal``: the rest, from one lead time after the cut; see
:func:`val_cal_split`), so no decision is fitted on the pairs that score it. The test partition is touched once.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import torch

from .. import metrics
from ..data import era5 as era5_data
from ..io import RECORD_KEY, load_json, load_model, load_npz, save_json, save_model, save_npz, verified
from ..provenance import device_info, package_versions, with_outputs
from ..training import model_device, predict, resolve_device, seeded
from . import adapters, methods
from .adapters import ADAPTED_METHODS, DERIVED_METHODS, METHODS, RUN_METHODS  # noqa: F401 (re-exported)

TARGET = "geopotential_500"  # Z500, the forecast field (stochattn.backbones.climax.Z500)
PARTS = ("train", "val", "cal", "test")
GRID = (era5_data.LAT.size, era5_data.LON.size)


# --------------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------------
def _evenly(n: int, cap: Optional[int]) -> np.ndarray:
    """Indices of at most ``cap`` of ``n`` items, evenly spaced (all for None)."""
    if cap is None or n <= cap:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, cap).round().astype(int))


def manifest(processed_dir: str | Path) -> Dict[str, Any]:
    """The manifest :func:`stochattn.data.era5.preprocess_climax` writes last (variables, years, step)."""
    path = Path(processed_dir) / "stochattn_preprocess.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no preprocessing manifest (run preprocess_climax first)")
    return load_json(path)


def _key_statistics(processed: Path, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The training years' mean and std of each of ``keys``, each (V, 1, 1) float32 (broadcast over fields)."""
    mean, std = era5_data.load_normalisation(processed)
    stat = lambda d: np.array([float(d[k][0]) for k in keys], np.float32)[:, None, None]  # noqa: E731
    return stat(mean), stat(std)


def read_pairs(processed_dir: str | Path, part: str, keys: Sequence[str], lead: int, cap: Optional[int] = None,
               progress: bool = False, target: str = TARGET) -> Dict[str, np.ndarray]:  # fmt: skip
    """At most ``cap`` (input at t, ``target`` (a shard key; Z500 by default) at t + ``lead`` steps) pairs of ``part``
    (evenly spaced in time; None: all), read shard by shard, so that a partition is never whole in memory (37 years of
    ClimaX's 48 variables are ~130 GB).

    Returns ``x`` (n, V, 32, 64) the inputs ``keys`` normalised with the training years' mean / std, ``y`` (n, 32,
    64) the target at t + lead in its units, ``shard`` / ``t`` (n,) the shard index and the input's time index in it,
    and ``step`` (n,) the input's time index in the partition (its shards concatenated in time order).
    """
    from ..progress import progress as show_progress

    processed = Path(processed_dir)
    m, s = _key_statistics(processed, keys)
    paths = era5_data.shard_paths(processed, part)
    lengths = [era5_data.load_shard(p, [target])[target].shape[0] for p in paths]  # one key per shard: cheap
    counts = [max(0, n - lead) for n in lengths]
    if sum(counts) == 0:
        raise ValueError(f"{processed / part}: no forecast pair at a lead of {lead} steps (the longest of its "
                         f"{len(paths)} shards has {max(lengths)} steps)")  # fmt: skip
    rows = _evenly(sum(counts), cap)
    first_row, first_step = np.cumsum([0, *counts]), np.cumsum([0, *lengths])
    out: Dict[str, list] = {k: [] for k in ("x", "y", "shard", "t", "step")}
    for i, path in enumerate(show_progress(paths, desc=f"pairs {part}", disable=not progress)):
        local = rows[(rows >= first_row[i]) & (rows < first_row[i + 1])] - first_row[i]
        if local.size == 0:
            continue
        pairs = era5_data.forecast_pairs([era5_data.load_shard(path, keys)], lead, in_variables=keys,
                                         out_variables=[target])  # fmt: skip
        out["x"].append((pairs.x[local] - m) / s)
        out["y"].append(pairs.y[local, 0])
        out["shard"].append(np.full(local.size, i, dtype=np.int64))
        out["t"].append(pairs.t[local])
        out["step"].append(first_step[i] + pairs.t[local])
    return {k: np.concatenate(v) for k, v in out.items()}


def val_cal_split(step: np.ndarray, lead: int) -> Dict[str, np.ndarray]:
    """Rows of the validation pairs (input time steps ``step``, ascending) for ``val``, the first half in time, and
    ``cal``, the rest less the pairs that start within ``lead`` steps of the cut: no field is in both parts.

    NOTE[DIFF]: the paper names a held-out split only. Two blocks a lead time apart keep the pairs that fit nu, the
    temperatures and the conformal factors (cal) apart from those that chose epochs and hyper-parameters (val);
    alternate pairs a few hours apart would share most of their weather.
    """
    step = np.asarray(step)
    if step.size and np.any(np.diff(step) <= 0):
        raise ValueError("step must be strictly increasing")
    cut = step[step.size // 2] if step.size else 0
    parts = {"val": np.flatnonzero(step < cut), "cal": np.flatnonzero(step >= cut + lead)}
    if min(len(r) for r in parts.values()) == 0:
        raise ValueError(f"{step.size} validation pairs cannot give val and cal blocks {lead} steps apart: use "
                         f"more validation days (or a larger max_pairs.val)")  # fmt: skip
    return parts


def prepare(
    processed_dir: str | Path,
    out_path: str | Path,
    *,
    variables: Sequence[str],
    lead_hours: int,
    max_pairs: Mapping[str, Optional[int]],
    target: str = "z500",
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """(input at t, target at t + lead) pairs -> ``out_path`` (npz) and ``<stem>.json`` (with ``provenance``, a
    :func:`stochattn.provenance.stage_provenance` block, and the npz's hash).

    ``variables``: the input keys (ClimaX's shard keys, the target among them); ``target``: a name of
    :func:`stochattn.data.era5.resolve_target` (``z500``, the paper's; ``t850``, ``t2m``, ...); ``max_pairs``: per
    partition (train, val, test) a cap on the pairs (evenly spaced in time; None: every pair). The validation pairs are
    split into ``val`` and ``cal`` blocks (:func:`val_cal_split`). Arrays: ``x_<part>`` (n, V * 32 * 64) float32
    normalised inputs, ``y_<part>`` (n, 32 * 64) the normalised target at t + lead, ``<part>_shard`` / ``<part>_t``
    (shard index, input time index), ``y_mean`` / ``y_std`` (the target's normalisation), ``lat`` (32,), ``lon`` (64,),
    ``climatology`` (32 * 64,) the test partition's target time mean in its units (ClimaX's ACC reference),
    ``climatology_train`` (32 * 64,) the training years' (the climatology forecast), ``persistence_test``
    (n_test, 32 * 64) the target at t.
    """
    processed = Path(processed_dir)
    info = manifest(processed)
    keys = list(variables)
    spec = era5_data.resolve_target(target, keys)  # ValueError naming the allowed targets
    field = spec.variable
    lead = era5_data.lead_steps(lead_hours, info["step_hours"])
    mean, std = era5_data.load_normalisation(processed)
    y_mean, y_std = float(mean[field][0]), float(std[field][0])
    arrays: Dict[str, Any] = {"y_mean": np.float64(y_mean), "y_std": np.float64(y_std), "lat": era5_data.LAT,
                              "lon": era5_data.LON}  # fmt: skip
    counts = {}
    for part in ("train", "val", "test"):
        pairs = read_pairs(processed, part, keys, lead, max_pairs.get(part), progress, field)
        n = len(pairs["y"])
        y = (pairs["y"] - y_mean) / y_std
        split = {part: np.arange(n)} if part != "val" else val_cal_split(pairs["step"], lead)
        for name, r in split.items():
            arrays[f"x_{name}"] = pairs["x"][r].reshape(len(r), -1).astype(np.float32)
            arrays[f"y_{name}"] = y[r].reshape(len(r), -1).astype(np.float32)
            arrays[f"{name}_shard"], arrays[f"{name}_t"] = pairs["shard"][r], pairs["t"][r]
            counts[name] = int(len(r))
        if part == "test":
            z_index = keys.index(field)
            arrays["persistence_test"] = (pairs["x"][:, z_index] * y_std + y_mean).reshape(n, -1)
    for name, part in (("climatology", "test"), ("climatology_train", "train")):
        arrays[name] = era5_data.load_climatology(processed, part)[field].reshape(-1).astype(np.float64)
    save_npz(out_path, **arrays)
    meta = {
        "variables": keys, "target": field, "target_name": spec.name, "target_label": spec.label,
        "target_units": spec.units, "lead_hours": lead_hours, "lead_steps": lead,
        "step_hours": info["step_hours"], "years": info["years"], "n_pairs": counts, "max_pairs": dict(max_pairs),
        "val_cal": "val: the first half of the validation pairs in time; cal: the rest, from one lead time after",
        "units": "inputs and targets normalised by the training years' mean / std (ClimaX); y_mean / y_std give "
                 f"{spec.units}",
        "source": str(processed),
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_pairs(path: str | Path) -> Dict[str, Any]:
    """The arrays of :func:`prepare` (``x_train`` ... ``y_test``, ``y_mean``, ``y_std``, ``lat``, ...)."""
    data = load_npz(path)
    data["source"] = str(path)
    return data


# --------------------------------------------------------------------------------------------------------------
# backbone: the offline stand-in, or the official checkpoint
# --------------------------------------------------------------------------------------------------------------
def build_standin(model_cfg: Mapping[str, Any], variables: Sequence[str], seed: Optional[int] = 0):
    """A reduced ClimaX over ``variables`` (``model_cfg``: patch_size, embed_dim, depth, num_heads, decoder_depth,
    mlp_ratio, drop_path, drop_rate)."""
    from ..backbones.climax import build_climax

    keys = ("patch_size", "embed_dim", "depth", "num_heads", "decoder_depth", "mlp_ratio", "drop_path", "drop_rate")
    return build_climax(tuple(variables), seed=seed, **{k: model_cfg[k] for k in keys if k in model_cfg})


def _lat_weighted_mse(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """ClimaX's training loss: mean over batch, variables and cells of w_lat (pred - target)^2; pred, target (B, V,
    H, W), weights (H, 1)."""
    return torch.mean(weights * (pred - target) ** 2)


def pretrain_standin(
    processed_dir: str | Path,
    out_path: str | Path,
    *,
    model: Mapping[str, Any],
    pretrain: Mapping[str, Any],
    seed: int,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Pretrain a reduced ClimaX on the preprocessed stand-in climate at ``processed_dir`` (all its variables).

    ClimaX's pretraining objective: for a random input time and a random lead time from ``pretrain["lead_hours"]``
    (a list, in hours; ClimaX draws 6 to 162 h), predict every variable at t + lead from every variable at t, loss
    the latitude-weighted MSE (normalised units). AdamW (betas 0.9 / 0.95, ClimaX's), linear warm-up then cosine
    decay over ``pretrain["steps"]`` steps of ``batch_size``. Every ``eval_every`` steps the 72 h Z500
    latitude-weighted RMSE on the climate's validation years is measured; the best state is kept. Writes
    ``out_path`` ({"model": config with variables, "state_dict"}) and ``<stem>.json``.
    """
    from ..backbones.climax import LEAD_TIME_DIVISOR_HOURS, ClimaXForecaster
    from ..progress import progress as show_progress

    processed = Path(processed_dir)
    info = manifest(processed)
    keys = list(info["keys"])
    step_hours = int(info["step_hours"])
    m, s = _key_statistics(processed, keys)
    shards = [np.concatenate([sh[k] for k in keys], axis=1) for sh in era5_data.load_shards(processed, "train", keys)]
    shards = [torch.from_numpy((a - m) / s) for a in shards]  # (T, V, 32, 64) each
    leads = [era5_data.lead_steps(h, step_hours) for h in pretrain["lead_hours"]]
    val_lead = era5_data.lead_steps(int(pretrain.get("val_lead_hours", 72)), step_hours)
    val = read_pairs(processed, "val", keys, val_lead, pretrain.get("val_pairs", 64))
    x_val, y_val = torch.from_numpy(val["x"]), val["y"]  # y in m^2 s^-2
    z = keys.index(TARGET)
    device = resolve_device(None)
    net = build_standin(model, keys, seed).to(device)
    weights = torch.as_tensor(metrics.latitude_weights(era5_data.LAT), dtype=torch.float32, device=device)[:, None]
    steps, batch, warmup = int(pretrain["steps"]), int(pretrain["batch_size"]), int(pretrain["warmup"])
    opt = torch.optim.AdamW(net.parameters(), lr=float(pretrain["lr"]), betas=(0.9, 0.95),
                            weight_decay=float(pretrain.get("weight_decay", 1e-5)))  # fmt: skip
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda i: (
            (i + 1) / warmup if i < warmup else 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, steps - warmup)))
        ),
    )
    gen = np.random.default_rng(seed)
    choices = [(i, L) for i, a in enumerate(shards) for L in leads if a.shape[0] > L]
    if not choices:
        raise ValueError(f"no shard of {processed} is longer than the lead times {pretrain['lead_hours']} h")

    forecaster = ClimaXForecaster(net, keys, TARGET, val_lead * step_hours)

    def val_rmse() -> float:
        pred = predict(forecaster, x_val.flatten(1), 32).numpy().reshape(-1, *GRID)
        return metrics.lat_weighted_rmse(pred * s[z] + m[z], y_val, era5_data.LAT)

    history, best, best_state, best_step = [], math.inf, None, 0
    t0 = time.perf_counter()
    with seeded(seed):
        net.train()
        for step in (bar := show_progress(range(steps), desc="ClimaX stand-in pretraining", disable=not progress)):
            picks = [choices[j] for j in gen.integers(len(choices), size=batch)]
            xb, yb, lt = [], [], []
            for i, L in picks:
                t = int(gen.integers(shards[i].shape[0] - L))
                xb.append(shards[i][t])
                yb.append(shards[i][t + L])
                lt.append(L * step_hours / LEAD_TIME_DIVISOR_HOURS)
            xb, yb = torch.stack(xb).to(device), torch.stack(yb).to(device)
            pred = net(xb, torch.tensor(lt, device=device), keys)
            loss = _lat_weighted_mse(pred, yb, weights)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            schedule.step()
            if (step + 1) % int(pretrain["eval_every"]) == 0 or step + 1 == steps:
                net.eval()
                rmse = val_rmse()
                net.train()
                history.append({"step": step + 1, "loss": loss.item(), "val_z500_rmse": rmse})
                bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{rmse:.0f}")
                if rmse < best:
                    best, best_step = rmse, step + 1
                    best_state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    net.load_state_dict(best_state)
    seconds = time.perf_counter() - t0
    recorded = save_model(out_path, {"model": dict(model, variables=keys),
                                     "state_dict": {k: v.cpu() for k, v in net.state_dict().items()}})  # fmt: skip
    meta = {
        "model": dict(model), "pretrain": dict(pretrain), "variables": keys, "seed": seed, "best_step": best_step,
        "best_val_z500_rmse_72h": best, "history": history, "seconds": seconds,
        "parameters": int(sum(p.numel() for p in net.parameters())), "source": info, "device": device_info(),
        "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_backbone(path: str | Path, *, allow_pickle: bool = False):
    """The ClimaX of ``path``: a stand-in of :func:`pretrain_standin` (``.pt``) or the official checkpoint (e.g.
    ``5.625deg.ckpt``, loaded strictly into ``ClimaX()``; ``allow_pickle`` see
    :func:`stochattn.backbones.climax.load_climax_checkpoint`)."""
    from ..backbones.climax import ClimaX, load_climax_checkpoint

    path = Path(path)
    if path.suffix == ".pt":
        ckpt = load_model(path)  # checked against the SHA-256 in <stem>.json
        cfg = dict(ckpt["model"])
        net = build_standin(cfg, cfg.pop("variables"), seed=None)
        net.load_state_dict(ckpt["state_dict"])
        return net.eval()
    net = ClimaX()
    load_climax_checkpoint(net, path, allow_pickle=allow_pickle)
    return net.eval()


# --------------------------------------------------------------------------------------------------------------
# adaptation (LoRA) and the methods
# --------------------------------------------------------------------------------------------------------------
def lora_forecaster(backbone_path: str | Path, variables: Sequence[str], lead_hours: float, lora: Mapping[str, Any],
                    seed: int, allow_pickle: bool = False, target: str = TARGET) -> torch.nn.Module:  # fmt: skip
    """The backbone with fresh LoRA adapters (B = 0: it starts as the backbone), wrapped as ``x (B, V * 32 * 64) ->
    target (a ClimaX key; Z500 by default) at lead (B, 32 * 64)``; only the adapters are trainable.

    NOTE[DIFF]: the paper also trains the norms (L1187); here only the adapters are trainable, so the weight-space
    baselines (SWAG, IVON) act on exactly the LoRA parameters, as in the ETT slice."""
    from ..backbones.climax import ClimaXForecaster
    from ..lora import add_lora

    net = load_backbone(backbone_path, allow_pickle=allow_pickle)
    with seeded(seed):
        add_lora(net, tuple(lora["targets"]), r=int(lora["r"]), alpha=float(lora["alpha"]))
    return ClimaXForecaster(net, variables, target, lead_hours).to(resolve_device(None)).eval()


def _fields(flat: np.ndarray) -> np.ndarray:
    """(..., 32 * 64) -> (..., 32, 64)."""
    return np.asarray(flat, dtype=np.float64).reshape(*np.shape(flat)[:-1], *GRID)


def field_skill(pred: np.ndarray, truth: np.ndarray, data: Mapping[str, Any]) -> Dict[str, float]:
    """Latitude-weighted RMSE and ACC (per field, averaged; climatology = the test partition's time mean) of
    forecasts ``pred`` against ``truth``, both (n, 32 * 64) in m^2 s^-2."""
    p, t = _fields(pred), _fields(truth)
    clim = _fields(data["climatology"])
    return {"rmse": metrics.lat_weighted_rmse(p, t, data["lat"]),
            "acc": metrics.lat_weighted_acc(p, t, clim, data["lat"])}  # fmt: skip


def adapt(
    prepared_path: str | Path,
    backbone_path: str | Path,
    out_path: str | Path,
    *,
    lora: Mapping[str, Any],
    train: Mapping[str, Any],
    seed: int,
    allow_pickle: bool = False,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
    checkpoint: Optional[str | Path] = None,
) -> Dict[str, Any]:
    """Fit the LoRA adapter for the prepared target and lead (72 h Z500 in the paper; AdamW, MSE in normalised units,
    early stopping on the val pairs; best epoch kept, the backbone competing as epoch 0) -> ``out_path`` and
    ``<stem>.json``, with the test skill (latitude-weighted RMSE, ACC) of the backbone, the adapted model, persistence
    and climatology, which decides nothing. ``checkpoint``: a file that makes the training resumable
    (:func:`stochattn.training.fit_regressor`).

    NOTE[DIFF]: plain MSE over the grid cells (ClimaX fine-tunes with latitude-weighted MSE): every method's
    adapter is trained by the same shared training code. AdamW at a constant learning rate (the paper: warm-up and
    cosine decay; the quick configuration runs few epochs).
    """
    data = load_pairs(prepared_path)
    meta_prepared = load_json(Path(prepared_path).with_suffix(".json"))
    variables, lead_hours = meta_prepared["variables"], meta_prepared["lead_hours"]
    target = meta_prepared.get("target", TARGET)
    net = lora_forecaster(backbone_path, variables, lead_hours, lora, seed, allow_pickle, target)
    record = adapters.fit_adapter(net, data, train, seed=seed, progress=progress,
                                  desc=f"LoRA ClimaX {lead_hours:g} h {meta_prepared.get('target_label', 'Z500')}",
                                  checkpoint=checkpoint)  # fmt: skip
    recorded = adapters.save_adapter(net, out_path, lora=dict(lora), variables=list(variables),
                                     lead_hours=lead_hours, target=target)  # fmt: skip
    physical = lambda a: np.asarray(a, np.float64) * data["y_std"] + data["y_mean"]  # noqa: E731
    truth = physical(data["y_test"])
    backbone = lora_forecaster(backbone_path, variables, lead_hours, lora, seed, allow_pickle, target)  # B = 0
    forecasts = {
        "backbone": physical(predict(backbone, data["x_test"], 64).numpy()),
        "adapted": physical(predict(net, data["x_test"], 64).numpy()),
        "persistence": data["persistence_test"],
        "climatology": np.broadcast_to(data["climatology_train"], truth.shape),
    }
    skill = {name: field_skill(f, truth, data) for name, f in forecasts.items()}
    meta = {
        "lora": dict(lora), "train": dict(train), "seed": seed, "variables": list(variables),
        "lead_hours": lead_hours, "target": target, **record, "test_skill": skill, "n_test": int(len(truth)),
        "persistence_over_climatology_rmse": skill["persistence"]["rmse"] / skill["climatology"]["rmse"],
        "device": device_info(), "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = with_outputs(provenance, out_path)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def _add_hsa(net: torch.nn.Module, c: Mapping[str, Any], seed: int) -> None:
    from ..baselines.hsa_climax import add_hsa_to_climax

    add_hsa_to_climax(net, n_centroids=int(c["n_centroids"]), tau1=c["tau1"], tau2=c["tau2"], seed=seed)


def _dropout_sites(net: torch.nn.Module) -> list:
    """Contextual Dropout sites of a ClimaX forecaster: the inputs of every block's attention output projection
    (the attention output) and second MLP linear (the MLP hidden layer)."""
    return [n for n, _ in net.named_modules() if n.endswith((".attn.proj", ".mlp.fc2"))]


def setup(backbone_path: str | Path, adapter_path: str | Path, lora: Mapping[str, Any], train: Mapping[str, Any], *,
          sa_sites: Sequence[str] = ("blocks", "var_agg"),
          allow_pickle: bool = False) -> adapters.AdapterSetup:  # fmt: skip
    """The :class:`~stochattn.experiments.adapters.AdapterSetup` of the ClimaX task; SA draws at ``sa_sites``
    ("blocks": the ViT blocks' attention, "var_agg": the variable aggregation)."""
    from ..backbones.climax import climax_sa_nu

    ckpt = adapters.adapter_checkpoint(adapter_path)
    sites = tuple(sa_sites)
    climax_sa_nu(1, sites)  # unknown site names fail here
    return adapters.AdapterSetup(
        fresh=lambda s: lora_forecaster(backbone_path, ckpt["variables"], ckpt["lead_hours"], lora, s, allow_pickle,
                                        ckpt.get("target", TARGET)),
        add_hsa=_add_hsa, dropout_sites=_dropout_sites, train=train, adapter_path=adapter_path,
        nu_template=lambda nu: climax_sa_nu(nu, sites),
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
    sa_sites: Sequence[str] = ("blocks", "var_agg"),
    swag_scales: Sequence[float] = (),
    allow_pickle: bool = False,
    require_skill: bool = True,
    members: Optional[Sequence[str | Path]] = None,
    swag_member: Optional[str | Path] = None,
    multiswag_components: Optional[int] = None,
    candidates: Optional[Sequence[str | Path]] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """One method: ``samples.npz`` (y (n, 2048), point, samples (S, n, 2048) and the cal part, m^2 s^-2) and
    ``meta.json`` in ``out_dir`` (SA: also ``sa_match`` and ``calibration.json``; SWAG with ``swag_scales``: also
    ``scale_sweep.json``, :func:`swag_scale_sweep`). ``require_skill=False`` lets the baselines' selection keep
    a candidate that does not beat the training climatology (smoke runs; recorded in meta.json). MultiSWAG pools
    ``members`` (SWAG's member 0, then :func:`train_multiswag_member`'s files) when given, else runs them here. SWAG
    with ``swag_member``: also its posterior, as MultiSWAG-LoRA's member 0 (:func:`adapters.write_swag_as_member`),
    with member 0's share of the samples of a MultiSWAG of ``multiswag_components`` (L) at every candidate.
    ``candidates``: the method's grid fitted one candidate per job (:func:`fit_candidate`'s files, in grid order): only
    the choice and the sampling run here."""
    adapters.check_method(method, num_samples, swag_member, multiswag_components)
    data = load_pairs(prepared_path)
    data["require_skill"] = bool(require_skill)
    adapter_meta = load_json(Path(adapter_path).with_suffix(".json"))
    ctx = setup(backbone_path, adapter_path, lora, train, sa_sites=sa_sites, allow_pickle=allow_pickle)
    ctx.extra["adapter_seconds"] = adapter_meta["seconds"]  # MultiSWAG's member 0 (the SWAG run) trained it
    if members:
        ctx.extra["multiswag_members"] = [str(m) for m in members]
    if method == "swag" and swag_scales:  # the sweep samples the very SWAG posterior of the run

        def sweep(member, swag, candidate):
            t0 = time.perf_counter()
            record = swag_scale_sweep(data, member, swag, swag_scales, num_samples, seed)
            record["seconds"] = time.perf_counter() - t0
            if provenance is not None:
                record["provenance"] = dict(provenance)
            save_json(Path(out_dir) / "scale_sweep.json", record)

        ctx.extra["on_swag_fitted"] = sweep
    if swag_member is not None:
        adapters.keep_member_draws(ctx, data, num_samples, seed, multiswag_components)
    run = adapters.method_run(method, data, ctx, method_cfg, num_samples, seed, progress, candidates)
    if swag_member is not None:
        adapters.write_swag_as_member(swag_member, ctx, run, seed=seed, adapter_seconds=adapter_meta["seconds"],
                                      provenance=provenance)  # fmt: skip
    run["seconds"]["backbone_train"] = adapter_meta["seconds"] if method in ADAPTED_METHODS else 0.0
    if method == "sa":
        run["extra"]["sa_sites"] = list(sa_sites)
    model = {"backbone": str(backbone_path), "adapter": str(adapter_path) if method in ADAPTED_METHODS else None}
    return methods.write_runs(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance)


# --------------------------------------------------------------------------------------------------------------
# field scores of a run
# --------------------------------------------------------------------------------------------------------------
def spatial_metrics(samples_path: str | Path, prepared_path: str | Path, temperature: float = 1.0) -> Dict[str, Any]:
    """Field scores of one run (m^2 s^-2), native and with ``temperature`` (the run's, from metrics.json):

    * ``rmse_*`` / ``acc_*``: latitude-weighted RMSE and ACC (per field, averaged over forecasts) of the run's
      point prediction (``point``: SA's deterministic forecast, SWAG's SWA mean, ...), of the ensemble mean
      (``ensemble_mean``) and of single samples (``single_sample``: the mean over members of each member's score).
    * ``crps``, ``crps_error`` = E|X - y|, ``crps_spread`` = 0.5 E|X - X'| (marginal, every cell and forecast
      weighted equally; native, as the paper's Table climax_crps_decomp; the ensemble estimator, all S^2 pairs).
      ``crps_fair`` (beyond the paper): the fair estimator, ``crps_error - crps_spread * S / (S - 1)`` per entry.
    * ``energy``: the Energy Score over the 32 x 64 field divided by sqrt(2048) (NOTE[DIFF]: the paper states no
      normalisation; its values imply this one), native; ``energy_scaled`` / ``crps_scaled`` after temperature.
    """
    from .. import scaling

    run, data = load_npz(verified(samples_path)), load_pairs(prepared_path)  # samples: checked against meta.json
    y, point, samples = run["y"], run["point"], run["samples"]
    out: Dict[str, Any] = {}
    for name, pred in (("point", point), ("ensemble_mean", samples.mean(0))):
        for k, v in field_skill(pred, y, data).items():
            out[f"{k}_{name}"] = v
    single = [field_skill(s, y, data) for s in samples]
    out["rmse_single_sample"] = float(np.mean([s["rmse"] for s in single]))
    out["acc_single_sample"] = float(np.mean([s["acc"] for s in single]))
    dec = metrics.crps_decomposition(samples, y)
    s = samples.shape[0]
    out.update({"crps": float(dec["crps"].mean()), "crps_error": float(dec["error"].mean()),
                "crps_spread": float(dec["spread"].mean()),
                "crps_fair": float((dec["error"] - dec["spread"] * s / (s - 1)).mean())})  # fmt: skip
    out["energy"] = float(metrics.normalised_energy_score(samples, y).mean())
    scaled = scaling.apply_scale(samples, point, temperature)
    out["crps_scaled"] = float(metrics.crps(scaled, y).mean())
    out["energy_scaled"] = float(metrics.normalised_energy_score(scaled, y).mean())
    out["temperature"] = float(temperature)
    out["energy_normalisation"] = "1/sqrt(d), d = 2048 cells, unweighted"
    return out


def evaluate_spatial(samples_paths: Mapping[str, str | Path], metrics_paths: Mapping[str, str | Path],
                     prepared_path: str | Path, out_paths: Mapping[str, str | Path],
                     provenance: Optional[Callable[[list], Mapping[str, Any]]] = None,
                     ) -> Dict[str, Dict[str, Any]]:  # fmt: skip
    """:func:`spatial_metrics` of every run (temperature from its metrics.json) -> ``out_paths[method]``.
    ``provenance``: input files -> the :func:`stochattn.provenance.stage_provenance` block of a spatial.json (its
    inputs: the run's samples and metrics.json and the pairs)."""
    out = {}
    for method, path in samples_paths.items():
        temperature = float(load_json(metrics_paths[method])["temperature"])
        out[method] = spatial_metrics(path, prepared_path, temperature)
        record = dict(out[method], method=method)
        if provenance is not None:
            record["provenance"] = dict(provenance([path, metrics_paths[method], prepared_path]))
        save_json(out_paths[method], record)
    return out


# --------------------------------------------------------------------------------------------------------------
# operating-point analyses
# --------------------------------------------------------------------------------------------------------------
def _calibration_summary(run_y: np.ndarray, samples: np.ndarray, point: np.ndarray, seed: int) -> Dict[str, float]:
    """PIT W1, PI-95 coverage and mean width of samples (S, n, d) against y (n, d), pooled over cells."""
    flat_s, flat_y = samples.reshape(samples.shape[0], -1), run_y.reshape(-1)
    pit = metrics.pit(flat_s, flat_y, seed)
    cw = metrics.coverage_and_width(flat_s, flat_y, (0.95,))[0.95]
    return {"w1": metrics.w1_uniform(pit), "coverage_95": cw["coverage"], "width_95": cw["width"]}


def swag_scale_sweep(data: Mapping[str, Any], member, swag, scales: Sequence[float], num_samples: int,
                     seed: int) -> Dict[str, Any]:  # fmt: skip
    """SWAG's variance-scale sweep (App. "SWAG Variance-Scale Sweep"): the fitted SWAG posterior sampled with its
    covariance multiplied by each scale, scored on the val pairs (RMSE of the sample mean, PIT W1, PI-95 coverage
    and width, m^2 s^-2) and on the test pairs. Two test operating points are marked: the scale with the lowest
    validation W1 (``selected_w1``) and the one with the lowest validation RMSE (``selected_rmse``)."""
    from ..baselines.swag import swag_samples

    physical = lambda a: np.asarray(a, np.float64) * data["y_std"] + data["y_mean"]  # noqa: E731
    from ..progress import progress as show_progress

    rows = []
    for scale in show_progress(list(scales), desc="SWAG variance scales"):
        row: Dict[str, Any] = {"scale": float(scale)}
        for part in ("val", "test"):
            draws = physical(torch.as_tensor(swag_samples(member, swag, data[f"x_{part}"], num_samples, seed,
                                                          scale=float(scale))).numpy())  # fmt: skip
            y = physical(data[f"y_{part}"])
            mean = draws.mean(0)
            row[part] = {"rmse": metrics.lat_weighted_rmse(_fields(mean), _fields(y), data["lat"]),
                         **_calibration_summary(y, draws, mean, seed)}  # fmt: skip
        rows.append(row)
    best_w1 = min(rows, key=lambda r: r["val"]["w1"])["scale"]
    best_rmse = min(rows, key=lambda r: r["val"]["rmse"])["scale"]
    return {"rows": rows, "selected_w1": best_w1, "selected_rmse": best_rmse, "num_samples": num_samples}


def _latency(sampler, x: torch.Tensor, nu: Optional[int], repeats: int) -> float:
    """Median seconds of one forward pass over ``x`` through ``sampler`` at ``nu`` (None: the patched model at
    nu=None, which runs the original attention): the same call path for both, the GPU synchronised around each."""
    cuda = model_device(sampler.model).type == "cuda"
    times = []
    for _ in range(repeats + 1):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        sampler(nu, x, 1)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))  # the first pass warms up


def _analyses_model(prepared_path, backbone_path, adapter_path, lora, sa_sites, allow_pickle):
    """What every SA analysis reads: the pairs, the adapted model, its nu template, the cal tensors and point."""
    data = load_pairs(prepared_path)
    ctx = setup(backbone_path, adapter_path, lora, {}, sa_sites=sa_sites, allow_pickle=allow_pickle)
    net = ctx.adapted()
    x_cal, y_cal = (torch.as_tensor(data[k], dtype=torch.float32) for k in ("x_cal", "y_cal"))
    return data, ctx, net, x_cal, y_cal, predict(net, x_cal, 64)


def _score_sweep(sampler, data, x_cal, calib, nu_grid, num_samples, seed, progress) -> Dict[str, Any]:
    """The score-oriented nu sweep on cal and the two test operating points (:func:`sa_analyses`)."""
    from ..progress import progress as show_progress

    physical = lambda a: np.asarray(a, np.float64) * data["y_std"] + data["y_mean"]  # noqa: E731
    y_cal_phys, y_test_phys = physical(data["y_cal"]), physical(data["y_test"])
    rows = []
    for nu in show_progress(list(nu_grid), desc="nu sweep", disable=not progress):
        draws = physical(sampler(int(nu), x_cal, num_samples).numpy())
        rows.append({"nu": int(nu), "crps": float(metrics.crps(draws, y_cal_phys).mean()),
                     "energy": float(metrics.normalised_energy_score(draws, y_cal_phys).mean()),
                     **_calibration_summary(y_cal_phys, draws, draws.mean(0), seed)})  # fmt: skip
    nu_score = min(rows, key=lambda r: r["crps"])["nu"]
    nu_energy = min(rows, key=lambda r: r["energy"])["nu"]  # the paper: both scores minimised at one nu
    points = {"calibration_first": int(calib["nu_loss_argmin"]), "score_oriented": int(nu_score)}
    test = {}
    x_test = torch.as_tensor(data["x_test"], dtype=torch.float32)
    for name, nu in points.items():
        draws = physical(sampler(nu, x_test, num_samples).numpy())
        flat = draws.reshape(num_samples, -1)
        dec = metrics.crps_decomposition(draws, y_test_phys)
        test[name] = {"nu": nu, "pit": metrics.pit(flat, y_test_phys.reshape(-1), seed).tolist(),
                      "crps": float(dec["crps"].mean()), "crps_error": float(dec["error"].mean()),
                      "crps_spread": float(dec["spread"].mean()),
                      "crps_fair": float((dec["error"] - dec["spread"] * num_samples / (num_samples - 1)).mean()),
                      "energy": float(metrics.normalised_energy_score(draws, y_test_phys).mean()),
                      **_calibration_summary(y_test_phys, draws, draws.mean(0), seed)}  # fmt: skip
    return {"grid": rows, "nu_score": int(nu_score), "nu_energy": int(nu_energy), "test": test}


def _bo_run(sampler, x_cal, y_cal, point_cal, sa_cfg, nu_range, bo_seed) -> Dict[str, Any]:
    """One BO calibration (Algorithms 2-3, the ``sa`` run's settings) on ``nu_range`` under ``bo_seed``: its batches
    and SA noise from its own stream (``torch.Generator`` seeded ``bo_seed``), so it does not depend on what the
    sampler drew before."""
    from ..calibrate import IntegerDomain, bo_calibrate, eval_stats, target_scale

    s0 = target_scale(y_cal, point_cal)
    g = torch.Generator().manual_seed(int(bo_seed))
    sampler.patch.set_generator(g)
    evaluate = lambda nu: eval_stats(  # noqa: E731
        nu, sampler, x_cal, y_cal, point_cal, batch_size=sa_cfg["batch_size"], num_batches=sa_cfg["num_batches"],
        num_passes=sa_cfg["num_passes"], generator=g,
    )
    res = bo_calibrate(evaluate, s0, domain=IntegerDomain(int(nu_range[0]), int(nu_range[1])), budget=sa_cfg["budget"],
                       initial_design=sa_cfg["initial_design"], design=sa_cfg.get("design", "scale_match"),
                       seed=int(bo_seed), progress=False).to_dict()  # fmt: skip
    res["posterior_draws"] = {k: list(v[:200]) for k, v in res["posterior_draws"].items()}
    return res


def bo_ranges(sa_cfg: Mapping[str, Any], second_range: Optional[Sequence[int]]) -> Dict[str, tuple]:
    """``{"bo_seeds": the sa run's nu range, "bo_second_range": second_range}`` (the latter when given)."""
    ranges = {"bo_seeds": (int(sa_cfg["nu_min"]), int(sa_cfg["nu_max"]))}
    if second_range is not None:
        ranges["bo_second_range"] = (int(second_range[0]), int(second_range[1]))
    return ranges


def _latency_record(sampler, x_cal, latency_nu, latency_batch, latency_repeats, progress) -> Dict[str, Any]:
    from ..progress import progress as show_progress

    xb = x_cal[:latency_batch]
    det = _latency(sampler, xb, None, latency_repeats)
    timed = show_progress(list(latency_nu), desc="latency vs nu", disable=not progress)
    return {"batch": int(len(xb)), "deterministic": det, "device": device_info(), "threads": torch.get_num_threads(),
            "sa": [{"nu": int(nu), "seconds": _latency(sampler, xb, int(nu), latency_repeats)} for nu in timed]}


def _save_analyses(out_path, out, provenance, device=None, packages=None) -> Dict[str, Any]:
    out["device"], out["packages"] = device or device_info(), packages or package_versions()
    if provenance is not None:
        out["provenance"] = dict(provenance)
    save_json(out_path, out)
    return out


def sa_analyses(
    prepared_path: str | Path,
    backbone_path: str | Path,
    adapter_path: str | Path,
    calibration_path: str | Path,
    out_path: str | Path,
    *,
    lora: Mapping[str, Any],
    sa_cfg: Mapping[str, Any],
    nu_grid: Sequence[int],
    bo_seeds: Sequence[int],
    latency_nu: Sequence[int],
    latency_batch: int,
    latency_repeats: int,
    num_samples: int,
    seed: int,
    sa_sites: Sequence[str] = ("blocks", "var_agg"),
    second_range: Optional[Sequence[int]] = None,
    allow_pickle: bool = False,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """SA's operating-point analyses on the adapted model -> ``out_path`` (json):

    * ``score_sweep``: per nu of ``nu_grid``, mean CRPS and Energy Score (1/sqrt(d)) of ``num_samples`` SA samples on
      the cal pairs; the score-oriented nu (arg-min of CRPS), and the test PIT / W1 / CRPS / ES at it and at the
      calibration-first nu of ``calibration_path`` (Fig. nu_ablation).
    * ``bo_seeds``: the BO routine (Algorithms 2-3, the ``sa`` run's settings) rerun with each seed: both operating
      points, the evaluated (nu, loss) pairs, and 200 draws of the final posterior (a, ln b, eps^2, nu_cont) for the
      surrogate curves and the beta* = ln nu* histogram (Figs. bo_sensitivity, bo_beta_hist); with
      ``second_range`` (low, high), ``bo_second_range``: the same seeds on that search range (App. "BO
      sensitivity": "stable under a different search range").
    * ``latency``: median per-pass seconds (batch ``latency_batch``) of the deterministic model and of SA at each
      nu of ``latency_nu`` on this job's device (Fig. latency_appendix).

    The workflow writes the same file from one job per BO seed and range (:func:`sa_analyses_bo`), one for the
    sweep and latency (:func:`sa_analyses_sweep`) and :func:`gather_analyses`.
    """
    from ..calibrate import SASampler
    from ..progress import progress as show_progress

    data, ctx, net, x_cal, y_cal, point_cal = _analyses_model(prepared_path, backbone_path, adapter_path, lora,
                                                              sa_sites, allow_pickle)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    out: Dict[str, Any] = {"sa_sites": list(sa_sites), "num_samples": num_samples}
    with SASampler(net, generator=gen, max_rows=sa_cfg.get("max_rows", "auto"), nu_template=ctx.nu_template) as sampler:
        out["score_sweep"] = _score_sweep(sampler, data, x_cal, load_json(verified(calibration_path)), nu_grid,
                                          num_samples, seed, progress)  # fmt: skip
        # BO over several seeds, on the sa run's search range and (App. "BO sensitivity") on a second one
        for key, nu_range in bo_ranges(sa_cfg, second_range).items():
            seeds = show_progress(list(bo_seeds), desc=f"BO seeds {list(nu_range)}", disable=not progress)
            out[key] = [_bo_run(sampler, x_cal, y_cal, point_cal, sa_cfg, nu_range, s) for s in seeds]
        out["latency"] = _latency_record(sampler, x_cal, latency_nu, latency_batch, latency_repeats, progress)
    return _save_analyses(out_path, out, provenance)


def sa_analyses_sweep(prepared_path, backbone_path, adapter_path, calibration_path, out_path, *, lora, sa_cfg,
                      nu_grid, latency_nu, latency_batch, latency_repeats, num_samples, seed,
                      sa_sites=("blocks", "var_agg"), allow_pickle=False, progress=True, provenance=None):  # fmt: skip
    """:func:`sa_analyses`'s score sweep and latency (same arguments) -> ``out_path`` (json)."""
    from ..calibrate import SASampler

    data, ctx, net, x_cal, _, _ = _analyses_model(prepared_path, backbone_path, adapter_path, lora, sa_sites,
                                                  allow_pickle)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    out: Dict[str, Any] = {"sa_sites": list(sa_sites), "num_samples": num_samples}
    with SASampler(net, generator=gen, max_rows=sa_cfg.get("max_rows", "auto"), nu_template=ctx.nu_template) as sampler:
        out["score_sweep"] = _score_sweep(sampler, data, x_cal, load_json(verified(calibration_path)), nu_grid,
                                          num_samples, seed, progress)  # fmt: skip
        out["latency"] = _latency_record(sampler, x_cal, latency_nu, latency_batch, latency_repeats, progress)
    return _save_analyses(out_path, out, provenance)


def sa_analyses_bo(prepared_path, backbone_path, adapter_path, out_path, *, lora, sa_cfg, nu_range, bo_seed, seed,
                   sa_sites=("blocks", "var_agg"), allow_pickle=False, provenance=None):  # fmt: skip
    """One BO run of :func:`sa_analyses` (seed ``bo_seed`` on ``nu_range``; ``seed``: the analyses') ->
    ``out_path`` (json), the same run as the single job's."""
    from ..calibrate import SASampler

    _, ctx, net, x_cal, y_cal, point_cal = _analyses_model(prepared_path, backbone_path, adapter_path, lora, sa_sites,
                                                           allow_pickle)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    with SASampler(net, generator=gen, max_rows=sa_cfg.get("max_rows", "auto"), nu_template=ctx.nu_template) as sampler:
        run = _bo_run(sampler, x_cal, y_cal, point_cal, sa_cfg, nu_range, bo_seed)
    return _save_analyses(out_path, {"nu_range": list(nu_range), "bo_seed": int(bo_seed), "run": run}, provenance)


def gather_analyses(sweep_path, bo_paths: Mapping[str, Sequence[str | Path]], out_path, *, provenance=None):
    """:func:`sa_analyses`'s file from the sweep's (:func:`sa_analyses_sweep`) and the BO runs' files
    (:func:`sa_analyses_bo`; ``{"bo_seeds": [...], "bo_second_range": [...]}``, each in seed order)."""
    sweep = load_json(sweep_path)
    out = {k: sweep[k] for k in ("sa_sites", "num_samples", "score_sweep")}
    for key, paths in bo_paths.items():
        out[key] = [load_json(p)["run"] for p in paths]
    out["latency"] = sweep["latency"]
    return _save_analyses(out_path, out, provenance, sweep["device"], sweep["packages"])


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
    allow_pickle: bool = False,
    require_skill: bool = True,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """One MultiSWAG-LoRA member 1..L-1 -> ``out_path`` and its record, drawn at every candidate member 0 (the
    SWAG-LoRA run, its record ``first_path``) scored (:func:`stochattn.experiments.adapters.write_multiswag_member`);
    ``seed``: the multiswag run's."""
    data = load_pairs(prepared_path)
    data["require_skill"] = bool(require_skill)
    ctx = setup(backbone_path, adapter_path, lora, train, allow_pickle=allow_pickle)
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
    allow_pickle: bool = False,
    require_skill: bool = True,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Candidate ``index`` of ``method``'s validation grid -> ``out_path`` (its fitted state) and its record
    (:func:`stochattn.experiments.adapters.write_candidate`); ``seed``: the method run's. :func:`run_method` with
    ``candidates`` chooses among them."""
    data = load_pairs(prepared_path)
    data["require_skill"] = bool(require_skill)
    ctx = setup(backbone_path, adapter_path, lora, train, allow_pickle=allow_pickle)
    return adapters.write_candidate(method, data, ctx, method_cfg, out_path, index=index, num_samples=num_samples,
                                    seed=seed, progress=progress, provenance=provenance)  # fmt: skip
