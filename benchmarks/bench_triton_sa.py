"""The fused Triton SA kernel (stochattn.triton_sa) against the deterministic fused pass, on a CUDA device.

    python benchmarks/bench_triton_sa.py [--repeats 20] [--memory-tokens 8192 16384] [--kernel-table] [--warm 12]

1. Time of one attention call, SA fused kernel / ``F.scaled_dot_product_attention`` (median of per-repeat ratios,
   the two timed back to back with the device synchronised), at nu in {1, 4, 16, 64, 512}, on the attention shapes
   of the full-size models gpu_check.py runs (fp32, as there):
   ClimaX 5.625 deg blocks: B 4, H 16, L = S = 512 tokens (a 32 x 64 grid in 2 x 2 patches), E 64 (D 1024 / 16);
   ClimaX's variable aggregation: B 4 x 512 positions, H 16, one query over S = 48 variable tokens, E 64;
   TimesFM 2.5 200M: B 32 series, H 16, L = S = 16 patches (a 512-step context in patches of 32), E 80, causal.
   The explicit path (stochattn.attention.scaled_dot_product_attention) is timed alongside.
2. Peak memory of one call at long contexts (B 1, H 16, E 64, bf16, nu 16): explicit path vs kernel vs SDPA.
3. ``--kernel-table``: the kernel alone against ``F.scaled_dot_product_attention`` (whichever fused backend torch
   picks) on the same bf16 tensors, (B*H, L = S) in {(64, 1024), (32, 4096), (8, 16384)}, head dim 64 and 80,
   nu in {1, 4, 16, 64, 512, 4096}: time ratio (CUDA-event medians, ``triton.testing.do_bench``) with the first
   version's fixed tiles (``LEGACY_TILES``, "before") and with the autotuned tiles ("after"), the configuration
   the autotuner chose and every configuration's time (``--json``); at nu <= 16 also the one-pass race sampler
   (``sampler="race"``, autotuned), and at nu <= 64 the groups sampler (``sampler="groups"``, autotuned: group
   masses in pass 1, then only the groups holding a row's points). ``--warm N`` first compiles every variant in N
   processes (Triton's compiler is single-threaded; the cache is shared), so the timed process compiles nothing.

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
                                  lambda: scaled_dot_product_attention(q, k, v, is_causal=causal, nu=nu, fused=False),
                                  repeats)  # fmt: skip
            rows.append({"check": f"{name}: explicit nu={nu} time / SDPA", "ok": True, "value": f"{ratio:.2f}x"})
    return rows


def _peak_gib(fn) -> str:
    """Peak memory of fn's second call above what was allocated before it (the first call compiles and autotunes:
    triton's do_bench allocates a 256 MB buffer to flush the L2 cache, which is not the kernel's)."""
    try:
        fn()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        return "out of memory"
    return f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.3f} GiB"


def _memory_at(n: int, nu: int, device: torch.device) -> list[dict]:
    """Peak memory rows at n tokens; the inputs are freed when this returns."""
    from stochattn.attention import scaled_dot_product_attention
    from stochattn.triton_sa import sa_attention_fused

    q, k, v, _ = _inputs((1, 16, n, n, 64, False), torch.bfloat16, device)
    calls = (("SDPA", lambda: F.scaled_dot_product_attention(q, k, v)),
             ("fused kernel", lambda: sa_attention_fused(q, k, v, nu, seed=0, sampler="cdf")),
             ("groups sampler", lambda: sa_attention_fused(q, k, v, nu, seed=0, sampler="groups")),
             ("explicit path", lambda: scaled_dot_product_attention(q, k, v, nu=nu, fused=False)))  # fmt: skip
    return [{"check": f"{n} tokens: peak memory, {label} (nu={nu})", "ok": True, "value": _peak_gib(fn)}
            for label, fn in calls]  # fmt: skip


def memory_rows(device: torch.device, tokens=(8192, 16384), nu: int = 16) -> list[dict]:
    """Peak memory above the inputs of one call at long contexts (B 1, H 16, E 64, bf16)."""
    return [row for n in tokens for row in _memory_at(n, nu, device)]


KERNEL_SHAPES = ((64, 1024), (32, 4096), (8, 16384))  # (B * H, L = S)
KERNEL_NUS = (1, 4, 16, 64, 512, 4096)
KERNEL_HEAD_DIMS = (64, 80)


def _kernel_cells(kernel_nus=KERNEL_NUS):
    """(E, B, H, n, nu) of the kernel table, in its order: nu <= 64 (the goal's cells) first, then 512 and 4096."""
    for nus in ([nu for nu in kernel_nus if nu <= 64], [nu for nu in kernel_nus if nu > 64]):
        for E in KERNEL_HEAD_DIMS:
            for bh, n in KERNEL_SHAPES:
                B, H = (bh // 16, 16) if bh >= 16 else (1, bh)
                for nu in nus:
                    yield E, B, H, n, nu


def _kernel_inputs(E, B, H, n, device):
    g = torch.Generator(device=device).manual_seed(E + n)
    return [torch.randn(B, H, n, E, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3)]


def _ms(fn) -> float:
    """Median milliseconds of fn by CUDA events (triton.testing.do_bench: warm-up, cache flushed between calls)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=60, return_mode="median"))


def _describe(config) -> str:
    kw = ", ".join(f"{k} {v}" for k, v in sorted(config.kwargs.items()))
    return f"{kw}, {config.num_warps} warps, {config.num_stages} stages"


def _timings(tuner, tuned_before: int) -> dict:
    """{configuration: [median, 20th, 80th percentile ms]} of the autotuner's last tuning, if it tuned since its cache
    held ``tuned_before`` keys (else {}: this cell's size bucket was timed in an earlier cell)."""
    if len(tuner.cache) <= tuned_before:
        return {}
    timings = getattr(tuner, "configs_timings", None) or {}
    return {_describe(c): (list(t) if isinstance(t, (list, tuple)) else t) for c, t in timings.items()}


def kernel_rows(device: torch.device, timings: list | None = None, json_path: str | None = None,
                kernel_nus=KERNEL_NUS) -> list[dict]:  # fmt: skip
    """The kernel table: one row per (head dim, B*H, L, nu in ``kernel_nus``) with SDPA's time and the before / after
    ratios. ``timings`` (a list) receives every autotuned configuration's time per cell, rewritten to ``json_path``
    after each cell."""
    from stochattn import triton_sa

    kernels, _ = triton_sa._kernels()
    stats, sample, _, race_tuner, mass_tuner, groups_tuner = triton_sa._tuned(kernels)
    rows, cache = [], {}
    for E, B, H, n, nu in _kernel_cells(kernel_nus):
        if (E, n) not in cache:
            cache.clear()
            q, k, v = _kernel_inputs(E, B, H, n, device)
            cache[(E, n)] = (q, k, v, _ms(lambda: F.scaled_dot_product_attention(q, k, v)))
        q, k, v, sdpa_ms = cache[(E, n)]
        before = _ms(lambda: triton_sa.sa_attention_fused(q, k, v, nu, seed=1, tiles=triton_sa.LEGACY_TILES,
                                                         sampler="cdf"))  # fmt: skip
        tuned = {t: len(t.cache) for t in (stats, sample, race_tuner, mass_tuner, groups_tuner)}
        triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="cdf")  # the autotuner times its configurations here
        after = _ms(lambda: triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="cdf"))
        chosen = f"pass 1: {_describe(stats.best_config)}; pass 2: {_describe(sample.best_config)}"
        race = None
        if nu <= triton_sa.RACE_MAX_NU:  # the one-pass race sampler, autotuned
            triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="race")
            race = _ms(lambda: triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="race"))
            chosen += f"; race: {_describe(race_tuner.best_config)}"
        groups = None
        if nu <= triton_sa.GROUPS_MAX_NU:  # the groups sampler, autotuned
            triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="groups")
            groups = _ms(lambda: triton_sa.sa_attention_fused(q, k, v, nu, seed=1, sampler="groups"))
            chosen += (f"; groups: pass 1 {_describe(mass_tuner.best_config)}, pass 2 "
                       f"{_describe(groups_tuner.best_config)}")  # fmt: skip
        if timings is not None:
            timings.append({"E": E, "BH": B * H, "L": n, "nu": nu, "sdpa_ms": sdpa_ms, "before_ms": before,
                            "after_ms": after, "race_ms": race, "pass1": _timings(stats, tuned[stats]),
                            "pass2": _timings(sample, tuned[sample]),
                            "race": _timings(race_tuner, tuned[race_tuner]), "groups_ms": groups,
                            "groups_pass1": _timings(mass_tuner, tuned[mass_tuner]),
                            "groups_pass2": _timings(groups_tuner, tuned[groups_tuner])})  # fmt: skip
        rows.append({"check": f"E {E}, B*H {B * H}, L=S {n}, nu {nu}: kernel / SDPA", "ok": True,
                     "value": f"before {before / sdpa_ms:.2f}x, after {after / sdpa_ms:.2f}x"
                              + (f", race {race / sdpa_ms:.2f}x" if race is not None else "")
                              + (f", groups {groups / sdpa_ms:.2f}x" if groups is not None else "")
                              + f" (SDPA {sdpa_ms:.3f} ms; {chosen})"})  # fmt: skip
        print(rows[-1]["check"], rows[-1]["value"], flush=True)
        if json_path:  # as it goes: a time limit keeps the cells measured
            import json

            with open(json_path, "w") as f:
                json.dump(timings, f, indent=1)
    return rows


def warm_cache(part: int, parts: int, kernel_nus=KERNEL_NUS) -> None:
    """Compile (and autotune) every kernel variant of the tables in this process's share of the cells."""
    from stochattn import triton_sa

    device = torch.device("cuda")
    jobs = [("kernel", cell) for cell in _kernel_cells(kernel_nus)]
    jobs += [("model", (name, nu)) for name in SHAPES for nu in NUS]
    for i, (kind, cell) in enumerate(jobs):
        if i % parts != part:
            continue
        if kind == "kernel":
            E, B, H, n, nu = cell
            q, k, v = _kernel_inputs(E, B, H, n, device)
            causal = False
        else:
            q, k, v, causal = _inputs(SHAPES[cell[0]], torch.float32, device)
            nu = cell[1]
        for tiles in (triton_sa.LEGACY_TILES, None):
            triton_sa.sa_attention_fused(q, k, v, nu, is_causal=causal, seed=1, tiles=tiles, sampler="cdf")
        if nu <= triton_sa.RACE_MAX_NU:
            triton_sa.sa_attention_fused(q, k, v, nu, is_causal=causal, seed=1, sampler="race")
        if nu <= triton_sa.GROUPS_MAX_NU:
            triton_sa.sa_attention_fused(q, k, v, nu, is_causal=causal, seed=1, sampler="groups")
    torch.cuda.synchronize()


def _warm(parts: int, kernel_nus=KERNEL_NUS) -> float:
    """Run warm_cache in ``parts`` processes; seconds taken."""
    import os
    import subprocess

    start = time.perf_counter()
    env = {**os.environ, "TRITON_PRINT_AUTOTUNING": "0"}
    nus = ["--kernel-nus", *map(str, kernel_nus)]
    procs = [subprocess.Popen([sys.executable, __file__, "--warm-part", f"{i}/{parts}", *nus], env=env)
             for i in range(parts)]  # fmt: skip
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"warming the Triton cache failed in {sum(c != 0 for c in codes)} of {parts} processes")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--memory-tokens", type=int, nargs="*", default=[8192, 16384])
    parser.add_argument("--skip-explicit", action="store_true", help="leave out the explicit path's timings")
    parser.add_argument("--kernel-table", action="store_true", help="the kernel vs SDPA table, before / after tuning")
    parser.add_argument("--warm", type=int, default=0, help="compile every variant first in this many processes")
    parser.add_argument("--warm-only", action="store_true", help="only compile (with --warm): fill Triton's cache")
    parser.add_argument("--json", help="write the kernel table's timings (every autotuned configuration) here")
    parser.add_argument("--kernel-nus", type=int, nargs="+", default=list(KERNEL_NUS),
                        help="the kernel table's nu (and the cells --warm compiles)")  # fmt: skip
    parser.add_argument("--warm-part", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warm_part:
        part, parts = (int(x) for x in args.warm_part.split("/"))
        warm_cache(part, parts, args.kernel_nus)
        return 0
    if not torch.cuda.is_available():
        print(f"bench_triton_sa: no CUDA device here (torch {torch.__version__}); nothing to measure.")
        return 0
    from gpu_check import table  # benchmarks/ is this script's folder, on sys.path

    device = torch.device("cuda")
    print(f"bench_triton_sa on {torch.cuda.get_device_name(device)} (torch {torch.__version__})", flush=True)
    if args.warm:
        print(f"compiled every variant in {args.warm} processes: {_warm(args.warm, args.kernel_nus):.0f} s", flush=True)
    if args.warm_only:
        return 0
    rows = []
    if args.memory_tokens:  # seconds: before the long parts
        rows += memory_rows(device, args.memory_tokens)
        print(table(rows), flush=True)
    if args.kernel_table:
        rows += kernel_rows(device, [] if args.json else None, args.json, args.kernel_nus)
        print(table(rows), flush=True)
    rows += fused_rows(device, args.repeats)
    print(table(rows), flush=True)
    if not args.skip_explicit:
        rows += explicit_rows(device, args.repeats)
        print(table(rows), flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
