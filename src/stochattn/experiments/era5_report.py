"""Tables and figures of the ERA5 / ClimaX experiment (paper §6.2, §7, App. "Additional ClimaX Results") over the
shared machinery of :mod:`stochattn.report`, :mod:`stochattn.figures` and :mod:`stochattn.experiments.uci_figures`,
from the files of :mod:`stochattn.experiments.era5` (units m^2 s^-2 throughout for Z500; another target's tables
and captions name its own: :func:`for_target`).

Tables (``TableSpec`` constants; ``spec.build(...)`` -> tidy rows, then :func:`stochattn.report.write_table`):

    CLIMAX_SUMMARY      Table climax_summary, extended: ACC of the ensemble mean and of single samples, latitude-
                        weighted RMSE of the ensemble mean, native and scaled W1, PI-95 width at SA's coverage,
                        native PI-95 coverage; build(runs: {method: (metrics.json, spatial.json)})
    CLIMAX_CRPS_DECOMP  Table climax_crps_decomp: CRPS, E|X - y|, 0.5 E|X - X'|, Energy Score (native), plus SA at
                        the score-oriented nu; build(runs, analyses=an.json or None)
    SWAG_SWEEP_VAL      Table swag_sweep_val: val RMSE, W1, Cov@95, Sharp@95 per SWAG variance scale;
                        build(sweep: scale_sweep.json)
    SWAG_SWEEP_TEST     Table swag_sweep_test: the test values at the best-val-RMSE ("compromise") and the
                        best-val-W1 ("val.-selected") scales; build(sweep)
    CLIMAX_SKILL        deterministic skill of the backbone (zero-shot), the LoRA-adapted model, persistence and
                        climatology (latitude-weighted RMSE, ACC); build(adapter: adapter.json)

The tables follow the shared layout (rows = one row label in the tidy ``dataset`` slot, column groups = metrics,
columns = methods or SWAG operating points in the ``method`` slot), so the best cell of each metric is bold within
its group, as the paper bolds the best method of each column.

Figures (``f(..., out_base, marker) -> [png, pdf]``; ``marker`` the one line of :func:`stochattn.figures.figure_marker`
where a stand-in or reduction applies, the full caption staying in the report and the ``.prov.json`` sidecar):

    pit_combined      Fig. climax_pit_combined: (a) native PIT per method, (b) baselines temperature-scaled, SA native
    cost_figure       Fig. climax_cost: adaptation wall clock per method (SA: its BO alone; log axis)
    sharpness_figure  Figs. climax_sharpness / sharp25 / sharp50 / sharp75 (and the three combined): PI widths /
                      SA's mean width per (forecast, cell), baselines temperature-scaled (the mean: ratio of means)
    latency_figure    Fig. latency_appendix: per-pass seconds vs nu, deterministic line, BO-selected nu
    bo_sensitivity    Fig. bo_sensitivity: normalised surrogate loss f(nu) / f* per BO seed (posterior draws)
    bo_beta_hist      Fig. bo_beta_hist: beta* = ln nu_cont over the posterior draws of every seed
    nu_ablation       Fig. nu_ablation: CRPS and Energy Score vs nu (cal), PIT at both operating points (test)
    teaser_maps       teaser (a): truth, forecast and bias maps of one test forecast
    teaser_axes       teaser (b): accuracy, calibration, sharpness and cost per method, measured
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from stochattn.data.era5 import ROW, row_label
from stochattn.extras import requires
from stochattn.experiments import uci_figures
from stochattn.experiments.evaluate import REFERENCE
from stochattn.figures import (
    PALETTE,
    PathLike,
    draw_marker,
    draw_pit_grid,
    draw_sharpness,
    format_seconds,
    method_color,
    new_figure,
    save_figure,
    subplot_grid,
)
from stochattn.io import load_json, load_npz
from stochattn.metrics import calibrated_coverage, lat_weighted_rmse
from stochattn.report import (
    COST_GROUPS,
    ColumnGroup,
    TableSpec,
    cost_rows,
    as_float,
    mean_row,
    method_label,
    method_order,
    nu_rows,
    tidy_frame,
)

with requires("workflow"):
    import pandas as pd

__all__ = [
    "ROW",
    "row_label",
    "SKILL_COLUMNS",
    "summary_table",
    "crps_decomp_table",
    "swag_sweep_val_table",
    "swag_sweep_test_table",
    "skill_table",
    "CLIMAX_SUMMARY",
    "CLIMAX_CRPS_DECOMP",
    "SWAG_SWEEP_VAL",
    "SWAG_SWEEP_TEST",
    "CLIMAX_SKILL",
    "ERA5_TABLE_SPECS",
    "CLIMAX_SUMMARY_CASES",
    "for_target",
    "summary_cases_table",
    "total_seconds",
    "beta_star",
    "pit_combined",
    "cost_figure",
    "sharpness_figure",
    "latency_figure",
    "bo_sensitivity",
    "bo_beta_hist",
    "nu_ablation",
    "teaser_maps",
    "teaser_axes",
]

_PAPER_UNITS = ("m^2 s^-2", r"m$^2$\,s$^{-2}$")
_PAPER_TARGET = ("Z500", r"$Z_{500}$")


def for_target(spec: TableSpec, label: str = "Z500", units: str = "m^2 s^-2") -> TableSpec:
    """``spec`` with its descriptions naming the target ``label`` (e.g. ``T850``) and its ``units`` (e.g. ``K``)
    instead of the paper's Z500 and m^2 s^-2; ``spec`` itself for Z500."""
    if (label, units) == (_PAPER_TARGET[0], _PAPER_UNITS[0]):
        return spec
    md = spec.description.replace(_PAPER_UNITS[0], units).replace(_PAPER_TARGET[0], label)
    tex_units = r"\,".join(f"{b}$^{{{e}}}$" if e else b.replace("%", r"\%")
                           for b, _, e in (u.partition("^") for u in units.split()))  # fmt: skip
    tex = spec.latex_description.replace(_PAPER_UNITS[1], tex_units).replace(_PAPER_TARGET[1], label)
    return replace(spec, description=md, latex_description=tex)
SKILL_COLUMNS: dict[str, str] = {
    "backbone": "backbone (zero-shot)",
    "adapted": "LoRA-adapted",
    "persistence": "persistence",
    "climatology": "climatology",
}
"""adapter.json ``test_skill`` key -> column of :data:`CLIMAX_SKILL`, in column order."""
UNITS = r"m$^2$ s$^{-2}$"


# --------------------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------------------
def _run_files(runs: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{method: (metrics.json, spatial.json)}`` from pairs or ``{"metrics": ..., "spatial": ...}`` dicts."""
    if not isinstance(runs, Mapping) or not runs:
        raise TypeError("runs must be a non-empty mapping method -> (metrics.json, spatial.json)")
    out = {}
    for method, entry in runs.items():
        if isinstance(entry, Mapping):
            entry = (entry["metrics"], entry["spatial"])
        if isinstance(entry, (str, bytes, os.PathLike)) or len(entry) != 2:
            raise ValueError(f"runs[{method!r}] must be (metrics.json, spatial.json), got {entry!r}")
        out[method] = (entry[0], entry[1])
    return out


def _load(value: Any) -> Any:
    """A JSON file's content, or ``value`` itself when it is already loaded (a mapping)."""
    return value if isinstance(value, Mapping) else load_json(value)


def _sa_or_matched(method: str, metrics: Mapping[str, Any], key: str) -> float:
    """``native[key]`` for SA (the coverage reference), ``matched[key]`` (conformally matched to SA's cal coverage)
    for every other run; NaN where the run has no matched block."""
    if method == REFERENCE:
        return as_float(metrics["native"][key])
    return as_float((metrics.get("matched") or {}).get(key))


def _sa_or_scaled(method: str, metrics: Mapping[str, Any], key: str) -> float:
    """``native[key]`` for SA, ``scaled[key]`` (temperature-scaled on the cal pairs, the paper's post-scaling)
    for every other run."""
    return as_float(metrics["native" if method == REFERENCE else "scaled"][key])


def _scaled_w1(method: str, metrics: Mapping[str, Any]) -> float:
    """Temperature-scaled W1 (SA: native, as the paper reports it)."""
    return as_float(metrics["native" if method == REFERENCE else "scaled"]["w1"])


def total_seconds(meta: Mapping[str, Any] | PathLike) -> float:
    """Total wall clock of a run: the sum of its ``seconds`` (train, calibrate, predict, backbone_train; the
    adapter's training for the methods that start from the shared adapted model)."""
    seconds = _load(meta).get("seconds") or {}
    return float(sum(v for v in seconds.values() if isinstance(v, (int, float)) and not isinstance(v, bool)))


# --------------------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------------------
def summary_table(runs: Mapping[str, Any], row: str = ROW) -> pd.DataFrame:
    """Tidy rows of :data:`CLIMAX_SUMMARY` per method (``runs``: ``{method: (metrics.json, spatial.json)}``):
    ``acc_ensemble_mean``, ``acc_single_sample``, ``rmse_ensemble_mean`` (spatial.json), ``w1_native``,
    ``w1_scaled`` (SA native), ``width_95_scaled`` (the paper's PI-95: SA native, others temperature-scaled),
    ``width_95_matched`` (beyond the paper: SA native, others at SA's coverage), ``coverage_95_native`` and,
    beyond the paper, ``coverage_95_calibrated`` (what a perfectly calibrated ensemble of the run's S members
    covers with the same interpolated PI-95, :func:`stochattn.metrics.calibrated_coverage`; NaN where metrics.json
    predates it)."""
    files = _run_files(runs)
    rows = []
    for method in method_order(files):
        metrics, spatial = (_load(p) for p in files[method])
        values = {
            "acc_ensemble_mean": spatial["acc_ensemble_mean"],
            "acc_single_sample": spatial["acc_single_sample"],
            "rmse_ensemble_mean": spatial["rmse_ensemble_mean"],
            "w1_native": metrics["native"]["w1"],
            "w1_scaled": _scaled_w1(method, metrics),
            "width_95_scaled": _sa_or_scaled(method, metrics, "width_95"),
            "width_95_matched": _sa_or_matched(method, metrics, "width_95"),
            "coverage_95_native": metrics["native"]["coverage_95"],
            "coverage_95_calibrated": metrics["native"].get("coverage_95_calibrated"),
        }
        rows.extend(mean_row(row, method, key, [as_float(v)]) for key, v in values.items())
        rows.extend(nu_rows(row, method, metrics))
    return tidy_frame(rows)


_CASE_METRICS = ("acc_ensemble_mean", "w1_native", "w1_scaled", "coverage_95_native", "coverage_95_calibrated")


def summary_cases_table(cases: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy rows of :data:`CLIMAX_SUMMARY_CASES`: one row label per (target, lead) case (``cases``: ``{row label:
    {method: (metrics.json, spatial.json)}}``, in order), the unit-free columns of :func:`summary_table` and SA's nu
    with its boundary flag."""
    frames = [summary_table(runs, row) for row, runs in cases.items()]
    tidy = pd.concat(frames, ignore_index=True)
    return tidy[tidy["metric"].isin((*_CASE_METRICS, "nu", "at_boundary"))].reset_index(drop=True)


def cost_table(metas: Mapping[str, PathLike], row: str = ROW) -> pd.DataFrame:
    """Tidy rows of :data:`CLIMAX_COST` per method (``metas``: method -> meta.json): adaptation seconds (train +
    calibrate; SA: its BO alone), their ratio to SA's BO seconds and the total (:func:`stochattn.report.cost_rows`)."""
    seconds = {m: (_load(p).get("seconds") or {}) for m, p in metas.items()}
    sa_bo = as_float(seconds.get(REFERENCE, {}).get("calibrate"))
    rows = []
    for method in method_order(seconds):
        rows.extend(cost_rows(row, method, seconds[method], sa_bo))
        rows.extend(nu_rows(row, method, _load(metas[method])))
    return tidy_frame(rows)


def crps_decomp_table(runs: Mapping[str, Any], analyses: PathLike | Mapping[str, Any] | None = None,
                      row: str = ROW) -> pd.DataFrame:  # fmt: skip
    """Tidy rows of :data:`CLIMAX_CRPS_DECOMP`: native ``crps``, ``crps_error`` (E|X - y|), ``crps_spread``
    (0.5 E|X - X'|) and ``energy`` (Energy Score / sqrt(d)) of every run's spatial.json, and beyond the paper
    ``crps_fair`` (the fair estimator; NaN where spatial.json predates it); with ``analyses`` (an.json), one more
    column ``"SA (score-oriented nu=<k>)"``: CRPS and ES of SA's test samples at the score-oriented nu (and its
    decomposition and fair CRPS where recorded)."""
    files = _run_files(runs)
    rows = []
    for method in method_order(files):
        metrics, spatial = (_load(p) for p in files[method])
        rows.extend(mean_row(row, method, key, [as_float(spatial[key])])
                    for key in ("crps", "crps_error", "crps_spread", "energy"))  # fmt: skip
        rows.append(mean_row(row, method, "crps_fair", [as_float(spatial.get("crps_fair"))]))
        rows.extend(nu_rows(row, method, metrics))
    if analyses is not None:
        score = _load(analyses).get("score_sweep", {}).get("test", {}).get("score_oriented")
        if score is not None:
            name = f"SA (score-oriented nu={int(score['nu'])})"
            rows.extend(mean_row(row, name, key, [as_float(score.get(key))])
                        for key in ("crps", "crps_error", "crps_spread", "energy", "crps_fair"))  # fmt: skip
    return tidy_frame(rows)


_SWEEP_KEYS = ("rmse", "w1", "coverage_95", "width_95")


def _sweep_calibrated(rec: Mapping[str, Any]) -> float:
    """The PI-95 coverage of a perfectly calibrated ensemble of the sweep's S members (NaN without ``num_samples``)."""
    s = rec.get("num_samples")
    return calibrated_coverage(int(s), 0.95) if isinstance(s, int) and s >= 2 else math.nan


def _scale_labels(scales: Sequence[float]) -> dict[float, str]:
    """Column keys ``"scale <s>"`` whose alphabetical order (the order :func:`method_order` gives names it does
    not know) is the numeric order: padded (``"scale  4"``, ``"scale 16"``), else a rank prefix."""
    ordered = sorted({float(s) for s in scales})
    texts = [f"{s:g}" for s in ordered]
    width = max(map(len, texts), default=0)
    labels = [f"scale {t:>{width}}" for t in texts]
    if sorted(labels) != labels:  # e.g. 0.5 and 2
        labels = [f"{i + 1:0{len(str(len(texts)))}d}: scale {t}" for i, t in enumerate(texts)]
    return dict(zip(ordered, labels))


def swag_sweep_val_table(sweep: PathLike | Mapping[str, Any], row: str = f"{ROW} (val.)") -> pd.DataFrame:
    """Tidy rows of :data:`SWAG_SWEEP_VAL`: per variance scale of ``scale_sweep.json`` (method slot
    ``"scale <s>"``) its validation ``rmse`` (of the sample mean), ``w1``, ``coverage_95``, ``width_95``."""
    rec = _load(sweep)
    labels = _scale_labels([r["scale"] for r in rec["rows"]])
    rows = [mean_row(row, labels[float(r["scale"])], key, [as_float(r["val"][key])])
            for r in rec["rows"] for key in _SWEEP_KEYS]  # fmt: skip
    rows += [mean_row(row, labels[float(r["scale"])], "coverage_95_calibrated", [_sweep_calibrated(rec)])
             for r in rec["rows"]]  # fmt: skip
    return tidy_frame(rows)


def swag_sweep_test_table(sweep: PathLike | Mapping[str, Any], row: str = f"{ROW} (test)") -> pd.DataFrame:
    """Tidy rows of :data:`SWAG_SWEEP_TEST`: the test ``rmse``, ``w1``, ``coverage_95``, ``width_95`` at the scale
    with the best validation RMSE (``"compromise (scale <s>)"``, ``selected_rmse``) and at the one with the best
    validation W1 (``"val.-selected (scale <s>)"``, ``selected_w1``); both columns even when they coincide."""
    rec = _load(sweep)
    by_scale = {float(r["scale"]): r for r in rec["rows"]}
    rows = []
    for name, key in (("compromise", "selected_rmse"), ("val.-selected", "selected_w1")):
        scale = float(rec[key])
        if scale not in by_scale:
            raise ValueError(f"scale_sweep: {key} = {scale:g} is not one of the swept scales {sorted(by_scale)}")
        label = f"{name} (scale {scale:g})"
        rows.extend(mean_row(row, label, k, [as_float(by_scale[scale]["test"][k])]) for k in _SWEEP_KEYS)
        rows.append(mean_row(row, label, "coverage_95_calibrated", [_sweep_calibrated(rec)]))
    return tidy_frame(rows)


def skill_table(adapter: PathLike | Mapping[str, Any], row: str = ROW) -> pd.DataFrame:
    """Tidy rows of :data:`CLIMAX_SKILL` from adapter.json's ``test_skill``: ``rmse`` (latitude-weighted),
    ``acc`` and ``rmse_over_climatology`` of the forecasters of :data:`SKILL_COLUMNS`."""
    skill = _load(adapter)["test_skill"]
    clim = as_float(skill["climatology"]["rmse"])
    rows = []
    for key, column in SKILL_COLUMNS.items():
        if key not in skill:
            continue
        rmse = as_float(skill[key]["rmse"])
        rows += [mean_row(row, column, "rmse", [rmse]), mean_row(row, column, "acc", [as_float(skill[key]["acc"])]),
                 mean_row(row, column, "rmse_over_climatology", [rmse / clim])]  # fmt: skip
    return tidy_frame(rows)


CLIMAX_SUMMARY = TableSpec(
    name="climax_summary",
    groups=(
        ColumnGroup("acc_ensemble_mean", "ACC ens.", r"ACC (ens.\ mean) $\uparrow$", best="max", bold=1, decimals=4),
        ColumnGroup("acc_single_sample", "ACC sample", r"ACC (single sample) $\uparrow$", best="max", bold=1,
                    decimals=4),  # fmt: skip
        ColumnGroup("rmse_ensemble_mean", "RMSE ens.", r"RMSE (ens.\ mean) $\downarrow$", bold=1, decimals=1),
        ColumnGroup("w1_native", "W1 native", r"Native $W_1 \downarrow$", bold=1, decimals=4),
        ColumnGroup("w1_scaled", "W1 scaled", r"Scaled $W_1 \downarrow$", bold=1, decimals=4),
        ColumnGroup("width_95_scaled", "PI-95", r"PI-95 width $\downarrow$", fmt="adaptive", bold=1, decimals=1),
        ColumnGroup("width_95_matched", "PI-95 @SA cov.", r"PI-95 @SA cov.\ $\downarrow$", fmt="adaptive", bold=1,
                    decimals=1),  # fmt: skip
        ColumnGroup("coverage_95_native", "Cov95", r"PI-95 cov.\ (native)", best="target", target=0.95, bold=1),
        ColumnGroup("coverage_95_calibrated", "Cov95 if calibrated", r"if calibrated"),
    ),
    description="ClimaX Z500 calibration and sharpness at the lead of the row label (Table climax_summary, 72 h in the "
    "paper; extended): latitude-weighted "
    "ACC of the ensemble mean and of single samples (mean over members of each member's ACC), latitude-weighted "
    "RMSE of the ensemble mean (m^2 s^-2), native PIT W1, scaled W1 (every method but SA temperature-scaled on the "
    "cal pairs; SA native), mean PI-95 width (m^2 s^-2; SA native, every other run temperature-scaled on the cal "
    "pairs, as the paper), beyond the paper the mean PI-95 width at SA's coverage (every other run rescaled by a "
    "conformal factor fitted on the cal pairs to SA's cal coverage) and the native PI-95 coverage, beside it what a "
    "perfectly calibrated ensemble of as many members covers with the same interpolated PI-95 (below 0.95 by "
    "construction; Gaussian members). ACC's climatology is the test period's own time mean per cell (ClimaX's "
    "convention), not WeatherBench 2's day-of-year climatology of the training years. W1 pools the PIT values of "
    "every cell and forecast; the cells of one field are correlated, so they count as fewer independent values "
    "than cells x forecasts and a calibrated method's W1 sits above the independent-values floor. Best per column "
    "bold (ACC highest, coverage closest to 0.95, the rest lowest).",
    latex_description=r"ClimaX $Z_{500}$: ACC of the ensemble mean and of single samples, latitude-weighted "
    r"RMSE of the ensemble mean, native and scaled PIT $W_1$ and PI-95 width (SA native, baselines "
    r"temperature-scaled), PI-95 width at SA's coverage (baselines conformally rescaled on the cal pairs; beyond "
    r"the paper) and native PI-95 coverage, beside it the coverage of a perfectly calibrated ensemble of as many "
    r"members. ACC against the test period's own mean (ClimaX's climatology); $W_1$ pools correlated cells. Units "
    r"m$^2$\,s$^{-2}$; best per column in bold.",
    label="tab:climax_summary",
    build=summary_table,
    rows="methods",
)

CLIMAX_CRPS_DECOMP = TableSpec(
    name="climax_crps_decomp",
    groups=(
        ColumnGroup("crps", "CRPS", r"CRPS $\downarrow$", short_labels=False, bold=1, decimals=2),
        ColumnGroup("crps_error", "Error", r"$\mathbb{E}|X{-}y|$ $\downarrow$", short_labels=False, bold=1,
                    decimals=2),  # fmt: skip
        ColumnGroup("crps_spread", "Spread", r"$\tfrac{1}{2}\mathbb{E}|X{-}X'|$ $\uparrow$", short_labels=False,
                    best="max", bold=1, decimals=2),  # fmt: skip
        ColumnGroup("energy", "ES", r"Energy Score $\downarrow$", short_labels=False, bold=1, decimals=2),
        ColumnGroup("crps_fair", "CRPS fair", r"CRPS (fair) $\downarrow$", short_labels=False, bold=1, decimals=2),
    ),
    description="ClimaX marginal CRPS decomposition (Table climax_crps_decomp; native, T = 1, m^2 s^-2, every cell "
    "and forecast weighted equally): CRPS = Error - Spread, Error = E abs(X - y) (prediction error, lower better), "
    "Spread = 0.5 E abs(X - X') (spread reward, higher = more diverse), and the Energy Score (ES) over the 32 x 64 "
    "field divided by sqrt(2048). CRPS is the paper's ensemble estimator (all S^2 member pairs); CRPS fair (beyond "
    "the paper) the fair estimator, Error - Spread x S/(S - 1), unbiased for the CRPS of the law the members are "
    "drawn from (the ensemble one is (1 + 1/S) times it for a calibrated ensemble). The SA score-oriented column "
    "is SA's test samples at the nu minimising the cal CRPS. Best per column bold.",
    latex_description=r"ClimaX marginal CRPS decomposition (native, $T{=}1$, m$^2$\,s$^{-2}$): "
    r"$\mathbb{E}|X{-}y|$ prediction error, $\tfrac12\mathbb{E}|X{-}X'|$ spread reward, and the Energy Score over "
    r"the field divided by $\sqrt{d}$, $d{=}2048$; CRPS fair (beyond the paper): the fair estimator, "
    r"$\mathbb{E}|X{-}y| - \tfrac{S}{S-1}\,\tfrac12\mathbb{E}|X{-}X'|$. Best per column in bold.",
    label="tab:climax_crps_decomp",
    build=crps_decomp_table,
    rows="methods",
)

_SWEEP_GROUPS = (
    ColumnGroup("rmse", "RMSE", r"RMSE $\downarrow$", short_labels=False, fmt="adaptive", bold=1, decimals=2),
    ColumnGroup("w1", "W1", r"$W_1$ $\downarrow$", short_labels=False, bold=1),
    ColumnGroup("coverage_95", "Cov@95", r"Cov@95", short_labels=False, best="target", target=0.95, bold=1),
    ColumnGroup("coverage_95_calibrated", "Cov@95 if calibrated", r"if calibrated", short_labels=False),
    ColumnGroup("width_95", "Sharp@95", r"Sharp@95 $\downarrow$", short_labels=False, fmt="adaptive", bold=1,
                decimals=1),  # fmt: skip
)

SWAG_SWEEP_VAL = TableSpec(
    name="swag_sweep_val",
    groups=_SWEEP_GROUPS,
    description="Native SWAG variance-scale sweep on the validation pairs (Table swag_sweep_val): the fitted SWAG "
    "posterior sampled with its covariance multiplied by each scale; latitude-weighted RMSE of the sample mean, "
    "PIT W1, PI-95 coverage and mean PI-95 width (m^2 s^-2); beside the coverage, what a perfectly calibrated "
    "ensemble of as many members covers with the same interpolated PI-95 (beyond the paper). Best per column bold "
    "(coverage: closest to 0.95).",
    latex_description=r"Native SWAG variance-scale sweep on ClimaX validation pairs: RMSE of the sample mean, PIT "
    r"$W_1$, PI-95 coverage and width (m$^2$\,s$^{-2}$) per covariance scale. Best per column in bold.",
    label="tab:swag_sweep_val",
    build=swag_sweep_val_table,
    rows="methods",
)

SWAG_SWEEP_TEST = TableSpec(
    name="swag_sweep_test",
    groups=_SWEEP_GROUPS,
    description="Held-out test results at the two SWAG operating points of the variance sweep (Table "
    "swag_sweep_test): the scale with the best validation RMSE (compromise) and the one with the best validation "
    "W1 (val.-selected). Best per column bold.",
    latex_description=r"Held-out test results at the two SWAG operating points of the variance sweep: best "
    r"validation RMSE (compromise) and best validation $W_1$ (val.-selected).",
    label="tab:swag_sweep_test",
    build=swag_sweep_test_table,
    rows="methods",
)

CLIMAX_SKILL = TableSpec(
    name="climax_skill",
    groups=(
        ColumnGroup("rmse", "RMSE", r"RMSE $\downarrow$", methods=tuple(SKILL_COLUMNS.values()), short_labels=False,
                    bold=1, decimals=1),  # fmt: skip
        ColumnGroup("acc", "ACC", r"ACC $\uparrow$", methods=tuple(SKILL_COLUMNS.values()), short_labels=False,
                    best="max", bold=1),  # fmt: skip
        ColumnGroup("rmse_over_climatology", "RMSE/clim.", r"RMSE / clim.", methods=tuple(SKILL_COLUMNS.values()),
                    short_labels=False),  # fmt: skip
    ),
    description="Deterministic Z500 test skill at the row's lead (m^2 s^-2): latitude-weighted RMSE and ACC of the "
    "backbone zero-shot, the LoRA-adapted model, persistence (the field at the initial time) and climatology (the "
    "training years' time mean), and each RMSE over climatology's. ACC's anomalies are taken from the test period's "
    "own time mean per cell (ClimaX's convention; WeatherBench 2 uses a day-of-year climatology of the training years "
    "instead, which gives different values), so the climatology forecast's ACC is not 0 by construction. Best bold.",
    latex_description=r"Deterministic $Z_{500}$ test skill: latitude-weighted RMSE (m$^2$\,s$^{-2}$) and "
    r"ACC of the zero-shot backbone, the LoRA-adapted model, persistence and climatology.",
    label="tab:climax_skill",
    build=skill_table,
    rows="methods",
)

CLIMAX_COST = TableSpec(
    name="climax_cost",
    groups=COST_GROUPS,
    description="ClimaX cost (wall-clock seconds on the job's device; the paper's Fig. climax_cost as numbers): each "
    "method's adaptation (its own training and calibration; SA: its BO calibration of nu alone, the bar the paper "
    "draws), that over SA's BO seconds (the paper's 'nearly three orders of magnitude' contrast), and the total "
    "(adaptation, sampling, and the shared adapter's training where the method starts from it). Lowest bold.",
    latex_description=r"ClimaX wall-clock cost: adaptation seconds (SA: its BO alone), their ratio to SA's BO "
    r"seconds, and total seconds. Lowest in bold.",
    label="tab:climax_cost",
    build=cost_table,
    rows="methods",
)

CLIMAX_SUMMARY_CASES = TableSpec(
    name="climax_summary_cases",
    groups=(*(g for g in CLIMAX_SUMMARY.groups if g.metric in _CASE_METRICS),
            ColumnGroup("nu", "nu", r"$\nu$", methods=("sa",), header="SA nu", latex_header=r"SA $\nu$",
                        fmt="significant")),  # fmt: skip
    description="ClimaX calibration across forecast targets and lead times (beyond the paper, which reports Z500 at "
    "72 h only; one row per target and lead, each from its own adapter, methods and calibration): ACC of the "
    "ensemble mean, native and scaled PIT W1 (every method but SA temperature-scaled on the cal pairs), native PI-95 "
    "coverage and SA's calibrated nu (\"(boundary)\" where it ends at the search range's edge). Unit-free "
    "columns only: each target's RMSE, widths and CRPS, in its own units, are in its own tables. ACC against the "
    "test period's own time mean per cell (ClimaX's climatology); W1 pools the PIT of correlated cells of each field "
    "(fewer independent values than cells x forecasts).",
    latex_description=r"ClimaX across targets and lead times (beyond the paper): ACC of the ensemble mean, native "
    r"and scaled PIT $W_1$, native PI-95 coverage and SA's $\nu$, one row per target and lead.",
    label="tab:climax_summary_cases",
    build=summary_cases_table,
    wide=True,
)

ERA5_TABLE_SPECS = {spec.name: spec for spec in (CLIMAX_SUMMARY, CLIMAX_CRPS_DECOMP, SWAG_SWEEP_VAL, SWAG_SWEEP_TEST,
                                                 CLIMAX_SKILL, CLIMAX_COST, CLIMAX_SUMMARY_CASES)}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# figure helpers
# --------------------------------------------------------------------------------------------------------------
def _ordered_paths(paths: Mapping[str, PathLike], what: str) -> list[str]:
    if not isinstance(paths, Mapping) or not paths:
        raise TypeError(f"{what} must be a non-empty mapping method -> file")
    return method_order(paths)


def _log2_nu_axis(ax: Any, nus: Sequence[float]) -> None:
    """x axis log2 with the measured nu as ticks."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(nus))
    ax.set_xticklabels([f"{v:g}" for v in nus], fontsize=7)
    ax.set_xlabel(r"$\nu$")


# --------------------------------------------------------------------------------------------------------------
# calibration, cost, sharpness
# --------------------------------------------------------------------------------------------------------------
def pit_combined(metrics: Mapping[str, PathLike], out_base: PathLike, marker: str = "", bins: int = 10) -> list[Path]:
    """Fig. climax_pit_combined: (a) native PIT histogram of every method, (b) every method but SA temperature-
    scaled (``pit_scaled`` of metrics.json), SA native; each panel titled with its W1 (of the values shown).
    ``metrics``: ``{method: metrics.json}``. Returns ``[png, pdf]``."""
    methods = _ordered_paths(metrics, "metrics")
    recs = {m: load_json(metrics[m]) for m in methods}
    nrows, ncols = subplot_grid(len(methods))
    fig = new_figure(2.75 * ncols * 2 + 0.4, 1.9 * nrows + 0.9)
    panels = fig.subfigures(1, 2, wspace=0.03)
    for sub, which, head in ((panels[0], "native", "(a) Native predictions"),
                             (panels[1], "scaled", "(b) Baselines temperature-scaled; SA native")):  # fmt: skip
        key = {m: "pit_native" if which == "native" or m == REFERENCE else "pit_scaled" for m in methods}
        draw_pit_grid(sub, {m: np.asarray(recs[m][key[m]], dtype=np.float64) for m in methods}, bins)
        for i, ax in enumerate(sub.axes[: len(methods)]):
            if i + ncols >= len(methods) and i < (nrows - 1) * ncols:  # nothing below it: label its x axis
                ax.xaxis.set_tick_params(labelbottom=True)
                ax.set_xlabel("PIT")
        sub.suptitle(head, fontsize=10)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def cost_figure(metas: Mapping[str, PathLike], out_base: PathLike, marker: str = "") -> list[Path]:
    """Fig. climax_cost, as the paper draws it: each method's adaptation seconds (train + calibrate; SA: its BO
    calibration of nu alone, on the shared adapted model), horizontal bars on a log axis with the ratio to SA's BO
    in the labels (:func:`stochattn.experiments.uci_figures.cost_figure`); totals in the table climax_cost.
    Returns ``[png, pdf]``."""
    tidy = cost_table({m: metas[m] for m in _ordered_paths(metas, "metas")}, row="ClimaX")
    ratios = tidy[tidy["metric"] == "adaptation_over_sa_calibration"].set_index("method")["value"]
    shown = ", ".join(f"{method_label(m, True)} {v:.3g}x" for m, v in ratios.items() if m != REFERENCE and
                      math.isfinite(v))  # fmt: skip
    label = "ClimaX: adaptation (SA: BO only)\n" + textwrap.fill(f"vs SA's BO: {shown}", 55)
    tidy = tidy.assign(dataset=label)
    return uci_figures.cost_figure(tidy, out_base, metric="seconds_adaptation", dataset=label, marker=marker)


def sharpness_figure(
    samples: Mapping[str, PathLike],
    metrics: Mapping[str, PathLike],
    level: float | Sequence[float],
    out_base: PathLike,
    marker: str = "",
) -> list[Path]:
    """Figs. climax_sharpness (``level`` 0.95) and sharp25 / sharp50 / sharp75, as the paper: the distribution
    over (forecast, cell) of each method's PI width divided by SA's MEAN width, baselines temperature-scaled on the
    cal pairs, SA native (:func:`stochattn.experiments.uci_figures.normalised_widths`), so a method's mean (the
    diamond, also printed) is the ratio of its mean width to SA's (the paper's "MultiSWAG ~1.02x"); whiskers
    P5 / P95. ``level`` a fraction or percent (e.g. 95), or several: one panel each, side by side (the paper's
    combined PI-25 / 50 / 75 figure, panels (a) (b) (c)). Returns ``[png, pdf]``."""
    levels = [float(v) / 100 if float(v) > 1 else float(v) for v in np.atleast_1d(level)]
    methods = _ordered_paths(samples, "samples")
    if REFERENCE not in samples:
        raise ValueError(f"samples needs {REFERENCE!r}: widths are divided by SA's mean width")
    fig = new_figure(len(levels) * (1.4 + 0.85 * len(methods)), 3.8)
    axes = np.atleast_1d(fig.subplots(1, len(levels)))
    for i, (ax, lvl) in enumerate(zip(axes, levels)):
        widths = uci_figures.normalised_widths({m: [(samples[m], metrics[m])] for m in methods}, lvl)
        pct = f"{round(lvl * 100):g}"
        draw_sharpness(ax, widths, lvl)
        ax.set_ylabel(f"PI-{pct} width / SA's mean width")
        ratios = ", ".join(f"{method_label(m, True)} {float(np.mean(w)):.2f}x" for m, w in widths.items()
                           if m != REFERENCE)  # fmt: skip
        head = (f"PI-{pct} widths per (forecast, cell) / SA's mean width; SA native, baselines temperature-scaled; "
                f"whiskers P5 / P95, diamond = mean ({ratios})")
        if len(levels) > 1:
            head = f"({chr(ord('a') + i)}) PI-{pct}. " + head
        ax.set_title(textwrap.fill(head, 70), fontsize=8)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# operating-point analyses (an.json)
# --------------------------------------------------------------------------------------------------------------
def latency_figure(analyses: PathLike, out_base: PathLike, marker: str = "") -> list[Path]:
    """Fig. latency_appendix: median per-pass seconds of SA vs nu (log2 axis) from an.json ``latency``, the
    deterministic model as a dashed line, the BO-selected (calibration-first) nu marked with its overhead;
    the device, threads and batch in the axis title. Returns ``[png, pdf]``."""
    an = load_json(analyses)
    lat = an["latency"]
    rows = sorted(lat["sa"], key=lambda r: r["nu"])
    nus, secs = [float(r["nu"]) for r in rows], [float(r["seconds"]) for r in rows]
    det = float(lat["deterministic"])
    nu_bo = an["score_sweep"]["test"]["calibration_first"]["nu"]
    fig = new_figure(5.2, 3.6)
    ax = fig.add_subplot()
    ax.plot(nus, secs, "o-", color=method_color(REFERENCE), label="SA")
    ax.axhline(det, color="k", ls="--", lw=1.0, label=f"deterministic ({format_seconds(det)})")
    by_nu = dict(zip(nus, secs))
    note = f" ({format_seconds(by_nu[nu_bo])}, {by_nu[nu_bo] / det - 1:+.0%})" if nu_bo in by_nu else ""
    ax.axvline(nu_bo, color=PALETTE[3], ls=":", lw=1.2, label=f"BO-selected $\\nu$={nu_bo}{note}")
    _log2_nu_axis(ax, nus)
    ax.set_ylabel("seconds per forward pass")
    ax.set_ylim(0, max(secs + [det]) * 1.15)
    device = lat.get("device") or an.get("device") or {}
    if not isinstance(device, Mapping):
        device = {"device": str(device)}
    threads = lat.get("threads", device.get("torch_threads", "?"))
    ax.set_title(f"{device.get('device', '?')}, {threads} threads, batch {lat['batch']} (median per pass)", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def _surrogate_curves(run: Mapping[str, Any], nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalised surrogate loss f(nu) / f* of each posterior draw (D, G) and of the draws' mean parameters (G,);
    f* = the minimum over the BO domain, at the closed-form minimiser clipped to it (f is unimodal in nu)."""
    from stochattn.calibrate import nu_continuous, surrogate_objective  # torch: only this figure needs it

    d = run["posterior_draws"]
    a, ln_b, eps2 = (np.asarray(d[k], dtype=np.float64) for k in ("a", "ln_b", "eps2"))
    s0 = float(run["s0"])
    low, high = float(run["domain"]["low"]), float(run["domain"]["high"])

    def normalised(a_: np.ndarray, ln_b_: np.ndarray, eps2_: np.ndarray) -> np.ndarray:
        a_, ln_b_, eps2_ = (np.atleast_1d(v)[:, None] for v in (a_, ln_b_, eps2_))
        best = np.clip(nu_continuous(a_, ln_b_, eps2_, s0), low, high)
        return surrogate_objective(nu[None, :], a_, ln_b_, eps2_, s0) / surrogate_objective(best, a_, ln_b_, eps2_,
                                                                                            s0)  # fmt: skip

    return normalised(a, ln_b, eps2), normalised(a.mean(), ln_b.mean(), eps2.mean())[0]


def bo_sensitivity(analyses: PathLike, out_base: PathLike, marker: str = "") -> list[Path]:
    """Fig. bo_sensitivity: per BO seed of an.json ``bo_seeds`` (one colour each), the normalised surrogate loss
    f(nu) / f* (f = :func:`stochattn.calibrate.surrogate_objective`, f* its minimum over the domain) of every
    recorded posterior draw (light), of the draws' mean parameters (bold) and the chosen nu (dotted); the same
    seeds on the second search range (``bo_second_range``, dashed), as the appendix; below, the evaluated (nu,
    observed L_SA) points of each seed's history, normalised by the seed's smallest loss. Returns ``[png, pdf]``."""
    an = load_json(analyses)
    runs = an["bo_seeds"]
    if not runs:
        raise ValueError(f"{analyses}: no bo_seeds")
    second = an.get("bo_second_range") or []
    low = min(float(r["domain"]["low"]) for r in (*runs, *second))
    high = max(float(r["domain"]["high"]) for r in (*runs, *second))
    nu = np.geomspace(low, high, 400)
    fig = new_figure(6.0, 5.2)
    ax, ax_h = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1.0])
    for group, ls, symbol in ((runs, "-", "o"), (second, "--", "x")):
        for i, run in enumerate(group):
            color = PALETTE[i % len(PALETTE)]
            draws, mean = _surrogate_curves(run, nu)
            dom = run["domain"]
            if ls == "-":
                ax.plot(nu, draws.T, color=color, alpha=max(0.02, min(0.3, 8.0 / len(draws))), lw=0.5)
            ax.plot(nu, mean, color=color, lw=2.0 if ls == "-" else 1.2, ls=ls,
                    label=f"seed {run.get('seed', i)} [{dom['low']}, {dom['high']}]: $\\nu_{{cont}}$="
                          f"{run['nu_surrogate_continuous']:.3g}, chosen $\\nu$={run['nu_loss_argmin']}")
            ax.axvline(run["nu_loss_argmin"], color=color, ls=":", lw=1.0)
            hist = run["history"]
            loss = np.asarray([h["loss"] for h in hist], dtype=np.float64)
            ax_h.scatter([h["nu"] for h in hist], loss / loss.min(), color=color, s=18, alpha=0.8, zorder=3,
                         marker=symbol)  # fmt: skip
    ax.set_xscale("log")
    if ax.get_ylim()[1] > 10:  # the loss varies over decades: log axis
        ax.set_yscale("log")
    ax.set_ylabel(r"surrogate $f(\nu)/f^*$")
    ax.legend(fontsize=6, frameon=False)
    head = "posterior draws (light), mean parameters (bold); f* = minimum over the domain"
    if second:
        d = second[0]["domain"]
        head += f"; dashed / x: second search range [{d['low']}, {d['high']}]"
    ax.set_title(head, fontsize=8)
    ax_h.set_ylabel("observed $L_{SA}$ / min", fontsize=8)
    ax_h.set_xlabel(r"$\nu$")
    ax_h.set_xlim(low, high)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def beta_star(analyses: PathLike | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{"seed <s>": beta* = ln nu_cont of that BO seed's recorded posterior draws}`` (an.json ``bo_seeds``)."""
    runs = _load(analyses)["bo_seeds"]
    return {f"seed {r.get('seed', i)}": np.log(np.asarray(r["posterior_draws"]["nu_cont"], dtype=np.float64))
            for i, r in enumerate(runs)}  # fmt: skip


def bo_beta_hist(analyses: PathLike, out_base: PathLike, marker: str = "", bins: int = 40) -> list[Path]:
    """Fig. bo_beta_hist: histogram of beta* = ln nu_cont over the posterior draws of every BO seed (stacked, one
    colour per seed; :func:`beta_star`), the pooled median dashed; the pooled central 95 % band and its width in
    the title. Returns ``[png, pdf]``."""
    betas = beta_star(analyses)
    pooled = np.concatenate(list(betas.values()))
    lo, med, hi = np.percentile(pooled, [2.5, 50.0, 97.5])
    fig = new_figure(5.0, 3.6)
    ax = fig.add_subplot()
    edges = np.linspace(lo - 0.25 * (hi - lo), hi + 0.25 * (hi - lo), bins + 1) if hi > lo else bins
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(betas))]
    ax.hist(list(betas.values()), bins=edges, stacked=True, color=colors, label=list(betas), alpha=0.85)
    ax.axvline(med, color="k", ls="--", lw=1.0, label=f"median {med:.3f} ($\\nu$={math.exp(med):.4g})")
    ax.axvspan(lo, hi, color="0.5", alpha=0.12, lw=0)
    ax.set_xlabel(r"$\beta^* = \ln \nu^*$ (posterior draws of $\nu_{cont}$)")
    ax.set_ylabel("draws")
    ax.set_title(f"central 95% band [{lo:.3f}, {hi:.3f}], width {hi - lo:.3f} ({len(pooled)} draws, "
                 f"{len(betas)} seeds)", fontsize=8)  # fmt: skip
    ax.legend(fontsize=7, frameon=False)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def nu_ablation(analyses: PathLike, out_base: PathLike, marker: str = "", bins: int = 10) -> list[Path]:
    """Fig. nu_ablation: top, mean CRPS and Energy Score (1/sqrt(d)) of SA's samples on the cal pairs vs nu (an.json
    ``score_sweep.grid``, log2 axis; a star at each score's arg-min), the score-oriented nu (arg-min CRPS) and the
    calibration-first nu marked;
    bottom, the test PIT at the calibration-first and score-oriented nu with their W1. Returns ``[png, pdf]``."""
    sweep = load_json(analyses)["score_sweep"]
    grid = sorted(sweep["grid"], key=lambda r: r["nu"])
    nus = [float(r["nu"]) for r in grid]
    test = sweep["test"]
    marks = {"calibration-first": (test["calibration_first"]["nu"], PALETTE[3], ":"),
             "score-oriented": (sweep["nu_score"], PALETTE[2], "--")}  # fmt: skip
    fig = new_figure(8.0, 6.0)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    for ax, key, name in zip(top.subplots(1, 2), ("crps", "energy"), ("CRPS", r"Energy Score / $\sqrt{d}$")):
        ax.plot(nus, [r[key] for r in grid], "o-", color=method_color(REFERENCE))
        best = min(grid, key=lambda r: r[key])  # this score's own arg-min (the paper: both at one nu)
        ax.plot([best["nu"]], [best[key]], "*", ms=12, color=PALETTE[2], label=f"arg-min $\\nu$={best['nu']}")
        for label, (nu, color, ls) in marks.items():
            ax.axvline(nu, color=color, ls=ls, lw=1.2, label=f"{label} $\\nu$={nu}")
        _log2_nu_axis(ax, nus)
        ax.set_ylabel(f"{name} ({UNITS})", fontsize=8)
        ax.set_title(f"{name} on the cal pairs", fontsize=9)
        ax.legend(fontsize=7, frameon=False)
    pits = {f"{label} ν={test[key]['nu']}": np.asarray(test[key]["pit"], dtype=np.float64)
            for label, key in (("calibration-first", "calibration_first"), ("score-oriented", "score_oriented"))}
    draw_pit_grid(bottom, pits, bins)
    bottom.suptitle("Test PIT at the two operating points", fontsize=9)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# teaser
# --------------------------------------------------------------------------------------------------------------
def _edges(centres: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Cell edges of regularly spaced ``centres`` (midpoints, the ends half a step out, clipped to [lo, hi])."""
    c = np.asarray(centres, dtype=np.float64)
    step = np.diff(c).mean() if c.size > 1 else 1.0
    edges = np.concatenate([[c[0] - step / 2], (c[1:] + c[:-1]) / 2, [c[-1] + step / 2]])
    return np.clip(edges, lo if lo is not None else -np.inf, hi if hi is not None else np.inf)


def teaser_maps(samples: PathLike, prepared: PathLike, out_base: PathLike, marker: str = "", index: int = 0,
                target: str = "Z500", units: str = UNITS) -> list[Path]:  # fmt: skip
    """Teaser panel (a): truth ``target`` (its label), the forecast (``point`` of ``samples``: SA's deterministic
    forecast) and the bias (forecast - truth, diverging colours centred at 0) of test forecast ``index`` (the
    suptitle), on the lat / lon grid of ``prepared`` (pairs.npz; lat south to north, fields lat-major (32 * 64));
    colour bars in ``units``; the latitude-weighted RMSE of the forecast in the bias title. Returns ``[png, pdf]``."""
    run, prep = load_npz(samples), load_npz(prepared)
    lat, lon = np.asarray(prep["lat"], dtype=np.float64), np.asarray(prep["lon"], dtype=np.float64)
    n = run["y"].shape[0]
    if not 0 <= index < n:
        raise ValueError(f"index {index}: {samples} has {n} test forecasts")
    if run["y"].shape[1] != lat.size * lon.size:
        raise ValueError(f"{samples}: fields of {run['y'].shape[1]} cells, {prepared} has a {lat.size} x {lon.size} "
                         f"grid")
    truth = run["y"][index].reshape(lat.size, lon.size)
    forecast = run["point"][index].reshape(lat.size, lon.size)
    bias = forecast - truth
    if "y_test" in prep:  # the samples must be of this prepared file's test pairs
        expected = prep["y_test"][index] * float(prep["y_std"]) + float(prep["y_mean"])
        if not np.allclose(expected.reshape(truth.shape), truth, rtol=1e-4, atol=1e-3 * float(prep["y_std"])):
            raise ValueError(f"{samples} test forecast {index} is not the truth of {prepared}'s test pair {index}")
    lon_e, lat_e = _edges(lon), _edges(lat, -90.0, 90.0)
    vmin, vmax = float(min(truth.min(), forecast.min())), float(max(truth.max(), forecast.max()))
    span = float(np.abs(bias).max()) or 1.0
    rmse = lat_weighted_rmse(forecast, truth, lat)
    fig = new_figure(13.0, 3.0)
    axes = fig.subplots(1, 3)
    for ax, field, name, kw in (
        (axes[0], truth, f"Truth {target}", {"cmap": "viridis", "vmin": vmin, "vmax": vmax}),
        (axes[1], forecast, f"Forecast ({method_label(REFERENCE)} deterministic)",
         {"cmap": "viridis", "vmin": vmin, "vmax": vmax}),
        (axes[2], bias, f"Bias (forecast - truth), lat-weighted RMSE {rmse:.1f}",
         {"cmap": "RdBu_r", "vmin": -span, "vmax": span}),
    ):  # fmt: skip
        mesh = ax.pcolormesh(lon_e, lat_e, field, shading="flat", **kw)
        fig.colorbar(mesh, ax=ax, shrink=0.72).set_label(units, fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.set_xlim(lon_e[0], lon_e[-1])
        ax.set_ylim(-90, 90)
        ax.set_xticks([0, 90, 180, 270, 360])
        ax.set_yticks([-90, -45, 0, 45, 90])
        ax.set_xlabel("longitude (°E)", fontsize=8)
        ax.set_aspect("equal")
    axes[0].set_ylabel("latitude (°N)", fontsize=8)
    fig.suptitle(f"Test forecast {index}", fontsize=9)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def teaser_axes(
    metrics: Mapping[str, PathLike],
    spatial: Mapping[str, PathLike],
    metas: Mapping[str, PathLike],
    out_base: PathLike,
    marker: str = "",
) -> list[Path]:
    """Teaser panel (b), measured: one small panel per axis, one bar per method - accuracy (ACC of the ensemble
    mean, spatial.json), calibration (native W1, metrics.json), sharpness (mean temperature-scaled PI-95 width /
    SA's native width, metrics.json ``scaled``, as the paper post-scales) and cost (:func:`total_seconds` of meta.json,
    log axis); values on the bars, so the axes can be seen not to collapse into one ranking. Returns ``[png, pdf]``."""
    methods = [m for m in _ordered_paths(metrics, "metrics") if m in spatial and m in metas]
    recs = {m: load_json(metrics[m]) for m in methods}
    sa_width = _sa_or_scaled(REFERENCE, recs[REFERENCE], "width_95") if REFERENCE in recs else math.nan
    axes_data = (
        ("Accuracy: ACC (ens. mean) ↑", [as_float(load_json(spatial[m])["acc_ensemble_mean"]) for m in methods],
         "{:.3f}", False),
        ("Calibration: native $W_1$ ↓", [as_float(recs[m]["native"]["w1"]) for m in methods], "{:.3f}", False),
        ("Sharpness: PI-95 width / SA ↓\n(temperature-scaled)",
         [_sa_or_scaled(m, recs[m], "width_95") / sa_width for m in methods], "{:.2f}", False),
        ("Cost: total wall clock ↓", [total_seconds(metas[m]) for m in methods], None, True),
    )  # fmt: skip
    fig = new_figure(2.9 * len(axes_data), 3.4)
    x = np.arange(len(methods))
    for ax, (name, values, fmt, log) in zip(fig.subplots(1, len(axes_data)), axes_data):
        shown = [v if math.isfinite(v) and (v > 0 or not log) else math.nan for v in values]
        ax.bar(x, [0 if math.isnan(v) else v for v in shown], color=[method_color(m) for m in methods])
        for xi, v in zip(x, shown):
            text = "n/a" if math.isnan(v) else (format_seconds(v) if fmt is None else fmt.format(v))
            ax.annotate(text, (xi, 0 if math.isnan(v) else v), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6, rotation=90 if log else 0)  # fmt: skip
        if log:
            ax.set_yscale("log")
            finite = [v for v in shown if math.isfinite(v)]
            if finite:
                ax.set_ylim(min(finite) / 3, max(finite) * 30)
        else:
            finite = [v for v in shown if math.isfinite(v)]
            top = max(finite, default=1.0)
            ax.set_ylim(min(0.0, min(finite, default=0.0)) * 1.2, top * 1.25 if top > 0 else 1.0)
        if name.startswith("Sharpness"):
            ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set_xticks(x)
        ax.set_xticklabels([method_label(m, short=True) for m in methods], fontsize=7, rotation=45)
        ax.set_title(name, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def build_table(name: str, metrics: Optional[Sequence[PathLike]] = None, spatial: Optional[Sequence[PathLike]] = None,
                sweep: Optional[PathLike] = None, adapter: Optional[PathLike] = None,
                analyses: Optional[PathLike] = None, metas: Optional[Sequence[PathLike]] = None,
                lead_hours: float = 72, target: str = "Z500", units: str = "m^2 s^-2",
                cases: Optional[Mapping[str, Any]] = None) -> tuple[TableSpec, pd.DataFrame]:  # fmt: skip
    """``(spec, tidy)`` of the ClimaX table ``name`` from the workflow's files (``metrics`` / ``spatial``: every
    run's ``runs/<method>/metrics.json`` / ``spatial.json``); each table needs only the files it reads
    (climax_summary: metrics, spatial; climax_crps_decomp: + analyses; swag_sweep_*: sweep; climax_skill: adapter;
    climax_cost: every run's meta.json); the row label names the ``target`` label and ``lead_hours``
    (:func:`row_label`), the descriptions its ``units`` (:func:`for_target`). climax_summary_cases reads ``cases``:
    ``{row label: (metrics, spatial)}`` of every (target, lead) case."""
    if name not in ERA5_TABLE_SPECS:
        raise ValueError(f"unknown ClimaX table {name!r}; known: {', '.join(ERA5_TABLE_SPECS)}")
    by_method = {Path(m).parent.name: (m, s) for m, s in zip(metrics or (), spatial or ())}
    row = row_label(lead_hours, target)
    builders = {
        "climax_summary_cases": lambda: summary_cases_table(
            {r: {Path(m).parent.name: (m, sp) for m, sp in zip(*files)} for r, files in (cases or {}).items()}),
        "climax_summary": lambda: summary_table(by_method, row),
        "climax_crps_decomp": lambda: crps_decomp_table(by_method, analyses, row),
        "swag_sweep_val": lambda: swag_sweep_val_table(sweep, f"{row} (val.)"),
        "swag_sweep_test": lambda: swag_sweep_test_table(sweep, f"{row} (test)"),
        "climax_skill": lambda: skill_table(adapter, row),
        "climax_cost": lambda: cost_table({Path(m).parent.name: m for m in metas or ()}, row),
    }
    return for_target(ERA5_TABLE_SPECS[name], target, units), builders[name]()
