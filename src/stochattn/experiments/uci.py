"""The UCI experiment (paper §5.3, App. C.3, App. E): one function per workflow stage.

Each function reads its inputs from files and writes its outputs atomically, so a Snakemake rule is one call:

    prepare          Gal split -> standardised train / val / cal / test (``prepared.npz``)
    train_backbone   the deterministic FT-Transformer shared by SA, MC Dropout and SWAG (``model.pt``)
    run_method       one method's S predictive samples on the test and calibration splits (``samples.npz``)
    evaluate         native and temperature-scaled metrics of one run (``metrics.json``)

``prepare_sinusoid`` makes the 1-D noisy sinusoid of the teaser figure (panel c) in the same format, so the
same functions produce its predictive intervals.

Cost accounting (``meta.json["seconds"]``): ``train`` is the training the method adds on top of the shared
deterministic backbone (0 for SA and MC Dropout, the SWAG phase for SWAG, every component's full training plus
SWAG phase for MultiSWAG, the full training for IVON and HSA); ``calibrate`` is post-hoc tuning (SA's BO);
``predict`` is drawing the samples. The backbone's own training time is recorded as ``backbone_train``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import numpy as np
import torch

from ..backbones.ft_transformer import build_ft_transformer
from ..calibrate import IntegerDomain, SASampler, bo_calibrate, eval_stats, target_scale
from ..data.uci import fetch_uci, load_prepared, load_uci_split, prepare_split, save_prepared  # noqa: F401
from ..io import atomic_path, load_json, save_json, save_npz
from ..provenance import device_info, package_versions
from ..training import fit_regressor, predict, resolve_device
from .evaluate import evaluate  # noqa: F401  (re-exported: one module per stage is imported by the rules)

METHODS = ("sa", "mc_dropout", "swag", "multiswag", "ivon", "hsa")
BACKBONE_METHODS = ("sa", "mc_dropout", "swag")  # methods that start from the shared deterministic backbone


# --------------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------------
def prepare(
    dataset: str,
    split: int,
    raw_dir: str | Path,
    out_path: str | Path,
    *,
    val_fraction: float,
    cal_fraction: float,
    seed: int,
    max_train: Optional[int] = None,
) -> Path:
    """Gal split ``split`` of ``dataset`` (files in ``raw_dir``) -> ``prepared.npz`` (see ``prepare_split``)."""
    x_tr, y_tr, x_te, y_te = load_uci_split(raw_dir, split)
    prepared = prepare_split(
        x_tr, y_tr, x_te, y_te, val_fraction=val_fraction, cal_fraction=cal_fraction, seed=seed, max_train=max_train
    )
    return save_prepared(out_path, prepared)


def sinusoid_features(x: np.ndarray) -> np.ndarray:
    """x (n,) -> (n, 4) polynomial features [x, x^2, x^3, |x|] of the teaser's 1-D input.

    An FT-Transformer attends over one token per feature plus [CLS]; a single raw feature would leave SA only two
    tokens to resample, which caps its dispersion at nu = 1. Column 0 stays the raw x (used for plotting).
    """
    return np.column_stack([x, x**2, x**3, np.abs(x)])


def prepare_sinusoid(
    out_path: str | Path, *, n: int = 400, noise: float = 0.3, val_fraction: float = 0.15, cal_fraction: float = 0.15,
    test_fraction: float = 0.25, seed: int = 0,
) -> Path:
    """Teaser data: x ~ U(-3, 3), y = sin(2x) + 0.5 x + N(0, noise^2), split like a UCI data set."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, size=n)
    y = np.sin(2 * x) + 0.5 * x + noise * rng.standard_normal(n)
    features = sinusoid_features(x)
    n_test = int(round(test_fraction * n))
    perm = rng.permutation(n)
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    prepared = prepare_split(
        features[train], y[train], features[test], y[test], val_fraction=val_fraction, cal_fraction=cal_fraction,
        seed=seed,
    )
    return save_prepared(out_path, prepared)


# --------------------------------------------------------------------------------------------------------------
# backbone
# --------------------------------------------------------------------------------------------------------------
def _fit(model: torch.nn.Module, data: Mapping[str, Any], train: Mapping[str, Any], seed: int, device, progress: bool, desc: str):
    return fit_regressor(
        model, data["x_train"], data["y_train"], data["x_val"], data["y_val"], seed=seed,
        lr=train.get("lr", 1e-4), weight_decay=train.get("weight_decay", 1e-5), batch_size=train.get("batch_size", 256),
        max_epochs=train.get("max_epochs", 500), patience=train.get("patience", 16), device=device, progress=progress,
        desc=desc,
    )


def _build(data: Mapping[str, Any], model: Mapping[str, Any], seed: int) -> torch.nn.Module:
    return build_ft_transformer(data["x_train"].shape[1], seed=seed, **dict(model))


def train_backbone(
    prepared_path: str | Path,
    model_path: str | Path,
    meta_path: str | Path,
    *,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    seed: int,
    device: Optional[str] = None,
    progress: bool = True,
) -> Dict[str, Any]:
    """Train the deterministic FT-Transformer with early stopping on the validation part; save its state."""
    data = load_prepared(prepared_path)
    dev = resolve_device(device)
    net = _build(data, model, seed)
    fit = _fit(net, data, train, seed, dev, progress, "backbone")
    with atomic_path(model_path) as tmp:
        torch.save({"state_dict": {k: v.cpu() for k, v in net.state_dict().items()}, "model": dict(model)}, tmp)
    val_rmse = float(np.sqrt(np.mean((predict(net, data["x_val"]).numpy() - data["y_val"]) ** 2)))
    meta = {
        "model": dict(model), "train": dict(train), "seed": seed, "best_epoch": fit.best_epoch,
        "epochs_run": len(fit.history), "val_rmse_standardised": val_rmse, "seconds": fit.seconds,
        "device": device_info(), "packages": package_versions(),
    }
    save_json(meta_path, meta)
    return meta


def load_backbone(prepared: Mapping[str, Any], model_path: str | Path, device=None) -> torch.nn.Module:
    ckpt = torch.load(model_path, map_location="cpu", weights_only=True)
    net = build_ft_transformer(prepared["x_train"].shape[1], **ckpt["model"])
    net.load_state_dict(ckpt["state_dict"])
    return net.to(resolve_device(device)).eval()


# --------------------------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------------------------
def _to_original(values: np.ndarray, data: Mapping[str, Any]) -> np.ndarray:
    return values * data["y_std"] + data["y_mean"]


def _check_finite(name: str, method: str, values: np.ndarray) -> None:
    if not np.all(np.isfinite(values)):
        bad = int(np.size(values) - np.isfinite(values).sum())
        raise ValueError(f"{method}: {bad} NaN/inf values in the {name}; refusing to write samples")


def _sa(data, net, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """SA: calibrate nu on the calibration split (Algorithms 2-3), then sample at the operating point."""
    x_cal, y_cal = (torch.as_tensor(data[k], dtype=torch.float32) for k in ("x_cal", "y_cal"))
    point_cal = predict(net, x_cal)
    s0 = target_scale(y_cal, point_cal)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    with SASampler(net, generator=gen, max_rows=cfg.get("max_rows", "auto")) as sampler:
        evaluate = lambda nu: eval_stats(  # noqa: E731
            nu, sampler, x_cal, y_cal, point_cal, batch_size=cfg["batch_size"], num_batches=cfg["num_batches"],
            num_passes=cfg["num_passes"], generator=gen,
        )
        calib = bo_calibrate(
            evaluate, s0, domain=IntegerDomain(int(cfg["nu_min"]), int(cfg["nu_max"])), budget=cfg["budget"],
            initial_design=cfg["initial_design"], seed=seed, operating_point=cfg["operating_point"], progress=progress,
        )
        t1 = time.perf_counter()
        draw = lambda x: sampler(calib.nu, torch.as_tensor(x, dtype=torch.float32), num_samples)  # noqa: E731
        samples, cal_samples = draw(data["x_test"]), draw(data["x_cal"])
    t2 = time.perf_counter()
    return {
        "point": predict(net, data["x_test"]), "samples": samples, "cal_point": point_cal, "cal_samples": cal_samples,
        "seconds": {"train": 0.0, "calibrate": t1 - t0, "predict": t2 - t1},
        "extra": {"nu": calib.nu, "nu_loss_argmin": calib.nu_loss_argmin, "nu_surrogate": calib.nu_surrogate,
                  "nu_surrogate_continuous": calib.nu_surrogate_continuous, "operating_point": calib.operating_point,
                  "s0_standardised": s0},
        "calibration": calib.to_dict(),
    }


def _mc_dropout(data, net, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    from ..baselines.mc_dropout import mc_dropout_samples

    t0 = time.perf_counter()
    draw = lambda x, s: mc_dropout_samples(net, x, num_samples, s, progress=progress)  # noqa: E731
    samples, cal_samples = draw(data["x_test"], seed), draw(data["x_cal"], seed + 1)
    return {
        "point": predict(net, data["x_test"]), "samples": samples, "cal_point": predict(net, data["x_cal"]),
        "cal_samples": cal_samples, "seconds": {"train": 0.0, "calibrate": 0.0, "predict": time.perf_counter() - t0},
    }


def _swag_member(net, data, cfg, seed, progress):
    from ..baselines.swag import fit_swag

    return fit_swag(
        net, data["x_train"], data["y_train"], lr=cfg["lr"], epochs=cfg["epochs"], seed=seed,
        max_rank=cfg.get("max_rank", 20), batch_size=cfg.get("batch_size", 256), progress=progress,
    )


def _swa_point(net, swag, x) -> torch.Tensor:
    saved = [p.detach().clone() for p in net.parameters()]
    swag.load_mean(net)
    out = predict(net, x)
    with torch.no_grad():
        for p, v in zip(net.parameters(), saved):
            p.copy_(v)
    return out


def _swag(data, net, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """SWAG (diagonal + low-rank, Maddox et al. 2019) from the pretrained backbone; point = SWA weights."""
    from ..baselines.swag import swag_samples

    t0 = time.perf_counter()
    swag = _swag_member(net, data, cfg, seed, progress)
    t1 = time.perf_counter()
    scale = cfg.get("scale", 1.0)
    samples = swag_samples(net, swag, data["x_test"], num_samples, seed, scale=scale)
    cal_samples = swag_samples(net, swag, data["x_cal"], num_samples, seed + 1, scale=scale)
    point, cal_point = _swa_point(net, swag, data["x_test"]), _swa_point(net, swag, data["x_cal"])
    return {"point": point, "samples": samples, "cal_point": cal_point, "cal_samples": cal_samples,
            "seconds": {"train": t1 - t0, "calibrate": 0.0, "predict": time.perf_counter() - t1}}


def _multiswag(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """MultiSWAG (Wilson & Izmailov 2020): L independently initialised and trained backbones, each with its own
    SWAG phase; samples pooled; point = mean of the pooled samples (the mixture's mean)."""
    from ..baselines.swag import multiswag_samples

    t0 = time.perf_counter()
    members = []
    for member in range(int(cfg["components"])):
        member_seed = seed + 1000 * (member + 1)
        net = _build(data, model_cfg, member_seed)
        _fit(net, data, train_cfg, member_seed, None, progress, f"multiswag {member + 1}/{cfg['components']}")
        members.append((net, _swag_member(net, data, cfg, member_seed, progress)))
    t1 = time.perf_counter()
    scale = cfg.get("scale", 1.0)
    samples = multiswag_samples(members, data["x_test"], num_samples, seed, scale=scale)
    cal_samples = multiswag_samples(members, data["x_cal"], num_samples, seed + 1, scale=scale)
    return {"point": samples.mean(0), "samples": samples, "cal_point": cal_samples.mean(0), "cal_samples": cal_samples,
            "seconds": {"train": t1 - t0, "calibrate": 0.0, "predict": time.perf_counter() - t1}}


def _ivon(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """IVON (Shen et al. 2024, ivon-opt) trained from scratch; point = the posterior-mean weights' prediction.

    ``cfg["grid"]`` (optional) lists overrides of ``lr`` / ``hess_init`` / ``weight_decay``; each is trained and the
    one with the lowest validation RMSE is kept (its training time, and the others', count as IVON's cost).
    NOTE[DIFF]: the paper gives no IVON hyper-parameters for UCI; on the FT-Transformer the package defaults
    (hess_init 1, lr 0.1) did not fit (RMSE/sigma_y ~ 1 on yacht), so lr and hess_init are chosen on validation data.
    """
    from ..baselines.ivon import fit_ivon, ivon_samples

    t0 = time.perf_counter()
    candidates = [dict(cfg, **override) for override in cfg.get("grid", [{}])]
    fits = []
    for candidate in candidates:
        net = _build(data, model_cfg, seed)
        fit = fit_ivon(
            net, data["x_train"], data["y_train"], data["x_val"], data["y_val"], lr=candidate["lr"], seed=seed,
            hess_init=candidate.get("hess_init", 1.0), beta2=candidate.get("beta2", 0.99999),
            weight_decay=candidate.get("weight_decay", 1e-4), batch_size=train_cfg.get("batch_size", 256),
            max_epochs=train_cfg.get("max_epochs", 500), patience=train_cfg.get("patience", 16), progress=progress,
        )
        fits.append((fit.best_val_rmse, net, fit))
    best = min(range(len(fits)), key=lambda i: fits[i][0])
    _, net, fit = fits[best]
    t1 = time.perf_counter()
    samples = ivon_samples(net, fit.optimizer, data["x_test"], num_samples, seed)
    cal_samples = ivon_samples(net, fit.optimizer, data["x_cal"], num_samples, seed + 1)
    selected = {k: candidates[best].get(k) for k in ("lr", "hess_init", "weight_decay")}
    return {"point": predict(net, data["x_test"]), "samples": samples, "cal_point": predict(net, data["x_cal"]),
            "cal_samples": cal_samples, "seconds": {"train": t1 - t0, "calibrate": 0.0, "predict": time.perf_counter() - t1},
            "extra": {"selected": selected, "validation_rmse": [float(f[0]) for f in fits]}}


def _hsa(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """HSA (Pei et al. 2022) FT-Transformer trained from scratch with its Gumbel sampling on; point = sample mean."""
    from ..baselines.hsa import hsa_ft_transformer, hsa_samples

    t0 = time.perf_counter()
    net = hsa_ft_transformer(
        data["x_train"].shape[1], n_centroids=cfg.get("n_centroids", 2), tau1=cfg.get("tau1", 1.0),
        tau2=cfg.get("tau2", 1.0), seed=seed, **dict(model_cfg),
    )
    _fit(net, data, train_cfg, seed, None, progress, "hsa")
    t1 = time.perf_counter()
    samples = hsa_samples(net, torch.as_tensor(data["x_test"], dtype=torch.float32), num_samples, generator=seed)
    cal_samples = hsa_samples(net, torch.as_tensor(data["x_cal"], dtype=torch.float32), num_samples, generator=seed + 1)
    return {"point": samples.mean(0), "samples": samples, "cal_point": cal_samples.mean(0), "cal_samples": cal_samples,
            "seconds": {"train": t1 - t0, "calibrate": 0.0, "predict": time.perf_counter() - t1}}


def run_method(
    method: str,
    prepared_path: str | Path,
    out_dir: str | Path,
    *,
    backbone_path: Optional[str | Path] = None,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    device: Optional[str] = None,
    progress: bool = True,
) -> Dict[str, Any]:
    """Run one method on one prepared split; write ``samples.npz`` and ``meta.json`` (and ``calibration.json``).

    samples.npz (original units): ``y`` (n,), ``point`` (n,), ``samples`` (S, n) on the test split; ``cal_y``,
    ``cal_point``, ``cal_samples`` on the calibration split (for post-hoc scaling); ``sigma_y`` (training-part std).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")
    data = load_prepared(prepared_path)
    torch.manual_seed(seed)
    if method in BACKBONE_METHODS:
        if backbone_path is None:
            raise ValueError(f"method {method!r} needs backbone_path (the trained deterministic FT-Transformer)")
        net = load_backbone(data, backbone_path, device)
        backbone_meta = load_json(Path(backbone_path).with_name("meta.json"))
        run = {"sa": _sa, "mc_dropout": _mc_dropout, "swag": _swag}[method](data, net, method_cfg, num_samples, seed, progress)
        run["seconds"]["backbone_train"] = backbone_meta["seconds"]
    else:
        fn = {"multiswag": _multiswag, "ivon": _ivon, "hsa": _hsa}[method]
        run = fn(data, model, train, method_cfg, num_samples, seed, progress)
        run["seconds"]["backbone_train"] = 0.0
    arrays = {k: np.asarray(run[k].detach().cpu().numpy() if torch.is_tensor(run[k]) else run[k], dtype=np.float64)
              for k in ("point", "samples", "cal_point", "cal_samples")}
    for name, values in arrays.items():
        _check_finite(name, method, values)
    out_dir = Path(out_dir)
    save_npz(
        out_dir / "samples.npz",
        y=_to_original(data["y_test"], data), point=_to_original(arrays["point"], data),
        samples=_to_original(arrays["samples"], data), cal_y=_to_original(data["y_cal"], data),
        cal_point=_to_original(arrays["cal_point"], data), cal_samples=_to_original(arrays["cal_samples"], data),
        sigma_y=np.float64(data["y_std"]),
    )
    if "calibration" in run:
        save_json(out_dir / "calibration.json", run["calibration"])
    meta = {
        "method": method, "hyperparameters": dict(method_cfg), "model": dict(model), "train": dict(train),
        "num_samples": num_samples, "seed": seed, "seconds": run["seconds"], "device": device_info(),
        "packages": package_versions(), **run.get("extra", {}),
    }
    save_json(out_dir / "meta.json", meta)
    return meta
