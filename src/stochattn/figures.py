"""Shared figure helpers: one figure, one colour per method, atomic PNG + PDF, and the panels several experiments
draw (PIT histograms, sharpness box plots). The figures themselves live in the experiments' modules
(``stochattn.experiments.uci_figures``, ...).

Every figure is drawn on a :class:`matplotlib.figure.Figure` with the Agg canvas (:func:`new_figure`; no pyplot,
no global backend switch) and saved as ``<out_base>.png`` (dpi :data:`DPI`) and ``<out_base>.pdf`` atomically by
:func:`save_figure`; a figure writer returns the list of files it wrote. Provenance (``<file>.prov.json``) is
written by the caller.

    new_figure / subplot_grid / save_figure   figure creation, small-multiples grid, PNG + PDF output
    METHOD_COLORS / method_color              the colour of each method, the same in every figure
    runs_frame / pooled_pit                   PIT values of all splits per method from report.load_runs
    draw_pit_grid / draw_pit_overlay          PIT histograms: one panel per method / all methods as step lines
    draw_sharpness                            box plot of normalised widths (whiskers P5/P95, diamond = mean)
    format_seconds                            "12.3 s", "4.5 min", "1.2 h", "3.0 d"
    figure_marker / draw_marker               the one line a figure of a stand-in or reduced run carries (the full
                                              caption stays in the report's caption and the .prov.json sidecar)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stochattn.extras import requires
from stochattn.io import atomic_path
from stochattn.metrics import w1_null_floor, w1_uniform
from stochattn.report import load_runs, method_label, method_order

with requires("workflow"):
    import pandas as pd
    from matplotlib import cbook
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "PALETTE",
    "METHOD_COLORS",
    "PathLike",
    "method_color",
    "new_figure",
    "subplot_grid",
    "save_figure",
    "runs_frame",
    "pooled_pit",
    "draw_pit_grid",
    "draw_pit_overlay",
    "draw_sharpness",
    "format_seconds",
    "figure_marker",
    "draw_marker",
    "MARKER_MAX_CHARS",
    "compose_panels",
]

DPI = 150

PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                            "#bcbd22", "#17becf")
"""matplotlib's tab10."""

METHOD_COLORS: dict[str, str] = {
    "sa": PALETTE[0],  # blue
    "sa_match": PALETTE[9],  # cyan
    "mc_dropout": PALETTE[1],  # orange
    "contextual_dropout": PALETTE[6],  # pink
    "swag": PALETTE[2],  # green
    "multiswag": PALETTE[3],  # red
    "hsa": PALETTE[4],  # purple
    "ivon": PALETTE[5],  # brown
}
"""One colour per method, the same in every figure (SA blue, SA (scale-match) cyan)."""

PathLike = str | os.PathLike


def method_color(method: str) -> str:
    """:data:`METHOD_COLORS`; for another method a :data:`PALETTE` colour that depends on its name only."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return PALETTE[sum(map(ord, method)) % len(PALETTE)]


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure of ``width`` x ``height`` inches on an Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def subplot_grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, columns) of a small-multiples grid of ``n`` panels, at most ``max_cols`` wide."""
    cols = min(max_cols, n)
    return math.ceil(n / cols), cols


def _out_paths(out_base: PathLike) -> tuple[Path, Path]:
    base = os.fspath(out_base)
    for suffix in (".png", ".pdf"):
        base = base.removesuffix(suffix)
    if not Path(base).name:
        raise ValueError(f"out_base must name a file (without suffix), got {os.fspath(out_base)!r}")
    return Path(base + ".png"), Path(base + ".pdf")


def save_figure(fig: Figure, out_base: PathLike) -> list[Path]:
    """Save ``fig`` as ``<out_base>.png`` (dpi :data:`DPI`) and ``<out_base>.pdf``, each atomically.

    A trailing ``.png`` / ``.pdf`` on ``out_base`` is dropped. The PDF carries no creation date, so the same
    figure gives the same bytes. Returns ``[png, pdf]``.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    png, pdf = _out_paths(out_base)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    with atomic_path(pdf) as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None})
    return [png, pdf]


# --------------------------------------------------------------------------------------------------------------
# PIT
# --------------------------------------------------------------------------------------------------------------
def runs_frame(runs: Any) -> pd.DataFrame:
    """``runs`` itself if it is a DataFrame (of :func:`stochattn.report.load_runs`), else the metrics.json paths
    it lists, loaded."""
    if isinstance(runs, pd.DataFrame):
        return runs
    if isinstance(runs, (str, bytes, os.PathLike)) or not isinstance(runs, Iterable):
        raise TypeError(f"runs must be the DataFrame of report.load_runs or a list of metrics.json paths, got "
                        f"{type(runs).__name__}")
    return load_runs(runs, progress=False)


def pooled_pit(runs: pd.DataFrame, dataset: str, which: str) -> dict[str, np.ndarray]:
    """``{method: PIT values of all splits}`` of ``dataset`` in :func:`stochattn.report.method_order`.

    ``which``: ``"native"`` or ``"scaled"`` (the ``pit_<which>`` column of ``runs``); SA is native in both.
    """
    if which not in ("native", "scaled"):
        raise ValueError(f"pit must be 'native' or 'scaled', got {which!r}")
    col = f"pit_{which}"
    if col not in runs.columns:
        raise ValueError(f"runs lacks column {col!r}; build it with report.load_runs")
    d = runs[runs["dataset"] == dataset]
    if d.empty:
        known = sorted(set(runs["dataset"]))
        raise ValueError(f"dataset {dataset!r} not in runs (has {known})")
    order = method_order(d["method"])
    out = {}
    for method in order:
        # SA is reported native in both modes
        c = "pit_native" if method == "sa" else col
        out[method] = np.concatenate(list(d.loc[d["method"] == method, c]))
    return out


def draw_pit_grid(fig: Figure, pits: Mapping[str, np.ndarray], bins: int) -> None:
    """Small multiples on ``fig`` (:func:`subplot_grid`, shared axes): per method a density histogram of its PIT
    values on ``bins`` equal bins of [0, 1] in its colour, the uniform density (1) dashed, and its W1
    (:func:`stochattn.metrics.w1_uniform`) with the expected W1 of as many calibrated values
    (:func:`stochattn.metrics.w1_null_floor`) in the panel title."""
    nrows, ncols = subplot_grid(len(pits))
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    for ax, (method, values) in zip(axes, pits.items()):
        ax.hist(values, bins=edges, density=True, color=method_color(method), alpha=0.8, edgecolor="white")
        ax.axhline(1.0, color="k", ls="--", lw=1.0)
        floor = w1_null_floor(values.size)
        ax.set_title(f"{method_label(method)}  $W_1$={w1_uniform(values):.3f} (floor {floor:.3f})", fontsize=9)
        ax.set_xlim(0.0, 1.0)
    for ax in axes[len(pits):]:
        ax.set_visible(False)
    for ax in axes[(nrows - 1) * ncols:]:
        ax.set_xlabel("PIT")
    for ax in axes[::ncols]:
        ax.set_ylabel("density")


def draw_pit_overlay(ax: Any, pits: Mapping[str, np.ndarray], bins: int) -> None:
    """All methods' PIT density histograms on one ``ax`` as step lines (W1 in the legend), the uniform dashed and
    labelled with the expected W1 of as many calibrated values (:func:`stochattn.metrics.w1_null_floor`)."""
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    for method, values in pits.items():
        ax.hist(values, bins=edges, density=True, histtype="step", lw=1.8, color=method_color(method),
                label=f"{method_label(method)} ($W_1$={w1_uniform(values):.3f})")
    sizes = sorted({v.size for v in pits.values()})
    floors = "/".join(f"{w1_null_floor(n):.3f}" for n in sizes)
    ax.axhline(1.0, color="k", ls="--", lw=1.0, label=f"uniform (calibrated $W_1$ floor {floors})")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("PIT")
    ax.set_ylabel("density")
    ax.legend(fontsize=7, frameon=False, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))


# --------------------------------------------------------------------------------------------------------------
# sharpness
# --------------------------------------------------------------------------------------------------------------
def draw_sharpness(ax: Any, widths: Mapping[str, np.ndarray], level: float) -> dict[str, list]:
    """Box plot of each method's normalised widths on ``ax``: boxes quartiles in the method's colour, median line,
    whiskers at P5 / P95 (no fliers), white diamond at the mean, dashed line at 1. Returns matplotlib's boxplot
    artists dict."""
    methods = list(widths)
    positions = np.arange(1, len(methods) + 1)
    stats = cbook.boxplot_stats([widths[m] for m in methods])
    for st, method in zip(stats, methods):
        # matplotlib's whis=(5, 95) stops at the innermost data point beyond each percentile; draw the whiskers
        # at the percentiles themselves (paper: "Whiskers: P5/P95")
        st["whislo"], st["whishi"] = np.percentile(widths[method], [5.0, 95.0])
        st["fliers"] = np.empty(0)
    box = ax.bxp(stats, positions=positions, showfliers=False, showmeans=True, patch_artist=True, widths=0.6,
                 meanprops={"marker": "D", "markerfacecolor": "white", "markeredgecolor": "black",
                            "markersize": 6},
                 medianprops={"color": "black", "lw": 1.2})
    for patch, method in zip(box["boxes"], methods):
        patch.set_facecolor(method_color(method))
        patch.set_alpha(0.75)
    ax.axhline(1.0, color="k", ls="--", lw=1.0)
    ax.set_xticks(positions)
    ax.set_xticklabels([method_label(m) for m in methods], rotation=20)
    ax.set_ylabel(f"PI-{round(level * 100):g} width / SA mean width")
    return box


# --------------------------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------------------------
def format_seconds(s: float) -> str:
    """A duration for a bar label: seconds (3 significant digits), minutes, hours or days (1 decimal)."""
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.3g} s"


MARKER_MAX_CHARS = 100
"""The longest marker :func:`draw_marker` draws: it must stay one line in a panel of the teaser."""


def figure_marker(standin: str = "", *, reduced: bool = False, detail: str = "") -> str:
    """The one line a figure carries where its numbers are not the paper's setting; the caption says the rest.

    ``figure_marker("aquaplanet", reduced=True, detail="Z500 24 h")`` -> ``"STAND-IN: aquaplanet, Z500 24 h,
    reduced; see caption"``; ``reduced`` alone -> ``"REDUCED PROTOCOL, <detail>; see caption"``; neither -> ``""``.
    """
    if not standin and not reduced:
        return ""
    head = f"STAND-IN: {standin}" if standin else "REDUCED PROTOCOL"
    parts = [head, detail, "reduced" if standin and reduced else ""]
    marker = ", ".join(p for p in parts if p) + "; see caption"
    _check_marker(marker)
    return marker


def _check_marker(marker: Any) -> None:
    if not isinstance(marker, str):
        raise TypeError(f"marker must be a string, got {type(marker).__name__}")
    if "\n" in marker or len(marker) > MARKER_MAX_CHARS:
        raise ValueError(f"a figure marker is one line of at most {MARKER_MAX_CHARS} characters (the caption holds "
                         f"the rest), got {marker!r}")


def draw_marker(fig: Figure, marker: str) -> None:
    """``marker`` (:func:`figure_marker`; one line) as a footnote at the bottom right of ``fig``, in small dark red;
    nothing for ``""``."""
    _check_marker(marker)
    if marker:
        fig.supxlabel(marker, x=0.995, ha="right", fontsize=7.5, color="#9b1c1c", fontstyle="italic")


def compose_panels(
    rows: Sequence[Sequence[PathLike]],
    out_base: PathLike,
    *,
    title: str = "",
    width: float = 14.0,
) -> list[Path]:
    """One multi-panel figure from panel images drawn by other jobs (the paper's teaser (a) (b) (c)): ``rows`` of
    PNG paths, each row as wide as the figure, each panel at its own aspect ratio and lettered (a), (b), ... in
    reading order. The panels are raster images (at their own DPI), also in the PDF. Returns ``[png, pdf]``."""
    with requires("workflow"):
        import matplotlib.image as mpimg

    rows = [list(r) for r in rows if len(r)]
    if not rows:
        raise ValueError("compose_panels: no panel")
    images = [[mpimg.imread(os.fspath(p)) for p in r] for r in rows]
    # each row's height: the figure width over the sum of its panels' aspect ratios (width / height)
    heights = [width / sum(im.shape[1] / im.shape[0] for im in r) for r in images]
    fig = new_figure(width, sum(heights) + (0.4 if title else 0.0))
    grid = fig.add_gridspec(len(images), 1, height_ratios=heights, hspace=0.02)
    letter = 0
    for i, r in enumerate(images):
        sub = grid[i].subgridspec(1, len(r), width_ratios=[im.shape[1] / im.shape[0] for im in r], wspace=0.02)
        for j, im in enumerate(r):
            ax = fig.add_subplot(sub[j])
            ax.imshow(im)
            ax.set_axis_off()
            ax.text(0.0, 1.0, f"({chr(ord('a') + letter)})", transform=ax.transAxes, fontsize=12,
                    fontweight="bold", va="top", ha="left")  # fmt: skip
            letter += 1
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, out_base)
