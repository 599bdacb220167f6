"""Hierarchical Stochastic Attention (HSA) baseline (Pei et al., 2022; paper App. "HSA").

HSA makes attention stochastic at two levels, both with Gumbel-softmax relaxations:

1. each key is (softly) assigned to one of ``k`` learned centroids,
   ``prob = gumbel_softmax(K C, tau1)`` over the centroids and ``K~ = prob C^T``;
2. attention over values is sampled, ``weights = gumbel_softmax(Q K~^T / sqrt(d_head), tau2)`` over the keys,
   and the head output is ``weights V``.

The Gumbel noise stays on in eval mode: it is the method's predictive uncertainty. A model is trained from
scratch with it (ordinary MSE training, e.g. ``stochattn.training.fit_regressor``) and predictive samples are
repeated stochastic forward passes (:func:`hsa_samples`).

Choices, checked against the reference code amzn/sto-transformer (Apache-2.0), read, not copied:

* ``code/common/transformer.py``, class ``StoSelfDualAttention`` (used by the IMDB experiments, ~l. 98-140):
  one centroid matrix ``(head_dim, k)`` per attention module, shared by all heads, initialised
  ``U(-0.5, 0.5)`` (~l. 106); soft (``hard=False``) Gumbel-softmax at both levels (~l. 125 and ~l. 132);
  logits ``Q K~^T`` without a ``1/sqrt(d)`` factor (~l. 127). Defaults ``k_centroid=2, tau1=tau2=1.0``
  (``StoTransformerEncoder`` signature and ``code/IMDB/Config.py`` arguments ``--k_centroid/--tau1/--tau2``).
* ``code/CoLA/Sto_Transformer.py``, class ``DualStoSelfAttention`` (~l. 101-170): same centroid layout and
  init (~l. 122-124) but ``hard=True`` (straight-through) at both levels (~l. 144 and ~l. 155), attention
  dropout after the sampled weights (~l. 159).

Here: soft Gumbel-softmax by default (``hard=True`` gives the straight-through variant), centroids shared
across heads with one matrix per attention module, ``U(-0.5, 0.5)`` init, attention dropout applied to the
sampled weights as rtdl applies it to its softmax probabilities.

The two-level sampling itself is :func:`hsa_attention_weights` on raw per-head queries and keys (with an optional
boolean attention mask), shared with the TimesFM adapter :mod:`stochattn.baselines.hsa_timesfm`. Every module
built on it derives from :class:`HSAAttentionBase` (centroids, temperatures, ``generator``), which is what
:func:`hsa_generator` and :func:`hsa_samples` look for.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from stochattn.extras import requires
from stochattn.patch import predictive_samples
from stochattn.training import attribute_set, eval_mode, model_device

with requires("uci"):
    from rtdl_revisiting_models import MultiheadAttention

__all__ = [
    "HSAAttentionBase",
    "HierarchicalStochasticAttention",
    "gumbel_noise",
    "gumbel_softmax",
    "hsa_attention_weights",
    "hsa_centroid_keys",
    "hsa_ft_transformer",
    "hsa_generator",
    "hsa_samples",
    "replace_attention_with_hsa",
]


def _check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != device.type:
        raise ValueError(
            f"generator is on device {generator.device} but the tensors are on {device}; "
            "create the generator on the model's device"
        )


def gumbel_noise(
    shape: torch.Size | tuple[int, ...],
    *,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Standard Gumbel(0, 1) noise of ``shape`` in float32, ``G = -log(-log U)``, ``U ~ U[0, 1)``.

    ``torch.nn.functional.gumbel_softmax`` takes no generator; this draws from ``generator`` when given
    (else the global RNG), so sampling is reproducible.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    _check_generator(generator, device)
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    # U = 0 would give -inf; clamping at the smallest normal float keeps the noise finite (max ~ -4.5).
    return -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float32).tiny)))


def _check_mask(mask: Tensor, logits: Tensor) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool Tensor (True = attend), got {getattr(mask, 'dtype', type(mask).__name__)}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, logits.shape)
    except RuntimeError:
        shape = None
    if shape != logits.shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the logits {tuple(logits.shape)}")
    if mask.device != logits.device:
        raise ValueError(f"mask is on {mask.device} but the logits are on {logits.device}")


def gumbel_softmax(
    logits: Tensor,
    tau: float,
    *,
    hard: bool = False,
    dim: int = -1,
    mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Gumbel-softmax sample ``softmax((logits + G) / tau)`` along ``dim``; same shape and dtype as ``logits``.

    With ``hard=True`` the forward value is the one-hot arg-max and the gradient is the soft sample's
    (straight-through), as ``F.gumbel_softmax(hard=True)``. Computed in float32 for low-precision inputs.

    ``mask`` (bool, broadcastable to ``logits``, True = may be selected) restricts the sample to the unmasked
    entries: masked entries get probability exactly 0 (also with ``hard=True``), and a slice along ``dim`` with
    no unmasked entry (a fully masked attention row) is all zeros, with finite (zero) gradients, never NaN. The
    noise is drawn for every entry, masked or not, so the random stream does not depend on the mask.
    """
    if not (isinstance(tau, (int, float)) and tau > 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be a positive finite number, got {tau!r}")
    g = gumbel_noise(logits.shape, device=logits.device, generator=generator)
    z = (logits.float() + g) / tau
    if mask is not None:
        _check_mask(mask, logits)
        z = z.masked_fill(~mask, float("-inf"))  # exp(-inf) = 0 exactly
        row_ok = mask.any(dim=dim, keepdim=True)
        # fully masked slices: finite placeholder logits (softmax of all -inf is NaN, and so is its gradient);
        # their output is zeroed below
        z = z.masked_fill(~row_ok, 0.0)
    y = torch.softmax(z, dim=dim)
    if hard:
        # masked entries hold 0 < max, so the arg-max is an unmasked entry (a fully masked slice is zeroed below)
        index = y.argmax(dim=dim, keepdim=True)
        y_hard = torch.zeros_like(y).scatter_(dim, index, 1.0)
        y = y_hard - y.detach() + y
    if mask is not None:
        y = y.masked_fill(~row_ok, 0.0)
    return y.to(logits.dtype)


def hsa_centroid_keys(
    k: Tensor,
    centroids: Tensor,
    *,
    tau1: float = 1.0,
    hard: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """HSA level 1: keys ``k`` (..., n_k, d_head), ``centroids`` (d_head, n_centroids) ->
    (``K~`` (..., n_k, d_head), ``prob`` (..., n_k, n_centroids)).

    ``prob = gumbel_softmax(k C, tau1)`` over the centroids, ``K~ = prob C^T``.
    """
    if centroids.ndim != 2 or k.shape[-1] != centroids.shape[0]:
        raise ValueError(
            f"keys (..., n_k, d_head) and centroids (d_head, n_centroids) disagree: keys {tuple(k.shape)}, "
            f"centroids {tuple(centroids.shape)}"
        )
    prob = gumbel_softmax(k @ centroids, tau1, hard=hard, generator=generator)
    return prob @ centroids.T, prob


def hsa_attention_weights(
    q: Tensor,
    k: Tensor,
    centroids: Tensor,
    *,
    tau1: float = 1.0,
    tau2: float = 1.0,
    hard: bool = False,
    logit_scale: float = 1.0,
    mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Sampled HSA attention weights: q (..., n_q, d_head), k (..., n_k, d_head) -> (..., n_q, n_k).

    Level 1 (:func:`hsa_centroid_keys`): ``K~ = gumbel_softmax(k C, tau1) C^T`` with ``centroids`` ``C``
    (d_head, n_centroids); level 2: ``gumbel_softmax(q K~^T * logit_scale, tau2)`` over the keys. The leading
    dims of ``q`` and ``k`` broadcast (e.g. (B * H,) or (B, H)). ``logit_scale`` defaults to 1 (the reference
    code's unscaled logits). ``mask`` (bool, broadcastable to (..., n_q, n_k), True = attend): masked keys get
    weight exactly 0, rows sum to 1 over the attended keys, and fully masked query rows are all zeros (no NaN,
    also in the gradients). Noise is drawn from ``generator`` (else the global RNG): level 1 first, then level 2.
    """
    if not (isinstance(logit_scale, (int, float)) and logit_scale > 0 and math.isfinite(logit_scale)):
        raise ValueError(f"logit_scale must be a positive finite number, got {logit_scale!r}")
    if q.ndim < 2 or k.ndim < 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (..., n_q, d) and k (..., n_k, d) disagree: q {tuple(q.shape)}, k {tuple(k.shape)}")
    k_tilde, _ = hsa_centroid_keys(k, centroids, tau1=tau1, hard=hard, generator=generator)
    logits = (q @ k_tilde.transpose(-2, -1)) * logit_scale
    return gumbel_softmax(logits, tau2, hard=hard, mask=mask, generator=generator)


def _check_hyperparameters(n_centroids: int, tau1: float, tau2: float, logit_scale: float | None) -> None:
    if isinstance(n_centroids, bool) or not isinstance(n_centroids, int) or n_centroids < 1:
        raise ValueError(f"n_centroids must be a positive integer, got {n_centroids!r}")
    for name, value in (("tau1", tau1), ("tau2", tau2)):
        if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if logit_scale is not None and not (logit_scale > 0 and math.isfinite(logit_scale)):
        raise ValueError(f"logit_scale must be a positive finite number or None, got {logit_scale!r}")


class HSAAttentionBase(nn.Module):
    """Common base of the HSA attention modules (this file's :class:`HierarchicalStochasticAttention`, the TimesFM
    adapter ``stochattn.baselines.hsa_timesfm.TimesFMHSAAttention``).

    A subclass calls :meth:`_init_hsa` in its ``__init__``; it then holds the parameter ``centroids``
    (d_head, n_centroids), shared by its heads, the floats ``tau1``, ``tau2``, ``logit_scale``, the flag ``hard``
    and ``generator`` (the ``torch.Generator`` the Gumbel noise is drawn from, ``None``: global RNG; set it with
    :func:`hsa_generator`). :func:`hsa_generator` and :func:`hsa_samples` act on every instance in a model.
    """

    centroids: nn.Parameter

    def _init_hsa(
        self, d_head: int, n_centroids: int, tau1: float, tau2: float, hard: bool, logit_scale: float
    ) -> None:
        """Register ``centroids`` (uninitialised: call :meth:`reset_centroids`) and set the sampling settings."""
        _check_hyperparameters(n_centroids, tau1, tau2, logit_scale)
        self.centroids = nn.Parameter(torch.empty(d_head, n_centroids))
        self.tau1 = float(tau1)
        self.tau2 = float(tau2)
        self.hard = bool(hard)
        self.logit_scale = float(logit_scale)
        self.generator: torch.Generator | None = None

    @property
    def n_centroids(self) -> int:
        return self.centroids.shape[1]

    @torch.no_grad()
    def reset_centroids(self, generator: torch.Generator | None = None) -> None:
        """``centroids ~ U(-0.5, 0.5)`` (reference init), drawn on CPU from ``generator`` when given."""
        c = torch.rand(self.centroids.shape, generator=generator, dtype=torch.float32, device="cpu") - 0.5
        self.centroids.copy_(c)

    def centroid_keys(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """Level 1: keys ``k`` (..., n_k, d_head) -> (``K~`` (..., n_k, d_head), ``prob`` (..., n_k, n_centroids)).

        ``prob = gumbel_softmax(k C, tau1)`` over centroids, ``K~ = prob C^T``.
        """
        return hsa_centroid_keys(k, self.centroids, tau1=self.tau1, hard=self.hard, generator=self.generator)

    def sample_weights(self, q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
        """:func:`hsa_attention_weights` with this module's settings: q (..., n_q, d_head), k (..., n_k, d_head),
        optional bool ``mask`` (True = attend) -> (..., n_q, n_k)."""
        return hsa_attention_weights(
            q,
            k,
            self.centroids,
            tau1=self.tau1,
            tau2=self.tau2,
            hard=self.hard,
            logit_scale=self.logit_scale,
            mask=mask,
            generator=self.generator,
        )

    def _hsa_repr(self) -> str:
        return (
            f"n_centroids={self.n_centroids}, tau1={self.tau1}, tau2={self.tau2}, hard={self.hard}, "
            f"logit_scale={self.logit_scale:.4g}"
        )


class HierarchicalStochasticAttention(HSAAttentionBase):
    """Drop-in replacement for ``rtdl_revisiting_models.MultiheadAttention`` with two-level Gumbel sampling.

    Same constructor arguments (``d_embedding``, ``n_heads``, ``dropout``; no Linformer compression), same
    parameters ``W_q, W_k, W_v`` and ``W_out`` (``None`` for one head), so an rtdl attention's state dict
    loads with ``strict=False`` (only ``centroids`` is new); see :meth:`from_rtdl`.

    Extra parameter ``centroids`` of shape ``(d_head, n_centroids)``, shared by all heads (as in the reference).

    ``forward(x_q (B, n_q, d), x_kv (B, n_k, d)) -> (B, n_q, d)``. The attribute ``generator`` (default
    ``None``: global RNG) is the ``torch.Generator`` the Gumbel noise is drawn from; set it with
    :func:`hsa_generator`.
    """

    def __init__(
        self,
        *,
        d_embedding: int,
        n_heads: int,
        dropout: float,
        n_centroids: int = 2,
        tau1: float = 1.0,
        tau2: float = 1.0,
        hard: bool = False,
        logit_scale: float | None = None,
    ) -> None:
        """
        Args:
            d_embedding: token embedding size, a multiple of ``n_heads``.
            n_heads: number of heads; with more than one there is an output mixing layer ``W_out``.
            dropout: dropout rate on the sampled attention weights (training mode only), as rtdl.
            n_centroids: number ``k`` of key centroids (Pei et al. default 2).
            tau1: Gumbel-softmax temperature of the key-to-centroid assignment (default 1).
            tau2: Gumbel-softmax temperature of the attention over keys (default 1).
            hard: straight-through one-hot samples at both levels (the CoLA reference code) instead of soft.
            logit_scale: factor on ``Q K~^T``; ``None`` means ``1/sqrt(d_head)``.
        """
        for name, value in (("d_embedding", d_embedding), ("n_heads", n_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if d_embedding % n_heads:
            raise ValueError(f"d_embedding must be a multiple of n_heads, got {d_embedding=} and {n_heads=}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        _check_hyperparameters(n_centroids, tau1, tau2, logit_scale)
        super().__init__()
        self.W_q = nn.Linear(d_embedding, d_embedding)
        self.W_k = nn.Linear(d_embedding, d_embedding)
        self.W_v = nn.Linear(d_embedding, d_embedding)
        self.W_out = nn.Linear(d_embedding, d_embedding) if n_heads > 1 else None
        self.dropout = nn.Dropout(dropout) if dropout else None
        self._n_heads = n_heads
        d_head = d_embedding // n_heads
        # The reference code (StoSelfDualAttention / DualStoSelfAttention) uses Q K~^T without any scaling, and so
        # does hsa_ft_transformer (HSA trained from scratch, the paper's UCI setting). NOTE[DIFF] This module's own
        # default (None) keeps rtdl's 1/sqrt(d_head) so that weights copied from a TRAINED rtdl attention
        # (from_rtdl, replace_attention_with_hsa: not in the reference) give logits on the scale they were trained for.
        scale = 1.0 / math.sqrt(d_head) if logit_scale is None else float(logit_scale)
        self._init_hsa(d_head, n_centroids, tau1, tau2, hard, scale)  # registers centroids (after W_*, as before)
        for m in (self.W_q, self.W_k, self.W_v, self.W_out):
            if m is not None:
                nn.init.zeros_(m.bias)  # as rtdl
        if not self.centroids.is_meta:  # meta: built by from_rtdl, initialised there
            self.reset_centroids()

    @property
    def n_heads(self) -> int:
        return self._n_heads

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Initialise as rtdl (default ``nn.Linear`` init, zero biases) and ``centroids ~ U(-0.5, 0.5)``.

        ``generator`` (CPU) makes the centroid init reproducible; the linear layers use the global RNG.
        """
        for m in (self.W_q, self.W_k, self.W_v, self.W_out):
            if m is not None:
                m.reset_parameters()
                nn.init.zeros_(m.bias)
        self.reset_centroids(generator)

    @classmethod
    def from_rtdl(
        cls,
        attention: MultiheadAttention,
        *,
        n_centroids: int = 2,
        tau1: float = 1.0,
        tau2: float = 1.0,
        hard: bool = False,
        logit_scale: float | None = None,
        generator: torch.Generator | None = None,
    ) -> HierarchicalStochasticAttention:
        """HSA module with ``attention``'s ``W_q/W_k/W_v/W_out`` (copied), dropout rate, device and dtype.

        Centroids are freshly initialised, from ``generator`` (CPU) when given, else from the global RNG; no
        other random numbers are drawn.
        """
        if not isinstance(attention, MultiheadAttention):
            raise TypeError(
                f"attention must be an rtdl_revisiting_models.MultiheadAttention, got {type(attention).__name__}"
            )
        if attention.key_compression is not None:
            raise ValueError("attention uses Linformer key/value compression, which HSA does not support")
        dropout = attention.dropout.p if attention.dropout is not None else 0.0
        # Built on the meta device so that no throw-away weights are drawn from the global RNG.
        with torch.device("meta"):
            new = cls(
                d_embedding=attention.W_q.in_features,
                n_heads=attention._n_heads,
                dropout=dropout,
                n_centroids=n_centroids,
                tau1=tau1,
                tau2=tau2,
                hard=hard,
                logit_scale=logit_scale,
            )
        ref = attention.W_q.weight
        new.to_empty(device=ref.device).to(dtype=ref.dtype)
        missing, unexpected = new.load_state_dict(attention.state_dict(), strict=False)
        if set(missing) != {"centroids"} or unexpected:  # pragma: no cover - guards rtdl layout changes
            raise RuntimeError(f"rtdl attention layout changed: missing={missing}, unexpected={unexpected}")
        new.reset_centroids(generator)
        new.train(attention.training)
        return new

    def extra_repr(self) -> str:
        return f"n_heads={self._n_heads}, {self._hsa_repr()}"

    def _split_heads(self, x: Tensor) -> Tensor:
        """(B, n, d) -> (B * H, n, d_head), rtdl's head layout."""
        b, n, d = x.shape
        h = self._n_heads
        return x.reshape(b, n, h, d // h).transpose(1, 2).reshape(b * h, n, d // h)

    def _merge_heads(self, x: Tensor, batch_size: int) -> Tensor:
        """(B * H, n, d_head) -> (B, n, d)."""
        _, n, d_head = x.shape
        h = self._n_heads
        return x.reshape(batch_size, h, n, d_head).transpose(1, 2).reshape(batch_size, n, h * d_head)

    def _check_inputs(self, x_q: Tensor, x_kv: Tensor) -> None:
        d = self.W_q.in_features
        for name, x in (("x_q", x_q), ("x_kv", x_kv)):
            if not isinstance(x, Tensor):
                raise TypeError(f"{name} must be a Tensor, got {type(x).__name__}")
            if x.ndim != 3 or x.shape[-1] != d:
                raise ValueError(f"{name} must have shape (batch, n_tokens, {d}), got {tuple(x.shape)}")
        if x_q.shape[0] != x_kv.shape[0]:
            raise ValueError(f"x_q and x_kv batch sizes differ: {x_q.shape[0]} vs {x_kv.shape[0]}")

    def _weights_and_values(self, x_q: Tensor, x_kv: Tensor) -> tuple[Tensor, Tensor]:
        self._check_inputs(x_q, x_kv)
        q = self._split_heads(self.W_q(x_q))
        k = self._split_heads(self.W_k(x_kv))
        v = self._split_heads(self.W_v(x_kv))
        return self.sample_weights(q, k), v

    def attention_weights(self, x_q: Tensor, x_kv: Tensor) -> Tensor:
        """Sampled attention weights (B * H, n_q, n_k) before dropout (rows on the simplex)."""
        return self._weights_and_values(x_q, x_kv)[0]

    def forward(self, x_q: Tensor, x_kv: Tensor) -> Tensor:
        """x_q (B, n_q, d), x_kv (B, n_k, d) -> (B, n_q, d); a fresh Gumbel sample at every call."""
        weights, v = self._weights_and_values(x_q, x_kv)
        if self.dropout is not None:
            weights = self.dropout(weights)
        x = self._merge_heads(weights @ v, x_q.shape[0])
        if self.W_out is not None:
            x = self.W_out(x)
        return x


def replace_attention_with_hsa(
    model: nn.Module,
    *,
    n_centroids: int = 2,
    tau1: float = 1.0,
    tau2: float = 1.0,
    hard: bool = False,
    logit_scale: float | None = None,
    seed: int | None = None,
) -> nn.Module:
    """Swap every ``rtdl_revisiting_models.MultiheadAttention`` inside ``model`` (in place) for an HSA module.

    Weights ``W_q/W_k/W_v/W_out`` and the dropout rate are copied, so the rest of the model is unchanged and the
    parameter count grows by ``d_head * n_centroids`` per attention module. ``seed`` makes the centroid init
    reproducible. Returns ``model``; raises ``ValueError`` if it holds no rtdl attention.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(model, MultiheadAttention):
        raise ValueError("model is itself an rtdl MultiheadAttention; use HierarchicalStochasticAttention.from_rtdl")
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    targets = [name for name, m in model.named_modules() if isinstance(m, MultiheadAttention)]
    if not targets:
        raise ValueError("model contains no rtdl_revisiting_models.MultiheadAttention module to replace")
    for name in targets:
        parent_name, _, child_name = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = HierarchicalStochasticAttention.from_rtdl(
            parent.get_submodule(child_name),
            n_centroids=n_centroids,
            tau1=tau1,
            tau2=tau2,
            hard=hard,
            logit_scale=logit_scale,
            generator=generator,
        )
        setattr(parent, child_name, new)  # works for ModuleDict/ModuleList children as well
    return model


def hsa_ft_transformer(
    n_features: int,
    *,
    n_centroids: int = 2,
    tau1: float = 1.0,
    tau2: float = 1.0,
    hard: bool = False,
    logit_scale: float | None = 1.0,
    **ft_kwargs,
) -> nn.Module:
    """The project's FT-Transformer regressor with every attention module replaced by HSA.

    ``ft_kwargs`` go to ``stochattn.backbones.ft_transformer.build_ft_transformer`` (``n_blocks``, ``d_block``,
    ``attention_n_heads``, ..., ``seed``); the same ``seed`` (if any) initialises the centroids. The result
    maps ``x (B, n_features) -> (B,)`` and is trained like any regressor (``stochattn.training.fit_regressor``).
    ``logit_scale`` defaults to 1, the reference code's unscaled ``Q K~^T``: a network trained from scratch has no
    trained logit scale to keep (``None``: rtdl's 1/sqrt(d_head)). Both scales are measured on the UCI sets in
    docs/measurements.md ("HSA's implementation choices").
    """
    from stochattn.backbones.ft_transformer import build_ft_transformer

    model = build_ft_transformer(n_features, **ft_kwargs)
    return replace_attention_with_hsa(
        model,
        n_centroids=n_centroids,
        tau1=tau1,
        tau2=tau2,
        hard=hard,
        logit_scale=logit_scale,
        seed=ft_kwargs.get("seed"),
    )


def _hsa_modules(model: nn.Module) -> list[HSAAttentionBase]:
    """Every HSA attention module of ``model`` (any :class:`HSAAttentionBase` subclass)."""
    return [m for m in model.modules() if isinstance(m, HSAAttentionBase)]


@contextlib.contextmanager
def hsa_generator(model: nn.Module, generator: torch.Generator | None) -> Iterator[nn.Module]:
    """Context in which every HSA module of ``model`` draws its Gumbel noise from ``generator``."""
    with attribute_set(_hsa_modules(model), "generator", generator):
        yield model


@torch.no_grad()
def hsa_samples(
    model: nn.Module,
    x: Tensor,
    num_samples: int,
    *,
    generator: torch.Generator | int | None = None,
    batch_size: int = 8192,
    progress: bool = False,
) -> Tensor:
    """``num_samples`` stochastic forward passes of an HSA model in eval mode: x (n, ...) -> (S, n, ...).

    Samples are folded into the batch: ``x`` is tiled along dim 0 so that one forward pass evaluates up to
    ``batch_size`` rows (samples x inputs), then reshaped back. ``generator`` is a ``torch.Generator`` on the
    model's device or an ``int`` seed; draws are reproducible for a fixed generator state and ``batch_size``.
    Every module's training flag is restored afterwards; the result is on the model's device.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not _hsa_modules(model):
        raise ValueError(
            "model contains no HierarchicalStochasticAttention or other HSA module (HSAAttentionBase); "
            "its passes would be identical"
        )
    if not isinstance(x, Tensor) or x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"x must be a Tensor with at least one row, got {getattr(x, 'shape', type(x))}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    device = model_device(model)
    if isinstance(generator, int) and not isinstance(generator, bool):
        generator = torch.Generator(device=device).manual_seed(generator)
    elif generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, an int seed or None, got {type(generator).__name__}")
    _check_generator(generator, device)

    with eval_mode(model), hsa_generator(model, generator):
        return predictive_samples(model, x.to(device), num_samples=num_samples, max_rows=batch_size, progress=progress)
