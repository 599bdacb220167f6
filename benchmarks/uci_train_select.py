"""Choose the UCI backbone's training schedule on VALIDATION data: one curve per (lr, batch size), every patience read
off it.

    python benchmarks/uci_train_select.py results/uci/yacht/split{0,1,2}/prepared.npz --batch 32 64 --lr 1e-4 3e-4 \
        --patience 16 50 100 --max-epochs 500 [--config config/config.yaml] [--out select.csv] [--curves curves.csv]
        [--figure curves]

Each (prepared split, lr, batch size) trains ``config``'s FT-Transformer once with :func:`stochattn.training.
fit_regressor` up to ``--max-epochs`` without early stopping, recording the validation RMSE of every epoch. Early
stopping with patience P only truncates that same deterministic run, so the epoch it would stop at and its best
validation RMSE (standardised units = RMSE/sigma_y) follow from the curve for every P (:func:`stop_at`). The
test RMSE of the epoch each rule keeps is recorded as ``test_nrmse`` for the check against the paper afterwards; the
choice is made on ``val_nrmse`` only (mean over splits, printed). ``--curves`` writes every epoch of every curve
(validation and test RMSE/sigma_y) and ``--figure`` draws the validation curves, one panel per split, with the epoch
each patience keeps marked and the paper's test RMSE/sigma_y of the data set as a dashed line
(:func:`stochattn.experiments.uci_figures.schedule_curves_figure`; config/paper_results.yaml's ``uci_accuracy``).

``--checkpoints DIR`` makes the curves resumable (naval's and protein's take hours each on one core): each curve saves
its state (the network, the optimiser, the RNGs, the curve so far, the best network and the patiences still to be
kept) in ``DIR/<dataset>/split<k>/lr<lr>_b<batch>.pt`` after every epoch (``fit_regressor``'s checkpoint, at most
~10 % of the time) and at once on SIGTERM or SIGUSR1, then exits with status 3; the same command rerun continues
each curve where it stopped, bit for bit as if uninterrupted, and reads finished curves back without training.
Delete the folder to train afresh.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.data.uci import load_prepared
from stochattn.experiments.paper_comparison import paper_cells
from stochattn.experiments.uci_figures import schedule_curves_figure
from stochattn.io import RECORD_KEY, atomic_path, save_json, save_model
from stochattn.training import TrainingInterrupted, fit_regressor, predict

REPO = Path(__file__).resolve().parents[1]


def stop_at(val: np.ndarray, patience: int) -> tuple[int, int]:
    """(epoch index kept, epochs run) of early stopping with ``patience`` on the per-epoch validation curve ``val``
    (stop after ``patience`` epochs without a strictly lower value, as fit_regressor does; keep the best)."""
    best, best_i = np.inf, 0
    for i, v in enumerate(val):
        if v < best:
            best, best_i = v, i
        elif i - best_i >= patience:
            return best_i, i + 1
    return best_i, len(val)


def _rmse(net: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predict(net, x).numpy() - y) ** 2)))


class CurveRecorder:
    """``on_epoch_end`` of one curve: each epoch's validation and test RMSE (standardised units), the best network so
    far, and the networks kept for the patiences whose stop has come (``keep(p, state, epoch, seconds)``). Its
    ``state_dict`` / ``load_state_dict`` make the curve resumable (``fit_regressor``'s ``hook_state``)."""

    def __init__(self, data: dict, patiences: list[int], keep=None):
        self.data, self.keep = data, keep
        self.settings = {"patiences": sorted(patiences), "keeps": keep is not None}
        self.val: list[float] = []
        self.test: list[float] = []
        self.best = {"val": np.inf, "epoch": 0, "state": None}
        self.pending = sorted(patiences)
        self.t0 = time.perf_counter()

    def __call__(self, epoch: int, m: torch.nn.Module) -> None:
        m.eval()
        self.test.append(_rmse(m, self.data["x_test"], self.data["y_test"]))
        self.val.append(_rmse(m, self.data["x_val"], self.data["y_val"]))
        m.train()
        i = len(self.val) - 1
        if self.val[i] < self.best["val"]:
            state = copy.deepcopy({k: v.cpu() for k, v in m.state_dict().items()})
            self.best.update(val=self.val[i], epoch=i, state=state)
        while self.keep is not None and self.pending and i - self.best["epoch"] >= self.pending[0]:
            self.keep_next()

    def keep_next(self) -> None:
        """Keep the best network for the next pending patience (its stop has come, or the epoch cap)."""
        self.keep(self.pending.pop(0), self.best["state"], self.best["epoch"], self.seconds())

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def state_dict(self) -> dict:
        return {"val": list(self.val), "test": list(self.test), "best": dict(self.best),
                "pending": list(self.pending), "seconds": self.seconds()}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.val, self.test = list(state["val"]), list(state["test"])
        self.best, self.pending = dict(state["best"]), list(state["pending"])
        self.t0 = time.perf_counter() - state["seconds"]


def curve(path: str, model: dict, lr: float, batch: int, max_epochs: int, weight_decay: float, seed: int,
          patiences: list[int], save: Path | None = None, checkpoint: Path | None = None) -> dict:  # fmt: skip
    """Per-epoch validation and test RMSE (standardised units) of one training run (stopped at the largest
    patience), and its seconds. ``save``: the network each patience keeps, as ``<save>/p<P>/model.pt`` (the
    workflow's backbone format, :func:`stochattn.experiments.uci.load_backbone`) with its meta.json.
    ``checkpoint``: the file that makes the run resumable (:class:`stochattn.training.TrainingInterrupted` on
    SIGTERM / SIGUSR1 after saving; the same call rerun continues, a finished run is read back)."""
    data = load_prepared(path)
    net = build_ft_transformer(data["x_train"].shape[1], seed=seed, **model)

    def keep(p: int, state: dict, epoch: int, seconds: float) -> None:
        out = save / f"p{p}"
        out.mkdir(parents=True, exist_ok=True)
        recorded = save_model(out / "model.pt", {"state_dict": state, "model": dict(model)})
        meta = {"model": dict(model), "train": {"lr": lr, "batch_size": batch, "patience": p, "weight_decay":
                weight_decay, "max_epochs": max_epochs}, "best_epoch": epoch + 1, "seed": seed,
                "seconds": seconds, RECORD_KEY: recorded}  # fmt: skip
        save_json(out / "meta.json", meta)  # its SHA-256 record: load_backbone checks it

    recorder = CurveRecorder(data, patiences, None if save is None else keep)
    fit = fit_regressor(net, data["x_train"], data["y_train"], data["x_val"], data["y_val"], seed=seed, lr=lr,
                        weight_decay=weight_decay, batch_size=batch, max_epochs=max_epochs, patience=max(patiences),
                        on_epoch_end=recorder, progress=False, checkpoint=checkpoint,
                        hook_state=None if checkpoint is None else recorder)  # fmt: skip
    while save is not None and recorder.pending:  # the epoch cap came first
        recorder.keep_next()
    return {"val": np.asarray(fit.history["val_rmse"]), "test": np.asarray(recorder.test),
            "seconds": recorder.seconds(), "n_fit": len(data["y_train"])}  # fmt: skip


def paper_accuracy(prepared: list[str]) -> float | None:
    """The paper's RMSE/sigma_y (config/paper_results.yaml's ``uci_accuracy``) of the data set of every prepared
    split (``results/uci/<dataset>/split<k>/prepared.npz``); None when they are of several or it has none."""
    datasets = {Path(path).parent.parent.name for path in prepared}
    if len(datasets) != 1:
        return None
    cells = paper_cells(REPO / "config" / "paper_results.yaml")
    value = cells.loc[(cells["block"] == "uci_accuracy") & (cells["row"] == datasets.pop()), "paper"]
    return float(value.iloc[0]) if len(value) == 1 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prepared", nargs="+")
    ap.add_argument("--lr", type=float, nargs="+", default=[1e-4])
    ap.add_argument("--batch", type=int, nargs="+", default=[256])
    ap.add_argument("--patience", type=int, nargs="+", default=[16])
    ap.add_argument("--max-epochs", type=int, default=500)
    ap.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="CSV of every (split, lr, batch, patience) row")
    ap.add_argument("--curves", default=None, help="CSV of every epoch of every (split, lr, batch) curve")
    ap.add_argument("--figure", default=None, help="the validation curves' figure: FIGURE.png and FIGURE.pdf")
    ap.add_argument("--save", default=None,
                    help="folder of the kept networks: <save>/<dataset>/split<k>/lr<lr>_b<batch>/p<P>/")
    ap.add_argument("--checkpoints", default=None,
                    help="folder of the curves' resumable states: <checkpoints>/<dataset>/split<k>/lr<lr>_b<batch>.pt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load(Path(args.config).read_text())
    rows, epochs = [], []
    for path, lr, batch in itertools.product(args.prepared, args.lr, args.batch):
        split_dir = Path(path).parent  # results/uci/<dataset>/split<k>
        run = f"lr{lr:g}_b{batch}"
        save = None if args.save is None else Path(args.save) / split_dir.parent.name / split_dir.name / run
        ckpt = None if args.checkpoints is None else (
            Path(args.checkpoints) / split_dir.parent.name / split_dir.name / f"{run}.pt")  # fmt: skip
        try:
            c = curve(path, cfg["model"], lr, batch, args.max_epochs, cfg["train"]["weight_decay"], args.seed,
                      args.patience, save, ckpt)  # fmt: skip
        except TrainingInterrupted as stop:
            print(f"{stop}; rerun the same command to continue", file=sys.stderr)
            sys.exit(3)
        epochs += [{"prepared": path, "lr": lr, "batch": batch, "epoch": e + 1, "val_nrmse": v, "test_nrmse": t}
                   for e, (v, t) in enumerate(zip(c["val"], c["test"]))]  # fmt: skip
        for p in args.patience:
            kept, run = stop_at(c["val"], p)
            rows.append({"prepared": path, "lr": lr, "batch": batch, "patience": p, "steps_per_epoch":
                         -(-c["n_fit"] // batch), "best_epoch": kept + 1, "epochs_run": run,
                         "val_nrmse": c["val"][kept], "test_nrmse": c["test"][kept],
                         "seconds": c["seconds"] * run / len(c["val"])})  # fmt: skip
        print(pd.DataFrame(rows[-len(args.patience):]).to_string(index=False, float_format="%.4g"), flush=True)
    df, curves = pd.DataFrame(rows), pd.DataFrame(epochs)
    for out, frame in ((args.out, df), (args.curves, curves)):
        if out:
            with atomic_path(out) as tmp:
                frame.to_csv(tmp, index=False)
    if args.figure:
        print("wrote", *schedule_curves_figure(curves, df, args.figure, reference=paper_accuracy(args.prepared)))
    summary = df.groupby(["lr", "batch", "patience"]).agg(val_nrmse=("val_nrmse", "mean"),
                                                         epochs=("epochs_run", "mean"), seconds=("seconds", "mean"),
                                                         splits=("val_nrmse", "size"))  # fmt: skip
    table = summary.sort_values("val_nrmse").to_string(float_format="%.4g")
    print("\nchosen on val_nrmse (mean over splits):\n" + table)


if __name__ == "__main__":
    main()
