"""The fused Triton SA kernel (stochattn.triton_sa) against the deterministic fused pass, on a CUDA device.

    python benchmarks/bench_triton_sa.py [--repeats 20] [--memory-tokens 8192 16384]

1. Time of one attention call, SA fused kernel / ``F.scaled_dot_product_attention`` (median of per-repeat ratios,
   the two timed back to back with the device synchronised), at nu in {1, 4, 16, 64, 512}, on the attention shapes
   of the full-size models gpu_check.py runs (fp32, as there):
   ClimaX 5.625 deg blocks: B 4, H 16, L = S = 512 tokens (a 32 x 64 grid in 2 x 2 patches), E 64 (D 1024 / 16);
   ClimaX's variable aggregation: B 4 x 512 positions, H 16, one query over S = 48 variable tokens, E 64;
   TimesFM 2.5 200M: B 32 series, H 16, L = S = 16 patches (a 512-step context in patches of 32), E 80, causal.
   The explicit path (stochattn.attention.scaled_dot_product_attention) is timed alongside.
2. Peak memory of one call at long contexts (B 1, H 16, E 64, bf16, nu 16): explicit path vs kernel vs SDPA.

Without CUDA (or triton) it says so and exits 0. :func:`fused_rows` gives gpu_check.py-style rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

NUS = (1, 4, 16, 64, 512)
#: name -> (B, H, L, S, E, causal): the attention calls of the full-size models in gpu_check.py
SHAPES = {
    "ClimaX 5.625deg blocks": (4, 16, 512, 512, 64, False),
    "ClimaX 5.625deg var_agg": (4 * 512, 16, 1, 48, 64, False),
    "TimesFM 2.5 200M": (32, 16, 16, 16, 80, True),
}


def _inputs(shape, dtype, device, seed=0):
    B, H, L, S, E, causal = shape
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, E, generator=g, device=device, dtype=dtype) for n in (L, S, S))
    return q, k, v, causal


def _ratio(det, sa, repeats: int) -> tuple[float, float]:
    """(median deterministic seconds, median of per-repeat sa / det time ratios), after one warm-up of each."""

    def timed(fn) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(det), timed(sa)
    pairs = [(timed(det), timed(sa)) for _ in range(repeats)]
    return statistics.median(d for d, _ in pairs), statistics.median(s / d for d, s in pairs)


def fused_rows(device: torch.device, repeats: int = 10, dtype: torch.dtype = torch.float32) -> list[dict]:
    """One row per (shape, nu): fused-kernel time / SDPA time, and whether the output is finite with each row a
    convex combination of V rows at nu = 1 (an exact V row). Rows as gpu_check.py's table takes them."""
    from stochattn.triton_sa import available, sa_attention_fused

    ok, reason = available(device)
    if not ok:
        return [{"check": "fused SA kernel", "ok": True, "value": f"skipped: {reason}"}]
    rows = []
    for name, shape in SHAPES.items():
        q, k, v, causal = _inputs(shape, dtype, device)
        for nu in NUS:
            det_s, ratio = _ratio(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                  lambda: sa_attention_fused(q, k, v, nu, is_causal=causal, seed=nu),
                                  repeats)  # fmt: skip
            out = sa_attention_fused(q, k, v, nu, is_causal=causal, seed=0)
            good = bool(torch.isfinite(out).all())
            if nu == 1:  # every output row is one row of V
                match = (out[..., :, None, :] == v[..., None, :, :]).all(-1).any(-1)
                good = good and bool(match.all())
            rows.append({"check": f"{name}: fused kernel nu={nu} time / SDPA", "ok": good,
                         "value": f"{ratio:.2f}x (SDPA {1e3 * det_s:.3f} ms)"})  # fmt: skip
    return rows


def explicit_rows(device: torch.device, repeats: int, dtype: torch.dtype = torch.float32) -> list[dict]:
    """The explicit path (probabilities formed, sampled, multiplied) / SDPA on the same shapes."""
    from stochattn.attention import scaled_dot_product_attention

    rows = []
    for name, shape in SHAPES.items():
        q, k, v, causal = _inputs(shape, dtype, device)
        for nu in NUS:
            det_s, ratio = _ratio(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                  lambda: scaled_dot_product_attention(q, k, v, is_causal=causal, nu=nu),
                                  repeats)  # fmt: skip
            rows.append({"check": f"{name}: explicit nu={nu} time / SDPA", "ok": True, "value": f"{ratio:.2f}x"})
    return rows


def _peak_gib(fn) -> str:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    try:
        fn()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        return "out of memory"
    return f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.3f} GiB"


def memory_rows(device: torch.device, tokens=(8192, 16384), nu: int = 16) -> list[dict]:
    """Peak memory above the inputs of one call at long contexts (B 1, H 16, E 64, bf16)."""
    from stochattn.attention import scaled_dot_product_attention
    from stochattn.triton_sa import sa_attention_fused

    rows = []
    for n in tokens:
        q, k, v, _ = _inputs((1, 16, n, n, 64, False), torch.bfloat16, device)
        for label, fn in (("SDPA", lambda: F.scaled_dot_product_attention(q, k, v)),
                          ("fused kernel", lambda: sa_attention_fused(q, k, v, nu, seed=0)),
                          ("explicit path", lambda: scaled_dot_product_attention(q, k, v, nu=nu))):  # fmt: skip
            rows.append({"check": f"{n} tokens: peak memory, {label} (nu={nu})", "ok": True, "value": _peak_gib(fn)})
        del q, k, v
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--memory-tokens", type=int, nargs="*", default=[8192, 16384])
    parser.add_argument("--skip-explicit", action="store_true", help="leave out the explicit path's timings")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"bench_triton_sa: no CUDA device here (torch {torch.__version__}); nothing to measure.")
        return 0
    from gpu_check import table  # benchmarks/ is this script's folder, on sys.path

    device = torch.device("cuda")
    print(f"bench_triton_sa on {torch.cuda.get_device_name(device)} (torch {torch.__version__})", flush=True)
    rows = fused_rows(device, args.repeats)
    print(table(rows), flush=True)
    if not args.skip_explicit:
        rows += explicit_rows(device, args.repeats)
        print(table(rows), flush=True)
    if args.memory_tokens:
        rows += memory_rows(device, args.memory_tokens)
        print(table(rows), flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
