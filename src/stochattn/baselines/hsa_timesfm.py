"""Hierarchical Stochastic Attention (HSA, Pei et al., 2022) inside Google's TimesFM 2.5 (``timesfm`` 3.0.2, torch).

``timesfm.torch.transformer.MultiHeadAttention`` makes its attention swappable: its forward computes the queries,
keys and values (fused QKV projection, RoPE with padding-aware positions, query/key RMSNorm, ``PerDimScale`` on the
query, decode-cache writes), builds the boolean mask (causal + left padding, True = attend) and calls
``self.attention_fn(query, key, value, mask=mask)`` with tensors (B, L|S, H, D) and mask (B, 1, L, S). This module
replaces exactly that callable by :class:`TimesFMHSAAttention`, the two-level Gumbel-softmax sampling of
:func:`stochattn.baselines.hsa.hsa_attention_weights`; everything else in timesfm's forward is untouched.

* :func:`add_hsa_to_timesfm` installs one :class:`TimesFMHSAAttention` per ``MultiHeadAttention`` found by
  ``named_modules()`` in a ``TimesFM2p5Module``, any wrapper module holding it (e.g.
  ``stochattn.backbones.timesfm.TimesFMForecaster``) or a peft-wrapped model; :func:`remove_hsa_from_timesfm`
  restores the original attention functions.
* Assigning an ``nn.Module`` to ``MultiHeadAttention.attention_fn`` registers it as a submodule, so each layer's
  centroids are an ordinary parameter of the model: ``<...>.attn.attention_fn.centroids`` (e.g.
  ``stacked_xf.0.attn.attention_fn.centroids`` in a bare module) in ``named_parameters()`` and ``state_dict()``;
  they move with ``.to()``, are seen by optimisers and are saved/loaded with the model. Consequently a checkpoint in
  the public timesfm layout must be loaded strictly *before* installing HSA (or with ``strict=False`` after).
* The Gumbel noise stays on in eval mode (it is the method's predictive uncertainty). Predictive samples are
  repeated passes: wrap the forecast in a module ``context (B, T) -> (B, horizon)`` and call
  :func:`stochattn.baselines.hsa.hsa_samples` (``hsa_generator`` sets the noise generator of every layer).
* Training: centroids and the pre-existing weights (e.g. LoRA adapters on ``qkv_proj``) receive gradients through
  the soft (or straight-through, ``hard=True``) samples. peft's ``get_peft_model`` freezes every parameter that is
  not an adapter: install HSA *after* it (new centroids are created trainable) or set ``requires_grad`` on them.

Choices (see :mod:`stochattn.baselines.hsa` for the reference code they follow): one centroid matrix
(head_dim, n_centroids) per attention layer, shared by its heads, initialised ``U(-0.5, 0.5)``; soft Gumbel-softmax at
both levels by default; logit scale 1 (see the NOTE in :class:`TimesFMHSAAttention`). Masked keys get weight
exactly 0 and fully masked query rows (the left-padding patches) get all-zero weights, hence a zero output as
timesfm's default SDPA attention gives them, and never NaN: those rows' outputs are keys and values of the next
layer.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from stochattn.backbones.timesfm import module_of
from stochattn.baselines.hsa import HSAAttentionBase
from stochattn.extras import requires

with requires("timesfm"):
    from timesfm.torch import transformer as tfm_transformer

__all__ = ["TimesFMHSAAttention", "add_hsa_to_timesfm", "remove_hsa_from_timesfm"]

AttentionFn = Callable[..., Tensor]


class TimesFMHSAAttention(HSAAttentionBase):
    """HSA attention function for ``timesfm.torch.transformer.MultiHeadAttention.attention_fn``.

    ``forward(query (B, L, H, D), key (B, S, H, D), value (B, S, H, D), mask=None) -> (B, L, H, D)``, the signature
    and layout of timesfm's ``_torch_dot_product_attention``; ``mask`` is bool, broadcastable to (B, H, L, S), True =
    attend. Per head: ``K~ = gumbel_softmax(K C, tau1) C^T`` (level 1), ``W = gumbel_softmax(Q K~^T, tau2)`` over the
    attended keys (level 2), output ``W V``; a fresh sample at every call, in train and eval mode.

    Parameter ``centroids`` (head_dim, n_centroids), shared by the heads of the layer. Attribute ``generator``
    (``None``: global RNG) is the ``torch.Generator`` of the noise (see ``hsa_generator``); ``original_attention_fn``
    is the attention function this module replaced (set by :func:`add_hsa_to_timesfm`, ``None`` otherwise).
    """

    def __init__(
        self,
        head_dim: int,
        *,
        n_centroids: int = 2,
        tau1: float = 1.0,
        tau2: float = 1.0,
        hard: bool = False,
        logit_scale: float = 1.0,
        init_generator: Optional[torch.Generator] = None,
    ) -> None:
        """
        Args:
            head_dim: per-head size ``D`` of the queries and keys.
            n_centroids: number ``k`` of key centroids (Pei et al. default 2).
            tau1: Gumbel-softmax temperature of the key-to-centroid assignment (default 1).
            tau2: Gumbel-softmax temperature of the attention over keys (default 1).
            hard: straight-through one-hot samples at both levels instead of soft ones.
            logit_scale: factor on ``Q K~^T`` (default 1, see the NOTE below).
            init_generator: CPU generator of the ``U(-0.5, 0.5)`` centroid init (global RNG when ``None``); not
                kept: the noise comes from the attribute ``generator`` (``None`` at construction, see
                ``hsa_generator``).
        """
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
            raise ValueError(f"head_dim must be a positive integer, got {head_dim!r}")
        if not (isinstance(logit_scale, (int, float)) and not isinstance(logit_scale, bool)):
            raise TypeError(f"logit_scale must be a number, got {type(logit_scale).__name__}")
        super().__init__()
        # NOTE: logit scale 1 is both the reference code's choice (Q K~^T, no 1/sqrt(d)) and timesfm's own
        # (attention_fn is called with scale 1.0): the query has already been multiplied by PerDimScale, a learned
        # per-dimension factor that starts at 1/sqrt(D). So the level-2 logits carry the same query scaling as
        # timesfm's attention logits (and at initialisation the 1/sqrt(d_head) of hsa.py's default).
        self._init_hsa(head_dim, n_centroids, tau1, tau2, hard, float(logit_scale))
        self.original_attention_fn: Optional[AttentionFn] = None
        self.reset_centroids(init_generator)

    @property
    def head_dim(self) -> int:
        return self.centroids.shape[0]

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, {self._hsa_repr()}"

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor]) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a Tensor, got {type(t).__name__}")
            if t.ndim != 4:
                raise ValueError(f"{name} must have shape (B, L, H, D), got {tuple(t.shape)}")
        if query.shape[-1] != self.head_dim or key.shape[-1] != self.head_dim:
            raise ValueError(
                f"query and key must have head_dim {self.head_dim} (the centroids' rows), got "
                f"{query.shape[-1]} and {key.shape[-1]}"
            )
        if key.shape[:3] != value.shape[:3]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} disagree on (B, S, H)")
        if query.shape[0] != key.shape[0] or query.shape[2] != key.shape[2]:
            raise ValueError(f"query {tuple(query.shape)} and key {tuple(key.shape)} disagree on batch or heads")
        if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool):
            raise TypeError(f"mask must be a bool Tensor (True = attend), got {getattr(mask, 'dtype', type(mask))}")

    def attention_weights(self, query: Tensor, key: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Sampled weights (B, H, L, S) of query (B, L, H, D), key (B, S, H, D) and bool mask (broadcastable to
        (B, H, L, S), True = attend): rows on the simplex of the attended keys, zero on masked keys, all-zero rows
        where no key is attended."""
        self._check_inputs(query, key, key, mask)
        return self.sample_weights(query.permute(0, 2, 1, 3), key.permute(0, 2, 1, 3), mask)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """query (B, L, H, D), key and value (B, S, H, D), bool mask (B|1, 1|H, L, S) -> (B, L, H, D)."""
        self._check_inputs(query, key, value, mask)
        weights = self.sample_weights(query.permute(0, 2, 1, 3), key.permute(0, 2, 1, 3), mask)  # (B, H, L, S)
        out = weights.to(value.dtype) @ value.permute(0, 2, 1, 3)  # (B, H, L, D)
        return out.permute(0, 2, 1, 3)


def _attention_modules(model: nn.Module) -> list[tuple[str, tfm_transformer.MultiHeadAttention]]:
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, tfm_transformer.MultiHeadAttention)]
    if not found:
        raise ValueError(
            f"{type(model).__name__} contains no timesfm.torch.transformer.MultiHeadAttention module; "
            "expected a TimesFM 2.5 torch module or a module holding one"
        )
    return found


def add_hsa_to_timesfm(
    model: Any,
    *,
    n_centroids: int = 2,
    tau1: float = 1.0,
    tau2: float = 1.0,
    hard: bool = False,
    logit_scale: float = 1.0,
    seed: Optional[int] = None,
) -> list[str]:
    """Install a :class:`TimesFMHSAAttention` as the ``attention_fn`` of every timesfm ``MultiHeadAttention`` in
    ``model`` (in place). Returns the names (``named_modules()`` of ``model``) of the attention modules changed.

    Each HSA module is a fresh submodule (``<name>.attention_fn``), with the attention module's device and dtype
    and training flag; its centroids are drawn ``U(-0.5, 0.5)`` from a CPU generator seeded with ``seed`` (in the
    order of ``named_modules()``), or from the global RNG when ``seed`` is None. No other random numbers are drawn
    and no existing parameter changes. The replaced function is kept in ``original_attention_fn`` (a plain
    attribute, not a submodule) for :func:`remove_hsa_from_timesfm`.

    Raises ``ValueError`` if ``model`` holds no timesfm attention module, if HSA is already installed in any of
    them, or if an attention function is itself an ``nn.Module`` (replacing it would drop its parameters).
    """
    root = module_of(model)
    targets = _attention_modules(root)
    already = [n for n, m in targets if isinstance(m.attention_fn, TimesFMHSAAttention)]
    if already:
        raise ValueError(
            f"HSA is already installed in {len(already)} attention module(s) (e.g. {already[0]!r}); "
            "call remove_hsa_from_timesfm first"
        )
    foreign = [(n, m.attention_fn) for n, m in targets if isinstance(m.attention_fn, nn.Module)]
    if foreign:
        name, fn = foreign[0]
        raise ValueError(
            f"the attention function of {name!r} is an nn.Module ({type(fn).__name__}); "
            "HSA replaces plain attention functions only (remove that adapter first)"
        )
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    new = []
    for _, attn in targets:  # build all first: nothing is installed if one fails
        ref = next(attn.parameters(), None)
        hsa = TimesFMHSAAttention(
            attn.head_dim,
            n_centroids=n_centroids,
            tau1=tau1,
            tau2=tau2,
            hard=hard,
            logit_scale=logit_scale,
            init_generator=generator,
        )
        if ref is not None:
            hsa.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
        new.append(hsa.train(attn.training))
    for (_, attn), hsa in zip(targets, new):
        hsa.original_attention_fn = attn.attention_fn
        attn.attention_fn = hsa  # nn.Module.__setattr__: registered as the submodule ``attention_fn``
    return [n for n, _ in targets]


def remove_hsa_from_timesfm(model: Any) -> list[str]:
    """Restore the original attention function of every timesfm attention module of ``model`` that holds a
    :class:`TimesFMHSAAttention` (the centroids leave the model). Returns the names of the modules restored;
    raises ``ValueError`` if there is none."""
    root = module_of(model)
    found = [(n, m) for n, m in _attention_modules(root) if isinstance(m.attention_fn, TimesFMHSAAttention)]
    if not found:
        raise ValueError(f"{type(root).__name__} has no HSA installed (see add_hsa_to_timesfm)")
    unknown = [n for n, m in found if m.attention_fn.original_attention_fn is None]
    if unknown:  # checked first: nothing is restored if one fails
        raise ValueError(f"the HSA module of {unknown[0]!r} does not know the attention function it replaced")
    for _, attn in found:
        original = attn.attention_fn.original_attention_fn
        del attn.attention_fn  # drop the submodule: a plain function cannot be assigned over a child module
        attn.attention_fn = original
    return [n for n, _ in found]
