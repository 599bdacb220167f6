"""Cost of SA through the SDPA path vs the deterministic SDPA pass, and through the nn.MultiheadAttention adapter.

    python benchmarks/bench_sdpa.py [--quick] [--threads 2]

One 6-layer post-norm encoder (nn.TransformerEncoderLayer: d_model 256, 8 heads, FFN 1024, ReLU), batch 2
x 512 tokens, on the CPU, built twice with the *same weights*:

* "SDPA": blocks whose attention calls ``F.scaled_dot_product_attention`` (patched by stochattn.sdpa: the SDPA call
  inside the patched forward goes to the dispatcher, masked softmax + the compiled samplers);
* "MHA adapter": ``nn.TransformerEncoder`` (``nn.MultiheadAttention``, patched by the re-implementing adapter).

Deterministic baselines: the SDPA model unpatched (torch's fused CPU SDPA kernel), and the MHA model with torch's
fast path off (a patched model cannot use it) and on. Ratios are medians over repeats of SA time / deterministic time
of the same model timed back to back (benchmarks/bench_attention.py's ``paired_ratio``), all from this one run.
"""

from __future__ import annotations


import torch
from torch import Tensor, nn

from bench_attention import paired_ratio, timed
from stochattn.patch import StochasticAttention

NUS = (1, 16, 512)


class SDPAAttention(nn.Module):
    """Self-attention through F.scaled_dot_product_attention, weights of an nn.MultiheadAttention."""

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        self.num_heads = mha.num_heads
        self.qkv, self.proj = nn.Linear(mha.embed_dim, 3 * mha.embed_dim), nn.Linear(mha.embed_dim, mha.embed_dim)
        with torch.no_grad():
            self.qkv.weight.copy_(mha.in_proj_weight)
            self.qkv.bias.copy_(mha.in_proj_bias)
            self.proj.load_state_dict(mha.out_proj.state_dict())

    def forward(self, x: Tensor) -> Tensor:  # (B, L, C) -> (B, L, C)
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class SDPALayer(nn.Module):
    """nn.TransformerEncoderLayer's post-norm computation (ReLU FFN, no dropout) around SDPAAttention."""

    def __init__(self, layer: nn.TransformerEncoderLayer) -> None:
        super().__init__()
        self.attn = SDPAAttention(layer.self_attn)
        self.linear1, self.linear2, self.norm1, self.norm2 = layer.linear1, layer.linear2, layer.norm1, layer.norm2

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


def main() -> None:
    from bench_attention import cpu_args  # benchmarks/ is this script's folder, on sys.path

    args = cpu_args(__doc__)
    repeats = 3 if args.quick else 7
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, dim_feedforward=1024, dropout=0.0, batch_first=True)
    mha_model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).eval()
    sdpa_model = nn.Sequential(*(SDPALayer(layer) for layer in mha_model.layers)).eval()
    x = torch.randn(2, 512, 256)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          "6-layer encoder d 256, 8 heads, 2 x 512 tokens")
    with torch.no_grad():
        torch.backends.mha.set_fastpath_enabled(False)
        same = torch.allclose(sdpa_model(x), mha_model(x), atol=1e-4)
        fast_off = timed(lambda: mha_model(x), repeats)
        torch.backends.mha.set_fastpath_enabled(True)
        fast_on = timed(lambda: mha_model(x), repeats)
        det_sdpa = timed(lambda: sdpa_model(x), repeats)
        print(f"deterministic: SDPA model {det_sdpa * 1e3:.0f} ms; MHA model {fast_off * 1e3:.0f} ms (fast path off), "
              f"{fast_on * 1e3:.0f} ms (on); same outputs: {same}")
        print(f"{'nu':>6} | {'SDPA path / det SDPA':>21} | {'MHA adapter / det MHA (fast path off)':>38} | "
              f"{'SDPA path / det MHA fast path on':>33}")
        for nu in NUS:
            sa_sdpa = StochasticAttention(sdpa_model, nu=nu, generator=torch.Generator().manual_seed(0))
            sa_sdpa.remove()
            _, r_sdpa = paired_ratio(lambda: sdpa_model(x), sa_sdpa, repeats)
            sa_mha = StochasticAttention(mha_model, nu=nu, generator=torch.Generator().manual_seed(0))
            sa_mha.remove()
            torch.backends.mha.set_fastpath_enabled(False)  # the deterministic half of the pair: like with like
            _, r_mha = paired_ratio(lambda: mha_model(x), sa_mha, repeats)
            torch.backends.mha.set_fastpath_enabled(True)
            print(f"{nu:>6} | {r_sdpa:>20.2f}x | {r_mha:>37.2f}x | {r_sdpa * det_sdpa / fast_on:>32.2f}x")


if __name__ == "__main__":
    main()
