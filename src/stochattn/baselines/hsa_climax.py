"""Hierarchical Stochastic Attention (HSA, Pei et al., 2022) inside ClimaX's ViT blocks.

:func:`add_hsa_to_climax` replaces the ``attn`` module of every :class:`~stochattn.backbones.climax.ClimaXBlock` by a
:class:`ClimaXHSAAttention` that holds the pretrained attention (``attn.attention``: its ``qkv`` and ``proj``, LoRA
layers included) and samples the attention weights by the two-level Gumbel softmax of
:func:`stochattn.baselines.hsa.hsa_attention_weights` instead of ``softmax(q k^T / sqrt(d))``.

Choices: one centroid matrix (head_dim, n_centroids) per block, shared by its heads, ``U(-0.5, 0.5)``; soft samples;
the level-2 logits carry ClimaX's own ``head_dim^-1/2`` (so the pretrained routing keeps its temperature at
initialisation). The variable aggregation (``var_agg``, one query per patch) keeps its softmax: HSA replaces the
transformer's self-attention, as in Pei et al. The Gumbel noise stays on in eval mode (it is the method's
predictive uncertainty); draw samples with :func:`stochattn.baselines.hsa.hsa_samples`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from stochattn.backbones.climax import ClimaXAttention, ClimaXBlock
from stochattn.baselines.hsa import HSAAttentionBase

__all__ = ["ClimaXHSAAttention", "add_hsa_to_climax"]


class ClimaXHSAAttention(HSAAttentionBase):
    """HSA in place of a :class:`ClimaXAttention`: x (B, N, C) -> (B, N, C), a fresh sample at every call.

    ``attention`` is the replaced module (its ``qkv`` gives q, k, v; its ``output`` applies ``proj``); the new
    parameter is ``centroids`` (head_dim, n_centroids).
    """

    def __init__(
        self,
        attention: ClimaXAttention,
        *,
        n_centroids: int = 2,
        tau1: float = 1.0,
        tau2: float = 1.0,
        init_generator: Optional[torch.Generator] = None,
    ) -> None:
        super().__init__()
        self.attention = attention
        self._init_hsa(attention.head_dim, n_centroids, tau1, tau2, False, float(attention.scale))
        self.reset_centroids(init_generator)
        ref = attention.qkv.weight if hasattr(attention.qkv, "weight") else next(attention.parameters())
        self.centroids.data = self.centroids.data.to(ref.device)

    def forward(self, x: Tensor) -> Tensor:
        a = self.attention
        b, n, c = x.shape
        q, k, v = a.qkv(x).reshape(b, n, 3, a.num_heads, a.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        weights = self.sample_weights(q, k)  # (B, H, N, N)
        return a.output(weights.to(v.dtype) @ v)

    def extra_repr(self) -> str:
        return self._hsa_repr()


def add_hsa_to_climax(
    model: nn.Module, *, n_centroids: int = 2, tau1: float = 1.0, tau2: float = 1.0, seed: Optional[int] = None
) -> list[str]:
    """Replace the attention of every ClimaX block in ``model`` (in place) by :class:`ClimaXHSAAttention`; centroids
    drawn from a CPU generator seeded with ``seed`` in block order. Returns the names of the replaced modules.
    Raises ValueError when ``model`` holds no ClimaX block or HSA is installed already."""
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, ClimaXBlock)]
    if not blocks:
        raise ValueError(f"{type(model).__name__} contains no ClimaX block")
    if any(isinstance(m.attn, ClimaXHSAAttention) for _, m in blocks):
        raise ValueError("HSA is already installed in this model")
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    for _, block in blocks:
        block.attn = ClimaXHSAAttention(block.attn, n_centroids=n_centroids, tau1=tau1, tau2=tau2,
                                        init_generator=generator)  # fmt: skip
    return [f"{n}.attn" if n else "attn" for n, _ in blocks]
