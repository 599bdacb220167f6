"""Cost of stochastic attention in TimesFM 2.5: per-pass time, SA vs deterministic, ratios measured in one run.

    python benchmarks/bench_timesfm_sa.py [--quick] [--threads 2] [--batch 32] [--context 512]

The reduced TimesFM 2.5 module of the offline ETT default (stochattn.backbones.timesfm.build_timesfm: 4 layers,
d 256, 4 heads, 3.1 M parameters), a batch of 32 series with a context of 512 (16 patches of 32), two passes:

* "point forecast": ``point_forecast(model, context, horizon=96)``, the module's ``decode`` (running per-patch
  normalisation, prefill through ``forward(inputs, masks, caches)``, median channel): the pass an SA sample costs;
* "forward": ``forward(inputs, masks)`` on already normalised patches (the LoRA training path, no decode cache).

Both at nu in {1, 4, 16, 64, 512} with sampler "auto" (the compiled CPU kernels). "adapter only" runs the patched
attention with sampling replaced by the identity (weights = probabilities): the part of the overhead that is the
explicit masked softmax, not SA itself. Every ratio is the median over repeats of (SA time / deterministic time)
where each repeat times the two passes back to back, so slow drifts of a shared machine cancel.
"""

from __future__ import annotations

import argparse

import torch
from bench_attention import _AdapterOnly, paired_ratio  # benchmarks/ is on sys.path when run as a script

from stochattn.backbones.timesfm import build_timesfm, point_forecast
from stochattn.patch import StochasticAttention

NUS = (1, 4, 16, 64, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = 5 if args.quick else 15

    model = build_timesfm(seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    context = torch.randn(args.batch, args.context, generator=g).cumsum(1)
    mask = torch.zeros_like(context, dtype=torch.bool)
    patches = context.view(args.batch, -1, model.p)
    normed = (patches - patches.mean(-1, keepdim=True)) / patches.std(-1, keepdim=True)
    patch_masks = mask.view(args.batch, -1, model.p)

    calls = {
        "point forecast": lambda: point_forecast(model, context, mask, horizon=96),
        "forward": lambda: model(normed, patch_masks),
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; reduced TimesFM 2.5 ({model.x} layers, "
          f"d {model.md}, {model.h} heads, {n_params / 1e6:.2f} M parameters); batch {args.batch} series x context "
          f"{args.context} ({args.context // model.p} patches); {repeats} paired repeats")  # fmt: skip
    with torch.no_grad():
        det, adapter = {}, {}
        for name, call in calls.items():
            det[name], adapter[name] = paired_ratio(call, _AdapterOnly(model), repeats)
        table = {}
        for nu in NUS:
            for name, call in calls.items():
                sa = StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(nu))
                sa.remove()
                table[nu, name] = paired_ratio(call, sa, repeats)[1]

    width = 16
    print("\nper-pass time ratio SA / deterministic (median of back-to-back pairs)")
    print(f"{'':>14}" + "".join(f"{name:>{width}}" for name in calls))
    print(f"{'deterministic':>14}" + "".join(f"{det[n] * 1e3:>{width - 3}.1f} ms" for n in calls))
    print(f"{'adapter only':>14}" + "".join(f"{adapter[n]:>{width - 1}.2f}x" for n in calls))
    for nu in NUS:
        print(f"{'nu = ' + str(nu):>14}" + "".join(f"{table[nu, n]:>{width - 1}.2f}x" for n in calls))


if __name__ == "__main__":
    main()
