"""Triton kernels of fused stochastic attention (imported by :mod:`stochattn.triton_sa` only; needs triton).

Every program handles BLOCK_M query rows of one (batch, head) and streams the key blocks, as FlashAttention does;
nothing of size L x S is stored. Row statistics (max ``m``, normaliser ``Z``) live in (B*H*L,) fp32 buffers.

* :func:`_stats_kernel` (pass 1): online softmax, ``m = max_j s_j`` and ``Z = sum_j exp(s_j - m)`` per row.
* :func:`_sample_kernel` (pass 2): re-streams the key blocks with ``e_j = exp(s_j - m)`` (unnormalised), carries
  the row's cumulative sum across blocks, and walks the row's ``nu`` draws in increasing order: the sorted uniforms
  ``x_k = Z (E_0 + ... + E_k) / (E_0 + ... + E_nu)`` (``E_t = -log u_t`` i.i.d. standard exponentials from
  ``tl.rand``; normalised exponential spacings are the order statistics of ``nu`` i.i.d. U[0, 1), Renyi). A key
  block takes the row's next points below its top, NU_BLOCK at a time, each to the key whose interval
  ``[C_{j-1}, C_j)`` holds it: the counts of ``nu`` i.i.d. uniforms in a partition into intervals of lengths
  ``p_j`` are exactly ``Multinomial(nu, p)``. Each point is generated and placed once (plus at most NU_BLOCK
  re-generated per key block), so the sampling costs O(nu BLOCK_N + S NU_BLOCK) per row instead of the O(nu S) of
  comparing every draw with every key (SEARCH: binary searches, O(nu log BLOCK_N + S log NU_BLOCK)). The counts
  (BLOCK_M, BLOCK_N) multiply the value block on the tensor cores (``tl.dot``), as P V does in fused attention. A
  head with ``nu = 0`` is deterministic (weights ``e_j / Z``), the convention of :mod:`stochattn.attention`. With
  ONE_PASS (a row's keys fit one tile) it is the only pass: m and Z come from the same scores.

* :func:`_race_kernel` (``sampler="race"``, one pass for small nu): each of a row's nu draws is an exponential race
  over the keys (the key of least ``log E_dj - s_j`` wins, with probability ``softmax(s)_j``): no max, no
  normaliser, no cumulative sum, O(nu S) random numbers per row; the winners' value rows averaged.

* :func:`_group_mass_kernel` and :func:`_groups_kernel` (``sampler="groups"``): pass 1 stores each row's log mass
  per group of keys; pass 2 places the row's sorted points (those of the two-pass kernel) in the groups' cumulative
  masses, then recomputes the scores of only the groups that received points and places their points within them.

UPCAST (the interpreter): 16-bit operands are converted to fp32 before every ``tl.dot``; Triton 3.9's interpreter
returns wrong products for bf16 operands.

``seed`` is the call's seed itself (an int) or a pointer to it (an int64 in device memory, which
:func:`_advance_stream_kernel` writes: a captured CUDA graph then draws fresh weights at every replay).

Spacing ``t`` (0 <= t <= nu) of row ``r`` (r = (b H + h) L + i) uses the Philox counter
``offset + r * (nu_max + 1) + t``; the race's exponentials of draw ``d`` at keys ``4 g .. 4 g + 3``, the four words
of ``offset + (r nu_max + d) ceil(S / 4) + g``.
"""

from __future__ import annotations

from stochattn.extras import requires

with requires("triton"):
    import triton
    import triton.language as tl


@triton.jit
def _block_scores(q, K, Mask, offs_m, n0, L, S, E, scale, stride_kn, stride_ke, stride_ml, stride_ms,
                  MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr,
                  PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """Scaled logits (BLOCK_M, BLOCK_N) fp32 of keys n0..n0+BLOCK_N, -inf where masked or out of range, and the
    key indices (BLOCK_N,). MASK_KIND: 0 none, 1 boolean (int8, nonzero = keep), 2 additive (fp32)."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    kt = tl.load(K + offs_n[None, :] * stride_kn + offs_e[:, None] * stride_ke,
                 mask=(offs_n[None, :] < S) & (offs_e[:, None] < E), other=0.0)  # fmt: skip
    if UPCAST:
        s = tl.dot(q.to(tl.float32), kt.to(tl.float32), input_precision="ieee") * scale
    else:
        s = tl.dot(q, kt, input_precision=PRECISION) * scale
    keep = (offs_n[None, :] < S) & (offs_m[:, None] >= 0)
    if IS_CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None])
    if MASK_KIND != 0:
        in_range = (offs_m[:, None] < L) & (offs_n[None, :] < S)
        mv = tl.load(Mask + offs_m[:, None] * stride_ml + offs_n[None, :] * stride_ms, mask=in_range, other=0)
        if MASK_KIND == 1:
            keep = keep & (mv != 0)
        else:
            s = s + mv
    return tl.where(keep, s, float("-inf")), offs_n


@triton.jit
def _key_end(pid_m, S, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr):
    """One past the last key a row of this program may attend (causal: the diagonal of its last row)."""
    if IS_CAUSAL:
        return tl.minimum(S, (pid_m + 1) * BLOCK_M)
    return S


@triton.jit
def _load_q(Q, offs_m, L, E, stride_ql, stride_qe, BLOCK_E: tl.constexpr):
    offs_e = tl.arange(0, BLOCK_E)
    return tl.load(Q + offs_m[:, None] * stride_ql + offs_e[None, :] * stride_qe,
                   mask=(offs_m[:, None] < L) & (offs_e[None, :] < E), other=0.0)  # fmt: skip


@triton.jit
def _program_rows(Q, K, V, Mask, Nu, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sv_b, sv_h, sm_b, sm_h,
                  BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):  # fmt: skip
    """This program's share of the work: (pid_m, b, h, its query rows offs_m (BLOCK_M,), their global indices
    rows = (b H + h) L + offs_m (int64), q (BLOCK_M, BLOCK_E), K, V and Mask at its (batch, head), the head's nu)."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = pid_bh.to(tl.int64) * L + offs_m
    q = _load_q(Q + b * sq_b + h * sq_h, offs_m, L, E, sq_l, sq_e, BLOCK_E)
    return (
        pid_m,
        b,
        h,
        offs_m,
        rows,
        q,
        K + b * sk_b + h * sk_h,
        V + b * sv_b + h * sv_h,
        Mask + b * sm_b + h * sm_h,
        tl.load(Nu + h),
    )


@triton.jit
def _stats_rows(Q, K, Mask, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sm_b, sm_h, BLOCK_M: tl.constexpr,
                BLOCK_E: tl.constexpr):  # fmt: skip
    """A statistics pass's share of the work: (pid_m, its query rows offs_m (BLOCK_M,), their global indices rows
    (int64), q (BLOCK_M, BLOCK_E), K and Mask at its (batch, head))."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = _load_q(Q + b * sq_b + h * sq_h, offs_m, L, E, sq_l, sq_e, BLOCK_E)
    return pid_m, offs_m, pid_bh.to(tl.int64) * L + offs_m, q, K + b * sk_b + h * sk_h, Mask + b * sm_b + h * sm_h


@triton.jit
def _online_softmax(q, K, Mask, offs_m, n_start, n_end, L, S, E, scale, sk_s, sk_e, sm_l, sm_s,
                    MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_E: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """(m, z) (BLOCK_M,) over the keys n_start..n_end (BLOCK_N at a time): the rows' largest score m and
    z = sum exp(s - m) (m = -inf, z = 0 where no key may be attended)."""
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    z = tl.zeros((BLOCK_M,), tl.float32)
    for n0 in range(n_start, n_end, BLOCK_N):
        s, _ = _block_scores(q, K, Mask, offs_m, n0, L, S, E, scale, sk_s, sk_e, sm_l, sm_s,
                             MASK_KIND, IS_CAUSAL, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        z = z * tl.exp(m - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), 1)
        m = m_new
    return m, z


@triton.jit(do_not_specialize=["tune_key"])
def _stats_kernel(Q, K, Mask, M_out, Z_out, tune_key, H, L, S, E, scale,
                  sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sm_b, sm_h, sm_l, sm_s,
                  MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_E: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """Pass 1: per-row max m and normaliser Z = sum exp(s - m) (Z = 0, m = -inf for a fully masked row).
    ``tune_key`` is not used by the kernel: the autotuner's key."""
    pid_m, offs_m, rows, q, K, Mask = _stats_rows(Q, K, Mask, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sm_b,
                                                  sm_h, BLOCK_M, BLOCK_E)  # fmt: skip
    m, z = _online_softmax(q, K, Mask, offs_m, 0, _key_end(pid_m, S, IS_CAUSAL, BLOCK_M), L, S, E, scale, sk_s, sk_e,
                           sm_l, sm_s, MASK_KIND, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
    tl.store(M_out + rows, m, mask=offs_m < L)
    tl.store(Z_out + rows, z, mask=offs_m < L)


@triton.jit
def _seed_value(seed):
    """The call's seed: ``seed`` itself, or the int64 it points to (a device stream's kernel seed)."""
    if seed.dtype.is_ptr():
        value = tl.load(seed)
    else:
        value = seed
    return value


@triton.jit
def _mix(seed, offset):
    """splitmix64 of ``seed + (offset + 1) * golden``, shifted to 63 bits (uint64 in, int64 out):
    :func:`stochattn.attention._mix` on the device, bit for bit."""
    z = tl.cast(seed, tl.uint64) + (tl.cast(offset, tl.uint64) + 1) * 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return ((z ^ (z >> 31)) >> 1).to(tl.int64)


@triton.jit
def _advance_stream_kernel(Stream):
    """One program: a device stream ``[seed, offset, call seed, kernel seed]`` (int64) takes its next call, as
    :func:`stochattn.attention._call_seed` and ``_call_kernel_seed`` do on the host: call seed ``_mix(seed, offset)``,
    kernel seed ``_mix(call seed, 0)``, offset + 1."""
    seed = tl.load(Stream)
    offset = tl.load(Stream + 1)
    call = _mix(seed, offset)
    tl.store(Stream + 2, call)
    tl.store(Stream + 3, _mix(call, 0))
    tl.store(Stream + 1, offset + 1)


@triton.jit
def _spacings(seed, offset, rows, t, nu_max):
    """Standard exponentials E_t = -log u_t (BLOCK_M, T) of each row's draws t (Philox counters
    ``offset + r * (nu_max + 1) + t``); u is floored at 1e-30 so that a zero uniform gives a finite spacing."""
    u = tl.rand(seed, offset + rows[:, None] * (nu_max + 1) + t)
    return -tl.log(tl.maximum(u, 1e-30))


@triton.jit
def _spacing_total(seed, offset, rows, nu_max, nu, NU_BLOCK: tl.constexpr):
    """(BLOCK_M,) sum of the row's nu + 1 spacings E_0..E_nu: the normaliser of its sorted uniforms."""
    total = tl.zeros(rows.shape, tl.float32)
    for t0 in range(0, nu + 1, NU_BLOCK):
        t = t0 + tl.arange(0, NU_BLOCK)[None, :]
        total += tl.sum(tl.where(t <= nu, _spacings(seed, offset, rows, t, nu_max), 0.0), 1)
    return total


@triton.jit
def _count_below_top(x, hi, positive, top, BLOCK_N: tl.constexpr):
    """Counts (BLOCK_M, BLOCK_N) of the points x (BLOCK_M, T) below ``top`` at the keys they fall on: a point goes to
    the first positive key with hi > x (hi: the running cumulative sum at each key; top (BLOCK_M,): its largest
    value at a positive key of the block), exactly one key per point, never a key with e = 0."""
    j = tl.arange(0, BLOCK_N)
    above = (hi[:, None, :] > x[:, :, None]) & positive[:, None, :]
    first = tl.min(tl.where(above, j[None, None, :], BLOCK_N), 2)
    first = tl.where(x < top[:, None], first, BLOCK_N)
    return tl.sum((first[:, :, None] == j[None, None, :]).to(tl.float32), 1)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _rank(c, x, N: tl.constexpr):
    """#{j : c_ij <= x_ik} (BLOCK_M, T) for rows of points x (BLOCK_M, T) in rows of c (BLOCK_M, N), nondecreasing
    along the row, N a power of two (<= 1024): a branchless binary search, log2(N) + 1 gathers."""
    pos = tl.zeros(x.shape, tl.int32)
    for i in tl.static_range(10):
        if (N >> (i + 1)) > 0:
            step = N >> (i + 1)
            pos = tl.where(tl.gather(c, pos + (step - 1), 1) <= x, pos + step, pos)
    return pos + (tl.gather(c, pos, 1) <= x).to(tl.int32)  # pos <= N - 1 before this check


@triton.jit
def _count_by_search(x, g, BLOCK_N: tl.constexpr, NU_BLOCK: tl.constexpr):
    """The counts of :func:`_count_below_top` by binary searches instead of a (BLOCK_M, NU_BLOCK, BLOCK_N) compare
    tile: g (BLOCK_M, BLOCK_N) is the running maximum of the positive keys' cumulative sums (nondecreasing: ``g_j >
    x`` first at the first positive key whose sum exceeds x), x (BLOCK_M, NU_BLOCK) the sorted points (a point at or
    beyond the block's top has no key here). Point k's key is first_k = #{j : g_j <= x_k} (BLOCK_N: none), found in
    log2(BLOCK_N) + 1 gathers; the keys' cumulative counts C_j = #{k : first_k <= j} in log2(NU_BLOCK) + 1, and the
    count of key j is C_j - C_{j-1}: O(NU_BLOCK log BLOCK_N + BLOCK_N log NU_BLOCK) work per row, not their
    product."""
    first = _rank(g, x, BLOCK_N)
    j = tl.arange(0, BLOCK_N)[None, :] + tl.zeros(g.shape, tl.int32)
    below = _rank(first, j, NU_BLOCK)  # C_j: points whose key is <= j (first is nondecreasing in k: x is sorted)
    before = tl.where(j > 0, tl.gather(below, tl.maximum(j - 1, 0), 1), 0)
    return (below - before).to(tl.float32)


@triton.jit
def _place_block(s, offs_n, V, acc, carry, last, taken, prefix, m, z, nu, to_row, seed, offset, rows, nu_max, S, EV,
                 sv_s, sv_e, BLOCK_N: tl.constexpr, BLOCK_EV: tl.constexpr, NU_BLOCK: tl.constexpr,
                 WEIGHTS_IN_V_DTYPE: tl.constexpr, SEARCH: tl.constexpr):  # fmt: skip
    """One key block of pass 2: the counts (BLOCK_M, BLOCK_N) of the row's sorted points that fall in this block's
    key intervals (carried cumulative sum ``carry``), times the value block, added to ``acc`` (BLOCK_M, BLOCK_EV).
    Returns the updated (acc, carry, last positive key, points taken, prefix sum of the spacings taken). SEARCH:
    points placed by binary searches (:func:`_count_by_search`), else by a compare tile (:func:`_count_below_top`)."""
    offs_ev = tl.arange(0, BLOCK_EV)
    e = tl.exp(s - m[:, None])
    if nu == 0:
        w = e / tl.where(z > 0, z, 1.0)[:, None]
    else:
        positive = e > 0
        hi = carry[:, None] + tl.cumsum(e, 1)
        top = tl.maximum(carry, tl.max(tl.where(positive, hi, 0.0), 1))
        if SEARCH:
            g = tl.associative_scan(tl.where(positive, hi, carry[:, None]), 1, _max_combine)
        w = tl.zeros(s.shape, tl.float32)
        # the rows' next points (as the loop's first round computes them): no round where none is below the top
        spacing = tl.sum(_spacings(seed, offset, rows, taken[:, None], nu_max), 1)
        x_next = tl.where(taken < nu, (prefix + spacing) * to_row, float("inf"))
        more = tl.max((x_next < top).to(tl.int32), 0)
        while more > 0:  # the row's next NU_BLOCK sorted points, until a point of every row reaches the top
            t = taken[:, None] + tl.arange(0, NU_BLOCK)[None, :]
            cum = prefix[:, None] + tl.cumsum(_spacings(seed, offset, rows, t, nu_max), 1)
            x = tl.where(t < nu, cum * to_row[:, None], float("inf"))
            if SEARCH:
                w += _count_by_search(x, g, BLOCK_N, NU_BLOCK)
            else:
                w += _count_below_top(x, hi, positive, top, BLOCK_N)
            took = tl.sum((x < top[:, None]).to(tl.int32), 1)  # sorted: the first `took` points
            prefix = tl.maximum(prefix, tl.max(tl.where(x < top[:, None], cum, 0.0), 1))
            taken += took
            more = tl.max((took == NU_BLOCK).to(tl.int32), 0)
        last = tl.maximum(last, tl.max(tl.where(positive, offs_n[None, :], -1), 1))
        carry = top
    v = tl.load(V + offs_n[:, None] * sv_s + offs_ev[None, :] * sv_e,
                mask=(offs_n[:, None] < S) & (offs_ev[None, :] < EV), other=0.0)  # fmt: skip
    if WEIGHTS_IN_V_DTYPE:
        acc += tl.dot(w.to(v.dtype), v)
    else:
        acc += tl.dot(w, v.to(tl.float32), input_precision="ieee")
    return acc, carry, last, taken, prefix


@triton.jit(do_not_specialize=["seed", "offset", "nu_max", "tune_key"])
def _sample_kernel(Q, K, V, Mask, M_in, Z_in, Nu, Out, seed, offset, nu_max, tune_key, H, L, S, E, EV, scale,
                   sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
                   sm_b, sm_h, sm_l, sm_s, so_b, so_h, so_l, so_e,
                   MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr, NU_BLOCK: tl.constexpr, PRECISION: tl.constexpr,
                   UPCAST: tl.constexpr, WEIGHTS_IN_V_DTYPE: tl.constexpr, ONE_PASS: tl.constexpr,
                   SEARCH: tl.constexpr):  # fmt: skip
    """Pass 2: out = (W / nu) V with W ~ Multinomial(nu_h, softmax row) per row, by placing the row's sorted draws
    in the key intervals of its cumulative sum (carried across blocks). Draws beyond the final cumulative sum (float
    rounding: it may end slightly below Z) go to the row's last positive key. ONE_PASS (every key in one block,
    S <= BLOCK_N): the row statistics come from the block's own scores (pass 1 is not launched, M_in / Z_in are not
    read), and the scores are computed once. ``tune_key`` is not used by the kernel: the autotuner's key."""
    seed = _seed_value(seed)
    pid_m, b, h, offs_m, rows, q, K, V, Mask, nu = _program_rows(
        Q, K, V, Mask, Nu, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sv_b, sv_h, sm_b, sm_h, BLOCK_M, BLOCK_E
    )
    offs_ev = tl.arange(0, BLOCK_EV)
    carry = tl.zeros((BLOCK_M,), tl.float32)
    last = tl.full((BLOCK_M,), -1, tl.int32)
    # the row's sorted points: x_k = Z (E_0 + ... + E_k) / (E_0 + ... + E_nu), k < nu, consumed in order
    taken = tl.zeros((BLOCK_M,), tl.int32)
    prefix = tl.zeros((BLOCK_M,), tl.float32)
    to_row = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_EV), tl.float32)
    if ONE_PASS:
        s, offs_n = _block_scores(q, K, Mask, offs_m, 0, L, S, E, scale, sk_s, sk_e, sm_l, sm_s,
                                  MASK_KIND, IS_CAUSAL, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
        m = tl.max(s, 1)
        m = tl.where(m == float("-inf"), 0.0, m)
        z = tl.sum(tl.exp(s - m[:, None]), 1)
        if nu > 0:
            to_row = z / _spacing_total(seed, offset, rows, nu_max, nu, NU_BLOCK)
        acc, carry, last, taken, prefix = _place_block(
            s, offs_n, V, acc, carry, last, taken, prefix, m, z, nu, to_row, seed, offset, rows, nu_max, S, EV, sv_s,
            sv_e, BLOCK_N, BLOCK_EV, NU_BLOCK, WEIGHTS_IN_V_DTYPE, SEARCH)  # fmt: skip
    else:
        m = tl.load(M_in + rows, mask=offs_m < L, other=float("-inf"))
        z = tl.load(Z_in + rows, mask=offs_m < L, other=0.0)
        m = tl.where(m == float("-inf"), 0.0, m)
        if nu > 0:
            to_row = z / _spacing_total(seed, offset, rows, nu_max, nu, NU_BLOCK)
        for n0 in range(0, _key_end(pid_m, S, IS_CAUSAL, BLOCK_M), BLOCK_N):
            s, offs_n = _block_scores(q, K, Mask, offs_m, n0, L, S, E, scale, sk_s, sk_e, sm_l, sm_s,
                                      MASK_KIND, IS_CAUSAL, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
            acc, carry, last, taken, prefix = _place_block(
                s, offs_n, V, acc, carry, last, taken, prefix, m, z, nu, to_row, seed, offset, rows, nu_max, S, EV,
                sv_s, sv_e, BLOCK_N, BLOCK_EV, NU_BLOCK, WEIGHTS_IN_V_DTYPE, SEARCH)  # fmt: skip
    if nu > 0:  # points beyond the scan's end (float rounding): the row's last positive key
        left = tl.where(last >= 0, nu - taken, 0).to(tl.float32)
        v_last = tl.load(V + tl.maximum(last, 0)[:, None] * sv_s + offs_ev[None, :] * sv_e,
                         mask=(last[:, None] >= 0) & (offs_ev[None, :] < EV), other=0.0)  # fmt: skip
        acc = (acc + left[:, None] * v_last.to(tl.float32)) / nu
    out = Out + b * so_b + h * so_h + offs_m[:, None] * so_l + offs_ev[None, :] * so_e
    tl.store(out, acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))


@triton.jit
def _race_exponentials(bits):
    """Standard exponentials from Philox's uint32 ``bits`` (any shape): E = -log(1 - v) with v = (x + 1/2) 2^-31
    uniform on (0, 1) from 31 random bits, so v is fine near 0, where the race's winners are decided (small E); the
    series of -log(1 - v) to v^8 below 1/16 (relative error < 2^-32), log above; v at most 1 - 2^-24 (E <= 16.6)."""
    r = bits.to(tl.int32, bitcast=True)
    x = tl.where(r < 0, -r - 1, r)  # [0, 2^31)
    v = tl.minimum((x.to(tl.float32) + 0.5) * 4.656612873077393e-10, 0.99999994)
    series = v * (
        1.0 + v * (0.5 + v * (1.0 / 3.0 + v * (0.25 + v * (0.2 + v * (1.0 / 6.0 + v * (1.0 / 7.0 + v * 0.125))))))
    )
    return tl.where(v < 0.0625, series, -tl.log(1.0 - v))


@triton.jit
def _race_part(bits, s, best, win, key0):
    """One quarter of a key block in the race: s (BLOCK_M, G) the scores of keys key0 + 4 c, bits (BLOCK_M,
    NU_BLOCK, G) their draws' random words; the (best, win) per draw updated where a key of this quarter wins."""
    race = tl.log(_race_exponentials(bits)) - s[:, None, :]  # +inf where masked
    part_best = tl.min(race, 2)
    better = part_best < best  # +inf (every key masked) never is
    return tl.where(better, part_best, best), tl.where(better, key0 + 4 * tl.argmin(race, 2), win)


@triton.jit(do_not_specialize=["seed", "offset", "nu_max", "tune_key"])
def _race_kernel(Q, K, V, Mask, Nu, Out, seed, offset, nu_max, tune_key, H, L, S, E, EV, scale,
                 sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
                 sm_b, sm_h, sm_l, sm_s, so_b, so_h, so_l, so_e,
                 MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr, NU_BLOCK: tl.constexpr, PRECISION: tl.constexpr,
                 UPCAST: tl.constexpr):  # fmt: skip
    """One pass, no normaliser: out = (W / nu) V with W the counts of nu_h independent categorical draws per row
    (``W ~ Multinomial(nu_h, softmax row)``), each draw won by the key of least log E_dj - s_j over the row's keys
    (an exponential race: key j wins with probability exp(s_j) / sum_k exp(s_k), whatever the row's max; a masked
    key, s = -inf, never wins), E_dj i.i.d. standard exponentials; one Philox call (four 32-bit words) serves four
    keys: counter ``offset + (r nu_max + d) ceil(S / 4) + g`` for keys 4 g .. 4 g + 3. The winners are kept per draw
    across the key blocks, then their value rows averaged. Work O(nu S) per row: for small nu (NU_BLOCK = the next
    power of two of nu_max; every head nu >= 1; BLOCK_N a multiple of 4). A row with no attendable key returns
    zeros."""
    seed = _seed_value(seed)
    pid_m, b, h, offs_m, rows, q, K, V, Mask, nu = _program_rows(
        Q, K, V, Mask, Nu, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sv_b, sv_h, sm_b, sm_h, BLOCK_M, BLOCK_E
    )
    d = tl.arange(0, NU_BLOCK)
    groups = (S + 3) // 4
    first = offset + (rows[:, None] * nu_max + d[None, :]) * groups  # (BLOCK_M, NU_BLOCK) the draws' first counters
    g = tl.arange(0, BLOCK_N // 4)
    best = tl.full((BLOCK_M, NU_BLOCK), float("inf"), tl.float32)
    win = tl.full((BLOCK_M, NU_BLOCK), -1, tl.int32)
    for n0 in range(0, _key_end(pid_m, S, IS_CAUSAL, BLOCK_M), BLOCK_N):
        s, _ = _block_scores(q, K, Mask, offs_m, n0, L, S, E, scale, sk_s, sk_e, sm_l, sm_s,
                             MASK_KIND, IS_CAUSAL, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
        # key n0 + 4 c + i -> (BLOCK_M, G) tile i, column c; the four words of one Philox counter, one per tile.
        # reshape: [m, c, a, b] = key 4 c + 2 a + b; split takes the last axis (b), then a
        s_b0, s_b1 = tl.split(tl.reshape(s, (BLOCK_M, BLOCK_N // 4, 2, 2)))  # (BLOCK_M, G, 2): b = 0, 1
        s0, s2 = tl.split(s_b0)
        s1, s3 = tl.split(s_b1)
        w0, w1, w2, w3 = tl.randint4x(seed, first[:, :, None] + (n0 // 4 + g)[None, None, :])
        best, win = _race_part(w0, s0, best, win, n0)
        best, win = _race_part(w1, s1, best, win, n0 + 1)
        best, win = _race_part(w2, s2, best, win, n0 + 2)
        best, win = _race_part(w3, s3, best, win, n0 + 3)
    offs_ev = tl.arange(0, BLOCK_EV)
    take = (win >= 0) & (d[None, :] < nu)
    values = tl.load(V + win[:, :, None] * sv_s + offs_ev[None, None, :] * sv_e,
                     mask=take[:, :, None] & (offs_ev[None, None, :] < EV), other=0.0)  # fmt: skip
    acc = tl.sum(values.to(tl.float32), 1) / nu
    out = Out + b * so_b + h * so_h + offs_m[:, None] * so_l + offs_ev[None, :] * so_e
    tl.store(out, acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))


@triton.jit(do_not_specialize=["tune_key"])
def _group_mass_kernel(Q, K, Mask, Lse_out, tune_key, H, L, S, E, NG, scale,
                       sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sm_b, sm_h, sm_l, sm_s,
                       MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       GROUP: tl.constexpr, BLOCK_E: tl.constexpr, PRECISION: tl.constexpr,
                       UPCAST: tl.constexpr):  # fmt: skip
    """Pass 1 of the groups sampler: each row's log mass in every group of GROUP keys (a multiple of BLOCK_N),
    ``lse_g = log sum_{j in g} exp(s_j)`` (-inf where no key of the group may be attended), into ``Lse_out``
    (B*H*L, NG) fp32. A causal program writes the groups up to its last row's diagonal, the only ones its rows'
    pass 2 reads. ``tune_key`` is not used by the kernel: the autotuner's key."""
    pid_m, offs_m, rows, q, K, Mask = _stats_rows(Q, K, Mask, H, L, E, sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sm_b,
                                                  sm_h, BLOCK_M, BLOCK_E)  # fmt: skip
    for g0 in range(0, _key_end(pid_m, S, IS_CAUSAL, BLOCK_M), GROUP):
        m, z = _online_softmax(q, K, Mask, offs_m, g0, g0 + GROUP, L, S, E, scale, sk_s, sk_e, sm_l, sm_s, MASK_KIND,
                               IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_E, PRECISION, UPCAST)  # fmt: skip
        lse = tl.where(z > 0, m + tl.log(tl.where(z > 0, z, 1.0)), float("-inf"))
        tl.store(Lse_out + rows * NG + g0 // GROUP, lse, mask=offs_m < L)


#: Head-dim columns per step of the groups sampler's pass 2 (its (rows, chunk, E_STEP) tiles of gathered keys and
#: (rows, points, E_STEP) tiles of gathered values stay small at any head dim).
E_STEP = tl.constexpr(16)


@triton.jit
def _chunk_weights(Q, K, Mask, offs_m, keys, lse_g, active, L, S, E, scale, sq_l, sq_e, sk_s, sk_e, sm_l, sm_s,
                   MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr):  # fmt: skip
    """exp(s_ij - lse_g_i) (BLOCK_M, CHUNK) fp32 of the rows offs_m at their own ``keys`` (BLOCK_M, CHUNK), 0 where
    masked, beyond S or in an inactive row: the scores on the CUDA cores (fp32 products and sums, E_STEP columns of
    q and of each row's keys at a time)."""
    live = (keys < S) & active[:, None]
    s = tl.zeros(keys.shape, tl.float32)
    for e0 in range(0, E, E_STEP):
        offs_e = e0 + tl.arange(0, E_STEP)
        q = tl.load(Q + offs_m[:, None] * sq_l + offs_e[None, :] * sq_e,
                    mask=active[:, None] & (offs_e[None, :] < E), other=0.0)  # fmt: skip
        kt = tl.load(K + keys[:, :, None] * sk_s + offs_e[None, None, :] * sk_e,
                     mask=live[:, :, None] & (offs_e[None, None, :] < E), other=0.0)  # fmt: skip
        s += tl.sum(kt.to(tl.float32) * q.to(tl.float32)[:, None, :], 2)
    s = s * scale
    keep = live
    if IS_CAUSAL:
        keep = keep & (keys <= offs_m[:, None])
    if MASK_KIND != 0:
        mv = tl.load(Mask + offs_m[:, None] * sm_l + keys * sm_s, mask=live & (offs_m[:, None] < L), other=0)
        if MASK_KIND == 1:
            keep = keep & (mv != 0)
        else:
            s = s + mv
    return tl.where(keep, tl.exp(s - lse_g[:, None]), 0.0)


@triton.jit(do_not_specialize=["seed", "offset", "nu_max", "tune_key"])
def _groups_kernel(Q, K, V, Mask, Lse_in, Nu, Out, seed, offset, nu_max, tune_key, H, L, S, E, EV, NG, scale,
                   sq_b, sq_h, sq_l, sq_e, sk_b, sk_h, sk_s, sk_e, sv_b, sv_h, sv_s, sv_e,
                   sm_b, sm_h, sm_l, sm_s, so_b, so_h, so_l, so_e,
                   MASK_KIND: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, GROUP: tl.constexpr,
                   CHUNK: tl.constexpr, BLOCK_G: tl.constexpr, NU_BLOCK: tl.constexpr):  # fmt: skip
    """Pass 2 of the groups sampler: out = (W / nu) V with W ~ Multinomial(nu_h, softmax row), drawn in two stages.
    The row's sorted points (those of the two-pass kernel: ``x_k = Z (E_0 + ... + E_k) / (E_0 + ... + E_nu)``, the
    same Philox counters) are placed first in the cumulative sum of the group masses ``exp(lse_g - max lse)`` from
    pass 1 (a point's group: the one whose interval holds it). Then, group by group in increasing order (each row
    of the program its own next group holding points), the row's scores at that group's keys are recomputed (q . k
    on the CUDA cores, CHUNK keys at a time; a group of several chunks is swept twice, for its total first) and its
    points, rescaled to the group's own total, placed in the group's cumulative sum. Given its group, a point is
    uniform on the group's interval, so its key follows the softmax restricted to the group: the counts are
    Multinomial(nu, pi) exactly, up to float rounding of the cumulative sums, as in the two-pass kernel. Only the
    groups holding points are read: at nu = 1 one group of keys per row. A point beyond a cumulative sum's end
    (rounding) goes to the last positive group, or key. Every head nu >= 1 (NU_BLOCK > nu_max: one chunk of
    points); a row with no attendable key returns zeros."""
    seed = _seed_value(seed)
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = pid_bh.to(tl.int64) * L + offs_m
    Q, K, V = Q + b * sq_b + h * sq_h, K + b * sk_b + h * sk_h, V + b * sv_b + h * sv_h
    Mask = Mask + b * sm_b + h * sm_h
    nu = tl.load(Nu + h)
    grp = tl.arange(0, BLOCK_G)[None, :]
    j = tl.arange(0, CHUNK)[None, :]
    t = tl.arange(0, NU_BLOCK)[None, :]
    n_groups = NG + tl.zeros((BLOCK_M,), tl.int32)
    if IS_CAUSAL:
        n_groups = tl.minimum(n_groups, offs_m // GROUP + 1)
    lse = tl.load(Lse_in + rows[:, None] * NG + grp, mask=(grp < n_groups[:, None]) & (offs_m[:, None] < L),
                  other=float("-inf"))  # fmt: skip
    top = tl.max(lse, 1)
    w = tl.exp(lse - tl.where(top > float("-inf"), top, 0.0)[:, None])  # group masses, the largest 1 (0: none)
    c = tl.cumsum(w, 1)
    last_group = tl.max(tl.where(w > 0, grp, -1), 1)
    spacing = -tl.log(tl.maximum(tl.rand(seed, offset + rows[:, None] * (nu_max + 1) + t), 1e-30))
    spacing = tl.where(t <= nu, spacing, 0.0)
    x = tl.cumsum(spacing, 1) * (tl.max(c, 1) / tl.sum(spacing, 1))[:, None]  # sorted points in [0, sum w)
    n_points = tl.where(top > float("-inf"), nu, 0)  # per row; 0: no attendable key (or a padding row)
    point_group = tl.minimum(_rank(c, x, BLOCK_G), last_group[:, None])
    point_key = tl.full((BLOCK_M, NU_BLOCK), -1, tl.int32)
    done = tl.zeros((BLOCK_M,), tl.int32)
    while tl.max(n_points - done, 0) > 0:  # each row's next group holding points, in increasing order
        active = done < n_points
        g = tl.sum(tl.where(t == done[:, None], point_group, 0), 1)
        here = (point_group == g[:, None]) & (t < n_points[:, None]) & active[:, None]
        in_g = grp == g[:, None]
        w_g = tl.sum(tl.where(in_g, w, 0.0), 1)
        lse_g = tl.sum(tl.where(in_g, lse, 0.0), 1)
        start = tl.sum(tl.where(in_g, c, 0.0), 1) - w_g
        y = tl.minimum(tl.maximum((x - start[:, None]) / tl.where(active, w_g, 1.0)[:, None], 0.0), 1.0)
        total = tl.zeros((BLOCK_M,), tl.float32)
        if GROUP > CHUNK:  # the group's own total first
            for c0 in range(0, GROUP, CHUNK):
                e = _chunk_weights(Q, K, Mask, offs_m, g[:, None] * GROUP + c0 + j, lse_g, active, L, S, E, scale,
                                   sq_l, sq_e, sk_s, sk_e, sm_l, sm_s, MASK_KIND, IS_CAUSAL)  # fmt: skip
                total += tl.sum(e, 1)
        carry = tl.zeros((BLOCK_M,), tl.float32)
        last_key = tl.full((BLOCK_M,), -1, tl.int32)
        left = here
        for c0 in range(0, GROUP, CHUNK):
            keys = g[:, None] * GROUP + c0 + j
            e = _chunk_weights(Q, K, Mask, offs_m, keys, lse_g, active, L, S, E, scale, sq_l, sq_e, sk_s, sk_e, sm_l,
                               sm_s, MASK_KIND, IS_CAUSAL)  # fmt: skip
            if GROUP == CHUNK:
                total = tl.sum(e, 1)
            hi = carry[:, None] + tl.cumsum(e, 1)
            target = y * total[:, None]
            top_chunk = tl.max(hi, 1)
            now = left & (target >= carry[:, None]) & (target < top_chunk[:, None])
            rank = tl.minimum(_rank(hi, target, CHUNK), CHUNK - 1)
            point_key = tl.where(now, g[:, None] * GROUP + c0 + rank, point_key)
            left = left & ~now
            last_key = tl.maximum(last_key, tl.max(tl.where(e > 0, keys, -1), 1))
            carry = top_chunk
        point_key = tl.where(left, last_key[:, None], point_key)  # beyond the group's sum (rounding): its last key
        done += tl.sum(here.to(tl.int32), 1)
    for e0 in range(0, EV, E_STEP):  # the points' value rows averaged, E_STEP columns at a time
        offs_ev = e0 + tl.arange(0, E_STEP)
        values = tl.load(V + point_key[:, :, None] * sv_s + offs_ev[None, None, :] * sv_e,
                         mask=(point_key >= 0)[:, :, None] & (offs_ev[None, None, :] < EV), other=0.0)  # fmt: skip
        acc = tl.sum(values.to(tl.float32), 1) / nu
        out = Out + b * so_b + h * so_h + offs_m[:, None] * so_l + offs_ev[None, :] * so_e
        tl.store(out, acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))
