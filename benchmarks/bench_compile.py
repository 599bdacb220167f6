"""SA under torch.compile: graph breaks, the law through the compiled operator, TimesFM 2.5 compiled by its own
loader, and the cost of a compiled SA pass (issue 45; docs/library/cost.md).

    python benchmarks/bench_compile.py breaks            # torch._dynamo.explain per model, patched
    python benchmarks/bench_compile.py law               # z-scores of mean and covariance through CPU inductor
    python benchmarks/bench_compile.py timesfm [--dir D] # TimesFM_2p5_200M_torch(torch_compile=True), full size
    python benchmarks/bench_compile.py cost              # eager / compiled, deterministic / SA: 6-layer encoder,
                                                         # TimesFM

``breaks`` runs against any version of the library (``PYTHONPATH=<old checkout>/src`` gives the "before" column):
per model the graph breaks ``torch._dynamo.explain`` counts with SA applied, the graphs, SA operators in them,
whether two calls of the compiled model differ, and the SACoverageWarnings raised. timm rows need timm (and a
torchvision that imports). Every timing is the median of back-to-back pairs, one torch thread.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from stochattn.patch import SACoverageWarning, StochasticAttention


# --------------------------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------------------------
class Block(nn.Module):
    """A residual attention block calling F.scaled_dot_product_attention (tests/test_compile.py uses it too)."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.num_heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        return x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


def law_z(w, pi, nu):
    """(max |z| of the mean, max |z| of the covariance) of draws w (N, H, L, S) against pi (H, L, S) at nu: standard
    errors sqrt(pi (1 - pi) / (nu N)) for the means, the products' own spread for (diag(pi) - pi pi^T) / nu."""
    N = w.shape[0]
    se = torch.sqrt(pi * (1 - pi) / nu / N)
    z_mean = ((w.mean(0) - pi) / torch.where(se > 0, se, 1.0)).abs().max()
    dev = w - pi
    prods = dev[..., :, None] * dev[..., None, :]
    cov = (torch.diag_embed(pi) - pi[..., :, None] * pi[..., None, :]) / nu
    se = prods.std(0) / math.sqrt(N)
    z_cov = ((prods.mean(0) - cov) / torch.where(se > 0, se, 1.0)).abs().max()
    return float(z_mean), float(z_cov)


EXEC_SOURCE = '''
from torch.nn.functional import scaled_dot_product_attention as sdpa_alias
from torch import nn

class ExecBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.num_heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        return x + self.proj(sdpa_alias(q, k, v).transpose(1, 2).reshape(b, n, c))
'''


def _exec_block():
    import sys
    import types

    module = types.ModuleType("bench_exec_defined")
    exec(compile(EXEC_SOURCE, "<stdin>", "exec"), module.__dict__)  # noqa: S102 (no source to read)
    sys.modules[module.__name__] = module
    return module.ExecBlock


def cases() -> dict:
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    out = {
        "hand-written SDPA (2 blocks)": (lambda: nn.Sequential(Block(), Block()), lambda m: m(x)),
        "exec'd class, SDPA alias": (lambda: nn.Sequential(_exec_block()(), _exec_block()()), lambda m: m(x)),
        "torch TransformerEncoder (MHA)": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(
            16, 2, 32, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False), lambda m: m(x)),
    }
    try:
        import transformers as T
    except ImportError:
        T = None
    if T is not None:
        tokens = torch.arange(12).view(2, 6) % 50
        pad = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
        images = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        series = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(0))
        for impl in ("eager", "sdpa"):
            out[f"HF BertModel ({impl})"] = (lambda impl=impl: T.BertModel(T.BertConfig(
                vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                attn_implementation=impl), add_pooling_layer=False),
                lambda m: m(tokens, attention_mask=pad).last_hidden_state)
        out["HF ViTModel (sdpa)"] = (lambda: T.ViTModel(T.ViTConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=8,
            patch_size=4, attn_implementation="sdpa"), add_pooling_layer=False), lambda m: m(images).last_hidden_state)
        out["HF PatchTSTModel (sdpa)"] = (lambda: T.PatchTSTModel(T.PatchTSTConfig(
            num_input_channels=2, context_length=16, patch_length=4, patch_stride=4, d_model=16, num_attention_heads=2,
            num_hidden_layers=2, ffn_dim=32, attn_implementation="sdpa")),
            lambda m: m(past_values=series).last_hidden_state)
    try:
        from timm.models.vision_transformer import VisionTransformer
    except Exception as err:  # noqa: BLE001 - timm or its torchvision missing / broken
        print(f"(timm rows skipped: {err})")
    else:
        def vit(fused):
            def build():
                model = VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=3)
                for block in model.blocks:
                    block.attn.fused_attn = fused
                return model
            return build
        images = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        for fused in (True, False):
            out[f"timm VisionTransformer (fused_attn={fused})"] = (vit(fused), lambda m: m(images))
    try:
        from stochattn.backbones.timesfm import build_timesfm_200m
    except ImportError as err:
        print(f"(TimesFM row skipped: {err})")
    else:
        inputs = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
        masks = torch.zeros(1, 16, 32, dtype=torch.bool)
        def timesfm_200m():
            model = build_timesfm_200m()
            for name, p in model.named_parameters():  # timesfm's zero RMSNorm scales would silence every branch
                if name.endswith(".scale"):
                    torch.nn.init.ones_(p)
            return model

        out["TimesFM 2.5 200M module"] = (timesfm_200m, lambda m: m(inputs, masks)[0][2])
    return out


# --------------------------------------------------------------------------------------------------------------
# breaks
# --------------------------------------------------------------------------------------------------------------
def breaks(_args) -> None:
    print(f"torch {torch.__version__}; graph breaks of the patched model (nu = 8) under torch._dynamo.explain")
    print("| model | graph breaks | graphs | SA operators in the graphs | compiled calls differ | SACoverageWarnings |")
    print("|---|---|---|---|---|---|")
    for name, (build, run) in cases().items():
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = build().eval()
        ops: Counter = Counter()
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            ops.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                       and str(n.target).startswith("stochattn."))  # fmt: skip
            return gm

        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SACoverageWarning)
            try:
                sa = StochasticAttention(model, nu=8, generator=torch.Generator().manual_seed(0))
            except ValueError as err:
                print(f"| {name} | not patched: {str(err)[:60]}... | | | | |")
                continue
            run(model)  # eager first: the CPU kernels are JIT-compiled (numba) before Dynamo sees them
            caught.clear()
            try:
                explained = torch._dynamo.explain(lambda: run(model))()
                torch._dynamo.reset()
                compiled = torch.compile(lambda: run(model), backend=backend)
                a, b = compiled(), compiled()
            except Exception as err:  # noqa: BLE001 - report Dynamo's failure as the row
                print(f"| {name} | Dynamo fails: {type(err).__name__}: {str(err).strip().splitlines()[0][:70]} "
                      "| | | | |")
                continue
            finally:
                sa.remove()
        coverage = sum(issubclass(w.category, SACoverageWarning) for w in caught)
        print(f"| {name} | {explained.graph_break_count} | {explained.graph_count} | "
              f"{sum(ops.values())} | {'yes' if not torch.equal(a, b) else 'NO'} | {coverage} |")


# --------------------------------------------------------------------------------------------------------------
# law through the compiled operator
# --------------------------------------------------------------------------------------------------------------
class SDPAModule(nn.Module):
    num_heads = 2

    def forward(self, q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def law(args) -> None:
    N = args.draws
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64) * 1.5).expand(N, -1, -1, -1).contiguous()
    k = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64).expand(N, -1, -1, -1).contiguous()
    v = torch.eye(5, dtype=torch.float64).expand(N, 2, 5, 5).contiguous()
    mask = torch.rand(3, 5, generator=g) > 0.4
    mask[:, 0] = True
    additive = torch.zeros(3, 5, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    print(f"law through torch.compile (inductor, CPU), N = {N} draws; max |z| over the entries (mean: 30; "
          "covariance: 150)")
    print("| mask | nu | max abs z, mean | max abs z, covariance | masked keys drawn |")
    print("|---|---|---|---|---|")
    module = SDPAModule()
    compiled = torch.compile(module)
    for kind, kwargs in (("none", {}), ("boolean", {"attn_mask": mask}), ("additive -inf", {"attn_mask": additive}),
                         ("is_causal", {"is_causal": True})):  # fmt: skip
        pi = F.scaled_dot_product_attention(q[:1], k[:1], v[:1], **kwargs)[0]
        for nu in (1, 7, 64):
            with torch.no_grad(), StochasticAttention(module, nu=nu, generator=torch.Generator().manual_seed(nu)):
                w = compiled(q, k, v, **kwargs)
            z_mean, z_cov = law_z(w, pi, nu)
            drawn = int((w[:, pi == 0] != 0).sum())
            print(f"| {kind} | {nu} | {z_mean:.2f} | {z_cov:.2f} | {drawn} |")


# --------------------------------------------------------------------------------------------------------------
# TimesFM 2.5 compiled by its own loader
# --------------------------------------------------------------------------------------------------------------
def _checkpoint(directory) -> Path:
    from stochattn.rehearsal import write_timesfm_checkpoint

    path = Path(directory) / "model.safetensors"
    if not path.exists():
        write_timesfm_checkpoint(directory, seed=0)  # full size, random weights (as make rehearsal writes it)
    return path


def timesfm(args) -> None:
    from timesfm.timesfm_2p5.timesfm_2p5_torch import TimesFM_2p5_200M_torch

    from stochattn.backbones.timesfm import build_timesfm_200m, sa_forecast_samples

    directory = args.dir or tempfile.mkdtemp(prefix="timesfm-rehearsal-")
    path = _checkpoint(directory)
    eager = build_timesfm_200m(path)
    loaded = TimesFM_2p5_200M_torch(torch_compile=True)
    loaded.load_checkpoint(str(path.parent))  # timesfm's own: model.forward = torch.compile(model.forward)
    context = (torch.sin(torch.arange(4 * 512, dtype=torch.float32).view(4, 512) / 11)
               + 0.1 * torch.randn(4, 512, generator=torch.Generator().manual_seed(0)) + 3)  # fmt: skip
    N, nu = args.samples, args.nu
    rows = {}
    for name, model, seed in (("eager", eager, 1), ("compiled by its loader", loaded, 2)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SACoverageWarning)
            t = time.perf_counter()
            s = sa_forecast_samples(model, context, horizon=128, nu=nu, num_samples=N, max_rows=None,
                                    generator=torch.Generator().manual_seed(seed)).double()  # fmt: skip
            seconds = time.perf_counter() - t
        rows[name] = (s, seconds, sum(issubclass(w.category, SACoverageWarning) for w in caught))
    (e, _, _), (c, _, _) = rows["eager"], rows["compiled by its loader"]
    z_mean = (e.mean(0) - c.mean(0)) / torch.sqrt((e.var(0) + c.var(0)) / N)
    se_var = torch.sqrt(((e - e.mean(0)) ** 2).var(0) / N + ((c - c.mean(0)) ** 2).var(0) / N)
    z_var = (e.var(0) - c.var(0)) / se_var
    print(f"TimesFM 2.5 200M (random weights, {path}), 4 series x 512 steps, horizon 128, nu = {nu}, N = {N}")
    print("| model | mean SD over the horizon | SD of the per-step SD | SACoverageWarnings | seconds (incl. compile) |")
    print("|---|---|---|---|---|")
    for name, (s, seconds, warned) in rows.items():
        sd = s.std(0)
        print(f"| {name} | {float(sd.mean()):.4g} | {float(sd.std()):.3g} | {warned} | {seconds:.0f} |")
    print(f"eager vs compiled: max |z| of the means {float(z_mean.abs().max()):.2f}, of the variances "
          f"{float(z_var.abs().max()):.2f} over {z_mean.numel()} outputs; mean z^2 {float((z_mean**2).mean()):.2f} / "
          f"{float((z_var**2).mean()):.2f}")


# --------------------------------------------------------------------------------------------------------------
# cost
# --------------------------------------------------------------------------------------------------------------
def paired(f_a, f_b, repeats: int) -> tuple[float, float, float]:
    """(median seconds of a, of b, median of the paired ratios b / a)."""
    ta, tb, ratios = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f_a()
        t1 = time.perf_counter()
        f_b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def _cost_rows(name, model, call, nus, repeats):
    """Rows of the cost table: the deterministic pass, then SA at each nu, eager and compiled (inductor), each
    pair timed back to back."""
    compiled = torch.compile(model)
    with torch.no_grad():
        call(model), call(compiled), call(compiled)  # compile the deterministic graph
        det_e, det_c, _ = paired(lambda: call(model), lambda: call(compiled), repeats)
        print(f"| {name} | det. | {det_e * 1e3:.0f} | {det_c * 1e3:.0f} | {det_c / det_e:.2f} | 1 | 1 |")
        for nu in nus:
            with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(0)):
                call(compiled), call(compiled)  # compile the SA graph (a new nu recompiles)
                sa_e, sa_c, ratio = paired(lambda: call(model), lambda: call(compiled), repeats)
            print(f"| {name} | SA nu={nu} | {sa_e * 1e3:.0f} | {sa_c * 1e3:.0f} | {ratio:.2f} | {sa_c / det_c:.2f} | "
                  f"{sa_e / det_e:.2f} |")


def cost(args) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); median of {args.repeats} calls (ms)")
    print("| model | pass | eager ms | compiled ms | compiled / eager | compiled SA / compiled det. | "
          "eager SA / eager det. |")
    print("|---|---|---|---|---|---|---|")
    layer = nn.TransformerEncoderLayer(256, 8, dim_feedforward=1024, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).eval()
    x = torch.randn(2, 512, 256, generator=torch.Generator().manual_seed(0))
    _cost_rows("6-layer encoder (MHA, d 256, seq. 512, batch 2)", enc, lambda m: m(x), (1, 16, 512), args.repeats)

    class SDPAEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(256, 8) for _ in range(6))
            self.ffn = nn.ModuleList(nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 1024), nn.GELU(),
                                                   nn.Linear(1024, 256)) for _ in range(6))  # fmt: skip

        def forward(self, h):
            for a, f in zip(self.blocks, self.ffn):
                h = h + f(a(h))
            return h

    torch.manual_seed(0)
    _cost_rows("6-layer encoder (F.sdpa, d 256, seq. 512, batch 2)", SDPAEncoder().eval(), lambda m: m(x),
               (1, 16, 512), args.repeats)
    if args.timesfm:
        from stochattn.backbones.timesfm import build_timesfm_200m

        path = _checkpoint(args.dir or tempfile.mkdtemp(prefix="timesfm-rehearsal-"))
        model = build_timesfm_200m(path)
        inputs = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))  # 512 steps, 16 patches
        masks = torch.zeros(1, 16, 32, dtype=torch.bool)
        _cost_rows("TimesFM 2.5 200M forward (1 x 512 steps)", model, lambda m: m(inputs, masks), (16,),
                   max(3, args.repeats // 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("breaks", "law", "timesfm", "cost"))
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--nu", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--dir", default=None, help="folder for (or holding) the full-size random checkpoint")
    parser.add_argument("--no-timesfm", dest="timesfm", action="store_false")
    args = parser.parse_args()
    torch.set_num_threads(1)
    {"breaks": breaks, "law": law, "timesfm": timesfm, "cost": cost}[args.what](args)


if __name__ == "__main__":
    main()
