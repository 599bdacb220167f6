"""The candidate grids of the baselines' validation searches, without torch: the workflow plans its jobs from them
(which candidate is the shared backbone, how many candidates a widening can add) where :mod:`.methods` and
:mod:`.uci` fit them.

A method's settings ``cfg`` give the base of every candidate; ``cfg["grid"]`` lists candidates as overrides of it
(no grid: one candidate); ``cfg["widen"]`` (:class:`stochattn.selection.Widening`) adds candidates beyond a chosen
edge of the grid.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from ..selection import Widening, grid_entries

# SWAG phase settings a grid entry may override (stochattn.baselines.swag.fit_swag). Defaults: Maddox et al.'s UCI
# recipe (SGD, momentum 0.9, a constant lr, one snapshot per epoch, rank 20, sampling scale 0.5 in their
# convention = 1.0 here); the LoRA slices default to SWAG-LoRA's (stochattn.experiments.adapters.SWAG_LORA_DEFAULTS)
SWAG_KEYS = ("lr", "epochs", "collect_every", "collect_per_epoch", "optimizer", "anneal_epochs", "start_lr",
             "max_rank", "batch_size", "weight_decay", "scale")  # fmt: skip


SWAG_DEFAULTS = {"collect_every": 1, "collect_per_epoch": 1, "optimizer": "sgd", "anneal_epochs": 0,
                 "start_lr": None, "max_rank": 20, "batch_size": 256, "weight_decay": 1e-5, "scale": 1.0}  # fmt: skip

# the dropout rates an MC Dropout candidate may set (build_ft_transformer's; the rest of the network is the backbone's)
MC_DROPOUT_KEYS = ("attention_dropout", "ffn_dropout", "residual_dropout")
# build_ft_transformer's default rates (rtdl's for 3 blocks; tests/test_experiments_uci.py checks they agree)
FT_TRANSFORMER_DROPOUT = {"attention_dropout": 0.2, "ffn_dropout": 0.1, "residual_dropout": 0.0}


def candidates(cfg: Mapping[str, Any], keys: tuple, defaults: Mapping[str, Any]) -> list:
    """The candidate settings of a method: ``cfg["grid"]`` entries (overrides) over ``cfg``'s own values over
    ``defaults``, restricted to ``keys``; no grid gives one candidate."""
    base = {k: cfg.get(k, defaults.get(k)) for k in keys}
    return [dict(base, **override) for override in grid_entries(cfg)]


def mc_dropout_grid(
    model: Mapping[str, Any], cfg: Mapping[str, Any]
) -> Tuple[List[Dict[str, float]], Dict[str, float]]:
    """``(grid, own)``: MC Dropout's candidates (``cfg["grid"]`` entries over ``MC_DROPOUT_KEYS``; no grid: the
    backbone's own rates alone) and the backbone's own rates ``own`` (``model``'s, else the builder's defaults): the
    candidate that is the shared backbone itself."""
    own = {k: float(model.get(k, FT_TRANSFORMER_DROPOUT[k])) for k in MC_DROPOUT_KEYS}
    unknown = sorted({k for c in cfg.get("grid", []) for k in c} - set(MC_DROPOUT_KEYS))
    if unknown:
        raise ValueError(f"mc_dropout grid: unknown keys {unknown}; a candidate sets {', '.join(MC_DROPOUT_KEYS)}")
    return candidates(cfg, MC_DROPOUT_KEYS, own), own


def search_grid(method: str, model: Mapping[str, Any], cfg: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The candidates of a UCI method's grid that a widening moves along (MC Dropout's rates, SWAG's and
    MultiSWAG's phase settings)."""
    if method == "mc_dropout":
        return mc_dropout_grid(model, cfg)[0]
    if method in ("swag", "multiswag"):
        return candidates(cfg, SWAG_KEYS, SWAG_DEFAULTS)
    raise ValueError(f"search_grid: {method!r} is not MC Dropout, SWAG or MultiSWAG")


def widening_bound(method: str, model: Mapping[str, Any], cfg: Mapping[str, Any]) -> int:
    """The most candidates ``method``'s widening (``cfg["widen"]``) can add to its grid, 0 without one
    (:meth:`stochattn.selection.Widening.max_added`; e.g. MC Dropout's rates reach the bounds 0.005 / 0.5 in one
    step from 0.01 or 0.4 / 0.3): a job's runtime request counts these trainings."""
    widen = Widening.from_config(cfg.get("widen"))
    return 0 if widen is None else widen.max_added(search_grid(method, model, cfg))


def pooled_widening_bound(cfg: Mapping[str, Any]) -> int:
    """The most candidates MultiSWAG's pooled choice can add beyond the grid SWAG scored (``cfg["widen"]``'s
    ``max_steps``, 0 without one): its pooling job draws every component at each, and its runtime request counts
    those SWAG phases (:func:`stochattn.experiments.methods.multiswag_choose`)."""
    widen = Widening.from_config(cfg.get("widen"))
    return 0 if widen is None else widen.max_steps


def needs_backbone(method: str, model: Mapping[str, Any], cfg: Mapping[str, Any], index: int) -> bool:
    """Whether candidate ``index`` of ``method``'s grid is the shared backbone (MC Dropout at the backbone's own
    rates): its job reads the trained backbone, the others train their own networks and do not wait for it."""
    if method != "mc_dropout":
        return False
    grid, own = mc_dropout_grid(model, cfg)
    return 0 <= index < len(grid) and grid[index] == own
