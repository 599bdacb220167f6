"""Cost of stochastic attention: per-forward-pass time, deterministic vs SA, ratios measured in one run.

    python benchmarks/bench_attention.py [--quick] [--threads 2]

1. FT-Transformer (rtdl defaults: 3 blocks, d_block 192, 8 heads), 16 features, batch 1024 (a UCI-sized batch).
2. A generic 6-layer encoder (torch.nn.TransformerEncoder, d_model 256, 8 heads, FFN 1024), sequence length 512,
   batch 2 (torch's fused attention fast path off for both: a patched model cannot use it).
   Both at nu in {1, 4, 16, 64, 512, 10^4} with sampler "auto" (the compiled CPU kernels); the FT-Transformer
   also with the two pure-torch samplers. "adapter only" re-expresses the attention as the patch does but
   without sampling: the part of the overhead that is not SA itself.
3. M = 32 predictive samples of the FT-Transformer: 32 sequential passes vs folded into the batch.
4. The kernel's paths alone (inverse-CDF draws, binomial chain, gather output) at n_k = 17 and 512: the crossovers
   behind cpu_kernels.categorical_limit and gather_limit.
5. A floor: the time to generate one random number per attention-probability entry of a pass (the kernels'
   SplitMix64 stream, all threads). Every exact sampler for nu >> n_k draws at least one variate per key of every
   row, so at large nu no exact method can cost less than this (and a binomial variate costs several uniforms).

Every ratio is the median over repeats of (SA time / deterministic time) where each repeat times the two passes
back to back, so slow drifts of a shared machine cancel; all numbers come from this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np
import torch
from torch import nn

from stochattn import cpu_kernels, patch
from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.patch import StochasticAttention, predictive_samples

NUS = (1, 4, 16, 64, 512, 10_000)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up (and compilation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_ratio(call, sa: StochasticAttention, repeats: int) -> tuple[float, float]:
    """(median deterministic seconds, median of per-repeat SA/deterministic ratios); ``sa`` is applied per SA run."""
    sa.apply()
    call()  # warm-up
    sa.remove()
    call()
    det, ratios = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        d = time.perf_counter() - start
        sa.apply()
        start = time.perf_counter()
        call()
        s = time.perf_counter() - start
        sa.remove()
        det.append(d)
        ratios.append(s / d)
    return statistics.median(det), statistics.median(ratios)


class _AdapterOnly:
    """Patch whose adapters run with sampling replaced by the identity (weights = probabilities)."""

    def __init__(self, model: nn.Module) -> None:
        self.sa = StochasticAttention(model, nu=1)
        self.sa.remove()
        self._saved = (patch.SAState.attend, patch.SAState.weights)

    def apply(self) -> None:
        patch.SAState.attend = lambda state, probs, value: probs @ value
        patch.SAState.weights = lambda state, probs: probs
        self.sa.apply()

    def remove(self) -> None:
        self.sa.remove()
        patch.SAState.attend, patch.SAState.weights = self._saved


@torch.no_grad()
def forward_table(name: str, model: nn.Module, call, repeats: int, methods=("auto",)) -> float:
    det, adapter = paired_ratio(call, _AdapterOnly(model), repeats)
    print(f"\n{name}: deterministic {det * 1e3:.1f} ms per forward pass; adapter only (no sampling) {adapter:.2f}x")
    print(f"{'nu':>8} " + " ".join(f"{m:>12}" for m in methods))
    for nu in NUS:
        cells = []
        for method in methods:
            if method == "categorical" and nu > 64 * 17:  # nu draws per row: 1.4e9 draws at nu = 1e4, not feasible
                cells.append(f"{'n/a':>12}")
                continue
            sa = StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(0), method=method)
            sa.remove()
            cells.append(f"{paired_ratio(call, sa, repeats)[1]:12.2f}")
        print(f"{nu:>8} " + " ".join(cells))
    return det


def kernel_paths(repeats: int) -> None:
    print("\nkernel paths alone, ms for all rows (inverse-CDF draws / binomial chain / gather output incl. nothing "
          "else; 'dense V' = the W @ V product the gather path replaces)")
    for n_k, groups, d in ((17, 8192, 24), (512, 16, 32)):
        p = torch.softmax(torch.randn(groups, n_k, n_k), -1).numpy()
        v = torch.randn(groups, n_k, d).numpy()
        w = np.empty_like(p).reshape(-1, n_k)
        o = np.empty((groups, p.shape[1], d), np.float32)
        dense = timed(lambda: torch.from_numpy(p) @ torch.from_numpy(v), repeats)
        print(f"  n_k = {n_k}: {p.shape[0] * p.shape[1]} rows, dense V {dense * 1e3:.1f} ms; categorical_limit "
              f"{cpu_kernels.categorical_limit(n_k)}, gather_limit {cpu_kernels.gather_limit(n_k)}")
        for nu in (1, 4, 16, 64, 256, 1024, 10_000, 1_000_000):
            one = np.array([nu])
            cat = (timed(lambda: cpu_kernels.multinomial_weights(p.reshape(-1, n_k), one, 1, w, limit=10**9), repeats)
                   if nu <= 1024 else float("nan"))  # fmt: skip
            chain = timed(lambda: cpu_kernels.multinomial_weights(p.reshape(-1, n_k), one, 1, w, limit=0), repeats)
            gather = timed(lambda: cpu_kernels.gather_output(p, v, one, 1, o), repeats) if nu <= 256 else float("nan")
            print(f"    nu {nu:>6}: categorical {cat * 1e3:8.1f}   chain {chain * 1e3:8.1f}   "
                  f"gather {gather * 1e3:8.1f}")


@numba.njit(parallel=True, cache=False)
def _uniform_per_entry(rows: int, n_k: int, seed: np.uint64, threads: int) -> float:
    chunk = (rows + threads - 1) // threads
    total = 0.0
    for t in numba.prange(threads):
        state = np.empty(1, np.uint64)
        acc = 0.0
        for r in range(t * chunk, min(rows, (t + 1) * chunk)):
            cpu_kernels._start_row(state, seed, r)
            for _ in range(n_k):
                acc += cpu_kernels._uniform(state)
        total += acc
    return total


def uniform_floor(name: str, det_seconds: float, rows_per_pass: int, n_k: int, repeats: int) -> None:
    threads = cpu_kernels._threads()
    t = timed(lambda: _uniform_per_entry(rows_per_pass, n_k, np.uint64(1), threads), repeats)
    print(f"  floor, {name}: one uniform per attention entry ({rows_per_pass} rows x {n_k} keys per pass) "
          f"{t * 1e3:.1f} ms = {t / det_seconds:.2f} of the deterministic pass")


def cpu_args(description: str) -> argparse.Namespace:
    """The CPU benchmarks' command line (``--threads``, default 2; ``--quick``: fewer repeats), torch's threads set."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def main() -> None:
    args = cpu_args(__doc__)
    repeats = 5 if args.quick else 11
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, numba threading layer after first call below")

    ft = build_ft_transformer(16, seed=0).eval()
    x = torch.randn(1024, 16)
    det_ft = forward_table("FT-Transformer (3 blocks, d 192), batch 1024 x 17 tokens", ft, lambda: ft(x), repeats,
                           ("auto", "categorical", "binomial"))
    # rtdl's last block attends from the [CLS] token only: 2 blocks x 17 queries + 1 query, 8 heads, 1024 inputs
    uniform_floor("FT-Transformer", det_ft, 1024 * 8 * (2 * 17 + 1), 17, repeats)

    layer = nn.TransformerEncoderLayer(256, 8, dim_feedforward=1024, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).eval()
    seq = torch.randn(2, 512, 256)
    torch.backends.mha.set_fastpath_enabled(False)  # the patched run cannot use the fused path: compare like with like
    det_enc = forward_table("6-layer encoder (d 256, 8 heads), batch 2 x 512 tokens", enc, lambda: enc(seq),
                            max(3, repeats // 2))  # fmt: skip
    uniform_floor("6-layer encoder", det_enc, 6 * 2 * 8 * 512, 512, repeats)
    torch.backends.mha.set_fastpath_enabled(True)
    print(f"numba threading layer: {numba.threading_layer()}")

    print("\nM = 32 predictive samples of the FT-Transformer (batch 256), SA nu = 16")
    xb = torch.randn(256, 16)
    with torch.no_grad(), StochasticAttention(ft, nu=16, generator=torch.Generator().manual_seed(0)):
        sequential = timed(lambda: torch.stack([ft(xb) for _ in range(32)]), repeats // 2 + 1)
        print(f"  32 sequential passes {sequential * 1e3:.0f} ms")
        for max_rows in (None, 2048, "auto"):
            folded = timed(lambda: predictive_samples(ft, xb, num_samples=32, max_rows=max_rows), repeats // 2 + 1)
            label = f"max_rows={max_rows!r}" + (f" (= {patch.AUTO_CPU_ROWS} on the CPU)" if max_rows == "auto" else "")
            print(f"  folded, {label}: {folded * 1e3:.0f} ms, speed-up {sequential / folded:.2f}x")

    kernel_paths(max(2, repeats // 3))


if __name__ == "__main__":
    main()
