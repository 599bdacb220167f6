"""Method stages shared by the experiments: SA's calibration and sampling, the weight-space and training-stage
baselines with their validation-chosen settings, and the run files (``samples.npz``, ``meta.json``).

Every stage works on a ``data`` mapping with the arrays of one prepared data set: ``x_train, y_train`` (the
fitting part), ``x_val, y_val`` (early stopping and the baselines' selection), ``x_cal, y_cal`` (SA's nu,
temperature and conformal factors), ``x_test, y_test``, and ``y_mean, y_std`` (targets are stored standardised;
samples are written in ``y * y_std + y_mean`` units). Inputs are ``(n, F)``; targets ``(n,)`` or ``(n, H)``
(forecasts). An experiment supplies its networks: ``net`` (a trained model ``x -> y``) for the post-hoc methods,
and ``build(seed)`` factories for the methods that train their own (IVON, HSA, MultiSWAG members), so the same
code covers an FT-Transformer trained from scratch (UCI) and LoRA adapters on a frozen foundation model (ETT):
SWAG and IVON act on the model's trainable parameters, i.e. on the adapters when only they require gradients.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch

from ..calibrate import IntegerDomain, SASampler, bo_calibrate, eval_stats, target_scale
from ..io import RECORD_KEY, save_json, save_npz, sha256_record
from ..provenance import device_info, package_versions, with_outputs
from ..selection import CandidateFit
from ..training import TrainingClock, fit_regressor, predict
from .grids import SWAG_DEFAULTS, SWAG_KEYS, candidates

SA_OPERATING_POINTS = {"sa": "loss_argmin", "sa_match": "surrogate"}  # run name -> which nu of calibration.json


def check_finite(name: str, method: str, values: np.ndarray) -> None:
    if not np.all(np.isfinite(values)):
        bad = int(np.size(values) - np.isfinite(values).sum())
        raise ValueError(f"{method}: {bad} NaN/inf values in the {name}; refusing to write samples")


def sa_runs(data, net, cfg, num_samples, seed, progress, nu_template=None) -> Dict[str, Any]:
    """SA: calibrate nu once on the calibration split (Algorithms 2-3), then sample at both operating points.

    Returns the ``sa`` run at Algorithm 2's nu* (the arg-min of the observed loss, paper-faithful) with the
    ``sa_match`` run at the surrogate's scale-matching nu (App. B's nu_opt) under ``"variants"``. Both share the
    calibration: its seconds count as each run's ``calibrate``; ``predict`` is each run's own sampling.
    ``cfg["operating_point"]`` (optional) only documents the ``sa`` label and must be ``"loss_argmin"``.
    ``nu_template`` (optional): nu -> the nu spec set in the model (e.g. some attention sites only, see
    :class:`stochattn.calibrate.SASampler`); default the same nu everywhere.
    """
    if cfg.get("operating_point", "loss_argmin") != "loss_argmin":
        raise ValueError(f"method_params.sa.operating_point documents the 'sa' run, which uses Algorithm 2's nu: "
                         f"it must be 'loss_argmin' (got {cfg['operating_point']!r}); the surrogate's nu is the "
                         f"sa_match run")
    x_cal, y_cal = (torch.as_tensor(data[k], dtype=torch.float32) for k in ("x_cal", "y_cal"))
    point_cal = predict(net, x_cal)
    point = predict(net, data["x_test"])
    s0 = target_scale(y_cal, point_cal)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    runs: Dict[str, Dict[str, Any]] = {}
    template = {} if nu_template is None else {"nu_template": nu_template}
    with SASampler(net, generator=gen, max_rows=cfg.get("max_rows", "auto"), **template) as sampler:
        evaluate = lambda nu: eval_stats(  # noqa: E731
            nu, sampler, x_cal, y_cal, point_cal, batch_size=cfg["batch_size"], num_batches=cfg["num_batches"],
            num_passes=cfg["num_passes"], generator=gen,
        )
        calib = bo_calibrate(
            evaluate, s0, domain=IntegerDomain(int(cfg["nu_min"]), int(cfg["nu_max"])), budget=cfg["budget"],
            initial_design=cfg["initial_design"], design=cfg.get("design", "scale_match"), seed=seed,
            progress=progress,
        )
        t1 = time.perf_counter()
        nus = {"loss_argmin": calib.nu_loss_argmin, "surrogate": calib.nu_surrogate}
        boundary = {"loss_argmin": calib.at_boundary, "surrogate": calib.at_boundary_surrogate}
        for name, operating_point in SA_OPERATING_POINTS.items():
            t = time.perf_counter()
            nu = nus[operating_point]
            draw = lambda x: sampler(nu, torch.as_tensor(x, dtype=torch.float32), num_samples)  # noqa: E731, B023 - keeps the code hash
            samples, cal_samples = draw(data["x_test"]), draw(data["x_cal"])
            runs[name] = {
                "point": point, "samples": samples, "cal_point": point_cal, "cal_samples": cal_samples,
                "seconds": {"train": 0.0, "calibrate": t1 - t0, "predict": time.perf_counter() - t},
                "extra": {"nu": nu, "at_boundary": boundary[operating_point], "operating_point": operating_point,
                          "nu_loss_argmin": calib.nu_loss_argmin,
                          "nu_surrogate": calib.nu_surrogate,
                          "nu_surrogate_continuous": calib.nu_surrogate_continuous, "s0_standardised": s0},
            }
    run = runs.pop("sa")
    run["variants"] = runs
    run["calibration"] = dict(calib.to_dict(), runs={name: {"operating_point": op, "nu": nus[op],
                                                             "at_boundary": boundary[op]}
                                                      for name, op in SA_OPERATING_POINTS.items()})  # fmt: skip
    return run


# -- hyper-parameter selection on the validation part (stochattn.selection) -----------------------------------
def selection_options(data) -> Dict[str, Any]:
    """``label`` and ``require_skill`` of a data set's selection: ``data["require_skill"]`` (default True) False
    keeps a candidate that does not beat the training mean."""
    return {"label": str(data.get("source", "")), "require_skill": bool(data.get("require_skill", True))}


def select(method, data, grid, fit, reference=None, widen=None):
    """:func:`stochattn.selection.select_on_validation` on ``data``'s fitting and validation parts; ``widen``: a
    method's ``widen`` setting (:class:`stochattn.selection.Widening`'s fields) or None."""
    from ..selection import ValidationSplit, Widening, select_on_validation

    # only the fitting and validation arrays go in: the test and calibration parts cannot reach the choice
    return select_on_validation(method, grid, fit, ValidationSplit.from_prepared(data), reference=reference,
                                widen=Widening.from_config(widen), **selection_options(data))  # fmt: skip


def trainable_state(net: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The trainable tensors of ``net`` (CPU copies): the adapters of a LoRA model, every weight of one trained
    from scratch."""
    return {n: p.detach().cpu().clone() for n, p in net.named_parameters() if p.requires_grad}


def load_trainable(net: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """``state`` (:func:`trainable_state`) loaded into ``net`` built as the fitted one was (same structure)."""
    names = {n for n, _ in net.named_parameters()}
    missing = set(state) - names
    if missing:
        raise ValueError(f"fitted state: tensors {sorted(missing)[:3]} do not fit the network")
    with torch.no_grad():
        for n, p in net.named_parameters():
            if n in state:
                p.copy_(state[n].to(p.device))
    return net


@dataclass
class Search:
    """A method's validation search in parts, so that the workflow can fit each candidate in its own job:
    ``grid`` (the candidates), ``fit(candidate, split)`` (a :class:`~stochattn.selection.CandidateFit`),
    ``finish(selection, train_seconds)`` (the run dict from the chosen result: its test and cal samples),
    ``state(result)`` / ``load(state, candidate)`` (a fitted result to a torch-saveable dict and back),
    ``reference`` (copied into the record) and ``extra`` (filled by the fits, part of meta.json). ``keep(candidate,
    result)`` (optional) sees every fitted result the run scores, the grid's and a widening's (e.g.
    :class:`KeptDraws`)."""

    method: str
    grid: list
    fit: Callable[..., Any]
    finish: Callable[[Any, float], Dict[str, Any]]
    state: Callable[[Any], Dict[str, Any]]
    load: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
    reference: Optional[Dict[str, float]] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    widen: Optional[Mapping[str, Any]] = None  # the method's ``widen`` setting (single-job searches only)
    keep: Optional[Callable[[Dict[str, Any], Any], None]] = None

    def kept_fit(self) -> Callable[..., Any]:
        """``fit``, its result shown to ``keep`` (when set) before it is scored."""
        if self.keep is None:
            return self.fit

        def fit(candidate, split):
            out = self.fit(candidate, split)
            self.keep(dict(candidate), out.result)
            return out

        return fit


def search_run(search: Search, data) -> Dict[str, Any]:
    """Every candidate fitted here, one after the other (:func:`select`), then the chosen one sampled; ``train``
    seconds: the whole search."""
    with TrainingClock() as clock:  # a resumed search's trainings count their earlier attempts
        sel = select(search.method, data, search.grid, search.kept_fit(), reference=search.reference,
                     widen=search.widen)  # fmt: skip
    return search.finish(sel, clock.seconds())


def write_candidate(search: Search, data, out_path: str | Path, *, index: int, seed: int,
                    provenance: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:  # fmt: skip
    """Candidate ``index`` of ``search``'s grid fitted and scored on ``data``'s validation part
    (:func:`stochattn.selection.fit_candidate`, the very fit of :func:`search_run`) -> ``out_path`` (torch: the
    fitted state, None when its training diverged) and its record ``<stem>.json`` (the candidate, its scores and
    seconds, the search's ``extra``), both written atomically. Returns the record.

    A candidate fitted alone equals the same candidate fitted after the others only when every fit draws from its
    own seeded generators (``seed``, ``seed + 2``; training under :func:`stochattn.training.seeded`, which restores
    the global RNG), as the searches here do; the tests compare both paths' scores and samples.

    A search that widens its grid (``search.widen``) fits its grid's candidates here, and those beyond an edge in
    :func:`choose_candidate` (they are known only once the grid's are scored).

    Raises:
        ValueError: ``index`` outside the grid.
    """
    from ..io import save_model
    from ..selection import ValidationSplit, entry_record, fit_candidate

    if not 0 <= index < len(search.grid):
        raise ValueError(f"{search.method}: candidate {index} of a grid of {len(search.grid)}")
    candidate = search.grid[index]
    out, entry = fit_candidate(search.method, candidate, search.fit, ValidationSplit.from_prepared(data))
    recorded = save_model(out_path, {"state": None if out is None else search.state(out.result)})
    record = {"method": search.method, "index": index, "grid_size": len(search.grid), "candidate": candidate,
              "seed": seed, **entry_record(entry), "extra": search.extra, "device": device_info(),
              RECORD_KEY: recorded}  # fmt: skip
    if provenance is not None:
        record["provenance"] = dict(provenance)
    save_json(Path(out_path).with_suffix(".json"), record)
    return record


def choose_candidate(search: Search, data, paths: Sequence[str | Path]) -> Dict[str, Any]:
    """The run of ``search`` from its candidates' files (:func:`write_candidate`, in grid order): the choice of
    :func:`stochattn.selection.choose` (as :func:`search_run` makes it), the winner's state loaded and sampled by
    ``search.finish`` (the same seeds). A widening search (``search.widen``) first fits here, one after the other,
    the candidates beyond the edge its grid's scores choose (:meth:`stochattn.selection.Widening.grow`, as
    :func:`search_run` does after its grid). ``train`` seconds: every candidate's fit. ``search.keep`` sees every
    candidate's fitted result, the grid's loaded from their files.

    Raises:
        ValueError: the files are not the grid's candidates in order (written under another configuration).
    """
    from ..io import load_json, load_model
    from ..selection import Selection, ValidationSplit, Widening, best_index, choose, entry_from_record, fit_candidate

    records = [load_json(Path(p).with_suffix(".json")) for p in paths]
    if [r["index"] for r in records] != list(range(len(search.grid))) or \
            [r["candidate"] for r in records] != search.grid:
        raise ValueError(f"{search.method}: the candidate files {[str(p) for p in paths]} are not the grid "
                         f"{search.grid} in order (written under another configuration?)")  # fmt: skip
    for r in records:  # what the fits leave in extra, in grid order as the single-job search leaves it
        search.extra.update(r["extra"])
    entries = [entry_from_record(r) for r in records]
    split, options, grid = ValidationSplit.from_prepared(data), selection_options(data), list(search.grid)
    mean_rmse, widen, fitted = split.mean_predictor_rmse(), Widening.from_config(search.widen), {}

    def run(candidate):  # a candidate beyond the grid's edge, fitted here; only the best fit so far is kept
        out, entry = fit_candidate(search.method, candidate, search.kept_fit(), split)
        entries.append(entry)
        if best_index(entries, mean_rmse, options["require_skill"]) == len(entries) - 1:
            fitted.clear()
            fitted[len(entries) - 1] = out

    added = [] if widen is None else widen.grow(grid, entries, run, mean_rmse, options["require_skill"])
    index, record = choose(search.method, grid, entries, mean_rmse, reference=search.reference, **options)
    if widen is not None:
        record.update(widen.record(grid, index, added))
    result = fitted[index].result if index in fitted else None  # else the chosen grid fit, loaded once
    if search.keep is not None:  # the grid's fits from their files (a widening's were shown as they were fitted)
        for i, (candidate, path) in enumerate(zip(grid, paths)):
            state = load_model(path)["state"]
            if state is not None:  # None: its training diverged
                out = search.load(state, candidate)
                search.keep(dict(candidate), out)
                result = out if i == index else result
    if result is None:
        result = search.load(load_model(paths[index])["state"], grid[index])
    return search.finish(Selection(result, index, grid[index], record), sum(e["seconds"] for e in entries))


def fit_on(model, split, train: Mapping[str, Any], seed: int, progress: bool, desc: str):
    """AdamW training (``train``: lr, weight_decay, batch_size, max_epochs, patience) on a ValidationSplit."""
    return fit_regressor(
        model, split.x_fit, split.y_fit, split.x_val, split.y_val, seed=seed, lr=train.get("lr", 1e-4),
        weight_decay=train.get("weight_decay", 1e-5), batch_size=train.get("batch_size", 256),
        max_epochs=train.get("max_epochs", 500), patience=train.get("patience", 16), progress=progress, desc=desc,
    )


def swa_point(net, swag, x) -> torch.Tensor:
    saved = [p.detach().clone() for p in net.parameters()]
    swag.load_mean(net)
    out = predict(net, x)
    with torch.no_grad():
        for p, v in zip(net.parameters(), saved):
            p.copy_(v)
    return out


def swa_mean_network(net, swag) -> torch.nn.Module:
    """A copy of ``net`` (a SWAG phase's last iterate) with ``swag``'s SWA mean loaded."""
    mean = copy.deepcopy(net)
    swag.load_mean(mean)
    return mean


def swag_phase(net, candidate: Mapping[str, Any], split, seed: int, progress: bool):
    """One SWAG phase (settings ``candidate``, SWAG_KEYS) from a copy of ``net`` on ``split``'s fitting part:
    ``(member, swag)``."""
    from ..baselines.swag import fit_swag

    member = copy.deepcopy(net)
    swag = fit_swag(
        member, split.x_fit, split.y_fit, lr=candidate["lr"], epochs=int(candidate["epochs"]), seed=seed,
        max_rank=int(candidate["max_rank"]), collect_every=int(candidate["collect_every"]),
        collect_per_epoch=int(candidate["collect_per_epoch"]), optimizer=candidate["optimizer"],
        anneal_epochs=int(candidate["anneal_epochs"]), start_lr=candidate["start_lr"],
        weight_decay=float(candidate["weight_decay"]), batch_size=int(candidate["batch_size"]), progress=progress,
    )
    return member, swag


def swag_fit(net, seed, progress, num_samples):
    """Fit function for select_on_validation: one SWAG phase from a copy of ``net`` (:func:`swag_phase`); its point
    prediction is the SWA mean's, its ``num_samples`` validation samples drawn from the posterior at the candidate's
    scale."""
    from ..baselines.swag import swag_samples

    def fit(candidate, split):
        member, swag = swag_phase(net, candidate, split, seed, progress)
        val_samples = swag_samples(member, swag, split.x_val, num_samples, seed + 2, scale=float(candidate["scale"]))
        return CandidateFit((member, swag), swa_point(member, swag, split.x_val), val_samples)

    return fit


def swag_state(result) -> Dict[str, Any]:
    member, swag = result
    return {"member": trainable_state(member), "swag": swag.state_dict()}


def swag_load(net):
    """Load function of a SWAG search from ``net`` (the fits start from copies of it)."""
    from ..baselines.swag import SWAG

    def load(state, candidate):
        return load_trainable(copy.deepcopy(net), state["member"]), SWAG.from_state_dict(state["swag"])

    return load


def swag_select(method, data, net, cfg, seed, progress, num_samples):
    """SWAG phase from ``net`` with the SGD learning rate (and any other SWAG_KEYS in ``cfg["grid"]``) chosen by
    the validation CRPS of ``num_samples`` posterior samples (:mod:`stochattn.selection`); ``reference`` records the
    starting network's validation RMSE.

    NOTE[DIFF]: the paper gives no SWAG settings for UCI. SGD(momentum 0.9) at lr 0.01 from the AdamW-trained
    FT-Transformer left the SWA mean at RMSE/sigma_y ~ 1 (measured on yacht and concrete), so the lr is chosen
    on a small grid from the shared backbone (cheap: SWAG phases only, no retraining).
    """
    from ..selection import ValidationSplit

    start = ValidationSplit.from_prepared(data).rmse(predict(net, data["x_val"]))
    grid = candidates(cfg, SWAG_KEYS, SWAG_DEFAULTS)
    return select(method, data, grid, swag_fit(net, seed, progress, num_samples), reference={"start_val_rmse": start},
                  widen=cfg.get("widen"))


def swag_search(data, net, cfg, num_samples, seed, progress, on_fitted=None, keep=None) -> Search:
    """SWAG's search (:func:`swag_run`) in parts (:class:`Search`); ``keep``: :attr:`Search.keep` (e.g.
    :class:`KeptDraws`, MultiSWAG's component 0)."""
    from ..baselines.swag import swag_samples
    from ..selection import ValidationSplit

    start = ValidationSplit.from_prepared(data).rmse(predict(net, data["x_val"]))

    def finish(sel, train_seconds):
        member, swag = sel.result
        if on_fitted is not None:
            on_fitted(member, swag, dict(sel.candidate))
        t1 = time.perf_counter()
        scale = sel.candidate["scale"]
        samples = swag_samples(member, swag, data["x_test"], num_samples, seed, scale=scale)
        cal_samples = swag_samples(member, swag, data["x_cal"], num_samples, seed + 1, scale=scale)
        point, cal_point = swa_point(member, swag, data["x_test"]), swa_point(member, swag, data["x_cal"])
        return {"point": point, "samples": samples, "cal_point": cal_point, "cal_samples": cal_samples,
                "seconds": {"train": train_seconds, "calibrate": 0.0, "predict": time.perf_counter() - t1},
                "extra": {"selection": sel.record}}

    return Search("swag", candidates(cfg, SWAG_KEYS, SWAG_DEFAULTS), swag_fit(net, seed, progress, num_samples),
                  finish, swag_state, swag_load(net), reference={"start_val_rmse": start},
                  widen=cfg.get("widen"), keep=keep)  # fmt: skip


def swag_run(data, net, cfg, num_samples, seed, progress, on_fitted=None, keep=None) -> Dict[str, Any]:
    """SWAG (diagonal + low-rank, Maddox et al. 2019) from the pretrained backbone; point = SWA weights; the SGD
    learning rate (and any other SWAG_KEYS in ``cfg["grid"]``) chosen as :func:`swag_select` does.

    ``train`` seconds include every grid candidate's SWAG phase. ``on_fitted(member, swag, candidate)`` (optional)
    is called with the chosen posterior and its settings before sampling (e.g. a variance-scale sweep, or keeping it
    as MultiSWAG's first member); its time is not counted. ``keep``: :attr:`Search.keep`."""
    return search_run(swag_search(data, net, cfg, num_samples, seed, progress, on_fitted, keep), data)


def component_seed(seed: int, component: int) -> int:
    """Seed of MultiSWAG component ``component`` (0-based) of a run seeded ``seed``."""
    return seed + 1000 * (component + 1)


# IVON settings a grid entry may override; the effective sample size is ``ess`` when given, else ``ess_factor`` x n_fit
IVON_KEYS = ("lr", "hess_init", "ess", "ess_factor", "clip_radius", "beta2", "weight_decay", "rescale_lr", "max_epochs",
             "patience")  # fmt: skip


IVON_DEFAULTS = {"hess_init": 1.0, "ess": None, "ess_factor": 1.0, "clip_radius": None, "beta2": 0.99999,
                 "weight_decay": 1e-4, "rescale_lr": True}  # fmt: skip


# HSA settings a grid entry may override (AdamW training as the backbone's, from ``train`` unless overridden)
HSA_KEYS = ("n_centroids", "tau1", "tau2", "lr", "max_epochs", "patience")


HSA_DEFAULTS = {"n_centroids": 2, "tau1": 1.0, "tau2": 1.0}


def ivon_settings(c: Mapping[str, Any], n_fit: int) -> Dict[str, Any]:
    """The ``ivon.IVON`` settings of candidate ``c`` (:func:`stochattn.baselines.ivon.make_ivon`'s arguments)."""
    return {"lr": c["lr"], "ess": float(c["ess"]) if c["ess"] is not None else float(c["ess_factor"]) * n_fit,
            "hess_init": c["hess_init"], "beta2": c["beta2"], "weight_decay": c["weight_decay"],
            "rescale_lr": bool(c["rescale_lr"]),
            "clip_radius": math.inf if c["clip_radius"] is None else c["clip_radius"]}  # fmt: skip


def ivon_search(data, build: Callable[[int], torch.nn.Module], train_cfg, cfg, num_samples, seed, progress) -> Search:
    """IVON's search (:func:`ivon_run`) in parts (:class:`Search`); a fitted result is ``(net, ivon.IVON)``."""
    from ..baselines.ivon import fit_ivon, ivon_samples, make_ivon

    n_fit = len(data["y_train"])

    def fit(c, split):  # sees the ValidationSplit only (never ``data``)
        net = build(seed)
        result = fit_ivon(net, split.x_fit, split.y_fit, split.x_val, split.y_val, seed=seed,
                          **ivon_settings(c, len(split.y_fit)), batch_size=train_cfg.get("batch_size", 256),
                          max_epochs=int(c["max_epochs"]), patience=c["patience"], progress=progress)  # fmt: skip
        val_samples = ivon_samples(net, result.optimizer, split.x_val, num_samples, seed + 2)
        return CandidateFit((net, result.optimizer), predict(net, split.x_val), val_samples)

    def state(result):
        net, optimizer = result
        return {"net": trainable_state(net), "optimizer": optimizer.state_dict()}

    def load(state, c):
        net = load_trainable(build(seed), state["net"])
        optimizer = make_ivon(net, **ivon_settings(c, n_fit))
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # IVON keeps its posterior (hess, momentum) in the group
            for k, v in group.items():
                if torch.is_tensor(v):
                    group[k] = v.to(group["params"][0].device)
        return net, optimizer

    def finish(sel, train_seconds):
        net, optimizer = sel.result
        t1 = time.perf_counter()
        samples = ivon_samples(net, optimizer, data["x_test"], num_samples, seed)
        cal_samples = ivon_samples(net, optimizer, data["x_cal"], num_samples, seed + 1)
        point, cal_point = predict(net, data["x_test"]), predict(net, data["x_cal"])
        return {"point": point, "samples": samples, "cal_point": cal_point, "cal_samples": cal_samples,
                "seconds": {"train": train_seconds, "calibrate": 0.0, "predict": time.perf_counter() - t1},
                "extra": {"selection": sel.record}}

    defaults = dict(IVON_DEFAULTS, max_epochs=train_cfg.get("max_epochs", 500), patience=train_cfg.get("patience", 16))
    return Search("ivon", candidates(cfg, IVON_KEYS, defaults), fit, finish, state, load)


def ivon_run(
    data, build: Callable[[int], torch.nn.Module], train_cfg, cfg, num_samples, seed, progress
) -> Dict[str, Any]:
    """IVON (Shen et al. 2024, ivon-opt) over the trainable parameters of ``build(seed)``; point = the
    posterior-mean weights' prediction.

    Every candidate of ``cfg["grid"]`` (overrides of IVON_KEYS) is trained from the same initialisation with
    early stopping on the validation RMSE of the posterior mean; the lowest validation CRPS of ``num_samples``
    posterior samples is kept (:mod:`stochattn.selection`), and every candidate's training counts as IVON's
    ``train`` seconds.

    NOTE[DIFF]: the paper gives no IVON settings for UCI. On the FT-Transformer the package defaults (lr 0.1,
    hess_init 1, ess = n_train) and the earlier grid (lr 0.01, hess_init 30) never left RMSE/sigma_y ~ 1 on naval:
    with hess_init fixed by beta2 = 0.99999 over a few hundred steps, IVON's step is plain SGD-like, which does not
    train this transformer (SGD does not either; AdamW does). Element-wise update clipping (clip_radius, used by
    Shen et al. for transformers) gives Adam-like bounded steps, and ess = ess_factor x n_fit > n_fit (a colder
    posterior) keeps the weight noise small enough to fit; both are chosen on validation data.
    """
    return search_run(ivon_search(data, build, train_cfg, cfg, num_samples, seed, progress), data)


def stochastic_net_search(method, train_net, rebuild, sampler, keys, defaults, data, train_cfg, cfg, num_samples,
                          seed, extra=None) -> Search:  # fmt: skip
    """A method whose trained network is itself stochastic at test time (HSA, Contextual Dropout), as a
    :class:`Search`.

    Every candidate of ``cfg["grid"]`` (overrides of ``keys`` over ``defaults`` and the training schedule) is
    trained by ``train_net(candidate, split)`` from the same seed and scored by the validation CRPS of
    ``num_samples`` passes (their mean the point prediction); the chosen network's ``sampler(net, x, num_samples,
    generator=...)`` passes on the test and cal parts are the samples, their mean the point prediction.
    ``rebuild(candidate)``: the untrained network of a candidate (its fitted tensors are loaded into it).
    ``extra`` (a dict the fits may fill) goes into meta.json."""
    def draw(net, x, generator):
        return sampler(net, torch.tensor(x, dtype=torch.float32), num_samples, generator=generator)

    def fit(c, split):  # sees the ValidationSplit only (never ``data``)
        net = train_net(c, split)
        val_samples = draw(net, split.x_val, seed + 2)
        return CandidateFit(net, val_samples.mean(0), val_samples)

    extra = {} if extra is None else extra

    def finish(sel, train_seconds):
        net = sel.result
        t1 = time.perf_counter()
        samples, cal_samples = draw(net, data["x_test"], seed), draw(net, data["x_cal"], seed + 1)
        return {"point": samples.mean(0), "samples": samples, "cal_point": cal_samples.mean(0),
                "cal_samples": cal_samples,
                "seconds": {"train": train_seconds, "calibrate": 0.0, "predict": time.perf_counter() - t1},
                "extra": {"selection": sel.record, **extra}}  # fmt: skip

    defaults = dict(defaults, lr=train_cfg.get("lr", 1e-4), max_epochs=train_cfg.get("max_epochs", 500),
                    patience=train_cfg.get("patience", 16))
    return Search(method, candidates(cfg, keys, defaults), fit, finish, trainable_state,
                  lambda state, c: load_trainable(rebuild(c), state), extra=extra)  # fmt: skip


def hsa_search(data, build: Callable[[Mapping[str, Any], int], torch.nn.Module], train_cfg, cfg, num_samples, seed,
               progress) -> Search:  # fmt: skip
    """HSA's search (:func:`hsa_run`) in parts (:class:`Search`)."""
    from ..baselines.hsa import hsa_samples

    def train_net(c, split):
        net = build(c, seed)
        fit_on(net, split, dict(train_cfg, lr=c["lr"], max_epochs=c["max_epochs"], patience=c["patience"]), seed,
               progress, "hsa")  # fmt: skip
        return net

    return stochastic_net_search("hsa", train_net, lambda c: build(c, seed), hsa_samples, HSA_KEYS, HSA_DEFAULTS,
                                 data, train_cfg, cfg, num_samples, seed)  # fmt: skip


def hsa_run(data, build: Callable[[Mapping[str, Any], int], torch.nn.Module], train_cfg, cfg, num_samples, seed,
            progress) -> Dict[str, Any]:  # fmt: skip
    """HSA (Pei et al. 2022): ``build(candidate, seed)`` gives a network with HSA attention (its trainable
    parameters: everything when trained from scratch, centroids + LoRA on a frozen backbone), trained by AdamW with
    its Gumbel sampling on; point = sample mean (:func:`stochastic_net_search`)."""
    return search_run(hsa_search(data, build, train_cfg, cfg, num_samples, seed, progress), data)


# Contextual Dropout settings a grid entry may override (AdamW on the trainable parameters, as the adapter's)
CD_KEYS = ("kl_weight", "gamma", "init_rate", "prior_rate", "lr", "max_epochs", "patience")
CD_DEFAULTS = {"kl_weight": 1.0, "gamma": 8, "init_rate": 0.1, "prior_rate": 0.1}


def contextual_dropout_run(data, build: Callable[[int], torch.nn.Module], sites: Callable[[torch.nn.Module], list],
                           train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:  # fmt: skip
    """Contextual Dropout (:func:`contextual_dropout_search`), every candidate fitted here."""
    return search_run(contextual_dropout_search(data, build, sites, train_cfg, cfg, num_samples, seed, progress), data)


def contextual_dropout_search(data, build: Callable[[int], torch.nn.Module], sites: Callable[[torch.nn.Module], list],
                              train_cfg, cfg, num_samples, seed, progress) -> Search:  # fmt: skip
    """Contextual Dropout (Fan et al. 2021, Gaussian variant, :mod:`stochattn.baselines.contextual_dropout`):
    ``build(seed)`` gives the network (its trainable parameters are trained with the dropout modules installed at
    ``sites(net)``, the names of the ``nn.Linear`` layers whose inputs are masked); point = sample mean, candidates
    chosen as HSA's (:func:`stochastic_net_search`). A candidate's ``kl_weight`` may be ``"elbo"``: the ELBO's own
    weight (:func:`stochattn.baselines.contextual_dropout.elbo_kl_weight`), with the noise variance estimated by the
    untrained network's mean squared residual on the fitting part (recorded as ``elbo_kl_weight``)."""
    from ..baselines.contextual_dropout import (add_contextual_dropout, contextual_dropout_samples, elbo_kl_weight,
                                                fit_contextual_dropout)  # fmt: skip

    chosen_sites: list = []  # filled by train_net (the same names for every candidate), recorded in meta.json
    resolved: Dict[str, Any] = {"variant": "gaussian", "sites": chosen_sites}  # meta.json's extra, filled in fits

    def kl_weight(c, net, split) -> float:
        if c["kl_weight"] != "elbo":
            return float(c["kl_weight"])
        residual = float(np.mean((predict(net, split.x_fit).numpy() - split.y_fit) ** 2))
        resolved["elbo_kl_weight"] = elbo_kl_weight(residual, len(split.y_fit), int(np.prod(split.y_fit.shape[1:])))
        resolved["elbo_noise_variance"] = residual
        return resolved["elbo_kl_weight"]

    def with_dropout(c, net):
        add_contextual_dropout(net, sites(net), gamma=int(c["gamma"]), init_rate=float(c["init_rate"]),
                               prior_rate=float(c["prior_rate"]), seed=seed)  # fmt: skip
        return net

    def train_net(c, split):
        net = build(seed)
        weight = kl_weight(c, net, split)
        chosen_sites[:] = sites(net)
        with_dropout(c, net)
        fit_contextual_dropout(
            net, split.x_fit, split.y_fit, split.x_val, split.y_val, seed=seed, lr=float(c["lr"]),
            kl_weight=weight, weight_decay=train_cfg.get("weight_decay", 1e-5),
            batch_size=train_cfg.get("batch_size", 256), max_epochs=int(c["max_epochs"]), patience=c["patience"],
            progress=progress, desc="contextual dropout",
        )
        return net

    return stochastic_net_search("contextual_dropout", train_net, lambda c: with_dropout(c, build(seed)),
                                 contextual_dropout_samples, CD_KEYS, CD_DEFAULTS, data, train_cfg, cfg, num_samples,
                                 seed, extra=resolved)  # fmt: skip


def posterior_draws(member, swag, candidate: Mapping[str, Any], data, seed: int, count: int) -> Dict[str, torch.Tensor]:
    """``count`` samples of a SWAG posterior (``member``, ``swag``; at ``candidate``'s scale) on the validation (seed
    ``seed + 2``), test (``seed``) and calibration (``seed + 1``) parts, SWAG's own streams: ``{"val": (count, m,
    ...), "test": (count, n, ...), "cal": (count, n_cal, ...)}``. Each sample is one draw from its stream, so these
    are the first ``count`` of the samples a SWAG run at ``seed`` draws there."""
    from ..baselines.swag import swag_samples

    scale = float(candidate["scale"])
    return {part: swag_samples(member, swag, x, count, s, scale=scale)
            for part, x, s in (("val", data["x_val"], seed + 2), ("test", data["x_test"], seed),
                               ("cal", data["x_cal"], seed + 1))}  # fmt: skip


def check_swag_member(method: str, swag_member: Optional[str | Path], multiswag_components: Optional[int]) -> None:
    """ValueError where MultiSWAG's component-0 file (``swag_member``) is asked of another run than SWAG's, or
    without MultiSWAG's L (``multiswag_components``: component 0 keeps its share of the samples, :class:`KeptDraws`)."""
    if swag_member is not None and method != "swag":
        raise ValueError(f"swag_member (MultiSWAG's component 0) is written by the 'swag' run, not by {method!r}")
    if swag_member is not None and multiswag_components is None:
        raise ValueError("swag_member needs multiswag_components (MultiSWAG's L): component 0 keeps its share of the "
                         "samples at every candidate")  # fmt: skip


class KeptDraws:
    """MultiSWAG's component 0 (Wilson & Izmailov 2020) is the SWAG run: its share of the samples (``count``,
    :func:`stochattn.baselines.swag.component_counts`) drawn from every posterior the run's search fits, the grid's
    and a widening's (:attr:`Search.keep`; :func:`posterior_draws` at the run's ``seed``), so that MultiSWAG pools
    the very posteriors SWAG scored (:func:`multiswag_pool`) without keeping them (~0.1 GB each on the paper's
    FT-Transformer). Their time is left out of the search's training (:func:`stochattn.training.not_training`) and
    kept in ``seconds``."""

    def __init__(self, data, seed: int, count: int) -> None:
        if count < 1:
            raise ValueError(f"MultiSWAG's component 0 must draw at least one sample, got {count}")
        self.data, self.seed, self.count, self.seconds = data, int(seed), int(count), 0.0
        self.drawn: Dict[str, Dict[str, torch.Tensor]] = {}

    def __call__(self, candidate: Mapping[str, Any], result) -> None:
        from ..training import not_training

        member, swag = result
        with not_training():
            t0 = time.perf_counter()
            self.drawn[_key(candidate)] = posterior_draws(member, swag, candidate, self.data, self.seed, self.count)
            self.seconds += time.perf_counter() - t0

    def in_grid(self, grid: Sequence[Mapping[str, Any]]) -> List[Optional[Dict[str, torch.Tensor]]]:
        """The draws at each candidate of ``grid`` (a run's ``selection["grid"]``), None where none was fitted (its
        phase diverged)."""
        return [self.drawn.get(_key(c)) for c in grid]


def _key(candidate: Mapping[str, Any]) -> str:
    return json.dumps(dict(candidate), sort_keys=True)


def multiswag_draws(net, grid: Sequence[Mapping[str, Any]], data, seed: int, count: int, progress: bool):
    """One MultiSWAG component's draws at every candidate of ``grid`` (MultiSWAG's shared SWAG settings are chosen
    among them, :func:`multiswag_choose`): per candidate one SWAG phase from a copy of ``net`` (its seed ``seed``,
    :func:`swag_phase`) and ``count`` posterior samples on the validation (seed ``seed + 2``), test (``seed``) and
    calibration (``seed + 1``) parts, SWAG's own streams.

    Returns ``(draws, networks)`` in grid order: ``draws[i]`` ``{"val": (count, m, ...), "test": (count, n, ...),
    "cal": (count, n_cal, ...)}``, ``networks[i]`` the trainable tensors (:func:`trainable_state`) of the phase's
    last iterate and of its SWA mean ``{"last": ..., "swa_mean": ...}`` (for audits such as
    ``benchmarks/uci_bias.py``); both ``None`` where the phase diverged. Samples, not posteriors, are kept: |grid|
    rank-20 posteriors of the paper's FT-Transformer are ~0.7 GB per component."""
    from ..selection import ValidationSplit

    split, draws, networks = ValidationSplit.from_prepared(data), [], []
    for candidate in grid:
        try:
            member, swag = swag_phase(net, candidate, split, seed, progress)
        except FloatingPointError:
            draws.append(None)
            networks.append(None)
            continue
        draws.append(posterior_draws(member, swag, candidate, data, seed, count))
        networks.append({"last": trainable_state(member), "swa_mean": trainable_state(swa_mean_network(member, swag))})
    return draws, networks


def multiswag_choose(data, grid: Sequence[Mapping[str, Any]], draws: Sequence[Sequence[Any]], seconds: float,
                     num_samples: int, widen: Optional[Mapping[str, Any]] = None,
                     extend: Optional[Callable[[Dict[str, Any]], List[Any]]] = None) -> Dict[str, Any]:  # fmt: skip
    """MultiSWAG's run from its L components' draws (``draws[l]``: :func:`multiswag_draws` of component ``l`` at
    every candidate of ``grid``, its share :func:`stochattn.baselines.swag.component_counts` of ``num_samples``):
    the one SWAG setting all components share (Wilson & Izmailov 2020) chosen by the validation CRPS of the pooled
    samples (:func:`select`), the chosen candidate's pooled test and cal samples the run's; point = their mean (the
    mixture's mean). ``seconds``: the components' training and SWAG phases.

    ``widen`` (the SWAG grid's ``widen`` setting, :class:`stochattn.selection.Widening`): where the pooled choice
    lies on the grid's edge, the candidate beyond it is drawn by every component (``extend(candidate)``: the L
    components' draws there, in order) and scored like the others, as SWAG's own search widens; the record's
    ``widened`` and ``edge_chosen`` say what was added, and its phases' seconds count as training
    (``widened_seconds``)."""
    from ..baselines.swag import component_counts

    t0 = time.perf_counter()
    grid = [dict(c) for c in grid]
    draws = [list(component) for component in draws]
    counts = component_counts(num_samples, len(draws))
    if min(counts) < 1:
        raise ValueError(f"multiswag: {num_samples} samples for {len(draws)} components; every component needs a draw")

    def check_share(l: int, d: Any) -> None:  # noqa: E741
        if d is not None and any(len(v) != counts[l] for v in d.values()):
            raise ValueError(f"multiswag: component {l} drew {[len(v) for v in d.values()]} samples, its share is "
                             f"{counts[l]} of {num_samples}")  # fmt: skip

    for l, component in enumerate(draws):  # noqa: E741
        if len(component) != len(grid):
            raise ValueError(f"multiswag: component {l} has draws at {len(component)} candidates, the grid {len(grid)}")
        for d in component:
            check_share(l, d)
    widened_seconds = 0.0

    def drawn_at(candidate: Mapping[str, Any]) -> int:
        """``candidate``'s index in ``grid``; a widening's new candidate is drawn by every component first."""
        nonlocal widened_seconds
        if candidate not in grid:
            if extend is None:
                raise ValueError(f"multiswag: no draws at {dict(candidate)} and no way to draw them (extend)")
            with TrainingClock() as clock:  # a resumed job's phases count their earlier attempts
                new = list(extend(dict(candidate)))
            widened_seconds += clock.seconds()
            if len(new) != len(draws):
                raise ValueError(f"multiswag: extend drew {len(new)} components at {dict(candidate)}, not {len(draws)}")
            for l, (component, d) in enumerate(zip(draws, new)):  # noqa: E741
                check_share(l, d)
                component.append(d)
            grid.append(dict(candidate))
        return grid.index(candidate)

    def pooled(index: int, part: str) -> torch.Tensor:
        parts = [component[index] for component in draws]
        failed = [l for l, d in enumerate(parts) if d is None]  # noqa: E741
        if failed:
            raise FloatingPointError(f"the SWAG phase of component(s) {failed} diverged at {grid[index]}")
        return torch.cat([torch.as_tensor(d[part]) for d in parts])

    def fit(candidate, split):  # the draws are made: only the pooled validation samples are scored here
        index = drawn_at(candidate)
        val = pooled(index, "val")
        return CandidateFit(index, val.mean(0), val)

    sel = select("multiswag", data, list(grid), fit, widen=widen)
    samples, cal_samples = pooled(sel.result, "test"), pooled(sel.result, "cal")
    record = dict(sel.record, chosen_on=f"pooled validation samples of the {len(draws)} components, one setting")
    if widen is not None:
        record["widened_seconds"] = widened_seconds
    return {"point": samples.mean(0), "samples": samples, "cal_point": cal_samples.mean(0), "cal_samples": cal_samples,
            "seconds": {"train": seconds + widened_seconds, "calibrate": 0.0,
                        "predict": max(0.0, time.perf_counter() - t0 - widened_seconds)},
            "extra": {"selection": record}}


def write_multiswag_component(out_path: str | Path, grid: Sequence[Mapping[str, Any]], drawn: tuple,
                              record: Mapping[str, Any], provenance: Optional[Mapping[str, Any]] = None,
                              start: Optional[Mapping[str, torch.Tensor]] = None) -> Dict[str, Any]:  # fmt: skip
    """One MultiSWAG component's ``(draws, networks)`` (:func:`multiswag_draws` at ``grid``) -> ``out_path`` (torch,
    atomic) and its record ``<stem>.json``: ``record`` (component, seed, seconds, ...) with the grid, the device and
    the file's SHA-256 (checked by :func:`load_multiswag_component`). ``start``: the trained network's trainable
    tensors (:func:`trainable_state`), from which MultiSWAG draws at a candidate its widening adds
    (:func:`multiswag_pool`). Returns the record."""
    from ..io import save_model

    draws, networks = drawn
    saved = {"grid": [dict(c) for c in grid], "draws": list(draws), "networks": list(networks)}
    recorded = save_model(out_path, saved if start is None else dict(saved, start=dict(start)))
    meta = {"method": "multiswag", **record, "grid": [dict(c) for c in grid], "device": device_info(),
            RECORD_KEY: recorded}  # fmt: skip
    if provenance is not None:
        meta["provenance"] = dict(provenance)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def load_multiswag_component(path: str | Path, networks: bool = False) -> Dict[str, Any]:
    """A component of :func:`write_multiswag_component`, or component 0 (the SWAG run's posterior file): its record
    with ``draws`` and ``start`` (the trained network's trainable tensors) added, each None where not written, and
    ``networks`` if asked (the file checked against the SHA-256 its record holds, :func:`stochattn.io.load_model`)."""
    from ..io import load_json, load_model

    saved = load_model(path)
    return {**load_json(Path(path).with_suffix(".json")), "draws": saved.get("draws"), "start": saved.get("start"),
            **({"networks": saved["networks"]} if networks else {})}  # fmt: skip


def multiswag_pool(data, start_net, first: Mapping[str, Any], components: Sequence[Mapping[str, Any]],
                   num_samples: int, progress: bool, widen: Optional[Mapping[str, Any]] = None,
                   component_net: Optional[Callable[[Mapping[str, Any]], torch.nn.Module]] = None
                   ) -> Dict[str, Any]:  # fmt: skip
    """MultiSWAG's run (:func:`multiswag_choose`) from component 0, the SWAG run (``first``: its record, with
    ``seed``, ``seconds`` and ``selection``, whose ``grid`` lists every candidate SWAG scored, widened ones
    included, and ``draws``, its share of the samples at each of them, :class:`KeptDraws`, with their
    ``draw_seconds``), and components 1..L-1 (``components``: :func:`load_multiswag_component`, drawn at that grid).
    Component 0's draws count as training, as every other component's do.

    ``widen`` (MultiSWAG's, SWAG's ``widen`` setting): where the pooled choice lies on the grid's edge, every
    component draws at the candidate beyond it here, component 0 from ``start_net`` and component ``l`` from its
    trained network ``component_net(components[l - 1])`` (its ``start`` tensors loaded into the network it was
    built as), each from its own seed: the draws its job would have made at that candidate."""
    from ..baselines.swag import component_counts

    grid = [dict(c) for c in first["selection"]["grid"]]
    for c in components:
        if c["grid"] != grid:
            raise ValueError(f"multiswag: component {c['component']} was drawn at {c['grid']}, component 0 (the SWAG "
                             f"run) scored {grid}: written under another SWAG run?")  # fmt: skip
    if [c["component"] for c in components] != list(range(1, len(components) + 1)):
        raise ValueError(f"MultiSWAG components must be 1..L-1 in order, got {[c['component'] for c in components]}")
    if widen and component_net is None and components:
        raise ValueError("multiswag: a widening needs every component's trained network (component_net)")
    if first.get("draws") is None or len(first["draws"]) != len(grid):
        raise ValueError("multiswag: component 0 (the SWAG run's posterior file) holds no draws at the "
                         f"{len(grid)} candidates SWAG scored (written before 2026-12-06, or without "
                         "multiswag_components): run SWAG's job again")  # fmt: skip
    counts = component_counts(num_samples, len(components) + 1)

    def extend(candidate: Dict[str, Any]) -> List[Any]:
        nets = [(start_net, int(first["seed"]))] + [(component_net(c), int(c["seed"])) for c in components]
        return [multiswag_draws(net, [candidate], data, seed, count, progress)[0][0]
                for (net, seed), count in zip(nets, counts)]  # fmt: skip

    seconds = float(first["seconds"]) + float(first["draw_seconds"]) + sum(float(c["seconds"]) for c in components)
    return multiswag_choose(data, grid, [first["draws"], *(c["draws"] for c in components)], seconds, num_samples,
                            widen=widen, extend=extend)  # fmt: skip


def to_original(values: np.ndarray, data: Mapping[str, Any]) -> np.ndarray:
    return values * data["y_std"] + data["y_mean"]


def write_run(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance,
              recorded: Sequence[str | Path] = ()) -> Dict[str, Any]:  # fmt: skip
    """samples.npz (original units) and meta.json of one run; meta.json records the SHA-256 of samples.npz and of
    ``recorded`` (files already written in ``out_dir``, e.g. SA's calibration.json), which their readers check
    (:func:`stochattn.io.verified`)."""
    arrays = {k: np.asarray(run[k].detach().cpu().numpy() if torch.is_tensor(run[k]) else run[k], dtype=np.float64)
              for k in ("point", "samples", "cal_point", "cal_samples")}
    for name, values in arrays.items():
        check_finite(name, method, values)
    save_npz(
        out_dir / "samples.npz",
        y=to_original(data["y_test"], data), point=to_original(arrays["point"], data),
        samples=to_original(arrays["samples"], data), cal_y=to_original(data["y_cal"], data),
        cal_point=to_original(arrays["cal_point"], data), cal_samples=to_original(arrays["cal_samples"], data),
        sigma_y=np.float64(data["y_std"]),
    )
    meta = {
        "method": method, "hyperparameters": dict(method_cfg), "model": dict(model), "train": dict(train),
        "num_samples": num_samples, "seed": seed, "seconds": run["seconds"], "device": device_info(),
        "packages": package_versions(), **run.get("extra", {}),
        RECORD_KEY: sha256_record(out_dir / "samples.npz", *recorded),
    }
    if provenance is not None:  # stochattn.provenance.stage_provenance: input hashes, code version
        meta["provenance"] = with_outputs(provenance, out_dir / "samples.npz")
    save_json(out_dir / "meta.json", meta)
    return meta


def write_runs(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance) -> Dict[str, Any]:
    """Write ``run`` to ``out_dir`` and its variants (SA's ``sa_match``) beside it, plus SA's ``calibration.json``;
    returns ``out_dir``'s meta."""
    out_dir = Path(out_dir)
    outputs = {method: (out_dir, run)}
    for name, variant in run.pop("variants", {}).items():  # sa_match beside sa
        variant["seconds"]["backbone_train"] = run["seconds"]["backbone_train"]
        outputs[name] = (out_dir.with_name(name), variant)
    calibration = out_dir / "calibration.json" if "calibration" in run else None
    if calibration is not None:  # first: the run's meta.json records its SHA-256
        save_json(calibration, run["calibration"])
    out_meta: Dict[str, Any] = {}
    for name, (run_dir, one) in outputs.items():
        if calibration is not None:
            one.setdefault("extra", {})["calibration"] = str(calibration)
        recorded = [calibration] if calibration is not None and run_dir == out_dir else []
        meta = write_run(name, run_dir, one, data, method_cfg, model, train, num_samples, seed, provenance, recorded)
        if name == method:
            out_meta = meta
    return out_meta
