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
(``backbone/model.pt``) and, where SWAG ran, its SWA mean (``swag/posterior.pt``), each checked against its SHA-256, and
measures each one's mean residual on the TRAINING part: an offset the same there as on the calibration and test parts is
the network's own intercept at its kept epoch, not a shift of the test data. Beside it the mean of 20 passes with the
backbone's dropout on (seeded by ``--seed``): where that mean is unbiased and the eval-mode point is not, the offset is
dropout's train/eval shift. The same for the SWA mean, and, where MultiSWAG ran, for the mean of its components' SWA
means (``swa_means``: SWAG's own and ``multiswag/components/*.pt``), whose dropout-on line is the mean of each
component's 20 passes (each at the candidate MultiSWAG's run chose; component 0, the SWAG run, repeated from the
backbone where MultiSWAG chose another candidate than SWAG); and for IVON's mean network (``ivon_mean``: its chosen
candidate's file, where the workflow fitted its grid one candidate a job). For each method whose point is one of those
(checked on the test part: SA at both operating points and MC Dropout where the backbone's own rates won have the
backbone's, SWAG the SWA mean's, IVON its mean network's; MultiSWAG's point, the mean of its pooled samples, is centred
on ``swa_means`` and takes its offset) it prints the W1 and PIT-mean z of the samples with their split's training-part
offset added (``bias_sources(shift=...)``): what removing that offset, learned from training data alone, would give.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.baselines.mc_dropout import dropout_modules, mc_dropout_samples
from stochattn.experiments.methods import load_trainable, swa_mean_network, swag_phase
from stochattn.experiments.uci import _load_component as load_swag_component  # SWAG's posterior.pt
from stochattn.experiments.uci import load_backbone, load_prepared, multiswag_component_networks
from stochattn.io import load_json, load_model, load_npz, save_json
from stochattn.metrics import bias_sources, point_residual
from stochattn.selection import ValidationSplit
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


def _training_part(predictions: dict[str, np.ndarray], prep) -> dict:
    """``point_residual`` of a point model on the training part (σ_y units: the prepared targets are standardised by
    the training part's σ_y) and its test-part prediction in the original units (which methods' point it is).
    ``predictions``: ``{"x_train": (n,), "x_test": (m,)}`` in standardised units."""
    return {
        "residual": point_residual(predictions["x_train"], prep["y_train"]),
        "test_point": predictions["x_test"] * float(prep["y_std"]) + float(prep["y_mean"]),
        "sigma_y": float(prep["y_std"]),
    }


def _eval_predictions(net, prep) -> dict[str, np.ndarray]:
    """``net``'s eval-mode predictions (standardised units) on the training and test parts."""
    return {part: predict(net, prep[part]).numpy().ravel() for part in ("x_train", "x_test")}


def _dropout_on_mean(net, x, passes: int, seed: int) -> np.ndarray | None:
    """(n,) mean of ``passes`` forward passes of ``net`` with its dropout on (None if it has no dropout)."""
    if not dropout_modules(net):
        return None
    return mc_dropout_samples(net, x, passes, seed, batch_size=8192).numpy().mean(axis=0)


def _swa_means(prep, networks: list[tuple], passes: int, seed: int) -> tuple[list, list, list]:
    """Each SWAG component's SWA mean (``networks``: ``(last iterate, SWA mean)`` pairs): its training- and
    test-part predictions in eval mode ``[{"x_train": (n,), "x_test": (m,)}, ...]``, its training-part mean with
    dropout on ``[(n,) or None, ...]``, and the training-part residual (:func:`point_residual`) of the SWAG phase's
    last iterate."""
    points, dropout_on, last = [], [], []
    for net, mean in networks:
        last.append(point_residual(predict(net, prep["x_train"]).numpy().ravel(), prep["y_train"]))
        points.append(_eval_predictions(mean, prep))
        dropout_on.append(_dropout_on_mean(mean, prep["x_train"], passes, seed))
    return points, dropout_on, last


def _swag_networks(prep, path: Path) -> tuple:
    """``(last iterate, SWA mean)`` of SWAG's posterior file (``swag/posterior.pt``)."""
    net, swag, _ = load_swag_component(prep, path)
    return net, swa_mean_network(net, swag)


def _multiswag_networks(split_dir: Path, prep) -> list[tuple]:
    """MultiSWAG's components at the candidate its run chose (``multiswag/meta.json``), each ``(last iterate, SWA
    mean)``: component 0, the SWAG run, from ``swag/posterior.pt`` where SWAG chose the same candidate, else its
    SWAG phase repeated from the backbone at SWAG's seed (the phase MultiSWAG's run drew from); components 1..L-1
    from their files (``multiswag/components/*.pt``). Empty where MultiSWAG did not run or a phase diverged."""
    meta_path = split_dir / "multiswag" / "meta.json"
    paths = sorted((split_dir / "multiswag" / "components").glob("*.pt"), key=lambda p: int(p.stem))
    if not meta_path.exists() or not paths:
        return []
    chosen = load_json(meta_path)["selection"]["chosen"]
    swag_record = load_json(split_dir / "swag" / "posterior.json")
    if swag_record["candidate"] == chosen["candidate"]:
        first = _swag_networks(prep, split_dir / "swag" / "posterior.pt")
    else:
        backbone = load_backbone(prep, split_dir / "backbone" / "model.pt")
        member, swag = swag_phase(backbone, chosen["candidate"], ValidationSplit.from_prepared(prep),
                                  int(swag_record["seed"]), False)  # fmt: skip
        first = (member, swa_mean_network(member, swag))
    rest = [multiswag_component_networks(prep, p, chosen["candidate"]) for p in paths]
    return [] if any(r is None for r in rest) else [first, *rest]


def _ivon_mean(split_dir: Path, prep) -> torch.nn.Module | None:
    """IVON's mean network, the chosen candidate's file (``ivon/candidates/<index>.pt``, checked against its SHA-256),
    or None where the run kept none (a grid of one candidate, or one chosen beyond the grid's edge)."""
    meta_path = split_dir / "ivon" / "meta.json"
    if not meta_path.exists():
        return None
    meta = load_json(meta_path)
    path = split_dir / "ivon" / "candidates" / f"{meta['selection']['chosen']['index']}.pt"
    if not path.exists():
        return None
    net = build_ft_transformer(prep["x_train"].shape[1], seed=int(meta["seed"]), **meta["model"])
    return load_trainable(net, load_model(path)["state"]["net"]).eval()


def training_offsets(split_dir: Path, seed: int, dropout_passes: int = 20) -> dict[str, dict]:
    """The split's point models on its training part (:func:`_training_part`): ``backbone`` (``backbone/model.pt``),
    ``ivon_mean`` (:func:`_ivon_mean`), ``swa_mean`` (SWAG's SWA mean, ``swag/posterior.pt``) and ``swa_means`` (the
    mean of MultiSWAG's components' SWA means at the candidate its run chose, :func:`_multiswag_networks`; with
    ``per_component``, each one's offsets and its last iterate's), each where its files exist (checked against their
    SHA-256). Each also has ``dropout_on``: the mean of ``dropout_passes`` passes with dropout on (the network as
    trained; for ``swa_means`` the mean over its components), where an offset of the eval-mode point alone would be
    dropout's train/eval shift."""
    prep = load_prepared(split_dir / "prepared.npz")
    models = {}

    def network(net) -> dict:  # a network's point model, and its dropout-on mean where it has dropout
        model = _training_part(_eval_predictions(net, prep), prep)
        on = _dropout_on_mean(net, prep["x_train"], dropout_passes, seed)
        if on is not None:
            model["dropout_on"] = point_residual(on, prep["y_train"])
        return model

    if (split_dir / "backbone" / "model.pt").exists():
        models["backbone"] = network(load_backbone(prep, split_dir / "backbone" / "model.pt"))
    ivon = _ivon_mean(split_dir, prep)
    if ivon is not None:
        models["ivon_mean"] = network(ivon)
    swag_file = split_dir / "swag" / "posterior.pt"
    if swag_file.exists():  # SWAG's SWA mean, then MultiSWAG's components' at the candidate its run chose
        for name, networks in (("swa_mean", [_swag_networks(prep, swag_file)]),
                               ("swa_means", _multiswag_networks(split_dir, prep))):  # fmt: skip
            if not networks:
                continue
            points, on, last = _swa_means(prep, networks, dropout_passes, seed)
            mean = {part: np.mean([p[part] for p in points], axis=0) for part in ("x_train", "x_test")}
            models[name] = _training_part(mean, prep)
            if all(o is not None for o in on):
                models[name]["dropout_on"] = point_residual(np.mean(on, axis=0), prep["y_train"])
            models[name]["components"] = len(points)
            if name == "swa_means":  # each component's own offsets (eval mode, dropout on), component 0 first
                models[name]["per_component"] = [
                    {"eval": point_residual(p["x_train"], prep["y_train"]),
                     "dropout_on": None if o is None else point_residual(o, prep["y_train"]), "last_iterate": r}
                    for p, o, r in zip(points, on, last)
                ]  # fmt: skip
    return models


def point_model(run_dir: Path, models: dict[str, dict]) -> str | None:
    """Which of the split's point models (:func:`training_offsets`) gives the run's test-part point (to float32
    rounding); None if none does. MultiSWAG's point, the mean of its pooled samples, is not one of them: it takes
    ``swa_means``, the model its samples are drawn around, where its every component was loaded."""
    if run_dir.name == "multiswag":
        meta = load_json(run_dir / "meta.json")
        n = len(meta.get("extra", meta).get("components", []))
        return "swa_means" if "swa_means" in models and models["swa_means"]["components"] == n else None
    point = load_npz(run_dir / "samples.npz")["point"].ravel()
    for name, m in models.items():
        if point.shape == m["test_point"].shape and np.allclose(point, m["test_point"], atol=1e-5 * m["sigma_y"]):
            return name
    return None


def training_shift(runs: list[Path], offsets: dict[str, dict], models: list[str], part: str) -> np.ndarray:
    """Per input of :func:`pooled`'s ``part`` (same order), the training-part offset (σ_y units) of its split's point
    model (``models``: one name per run)."""
    key = "y" if part == "test" else "cal_y"
    return np.concatenate([
        np.full(load_npz(r / "samples.npz")[key].size, offsets[r.parent.name][name]["residual"]["mean"])
        for r, name in zip(runs, models)
    ])  # fmt: skip


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
                    help="also the training-part mean residual of each backbone, IVON mean network and SWA "
                         "mean (eval mode, dropout on); W1 without it")  # fmt: skip
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
        offsets = {sp.name: training_offsets(sp, args.seed) for sp in splits} if args.training_offset else {}
        for split_info in info:
            for name, off in offsets.get(split_info["split"], {}).items():
                r, d = off["residual"], off.get("dropout_on")
                on = (
                    ""
                    if d is None
                    else (
                        f"; dropout on (mean of 20 passes) {d['mean']:+.4f} (z {d['z']:+.1f}), "
                        f"eval-mode point minus that {d['mean'] - r['mean']:+.4f}"
                    )
                )
                print(f"{name} {split_info['split']}, training part ({r['n']:.0f} rows): y - point {r['mean']:+.4f} "
                      f"σ_y (z {r['z']:+.1f}){on}")  # fmt: skip
                split_info.setdefault("training_residual", {})[name] = r
                for k, c in enumerate(off.get("per_component", [])):
                    d_k = c["dropout_on"]
                    on_k = "" if d_k is None else f", dropout on {d_k['mean']:+.4f} (z {d_k['z']:+.1f})"
                    print(
                        f"  component {k}: y - point {c['eval']['mean']:+.4f} (z {c['eval']['z']:+.1f}){on_k}; "
                        f"the SWAG phase's last iterate {c['last_iterate']['mean']:+.4f}"
                    )
                if "per_component" in off:
                    split_info["training_residual"][f"{name}_per_component"] = off["per_component"]
                if d is not None:
                    split_info["training_residual"][f"{name}_dropout_on"] = d
        print(
            f"{'method':<11} {'part':<5} {'pt res':>7} {'z':>6} {'ens-pt':>7} {'med-pt':>7} {'z':>6} {'sd':>6} "
            f"{'PIT z':>6} {'PIT z rc':>8} {'W1':>6} {'W1 rc':>6}"
        )
        for m in args.methods:
            runs = [sp / m for sp in splits if (sp / m / "samples.npz").exists()]
            if not runs:
                continue
            entry = {}
            models = [point_model(r, offsets[r.parent.name]) for r in runs] if offsets else []
            shifts = bool(models) and None not in models
            if offsets:
                entry["point_model"] = models
                if not shifts:
                    print(f"{m:<11} (its point is none of the split's point models on every split: no shift)")
            for part in ("test", "cal"):
                arrays = pooled(runs, part)
                shift = training_shift(runs, offsets, models, part) if shifts else None
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
        save_json(args.out, report)


if __name__ == "__main__":
    main()
