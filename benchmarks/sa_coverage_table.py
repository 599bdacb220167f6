"""Which attention SA reaches, and whether it keeps its law there: one row per model family x attention implementation.

    python benchmarks/sa_coverage_table.py [--draws 2000]

Tiny models built from configs with random weights (no download). Columns:

* patched / present: attention modules SA patches / attention modules in the model (patched + attention-like modules
  left unpatched, which warn); "before": what the exact-type registry of the previous release patched.
* |z| at nu = 8 and 512: the SA mean's distance from the deterministic output in standard errors,
  |mean - det| / (sd / sqrt(N)) over N draws (copies of the input folded into the batch), measured at the output of
  the model's *first* attention module (for a whole nonlinear model the SA mean is not the deterministic output; an
  attention module's output is linear in its weights, so there E[SA] = deterministic exactly, Prop. 1). Given as
  the max over the K outputs with a positive spread and the mean of z^2 (about 1 when unbiased; the max of K
  standard normals is about sqrt(2 ln K), 3.5 to 4.5 here). Outputs of padded query positions are left out (a causal
  eager model's left-padded query sees no key; SA gives it zero weights, eager a uniform average).
* masked keys never drawn: every weight matrix drawn in the whole forward (all layers, both nu) is zero on the
  padded keys and, in causal models, on future keys; "n/a" where the model has no mask.
"""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import stochattn.attention as attention_mod
import stochattn.patch as patch_mod
from stochattn.patch import StochasticAttention, attention_modules, unpatched_attention

PAD = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])  # right padding, left padding (batch 2, 6 tokens)
CAUSAL = torch.ones(6, 6, dtype=torch.bool).tril()


@dataclass
class Case:
    family: str
    impl: str
    build: Callable[[], nn.Module]
    run: Callable[[nn.Module, int], object]  # (model, copies) -> forward on the base batch of 2 tiled `copies` times
    allowed: Optional[tuple] = None  # per drawn matrix in forward order (cycled): (2, 1, L, S) keys that may be drawn
    real: Optional[Tensor] = None  # (2, L) positions whose first-attention output is compared; None: all


def _tile(x: Tensor, n: int) -> Tensor:
    return x.repeat(n, *([1] * (x.dim() - 1)))


def hf_cases(impl: str) -> list[Case]:
    import transformers as T

    tokens = torch.arange(12).view(2, 6) % 50
    images = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    series = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(0))
    past, future = series[:, :10, 0], series[:, 10:14, 1]  # TimeSeriesTransformer: context 8 + 2 lags, horizon 4
    pad_keys = PAD.bool()[:, None, None, :]
    small = dict(attn_implementation=impl)
    text = lambda m, n: m(_tile(tokens, n), attention_mask=_tile(PAD, n))  # noqa: E731
    return [
        Case("HF BertModel", impl, lambda: T.BertModel(T.BertConfig(
            vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, **small),
            add_pooling_layer=False), text, (pad_keys,), PAD.bool()),
        Case("HF ViTModel", impl, lambda: T.ViTModel(T.ViTConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=8,
            patch_size=4, **small), add_pooling_layer=False), lambda m, n: m(_tile(images, n))),
        Case("HF PatchTSTModel", impl, lambda: T.PatchTSTModel(T.PatchTSTConfig(
            num_input_channels=2, context_length=16, patch_length=4, patch_stride=4, d_model=16, num_attention_heads=2,
            num_hidden_layers=2, ffn_dim=32, **small)), lambda m, n: m(past_values=_tile(series, n))),
        Case("HF GPT2Model", impl, lambda: T.GPT2Model(T.GPT2Config(
            vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16, bos_token_id=0, eos_token_id=0, **small)),
            text, (pad_keys & CAUSAL,), PAD.bool()),
        Case("HF LlamaModel (GQA 4/2)", impl, lambda: T.LlamaModel(T.LlamaConfig(
            vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=32, **small)), text, (pad_keys & CAUSAL,), PAD.bool()),
        *([Case("HF TimeSeriesTransformerModel", impl, lambda: T.TimeSeriesTransformerModel(
            T.TimeSeriesTransformerConfig(prediction_length=4, context_length=8, lags_sequence=[1, 2],
                                          num_time_features=1, input_size=1, d_model=16, encoder_layers=1,
                                          decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                          encoder_ffn_dim=32, decoder_ffn_dim=32, **small)),
            lambda m, n: m(past_values=_tile(past, n), past_time_features=_tile(past[..., None], n),
                           past_observed_mask=torch.ones(2 * n, 10), future_values=_tile(future, n),
                           future_time_features=_tile(future[..., None], n)),
            (torch.ones(2, 1, 8, 8, dtype=torch.bool), CAUSAL[:4, :4].expand(2, 1, 4, 4),
             torch.ones(2, 1, 4, 8, dtype=torch.bool)))] if impl == "eager" else []),  # enc self, dec causal, cross
        Case("HF SiglipVisionModel", impl, lambda: T.SiglipVisionModel(T.SiglipVisionConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=8,
            patch_size=4, **small)), lambda m, n: m(_tile(images, n))),
    ]


def timm_cases() -> list[Case]:
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError as err:
        print(f"(timm rows skipped: {err})")
        return []
    images = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))

    def build(fused):
        def make():
            model = VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=3)
            for block in model.blocks:
                block.attn.fused_attn = fused
            return model
        return make

    return [Case("timm VisionTransformer", f"fused_attn={f}", build(f), lambda m, n: m(_tile(images, n)))
            for f in (True, False)]


class SDPABlock(nn.Module):
    """A hand-written pre-norm block whose attention calls F.scaled_dot_product_attention (causal)."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.num_heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, c))


def torch_cases() -> list[Case]:
    seq = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    tgt = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    kpm = ~PAD.bool()
    layer = lambda cls: cls(16, 2, 32, dropout=0.0, batch_first=True)  # noqa: E731
    return [
        Case("torch TransformerEncoder", "MHA adapter", lambda: nn.TransformerEncoder(
            layer(nn.TransformerEncoderLayer), 2), lambda m, n: m(_tile(seq, n), src_key_padding_mask=_tile(kpm, n)),
            (PAD.bool()[:, None, None, :],), PAD.bool()),
        Case("torch TransformerDecoder", "MHA adapter", lambda: nn.TransformerDecoder(
            layer(nn.TransformerDecoderLayer), 2), lambda m, n: m(
                _tile(tgt, n), _tile(seq, n), tgt_mask=nn.Transformer.generate_square_subsequent_mask(6),
                tgt_is_causal=True, memory_key_padding_mask=_tile(kpm, n)),
            (CAUSAL.expand(2, 1, 6, 6), PAD.bool()[:, None, None, :])),  # per layer: causal self, padded cross
        Case("hand-written SDPA block", "F.sdpa is_causal", lambda: nn.Sequential(SDPABlock(), SDPABlock()),
             lambda m, n: m(_tile(seq, n)), (CAUSAL.expand(2, 1, 6, 6),)),
    ]


def first_output(out) -> Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def measure(case: Case, draws: int) -> dict:
    torch.manual_seed(0)
    model = case.build().eval()
    found = attention_modules(model)
    left = unpatched_attention(model, found)
    before = sum(type(m) in patch_mod._REGISTRY for m in model.modules())  # the old rule: exact registered type
    first = next(iter(found.values()))
    captured = {}
    hook = first.register_forward_hook(lambda m, i, o: captured.update(out=first_output(o)))
    case.run(model, 1)
    det = captured["out"]
    drawn = []
    record = lambda probs, value, nu, **kw: (drawn.append(w := attention_mod.stochastic_weights(  # noqa: E731
        probs, nu, generator=kw.get("generator"), method=kw.get("method", "auto"), validate=False)), w @ value)[1]
    weights = patch_mod.stochastic_weights
    saved = (attention_mod.stochastic_attention, patch_mod.stochastic_attention, patch_mod.stochastic_weights)
    attention_mod.stochastic_attention = patch_mod.stochastic_attention = record
    patch_mod.stochastic_weights = lambda probs, nu, **kw: (drawn.append(w := weights(probs, nu, **kw)), w)[1]
    row = {"patched": len(found), "present": len(found) + len(left), "before": before}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for nu in (8, 512):
                with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(nu)):
                    case.run(model, draws)
                out = captured["out"].reshape(draws, *det.shape)
                ref = det
                if case.real is not None:  # (N, 2, L, C) -> real positions only
                    out, ref = out[:, case.real], det[case.real]
                out, ref = out.reshape(draws, -1).double(), ref.reshape(-1).double()
                sd = out.std(0)
                spread = sd > 1e-7 * out.abs().amax(0).clamp_min(1.0)
                z = ((out.mean(0) - ref) / (sd / math.sqrt(draws)))[spread]
                row[f"z{nu}"] = (float(z.abs().max()), float((z**2).mean()), int(spread.sum()))
    finally:
        hook.remove()
        attention_mod.stochastic_attention, patch_mod.stochastic_attention, patch_mod.stochastic_weights = saved
    if case.allowed is None:
        row["masked"] = "n/a (no mask)"
    else:
        masks = [case.allowed[i % len(case.allowed)] for i in range(len(drawn))]
        ok = all(torch.all(w[~a.repeat(w.shape[0] // 2, 1, 1, 1).expand_as(w)] == 0) for w, a in zip(drawn, masks))
        row["masked"] = f"yes ({len(drawn)} matrices)" if ok and drawn else "NO"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, N = {args.draws} draws per nu")
    cases = hf_cases("eager") + hf_cases("sdpa") + timm_cases() + torch_cases()
    cases.sort(key=lambda c: c.family)
    head = (f"| {'family':<30} | {'attention':<18} | patched/present | before | max z (mean z^2) nu=8 | "
            f"max z (mean z^2) nu=512 | masked keys never drawn |")
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for case in cases:
        r = measure(case, args.draws)
        z = {nu: f"{r[f'z{nu}'][0]:.2f} ({r[f'z{nu}'][1]:.2f}), K={r[f'z{nu}'][2]}" for nu in (8, 512)}
        print(f"| {case.family:<30} | {case.impl:<18} | {r['patched']:>7}/{r['present']:<7} | {r['before']:>6} | "
              f"{z[8]:<21} | {z[512]:<23} | {r['masked']:<23} |")


if __name__ == "__main__":
    main()
