"""Fused stochastic attention on the GPU (Triton): SA's output exactly in law, memory linear in the sequence.

:func:`sa_attention_fused` returns ``(W / nu) V`` with ``W ~ Multinomial(nu_h, softmax(q k^T scale + mask))`` drawn
independently per query row, as :func:`stochattn.attention.scaled_dot_product_attention` does, but streams the key
blocks as fused attention does and never stores the L x S probability matrix (kernels: :mod:`.triton_sa_kernels`).

Algorithm (one for every nu): pass 1 is the online softmax (row max m, normaliser Z); pass 2 re-streams the keys,
carries the row's cumulative sum C_j of e_j = exp(s_j - m) across blocks and places the row's nu points, drawn as
sorted uniforms (normalised exponential spacings from counter-based Philox numbers) and generated in increasing
order, on the keys whose intervals [C_{j-1}, C_j) hold them. The counts of nu i.i.d. uniforms in a partition of
[0, Z) into intervals of lengths Z p_j are Multinomial(nu, p) exactly, whatever nu is, and masked keys (e_j = 0,
an empty interval) are never counted. Because the points arrive sorted, a key block only sees the points that fall
in it: sampling costs O(nu BLOCK_N + S NU_BLOCK) comparisons per row on top of fused attention's work, against
O(nu S) for comparing every draw with every key (this module's first version); the work no longer grows with
nu x S, so one algorithm serves small and large nu. A one-pass variant (nu weighted-reservoir draws carried
through the online softmax) would save pass 1's Q K^T but costs nu random numbers per (row, key).

NOTE[DIFF]: the cumulative sum is a float32 scan and may end slightly below Z; a point beyond its end (probability
at most ~S * 2^-24 per draw) goes to the row's last key with positive probability, as the ``categorical`` sampler
of :mod:`stochattn.attention` does for its (rarer) rounding event. Random numbers are Triton's Philox (``tl.rand``,
24-bit uniforms), not torch's generator: results are reproducible from ``(seed, offset)``, not from a
``torch.Generator``.

Where the kernel cannot run (no triton, or a tensor off CUDA outside the interpreter), :func:`available` says why
and :func:`sa_attention_fused` raises :class:`FusedUnavailableError`; callers fall back to the explicit path.
With ``TRITON_INTERPRET=1`` set before this module's first call, the kernels run on CPU tensors (for tests).
"""

from __future__ import annotations

import math
import os
from typing import Optional, Union

import torch
from torch import Tensor

from stochattn.extras import requires

#: Largest nu whose counts are exact integers in each 16-bit dtype; beyond, the count x V product runs in fp32.
_EXACT_COUNT = {torch.bfloat16: 256, torch.float16: 2048}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class FusedUnavailableError(RuntimeError):
    """The fused kernel cannot run here (no triton, no CUDA); use the explicit path."""


def is_kernel_failure(err: BaseException) -> bool:
    """Whether ``err`` is the kernel failing to compile or launch here (Triton's own errors: compilation, out of
    resources; or a RuntimeError of the backend, e.g. ptxas), as opposed to a bad argument (ValueError, TypeError)."""
    try:
        from triton.errors import TritonError
    except ImportError:
        TritonError = RuntimeError
    return isinstance(err, (TritonError, RuntimeError)) and not isinstance(err, FusedUnavailableError)


def _kernels():
    """The kernel module, or the reason it cannot be imported."""
    try:
        from . import triton_sa_kernels
    except ImportError as err:  # triton missing or broken
        return None, f"triton is not importable ({err})"
    return triton_sa_kernels, None


def _interpreting(kernels) -> bool:
    """Whether the kernels were built for Triton's CPU interpreter (TRITON_INTERPRET=1 when first imported)."""
    with requires("triton"):
        from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernels._sample_kernel, InterpretedFunction)


def available(device: Union[str, torch.device] = "cuda") -> tuple[bool, str]:
    """(True, "") when :func:`sa_attention_fused` can run on tensors of ``device``, else (False, the reason)."""
    kernels, reason = _kernels()
    if kernels is None:
        return False, reason
    device = torch.device(device)
    if _interpreting(kernels):
        if device.type != "cpu":
            return False, "triton's interpreter (TRITON_INTERPRET=1) runs on CPU tensors only"
        return True, ""
    if device.type != "cuda":
        late = os.environ.get("TRITON_INTERPRET") == "1"
        hint = " (TRITON_INTERPRET=1 was set after the kernels' first import)" if late else ""
        return False, f"the compiled triton kernel runs on CUDA tensors, got {device}{hint}"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    return True, ""


def _nu_per_head(nu: Union[int, Tensor], H: int, device: torch.device) -> Tensor:
    """(H,) int32 on ``device``: a positive int for every head, or a per-head tensor (0 = deterministic head)."""
    if isinstance(nu, Tensor):
        if nu.dtype.is_floating_point or nu.dtype == torch.bool or nu.numel() not in (1, H):
            raise ValueError(f"nu must be an int or an integer tensor of 1 or H={H} values, got {nu.dtype} "
                             f"{tuple(nu.shape)}")
        nu = nu.reshape(-1).expand(H)
        if int(nu.min()) < 0:
            raise ValueError("nu must be >= 0 (0 marks a deterministic head)")
        return nu.to(device=device, dtype=torch.int32).contiguous()
    if isinstance(nu, bool) or not isinstance(nu, int) or nu < 1:
        raise ValueError(f"nu must be a positive int or a per-head integer tensor, got {nu!r}")
    return torch.full((H,), nu, dtype=torch.int32, device=device)


def _mask_operand(attn_mask: Optional[Tensor], shape: tuple, like: Tensor) -> tuple[int, Tensor, tuple]:
    """(kind, tensor, strides of (B, H, L, S)): kind 0 none, 1 boolean (int8, True = keep), 2 additive (fp32).
    Broadcast dimensions get stride 0: the mask is never expanded in memory."""
    if attn_mask is None:
        return 0, like, (0, 0, 0, 0)
    if attn_mask.dtype == torch.bool:
        kind, mask = 1, attn_mask.to(torch.int8)
    else:
        kind, mask = 2, attn_mask.to(torch.float32)
    mask = torch.broadcast_to(mask, shape)
    return kind, mask, mask.stride()


def _blocks(interpreting: bool, nu_max: int) -> tuple[dict, dict]:
    """(tile sizes, launch options per kernel). On the GPU (BLOCK_M, BLOCK_N) 32 x 32 and 8 draws at a time (the
    draw-placing tile is BLOCK_M x NU_BLOCK x BLOCK_N); pass 1 in 4 warps, pass 2 in 8. Compiled for sm_90
    (``benchmarks/triton_compile_check.py``) pass 2 spills at most 136 B per thread (4 warps: up to 744 B at head
    dim 80) and pass 1 nothing (8 warps: 2.7 kB at head dim 80 in fp32): a choice from the compiled code, not yet
    timed on a GPU. In the interpreter, whose cost is per operation, 128 rows x 16 keys x 32 draws: few programs,
    and short key blocks keep small test rows on several blocks (the carried sum is exercised)."""
    if interpreting:
        tiles = {"BLOCK_M": 128, "BLOCK_N": 16, "NU_BLOCK": min(32, _next_power_of_2(nu_max))}
        return tiles, {"stats": {}, "sample": {}}
    tiles = {"BLOCK_M": 32, "BLOCK_N": 32, "NU_BLOCK": min(8, _next_power_of_2(nu_max))}
    return tiles, {"stats": {"num_warps": 4}, "sample": {"num_warps": 8}}


def _next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1): Triton tile sizes."""
    return 1 << max(0, (int(n) - 1).bit_length())


def sa_attention_fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    nu: Union[int, Tensor],
    *,
    attn_mask: Optional[Tensor] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    seed: int,
    offset: int = 0,
) -> Tensor:
    """Stochastic attention output (B, H, L, Ev) in ``v``'s dtype, exact in law, streamed over key blocks.

    q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev): fp32, bf16 or fp16 (accumulation in fp32), CUDA tensors (CPU
    tensors under TRITON_INTERPRET=1). nu: a positive int, or an integer tensor of H values (per head; 0 keeps that
    head deterministic). attn_mask: boolean (True = attend) or additive float, broadcastable to (B, H, L, S);
    is_causal: top-left aligned lower-triangular mask (not with attn_mask), as ``F.scaled_dot_product_attention``.
    A row with no attendable key returns zeros. seed (0 <= seed < 2^63) and offset (>= 0): row r = (b H + h) L + i
    uses the Philox counters ``offset + r * (max(nu) + 1) + t``, t = 0..nu, so the same (seed, offset) reproduces the
    output and calls sharing a seed are independent when their counter ranges do not overlap."""
    ok, why = available(q.device)
    if not ok:
        raise FusedUnavailableError(why)
    kernels, _ = _kernels()
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, L, E), (B, H, S, E), (B, H, S, Ev); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    if k.shape != (B, H, S, E) or v.shape[:3] != (B, H, S):
        raise ValueError(f"shapes disagree: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype among fp32, bf16, fp16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask and is_causal=True cannot be given together (as in F.scaled_dot_product_attention)")
    if not 0 <= int(seed) < 2**63 or int(offset) < 0:
        raise ValueError(f"seed must be in [0, 2^63) and offset >= 0, got {seed}, {offset}")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    nu_h = _nu_per_head(nu, H, q.device)
    nu_max = max(1, int(nu_h.max()))
    kind, mask, sm = _mask_operand(attn_mask, (B, H, L, S), q)
    interpreting = _interpreting(kernels)
    tiles, launch = _blocks(interpreting, nu_max)
    meta = {"MASK_KIND": kind, "IS_CAUSAL": bool(is_causal), "BLOCK_E": max(16, _next_power_of_2(E)),
            "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32", "UPCAST": interpreting,
            "BLOCK_M": tiles["BLOCK_M"], "BLOCK_N": tiles["BLOCK_N"]}  # fmt: skip
    grid = (-(-L // tiles["BLOCK_M"]), B * H)
    row_m = torch.empty(B * H * L, dtype=torch.float32, device=q.device)
    row_z = torch.empty_like(row_m)
    kernels._stats_kernel[grid](q, k, mask, row_m, row_z, H, L, S, E, scale, *q.stride(), *k.stride(), *sm, **meta,
                                **launch["stats"])  # fmt: skip
    out = torch.empty(B, H, L, Ev, dtype=v.dtype, device=q.device)
    in_v_dtype = v.dtype != torch.float32 and nu_max <= _EXACT_COUNT[v.dtype] and not interpreting
    kernels._sample_kernel[grid](q, k, v, mask, row_m, row_z, nu_h, out, int(seed), int(offset), nu_max, H, L, S,
                                 E, Ev, scale, *q.stride(), *k.stride(), *v.stride(), *sm, *out.stride(),
                                 BLOCK_EV=max(16, _next_power_of_2(Ev)), NU_BLOCK=tiles["NU_BLOCK"],
                                 WEIGHTS_IN_V_DTYPE=in_v_dtype, **meta, **launch["sample"])  # fmt: skip
    return out
