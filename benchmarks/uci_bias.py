"""Where a UCI method's PIT bias comes from (issue 46: yacht's SA PIT mean at z -4.6 / -5.4).

    python benchmarks/uci_bias.py RESULTS_DIR [--datasets yacht energy concrete] [--methods sa sa_match mc_dropout swag]
        [--out bias.json]

RESULTS_DIR is a workflow run's directory (it holds ``results/uci/<dataset>/split<k>/<method>/samples.npz``). For each
(data set, method), pooled over the splits found (every split in its own sigma_y units), on the TEST part and on the
CALIBRATION part (the part SA's nu is chosen on), :func:`stochattn.metrics.bias_sources`:

* the point prediction's own bias (mean of y - point, its z): for SA and MC Dropout the deterministic backbone's;
* the ensemble's offset from that point (mean and median of the samples minus the point), i.e. how far the
  samples sit from the prediction the paper says SA's variability is centred on (§3, "The deterministic predictor
  remains the reference around which SA's variability is centered"; mean preservation, Prop. 1, holds per attention
  row, not through the network's nonlinear layers);
* the PIT mean's z as drawn and with each input's samples shifted onto the point (offset removed, spread kept);
* the same split by thirds of the point prediction (a steep, skewed target like yacht's: where the offset sits).

Prints one block per data set and writes everything to ``--out`` (JSON). Also the calibration part's size and SA's
nu per split (from meta.json).

``--training-offset`` (a labelled extra, not the paper's method) also loads each split's backbone
(``backbone/model.pt``, checked against its SHA-256) and measures its mean residual on the TRAINING part: an offset
the same there as on the calibration and test parts is the network's own intercept at its kept epoch, not a shift
of the test data. Beside it the mean of 20 passes with the backbone's dropout on (seeded by ``--seed``): where that
mean is unbiased and the eval-mode point is not, the offset is dropout's train/eval shift. For each method whose
point is that backbone's prediction (checked on the test part: SA at both operating points, MC Dropout where the
backbone's own rates won) it prints the W1 and PIT-mean z of the samples with their split's training-part offset
added (``bias_sources(shift=...)``): what removing that offset, learned from training data alone, would give.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from stochattn.baselines.mc_dropout import dropout_modules, mc_dropout_samples
from stochattn.experiments.uci import load_backbone, load_prepared
from stochattn.io import load_json, load_npz
from stochattn.metrics import bias_sources, point_residual
from stochattn.training import predict


def pooled(run_dirs: list[Path], part: str) -> dict[str, np.ndarray]:
    """samples (S, N), point (N,), y (N,) of ``part`` ("test" or "cal") over runs, each split in its sigma_y units."""
    prefix = "" if part == "test" else "cal_"
    out = {"samples": [], "point": [], "y": []}
    for d in run_dirs:
        z = load_npz(d / "samples.npz")
        s = float(z["sigma_y"])
        out["samples"].append(z[f"{prefix}samples"] / s)
        out["point"].append(z[f"{prefix}point"] / s)
        out["y"].append(z[f"{prefix}y"] / s)
    return {
        "samples": np.concatenate(out["samples"], axis=1),
        "point": np.concatenate(out["point"]),
        "y": np.concatenate(out["y"]),
    }


def backbone_training_offset(split_dir: Path, seed: int, dropout_passes: int = 20) -> dict | None:
    """The split's backbone on its training part: ``point_residual`` of y - point (σ_y units: the prepared targets are
    standardised by the training part's σ_y); the same for the mean of ``dropout_passes`` passes with its dropout on
    (the network as trained: an offset of the eval-mode point alone is dropout's train/eval shift; None without
    dropout); its test-part prediction in the original units (which methods' point it is). None without a backbone."""
    model = split_dir / "backbone" / "model.pt"
    if not model.exists():
        return None
    prep = load_prepared(split_dir / "prepared.npz")
    net = load_backbone(prep, model)
    residual = point_residual(predict(net, prep["x_train"]).numpy().ravel(), prep["y_train"])
    dropout_on = None
    if dropout_modules(net):
        passes = mc_dropout_samples(net, prep["x_train"], dropout_passes, seed, batch_size=8192)
        dropout_on = point_residual(passes.numpy().mean(axis=0), prep["y_train"])
    test_point = predict(net, prep["x_test"]).numpy().ravel() * float(prep["y_std"]) + float(prep["y_mean"])
    return {"residual": residual, "dropout_on": dropout_on, "test_point": test_point, "sigma_y": float(prep["y_std"])}


def is_backbone_point(run_dir: Path, backbone: dict | None) -> bool:
    """Whether the run's test-part point is the backbone's prediction (to float32 rounding)."""
    if backbone is None:
        return False
    point = load_npz(run_dir / "samples.npz")["point"].ravel()
    tol = 1e-5 * backbone["sigma_y"]
    return point.shape == backbone["test_point"].shape and bool(np.allclose(point, backbone["test_point"], atol=tol))


def training_shift(runs: list[Path], offsets: dict[str, dict], part: str) -> np.ndarray:
    """Per input of :func:`pooled`'s ``part`` (same order), its split's training-part offset (σ_y units)."""
    key = "y" if part == "test" else "cal_y"
    return np.concatenate(
        [np.full(load_npz(r / "samples.npz")[key].size, offsets[r.parent.name]["residual"]["mean"]) for r in runs]
    )


def by_thirds(arrays: dict[str, np.ndarray], seed: int) -> list[dict[str, float]]:
    """bias_sources in the lower, middle and upper third of the point prediction."""
    order = np.argsort(arrays["point"], kind="stable")
    return [
        bias_sources(arrays["samples"][:, g], arrays["point"][g], arrays["y"][g], seed)
        for g in np.array_split(order, 3)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dir", type=Path)
    ap.add_argument("--datasets", nargs="+", default=["yacht", "energy", "concrete"])
    ap.add_argument("--methods", nargs="+", default=["sa", "sa_match", "mc_dropout", "swag"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--training-offset", action="store_true",
                    help="also each backbone's mean residual on its training part, and W1 with it removed")  # fmt: skip
    args = ap.parse_args()
    report: dict = {}
    for ds in args.datasets:
        root = args.results_dir / "results" / "uci" / ds
        splits = sorted(root.glob("split*"), key=lambda p: int(p.name[5:]))
        info = []
        for sp in splits:
            prep = np.load(sp / "prepared.npz")
            meta = sp / "sa" / "meta.json"
            nu = load_json(meta).get("extra", load_json(meta)).get("nu") if meta.exists() else None
            info.append(
                {
                    "split": sp.name,
                    "n_cal": int(len(prep["y_cal"])),
                    "n_val": int(len(prep["y_val"])),
                    "n_test": int(len(prep["y_test"])),
                    "sa_nu": nu,
                    "sa_meta": str(meta),
                }
            )
        report[ds] = {"splits": info, "methods": {}}
        print(f"\n== {ds}: {len(splits)} splits; calibration rows per split {[i['n_cal'] for i in info]}")
        offsets = {sp.name: backbone_training_offset(sp, args.seed) for sp in splits} if args.training_offset else {}
        for name, off in offsets.items():
            if off is not None:
                r, d = off["residual"], off["dropout_on"]
                on = "" if d is None else f"; dropout on (mean of 20 passes) {d['mean']:+.4f} (z {d['z']:+.1f})"
                print(f"backbone {name}, training part ({r['n']:.0f} rows): y - point {r['mean']:+.4f} σ_y "
                      f"(z {r['z']:+.1f}){on}")  # fmt: skip
                entry = report[ds]["splits"][[i["split"] for i in info].index(name)]
                entry["backbone_training_residual"], entry["backbone_training_residual_dropout_on"] = r, d
        print(
            f"{'method':<11} {'part':<5} {'pt res':>7} {'z':>6} {'ens-pt':>7} {'med-pt':>7} {'z':>6} {'sd':>6} "
            f"{'PIT z':>6} {'PIT z rc':>8} {'W1':>6} {'W1 rc':>6}"
        )
        for m in args.methods:
            runs = [sp / m for sp in splits if (sp / m / "samples.npz").exists()]
            if not runs:
                continue
            entry = {}
            shifts = offsets and all(is_backbone_point(r, offsets[r.parent.name]) for r in runs)
            if offsets and not shifts:
                print(f"{m:<11} (its point is not the backbone's on every split: no training-part shift)")
            for part in ("test", "cal"):
                arrays = pooled(runs, part)
                shift = training_shift(runs, offsets, part) if shifts else None
                b = bias_sources(arrays["samples"], arrays["point"], arrays["y"], args.seed, shift=shift)
                entry[part] = {"all": b, "thirds_of_point": by_thirds(arrays, args.seed)}
                print(
                    f"{m:<11} {part:<5} {b['point_residual_mean']:+7.3f} {b['point_residual_z']:+6.1f} "
                    f"{b['ensemble_offset_mean']:+7.3f} {b['ensemble_offset_median']:+7.3f} "
                    f"{b['ensemble_offset_z']:+6.1f} {b['spread_mean']:6.3f} {b['pit_mean_z']:+6.1f} "
                    f"{b['pit_mean_z_recentred']:+8.1f} {b['w1']:6.3f} {b['w1_recentred']:6.3f}"
                    + (f"  training offset removed: PIT z {b['pit_mean_z_shifted']:+.1f} W1 {b['w1_shifted']:.3f}"
                       if shifts else "")
                )  # fmt: skip
            for k, t in enumerate(entry["test"]["thirds_of_point"]):
                print(
                    f"{'':<11} test third {k + 1}: pt res {t['point_residual_mean']:+.3f} ens-pt "
                    f"{t['ensemble_offset_mean']:+.3f} sd {t['spread_mean']:.3f} PIT z {t['pit_mean_z']:+.1f} "
                    f"-> {t['pit_mean_z_recentred']:+.1f}"
                )
            report[ds]["methods"][m] = entry
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
