"""Per-step cost of the paper protocol's GPU work at FULL model size (issue 20: runtime requests at the paper's caps).

    python benchmarks/step_costs.py [--device cuda] [--small] [--repeats 10] [--out step_costs.json]

Random weights, the public architectures and the cluster configuration's LoRA (config/config.yaml: r 8, alpha 8 on
the attention projections and MLP linears), at the configuration's mini-batch (16):

* ClimaX 5.625 deg (48 variables, 108 M), the 72 h Z500 forecaster: ``x (16, 48 * 32 * 64) -> (16, 32 * 64)``;
* TimesFM 2.5 200M, the point forecaster at context 512 and horizons 96 and 192: ``x (16, 512) -> (16, H)``.

For each: seconds per AdamW training step of the adapters (``training.standard_step``: the adapter, SWAG and
MultiSWAG epochs, Contextual Dropout and HSA training are such steps), per IVON step (``baselines.ivon.ivon_step``,
one weight sample), per deterministic forward pass in ``no_grad`` of a batch of 256 (the prediction and sampling
batch: one predictive sample of 256 inputs), per SA forward pass (nu=16) of the same batch, and the peak GPU memory
of a training step and of those prediction passes. Each figure is the median over
``repeats`` timed calls after two warm-up calls, the device synchronised around each. The JSON it writes is what
``stochattn.resources`` prices the GPU rules' runtime requests with (config/step_costs.json, ``gpu_minutes``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from stochattn.baselines.ivon import ivon_step, make_ivon
from stochattn.io import atomic_path
from stochattn.lora import add_lora
from stochattn.patch import StochasticAttention
from stochattn.training import standard_step

BATCH = 16  # the configuration's training mini-batch
EVAL_BATCH = 256  # the batch of every prediction / sampling pass (experiments.adapters, training.predict)
SA_NU = 16


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call, device: torch.device, repeats: int) -> float:
    """Median seconds of ``call()`` over ``repeats`` calls after two warm-up calls."""
    for _ in range(2):
        call()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        call()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_costs(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, x_eval: torch.Tensor, sa_nu,
               device: torch.device, repeats: int) -> dict:  # fmt: skip
    """Seconds per training / IVON step of ``model`` on ``x (B, ...)``, ``y (B, ...)``, per deterministic / SA forward
    pass on ``x_eval (EVAL_BATCH, ...)``; peak GPU MB of a training step (None on CPU)."""
    params = [p for p in model.parameters() if p.requires_grad]
    adamw = torch.optim.AdamW(params, lr=1e-4)
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train = timed(lambda: standard_step(model, adamw, x, y, F.mse_loss), device, repeats)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    ivon = make_ivon(model, lr=0.03, ess=1e6, hess_init=1e-3, rescale_lr=False)
    step = ivon_step(1)
    ivon_s = timed(lambda: step(model, ivon, x, y, F.mse_loss), device, repeats)
    model.eval()
    adamw = ivon = None  # the optimisers' state freed before empty_cache
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    with torch.no_grad():
        det = timed(lambda: model(x_eval), device, repeats)
        with StochasticAttention(model, nu=sa_nu, generator=torch.Generator().manual_seed(0)):
            sa = timed(lambda: model(x_eval), device, repeats)
    eval_peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"batch": len(x), "eval_batch": len(x_eval), "train_step_s": train, "ivon_step_s": ivon_s, "forward_s": det,
            "sa_forward_s": sa, "train_peak_gpu_mb": peak, "eval_peak_gpu_mb": eval_peak}  # fmt: skip


def climax_case(device: torch.device, small: bool):
    from stochattn.backbones.climax import Z500, ClimaX, ClimaXForecaster, build_climax, climax_sa_nu

    net = build_climax(seed=0) if small else ClimaX()
    add_lora(net, ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"), r=8, alpha=8.0)
    model = ClimaXForecaster(net, list(net.default_vars), Z500, 72.0).to(device)
    h, w = net.img_size
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(EVAL_BATCH, len(net.default_vars) * h * w, generator=gen).to(device)
    y = torch.randn(BATCH, h * w, generator=gen).to(device)
    return model, x[:BATCH], y, x, climax_sa_nu(SA_NU)


def timesfm_case(device: torch.device, small: bool, horizon: int):
    from stochattn.backbones.timesfm import TimesFMForecaster, build_timesfm, build_timesfm_200m, module_of

    backbone = module_of(build_timesfm(2, 64, 2, seed=0) if small else build_timesfm_200m())
    add_lora(backbone, ("qkv_proj", "out", "ff0", "ff1"), r=8, alpha=8.0)
    model = TimesFMForecaster(backbone, horizon).to(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(EVAL_BATCH, 512, generator=gen).cumsum(1).to(device)
    y = torch.randn(BATCH, horizon, generator=gen).to(device)
    return model, x[:BATCH], y, x, SA_NU


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="reduced modules (the CPU self-test)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--models", nargs="+", default=None, help="only these (climax, timesfm_h96, timesfm_h192)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("step_costs: no CUDA device here; nothing measured (--device cpu --small for the self-test)")
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    cases = {"climax": lambda: climax_case(device, args.small),
             "timesfm_h96": lambda: timesfm_case(device, args.small, 96),
             "timesfm_h192": lambda: timesfm_case(device, args.small, 192)}  # fmt: skip
    record = {"device": name, "torch": torch.__version__, "small": args.small, "sa_nu": SA_NU, "costs": {}}
    print(f"step costs on {name} (torch {torch.__version__}), batch {BATCH}")
    print(f"{'model':<14} {'train s':>9} {'ivon s':>9} {'fwd256 s':>9} {'SA256 s':>9} {'peak GPU MB':>12} "
          f"{'eval peak MB':>12}")
    for key, build in cases.items():
        if args.models and key not in args.models:
            continue
        model, x, y, x_eval, nu = build()
        c = step_costs(model, x, y, x_eval, nu, device, args.repeats)
        record["costs"][key] = c
        peak, eval_peak = ("-" if v is None else f"{v:.0f}" for v in (c["train_peak_gpu_mb"], c["eval_peak_gpu_mb"]))
        print(f"{key:<14} {c['train_step_s']:>9.4f} {c['ivon_step_s']:>9.4f} {c['forward_s']:>9.4f} "
              f"{c['sa_forward_s']:>9.4f} {peak:>12} {eval_peak:>12}", flush=True)  # fmt: skip
        del model, x, y, x_eval
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.out:
        with atomic_path(args.out) as tmp:  # an interrupted run leaves no half-written record
            Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
