"""The UCI experiment (paper §5.3, App. C.3, App. E): one function per workflow stage.

Each function reads its inputs from files and writes its outputs atomically, so a Snakemake rule is one call:

    prepare          Gal split -> standardised train / val / cal / test (``prepared.npz``)
    train_backbone   the deterministic FT-Transformer shared by SA, MC Dropout and SWAG (``model.pt``)
    run_method       one method's S predictive samples on the test and calibration splits (``samples.npz``)
    fit_candidate    one candidate of IVON's or HSA's validation grid (its fitted network and validation scores)
    choose_candidate the run of run_method from those candidates (the same choice and samples)
    evaluate         native and temperature-scaled metrics of one run (``metrics.json``)

``prepare_sinusoid`` makes the 1-D noisy sinusoid of the teaser figure (panel c) in the same format, so the
same functions produce its predictive intervals.

Cost accounting (``meta.json["seconds"]``): ``train`` is the training the method adds on top of the shared
deterministic backbone (0 for SA and MC Dropout, the SWAG phase for SWAG, every component's full training plus
SWAG phase for MultiSWAG, the full training for IVON and HSA; for the baselines, every candidate of their
validation grid, see ``stochattn.selection`` and ``meta.json["selection"]``); ``calibrate`` is post-hoc tuning
(SA's BO); ``predict`` is drawing the samples. The backbone's own training time is recorded as ``backbone_train``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np
import torch

from ..backbones.ft_transformer import build_ft_transformer
from ..data.uci import fetch_uci, load_prepared, load_uci_split, prepare_split, save_prepared  # noqa: F401
from ..io import RECORD_KEY, load_json, load_model, save_json, save_model
from ..provenance import device_info, package_versions
from ..training import TrainingClock, fit_regressor, predict, resolve_device
from . import methods
from .grids import mc_dropout_grid
from .methods import SA_OPERATING_POINTS, component_seed  # noqa: F401 (part of this module's interface)

METHODS = ("sa", "sa_match", "mc_dropout", "swag", "multiswag", "ivon", "hsa")  # every run (method folder) name
# runs written by another method's run_method call (same calibration): sa_match is SA sampled at the BO surrogate's
# scale-matching nu, written beside the sa run (Algorithm 2's loss arg-min) by run_method("sa", ...)
DERIVED_METHODS = {"sa_match": "sa"}
RUN_METHODS = tuple(m for m in METHODS if m not in DERIVED_METHODS)  # what run_method accepts and a config lists
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
def _fit(model: torch.nn.Module, data: Mapping[str, Any], train: Mapping[str, Any], seed: int, device, progress: bool,
         desc: str, checkpoint: Optional[str | Path] = None):  # fmt: skip
    return fit_regressor(
        model, data["x_train"], data["y_train"], data["x_val"], data["y_val"], seed=seed,
        lr=train.get("lr", 1e-4), weight_decay=train.get("weight_decay", 1e-5), batch_size=train.get("batch_size", 256),
        max_epochs=train.get("max_epochs", 500), patience=train.get("patience", 16), device=device, progress=progress,
        desc=desc, checkpoint=checkpoint,
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
    provenance: Optional[Mapping[str, Any]] = None,
    checkpoint: Optional[str | Path] = None,
) -> Dict[str, Any]:
    """Train the deterministic FT-Transformer with early stopping on the validation part; save its state.

    ``provenance``: recorded as meta.json's ``provenance`` (stochattn.provenance.stage_provenance: input hashes,
    code version). ``checkpoint``: a file that makes the training resumable (:func:`stochattn.training.fit_regressor`;
    a rerun after a kill continues from it; a completed training's final state stays there for the caller to delete)."""
    data = load_prepared(prepared_path)
    dev = resolve_device(device)
    net = _build(data, model, seed)
    fit = _fit(net, data, train, seed, dev, progress, "backbone", checkpoint)
    recorded = save_model(model_path, {"state_dict": {k: v.cpu() for k, v in net.state_dict().items()},
                                       "model": dict(model)})  # fmt: skip
    val_rmse = float(np.sqrt(np.mean((predict(net, data["x_val"]).numpy() - data["y_val"]) ** 2)))
    meta = {
        "model": dict(model), "train": dict(train), "seed": seed, "best_epoch": fit.best_epoch,
        "epochs_run": fit.epochs_run, "val_rmse_standardised": val_rmse, "seconds": fit.seconds,
        "device": device_info(), "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = dict(provenance)
    save_json(meta_path, meta)
    return meta


def load_backbone(prepared: Mapping[str, Any], model_path: str | Path, device=None) -> torch.nn.Module:
    """The backbone of :func:`train_backbone`, checked against the SHA-256 in its meta.json (:func:`stochattn.io.
    load_model`), in eval mode on ``device``."""
    ckpt = load_model(model_path)
    net = build_ft_transformer(prepared["x_train"].shape[1], **ckpt["model"])
    net.load_state_dict(ckpt["state_dict"])
    return net.to(resolve_device(device)).eval()


# --------------------------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------------------------
def _to_original(values: np.ndarray, data: Mapping[str, Any]) -> np.ndarray:
    return values * data["y_std"] + data["y_mean"]


def _mc_dropout_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress, backbone) -> methods.Search:
    """MC Dropout (Gal & Ghahramani 2016): S passes with the network's dropout on; point = the deterministic pass.

    Candidates (:func:`stochattn.experiments.grids.mc_dropout_grid`) are networks trained with those dropout rates,
    chosen by the validation CRPS of S passes, as Gal's UCI protocol chose its dropout rate on validation data (by
    log-likelihood). The candidate with the backbone's own rates is the shared backbone itself (``backbone()``: it,
    loaded when first needed); every other is trained on the same parts with the same schedule (from this run's
    seed). No grid: the backbone alone. ``cfg["widen"]`` (optional): where the lowest or highest rate is chosen,
    rates beyond it are trained and scored too (:class:`stochattn.selection.Widening`)."""
    from ..baselines.mc_dropout import mc_dropout_samples
    from ..selection import CandidateFit

    grid, own = mc_dropout_grid(model_cfg, cfg)
    shared = {}  # the backbone, once a fit has used it

    def network(c):
        return _build(data, dict(model_cfg, **c), seed)

    def fit(c, split):  # sees the ValidationSplit only (never ``data``)
        if c == own:
            candidate = shared["net"] = backbone()
        else:
            candidate = network(c)
            methods.fit_on(candidate, split, train_cfg, seed, progress, f"mc dropout {c}")
            candidate.eval()
        val = mc_dropout_samples(candidate, split.x_val, num_samples, seed + 2)
        return CandidateFit(candidate, predict(candidate, split.x_val), val)

    def state(net):  # the backbone is not copied: the run loads it from its own file
        return {} if net is shared.get("net") else methods.trainable_state(net)

    def load(state, c):
        return backbone() if c == own else methods.load_trainable(network(c), state).eval()

    def finish(sel, train_seconds):
        chosen, t1 = sel.result, time.perf_counter()
        draw = lambda x, s: mc_dropout_samples(chosen, x, num_samples, s, progress=progress)  # noqa: E731
        samples, cal_samples = draw(data["x_test"], seed), draw(data["x_cal"], seed + 1)
        return {
            "point": predict(chosen, data["x_test"]), "samples": samples, "cal_point": predict(chosen, data["x_cal"]),
            "cal_samples": cal_samples,
            "seconds": {"train": train_seconds, "calibrate": 0.0, "predict": time.perf_counter() - t1},
            "extra": {"selection": sel.record},
        }

    return methods.Search("mc_dropout", grid, fit, finish, state, load, widen=cfg.get("widen"))


def _mc_dropout(data, net, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """MC Dropout's run on the backbone ``net``, every candidate fitted here (:func:`_mc_dropout_search`)."""
    search = _mc_dropout_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress, lambda: net)
    return methods.search_run(search, data)


def train_multiswag_component(
    prepared_path: str | Path,
    out_path: str | Path,
    *,
    component: int,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    seed: int,
    num_samples: int,
    first_path: str | Path,
    device: Optional[str] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """One MultiSWAG component 1..L-1 (Wilson & Izmailov 2020): a backbone trained from its own initialisation,
    then its own SWAG phase and its share of the samples at every candidate component 0 (the SWAG run on the
    shared backbone, its meta ``first_path``) scored (:func:`stochattn.experiments.methods.multiswag_draws`);
    MultiSWAG's run chooses one setting for all on their pooled validation samples. Writes ``out_path`` (torch:
    the draws) and its record ``<stem>.json``; returns the record. One job per component, so no cluster job trains
    more than one network (MultiSWAG on protein is otherwise ~15 backbone trainings in one job)."""
    from ..baselines.swag import component_counts
    from ..selection import ValidationSplit

    n = int(method_cfg["components"])
    if not 0 < component < n:
        raise ValueError(f"component {component}: components 1..{n - 1} are trained here, component 0 is the SWAG "
                         f"run (run_method('swag', ..., swag_member=...))")  # fmt: skip
    data = load_prepared(prepared_path)
    data["source"] = str(prepared_path)
    grid = load_json(first_path)["selection"]["grid"]
    with TrainingClock() as clock:  # a resumed component's trainings count their earlier attempts
        member_seed = component_seed(seed, component)
        net, split = _build(data, model, member_seed), ValidationSplit.from_prepared(data)
        methods.fit_on(net, split, train, member_seed, progress, f"multiswag {component + 1}/{n}")
        start = methods.trainable_state(net)
        drawn = methods.multiswag_draws(net, grid, data, member_seed, component_counts(num_samples, n)[component],
                                        progress)  # fmt: skip
    record = {"component": component, "seed": member_seed, "model": dict(model), "train": dict(train),
              "hyperparameters": dict(method_cfg), "seconds": clock.seconds(), "packages": package_versions(),
              "selection": {"drawn_at": f"the candidates component 0 scored ({first_path})"}}  # fmt: skip
    return methods.write_multiswag_component(out_path, grid, drawn, record, provenance, start=start)


def _write_component(out_path, member, swag, candidate, kept, *, component, seed, model, train, method_cfg,
                     selection, seconds, provenance) -> Dict[str, Any]:  # fmt: skip
    """MultiSWAG's component 0 file (torch: network state, SWAG posterior, SWAG settings, and the share of the
    samples ``kept`` drew at every candidate of ``selection["grid"]``, :class:`methods.KeptDraws`) and its record
    ``<stem>.json`` (with the draws' ``draw_seconds``); returns the record."""
    grid = selection["grid"]
    recorded = save_model(out_path, {"state_dict": {k: v.cpu() for k, v in member.state_dict().items()},
                                     "model": dict(model), "swag": swag.state_dict(), "candidate": dict(candidate),
                                     "grid": grid, "draws": kept.in_grid(grid)})  # fmt: skip
    meta = {
        "method": "multiswag", "component": component, "seed": seed, "model": dict(model),
        "train": dict(train), "hyperparameters": dict(method_cfg), "candidate": dict(candidate),
        "selection": selection, "seconds": seconds, "draw_seconds": kept.seconds, "device": device_info(),
        "packages": package_versions(), RECORD_KEY: recorded,
    }
    if provenance is not None:
        meta["provenance"] = dict(provenance)
    save_json(Path(out_path).with_suffix(".json"), meta)
    return meta


def _load_component(data: Mapping[str, Any], path: str | Path):
    """(network, SWAG posterior, SWAG settings) of a component written by :func:`train_multiswag_component`."""
    from ..baselines.swag import SWAG

    ckpt = load_model(path)
    net = build_ft_transformer(data["x_train"].shape[1], **ckpt["model"])
    net.load_state_dict(ckpt["state_dict"])
    return net.eval(), SWAG.from_state_dict(ckpt["swag"]), ckpt["candidate"]


def multiswag_component_networks(data: Mapping[str, Any], path: str | Path, candidate: Mapping[str, Any]):
    """The last iterate and the SWA mean (FT-Transformers in eval mode) of a component file of
    :func:`train_multiswag_component` at ``candidate``, or None where that SWAG phase diverged. A candidate
    MultiSWAG's widening added (not in the file's grid): its phase repeated from the component's trained network at
    the component's seed, as the run drew it (:func:`stochattn.experiments.methods.multiswag_pool`)."""
    from ..selection import ValidationSplit

    component = methods.load_multiswag_component(path, networks=True)
    if dict(candidate) in component["grid"]:
        networks = component["networks"][component["grid"].index(dict(candidate))]
        if networks is None:
            return None
        return tuple(_component_loaded(data, component, networks[k]).eval() for k in ("last", "swa_mean"))
    try:
        split = ValidationSplit.from_prepared(data)
        member, swag = methods.swag_phase(component_network(data, component), candidate, split,
                                          int(component["seed"]), False)  # fmt: skip
    except FloatingPointError:
        return None
    return member.eval(), methods.swa_mean_network(member, swag).eval()


def component_network(data: Mapping[str, Any], component: Mapping[str, Any]) -> torch.nn.Module:
    """The trained network of a MultiSWAG component 1..L-1 (:func:`methods.load_multiswag_component` of a
    :func:`train_multiswag_component` file): built as its job built it, its ``start`` tensors loaded."""
    if component.get("start") is None:
        raise ValueError(f"MultiSWAG component {component['component']}: its file holds no trained network (written "
                         "before MultiSWAG's choice could widen SWAG's grid); run its job again")  # fmt: skip
    return _component_loaded(data, component, component["start"])


def _component_loaded(data: Mapping[str, Any], component: Mapping[str, Any], state) -> torch.nn.Module:
    """A network built as a MultiSWAG component's job built it, ``state`` (trainable tensors) loaded."""
    return methods.load_trainable(_build(data, component["model"], int(component["seed"])), state)


def _multiswag(data, backbone, components, num_samples, progress, widen=None) -> Dict[str, Any]:
    """MultiSWAG from component 0, the SWAG run on ``backbone`` (``components[0]``: its posterior, whose record
    holds its seed, seconds and scored candidates), and components 1..L-1 (``components[1:]``:
    :func:`train_multiswag_component`'s files): :func:`stochattn.experiments.methods.multiswag_pool`, its choice
    widened beyond the grid's edge as SWAG's is (``widen``)."""
    first = methods.load_multiswag_component(components[0])
    if first["component"] != 0:
        raise ValueError(f"MultiSWAG's first file must be component 0 (the SWAG run), got {first['component']}")
    run = methods.multiswag_pool(data, backbone, first, [methods.load_multiswag_component(p) for p in components[1:]],
                                 num_samples, progress, widen=widen,
                                 component_net=lambda c: component_network(data, c))  # fmt: skip
    run["extra"]["components"] = [str(p) for p in components]
    return run


def _ivon_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> methods.Search:
    """IVON trained from scratch on the FT-Transformer (:func:`stochattn.experiments.methods.ivon_search`)."""
    build = lambda s: build_ft_transformer(data["x_train"].shape[1], seed=s, **dict(model_cfg))  # noqa: E731
    return methods.ivon_search(data, build, train_cfg, cfg, num_samples, seed, progress)


def _ivon(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """IVON's run, every candidate fitted here (:func:`stochattn.experiments.methods.ivon_run`)."""
    return methods.search_run(_ivon_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress), data)


def _hsa_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> methods.Search:
    """HSA FT-Transformer trained from scratch (:func:`stochattn.experiments.methods.hsa_search`)."""
    from ..baselines.hsa import hsa_ft_transformer

    def build(c, s):
        return hsa_ft_transformer(data["x_train"].shape[1], n_centroids=int(c["n_centroids"]), tau1=c["tau1"],
                                  tau2=c["tau2"], seed=s, **dict(model_cfg))  # fmt: skip

    return methods.hsa_search(data, build, train_cfg, cfg, num_samples, seed, progress)


def _hsa(data, model_cfg, train_cfg, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """HSA's run, every candidate fitted here (:func:`stochattn.experiments.methods.hsa_run`)."""
    return methods.search_run(_hsa_search(data, model_cfg, train_cfg, cfg, num_samples, seed, progress), data)


# the methods that train their candidates and choose among them on the validation part: where the grid has more than
# one candidate, the workflow fits each in its own job (fit_candidate) and chooses in another (choose_candidate,
# which also fits a widening search's candidates beyond the grid's edge); a cluster fits the grid in parallel.
# MC Dropout's candidate with the backbone's own rates is the backbone (only its job reads it: needs_backbone)
_SEARCHES = {"mc_dropout": _mc_dropout_search, "ivon": _ivon_search, "hsa": _hsa_search}
SEARCH_METHODS = tuple(_SEARCHES)


def _search(method, prepared_path, model, train, method_cfg, num_samples, seed, progress, backbone_path, device):
    """``(data, search)``: ``method``'s :class:`~stochattn.experiments.methods.Search` on the prepared split, set up
    as :func:`run_method` sets up its run (the same global seed first); the backbone (``backbone_path``) is loaded
    only where a candidate is the backbone."""
    if method not in _SEARCHES:
        raise ValueError(f"{method!r} has no validation search run one candidate a job; those that do: "
                         f"{', '.join(SEARCH_METHODS)}")  # fmt: skip
    if not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")
    data = load_prepared(prepared_path)
    data["source"] = str(prepared_path)  # names the data set in the selection errors
    torch.manual_seed(seed)
    if method not in BACKBONE_METHODS:
        return data, _SEARCHES[method](data, model, train, method_cfg, num_samples, seed, progress)
    loaded = {}

    def backbone():
        if backbone_path is None:
            raise ValueError(f"{method}: the candidate with the backbone's own settings needs backbone_path")
        if "net" not in loaded:
            loaded["net"] = load_backbone(data, backbone_path, device)
        return loaded["net"]

    return data, _SEARCHES[method](data, dict(model), train, method_cfg, num_samples, seed, progress, backbone)


def fit_candidate(
    method: str,
    prepared_path: str | Path,
    out_path: str | Path,
    *,
    index: int,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    backbone_path: Optional[str | Path] = None,
    device: Optional[str] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Candidate ``index`` of ``method``'s validation grid (MC Dropout, IVON or HSA) -> ``out_path`` (its fitted
    network; MC Dropout's backbone candidate: none, the backbone at ``backbone_path`` is it) and ``<stem>.json`` (its
    validation scores; :func:`stochattn.experiments.methods.write_candidate`); ``seed``: the method run's.
    :func:`choose_candidate` makes the run from all of them: the run :func:`run_method` makes."""
    data, search = _search(method, prepared_path, model, train, method_cfg, num_samples, seed, progress,
                           backbone_path, device)  # fmt: skip
    return methods.write_candidate(search, data, out_path, index=index, seed=seed, provenance=provenance)


def choose_candidate(
    method: str,
    prepared_path: str | Path,
    out_dir: str | Path,
    candidates: Sequence[str | Path],
    *,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    backbone_path: Optional[str | Path] = None,
    device: Optional[str] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """``method``'s run from its fitted ``candidates`` (:func:`fit_candidate`'s files, in grid order): the
    validation choice (MC Dropout: after training here the rates a widening adds), the winner sampled on the test
    and calibration parts -> ``samples.npz`` and ``meta.json`` in ``out_dir``, as :func:`run_method` writes them
    (``train`` seconds: the candidates' fits; MC Dropout's ``backbone_train``: the backbone's, from the meta.json
    beside ``backbone_path``, as its single job records). Returns the meta."""
    if method in BACKBONE_METHODS and backbone_path is None:
        raise ValueError(f"{method}: its run needs backbone_path (the trained deterministic FT-Transformer)")
    data, search = _search(method, prepared_path, model, train, method_cfg, num_samples, seed, progress,
                           backbone_path, device)  # fmt: skip
    run = methods.choose_candidate(search, data, candidates)
    backbone_meta = None if method not in BACKBONE_METHODS else load_json(Path(backbone_path).with_name("meta.json"))
    run["seconds"]["backbone_train"] = 0.0 if backbone_meta is None else backbone_meta["seconds"]
    return methods.write_runs(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance)


def _sa(data, net, cfg, num_samples, seed, progress) -> Dict[str, Any]:
    """SA on the shared backbone (:func:`stochattn.experiments.methods.sa_runs`)."""
    return methods.sa_runs(data, net, cfg, num_samples, seed, progress)


def _swag(data, net, cfg, num_samples, seed, progress, fitted=None, keep=None) -> Dict[str, Any]:
    """SWAG from the shared backbone (:func:`stochattn.experiments.methods.swag_run`); ``fitted`` (a dict, optional)
    receives the chosen posterior as ``member``, ``swag``, ``candidate``; ``keep``: its search's ``keep``."""
    on_fitted = None if fitted is None else lambda m, s, c: fitted.update(member=m, swag=s, candidate=c)
    return methods.swag_run(data, net, cfg, num_samples, seed, progress, on_fitted=on_fitted, keep=keep)


def _swag_component0(data, net, backbone_meta, swag_member, multiswag_components, *, model, train, method_cfg,
                     num_samples, seed, progress, provenance) -> Dict[str, Any]:  # fmt: skip
    """SWAG's run on the backbone ``net``; with ``swag_member`` its posterior is also written there as component 0
    of a MultiSWAG of ``multiswag_components`` (:func:`_write_component`, its record the SWAG selection: every
    candidate scored, at which components 1..L-1 are drawn, and its share of the samples drawn at each of them),
    whose ``seconds`` are the backbone's training and the SWAG phases."""
    from ..baselines.swag import component_counts

    fitted: Dict[str, Any] = {}
    kept = None
    if swag_member is not None:
        kept = methods.KeptDraws(data, seed, component_counts(num_samples, int(multiswag_components))[0])
    run = _swag(data, net, method_cfg, num_samples, seed, progress, fitted, kept)
    if swag_member is not None:
        _write_component(swag_member, fitted["member"], fitted["swag"], fitted["candidate"], kept, component=0,
                         seed=seed, model=model, train=train, method_cfg=method_cfg,
                         selection=dict(run["extra"]["selection"], member_of="swag"),
                         seconds=float(backbone_meta["seconds"]) + float(run["seconds"]["train"]),
                         provenance=provenance)  # fmt: skip
    return run


def run_method(
    method: str,
    prepared_path: str | Path,
    out_dir: str | Path,
    *,
    backbone_path: Optional[str | Path] = None,
    components: Optional[Sequence[str | Path]] = None,
    model: Mapping[str, Any],
    train: Mapping[str, Any],
    method_cfg: Mapping[str, Any],
    num_samples: int,
    seed: int,
    swag_member: Optional[str | Path] = None,
    multiswag_components: Optional[int] = None,
    device: Optional[str] = None,
    progress: bool = True,
    provenance: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Run one method on one prepared split; write ``samples.npz`` and ``meta.json`` (and ``calibration.json``).

    samples.npz (original units): ``y`` (n,), ``point`` (n,), ``samples`` (S, n) on the test split; ``cal_y``,
    ``cal_point``, ``cal_samples`` on the calibration split (for post-hoc scaling); ``sigma_y`` (training-part std).
    ``"multiswag"`` pools component 0, the SWAG run on the backbone (``backbone_path``), and components 1..L-1
    (:func:`train_multiswag_component`): ``components``, the SWAG run's posterior file then theirs, in order; when
    None all L run here first, into ``<out_dir>/components/``. ``"swag"`` with ``swag_member`` also
    writes its posterior there as MultiSWAG's component 0 (the SWAG run is one of MultiSWAG's independently
    initialised SWAG runs; the workflow then trains components 1..L-1 only); its ``seconds`` are the backbone's
    training and the SWAG phases, and it holds component 0's share of the samples of a MultiSWAG of
    ``multiswag_components`` (L) at every candidate SWAG scored (:class:`stochattn.experiments.methods.KeptDraws`).

    ``"sa"`` calibrates nu once and writes two runs: ``out_dir`` at Algorithm 2's loss arg-min (with
    ``calibration.json``) and ``<out_dir>/../sa_match`` at the surrogate's scale-matching nu; each meta.json
    records its ``nu``, ``operating_point``, both nus and the shared ``calibration`` path. Returns ``out_dir``'s
    meta.
    """
    if method in DERIVED_METHODS:
        raise ValueError(f"{method!r} is written by run_method({DERIVED_METHODS[method]!r}, ...), not run on its own")
    if method not in RUN_METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(RUN_METHODS)}")
    if not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")
    methods.check_swag_member(method, swag_member, multiswag_components)
    data = load_prepared(prepared_path)
    data["source"] = str(prepared_path)  # names the data set in the baselines' selection errors
    torch.manual_seed(seed)
    if method in BACKBONE_METHODS:
        if backbone_path is None:
            raise ValueError(f"method {method!r} needs backbone_path (the trained deterministic FT-Transformer)")
        net = load_backbone(data, backbone_path, device)
        backbone_meta = load_json(Path(backbone_path).with_name("meta.json"))
        if method == "mc_dropout":
            run = _mc_dropout(data, net, dict(model), train, method_cfg, num_samples, seed, progress)
        elif method == "swag":
            run = _swag_component0(data, net, backbone_meta, swag_member, multiswag_components, model=model,
                                   train=train, method_cfg=method_cfg, num_samples=num_samples, seed=seed,
                                   progress=progress, provenance=provenance)  # fmt: skip
        else:
            run = _sa(data, net, method_cfg, num_samples, seed, progress)
        run["seconds"]["backbone_train"] = backbone_meta["seconds"]
    elif method == "multiswag":
        if backbone_path is None:
            raise ValueError("multiswag needs backbone_path: its component 0 is the SWAG run on the shared backbone")
        n = int(method_cfg["components"])
        net = load_backbone(data, backbone_path, device)
        if components is None:  # run them here, one after the other (the workflow runs one job per component)
            components = [Path(out_dir) / "components" / f"{c}.pt" for c in range(n)]
            _swag_component0(data, net, load_json(Path(backbone_path).with_name("meta.json")), components[0], n,
                             model=model, train=train, method_cfg=method_cfg, num_samples=num_samples, seed=seed,
                             progress=progress, provenance=provenance)  # fmt: skip
            for c, path in enumerate(components[1:], 1):
                train_multiswag_component(
                    prepared_path, path, component=c, model=model, train=train, method_cfg=method_cfg, seed=seed,
                    num_samples=num_samples, first_path=components[0].with_suffix(".json"), device=device,
                    progress=progress, provenance=provenance,
                )
        if len(components) != n:
            raise ValueError(f"multiswag: method_cfg says {n} components, got {len(components)} paths")
        run = _multiswag(data, net, components, num_samples, progress, method_cfg.get("widen"))
        run["seconds"]["backbone_train"] = 0.0  # component 0's seconds (the SWAG run's) count the backbone
    else:
        run = {"ivon": _ivon, "hsa": _hsa}[method](data, model, train, method_cfg, num_samples, seed, progress)
        run["seconds"]["backbone_train"] = 0.0
    return methods.write_runs(method, out_dir, run, data, method_cfg, model, train, num_samples, seed, provenance)
