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
nu x S, so one algorithm serves small and large nu. Placing a chunk of NU_BLOCK points in a key block takes either
a (NU_BLOCK x BLOCK_N) compare tile per row or two binary searches (O(NU_BLOCK log BLOCK_N + BLOCK_N log
NU_BLOCK)); both give every point the same key, bit for bit. Rows of at most :data:`ONE_PASS_MAX_KEYS` keys (TimesFM's
patches, ClimaX's variable aggregation) fit one key tile: their statistics come from the same scores in one pass.
On the GPU ``triton.autotune`` chooses tiles, warps and the placing method per head dim, mask kind and size
bucket (:data:`STATS_CONFIGS`, :data:`SAMPLE_CONFIGS`, :data:`ONE_PASS_CONFIGS`); the draws do not depend on
that choice in law, and only through the float rounding of the carried sum at block edges in value.

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

import functools
import math
import os
from typing import Optional, Union

import torch
from torch import Tensor

from stochattn.attention import DEVICE_STREAM_LEN
from stochattn.extras import requires

#: Largest nu whose counts are exact integers in each 16-bit dtype; beyond, the count x V product runs in fp32.
_EXACT_COUNT = {torch.bfloat16: 256, torch.float16: 2048}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class FusedUnavailableError(RuntimeError):
    """The fused kernel cannot run here (no triton, no CUDA); use the explicit path."""


def is_kernel_failure(err: BaseException) -> bool:
    """Whether ``err`` is the kernel failing to compile or launch here (Triton's own errors: compilation, out of
    resources; or a RuntimeError of the backend, e.g. ptxas), as opposed to a bad argument (ValueError, TypeError)
    or the GPU's memory running out (``torch.OutOfMemoryError``: raised to the caller, whose explicit path would need
    more memory, O(L S), and the kernel stays on for later calls)."""
    try:
        from triton.errors import TritonError
    except ImportError:
        TritonError = RuntimeError
    return isinstance(err, (TritonError, RuntimeError)) and not isinstance(
        err, (FusedUnavailableError, torch.OutOfMemoryError))


# The checks of every call (the kernels' import, the interpreter, CUDA) are answered once per process: TimesFM 2.5's
# forward is bound by the host, where each attention call's host time adds to the model's wall time (docs/gpu.md).
def _kernels():
    """The kernel module, or the reason it cannot be imported."""
    global _KERNELS
    if _KERNELS is None:
        try:
            from . import triton_sa_kernels
        except ImportError as err:  # triton missing or broken
            return None, f"triton is not importable ({err})"
        _KERNELS = triton_sa_kernels
    return _KERNELS, None


_KERNELS = None


def _interpreting(kernels) -> bool:
    """Whether the kernels were built for Triton's CPU interpreter (TRITON_INTERPRET=1 when first imported)."""
    return _built_for_interpreter(kernels)


@functools.cache
def _built_for_interpreter(kernels) -> bool:
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
    if not _cuda_available():
        return False, "no CUDA device"
    return True, ""


@functools.cache
def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _nu_per_head(nu: Union[int, Tensor], H: int, device: torch.device) -> tuple[Tensor, int, int]:
    """((H,) int32 on ``device``, max(1, largest nu), smallest nu): a positive int for every head, or a per-head
    tensor (0 = a deterministic head). An int nu (or a CPU tensor) costs no device synchronisation."""
    if isinstance(nu, Tensor):
        if nu.dtype.is_floating_point or nu.dtype == torch.bool or nu.numel() not in (1, H):
            raise ValueError(f"nu must be an int or an integer tensor of 1 or H={H} values, got {nu.dtype} "
                             f"{tuple(nu.shape)}")
        nu = nu.reshape(-1).expand(H)
        low, high = torch.stack([nu.min(), nu.max()]).tolist()  # one read (a device tensor: one synchronisation)
        if low < 0:
            raise ValueError("nu must be >= 0 (0 marks a deterministic head)")
        return nu.to(device=device, dtype=torch.int32).contiguous(), max(1, high), low
    if isinstance(nu, bool) or not isinstance(nu, int) or nu < 1:
        raise ValueError(f"nu must be a positive int or a per-head integer tensor, got {nu!r}")
    return _filled(nu, H, device), nu, nu


@functools.lru_cache(maxsize=256)
def _filled(nu: int, H: int, device: torch.device) -> Tensor:
    """(H,) int32 ``nu`` on ``device``, made once per (nu, H, device): the kernels only read it, and filling it at
    every call cost a launch and ~25 us of host time."""
    return torch.full((H,), nu, dtype=torch.int32, device=device)


def _mask_operand(attn_mask: Optional[Tensor], shape: tuple, like: Tensor) -> tuple[int, Tensor, tuple]:
    """(kind, tensor, strides of (B, H, L, S)): kind 0 none, 1 boolean (int8, True = keep), 2 additive (fp32).
    Broadcast dimensions get stride 0: the mask is never expanded in memory."""
    if attn_mask is None:
        return 0, like, (0, 0, 0, 0)
    if attn_mask.dtype == torch.bool:
        kind, mask = 1, attn_mask.view(torch.int8)  # the same bytes (True = 1): no copy, no kernel
    else:
        kind, mask = 2, attn_mask.to(torch.float32)
    mask = torch.broadcast_to(mask, shape)
    return kind, mask, mask.stride()


#: The first version's fixed GPU tiles (before autotuning; ``benchmarks/bench_triton_sa.py`` times them as "before"):
#: (BLOCK_M, BLOCK_N) 32 x 32, 16 draws at a time (8 in the first version: see :data:`MIN_NU_BLOCK`), pass 1 in 4
#: warps, pass 2 in 8, always two passes, draws placed by a compare tile (``search``: by binary searches,
#: :func:`stochattn.triton_sa_kernels._count_by_search`).
LEGACY_TILES = {"BLOCK_M": 32, "BLOCK_N": 32, "NU_BLOCK": 16, "stats_warps": 4, "sample_warps": 8, "one_pass": False,
                "search": False}  # fmt: skip
#: The fewest draws placed at a time, whatever nu is. Triton (3.6 and 3.7) lowers a ``tl.cumsum`` wrongly when the
#: scanned axis is shorter than the elements one thread holds along it: 3.6 built with assertions stops
#: (``ScanOpToLLVM.cpp: Assertion `numScanBlocks * ... == srcValues.size()'``, the first H200 run, 2026-11-29, at
#: nu = 1), other builds fail or compile a replicated scan (benchmarks/triton_compile_check.py flags one). The draws'
#: cumulative spacings are scanned over NU_BLOCK, and the layouts chosen for them hold up to 4 elements per thread
#: along it; 16 keeps every scan whole. The draws do not depend on NU_BLOCK (Philox counters by draw index): for nu
#: below 16 the extra columns are masked, at the cost of 16 uniforms per row and key block.
MIN_NU_BLOCK = 16
#: Up to this many keys a row's keys fit one tile: one pass (scores computed once, pass 1 not launched).
ONE_PASS_MAX_KEYS = 64
#: GPU configurations the autotuner times (``triton.autotune``), per kernel: (BLOCK_M, BLOCK_N, warps, stages) for
#: pass 1, (BLOCK_M, BLOCK_N, NU_BLOCK, warps, search) for pass 2 (BLOCK_N None: the one-pass kernel, whose key tile
#: is the row). With the compare tile (search False) BLOCK_M x NU_BLOCK x BLOCK_N is kept <= 32k elements (each
#: configuration's registers and spills for sm_90: benchmarks/triton_compile_check.py --configs, docs/gpu.md).
#: The 2-warp configurations (since 2026-12-04; the H200 then chose them for pass 2 in 18 of 24 kernel-table cells,
#: 2-22 % faster at nu 1-16, docs/gpu.md): on the H200 pass 2 had run faster with fewer warps (bf16,
#: E 64, nu 1, 1,024 keys: the 32 x 32 compare tile 3.17 ms with 4 warps, 5.89 with 8), and pass 2 is the whole cost
#: there (its best, 1.31 ms; pass 1 0.047 ms, SDPA 0.047 ms); the race's times were flat in warps (0.38-0.42 ms at 4
#: and 8), its 2-warp tiles are timed too. Of those compiled for sm_90, the ones with little or no spill at bf16 E 80
#: and fp32 E 64 are kept (0-88 B, triton_compile_check.py); left out: both one-pass tiles (the 16-row compare tile
#: 3,760 B at bf16, the 32-row search tile 1,240 B at fp32, TimesFM 2.5's dtype) and a 32 x 32 search tile (1,248 B).
#: 1-warp tiles (since the second 2026-12-04 run, not yet timed: fewer warps had been faster at each step, 8 > 4 > 2):
#: compiled for sm_90 at nu 1, 16 and 512, kept where they spill <= 24 B at bf16 E 80 and fp32 E 64: pass 2's 16 x 16
#: search tile (0 / 24 B), the race's 16 x 16 and 32 x 16 (0 / 0 and 0 / 16 B); left out: 16 x 32 with searches (296 /
#: 1,848 B) or the compare tile (416 / 1,240 B), 16 x 64 with searches (1,248 / 2,544 B).
STATS_CONFIGS = ((32, 32, 4, 2), (64, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 3))
SAMPLE_CONFIGS = ((16, 32, 16, 4, False), (16, 64, 16, 4, False), (32, 32, 16, 4, False), (32, 32, 16, 8, False),
                  (64, 32, 16, 8, False), (32, 32, 32, 4, True), (64, 32, 32, 8, True), (32, 64, 32, 4, True),
                  (64, 64, 64, 8, True), (16, 32, 16, 2, False), (16, 32, 32, 2, True),
                  (16, 16, 16, 1, True))  # fmt: skip
ONE_PASS_CONFIGS = ((16, None, 16, 4, False), (32, None, 16, 8, False), (32, None, 32, 4, True),
                    (64, None, 32, 8, True))  # fmt: skip
_MAX_PLACE_TILE = 32768
#: The race sampler (``sampler="race"``) draws nu exponentials per key: for small nu only.
RACE_MAX_NU = 16
#: ``sampler="auto"`` takes the race where an H200 timed it faster than the two-pass kernel with its 2-warp tiles
#: (docs/gpu.md, the second 2026-12-04 run; bf16, head dim 64 and 80, autotuned, race time / two-pass time): an int
#: nu = 1 at any length (0.34-0.58x at 1k-16k keys), or nu <= AUTO_RACE_MAX_NU drawing nu * S <= AUTO_RACE_MAX_DRAWS
#: per row (nu 4: 0.82-0.86x at 1k keys, 1.11-1.18x at 4k, 1.44-1.59x at 16k; nu 16: 3.1-4.9x). nu 2-3 were not
#: timed: they take the race up to 2k and 1.3k keys, between the two timed nu.
AUTO_RACE_MAX_NU = 4
AUTO_RACE_MAX_DRAWS = 4096
#: The sampler of calls that name none (the SDPA path's): "auto". Since the second 2026-12-04 H200 run every law case
#: of the race in tests/test_triton_sa_cuda.py has passed on the device (fp32, bf16, fp16; boolean, additive,
#: one-pass and causal masks), as the two-pass kernel's had.
DEFAULT_SAMPLER = "auto"
#: (BLOCK_M, BLOCK_N, warps) the autotuner times for the race, pruned to at most 32 elements of the (BLOCK_M, NU_BLOCK,
#: BLOCK_N) tile per thread (sm_90, bf16, head dim 80, 32 x 32 tiles in 8 warps: 117 registers and no spill at nu
#: 1, 175 at nu 4; at nu 16 that tile spills 416 B).
RACE_CONFIGS = ((16, 16, 4), (16, 32, 4), (32, 16, 4), (32, 32, 4), (32, 64, 4), (64, 32, 8), (64, 64, 8),
                (128, 32, 8), (16, 32, 2), (32, 16, 2), (16, 16, 1), (32, 16, 1))  # fmt: skip


#: The groups sampler (``sampler="groups"``): nu at most this in every head (one chunk of sorted points per row).
GROUPS_MAX_NU = 64
#: Its group of keys: at least this many keys, and enough that a row has at most :data:`GROUPS_MAX_GROUPS` groups,
#: so pass 1's group masses take (B H L, <= 128) floats, linear in the sequence (up to 4k keys groups of 32; 16k
#: keys: of 128, 8.4 MB a head of 16k rows).
GROUP_MIN_KEYS = 32
GROUPS_MAX_GROUPS = 128
#: (BLOCK_M, BLOCK_N, warps, stages) of the groups sampler's pass 1 (BLOCK_N at most the group; others pruned) and
#: (rows per program, keys per chunk, warps) of its pass 2 (each row reads the groups holding its points, q . k on
#: the CUDA cores a chunk of keys and 16 head-dim columns at a time; chunks at most the group, others pruned). Not yet
#: timed: those of the configurations compiled for sm_90 (bf16 head dim 80, fp32 head dim 64; groups of 32 and 128
#: keys; nu 1 and 16) that spill nothing, or 72 B once (8 x 16, 4 warps); at nu 64 all but 2 x 32 in 2 warps and
#: 4 x 32 in 4 warps spill 576-608 B. Left out: 16 x 16 in 4 warps, 4 x 16 in 1, 8 x 16 in 2 (120-256 B at nu <= 16).
GROUP_MASS_CONFIGS = ((32, 32, 4, 2), (64, 32, 4, 2), (64, 64, 4, 2), (128, 64, 8, 3), (32, 32, 2, 2))
GROUPS_CONFIGS = ((2, 32, 1), (2, 32, 2), (4, 32, 2), (4, 32, 4), (8, 16, 4), (8, 32, 4), (16, 32, 8))


def group_keys(S: int, interpreting: bool = False) -> int:
    """Keys per group of the groups sampler for rows of S keys: a power of two, at least :data:`GROUP_MIN_KEYS`
    (16 in the interpreter, whose small test rows then span several groups), at most
    :data:`GROUPS_MAX_GROUPS` groups per row."""
    least = 16 if interpreting else GROUP_MIN_KEYS
    return max(least, _next_power_of_2(-(-S // GROUPS_MAX_GROUPS)))


def draw_tile(nu_block: int, nu_max: int) -> int:
    """Draws placed at a time: ``nu_block`` at most the next power of two of ``nu_max``, at least
    :data:`MIN_NU_BLOCK`."""
    return max(MIN_NU_BLOCK, min(nu_block, _next_power_of_2(nu_max)))


def _blocks(interpreting: bool, nu_max: int, S: int, tiles: Optional[dict] = None) -> Optional[dict]:
    """Fixed tiles {BLOCK_M, BLOCK_N, NU_BLOCK, stats_warps, sample_warps, one_pass} for this call, or None on the
    GPU without ``tiles`` (the autotuner chooses). ``tiles`` (benchmarks, tests) overrides; NU_BLOCK comes from
    :func:`draw_tile`, and BLOCK_N of a one-pass call covers S. In the interpreter, whose cost is per operation: 128
    rows x 16 keys x 32 draws, few programs, and short key blocks keep small test rows on several blocks (the carried
    sum is exercised); one pass only where S <= 16."""
    if tiles is None and not interpreting:
        return None
    base = {"BLOCK_M": 128, "BLOCK_N": 16, "NU_BLOCK": 32, "stats_warps": 4, "sample_warps": 4,
            "one_pass": S <= 16, "search": False} if tiles is None else {**LEGACY_TILES, **tiles}  # fmt: skip
    _check_tiles(base)
    base["NU_BLOCK"] = draw_tile(base["NU_BLOCK"], nu_max)
    if base["one_pass"]:
        if S > 2 * ONE_PASS_MAX_KEYS:
            raise ValueError(f"one pass holds a row's keys in one tile: at most {2 * ONE_PASS_MAX_KEYS}, got S={S}")
        base["BLOCK_N"] = max(16, _next_power_of_2(S))
    return base


def _check_tiles(tiles: dict, extra: tuple = ()) -> None:
    """Refuse tile settings other than :data:`LEGACY_TILES`' keys (and a sampler's ``extra`` ones)."""
    known = {*LEGACY_TILES, *extra}
    if set(tiles) - known:
        raise ValueError(f"unknown tile settings {sorted(set(tiles) - known)}; known: {sorted(known)}")


def _tuned(kernels):
    """The autotuned launchers (pass 1, pass 2, one-pass pass 2, race, the groups sampler's two passes) around the
    kernels, made once."""
    global _TUNED
    if _TUNED is None:
        with requires("triton"):
            import triton
            import triton.testing

        def prune_sample(configs, named_args, **kwargs):
            """NU_BLOCK by :func:`draw_tile`; the placing tile within registers; no repeats."""
            keep, seen = [], set()
            for c in configs:
                kw = {**c.kwargs, "NU_BLOCK": draw_tile(c.kwargs["NU_BLOCK"], named_args["nu_max"])}
                n = kw.get("BLOCK_N", kwargs.get("BLOCK_N", 64))
                sig = (tuple(sorted(kw.items())), c.num_warps)
                fits = kw["SEARCH"] or kw["BLOCK_M"] * kw["NU_BLOCK"] * n <= _MAX_PLACE_TILE
                if fits and sig not in seen:
                    seen.add(sig)
                    keep.append(triton.Config(kw, num_warps=c.num_warps, num_stages=c.num_stages))
            return keep or [configs[0]]

        def config(m, n, nu_block, warps, stages=2, search=None):
            kw = {"BLOCK_M": m} if n is None else {"BLOCK_M": m, "BLOCK_N": n}
            if nu_block is not None:
                kw.update(NU_BLOCK=nu_block, SEARCH=search)
            return triton.Config(kw, num_warps=warps, num_stages=stages)

        keys = ["E", "MASK_KIND", "IS_CAUSAL", "tune_key"]
        def timed(kernel_call, quantiles):  # 5 ms warm-up, 20 ms of repeats per configuration (Triton's: 25 / 100)
            return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)

        tuning = {"do_bench": timed}
        stats = triton.autotune([config(m, n, None, w, st) for m, n, w, st in STATS_CONFIGS], key=keys, **tuning)(
            kernels._stats_kernel)
        prune = {"early_config_prune": prune_sample}
        sample = triton.autotune([config(m, n, nb, w, search=se) for m, n, nb, w, se in SAMPLE_CONFIGS],
                                 key=[*keys, "EV"], prune_configs_by=prune, **tuning)(kernels._sample_kernel)
        one_pass = triton.autotune([config(m, n, nb, w, search=se) for m, n, nb, w, se in ONE_PASS_CONFIGS],
                                   key=[*keys, "EV"], prune_configs_by=prune, **tuning)(kernels._sample_kernel)

        def prune_race(configs, named_args, **kwargs):
            """The race's (BLOCK_M, NU_BLOCK, BLOCK_N) tile within registers: <= 32 elements per thread."""
            size = {c: c.kwargs["BLOCK_M"] * kwargs["NU_BLOCK"] * c.kwargs["BLOCK_N"] for c in configs}
            fits = [c for c in configs if size[c] <= 32 * 32 * c.num_warps]
            return fits or [min(configs, key=size.get)]

        race = triton.autotune([config(m, n, None, w) for m, n, w in RACE_CONFIGS], key=[*keys, "EV"],
                               prune_configs_by={"early_config_prune": prune_race}, **tuning)(kernels._race_kernel)

        def prune_group_mass(configs, named_args, **kwargs):
            """Pass 1 of the groups sampler: key tiles within a group."""
            fits = [c for c in configs if c.kwargs["BLOCK_N"] <= kwargs["GROUP"]]
            return fits or [configs[0]]

        group_mass = triton.autotune([config(m, n, None, w, st) for m, n, w, st in GROUP_MASS_CONFIGS], key=keys,
                                     prune_configs_by={"early_config_prune": prune_group_mass}, **tuning)(
            kernels._group_mass_kernel)

        def prune_groups(configs, named_args, **kwargs):
            """Pass 2 of the groups sampler: chunks within a group."""
            fits = [c for c in configs if c.kwargs["CHUNK"] <= kwargs["GROUP"]]
            return fits or [configs[0]]

        groups = triton.autotune([triton.Config({"BLOCK_M": m, "CHUNK": n}, num_warps=w) for m, n, w in GROUPS_CONFIGS],
                                 key=[*keys, "EV"], prune_configs_by={"early_config_prune": prune_groups}, **tuning)(
            kernels._groups_kernel)
        _TUNED = (stats, sample, one_pass, race, group_mass, groups)
    return _TUNED


_TUNED = None


class _Launcher:
    """An autotuned kernel launched straight through its JIT function once the autotuner has chosen a configuration
    for ``key`` (a tuple at least as fine as the autotuner's own key: its key arguments and the tensors' dtypes).
    Triton's ``Autotuner.run`` rebuilds its key from every argument at each call, ~70 us of host time per call on
    the H200's host (cProfile, docs/gpu.md): a fifth of SA's host time per attention call in TimesFM 2.5."""

    def __init__(self, tuner):
        self.tuner, self.chosen = tuner, {}

    def __call__(self, key: tuple, grid, args: tuple, kwargs: dict) -> None:
        config = self.chosen.get(key)
        if config is None:  # the autotuner times its configurations (or finds them timed) and launches
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("the fused SA kernel has not been tuned for this shape yet, and tuning cannot run "
                                   "inside a CUDA graph capture: run the forward once before capturing it")  # fmt: skip
            self.tuner[grid](*args, **kwargs)
            self.chosen[key] = self.tuner.best_config
            return
        self.tuner.best_config = config  # as the autotuner's own launch would (benchmarks read it)
        self.tuner.fn[grid](*args, **kwargs, **config.all_kwargs())


def _launchers(kernels) -> tuple[_Launcher, ...]:
    """:class:`_Launcher` around each of :func:`_tuned`'s autotuners (pass 1, pass 2, one-pass pass 2, race, the
    groups sampler's two passes)."""
    global _LAUNCHERS
    if _LAUNCHERS is None or _LAUNCHERS[0].tuner is not _tuned(kernels)[0]:
        _LAUNCHERS = tuple(_Launcher(t) for t in _tuned(kernels))
    return _LAUNCHERS


_LAUNCHERS = None


def _launch_key(q: Tensor, mask: Tensor, Ev: int, kind: int, is_causal: bool, tune_key: int) -> tuple:
    """A :class:`_Launcher` key: the autotuners' key arguments (head dims, mask kind, causal flag, size bucket) and
    the dtypes of the tensors whose dtype varies (q, k, v and the output share q's; the mask's own)."""
    return q.shape[-1], Ev, kind, bool(is_causal), tune_key, q.dtype, mask.dtype


def _log2_bucket(n: int) -> int:
    return max(0, (int(n) - 1).bit_length())


def _tune_key(L: int, S: int, nu_max: int) -> int:
    """The autotuner's size key: log2 buckets of L, S and nu_max (nu_max above 64 in two buckets, up to 512 and
    beyond), so that a model's shapes are timed once each, not once per length or per nu."""
    nu_bucket = _log2_bucket(nu_max) if nu_max <= 64 else (9 if nu_max <= 512 else 12)
    return (_log2_bucket(L) * 64 + _log2_bucket(S)) * 64 + nu_bucket


#: The fp32 scores' product (q k^T) where the GPU has TF32 tensor cores (CUDA, compute capability >= 8.0):
#: "tf32x3", three TF32 products on the tensor cores (each operand split into a TF32 head and a TF32 remainder, the
#: remainders' product dropped: ~2^-22 relative error, fp32's own rounding is 2^-24), the arithmetic torch's
#: memory-efficient SDPA uses for fp32 there (CUTLASS's OpMultiplyAddFastF32). "ieee" (FFMA on the CUDA cores)
#: elsewhere, and always for the weights' product with V, so fp32 counts stay exact (nu = 1: rows of V).
#: On an H200 (2026-12-04, ClimaX, fp32, head dim 64, 1,024 keys, nu 16) it cut pass 1 from 138 to < 87 us and pass 2
#: from 324 to 253 us per call (the model's device time 1.18x -> 1.07x the deterministic pass).
FP32_SCORES_PRECISION = "tf32x3"
#: The race sampler's fp32 scores: "ieee". The same run timed its kernel at 1,028 us per call with "tf32x3" against
#: 722 us with "ieee" (ClimaX's model 1.52x against 1.34x the deterministic device time; its autotuned tiles are
#: small, 16-32 rows x 16 keys, and the exponentials' work, not the scores', bounds it).
RACE_FP32_SCORES_PRECISION = "ieee"


def scores_precision(dtype: torch.dtype, capability: Optional[tuple[int, int]],
                     fp32: Optional[str] = None) -> str:  # fmt: skip
    """``tl.dot``'s input precision for the scores of ``dtype`` operands on a CUDA GPU of compute ``capability``
    (None: not a CUDA GPU, e.g. ROCm or the interpreter): for fp32, ``fp32`` (default
    :data:`FP32_SCORES_PRECISION`) where TF32 exists, else "ieee". 16-bit operands take the tensor cores as they
    are."""
    if dtype != torch.float32:
        return "tf32"  # not used for bf16 / fp16 operands
    wanted = FP32_SCORES_PRECISION if fp32 is None else fp32
    return wanted if capability is not None and capability >= (8, 0) else "ieee"


def _capability(device: torch.device) -> Optional[tuple[int, int]]:
    """The CUDA compute capability of ``device`` (no synchronisation; read once per GPU); None for CPU and ROCm."""
    if device.type != "cuda" or torch.version.hip:
        return None
    return _capability_of(torch.cuda.current_device() if device.index is None else device.index)


@functools.cache
def _capability_of(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1): Triton tile sizes."""
    return 1 << max(0, (int(n) - 1).bit_length())


def _race(kernels, q, k, v, nu, nu_h, nu_max, nu_min, kind, mask, sm, is_causal, scale, seed, offset, tiles,
          interpreting):  # fmt: skip
    """:func:`sa_attention_fused` with ``sampler="race"``: one launch of ``_race_kernel``."""
    if nu_max > RACE_MAX_NU or nu_min < 1:
        raise ValueError(f"the race sampler takes 1 <= nu <= {RACE_MAX_NU} in every head, got nu={nu!r}")
    B, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    out = _output(B, H, L, Ev, v)
    tune_key = _tune_key(L, S, nu_max)
    args = (q, k, v, mask, nu_h, out, seed, int(offset), nu_max, tune_key, H, L, S, E, Ev,
            scale, *q.stride(), *k.stride(), *v.stride(), *sm, *out.stride())  # fmt: skip
    meta = {"MASK_KIND": kind, "IS_CAUSAL": bool(is_causal), "BLOCK_E": max(16, _next_power_of_2(E)),
            "BLOCK_EV": max(16, _next_power_of_2(Ev)), "NU_BLOCK": _next_power_of_2(nu_max),
            "PRECISION": scores_precision(q.dtype, _capability(q.device), RACE_FP32_SCORES_PRECISION),
            "UPCAST": interpreting}  # fmt: skip
    if tiles is None and not interpreting:
        key = _launch_key(q, mask, Ev, kind, is_causal, tune_key)
        _launchers(kernels)[3](key, lambda launch: (-(-L // launch["BLOCK_M"]), B * H), args, meta)
        return out
    fixed = {"BLOCK_M": 128, "BLOCK_N": 16, "sample_warps": 4} if tiles is None else {**LEGACY_TILES, **tiles}
    _check_tiles(fixed)
    grid = (-(-L // fixed["BLOCK_M"]), B * H)
    kernels._race_kernel[grid](*args, **meta, BLOCK_M=fixed["BLOCK_M"], BLOCK_N=fixed["BLOCK_N"],
                               num_warps=fixed["sample_warps"])  # fmt: skip
    return out


def _check_groups_nu(nu, nu_max: int, nu_min: int) -> None:
    if nu_max > GROUPS_MAX_NU or nu_min < 1:
        raise ValueError(f"the groups sampler takes 1 <= nu <= {GROUPS_MAX_NU} in every head, got nu={nu!r}")


def _groups(kernels, q, k, v, nu, nu_h, nu_max, nu_min, kind, mask, sm, is_causal, scale, seed, offset, tiles,
            interpreting):  # fmt: skip
    """:func:`sa_attention_fused` with ``sampler="groups"``: pass 1 writes each row's log mass per group of keys,
    pass 2 draws the groups, then the keys within the groups that received points."""
    _check_groups_nu(nu, nu_max, nu_min)
    B, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    group = group_keys(S, interpreting)
    n_groups = -(-S // group)
    lse = torch.empty(B * H * L, n_groups, dtype=torch.float32, device=q.device)
    out = _output(B, H, L, Ev, v)
    mass_key, tune_key = _tune_key(L, S, 1), _tune_key(L, S, nu_max)
    block_e = max(16, _next_power_of_2(E))
    mass_args = (q, k, mask, lse, mass_key, H, L, S, E, n_groups, scale, *q.stride(), *k.stride(), *sm)
    draw_args = (q, k, v, mask, lse, nu_h, out, seed, int(offset), nu_max, tune_key, H, L, S, E, Ev, n_groups,
                 scale, *q.stride(), *k.stride(), *v.stride(), *sm, *out.stride())  # fmt: skip
    mass_meta = {"MASK_KIND": kind, "IS_CAUSAL": bool(is_causal), "GROUP": group, "BLOCK_E": block_e,
                 "PRECISION": scores_precision(q.dtype, _capability(q.device)), "UPCAST": interpreting}  # fmt: skip
    draw_meta = {"MASK_KIND": kind, "IS_CAUSAL": bool(is_causal), "GROUP": group,
                 "BLOCK_G": max(16, _next_power_of_2(n_groups)),
                 "NU_BLOCK": max(MIN_NU_BLOCK, _next_power_of_2(nu_max + 1))}  # fmt: skip
    if tiles is None and not interpreting:
        launch = _launchers(kernels)
        launch[4](_launch_key(q, mask, Ev, kind, is_causal, mass_key), lambda c: (-(-L // c["BLOCK_M"]), B * H),
                  mass_args, mass_meta)  # fmt: skip
        launch[5](_launch_key(q, mask, Ev, kind, is_causal, tune_key), lambda c: (-(-L // c["BLOCK_M"]), B * H),
                  draw_args, draw_meta)  # fmt: skip
        return out
    # fixed tiles; in the interpreter, whose cost is per operation, 128 rows a program and two chunks a group
    base = {"BLOCK_M": 128, "BLOCK_N": 16, "stats_warps": 4, "sample_warps": 4, "rows": 128, "chunk": group // 2}
    fixed = {**base, **(tiles or {})} if interpreting else {**LEGACY_TILES, "rows": 4, "chunk": 32, **(tiles or {})}
    _check_tiles(fixed, extra=("rows", "chunk"))
    kernels._group_mass_kernel[(-(-L // fixed["BLOCK_M"]), B * H)](
        *mass_args, **mass_meta, BLOCK_M=fixed["BLOCK_M"], BLOCK_N=min(fixed["BLOCK_N"], group),
        num_warps=fixed["stats_warps"])  # fmt: skip
    kernels._groups_kernel[(-(-L // fixed["rows"]), B * H)](
        *draw_args, **draw_meta, BLOCK_M=fixed["rows"], CHUNK=min(fixed["chunk"], group),
        num_warps=fixed["sample_warps"])  # fmt: skip
    return out


def advance_stream(stream: Tensor) -> Tensor:
    """Take a device stream's next call on the device (one program of ``_advance_stream_kernel``: offset + 1, the
    call seed and the kernels' seed written as :func:`stochattn.attention._call_seed` and ``_call_kernel_seed``
    compute them on the host; :func:`stochattn.attention.device_stream`) and return the kernel seed's one-element
    view, for ``seed=``. No host
    synchronisation, so CUDA graphs capture it: each replay advances the stream and draws anew."""
    if stream.dtype != torch.int64 or stream.shape != (DEVICE_STREAM_LEN,) or not stream.is_contiguous():
        raise ValueError(f"a device stream is a contiguous int64 tensor of shape ({DEVICE_STREAM_LEN},), got "
                         f"{stream.dtype} {tuple(stream.shape)}")  # fmt: skip
    ok, why = available(stream.device)
    if not ok:
        raise FusedUnavailableError(why)
    _kernels()[0]._advance_stream_kernel[(1,)](stream)
    return stream[3:]


def _seed_operand(seed: Union[int, Tensor], device: torch.device) -> Union[int, Tensor]:
    """The kernels' ``seed`` argument: an int in [0, 2^63), or a one-element int64 tensor on ``device`` (read on the
    device, not checked: it may not be written yet)."""
    if isinstance(seed, Tensor):
        if seed.dtype != torch.int64 or seed.numel() != 1 or seed.device != device:
            raise ValueError(f"a seed tensor must be one int64 on {device}, got {seed.dtype} "
                             f"{tuple(seed.shape)} on {seed.device}")  # fmt: skip
        return seed
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be in [0, 2^63), got {seed}")
    return int(seed)


def sa_attention_fused(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    nu: Union[int, Tensor],
    *,
    attn_mask: Optional[Tensor] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    seed: Union[int, Tensor],
    offset: int = 0,
    tiles: Optional[dict] = None,
    sampler: Optional[str] = None,
) -> Tensor:
    """Stochastic attention output (B, H, L, Ev) in ``v``'s dtype, exact in law, streamed over key blocks.

    q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev): fp32, bf16 or fp16 (accumulation in fp32; fp32 scores in 3xTF32
    where the GPU has TF32, :data:`FP32_SCORES_PRECISION`), CUDA tensors (CPU tensors under TRITON_INTERPRET=1).
    nu: a positive int, or an integer tensor of H values (per head; 0 keeps that head deterministic). attn_mask:
    boolean (True = attend) or additive float, broadcastable to (B, H, L, S);
    is_causal: top-left aligned lower-triangular mask (not with attn_mask), as ``F.scaled_dot_product_attention``.
    A row with no attendable key returns zeros. seed (0 <= seed < 2^63, or a one-element int64 tensor on q's device
    holding it, read by the kernels: :func:`advance_stream`'s, so that a captured CUDA graph draws afresh at every
    replay) and offset (>= 0): row r = (b H + h) L + i
    uses the Philox counters ``offset + r * (max(nu) + 1) + t``, t = 0..nu, so the same (seed, offset) reproduces the
    output and calls sharing a seed are independent when their counter ranges do not overlap (the draws do not depend
    on the tiles). On the GPU the tiles are chosen by ``triton.autotune`` (timed at the first call of each head dim,
    mask kind and log2 size bucket); ``tiles`` fixes them instead (benchmarks, tests): a dict of
    :data:`LEGACY_TILES`' keys. Rows of at most :data:`ONE_PASS_MAX_KEYS` keys take one pass.

    ``sampler``: ``"cdf"`` (the row's sorted uniforms placed in its cumulative sums, two passes; any nu),
    ``"race"`` (one pass, an exponential race per draw, no normaliser: O(nu S) random numbers per row; nu at most
    :data:`RACE_MAX_NU` and >= 1 in every head; the Philox counter ``offset + (r nu_max + d) ceil(S / 4) + g``
    serves draw d at keys 4 g .. 4 g + 3), ``"groups"`` (two passes: pass 1 stores each row's mass per group of
    :func:`group_keys` keys; pass 2 places the row's sorted points, those of "cdf", first in the groups' cumulative
    masses, then within the groups that received them, recomputing only those groups' scores: the key work of pass
    2 grows with the groups drawn, not with S; nu at most :data:`GROUPS_MAX_NU` and >= 1 in every head; rows that fit
    one tile, S <= :data:`ONE_PASS_MAX_KEYS` (without ``tiles``), take the one-pass kernel, which places the same
    points on the same keys in one launch; not yet timed on a GPU, so "auto" does not take it), ``"auto"`` (the race
    for an int nu = 1, or nu <= :data:`AUTO_RACE_MAX_NU`
    with nu S <= :data:`AUTO_RACE_MAX_DRAWS`, where it was timed faster; else cdf) or None
    (:data:`DEFAULT_SAMPLER`, "auto", what the SDPA path takes). The same law; different draws for the same seed."""
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
    seed = _seed_operand(seed, q.device)
    if int(offset) < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    sampler = DEFAULT_SAMPLER if sampler is None else sampler
    if sampler not in ("cdf", "race", "groups", "auto"):
        raise ValueError(f"sampler must be 'cdf', 'race', 'groups' or 'auto', got {sampler!r}")
    if sampler == "auto":
        race = isinstance(nu, int) and (nu == 1 or 1 <= nu <= AUTO_RACE_MAX_NU and nu * S <= AUTO_RACE_MAX_DRAWS)
        sampler = "race" if race else "cdf"
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    nu_h, nu_max, nu_min = _nu_per_head(nu, H, q.device)
    kind, mask, sm = _mask_operand(attn_mask, (B, H, L, S), q)
    interpreting = _interpreting(kernels)
    if sampler == "groups" and tiles is None and S <= (16 if interpreting else ONE_PASS_MAX_KEYS):
        _check_groups_nu(nu, nu_max, nu_min)
        sampler = "cdf"  # a row's keys fit one tile: the one-pass kernel places the same points on the same keys
    if sampler in ("race", "groups"):
        run = _race if sampler == "race" else _groups
        return run(kernels, q, k, v, nu, nu_h, nu_max, nu_min, kind, mask, sm, is_causal, scale, seed, offset, tiles,
                   interpreting)  # fmt: skip
    fixed = _blocks(interpreting, nu_max, S, tiles)
    one_pass = fixed["one_pass"] if fixed is not None else S <= ONE_PASS_MAX_KEYS
    meta = {"MASK_KIND": kind, "IS_CAUSAL": bool(is_causal), "BLOCK_E": max(16, _next_power_of_2(E)),
            "PRECISION": scores_precision(q.dtype, _capability(q.device)), "UPCAST": interpreting}  # fmt: skip
    sample_meta = {"BLOCK_EV": max(16, _next_power_of_2(Ev)), "ONE_PASS": one_pass,
                   "WEIGHTS_IN_V_DTYPE": v.dtype != torch.float32 and nu_max <= _EXACT_COUNT[v.dtype]
                   and not interpreting}  # fmt: skip
    row_m = row_z = torch.empty(0 if one_pass else B * H * L, dtype=torch.float32, device=q.device)
    if not one_pass:
        row_z = torch.empty_like(row_m)
    out = _output(B, H, L, Ev, v)
    stats_key, tune_key = _tune_key(L, S, 1), _tune_key(L, S, nu_max)
    stats_args = (q, k, mask, row_m, row_z, stats_key, H, L, S, E, scale, *q.stride(), *k.stride(), *sm)
    sample_args = (q, k, v, mask, row_m, row_z, nu_h, out, seed, int(offset), nu_max, tune_key,
                   H, L, S, E, Ev, scale, *q.stride(), *k.stride(), *v.stride(), *sm, *out.stride())  # fmt: skip
    if fixed is not None:
        grid = (-(-L // fixed["BLOCK_M"]), B * H)
        blocks = {"BLOCK_M": fixed["BLOCK_M"], "BLOCK_N": fixed["BLOCK_N"]}
        if not one_pass:
            kernels._stats_kernel[grid](*stats_args, **meta, **blocks, num_warps=fixed["stats_warps"])
        kernels._sample_kernel[grid](*sample_args, **meta, **sample_meta, **blocks, NU_BLOCK=fixed["NU_BLOCK"],
                                     SEARCH=fixed["search"], num_warps=fixed["sample_warps"])  # fmt: skip
        return out

    def grid(launch):
        return (-(-L // launch["BLOCK_M"]), B * H)

    stats, sample, single = _launchers(kernels)[:3]
    key = _launch_key(q, mask, Ev, kind, is_causal, tune_key)
    if one_pass:
        single(key, grid, sample_args, {**meta, **sample_meta, "BLOCK_N": max(16, _next_power_of_2(S))})
    else:
        stats(_launch_key(q, mask, Ev, kind, is_causal, stats_key), grid, stats_args, meta)
        sample(key, grid, sample_args, {**meta, **sample_meta})
    return out


def _output(B: int, H: int, L: int, Ev: int, v: Tensor) -> Tensor:
    """The output (B, H, L, Ev), laid out as (B, L, H, Ev) in memory, as torch's fused SDPA lays out its own: the
    caller's usual ``out.transpose(1, 2).reshape(B, L, H * Ev)`` is then a view, not a copy (one kernel and ~25 us
    of host time per call in TimesFM 2.5, docs/gpu.md). The kernels write through its strides."""
    return torch.empty(B, L, H, Ev, dtype=v.dtype, device=v.device).transpose(1, 2)
