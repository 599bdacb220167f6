"""The six methods on a frozen foundation model with LoRA adapters, shared by the ETT (TimesFM) and ERA5 (ClimaX)
experiments: the configuration's adapter (best validation epoch, the backbone itself competing as epoch 0), and
SA / SWAG-LoRA / MultiSWAG-LoRA / IVON-LoRA / Contextual Dropout / HSA runs built from the stages of
:mod:`stochattn.experiments.methods`.

An experiment describes its model by an :class:`AdapterSetup`: ``fresh(seed)`` (the backbone with fresh LoRA
adapters, B = 0, wrapped as ``x (B, F) -> y (B, d)``; only the adapters trainable), ``add_hsa`` (HSA put into its
attention), ``dropout_sites`` (Contextual Dropout's sites) and optionally ``nu_template`` (where SA draws).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import torch

from ..io import RECORD_KEY, load_model, save_model
from ..training import TrainingClock, fit_regressor, predict
from . import methods

RUN_METHODS = ("sa", "swag", "multiswag", "ivon", "contextual_dropout", "hsa")
DERIVED_METHODS = {"sa_match": "sa"}
METHODS = ("sa", "sa_match", "swag", "multiswag", "ivon", "contextual_dropout", "hsa")
ADAPTED_METHODS = ("sa", "swag")  # start from the configuration's adapted model; the others train fresh adapters


@dataclass
class AdapterSetup:
    """How an experiment builds its networks (see the module docstring).

    fresh: seed -> fresh LoRA forecaster. add_hsa: (net, candidate settings, seed) -> None, installs HSA in place.
    dropout_sites: net -> names of the ``nn.Linear`` layers whose inputs Contextual Dropout masks. train: the
    adapter's training settings (lr, weight_decay, batch_size, max_epochs, patience). nu_template: nu -> the nu
    spec SA sets (default: the same nu in every registered attention module).
    """

    fresh: Callable[[int], torch.nn.Module]
    add_hsa: Callable[[torch.nn.Module, Mapping[str, Any], int], None]
    dropout_sites: Callable[[torch.nn.Module], list]
    train: Mapping[str, Any]
    nu_template: Optional[Callable[[int], Any]] = None
    adapter_path: Optional[str | Path] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def adapted(self) -> torch.nn.Module:
        """The configuration's adapted forecaster (a fresh one with the adapter of :func:`fit_adapter` loaded)."""
        if self.adapter_path is None:
            raise ValueError("AdapterSetup.adapter_path is not set")
        return load_adapter(self.fresh(0), self.adapter_path)


def fit_adapter(net: torch.nn.Module, data: Mapping[str, Any], train: Mapping[str, Any], *, seed: int, progress: bool,
                desc: str, checkpoint: Optional[str | Path] = None) -> Dict[str, Any]:  # fmt: skip
    """Train ``net``'s adapters (AdamW, MSE, early stopping on the ``val`` part); the best validation epoch is kept,
    and epoch 0 (the backbone, LoRA B = 0) competes: when no epoch beats it, the adapters are put back to their
    initial values. Returns the training record (best_epoch 0 = the backbone kept). ``checkpoint``: a file that
    makes the training resumable (see :func:`stochattn.training.fit_regressor`)."""
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    zero_val = predict(net, data["x_val"], 256).numpy()
    zero_rmse = float(np.sqrt(np.mean((zero_val - data["y_val"]) ** 2)))
    initial = {n: p.detach().clone() for n, p in net.named_parameters() if p.requires_grad}
    fit = fit_regressor(
        net, data["x_train"], data["y_train"], data["x_val"], data["y_val"], seed=seed, lr=float(train["lr"]),
        weight_decay=float(train.get("weight_decay", 0.0)), batch_size=int(train["batch_size"]),
        max_epochs=int(train["max_epochs"]), patience=train.get("patience"), eval_batch_size=256, progress=progress,
        desc=desc, checkpoint=checkpoint,
    )
    best_epoch, best_rmse = fit.best_epoch, fit.best_val_rmse
    if not best_rmse < zero_rmse:  # adaptation did not help on validation: keep the backbone (B = 0)
        with torch.no_grad():
            for n, p in net.named_parameters():
                if n in initial:
                    p.copy_(initial[n])
        best_epoch, best_rmse = 0, zero_rmse
    return {
        "trainable_parameters": int(sum(initial[n].numel() for n in names)), "best_epoch": best_epoch,
        "epochs_run": fit.epochs_run, "val_rmse_zero_shot": zero_rmse, "val_rmse_adapted": best_rmse,
        "history": fit.history, "seconds": fit.seconds,  # every attempt's training: the fit's clock resumes
    }


def _adapter_state(net: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {n: p.detach().cpu() for n, p in net.named_parameters() if p.requires_grad}


def save_adapter(net: torch.nn.Module, path: str | Path, **extra: Any) -> Dict[str, str]:
    """The trainable (adapter) tensors of ``net`` and ``extra`` -> ``path`` (torch file, atomic); returns its SHA-256
    record (:func:`stochattn.io.save_model`) for the ``<stem>.json`` the caller writes beside it."""
    return save_model(path, {"adapter": _adapter_state(net), **extra})


def load_adapter(net: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """Load the adapter of :func:`save_adapter` into a fresh forecaster ``net`` (checked against the SHA-256 in its
    ``<stem>.json``); eval mode."""
    ckpt = load_model(path)
    missing = set(ckpt["adapter"]) - {n for n, _ in net.named_parameters()}
    if missing:
        raise ValueError(f"{path}: adapter tensors {sorted(missing)[:3]} do not fit the backbone")
    net.load_state_dict(ckpt["adapter"], strict=False)
    return net.eval()


def adapter_checkpoint(path: str | Path) -> Dict[str, Any]:
    """The extra entries :func:`save_adapter` stored with the adapter (e.g. LoRA settings, horizon)."""
    ckpt = load_model(path)
    return {k: v for k, v in ckpt.items() if k != "adapter"}


# --------------------------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------------------------
def _sa(data, setup, cfg, num_samples, seed, progress):
    return methods.sa_runs(data, setup.adapted(), cfg, num_samples, seed, progress, nu_template=setup.nu_template)


SWAG_LORA_DEFAULTS = {"optimizer": "adamw", "anneal_epochs": 1, "collect_per_epoch": 5, "max_rank": 10}
"""SWAG-LoRA's recipe (Onal et al. 2024, fortuinlab/swag-lora): the adapter's AdamW continued from the trained
adapter, its rate annealed linearly (SWALR) from the adapter's training rate to the SWAG rate, then snapshots;
several per epoch here, where the adapters see few epochs (:func:`stochattn.baselines.swag.fit_swag`)."""


def swag_lora_cfg(cfg: Mapping[str, Any], setup: AdapterSetup) -> Dict[str, Any]:
    """``cfg`` over SWAG-LoRA's defaults: :data:`SWAG_LORA_DEFAULTS` and the adapter's own training rate (the
    annealing's start), batch size and weight decay.

    NOTE[DIFF]: the paper gives no SWAG-LoRA settings; its source (Onal et al.) collects one snapshot per epoch
    after 8 training epochs and keeps 5 for the low-rank term. With the few adapter epochs of these slices that
    gives 2-3 snapshots, so snapshots are taken several times per epoch (at least 10 in all) and rank 10 is kept."""
    lora = {**SWAG_LORA_DEFAULTS, "start_lr": float(setup.train["lr"]), "batch_size": int(setup.train["batch_size"]),
            "weight_decay": float(setup.train.get("weight_decay", 0.0))}  # fmt: skip
    return {**lora, **cfg}


def _swag_search(data, setup, cfg, num_samples, seed, progress):
    """SWAG-LoRA: SWAG over the adapter parameters, from the adapted model (the backbone frozen), in SWAG-LoRA's
    recipe (:func:`swag_lora_cfg`). ``setup.extra["on_swag_fitted"]`` (optional) sees the chosen posterior; the
    posterior itself is left in ``setup.extra["swag_fitted"]`` as ``(member, swag, candidate)``
    (:func:`write_swag_as_member`). ``setup.extra["swag_kept"]`` (optional, :func:`keep_member_draws`): the
    search's ``keep``."""
    hook = setup.extra.get("on_swag_fitted")

    def on_fitted(member, swag, candidate):
        setup.extra["swag_fitted"] = (member, swag, candidate)
        if hook is not None:
            hook(member, swag, candidate)

    return methods.swag_search(data, setup.adapted(), swag_lora_cfg(cfg, setup), num_samples, seed, progress,
                               on_fitted=on_fitted, keep=setup.extra.get("swag_kept"))  # fmt: skip


def _swag(data, setup, cfg, num_samples, seed, progress):
    return methods.search_run(_swag_search(data, setup, cfg, num_samples, seed, progress), data)


def train_multiswag_member(data, setup: AdapterSetup, cfg: Mapping[str, Any], component: int, seed: int,
                           progress: bool, grid: Sequence[Mapping[str, Any]], num_samples: int):  # fmt: skip
    """One MultiSWAG-LoRA member 1..L-1: a fresh adapter from its own seed (:func:`stochattn.experiments.methods.
    component_seed`) trained like the configuration's adapter, then its SWAG-LoRA phase and its share of the
    samples at every candidate of ``grid``. Returns ``((draws, networks), seconds)``
    (:func:`stochattn.experiments.methods.multiswag_draws`)."""
    from ..baselines.swag import component_counts
    from ..selection import ValidationSplit

    cfg = swag_lora_cfg(cfg, setup)
    count = component_counts(num_samples, int(cfg["components"]))[component]
    with TrainingClock() as clock:  # a resumed member's trainings count their earlier attempts
        member_seed = methods.component_seed(seed, component)
        net = setup.fresh(member_seed)
        methods.fit_on(net, ValidationSplit.from_prepared(data), setup.train, member_seed, progress,
                       f"multiswag {component + 1}/{cfg['components']}")  # fmt: skip
        drawn = methods.multiswag_draws(net, grid, data, member_seed, count, progress)
    return drawn, clock.seconds()


def keep_member_draws(setup: AdapterSetup, data, num_samples: int, seed: int, multiswag_components: int) -> None:
    """The SWAG-LoRA search of ``setup`` keeps MultiSWAG-LoRA's member-0 share of the samples (of L =
    ``multiswag_components`` members) at every candidate it fits (:class:`stochattn.experiments.methods.KeptDraws`,
    ``setup.extra["swag_kept"]``; written by :func:`write_swag_as_member`)."""
    from ..baselines.swag import component_counts

    count = component_counts(num_samples, int(multiswag_components))[0]
    setup.extra["swag_kept"] = methods.KeptDraws(data, seed, count)


def _multiswag(data, setup, cfg, num_samples, seed, progress):
    """MultiSWAG-LoRA: L adapters from their own initialisations, each with its own SWAG-LoRA phase
    (:func:`train_multiswag_member`), one SWAG setting for all chosen on the pooled validation samples
    (:func:`stochattn.experiments.methods.multiswag_pool`). Component 0 is the SWAG-LoRA run on the
    configuration's adapter. The workflow's files (``setup.extra["multiswag_members"]``: SWAG's member-0 record
    (:func:`write_swag_as_member`) then members 1..L-1 of :func:`write_multiswag_member`) are pooled as they are;
    without them the SWAG-LoRA search and the L-1 members run here (``setup.extra["adapter_seconds"]``: the
    configuration adapter's training, component 0's).

    NOTE[DIFF]: a member here is a LoRA fit, not a full network; each member's SWAG phase follows SWAG-LoRA's recipe
    (:func:`swag_lora_cfg`)."""
    paths = setup.extra.get("multiswag_members")
    if paths:
        first = methods.load_multiswag_component(paths[0])
        components = [methods.load_multiswag_component(p) for p in paths[1:]]
    else:
        keep_member_draws(setup, data, num_samples, seed, int(cfg["components"]))
        swag_run = _swag(data, setup, cfg, num_samples, seed, progress)
        kept, grid = setup.extra.pop("swag_kept"), swag_run["extra"]["selection"]["grid"]
        first = {"seed": seed, "selection": swag_run["extra"]["selection"], "draws": kept.in_grid(grid),
                 "seconds": float(setup.extra.get("adapter_seconds", 0.0)) + swag_run["seconds"]["train"],
                 "draw_seconds": kept.seconds}  # fmt: skip
        components = []
        for c in range(1, int(cfg["components"])):
            (draws, _), sec = train_multiswag_member(data, setup, cfg, c, seed, progress, grid, num_samples)
            components.append({"component": c, "grid": grid, "draws": draws, "seconds": sec})
    if first.get("component", 0) != 0:
        raise ValueError(f"MultiSWAG-LoRA's first file must be member 0 (the SWAG run), got {first['component']}")
    run = methods.multiswag_pool(data, setup.adapted(), first, components, num_samples, progress)
    if paths:
        run["extra"]["components"] = [str(p) for p in paths]
    return run


def write_multiswag_member(data, setup: AdapterSetup, cfg: Mapping[str, Any], out_path: str | Path, *,
                           component: int, seed: int, num_samples: int, first_path: str | Path,
                           progress: bool = True, provenance: Optional[Mapping[str, Any]] = None
                           ) -> Dict[str, Any]:  # fmt: skip
    """One MultiSWAG-LoRA member 1..L-1 (:func:`train_multiswag_member`, drawn at every candidate member 0, the
    SWAG-LoRA run, scored: its record ``first_path``) -> ``out_path`` and its record ``<stem>.json``
    (:func:`stochattn.experiments.methods.write_multiswag_component`). One job per member, so no cluster job trains
    more than one adapter (MultiSWAG-LoRA with L = 10 members is ~12 V100 days on ClimaX, the paper's figure)."""
    from ..io import load_json

    if not 0 < component < int(cfg["components"]):
        raise ValueError(f"component {component}: members 1..{int(cfg['components']) - 1} are trained here, member 0 "
                         f"is the SWAG-LoRA run (write_swag_as_member)")  # fmt: skip
    grid = load_json(first_path)["selection"]["grid"]
    drawn, seconds = train_multiswag_member(data, setup, cfg, component, seed, progress, grid, num_samples)
    record = {"component": component, "seed": methods.component_seed(seed, component), "seconds": seconds,
              "selection": {"drawn_at": f"the candidates member 0 scored ({first_path})"}}  # fmt: skip
    return methods.write_multiswag_component(out_path, grid, drawn, record, provenance)


def write_swag_as_member(out_path: str | Path, setup: AdapterSetup, run: Mapping[str, Any], *, seed: int,
                         adapter_seconds: float, provenance: Optional[Mapping[str, Any]] = None
                         ) -> Dict[str, Any]:  # fmt: skip
    """The SWAG-LoRA run's posterior (``setup.extra["swag_fitted"]``, left there by :func:`_swag`; ``run``: its
    run dict) and its share of the samples at every candidate it fitted (``setup.extra["swag_kept"]``,
    :func:`keep_member_draws`) -> MultiSWAG-LoRA's member 0 at ``out_path`` and its record ``<stem>.json``: seed,
    the SWAG selection (every candidate scored, which members 1..L-1 are drawn at), ``seconds``, the adapter's
    training and the SWAG phases (a member's cost: a training and a SWAG phase per candidate), and ``draw_seconds``.

    MultiSWAG (Wilson & Izmailov 2020) is an ensemble of SWAG runs from independent initialisations; the SWAG run
    on the configuration's adapter is one of them, so the workflow trains only members 1..L-1 (each from its own
    seed) instead of L. With the quick config's L = 3 that is a third of MultiSWAG-LoRA's trainings."""
    from ..io import save_json
    from ..provenance import device_info

    member, swag, candidate = setup.extra["swag_fitted"]
    kept, grid = setup.extra["swag_kept"], run["extra"]["selection"]["grid"]
    recorded = save_model(out_path, {"adapter": _adapter_state(member), "swag": swag.state_dict(),
                                     "candidate": dict(candidate), "grid": grid, "draws": kept.in_grid(grid)})
    meta = {"method": "multiswag", "component": 0, "seed": seed, "candidate": dict(candidate),
            "seconds": float(adapter_seconds) + float(run["seconds"]["train"]), "draw_seconds": kept.seconds,
            "device": device_info(),
            "selection": dict(run["extra"]["selection"], member_of="swag"), RECORD_KEY: recorded}  # fmt: skip
    if provenance is not None:
        meta["provenance"] = dict(provenance)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


IVON_LORA_DEFAULTS = {"lr": 0.03, "rescale_lr": False, "clip_radius": 1e-3, "beta2": 0.99999, "weight_decay": 0.0,
                      "hess_init": 1e-3}  # fmt: skip
"""IVON-LoRA's settings (Cong et al. 2024, team-approx-bayes/ivon-lora, ``ivon.sh`` / ``finetune.py``): lr 0.03
without IVON's lr rescaling, update clip 1e-3, beta2 0.99999, no weight decay, h0 3e-4 or 1e-3 with ess such that
ess x h0 lies in [1e3, 3e4] per task (the configs' grids span that range; chosen on validation CRPS)."""


def _ivon_search(data, setup, cfg, num_samples, seed, progress):
    """IVON-LoRA: a fresh adapter trained by IVON (posterior over the adapter parameters only), IVON-LoRA's
    settings (:data:`IVON_LORA_DEFAULTS`) under ``cfg``."""
    return methods.ivon_search(data, setup.fresh, setup.train, {**IVON_LORA_DEFAULTS, **cfg}, num_samples, seed,
                               progress)  # fmt: skip


def _ivon(data, setup, cfg, num_samples, seed, progress):
    return methods.search_run(_ivon_search(data, setup, cfg, num_samples, seed, progress), data)


def _hsa_search(data, setup, cfg, num_samples, seed, progress):
    """HSA put into the pretrained attention and trained (centroids + a fresh adapter)."""

    def build(c, s):
        net = setup.fresh(s)
        setup.add_hsa(net, c, s)
        for name, p in net.named_parameters():
            if name.endswith("centroids"):
                p.requires_grad_(True)
        return net

    return methods.hsa_search(data, build, setup.train, cfg, num_samples, seed, progress)


def _hsa(data, setup, cfg, num_samples, seed, progress):
    return methods.search_run(_hsa_search(data, setup, cfg, num_samples, seed, progress), data)


def _contextual_dropout_search(data, setup, cfg, num_samples, seed, progress):
    """Contextual Dropout (Fan et al. 2021) at the sites of ``setup.dropout_sites``, trained with a fresh adapter;
    masks sampled at test time."""
    return methods.contextual_dropout_search(data, setup.fresh, setup.dropout_sites, setup.train, cfg, num_samples,
                                             seed, progress)  # fmt: skip


def _contextual_dropout(data, setup, cfg, num_samples, seed, progress):
    return methods.search_run(_contextual_dropout_search(data, setup, cfg, num_samples, seed, progress), data)


_STAGES = {"sa": _sa, "swag": _swag, "multiswag": _multiswag, "ivon": _ivon, "contextual_dropout": _contextual_dropout,
           "hsa": _hsa}  # fmt: skip
# the methods that choose among candidates on the validation part: the workflow fits each candidate in its own job
# (write_candidate) and chooses in another (method_run with ``candidates``) when the grid has more than one
_SEARCHES = {"swag": _swag_search, "ivon": _ivon_search, "contextual_dropout": _contextual_dropout_search,
             "hsa": _hsa_search}  # fmt: skip
SEARCH_METHODS = tuple(_SEARCHES)


def check_method(method: str, num_samples: int, swag_member: Optional[str | Path] = None,
                 multiswag_components: Optional[int] = None) -> None:  # fmt: skip
    """ValueError for a method that is not run on its own or unknown, fewer than 2 samples, or a MultiSWAG member
    file asked of another method than SWAG (:func:`write_swag_as_member`) or without MultiSWAG's L
    (:func:`stochattn.experiments.methods.check_swag_member`)."""
    methods.check_swag_member(method, swag_member, multiswag_components)
    if method in DERIVED_METHODS:
        raise ValueError(f"{method!r} is written by the {DERIVED_METHODS[method]!r} run, not run on its own")
    if method not in _STAGES:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(RUN_METHODS)}")
    if not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")


def method_run(method: str, data: Mapping[str, Any], setup: AdapterSetup, cfg: Mapping[str, Any], num_samples: int,
               seed: int, progress: bool,
               candidates: Optional[Sequence[str | Path]] = None) -> Dict[str, Any]:  # fmt: skip
    """One method's run (arrays and seconds; :func:`stochattn.experiments.methods.write_runs` writes it). With
    ``candidates`` (the files of :func:`write_candidate`, in grid order) the search's fits are read from them and
    only the choice and the sampling run here (:func:`choose_candidate`)."""
    if candidates:
        return choose_candidate(method, data, setup, cfg, candidates, num_samples=num_samples, seed=seed,
                                progress=progress)  # fmt: skip
    check_method(method, num_samples)
    torch.manual_seed(seed)
    return _STAGES[method](data, setup, cfg, num_samples, seed, progress)


def method_search(method: str, data: Mapping[str, Any], setup: AdapterSetup, cfg: Mapping[str, Any], num_samples: int,
                  seed: int, progress: bool) -> methods.Search:  # fmt: skip
    """The :class:`~stochattn.experiments.methods.Search` of a method with a validation search (SEARCH_METHODS),
    set up as :func:`method_run` sets up its run (the same global seed first)."""
    check_method(method, num_samples)
    if method not in _SEARCHES:
        raise ValueError(f"{method!r} has no validation search; those that do: {', '.join(SEARCH_METHODS)}")
    torch.manual_seed(seed)
    return _SEARCHES[method](data, setup, cfg, num_samples, seed, progress)


def write_candidate(method: str, data: Mapping[str, Any], setup: AdapterSetup, cfg: Mapping[str, Any],
                    out_path: str | Path, *, index: int, num_samples: int, seed: int, progress: bool = True,
                    provenance: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:  # fmt: skip
    """Candidate ``index`` of ``method``'s grid fitted and scored on the validation part -> ``out_path`` and its
    record ``<stem>.json`` (:func:`stochattn.experiments.methods.write_candidate`: a candidate fitted alone equals
    the same candidate fitted after the others; the workflow's tests compare both paths' scores and samples)."""
    search = method_search(method, data, setup, cfg, num_samples, seed, progress)
    return methods.write_candidate(search, data, out_path, index=index, seed=seed, provenance=provenance)


def choose_candidate(method: str, data: Mapping[str, Any], setup: AdapterSetup, cfg: Mapping[str, Any],
                     paths: Sequence[str | Path], *, num_samples: int, seed: int,
                     progress: bool) -> Dict[str, Any]:  # fmt: skip
    """The run of ``method`` from its candidates' files (:func:`write_candidate`, in grid order):
    :func:`stochattn.experiments.methods.choose_candidate`, the choice the single-job search makes."""
    search = method_search(method, data, setup, cfg, num_samples, seed, progress)
    return methods.choose_candidate(search, data, paths)
