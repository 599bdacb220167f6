"""Does HSA's under-dispersion on the UCI sets come from one of its implementation choices? (issue 46)

    python benchmarks/uci_hsa_variants.py RESULTS_DIR --dataset yacht [--splits 0 1 2]
        [--variant hard|unscaled|scaled] [--out hsa_variants.json]

RESULTS_DIR is a workflow run's directory holding ``results/uci/<dataset>/split<k>/hsa/`` (the workflow's HSA: soft
Gumbel-softmax at both levels; its logit scale is the code's of that run: 1/sqrt(d_head) before 2026-11-29, the
reference's 1 since). For each split this retrains HSA from scratch with ONE choice set, everything else as the
recorded run (its architecture, training schedule, seed, number of samples and tau grid, chosen again on validation
CRPS by the same search):

* ``hard``: straight-through one-hot samples at both levels, as Pei et al.'s CoLA code (``DualStoSelfAttention``);
* ``unscaled``: logits ``Q K~^T`` without 1/sqrt(d_head), as both of their reference modules;
* ``scaled``: logits times 1/sqrt(d_head), as rtdl's attention (the workflow's choice before 2026-11-29).

Prints, per split, the validation CRPS, PI-95 coverage and RMSE of every candidate (the recorded run's and the
variant's) and, for the chosen network of each, the test part's mean predictive SD, RMSE of the sample mean and PI-95
coverage, all in sigma_y units of the fitting part. ``--out`` also keeps the variant's test samples beside it
(``<out stem>_split<k>.npz``). One HSA training per candidate (yacht ~1.5 min on one CPU thread).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from stochattn.baselines.hsa import hsa_ft_transformer
from stochattn.experiments import methods
from stochattn.experiments.uci import load_prepared
from stochattn.io import load_json, load_npz

VARIANTS = {"hard": {"hard": True}, "unscaled": {"logit_scale": 1.0}, "scaled": {"logit_scale": None}}


def test_stats(samples: np.ndarray, y: np.ndarray) -> dict:
    """samples (S, n), y (n,) in sigma_y units -> mean predictive SD, RMSE of the sample mean, PI-95 coverage."""
    lo, hi = np.quantile(samples, [0.025, 0.975], axis=0)
    return {"spread": float(samples.std(0, ddof=1).mean()), "rmse": float(np.sqrt(((samples.mean(0) - y) ** 2).mean())),
            "pi95": float(((y >= lo) & (y <= hi)).mean())}  # fmt: skip


def run_split(split_dir: Path, variant: str) -> dict:
    """The recorded HSA run of ``split_dir`` beside ``variant`` retrained with the same settings."""
    meta = load_json(split_dir / "hsa" / "meta.json")
    record = meta["selection"]
    data = load_prepared(split_dir / "prepared.npz")
    data["source"] = str(split_dir)
    grid = [{k: c[k] for k in ("tau1", "tau2")} for c in record["grid"]]
    cfg = {"n_centroids": record["grid"][0]["n_centroids"], "grid": grid}
    change = VARIANTS[variant]

    def build(c, seed):
        return hsa_ft_transformer(data["x_train"].shape[1], n_centroids=int(c["n_centroids"]), tau1=c["tau1"],
                                  tau2=c["tau2"], seed=seed, **change, **dict(meta["model"]))  # fmt: skip

    t0 = time.perf_counter()
    run = methods.hsa_run(data, build, meta["train"], cfg, int(meta["num_samples"]), int(meta["seed"]), False)
    seconds = time.perf_counter() - t0
    new = run["extra"]["selection"]
    recorded = load_npz(split_dir / "hsa" / "samples.npz")  # original units
    sigma = float(recorded["sigma_y"])
    y = np.asarray(data["y_test"], dtype=float)  # standardised on the fitting part: (y - mean) / sigma_y
    # the same standardisation for the recorded samples
    recorded_samples = (np.asarray(recorded["samples"]) - np.asarray(recorded["y"])) / sigma + y
    rows = {}
    for name, rec, samples in (("recorded run", record, recorded_samples),
                               (variant, new, np.asarray(run["samples"]))):  # fmt: skip
        rows[name] = {"tau": [c["tau1"] for c in rec["grid"]], "val_crps": rec["val_crps"],
                      "val_pi95": rec["val_coverage_95"], "val_rmse": rec["val_rmse"],
                      "chosen_tau": rec["chosen"]["candidate"]["tau1"], "test": test_stats(samples, y)}  # fmt: skip
    return {"rows": rows, "seconds": seconds, "variant_samples": np.asarray(run["samples"]), "y": y}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dir", type=Path)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="hard")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {}
    for k in args.splits:
        split_dir = args.results_dir / "results" / "uci" / args.dataset / f"split{k}"
        if not (split_dir / "hsa" / "meta.json").is_file():
            raise SystemExit(f"{split_dir}/hsa/meta.json not found: run the workflow's HSA on this split first")
        res = run_split(split_dir, args.variant)
        samples, y = res.pop("variant_samples"), res.pop("y")
        out[k] = res
        if args.out is not None:  # the variant's test samples (S, n) and y (n,), standardised, to re-read later
            np.savez(args.out.with_name(f"{args.out.stem}_split{k}.npz"), samples=samples, y=y)
        print(f"{args.dataset} split {k} ({res['seconds']:.0f} s)")
        for name, r in res["rows"].items():
            cands = ", ".join(f"tau {t:g}: CRPS {c:.4f} PI-95 {p:.2f} RMSE {e:.3f}"
                              for t, c, p, e in zip(r["tau"], r["val_crps"], r["val_pi95"], r["val_rmse"]))  # fmt: skip
            t = r["test"]
            print(f"  {name:16s} validation [{cands}] -> tau {r['chosen_tau']:g}; test spread {t['spread']:.3f} "
                  f"RMSE {t['rmse']:.3f} PI-95 {t['pi95']:.2f}")  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps({"dataset": args.dataset, "variant": args.variant, "splits": out}, indent=1))


if __name__ == "__main__":
    main()
