"""Stochastic attention weights (paper §3, Definition 1, Algorithm 1).

Given the attention probabilities ``pi`` of shape (..., n_q, n_k) produced by the (masked) softmax, stochastic
attention replaces every row by ``W / nu`` with ``W ~ Multinomial(nu, pi_row)`` drawn independently per row. Then
(Propositions 1 and 2)

    E[W/nu] = pi,        Cov(W/nu) = (diag(pi) - pi pi^T) / nu,

so the attention output ``(W/nu) V`` is centred on the deterministic output with covariance
``V^T (diag(pi) - pi pi^T) V / nu``.

Three exact samplers are implemented; all are exact in law and never select a token whose probability is 0:

* ``"kernel"`` (CPU): the compiled per-row kernels of :mod:`stochattn.cpu_kernels` (numba): inverse-CDF draws
  while ``nu <= cpu_kernels.categorical_limit(n_k)``, the sequential conditional-binomial chain (BINV / BTRS
  binomials) beyond, so the cost per row is bounded by O(n_k) whatever ``nu`` is. Through
  :func:`stochastic_attention` it also computes the *output* of small-``nu`` rows by averaging the ``nu`` drawn
  value rows instead of forming the dense ``W V`` product.
* ``"categorical"``: ``nu`` inverse-CDF draws per row with torch ops (``searchsorted`` in the row's cumulative
  sum, scatter-add of the counts). Cost O(n_k + nu log n_k) per row: cheapest for small ``nu``.
* ``"binomial"``: conditional binomial splitting on a balanced binary tree over the keys with torch ops. A node
  holding ``c`` draws sends ``Binomial(c, m_left / (m_left + m_right))`` of them to its left child (``m`` =
  probability mass of the child's keys) and the rest to its right child: ``ceil(log2 n_k)`` vectorised
  ``torch.binomial`` calls. Cost O(n_k) per row, independent of ``nu``.

``"auto"`` is ``"kernel"`` on the CPU; on other devices it is ``categorical`` while ``nu <=
AUTO_CATEGORICAL_PER_KEY * n_k`` and ``binomial`` beyond (crossovers measured with
``benchmarks/bench_attention.py``).

``nu`` may be ``None`` (deterministic: the input is returned unchanged), a positive integer, or an integer tensor
broadcastable to ``pi.shape[:-1]`` (per-row / per-head / per-query concentration). Inside a tensor, the value 0
marks rows that stay deterministic; this is how a per-head ``None`` is encoded by :mod:`stochattn.patch`.

**Operators.** :func:`sdpa_op`, :func:`attend_op` and :func:`weights_op` (``torch.ops.stochattn.sdpa`` / ``attend``
/ ``weights``) are this module's SDPA, :func:`stochastic_attention` and :func:`stochastic_weights` registered with
``torch.library.custom_op``: opaque to ``torch.compile`` (fake implementations give the shapes), with the random
state an explicit input, a stream ``[seed, offset]`` whose offset the call advances (:func:`call_generator`), so a
compiled graph draws fresh weights on every call and the stream's seed reproduces the draws, compiled or eager.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

Nu = Union[None, int, Tensor]
Method = Literal["auto", "kernel", "categorical", "binomial"]
_METHODS = ("auto", "kernel", "categorical", "binomial")

#: Off the CPU, ``"auto"`` draws categorically while ``nu <= AUTO_CATEGORICAL_PER_KEY * n_k``, by binomial splitting
#: beyond.
AUTO_CATEGORICAL_PER_KEY = 2

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------
def check_nu(nu: Nu, name: str = "nu") -> Nu:
    """Validate a concentration parameter: None, a positive integer (numpy integer scalars included), or a
    non-negative integer tensor."""
    if nu is None:
        return None
    if isinstance(nu, np.generic) or isinstance(nu, np.ndarray) and nu.ndim == 0:
        nu = nu.item()  # np.int64(8) -> 8; a numpy bool stays a bool and is refused below
    if isinstance(nu, Tensor):
        if nu.dtype.is_floating_point:
            if not torch.all(nu == torch.round(nu)):
                raise ValueError(f"{name} must hold integers, got non-integer values in a {nu.dtype} tensor")
            nu = nu.to(torch.int64)
        elif nu.dtype == torch.bool or nu.dtype.is_complex:
            raise TypeError(f"{name} must be an integer tensor, got dtype {nu.dtype}")
        if nu.numel() and int(nu.min()) < 0:
            raise ValueError(f"{name} must be >= 1 (0 inside a tensor marks a deterministic row), "
                             f"got min {int(nu.min())}")
        return nu
    if isinstance(nu, bool) or not isinstance(nu, (int, float)) or isinstance(nu, float) and not nu.is_integer():
        raise ValueError(f"{name} must be a positive integer or None, got {nu!r}")
    if nu < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {nu!r}")
    return int(nu)


def check_probabilities(pi: Tensor, name: str = "pi") -> None:
    """Raise if ``pi`` (..., n_k) has negative or non-finite entries or rows that sum neither to 1 nor to 0.

    Rows summing to 0 are fully masked rows (no key may be attended); they are allowed and stay zero. The
    tolerance on the row sum is ``n_k * eps(dtype)``, a bound on the rounding error of the softmax sum.
    """
    if not isinstance(pi, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(pi).__name__}")
    if pi.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating tensor (float32/float64/float16/bfloat16), got {pi.dtype}")
    if pi.dim() < 1 or pi.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., n_k) with n_k >= 1, got {tuple(pi.shape)}")
    p = pi.float()
    if not torch.isfinite(p).all():
        raise ValueError(f"{name} contains NaN or inf")
    if (p < 0).any():
        raise ValueError(f"{name} has negative entries (min {float(p.min()):.3g}); it must be a probability vector")
    sums = p.sum(-1)
    tol = max(1e-6, pi.shape[-1] * torch.finfo(pi.dtype).eps)
    bad = ((sums - 1).abs() > tol) & (sums != 0)
    if bad.any():
        worst = float(sums[bad].flatten()[0])
        raise ValueError(f"{name} rows must sum to 1 (or 0 for fully masked rows); found a row summing to {worst:.6g}")


# --------------------------------------------------------------------------------------------------------------
# samplers on 2-D (rows, n_k) float32/float64 probabilities with a scalar count
# --------------------------------------------------------------------------------------------------------------
def _counts_categorical(p: Tensor, nu: int, generator: Optional[torch.Generator]) -> Tensor:
    """Multinomial(nu, p_row) counts by inverse-CDF draws. p: (R, n) -> counts (R, n), same dtype as p."""
    rows, n = p.shape
    cdf = torch.cumsum(p, dim=-1)
    total = cdf[:, -1:]
    u = torch.rand((rows, nu), generator=generator, device=p.device, dtype=p.dtype) * total
    idx = torch.searchsorted(cdf, u, right=True)
    # idx = first j with cdf_j > u, so a key with p_j = 0 (cdf_j = cdf_{j-1}) is never selected; only u == total
    # (a rounding event, probability ~2^-24 per draw) gives idx == n: send it to the last key with positive mass.
    overflow = idx >= n
    if overflow.any():
        last_positive = (n - 1) - torch.flip(p > 0, dims=[-1]).to(torch.int8).argmax(dim=-1, keepdim=True)
        idx = torch.where(overflow, last_positive.expand_as(idx), idx)
    counts = torch.zeros_like(p)
    counts.scatter_add_(1, idx, torch.ones_like(u))
    # fully masked rows (total mass 0) receive no draw
    return counts * (total > 0)


def _counts_binomial_tree(p: Tensor, nu: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """Multinomial(nu_row, p_row) counts by conditional binomial splitting on a binary tree over the keys.

    p: (R, n); nu: (R,) float counts per row (may differ between rows) -> counts (R, n), same dtype as p.
    """
    rows, n = p.shape
    depth = max(0, math.ceil(math.log2(n)))
    width = 1 << depth
    leaves = F.pad(p, (0, width - n)) if width != n else p
    # masses[l] has shape (R, 2^l): probability mass under each node of level l (leaves at l = depth)
    masses = [leaves]
    for _ in range(depth):
        masses.append(masses[-1].view(rows, -1, 2).sum(-1))
    masses.reverse()
    counts = (nu.to(p.dtype) * (masses[0][:, 0] > 0)).unsqueeze(-1)  # (R, 1); no draw for fully masked rows
    for level in range(depth):
        child = masses[level + 1].view(rows, -1, 2)
        left, right = child[..., 0], child[..., 1]
        # left / (left + right) is exactly 1 when right == 0 and exactly 0 when left == 0, so zero-mass subtrees
        # never receive a draw; nodes with no mass at all hold count 0 and get probability 0.
        prob = torch.nan_to_num(left / (left + right), nan=0.0).clamp_(0.0, 1.0)
        to_left = torch.binomial(counts, prob, generator=generator)
        counts = torch.stack((to_left, counts - to_left), dim=-1).view(rows, -1)
    return counts[:, :n]


def _sample_counts(p: Tensor, nu: int, method: Method, generator: Optional[torch.Generator]) -> Tensor:
    n = p.shape[-1]
    if method == "auto":
        method = "categorical" if nu <= AUTO_CATEGORICAL_PER_KEY * n else "binomial"
    if method == "categorical":
        return _counts_categorical(p, nu, generator)
    if method == "binomial":
        return _counts_binomial_tree(p, torch.full(p.shape[:1], float(nu), device=p.device, dtype=p.dtype), generator)
    raise ValueError(f"method must be one of {_METHODS}, got {method!r}")


def _check_method(method: str, device: torch.device) -> bool:
    """Validate ``method``; True when the compiled CPU kernel is to be used."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "kernel" and device.type != "cpu":
        raise ValueError(f"method 'kernel' runs on the CPU only; got a tensor on {device}")
    return method == "kernel" or method == "auto" and device.type == "cpu"


def _work_dtype(t: Tensor) -> torch.dtype:
    """Sampling precision: float64 for float64 input, float32 otherwise (half types are sampled in float32)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _nu_rows(nu: Union[int, Tensor], row_shape: torch.Size) -> np.ndarray:
    """nu as an int64 array of one value, or one value per row (rows = prod(row_shape))."""
    if isinstance(nu, int):
        return np.array([nu], dtype=np.int64)
    return np.ascontiguousarray(torch.broadcast_to(nu.cpu(), row_shape).reshape(-1).numpy(), dtype=np.int64)


def _kernel_weights(pi: Tensor, nu: Union[int, Tensor], generator: Optional[torch.Generator], work_dtype) -> Tensor:
    from . import cpu_kernels

    n = pi.shape[-1]
    p = pi.detach().to(work_dtype).reshape(-1, n).contiguous()
    out = torch.empty_like(p)
    cpu_kernels.multinomial_weights(p.numpy(), _nu_rows(nu, pi.shape[:-1]), _kernel_seed(generator), out.numpy())
    return out


# --------------------------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------------------------
def stochastic_weights(
    pi: Tensor,
    nu: Nu,
    *,
    generator: Optional[torch.Generator] = None,
    method: Method = "auto",
    validate: bool = True,
) -> Tensor:
    """Stochastic attention weights ``Multinomial(nu, pi)/nu`` drawn independently for every row of ``pi``.

    Args:
        pi: attention probabilities (..., n_q, n_k) (any leading dims), rows on the simplex or all-zero (a fully
            masked row, which stays zero). float32/float64/float16/bfloat16, CPU or CUDA.
        nu: None (return ``pi`` itself: deterministic attention), a positive integer, or an integer tensor
            broadcastable to ``pi.shape[:-1]``, where 0 keeps that row deterministic.
        generator: a ``torch.Generator`` on ``pi``'s device for reproducible draws.
        method: ``"auto"``, ``"kernel"`` (CPU), ``"categorical"`` or ``"binomial"`` (see the module docstring);
            all exact in law.
        validate: check ``pi`` and ``nu`` (one reduction over ``pi``); the patched hot path turns it off.

    Returns:
        weights of the same shape and dtype as ``pi``; each row is ``W/nu`` with ``W`` a multinomial count vector.
        Sampling runs in float32 (float64 for float64 input); only the returned ``W/nu`` is rounded to the dtype.
    """
    use_kernel = _check_method(method, pi.device)
    if validate:
        nu = check_nu(nu)
        check_probabilities(pi)
    if nu is None:
        return pi
    work_dtype = _work_dtype(pi)
    n = pi.shape[-1]
    if use_kernel:
        return _kernel_weights(pi, nu, generator, work_dtype).view(pi.shape).to(pi.dtype)
    p = pi.detach().to(work_dtype).reshape(-1, n)
    if isinstance(nu, int):
        weights = _sample_counts(p, nu, method, generator).div_(nu)
    else:
        nu_rows = torch.broadcast_to(nu.to(pi.device), pi.shape[:-1]).reshape(-1)
        weights = p.clone()  # rows with nu == 0 stay deterministic
        for value in torch.unique(nu_rows).tolist():
            if value == 0:
                continue
            rows = (nu_rows == value).nonzero(as_tuple=True)[0]
            weights[rows] = _sample_counts(p[rows], int(value), method, generator).div_(value)
    return weights.view(pi.shape).to(pi.dtype)


def stochastic_attention(
    pi: Tensor,
    value: Tensor,
    nu: Nu,
    *,
    generator: Optional[torch.Generator] = None,
    method: Method = "auto",
) -> Tensor:
    """Attention output with stochastic weights: ``stochastic_weights(pi, nu) @ value``, exact in law.

    pi (..., L, S) probabilities, value (..., S, D) with the same leading dims -> (..., L, D) in ``value``'s dtype.
    On the CPU (method ``"auto"`` or ``"kernel"``), when every row's ``nu`` is between 1 and
    ``cpu_kernels.gather_limit(S)``, the output is computed by averaging the ``nu`` drawn value rows, skipping the
    dense product; the counts are the ones :func:`stochastic_weights` would draw from the same generator state.
    ``nu=None`` gives ``pi @ value``.
    """
    if nu is None:
        return pi @ value
    use_kernel = _check_method(method, pi.device)
    n = pi.shape[-1]
    # the gather path detaches V; keep the differentiable product when a gradient w.r.t. V is being recorded
    differentiable = torch.is_grad_enabled() and value.requires_grad
    if use_kernel and not differentiable and pi.shape[:-2] == value.shape[:-2] and value.shape[-2] == n:
        from . import cpu_kernels

        limit = cpu_kernels.gather_limit(n)
        small = nu <= limit if isinstance(nu, int) else nu.numel() > 0 and 1 <= int(nu.min()) and int(nu.max()) <= limit
    else:
        small = False
    if small:
        work_dtype = _work_dtype(pi)
        p = pi.detach().to(work_dtype).reshape(-1, *pi.shape[-2:]).contiguous()
        v = value.detach().to(work_dtype).reshape(-1, *value.shape[-2:])
        out = torch.empty(p.shape[0], p.shape[1], v.shape[-1], dtype=work_dtype)
        cpu_kernels.gather_output(p.numpy(), v.numpy(), _nu_rows(nu, pi.shape[:-1]), _kernel_seed(generator),
                                  out.numpy())  # fmt: skip
        return out.view(*pi.shape[:-1], value.shape[-1]).to(value.dtype)
    return stochastic_weights(pi, nu, generator=generator, method=method, validate=False) @ value


def masked_attention_probs(
    query: Tensor,
    key: Tensor,
    attn_mask: Optional[Tensor] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
) -> Tensor:
    """Softmax attention probabilities with ``F.scaled_dot_product_attention`` mask semantics.

    query (..., L, E), key (..., S, E) -> probs (..., L, S). A boolean mask marks keys that may be attended
    (True = attend); a float mask is added to the logits; ``is_causal`` applies a top-left aligned lower-triangular
    mask. Rows with no attendable key become all-zero (torch's SDPA returns a zero output for them).
    """
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    logits = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        if attn_mask is not None:
            raise ValueError(
                "attn_mask and is_causal=True cannot be given together (as in F.scaled_dot_product_attention)"
            )
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attn_mask, float("-inf"))
        else:
            logits = logits + attn_mask
    probs = torch.softmax(logits, dim=-1)
    if attn_mask is not None:
        probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows: softmax of all -inf
    return probs


#: Why the fused kernel failed to compile or launch on this machine (then ``fused=None`` keeps the explicit path).
_fused_failure: Optional[str] = None


def _kernel_seed(generator: Optional[torch.Generator]) -> int:
    """A seed for the fused kernel's counter-based random numbers, drawn from ``generator`` (torch's default CPU
    generator when None) without a device synchronisation: a CPU generator draws it; a CUDA generator (whose draws
    live on the device) gives its seed mixed with its Philox offset, and its offset is advanced, so every call gets
    a fresh seed and the generator's later draws move on as after any other use of it."""
    if generator is not None and generator.device.type == "cuda":
        offset = generator.get_offset()
        generator.set_offset(offset + 4)  # Philox offsets advance in multiples of 4
        return _mix(generator.initial_seed(), offset)
    device = generator.device if generator is not None else torch.device("cpu")
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=device).item())


def _call_kernel_seed(call_seed: int, device: torch.device) -> int:
    """:func:`_kernel_seed` of a stream call's generator ``torch.Generator(device).manual_seed(call_seed)``
    (:func:`call_generator`), without making it on CUDA: a fresh CUDA generator's offset is 0, so its seed is
    ``_mix(call_seed, 0)``. (Making a CUDA generator cost ~30 us of host time per attention call, docs/gpu.md.)"""
    if device.type == "cuda":
        return _mix(call_seed, 0)
    return _kernel_seed(torch.Generator(device=device).manual_seed(call_seed))


def _fused(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], dropout_p: float, is_causal: bool,
           scale: Optional[float], nu: Union[int, Tensor], generator: Optional[torch.Generator],
           force: bool, call_seed: Union[None, int, Tensor] = None) -> Optional[Tensor]:  # fmt: skip
    """SA through :func:`stochattn.triton_sa.sa_attention_fused` where it can run; None where it cannot (raises
    instead with ``force``). The kernel's seed comes from ``generator``, or from a stream's ``call_seed``
    (:func:`_call_kernel_seed`). A per-head ``nu`` of shape (H, 1) or (H,) becomes the kernel's (H,). Without
    ``force``, a kernel that fails to compile or launch (Triton's compilation or resource errors, a RuntimeError of
    the backend) is reported once in a RuntimeWarning and not tried again in this process."""
    global _fused_failure
    from stochattn import triton_sa

    if _fused_failure is not None and not force:
        return None

    heads = query.shape[1] if query.dim() == 4 else None
    if isinstance(nu, Tensor) and heads is not None and nu.numel() in (1, heads) and nu.dim() <= 2 and (
            nu.dim() < 2 or nu.shape[-1] == 1):  # fmt: skip
        nu = nu.reshape(-1)
    ok, why = triton_sa.available(query.device)
    if ok and dropout_p > 0.0:
        ok, why = False, "attention dropout is not fused"
    if ok and (query.dim() != 4 or key.dim() != 4 or value.dim() != 4):
        ok, why = False, f"the kernel takes (B, H, L, E) tensors, got a query of shape {tuple(query.shape)}"
    if ok and not (query.dtype == key.dtype == value.dtype and query.dtype in triton_sa._DTYPES):
        ok, why = False, f"the kernel takes fp32 / bf16 / fp16, got {query.dtype}"
    if ok and isinstance(nu, Tensor) and nu.dim() != 1:
        ok, why = False, f"the kernel takes nu per head, got nu of shape {tuple(nu.shape)}"
    if not ok:
        if force:
            raise triton_sa.FusedUnavailableError(why)
        return None
    if isinstance(call_seed, Tensor):  # a device stream: its next call taken on the device, the seed read there
        seed = triton_sa.advance_stream(call_seed)
    else:
        seed = _kernel_seed(generator) if call_seed is None else _call_kernel_seed(call_seed, query.device)
    try:
        return triton_sa.sa_attention_fused(query, key, value, nu, attn_mask=attn_mask, is_causal=is_causal,
                                            scale=scale, seed=seed)  # fmt: skip
    except Exception as err:
        if force or not triton_sa.is_kernel_failure(err):
            raise
        _fused_failure = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        warnings.warn(f"the fused SA kernel failed on this machine ({_fused_failure}); stochastic attention keeps "
                      "the explicit path (same law) from now on; fused=True raises instead", RuntimeWarning,
                      stacklevel=3)  # fmt: skip
        return None


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    nu: Nu = None,
    generator: Optional[torch.Generator] = None,
    method: Method = "auto",
    fused: Optional[bool] = None,
) -> Tensor:
    """Drop-in for ``F.scaled_dot_product_attention`` with stochastic attention after the masked softmax.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev). With ``nu=None`` this *is*
    ``F.scaled_dot_product_attention`` (bit-identical). Otherwise the masked softmax probabilities are replaced
    by ``Multinomial(nu, pi)/nu`` (per row; ``nu`` may be a tensor broadcastable to ``(..., L)``, e.g. shape
    ``(H, 1)`` for per-head values with (B, H, L, S) attention), then dropout (if any) and the product with V.

    ``fused``: the fused Triton kernel (:mod:`stochattn.triton_sa`: the same law, streamed over key blocks, memory
    linear in the sequence; its random numbers come from a seed drawn from ``generator``) is used where it can run
    (``None``: CUDA tensors of shape (B, H, L, E) in fp32 / bf16 / fp16, no dropout, ``nu`` an int or per head);
    ``True`` forces it (raising :class:`stochattn.triton_sa.FusedUnavailableError` where it cannot run), ``False``
    forces the explicit path.
    """
    return _sa_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, nu=nu,
                    generator=generator, method=method, fused=fused)  # fmt: skip


def _sa_sdpa(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], dropout_p: float,
             is_causal: bool, scale: Optional[float], enable_gqa: bool, *, nu: Nu,
             generator: Optional[torch.Generator], method: Method, fused: Optional[bool],
             call_seed: Union[None, int, Tensor] = None) -> Tensor:  # fmt: skip
    """:func:`scaled_dot_product_attention`; with ``call_seed`` (a stream's call, :func:`_call_seed`) instead of
    ``generator``, the draws of ``generator = call_generator(...)`` for that call, the generator made only where
    the explicit path needs it. ``call_seed`` may be a device stream (:func:`device_stream`): its next call, taken
    on the device where the fused kernel runs, else through the host."""
    nu = check_nu(nu)
    if nu is None:
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )
    capturing = query.is_cuda and torch.cuda.is_current_stream_capturing()
    if capturing and not isinstance(call_seed, Tensor):
        raise RuntimeError(_capture_refusal("its seed comes from the host"))
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        groups = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(groups, dim=-3)
        value = value.repeat_interleave(groups, dim=-3)
    if fused is not False and (fused or query.is_cuda):
        out = _fused(query, key, value, attn_mask, dropout_p, is_causal, scale, nu, generator, force=bool(fused),
                     call_seed=call_seed)  # fmt: skip
        if out is not None:
            return out
    if capturing:
        raise RuntimeError(_capture_refusal("the fused kernel does not run here, and the explicit path draws through "
                                            "a torch.Generator seeded on the host"))  # fmt: skip
    if isinstance(call_seed, Tensor):  # (a kernel that failed after advancing it skips that call of the stream)
        call_seed = _call_seed(call_seed)
    if call_seed is not None:
        generator = torch.Generator(device=query.device).manual_seed(call_seed)
    probs = masked_attention_probs(query, key, attn_mask, is_causal, scale)
    if dropout_p > 0.0:
        weights = stochastic_weights(probs, nu, generator=generator, method=method, validate=False)
        return F.dropout(weights, p=dropout_p) @ value
    return stochastic_attention(probs, value, nu, generator=generator, method=method)


# --------------------------------------------------------------------------------------------------------------
# SA as registered operators (torch.compile, CUDA graphs): the RNG state is an explicit input
# --------------------------------------------------------------------------------------------------------------
#: splitmix64 constants: one call's generator seed from a stream's (seed, offset)
_GOLDEN, _MIX1, _MIX2, _MASK64 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, (1 << 64) - 1


def _mix(seed: int, offset: int) -> int:
    """A 63-bit generator seed for call ``offset`` of the stream ``seed`` (splitmix64 of seed + offset x golden)."""
    z = (seed + (offset + 1) * _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return (z ^ (z >> 31)) >> 1


def new_stream(generator: Optional[torch.Generator] = None, count: int = 1) -> list[Tensor]:
    """``count`` RNG streams for :func:`call_generator`: int64 CPU tensors ``[seed, 0]``, the seeds drawn from
    ``generator`` (torch's default generator when None), so the same generator seed gives the same streams."""
    device = generator.device if generator is not None else torch.device("cpu")
    seeds = torch.randint(0, 2**62, (count,), generator=generator, device=device).cpu().tolist()
    return [torch.tensor([s, 0], dtype=torch.int64) for s in seeds]


#: A device stream's length: ``[seed, offset, call seed, kernel seed]`` (:func:`device_stream`).
DEVICE_STREAM_LEN = 4


def device_stream(rng: Tensor, device: Union[str, torch.device]) -> Tensor:
    """The stream ``rng`` (a host stream ``[seed, offset]`` or a device stream) as a *device stream* on ``device``:
    int64 ``[seed, offset, call seed, kernel seed]``, the same seed and offset, so it goes on with the same draws.
    The fused kernel's path advances it on the device (:func:`stochattn.triton_sa.advance_stream`): no host
    synchronisation, so a CUDA graph that captured SA calls draws fresh weights at every replay. Other paths
    advance it through the host (one synchronisation per call)."""
    seed, offset = rng[:2].tolist()
    return torch.tensor([seed, offset, 0, 0], dtype=torch.int64, device=device)


def host_stream(rng: Tensor) -> Tensor:
    """The stream ``rng`` as a host stream ``[seed, offset]`` (an int64 CPU tensor): the same draws from here on."""
    return rng[:2].to("cpu", copy=True)


def is_device_stream(rng: Tensor) -> bool:
    """Whether ``rng`` is a device stream (:func:`device_stream`'s four entries) rather than a host stream."""
    return rng.numel() == DEVICE_STREAM_LEN


def _capture_refusal(why: str) -> str:
    return (f"stochastic attention inside a CUDA graph capture: {why}, so every replay would repeat one draw. "
            "Capture the fused kernel's path (SDPA modules, fp32 / bf16 / fp16, no attention dropout) with the "
            "model's streams on the device: StochasticAttention.streams_to('cuda') before the warm-up call")


def call_generator(rng: Tensor, device: Union[str, torch.device]) -> torch.Generator:
    """The generator of one SA call on ``device``, from the stream ``rng`` = int64 CPU tensor ``[seed, offset]``;
    advances the offset in place, so every call gets a fresh generator and a stream reproduces its calls in order
    (refused inside a CUDA graph capture on CUDA: the replays would repeat the draw).
    (Each call's generator is seeded with ``_mix(seed, offset)``: distinct calls use distinct seeds of torch's
    generator, whose streams are taken as independent, as for any two seeds.)"""
    if torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(_capture_refusal("its draws come from a torch.Generator seeded on the host"))
    return torch.Generator(device=device).manual_seed(_call_seed(rng))


def _call_seed(rng: Tensor) -> int:
    """The generator seed of the stream ``rng``'s next call (:func:`call_generator`); advances its offset (through
    a NumPy view of the CPU tensor: torch's indexed in-place add cost ~25 us of host time per call, docs/gpu.md)."""
    if is_device_stream(rng):  # through the host: one synchronisation (the fused path advances it on the device)
        seed, offset = rng[:2].tolist()
        call = _mix(seed, offset)
        rng[1:].copy_(torch.tensor([offset + 1, call, _mix(call, 0)]))
        return call
    view = rng.numpy()
    seed, offset = int(view[0]), int(view[1])
    view[1] = offset + 1
    return _mix(seed, offset)


def _nu_arg(nu: int, nu_rows: Optional[Tensor]) -> Union[int, Tensor]:
    return nu_rows if nu_rows is not None else nu


_FUSED_CODE = {None: -1, False: 0, True: 1}
_FUSED_FLAG = {-1: None, 0: False, 1: True}


@torch.library.custom_op(
    "stochattn::sdpa", mutates_args=("rng",),
    schema="(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, bool is_causal, float? scale, bool enable_gqa, "
           "int nu, Tensor? nu_rows, Tensor(a!) rng, str method, int fused) -> Tensor",
)  # fmt: skip
def sdpa_op(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], is_causal: bool,
            scale: Optional[float], enable_gqa: bool, nu: int, nu_rows: Optional[Tensor], rng: Tensor, method: str,
            fused: int) -> Tensor:  # fmt: skip
    """:func:`scaled_dot_product_attention` with SA at ``nu`` (``nu_rows``, an int64 tensor broadcastable to
    (..., Hq, L), replaces it where given: per head / row, 0 = deterministic) as one operator: the explicit path on
    the CPU, the fused Triton kernel on CUDA (``fused``: -1 where it can run, 0 never, 1 always). Its random numbers
    come from the stream ``rng`` (:func:`call_generator`, whose offset it advances), an input of the graph, so a
    compiled graph draws fresh weights on every call and the stream's seed reproduces a run. Opaque to
    ``torch.compile`` (no graph break: a fake implementation gives the output's shape)."""
    return _sa_sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, nu=_nu_arg(nu, nu_rows),
                    generator=None, method=method, fused=_FUSED_FLAG[fused],
                    call_seed=rng if is_device_stream(rng) else _call_seed(rng))  # fmt: skip


@sdpa_op.register_fake
def _(query, key, value, attn_mask, is_causal, scale, enable_gqa, nu, nu_rows, rng, method, fused):
    if enable_gqa:  # heads: the query's; other leading dims broadcast as in torch's SDPA
        lead = (*torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3]), query.shape[-3])
    else:
        lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    return query.new_empty(*lead, query.shape[-2], value.shape[-1], dtype=value.dtype)


@torch.library.custom_op(
    "stochattn::attend", mutates_args=("rng",),
    schema="(Tensor probs, Tensor value, int nu, Tensor? nu_rows, Tensor(a!) rng, str method) -> Tensor",
)
def attend_op(probs: Tensor, value: Tensor, nu: int, nu_rows: Optional[Tensor], rng: Tensor, method: str) -> Tensor:
    """:func:`stochastic_attention` (``probs`` (..., L, S) -> (..., L, D)) as an operator; the RNG as in
    :func:`sdpa_op`."""
    generator = call_generator(rng, probs.device)
    return stochastic_attention(probs, value, _nu_arg(nu, nu_rows), generator=generator, method=method)


@attend_op.register_fake
def _(probs, value, nu, nu_rows, rng, method):
    return probs.new_empty(*probs.shape[:-1], value.shape[-1], dtype=value.dtype)


@torch.library.custom_op(
    "stochattn::weights", mutates_args=("rng",),
    schema="(Tensor probs, int nu, Tensor? nu_rows, Tensor(a!) rng, str method) -> Tensor",
)
def weights_op(probs: Tensor, nu: int, nu_rows: Optional[Tensor], rng: Tensor, method: str) -> Tensor:
    """:func:`stochastic_weights` (same shape as ``probs``) as an operator; the RNG as in :func:`sdpa_op`."""
    generator = call_generator(rng, probs.device)
    return stochastic_weights(probs, _nu_arg(nu, nu_rows), generator=generator, method=method,
                              validate=False)  # fmt: skip


@weights_op.register_fake
def _(probs, nu, nu_rows, rng, method):
    return torch.empty_like(probs)
