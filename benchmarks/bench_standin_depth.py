"""What depth costs the offline TimesFM stand-in: per-step CPU time of deeper stand-ins over the adopted one.

    python benchmarks/bench_standin_depth.py [--threads 1] [--repeats 7]

The stand-ins of config/quick.yaml's ETT header (random weights; LoRA on as in every ETT method job): the adopted 3
layers of d 128 and, at about the same parameter count, 8 layers of d 96 and 20 layers of d 64 (TimesFM 2.5's
depth, at which SA's calibration left the boundary on ETTh2 H=96). For each, a LoRA training step (AdamW, batch 16,
context 512, H = 96: what the adapter, IVON-LoRA, Contextual Dropout, HSA and SWAG-LoRA jobs repeat) and a forward
pass of 16 series (what sampling and SA calibration repeat). Every ratio is the median over repeats of (deeper /
adopted) timed back to back, so a shared machine's drifts cancel; all numbers come from this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from stochattn.backbones.timesfm import TimesFMForecaster
from stochattn.experiments.ett import build_standin
from stochattn.lora import add_lora

ADOPTED = (3, 128)
DEEPER = ((8, 96), (20, 64))
LORA = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())["ett"]["lora"]


def standin(layers: int, dims: int) -> tuple[torch.nn.Module, int]:
    """(context (16, 512) -> forecast (16, 96) with the ETT LoRA adapters on, parameter count of the backbone)."""
    net = build_standin({"num_layers": layers, "model_dims": dims, "num_heads": 4, "output_quantile_len": 32}, seed=0)
    n = sum(p.numel() for p in net.parameters())
    add_lora(net, tuple(LORA["targets"]), r=int(LORA["r"]), alpha=float(LORA["alpha"]))
    return TimesFMForecaster(net, 96), n


def steps(net: torch.nn.Module, x: torch.Tensor) -> dict:
    """The two timed operations of one stand-in: a LoRA training step and a no-grad forward pass."""
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-3)

    def train() -> None:
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()

    def forward() -> None:
        with torch.no_grad():
            net(x)

    return {"train step": train, "forward": forward}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a make run job has 1)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(16, 512, generator=torch.Generator().manual_seed(0))
    base_net, base_n = standin(*ADOPTED)
    base = steps(base_net, x)
    print(f"TimesFM stand-in depth, {args.threads} thread(s), batch 16, context 512, H 96, median of {args.repeats}")
    print(f"{'stand-in':>16} {'params':>8} {'operation':>11} {'adopted ms':>11} {'this ms':>8} {'ratio':>6}")
    for layers, dims in DEEPER:
        net, n = standin(layers, dims)
        ops = steps(net, x)
        for name, fn in ops.items():
            base[name]()  # warm-up
            fn()
            pairs = [(timed(base[name]), timed(fn)) for _ in range(args.repeats)]
            ratio = statistics.median(b / a for a, b in pairs)
            a_ms, b_ms = (1e3 * statistics.median(p[i] for p in pairs) for i in (0, 1))
            print(
                f"{layers:>3} layers d {dims:>3} {n / 1e3:>6.0f} k {name:>11} {a_ms:>11.0f} {b_ms:>8.0f} {ratio:>5.2f}x"
            )
    print(f"(adopted: {ADOPTED[0]} layers d {ADOPTED[1]}, {base_n / 1e3:.0f} k parameters)")


if __name__ == "__main__":
    main()
