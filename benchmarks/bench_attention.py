"""Cost of stochastic attention: per-forward-pass time, deterministic vs SA, ratios measured in one run.

    python benchmarks/bench_attention.py [--quick] [--threads 2]

1. FT-Transformer (rtdl defaults: 3 blocks, d_block 192, 8 heads), 16 features, batch 1024 (a UCI-sized batch).
2. A generic 6-layer encoder (torch.nn.TransformerEncoder, d_model 256, 8 heads, FFN 1024), sequence length 512,
   batch 2.
   Both at nu in {1, 4, 16, 64, 512, 10^4} with sampler "auto"; the FT-Transformer also with each sampler forced.
3. M = 32 predictive samples of the FT-Transformer: folded into one batch vs 32 sequential passes.
4. The two exact samplers alone on 2M attention-probability entries, to show where "auto" switches.
Times are medians of repeated runs after a warm-up; every ratio compares numbers taken in this same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from stochattn.attention import AUTO_CATEGORICAL_PER_KEY, _counts_binomial_tree, _counts_categorical
from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.patch import StochasticAttention, predictive_samples

NUS = (1, 4, 16, 64, 512, 10_000)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.no_grad()
def forward_table(name: str, model: nn.Module, call, repeats: int, methods=("auto",)) -> None:
    det = timed(call, repeats)
    print(f"\n{name}: deterministic {det * 1e3:.1f} ms per forward pass")
    print(f"{'nu':>8} " + " ".join(f"{m + ' ms':>16} {'ratio':>7}" for m in methods))
    for nu in NUS:
        cells = []
        for method in methods:
            if method == "categorical" and nu > 64 * 17:  # nu draws per row: 1.4e9 draws at nu = 1e4, not feasible
                cells.append(f"{'n/a':>16} {'':>7}")
                continue
            with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(0), method=method):
                t = timed(call, repeats)
            cells.append(f"{t * 1e3:16.1f} {t / det:7.2f}")
        print(f"{nu:>8} " + " ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else 7
    methods = ("auto", "categorical", "binomial")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, auto = categorical while nu <= "
          f"{AUTO_CATEGORICAL_PER_KEY} * n_k")

    ft = build_ft_transformer(16, seed=0).eval()
    x = torch.randn(1024, 16)
    forward_table("FT-Transformer (3 blocks, d 192), batch 1024 x 17 tokens", ft, lambda: ft(x), repeats, methods)

    layer = nn.TransformerEncoderLayer(256, 8, dim_feedforward=1024, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).eval()
    seq = torch.randn(2, 512, 256)
    torch.backends.mha.set_fastpath_enabled(False)  # the patched run cannot use the fused path: compare like with like
    forward_table("6-layer encoder (d 256, 8 heads), batch 2 x 512 tokens", enc, lambda: enc(seq), max(2, repeats // 2))
    torch.backends.mha.set_fastpath_enabled(True)

    print("\nM = 32 predictive samples of the FT-Transformer (batch 256), SA nu = 16")
    xb = torch.randn(256, 16)
    with StochasticAttention(ft, nu=16, generator=torch.Generator().manual_seed(0)):
        folded = timed(lambda: predictive_samples(ft, xb, num_samples=32), repeats)
        sequential = timed(lambda: torch.stack([ft(xb) for _ in range(32)]), repeats)
    print(f"  folded into one batch {folded * 1e3:.1f} ms, 32 sequential passes {sequential * 1e3:.1f} ms, "
          f"speed-up {sequential / folded:.2f}x")

    print("\nexact samplers alone, 2M probability entries (rows x n_k), ms")
    gen = torch.Generator().manual_seed(0)
    for n_k in (16, 512):
        rows = 2_000_000 // n_k
        p = torch.softmax(torch.randn(rows, n_k), -1)
        print(f"  n_k = {n_k}")
        for nu in NUS:
            cat = timed(lambda: _counts_categorical(p, nu, gen), 2) if nu * rows <= 5e7 else float("nan")
            tree = timed(lambda: _counts_binomial_tree(p, torch.full((rows,), float(nu)), gen), 2)
            print(f"    nu {nu:>6}: categorical {cat * 1e3:8.1f}   binomial tree {tree * 1e3:8.1f}")


if __name__ == "__main__":
    main()
