"""Figures of the paper's UCI results and the teaser's sinusoid panel, from per-run files (UCI contract).

Drawn with the shared helpers of :mod:`stochattn.figures` (Agg figure, method colours, atomic PNG (dpi 150) + PDF);
every writer returns the list of files it wrote. Provenance (``<file>.prov.json``) is written by the caller.

    pit_histograms     native pooled PIT per method (small multiples, 10 bins, density, W1 in each title)
    normalised_widths  per-point PI widths, post-scaled (temperature, the paper's; or matched) / SA's mean native
                       width (sharpness figures' data)
    sharpness_boxplot  those widths as a box plot; whiskers P5/P95, diamond = mean
    yacht_appendix     (a) PIT histograms overlaid, (b) the sharpness box plot (paper fig. uci_yacht_appendix)
    teaser_sinusoid    1-D toy data: observations, shared trend, each method's central PI as a band
    cost_figure        horizontal bars of total seconds per method, log axis
    paper_w1_figure    our native pooled-PIT W1 against the paper's, one panel per method, every data set a point
                       (log axes, the diagonal and the 2x band; the slice comparison of benchmarks/uci_paper_slice.py)
    schedule_curves_figure
                       validation RMSE/sigma_y per epoch of each training schedule, one panel per split, each
                       patience's kept epoch marked (benchmarks/uci_train_select.py's curves)

Input of the sharpness figures (``samples_and_metrics``): a mapping ``method -> runs`` with one entry per split,
either a list of ``(samples.npz, metrics.json)`` pairs or ``{"samples": [...], "metrics": [...]}`` (aligned).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.extras import requires
from stochattn.figures import (
    PALETTE,
    PathLike,
    draw_marker,
    draw_pit_grid,
    draw_pit_overlay,
    draw_sharpness,
    format_seconds,
    method_color,
    new_figure,
    pooled_pit,
    runs_frame,
    save_figure,
    subplot_grid,
)
from stochattn.io import load_json, load_npz
from stochattn.metrics import _level_key, central_interval
from stochattn.report import as_float, dataset_label, dataset_order, method_label, method_order
from stochattn.scaling import apply_scale

with requires("workflow"):
    import pandas as pd
    from matplotlib.font_manager import FontProperties

__all__ = [
    "pit_histograms",
    "normalised_widths",
    "sharpness_boxplot",
    "yacht_appendix",
    "teaser_sinusoid",
    "cost_figure",
    "paper_w1_figure",
    "schedule_curves_figure",
]


# --------------------------------------------------------------------------------------------------------------
# PIT
# --------------------------------------------------------------------------------------------------------------
def pit_histograms(
    runs: pd.DataFrame | Iterable[PathLike],
    dataset: str,
    out_base: PathLike,
    *,
    pit: str = "native",
    bins: int = 10,
) -> list[Path]:
    """Small multiples of the pooled PIT histogram of each method on ``dataset``.

    Args:
        runs: DataFrame of :func:`stochattn.report.load_runs` (or the metrics.json paths to load).
        dataset: data set name (``runs.dataset``).
        out_base: output path without suffix.
        pit: ``"native"`` (default, the paper's Panel A) or ``"scaled"`` (baselines temperature-scaled; SA native).
        bins: number of equal bins on [0, 1].

    Each panel: density histogram of the PIT values of all splits pooled, the uniform density (1) dashed, and
    the pooled W1 (:func:`stochattn.metrics.w1_uniform`, the table's number) in its title.
    Returns ``[png, pdf]``.
    """
    frame = runs_frame(runs)
    pits = pooled_pit(frame, dataset, pit)
    nrows, ncols = subplot_grid(len(pits))
    fig = new_figure(3.0 * ncols, 2.4 * nrows)
    draw_pit_grid(fig, pits, bins)
    fig.suptitle(f"{dataset_label(dataset)}: {pit} PIT (pooled over splits)")
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# sharpness
# --------------------------------------------------------------------------------------------------------------
def _pairs(entry: Any, method: str) -> list[tuple[Path, Path]]:
    if isinstance(entry, Mapping):
        if "samples" not in entry or "metrics" not in entry:
            raise ValueError(f"samples_and_metrics[{method!r}] must have keys 'samples' and 'metrics'")
        samples, metrics = entry["samples"], entry["metrics"]
        if isinstance(samples, (str, os.PathLike)):
            samples = [samples]
        if isinstance(metrics, (str, os.PathLike)):
            metrics = [metrics]
        samples, metrics = list(samples), list(metrics)
        if len(samples) != len(metrics):
            raise ValueError(f"samples_and_metrics[{method!r}]: {len(samples)} samples paths but "
                             f"{len(metrics)} metrics paths (one of each per split)")
        pairs = list(zip(samples, metrics))
    elif isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)):
        pairs = []
        for item in entry:
            if not (isinstance(item, Sequence) and not isinstance(item, (str, bytes)) and len(item) == 2):
                raise ValueError(f"samples_and_metrics[{method!r}] must hold (samples.npz, metrics.json) pairs, "
                                 f"got {item!r}")
            pairs.append((item[0], item[1]))
    else:
        raise TypeError(f"samples_and_metrics[{method!r}] must be a list of (samples, metrics) pairs or a dict "
                        f"with 'samples' and 'metrics', got {type(entry).__name__}")
    if not pairs:
        raise ValueError(f"samples_and_metrics[{method!r}] is empty")
    return [(Path(s), Path(m)) for s, m in pairs]


SCALINGS = ("temperature", "matched")
"""Post-scalings of the sharpness figures: ``temperature`` (the paper's: metrics.json ``temperature``, fitted on the
calibration split) or ``matched`` (conformal to SA's calibration coverage: ``matched["factor_<level>"]``)."""


def _post_scale_factor(meta: Mapping[str, Any], scaling: str, level: float, path: PathLike) -> float:
    """The factor that post-scales a non-SA run (:data:`SCALINGS`); ValueError unless finite and > 0."""
    if scaling == "temperature":
        key, factor = "temperature", as_float(meta.get("temperature"))
    else:
        key = f"factor_{_level_key(level)}"
        factor = as_float((meta.get("matched") or {}).get(key))
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"{path}: the {scaling} factor {key!r} must be a finite number > 0, got {factor!r}")
    return factor


def normalised_widths(
    samples_and_metrics: Mapping[str, Any],
    level: float = 0.95,
    *,
    dataset: str | None = None,
    scaling: str = "temperature",
) -> dict[str, np.ndarray]:
    """Per-point central-interval widths of every method, post-scaled, pooled over splits, divided by SA's mean
    native width.

    For each (samples.npz, metrics.json) pair: ``samples`` (S, n) and ``point`` (n,) of the test split; every
    method but SA (baselines and ``sa_match``) is scaled with ``apply_scale(samples, point, c)``: ``scaling=
    "temperature"`` (the paper's) c = ``metrics["temperature"]``, the factor fitted on the calibration split;
    ``"matched"`` c = ``metrics["matched"]["factor_<level>"]``, the conformal factor so that the method covers
    SA's empirical coverage there (stochattn.experiments.evaluate.matched_block). SA stays native.
    The widths ``hi - lo`` of :func:`central_interval` at ``level`` of all splits are concatenated; everything is
    divided by the mean of SA's pooled native widths, so the mean of a method's array equals its pooled mean
    post-scaled width / SA's (the table's Panel B ratio when splits have equal size) and SA's mean is 1.

    Returns ``{method: (sum of n over splits,) array}`` in :func:`stochattn.report.method_order`. Raises
    ValueError without ``"sa"``, for a non-SA run whose metrics.json has no finite positive factor, or when a
    metrics.json names a data set other than ``dataset`` (if given).
    """
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    if not isinstance(samples_and_metrics, Mapping) or not samples_and_metrics:
        raise TypeError("samples_and_metrics must be a non-empty mapping method -> per-split files")
    if "sa" not in samples_and_metrics:
        raise ValueError("samples_and_metrics needs 'sa' (widths are normalised by SA's mean native width)")
    order = method_order(samples_and_metrics)
    raw: dict[str, np.ndarray] = {}
    for method in order:
        widths = []
        for samples_path, metrics_path in _pairs(samples_and_metrics[method], method):
            meta = load_json(metrics_path)
            if dataset is not None and meta.get("dataset") not in (None, dataset):
                raise ValueError(f"{metrics_path} is for dataset {meta.get('dataset')!r}, not {dataset!r}")
            data = load_npz(samples_path)
            for key in ("samples", "point"):
                if key not in data:
                    raise ValueError(f"{samples_path} has no {key!r} array")
            samples = data["samples"]
            if method != "sa":
                samples = apply_scale(samples, data["point"], _post_scale_factor(meta, scaling, level, metrics_path))
            lo, hi = central_interval(samples, level)
            widths.append(np.asarray(hi - lo, dtype=np.float64).ravel())
        raw[method] = np.concatenate(widths)
    ref = float(np.mean(raw["sa"]))
    if not (math.isfinite(ref) and ref > 0):
        raise ValueError(f"SA's mean native width is {ref}; cannot normalise")
    return {m: w / ref for m, w in raw.items()}


def sharpness_boxplot(
    samples_and_metrics: Mapping[str, Any],
    dataset: str,
    out_base: PathLike,
    level: float = 0.95,
) -> list[Path]:
    """Box plot of per-point PI widths normalised by SA's mean native width (:func:`normalised_widths`).

    Every method but SA temperature-scaled on the calibration split (the paper's), SA native.
    Boxes: quartiles; line: median; whiskers: P5 / P95 (no fliers); white diamond: mean (= the method's width
    ratio); dashed line at 1 (SA's mean).
    Returns ``[png, pdf]``.
    """
    widths = normalised_widths(samples_and_metrics, level, dataset=dataset)
    fig = new_figure(1.0 + 0.9 * len(widths), 3.4)
    ax = fig.add_subplot()
    draw_sharpness(ax, widths, level)
    ax.set_title(f"{dataset_label(dataset)}: PI-{round(level * 100):g} sharpness (SA = 1; baselines "
                 f"temperature-scaled)", fontsize=9)
    return save_figure(fig, out_base)


def sharpness_grid(
    samples_and_metrics: Mapping[str, Mapping[str, Any]],
    out_base: PathLike,
    *,
    level: float = 0.95,
    columns: int = 3,
) -> list[Path]:
    """The paper's multi-panel Fig. uci_sharpness_remaining_1: one :func:`sharpness_boxplot` panel per data set
    (``samples_and_metrics``: data set -> its per-method runs, in panel order), ``columns`` panels a row, each
    titled "(a) Concrete" ...; baselines temperature-scaled, SA native. Returns ``[png, pdf]``."""
    if not samples_and_metrics:
        raise ValueError("sharpness_grid: no data set")
    names = list(samples_and_metrics)
    rows = math.ceil(len(names) / columns)
    fig = new_figure(4.2 * min(columns, len(names)), 3.4 * rows)
    axes = np.atleast_1d(fig.subplots(rows, min(columns, len(names)), squeeze=False)).ravel()
    for i, (ax, dataset) in enumerate(zip(axes, names)):
        widths = normalised_widths(samples_and_metrics[dataset], level, dataset=dataset)
        draw_sharpness(ax, widths, level)
        ax.set_title(f"({chr(ord('a') + i)}) {dataset_label(dataset)}", fontsize=10)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    fig.suptitle(f"UCI per-dataset PI-{round(level * 100):g} sharpness (SA = 1.0; baselines temperature-scaled)")
    return save_figure(fig, out_base)


def yacht_appendix(
    runs: pd.DataFrame | Iterable[PathLike],
    samples_and_metrics: Mapping[str, Any],
    dataset: str,
    out_base: PathLike,
    *,
    level: float = 0.95,
    bins: int = 10,
) -> list[Path]:
    """Two-panel per-dataset figure (paper fig. ``uci_yacht_appendix``; any data set).

    (a) native pooled-PIT histograms of all methods overlaid as step lines (W1 in the legend), uniform dashed;
    (b) the sharpness box plot of :func:`sharpness_boxplot`. Returns ``[png, pdf]``.
    """
    pits = pooled_pit(runs_frame(runs), dataset, "native")
    widths = normalised_widths(samples_and_metrics, level, dataset=dataset)
    fig = new_figure(10.0, 3.8)
    ax_a, ax_b = fig.subplots(1, 2, width_ratios=[1.0, 1.1])
    draw_pit_overlay(ax_a, pits, bins)
    ax_a.set_title("(a) Native PIT (pooled over splits)", fontsize=10)
    draw_sharpness(ax_b, widths, level)
    ax_b.set_title(f"(b) PI-{round(level * 100):g} width / SA (baselines temperature-scaled)", fontsize=10)
    fig.suptitle(f"UCI {dataset_label(dataset)}")
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# teaser (c)
# --------------------------------------------------------------------------------------------------------------
def teaser_sinusoid(
    samples_paths_by_method: Mapping[str, PathLike],
    prepared_path: PathLike,
    out_base: PathLike,
    *,
    level: float = 0.95,
    trend_method: str | None = None,
    max_trend_rmse: float | None = None,
) -> list[Path]:
    """Teaser panel (c): one 1-D toy data set, each method's trend and predictive interval (small multiples).

    Args:
        samples_paths_by_method: ``{method: samples.npz}`` of the toy's test split (keys ``y`` (n,), ``point``
            (n,), ``samples`` (S, n), original units).
        prepared_path: the prepared.npz of the toy (``x_test`` (n, 1) standardised, ``x_mean``, ``x_std``);
            x is shown in original units ``x_test * x_std + x_mean``; rows align with the samples' n.
        out_base: output path without suffix.
        level: central interval level of the bands.
        trend_method: the reference trend (default ``"sa"`` when present, else the first method): SA's point is
            the deterministic backbone's prediction.
        max_trend_rmse: the claim the figure makes, "every method recovers the trend": the RMSE between each
            method's own point prediction and the reference trend over the test inputs must not exceed it
            (original units), else ``ValueError`` naming the method. ``None`` checks nothing.

    Each panel: test observations as dots, the reference trend (black, dashed), the method's own point prediction
    (solid, the method's colour) and its central ``level`` interval (native samples) as a band; the title gives
    the empirical coverage and the trend RMSE. Returns ``[png, pdf]``.
    """
    if not isinstance(samples_paths_by_method, Mapping) or not samples_paths_by_method:
        raise TypeError("samples_paths_by_method must be a non-empty mapping method -> samples.npz")
    prep = load_npz(prepared_path)
    for key in ("x_test", "x_mean", "x_std"):
        if key not in prep:
            raise ValueError(f"{prepared_path} has no {key!r} array")
    x_std_units = np.asarray(prep["x_test"], dtype=np.float64)
    if x_std_units.ndim == 1:
        x_std_units = x_std_units[:, None]
    if x_std_units.ndim != 2:
        raise ValueError(f"teaser_sinusoid needs x_test of shape (n, n_features); {prepared_path} has "
                         f"{x_std_units.shape}")
    # column 0 is the raw 1-D input (stochattn.experiments.uci.sinusoid_features adds derived features after it)
    x = x_std_units[:, 0] * float(np.ravel(prep["x_std"])[0]) + float(np.ravel(prep["x_mean"])[0])
    order = method_order(samples_paths_by_method)
    data = {}
    for method in order:
        d = load_npz(samples_paths_by_method[method])
        for key in ("y", "point", "samples"):
            if key not in d:
                raise ValueError(f"{samples_paths_by_method[method]} has no {key!r} array")
        if d["y"].shape[0] != x.shape[0]:
            raise ValueError(f"{samples_paths_by_method[method]} has {d['y'].shape[0]} test points but "
                             f"{prepared_path} has {x.shape[0]}")
        data[method] = d
    trend_method = trend_method or ("sa" if "sa" in data else order[0])
    if trend_method not in data:
        raise ValueError(f"trend_method {trend_method!r} is not one of {order}")
    idx = np.argsort(x, kind="stable")
    xs = x[idx]
    y = np.asarray(data[trend_method]["y"], dtype=np.float64)[idx]
    trend = np.asarray(data[trend_method]["point"], dtype=np.float64)[idx]
    points = {m: np.asarray(data[m]["point"], dtype=np.float64)[idx] for m in order}
    trend_rmse = {m: float(np.sqrt(np.mean((points[m] - trend) ** 2))) for m in order}
    if max_trend_rmse is not None:
        off = {m: r for m, r in trend_rmse.items() if r > max_trend_rmse}
        if off:
            listed = ", ".join(f"{method_label(m)} {r:.3g}" for m, r in off.items())
            raise ValueError(f"teaser: point predictions off the {method_label(trend_method)} trend by more than "
                             f"RMSE {max_trend_rmse:g}: {listed}; the figure would not show 'same trend'")
    nrows, ncols = subplot_grid(len(order))
    fig = new_figure(3.2 * ncols, 2.5 * nrows)
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    pct = f"{round(level * 100):g}"
    for ax, method in zip(axes, order):
        lo, hi = central_interval(data[method]["samples"], level)
        lo, hi = np.asarray(lo)[idx], np.asarray(hi)[idx]
        cover = float(np.mean((lo <= y) & (y <= hi)))
        ax.fill_between(xs, lo, hi, color=method_color(method), alpha=0.35, lw=0, label=f"{pct}% PI")
        ax.plot(xs, points[method], color=method_color(method), lw=1.6, label="its point prediction")
        ax.plot(xs, trend, color="black", lw=1.0, ls="--", label=f"{method_label(trend_method)} trend")
        ax.scatter(xs, y, s=6, color="0.25", zorder=3, label="observations")
        ax.set_title(f"{method_label(method)}: cov. {cover:.0%}, trend RMSE {trend_rmse[method]:.2f}", fontsize=9)
    for ax in axes[len(order):]:
        ax.set_visible(False)
    for ax in axes[(nrows - 1) * ncols:]:
        ax.set_xlabel("x")
    for ax in axes[::ncols]:
        ax.set_ylabel("y")
    axes[0].legend(fontsize=7, frameon=False, loc="best")
    claim = f" (every trend within RMSE {max_trend_rmse:g})" if max_trend_rmse is not None else ""
    fig.suptitle(f"Same trend{claim}, different {pct}% predictive intervals")
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# cost
# --------------------------------------------------------------------------------------------------------------
def cost_figure(
    cost_tidy: pd.DataFrame | PathLike,
    out_base: PathLike,
    *,
    metric: str = "seconds_total",
    dataset: str | None = None,
    marker: str = "",
) -> list[Path]:
    """Horizontal bars of wall-clock seconds per method on a log axis (paper fig. ``climax_cost`` style).

    Args:
        cost_tidy: tidy table of :func:`stochattn.experiments.uci_tables.uci_cost_table`, or its CSV file.
        out_base: output path without suffix.
        metric: which seconds to show (default ``seconds_total`` = train + calibrate + predict, mean over splits).
        dataset: one data set; ``None`` shows every data set in the table, one bar per (method, data set)
            grouped by method (with a legend) when there are several.
        marker: the one line of :func:`stochattn.figures.figure_marker` (stand-in / reduced run); ``""``: none.

    Non-positive values cannot sit on a log axis: they are left out and marked "0 s". Each bar is labelled with
    its value. Returns ``[png, pdf]``.
    """
    if isinstance(cost_tidy, (str, os.PathLike)):
        cost_tidy = pd.read_csv(cost_tidy)
    if not isinstance(cost_tidy, pd.DataFrame):
        raise TypeError(f"cost_tidy must be a DataFrame or a CSV path, got {type(cost_tidy).__name__}")
    df = cost_tidy[cost_tidy["metric"] == metric]
    if dataset is not None:
        df = df[df["dataset"] == dataset]
    if df.empty:
        raise ValueError(f"cost_tidy has no rows with metric {metric!r}" + (f" for {dataset!r}" if dataset else ""))
    methods = method_order(df["method"])
    datasets = dataset_order(df["dataset"])
    look = {(r.dataset, r.method): float(r.value) for r in df.itertuples(index=False)}
    nd = len(datasets)
    height = 0.8 / nd
    fig = new_figure(6.0, 0.6 + (0.45 + 0.18 * (nd - 1)) * len(methods))
    ax = fig.add_subplot()
    positives = [v for v in look.values() if math.isfinite(v) and v > 0]
    floor = min(positives) / 3 if positives else 1e-3
    for j, ds in enumerate(datasets):
        for i, method in enumerate(methods):
            y = i + (j - (nd - 1) / 2) * height
            value = look.get((ds, method), math.nan)
            color = method_color(method) if nd == 1 else PALETTE[j % len(PALETTE)]
            if math.isfinite(value) and value > 0:
                ax.barh(y, value - floor, left=floor, height=height * 0.9, color=color,
                        label=dataset_label(ds) if (nd > 1 and i == 0) else None)
                if nd == 1:
                    ax.text(value * 1.08, y, format_seconds(value), va="center", fontsize=8)
            elif nd == 1:
                ax.text(floor * 1.08, y, "0 s" if math.isfinite(value) else "n/a", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(methods)))
    ax.set_yticklabels([method_label(m) for m in methods])
    ax.set_ylim(len(methods) - 0.5, -0.5)  # first method on top; fixed even when a bar is missing
    if positives:
        ax.set_xlim(floor, max(positives) * 4)
    ax.set_xlabel(f"{metric.replace('_', ' ')} (log scale)")
    title = "Total method cost" if metric == "seconds_total" else metric
    ax.set_title(f"{title}: {dataset_label(datasets[0])}" if nd == 1 else f"{title} (UCI)", fontsize=10)
    if nd > 1:
        ax.legend(fontsize=7, frameon=False, loc="lower right")
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# against the paper
# --------------------------------------------------------------------------------------------------------------
def _label_points(ax, points: list[tuple[str, float, float]], size: float = 6.5, marker: float = 6.0) -> None:
    """Annotate each (label, x, y) beside its point, in the first of four corners (right above, right below, left
    above, left below), then the same one and two lines further out (with a thin leader line to its point), where its
    text (as wide as the figure's renderer draws it, 1.15 x ``size`` high) overlaps no label placed before and no
    other point's marker (``marker`` points wide) and stays inside the panel; where none does, the one with the
    fewest overlaps, then inside the panel, then the least overlapped area. Offsets are in points from the panel's
    data, so the panel's box must be final: draw a constrained-layout figure first."""

    def overlap(a, b):  # the area two boxes (x0, y0, width, height) share
        dx = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
        dy = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
        return dx * dy if dx > 0 and dy > 0 else 0.0

    def cost(box, others):  # overlaps, then whether it leaves the panel, then the area overlapped
        areas = [overlap(box, b) for b in others]
        return sum(a > 0 for a in areas), overlap(box, panel) < box[2] * box[3], sum(areas)

    renderer, font, inches = ax.figure.canvas.get_renderer(), FontProperties(size=size), ax.figure.dpi_scale_trans
    to_points = ax.transData + inches.inverted()
    panel = tuple(v * 72 for v in ax.get_window_extent(renderer).transformed(inches.inverted()).bounds)
    centres = [tuple(v * 72 for v in to_points.transform((x, y))) for _, x, y in points]
    markers = [(px - marker / 2, py - marker / 2, marker, marker) for px, py in centres]
    placed = []
    for i, ((label, x, y), (px, py)) in enumerate(zip(points, centres)):
        w = renderer.get_text_width_height_descent(label, font, ismath=False)[0] * 72 / ax.figure.dpi
        h = 1.15 * size  # as drawn, descenders included (va="bottom")
        others = placed + markers[:i] + markers[i + 1 :]
        corners = [(dx, dy, ha, (px + dx - (w if ha == "right" else 0), py + dy, w, h), lift)
                   for lift in (0, h, 2 * h) for dx, dy, ha in ((3, 2 + lift, "left"), (3, -2 - h - lift, "left"),
                                                                (-3, 2 + lift, "right"), (-3, -2 - h - lift, "right"))]
        dx, dy, ha, box, lift = min(corners, key=lambda c: cost(c[3], others))  # fmt: skip
        placed.append(box)
        leader = dict(arrowstyle="-", lw=0.4, color="0.55", shrinkA=0, shrinkB=2.5) if lift else None
        ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=size, ha=ha, va="bottom",
                    arrowprops=leader)  # fmt: skip


def paper_w1_figure(comparison: pd.DataFrame | PathLike, out_base: PathLike, *, marker: str = "") -> list[Path]:
    """Our native pooled-PIT W1 (y) against the paper's (x), one panel per method, each data set a labelled point;
    log axes shared by every panel, the diagonal, the band within 2x of the paper shaded, and each point's floor
    (the expected W1 of as many calibrated PIT values) as a grey dash: a calibrated method would sit near it.

    Args:
        comparison: :func:`stochattn.experiments.uci_tables.uci_slice_comparison`'s frame (columns ``dataset``,
            ``method``, ``w1``, ``w1_floor``, ``paper_w1``, ``within``; ``n`` optional), or its CSV file.
        out_base: output path without suffix.
        marker: the one line of :func:`stochattn.figures.figure_marker`; ``""``: none.

    Rows without a paper value or a W1 of ours are left out; a panel title counts the points ``within`` (2x of the
    paper, or 1.5x our floor). Returns ``[png, pdf]``.
    """
    if isinstance(comparison, (str, os.PathLike)):
        comparison = pd.read_csv(comparison)
    if not isinstance(comparison, pd.DataFrame):
        raise TypeError(f"comparison must be a DataFrame or a CSV path, got {type(comparison).__name__}")
    missing = {"dataset", "method", "w1", "w1_floor", "paper_w1", "within"} - set(comparison.columns)
    if missing:
        raise ValueError(f"comparison lacks the columns {sorted(missing)}")
    df = comparison[(comparison["w1"] > 0) & (comparison["paper_w1"] > 0)]
    if df.empty:
        raise ValueError("comparison has no row with both a W1 of ours and the paper's")
    methods = method_order(df["method"])
    values = np.concatenate([df["w1"], df["paper_w1"], df.loc[df["w1_floor"] > 0, "w1_floor"]])
    lo, hi = values.min() / 1.6, values.max() * 1.6
    rows, cols = subplot_grid(len(methods), 4)
    fig = new_figure(2.6 * cols, 2.5 * rows + 0.5)
    fig.suptitle("Native pooled-PIT W1, ours against the paper's. Shaded: within 2x; dash: our floor, the W1 of as "
                 "many calibrated PIT values;\n\"within\": 2x of the paper or 1.5x the floor; (k): a data set's "
                 "splits, where fewer than the most", fontsize=8)  # fmt: skip
    most = int(df["n"].max()) if "n" in df else 0
    grid = np.linspace(lo, hi, 2)
    panels = []
    for k, method in enumerate(methods):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), aspect="equal")
        ax.fill_between(grid, grid / 2, grid * 2, color="0.92", lw=0)
        ax.plot(grid, grid, color="0.5", lw=0.8)
        d = df[df["method"] == method]
        color = method_color(method)
        points = []
        for r in d.itertuples(index=False):
            if r.w1_floor > 0:
                ax.plot([r.paper_w1 / 1.12, r.paper_w1 * 1.12], [r.w1_floor] * 2, color="0.55", lw=1.2)
            ax.plot(r.paper_w1, r.w1, "o", color=color, ms=5)
            n = int(getattr(r, "n", most))
            points.append((dataset_label(r.dataset) + (f" ({n})" if n < most else ""), r.paper_w1, r.w1))
        panels.append((ax, points))
        inside = int(d["within"].astype(bool).sum())
        ax.set_title(f"{method_label(method)}: {inside} of {len(d)} within", fontsize=8.5)
        ax.tick_params(labelsize=7)
        if k % cols == 0:
            ax.set_ylabel("native W1, ours", fontsize=8)
        if k >= (rows - 1) * cols or k + cols >= len(methods):
            ax.set_xlabel("native W1, paper", fontsize=8)
    draw_marker(fig, marker)
    # The labels' offsets are measured in points from each panel's data, so the panels' boxes must be final first:
    # the constrained layout and the equal aspect set them when the figure is drawn, then the layout is frozen.
    fig.canvas.draw()
    fig.set_layout_engine("none")
    for ax, points in panels:
        _label_points(ax, points)
    return save_figure(fig, out_base)


# --------------------------------------------------------------------------------------------------------------
# training schedules
# --------------------------------------------------------------------------------------------------------------
def schedule_curves_figure(curves: pd.DataFrame | PathLike, kept: pd.DataFrame | PathLike, out_base: PathLike, *,
                           reference: float | None = None, marker: str = "") -> list[Path]:  # fmt: skip
    """Validation RMSE/sigma_y per epoch (log y) of each training schedule, one panel per prepared split, one line
    per (lr, batch), and the epoch each patience keeps marked on its line (the choice of
    ``benchmarks/uci_train_select.py``).

    Args:
        curves: one row per epoch: ``prepared``, ``lr``, ``batch``, ``epoch`` (1-based), ``val_nrmse`` (its
            ``--curves`` CSV).
        kept: one row per (prepared, lr, batch, patience) with ``best_epoch`` (its ``--out`` CSV).
        out_base: output path without suffix.
        reference: a horizontal line, labelled as the paper's test RMSE/sigma_y (None: none).
        marker: the one line of :func:`stochattn.figures.figure_marker`; ``""``: none.

    Returns ``[png, pdf]``.
    """
    curves = pd.read_csv(curves) if isinstance(curves, (str, os.PathLike)) else curves
    kept = pd.read_csv(kept) if isinstance(kept, (str, os.PathLike)) else kept
    for name, frame, need in (("curves", curves, {"prepared", "lr", "batch", "epoch", "val_nrmse"}),
                              ("kept", kept, {"prepared", "lr", "batch", "patience", "best_epoch"})):  # fmt: skip
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name} must be a DataFrame or a CSV path, got {type(frame).__name__}")
        if need - set(frame.columns):
            raise ValueError(f"{name} lacks the columns {sorted(need - set(frame.columns))}")
    if curves.empty:
        raise ValueError("curves has no epoch")
    splits = list(dict.fromkeys(curves["prepared"]))
    schedules = list(dict.fromkeys(zip(curves["lr"], curves["batch"])))
    patiences = sorted(set(kept["patience"]))
    shapes = dict(zip(patiences, "v^sDo*"))
    fig = new_figure(4.2 * len(splits), 3.4)
    for k, prepared in enumerate(splits):
        ax = fig.add_subplot(1, len(splits), k + 1)
        for j, (lr, batch) in enumerate(schedules):
            c = curves[(curves["prepared"] == prepared) & (curves["lr"] == lr) & (curves["batch"] == batch)]
            if c.empty:
                continue
            color = PALETTE[j % len(PALETTE)]
            ax.plot(c["epoch"], c["val_nrmse"], color=color, lw=0.8, label=f"lr {lr:g}, batch {batch}")
            by_epoch = dict(zip(c["epoch"], c["val_nrmse"]))
            for r in kept[(kept["prepared"] == prepared) & (kept["lr"] == lr) & (kept["batch"] == batch)].itertuples():
                ax.plot(r.best_epoch, by_epoch[r.best_epoch], shapes.get(r.patience, "o"), color=color, ms=6,
                        mfc="white", mew=1.2)  # fmt: skip
        if reference is not None:
            ax.axhline(reference, color="0.4", ls="--", lw=0.8, label="paper, test (its splits)")
        for p in patiences:
            ax.plot([], [], shapes.get(p, "o"), color="0.3", mfc="white", label=f"kept at patience {p}")
        where = Path(str(prepared)).parent  # results/uci/<dataset>/split<k>
        ax.set(yscale="log", xlabel="epoch", title=f"{dataset_label(where.parent.name)}, {where.name}")
        if k == 0:
            ax.set_ylabel("validation RMSE / sigma_y")
            ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)


def loss_minimum_figure(results: Sequence[Mapping[str, Any]], out_base: PathLike, *, marker: str = "") -> list[Path]:
    """Algorithm 2's loss against SA's scale, one panel per backbone: the evaluated candidates (loss / s0^2 with its
    standard error, at their scale / s0; the arg-min filled), the loss as a function of the scale at the arg-min's
    kappa and rho (:func:`stochattn.calibrate.loss_minimum_scale`), its minimum (kappa * rho) and the scale-matching
    scale (1) as vertical lines.

    Args:
        results: ``benchmarks/uci_spread_tracking.py``'s entries (its ``--out`` JSON): each with ``net`` (a path
            ending in ``<dataset>/split<k>/backbone``) and ``loss_minimum`` (``rows``: per evaluated ``nu`` its
            ``scale_ratio``, ``loss``, ``loss_se``, ``kappa``, ``rho``, ``s0``, ``z2``; ``nu_loss_argmin``,
            ``nu_surrogate``).
        out_base: output path without suffix.
        marker: the one line of :func:`stochattn.figures.figure_marker`; ``""``: none.

    Returns ``[png, pdf]``. Each panel spans the scales of its candidates up to twice s0; a candidate beyond (nu = 1
    on naval and energy) is left off and counted in the panel's note.
    """
    if not results:
        raise ValueError("no backbone to draw")
    for r in results:
        if not (r.get("loss_minimum") or {}).get("rows"):
            raise ValueError(f"{r.get('net')!r} has no loss_minimum rows (benchmarks/uci_spread_tracking.py --out)")
    fig = new_figure(3.0 * len(results), 3.3)
    for k, r in enumerate(results):
        lm = r["loss_minimum"]
        rows = lm["rows"]
        at = next(row for row in rows if row["nu"] == lm["nu_loss_argmin"])
        s2, least = at["s0"] ** 2, at["kappa"] * at["rho"]
        shown = [row for row in rows if row["scale_ratio"] <= 2.0]
        q_max = min(2.0, max(1.3, 1.1 * max((row["scale_ratio"] for row in shown), default=1.0)))
        ax = fig.add_subplot(1, len(results), k + 1)
        q = np.linspace(0.02, q_max, 200)
        ax.plot(q, q**2 / at["kappa"] - 2 * at["rho"] * q + at["z2"] / s2, color="0.5", lw=0.9,
                label="loss if nu only scaled SA's deviations")  # fmt: skip
        for row in shown:
            best = row["nu"] == lm["nu_loss_argmin"]
            ax.errorbar(row["scale_ratio"], row["loss"] / s2, yerr=row.get("loss_se", 0.0) / s2, fmt="o", ms=5,
                        color=PALETTE[0], mfc=PALETTE[0] if best else "white", capsize=2, lw=0.8)  # fmt: skip
            ax.annotate(str(row["nu"]), (row["scale_ratio"], row["loss"] / s2), xytext=(3, 4),
                        textcoords="offset points", fontsize=6)  # fmt: skip
        ax.axvline(least, color=PALETTE[1], ls="--", lw=0.9, label="the loss least: kappa rho s0")
        ax.axvline(1.0, color="0.3", ls=":", lw=0.9, label="scale-matching: SA's scale = s0")
        ax.plot([], [], "o", color=PALETTE[0], mfc="white", label="evaluated nu (filled: Algorithm 2's arg-min)")
        off = len(rows) - len(shown)
        note = f"kappa {at['kappa']:.2f}, rho {at['rho']:.2f}\nleast at {least:.2f} s0" + (
            f"\n{off} nu beyond 2 s0" if off else "")
        ax.text(0.97, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=6.5)
        where = Path(str(r["net"])).parent  # <dataset>/split<k>
        ax.set(xlim=(0, q_max), xlabel="SA's scale / s0", title=f"{dataset_label(where.parent.name)}, {where.name}")
        if k == 0:
            ax.set_ylabel("loss / s0^2")
        ax.tick_params(labelsize=7)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=7, frameon=False)
    draw_marker(fig, marker)
    return save_figure(fig, out_base)
