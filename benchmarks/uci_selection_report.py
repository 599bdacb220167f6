"""What the baselines' validation selection chose on a UCI run, and how the choice holds on held-out parts (issue 46).

    python benchmarks/uci_selection_report.py RESULTS_DIR [--datasets yacht energy concrete] [--methods mc_dropout swag]
        [--out selection.json]

RESULTS_DIR is a workflow run's directory (``results/uci/<dataset>/split<k>/...``). For every (data set, split, method)
it prints the selection record of meta.json (every candidate's validation CRPS, RMSE/sigma_y and PI-95 coverage, the
choice, whether it lies on an edge of its grid line (:class:`stochattn.selection.Widening`'s definition, by the
learning rate or the dropout rate) and what a widening added), and beside it the chosen predictive's PI-95 coverage,
CRPS and RMSE on the CALIBRATION part and on the TEST part (samples.npz, in sigma_y units). The calibration part took
no part in early stopping or in the choice, so a validation coverage well above the calibration one says the
validation part is optimistic for the chosen candidate (it also chose every network's epoch). The backbone's
RMSE/sigma_y on validation (its early-stopping part), calibration and test parts is printed per split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from stochattn.io import load_json, load_npz
from stochattn.metrics import coverage_and_width, crps
from stochattn.selection import Widening

LINE_KEYS = {"swag": ("lr",), "multiswag": ("lr",), "mc_dropout": ("attention_dropout", "ffn_dropout")}


def part_scores(run: dict, prefix: str) -> dict:
    """PI-95 coverage, mean CRPS and RMSE (sigma_y units) of one part of a samples.npz."""
    s = float(run["sigma_y"])
    x, y, p = run[f"{prefix}samples"] / s, run[f"{prefix}y"] / s, run[f"{prefix}point"] / s
    return {
        "coverage_95": float(coverage_and_width(x, y, [0.95])[0.95]["coverage"]),
        "crps": float(crps(x, y).mean()),
        "rmse": float(np.sqrt(np.mean((p - y) ** 2))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dir", type=Path)
    ap.add_argument("--datasets", nargs="+", default=["yacht", "energy", "concrete"])
    ap.add_argument("--methods", nargs="+", default=["mc_dropout", "swag"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    report = []
    for ds in args.datasets:
        root = args.results_dir / "results" / "uci" / ds
        for sp in sorted(root.glob("split*"), key=lambda p: int(p.name[5:])):
            bb = sp / "backbone" / "meta.json"
            if bb.exists():
                meta = load_json(bb)
                print(
                    f"\n== {ds} {sp.name}: backbone best epoch {meta['best_epoch']} of {meta['epochs_run']}, "
                    f"val RMSE/sigma_y {meta['val_rmse_standardised']:.4f}"
                )
            for m in args.methods:
                if not (sp / m / "meta.json").exists() or not (sp / m / "samples.npz").exists():
                    continue
                rec = load_json(sp / m / "meta.json")["selection"]
                run = load_npz(sp / m / "samples.npz")
                grid, k = rec["grid"], rec["chosen"]["index"]
                keys = LINE_KEYS.get(m)
                edge = 0
                if keys is not None and all(keys[0] in c for c in grid):
                    edge = Widening(keys, factor=2.0, low=1e-12, high=1e12).edge(grid, k)
                held = {"cal": part_scores(run, "cal_"), "test": part_scores(run, "")}
                entry = {
                    "dataset": ds,
                    "split": sp.name,
                    "method": m,
                    "selection": rec,
                    "edge": edge,
                    "chosen_held_out": held,
                }
                report.append(entry)
                print(
                    f"  {m}: chosen #{k} {grid[k]} (edge {'+' if edge > 0 else '-' if edge < 0 else 'no'}; "
                    f"widened {rec.get('widened', 'n/a')})"
                )
                # the settings a candidate's line names: the method's own, else those in which the grid's differ
                shown = keys or [key for key in grid[0] if len({repr(c.get(key)) for c in grid}) > 1]
                for i, c in enumerate(grid):
                    label = ",".join(f"{key}={c[key]}" for key in shown if key in c)
                    if "optimizer" in c:
                        label = f"{c['optimizer']} {label}"
                    crps_v, rmse_v, cov_v = (rec[key][i] for key in ("val_crps", "val_rmse", "val_coverage_95"))
                    fmt = lambda v, f: "  n/a " if v is None else format(v, f)  # noqa: E731
                    print(
                        f"   {'*' if i == k else ' '} {label:<42} val CRPS {fmt(crps_v, '.4f')} RMSE "
                        f"{fmt(rmse_v, '.4f')} PI-95 {fmt(cov_v, '.2f')}"
                    )
                print(
                    f"     chosen on held-out parts: cal PI-95 {held['cal']['coverage_95']:.2f} CRPS "
                    f"{held['cal']['crps']:.4f} RMSE {held['cal']['rmse']:.4f} | test PI-95 "
                    f"{held['test']['coverage_95']:.2f} CRPS {held['test']['crps']:.4f} RMSE "
                    f"{held['test']['rmse']:.4f}"
                )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
