"""Does SA's per-input spread track the residual on a UCI backbone, and what in the computation sets it?

    python benchmarks/uci_spread_tracking.py NET_DIR [NET_DIR ...] [--prepared-root results]
        [--config config/config.yaml] [--seed SEED] [--out spread.json] [--figure OUT_BASE]

NET_DIR holds a trained backbone (``model.pt`` in :func:`stochattn.experiments.uci.load_backbone`'s format, e.g. from
benchmarks/uci_train_select.py --save) and lies under ``<dataset>/split<k>/``; its split is read from
``<prepared-root>/uci/<dataset>/split<k>/prepared.npz`` (default: ``prepared.npz`` of the split folder NET_DIR lies in,
a workflow's ``results/uci/<dataset>/split<k>/backbone``; ``--seed``: the SA run's, its meta.json ``seed``, repeats
the workflow's calibration, as does the default: the seed of that run's meta.json beside NET_DIR). For each
backbone:

1. SA as the workflow runs it (:func:`stochattn.experiments.methods.sa_runs`, ``method_params.sa`` of the config):
   nu at both operating points, and on the TEST part the pooled-PIT W1 (with its calibrated floor), PI-95 coverage
   and the PIT mean's z; beside them a homoscedastic Gaussian N(point, (sqrt(pi/2) s0)^2), whose mean absolute
   deviation is the calibration residual scale s0 (what SA's loss matches).
2. On the CALIBRATION part, :func:`stochattn.metrics.spread_tracking` (Spearman of the per-input spread against
   |residual|, over inputs and over spread deciles) for variants of where the randomness enters, each at the loss
   arg-min nu: SA in every attention module (the default), only in the last block (its [CLS] query row: rtdl's last
   block attends from [CLS] only), only in the blocks before it, SA with the network's dropout on at inference, and
   MC Dropout alone (the backbone's own rates, no SA).
3. On the CALIBRATION part, at every nu the calibration evaluated: where Algorithm 2's loss would be least if nu only
   scaled the deviations (:func:`stochattn.calibrate.loss_minimum_scale`: kappa * rho of s0, on the calibration's
   own num_passes per row), beside the evaluated scale / s0 and loss (the arg-min marked), and the nu at which the
   surrogate's posterior mean puts that scale: whether the loss arg-min is sharper than the residual scale, and
   whether the evaluated candidates lie near the loss's own minimum.

Prints one line per (backbone, variant) and writes everything to ``--out``; ``--figure`` draws item 3, one panel a
backbone (:func:`stochattn.experiments.uci_figures.loss_minimum_figure`). A NET_DIR given as an earlier ``--out`` JSON
adds its entries as measured (runs that repeat workflows run on other CPU kernels go in one figure).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from stochattn.baselines.mc_dropout import mc_dropout_samples
from stochattn.calibrate import SASampler, loss_minimum_scale
from stochattn.data.uci import load_prepared
from stochattn.experiments import methods
from stochattn.experiments.uci import load_backbone
from stochattn.metrics import coverage_and_width, pit, pit_mean_z, spread_tracking, w1_null_floor, w1_uniform
from stochattn.training import predict


def test_metrics(samples: np.ndarray, point: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """Pooled-PIT W1 with its floor, PI-95 coverage and the PIT mean's z of one predictive on the test part."""
    values = pit(samples, y, seed)
    return {"w1": w1_uniform(values), "w1_floor": w1_null_floor(values.size),
            "coverage_95": float(coverage_and_width(samples, y, [0.95])[0.95]["coverage"]),
            "pit_mean_z": pit_mean_z(values)[1]}


def _dropout(net: torch.nn.Module, on: bool) -> None:
    for m in net.modules():
        if isinstance(m, torch.nn.Dropout):
            m.train(on)


def measure(net_dir: Path, prepared: Path, sa_cfg: dict, num_samples: int, seed: int) -> dict:
    """Everything of the module docstring for one backbone."""
    data = load_prepared(prepared)
    net = load_backbone(data, net_dir / "model.pt", "cpu")
    run = methods.sa_runs(data, net, sa_cfg, num_samples, seed, progress=False)
    y, point = data["y_test"], np.asarray(run["point"])
    s0 = run["extra"]["s0_standardised"]
    out = {"net": str(net_dir), "nu": run["extra"]["nu"], "nu_match": run["extra"]["nu_surrogate"], "s0": s0,
           "test": {"sa": test_metrics(np.asarray(run["samples"]), point, y, seed),
                    "sa_match": test_metrics(np.asarray(run["variants"]["sa_match"]["samples"]), point, y, seed)}}
    gauss = point + math.sqrt(math.pi / 2) * s0 * np.random.default_rng(seed).standard_normal((num_samples, y.size))
    out["test"]["gaussian_s0"] = test_metrics(gauss, point, y, seed)

    x_cal, y_cal = torch.as_tensor(data["x_cal"], dtype=torch.float32), data["y_cal"]
    point_cal = predict(net, x_cal).numpy()
    nu, tracking = run["extra"]["nu"], {}
    with SASampler(net, generator=torch.Generator().manual_seed(seed)) as sampler:
        n_att = len(sampler.patch.modules)
        variants = {"every block": nu, "last block ([CLS] row)": {-1: nu}}
        if n_att > 1:
            variants["blocks before the last"] = {i: nu for i in range(n_att - 1)}
        for name, spec in variants.items():
            sampler.nu_template = lambda _nu, spec=spec: spec
            tracking[name] = spread_tracking(sampler(nu, x_cal, num_samples).numpy(), point_cal, y_cal)
        sampler.nu_template = lambda v: v
        _dropout(net, True)
        with_dropout = sampler(nu, x_cal, num_samples).numpy()
        tracking["every block + dropout on"] = spread_tracking(with_dropout, point_cal, y_cal)
        _dropout(net, False)
    net.eval()
    tracking["MC dropout only"] = spread_tracking(mc_dropout_samples(net, x_cal, num_samples, seed).numpy(),
                                                  point_cal, y_cal)  # fmt: skip
    out["calibration_tracking"] = tracking
    out["loss_minimum"] = loss_minimum(net, x_cal, point_cal, y_cal, run["calibration"], sa_cfg["num_passes"], seed)
    return out


def loss_minimum(net, x_cal, point_cal, y_cal, calibration: dict, passes: int, seed: int) -> dict:
    """Item 3 of the module docstring for one backbone (``calibration``: the run's BO record)."""
    z = np.abs(np.asarray(y_cal) - point_cal).reshape(len(point_cal), -1)
    z = np.linalg.norm(z, axis=1)
    by_nu = {}
    for h in calibration["history"]:
        by_nu.setdefault(int(h["nu"]), []).append(h)
    rows = []
    with SASampler(net, generator=torch.Generator().manual_seed(seed)) as sampler:
        for nu, hs in sorted(by_nu.items()):
            dev = sampler(nu, x_cal, passes).numpy().reshape(passes, len(z), -1) - point_cal.reshape(1, len(z), -1)
            m = loss_minimum_scale(np.linalg.norm(dev, axis=2), z)
            se = float(np.sqrt(np.sum([h["loss_se"] ** 2 for h in hs])) / len(hs))  # of the mean of its evaluations
            rows.append({"nu": nu, "scale_ratio": float(np.mean([h["scale"] for h in hs])) / calibration["s0"],
                         "loss": float(np.mean([h["loss"] for h in hs])), "loss_se": se, **m})  # fmt: skip
    a, ln_b = calibration["posterior"]["mean"]
    ratio = float(np.mean([r["ratio"] for r in rows]))
    nu_min = math.exp((math.log(ratio * calibration["s0"]) - ln_b) / a)
    return {"rows": rows, "ratio": ratio, "nu_loss_minimum": nu_min, "nu_loss_argmin": calibration["nu_loss_argmin"],
            "nu_surrogate": calibration["nu_surrogate"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nets", nargs="+", type=Path, help="NET_DIR, or an earlier --out JSON (its entries as they are)")
    ap.add_argument("--prepared-root", type=Path, default=None,
                    help="the workflow folder holding uci/<d>/split<k>/ (default: NET_DIR's split folder)")  # fmt: skip
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "config" / "config.yaml"))
    ap.add_argument("--num-samples", type=int, default=None, help="default: the config's num_samples")
    ap.add_argument("--seed", type=int, default=None,
                    help="default: the seed of the SA run beside NET_DIR (<split>/sa/meta.json), else 0")  # fmt: skip
    ap.add_argument("--out", default=None)
    ap.add_argument("--figure", default=None, help="output path without suffix of the loss-minimum figure")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load(Path(args.config).read_text())
    num_samples = args.num_samples or int(cfg["num_samples"])
    results = []
    for net_dir in args.nets:
        if net_dir.suffix == ".json":  # an earlier --out: its backbones as they were measured (e.g. on other kernels)
            results.extend(json.loads(net_dir.read_text()))
            continue
        split_dir = next(p for p in net_dir.parents if p.name.startswith("split"))
        prepared = (split_dir if args.prepared_root is None else
                    args.prepared_root / "uci" / split_dir.parent.name / split_dir.name) / "prepared.npz"  # fmt: skip
        sa_meta = split_dir / "sa" / "meta.json"
        seed = args.seed if args.seed is not None else (json.loads(sa_meta.read_text())["seed"]
                                                        if sa_meta.is_file() else 0)  # fmt: skip
        r = measure(net_dir, prepared, cfg["method_params"]["sa"], num_samples, seed)
        results.append(r)
        t = r["test"]
        print(f"\n{net_dir}: nu {r['nu']} (scale-match {r['nu_match']}), s0 {r['s0']:.4f}")
        for k, m in t.items():
            print(f"  test {k:12s} W1 {m['w1']:.3f} (floor {m['w1_floor']:.3f})  cov95 {m['coverage_95']:.2f}  "
                  f"PIT-mean z {m['pit_mean_z']:+.1f}")
        for k, m in r["calibration_tracking"].items():
            print(f"  cal  {k:26s} Spearman {m['spearman']:+.2f}  by decile {m['spearman_binned']:+.2f}")
        lm = r["loss_minimum"]
        print(f"  cal  loss least at {lm['ratio']:.3f} s0 (kappa * rho, mean over the evaluated nu), nu ~ "
              f"{lm['nu_loss_minimum']:.0f} by the surrogate's posterior mean; arg-min nu {lm['nu_loss_argmin']}, "
              f"scale-match nu {lm['nu_surrogate']}")
        for row in lm["rows"]:
            mark = " <- loss arg-min" if row["nu"] == lm["nu_loss_argmin"] else ""
            print(f"    nu {row['nu']:5d}  scale/s0 {row['scale_ratio']:.3f}  loss {row['loss']:.5f}  kappa "
                  f"{row['kappa']:.3f}  rho {row['rho']:.3f}  least at {row['ratio']:.3f} s0{mark}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.figure:
        from stochattn.experiments.uci_figures import loss_minimum_figure

        print("wrote", *loss_minimum_figure(results, args.figure))


if __name__ == "__main__":
    main()
