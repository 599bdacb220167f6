"""Seconds per training step of the paper's FT-Transformer on CPU, eager against ``torch.compile``
(docs/measurements.md, "protein: not run"): is the UCI slice's CPU time made of work a compiler could fuse away?

    python benchmarks/uci_step_cost.py [--features 9 16] [--batch 256] [--threads 1] [--rounds 5] [--steps 10]

Random weights, ``config/config.yaml``'s architecture (``build_ft_transformer`` defaults: 3 blocks, d 192, 8 heads),
AdamW on rtdl's parameter groups, ``training.standard_step`` with MSE: the step every backbone, MC Dropout network,
MultiSWAG member and HSA fine-tune repeats. ``--features``: the data set's feature count (tokens = features + 1):
power 4, yacht 6, kin8nm / energy / concrete 8, protein 9, wine 11, naval 16. The two models start from the same
weights; the timings are interleaved rounds of ``--steps`` steps each (eager, then compiled), after the compile and
three warm-up steps, so both see the same machine load; the ratio is eager's best round over the compiled best.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.training import standard_step


def per_step(step, steps: int) -> float:
    """Mean seconds of ``step()`` over ``steps`` calls."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def compare(n_features: int, batch: int, rounds: int, steps: int) -> dict:
    """Eager and compiled seconds per step (best round) and the compile's wall time for ``x (batch, n_features)``."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, n_features, generator=gen), torch.randn(batch, generator=gen)
    calls = {}
    for name in ("eager", "compiled"):
        model = build_ft_transformer(n_features, seed=0).train()
        optimizer = torch.optim.AdamW(model.make_parameter_groups(), lr=1e-4, weight_decay=1e-5)
        run = torch.compile(model) if name == "compiled" else model
        calls[name] = lambda run=run, optimizer=optimizer: standard_step(run, optimizer, x, y, F.mse_loss)
    start = time.perf_counter()
    calls["compiled"]()
    compile_s = time.perf_counter() - start
    for call in calls.values():
        for _ in range(3):
            call()
    best = {name: float("inf") for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            best[name] = min(best[name], per_step(call, steps))
    return {"eager_s": best["eager"], "compiled_s": best["compiled"], "compile_s": compile_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, nargs="+", default=[9, 16])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"FT-Transformer training step, batch {args.batch}, {args.threads} thread(s), torch {torch.__version__}")
    print(f"{'tokens':>6} {'eager ms':>9} {'compiled ms':>12} {'speed-up':>9} {'compile s':>10}")
    for n in args.features:
        r = compare(n, args.batch, args.rounds, args.steps)
        print(
            f"{n + 1:>6} {1e3 * r['eager_s']:>9.1f} {1e3 * r['compiled_s']:>12.1f} "
            f"{r['eager_s'] / r['compiled_s']:>8.2f}x {r['compile_s']:>10.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
