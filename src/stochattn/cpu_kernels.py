"""Compiled CPU kernels for stochastic attention (numba): one pass per attention row, no per-draw tensors.

Two kernels, both exact in law and both seeded from one 64-bit integer drawn from the caller's
``torch.Generator``; every row owns an independent random stream, so results do not depend on the thread count.

* :func:`multinomial_weights` writes ``W/nu`` with ``W ~ Multinomial(nu_r, p_r)`` for every row ``r``
  (``nu_r = 0``: the row is copied, i.e. deterministic). Per row it picks the cheaper exact construction:
  ``nu_r`` inverse-CDF draws on the row's cumulative sum while ``nu_r <= categorical_limit(n_k)``, else the
  conditional-binomial chain ``W_j ~ Binomial(nu - sum_{i<j} W_i, p_j / sum_{i>=j} p_i)`` (design notes), whose
  cost is O(n_k) whatever ``nu`` is. Binomials: inversion (BINV) when the mean is below 10, Hörmann's BTRS
  transformed rejection above (the two algorithms ``torch.binomial`` uses; exact, O(1) expected time).
* :func:`gather_output` returns the attention *output* ``(W/nu) V`` directly for small ``nu``: the ``nu`` drawn
  value rows are averaged, so the dense ``(n_q, n_k) @ (n_k, d)`` product is replaced by ``nu`` row additions.

A key with probability 0 is never selected: inverse-CDF draws pick the first key whose cumulative sum exceeds
``u * total`` (a zero-probability key never raises it), and the binomial chain gives such a key probability 0.

NOTE[DIFF]: random numbers come from a counter-style SplitMix64 stream per row (seed mixed with the row index;
Steele, Lea & Flood 2014) instead of torch's Mersenne Twister, so that rows can be drawn in parallel and the
result is reproducible for a given generator state on any number of threads. Uniforms carry 53 random bits.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange
from scipy.special import gammaln

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64 increment
_ROW_KEY = np.uint64(0xD1B54A32D192ED03)  # multiplier decorrelating the per-row stream starts
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TWO_POW_M53 = 1.0 / 9007199254740992.0

#: Inverse-CDF draws search the cumulative sum linearly (branch-free) below this many keys, by bisection beyond.
LINEAR_SEARCH_MAX_KEYS = 64
#: Inverse-CDF draws while nu <= CATEGORICAL_PER_KEY_SHORT * n_k (rows shorter than LINEAR_SEARCH_MAX_KEYS) or
#: CATEGORICAL_PER_KEY_LONG * n_k (longer rows), the binomial chain beyond: the measured crossovers
#: (benchmarks/bench_attention.py, "kernel paths") at n_k = 17 and 512.
CATEGORICAL_PER_KEY_SHORT = 8
CATEGORICAL_PER_KEY_LONG = 2
#: gather_output beats weights + dense product while nu <= max(GATHER_MIN_NU, n_k / GATHER_KEYS_PER_DRAW).
GATHER_MIN_NU = 8
GATHER_KEYS_PER_DRAW = 16
#: BINV (inversion) below this binomial mean, BTRS above (Hörmann 1993 requires n p >= 10).
BTRS_MIN_MEAN = 10.0
#: log(k!) for k < LOG_FACTORIAL_TABLE.size (512 KiB), exact to double precision; Stirling's series beyond. A
#: look-up instead of two logarithms keeps BTRS's rejection test cheap for every nu up to 65535.
LOG_FACTORIAL_TABLE = gammaln(np.arange(1.0, 65537.0))


# --------------------------------------------------------------------------------------------------------------
# random numbers
# --------------------------------------------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _mix64(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(inline="always", cache=True)
def _start_row(state, seed, row):
    """Point ``state`` (a length-1 uint64 array, advanced in place by the draws) at the start of row ``row``'s
    stream."""
    state[0] = _mix64(seed ^ (np.uint64(row) * _ROW_KEY))


@njit(inline="always", cache=True)
def _uniform(state):
    """U(0, 1) with 53 random bits, in [0, 1)."""
    state[0] += _GOLDEN
    return float(_mix64(state[0]) >> _S11) * _TWO_POW_M53


# --------------------------------------------------------------------------------------------------------------
# binomial variates
# --------------------------------------------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _binomial_inversion(n, p, state):
    """Binomial(n, p), p <= 1/2, n p < 10: sequential search of the CDF from 0 (BINV, Kachitvichyanukul & Schmeiser
    1988)."""
    q = 1.0 - p
    s = p / q
    a = (n + 1) * s
    r0 = math.exp(n * math.log1p(-p))
    while True:
        u = _uniform(state)
        r = r0
        x = 0
        while u > r:
            u -= r
            x += 1
            if x > n:  # only float rounding lands here: draw again
                break
            r *= a / x - s
        if x <= n:
            return x


@njit(inline="always", cache=True)
def _log_factorial(k, table):
    """log(k!) for integer-valued k >= 0: table look-up, else Stirling's series (relative error < 1e-16 there)."""
    if k < table.shape[0]:
        return table[int(k)]
    x = k + 1.0
    inv = 1.0 / x
    return (
        (x - 0.5) * math.log(x)
        - x
        + 0.9189385332046728
        + inv * (1.0 / 12.0 - inv * inv * (1.0 / 360.0 - inv * inv / 1260.0))
    )


@njit(inline="always", cache=True)
def _binomial_btrs(n, p, state, table):
    """Binomial(n, p), p <= 1/2, n p >= 10: transformed rejection with squeeze (BTRS, Hörmann 1993)."""
    q = 1.0 - p
    spq = math.sqrt(n * p * q)
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    m = math.floor((n + 1) * p)
    log_fm = -1.0  # log f(m) up to the shared terms, computed on the first slow-path test
    lpq = 0.0
    while True:
        u = _uniform(state) - 0.5
        v = _uniform(state)
        us = 0.5 - abs(u)
        k = math.floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > n:
            continue
        if us >= 0.07 and v <= v_r:
            return int(k)
        if log_fm < 0.0:
            lpq = math.log(p / q)
            log_fm = _log_factorial(m, table) + _log_factorial(n - m, table)
        v = math.log(v * alpha / (a / (us * us) + b))
        if v <= log_fm - _log_factorial(k, table) - _log_factorial(n - k, table) + (k - m) * lpq:
            return int(k)


@njit(inline="always", cache=True)
def _binomial(n, p, state, table):
    """Binomial(n, p) for integer n >= 0 and p in [0, 1]; exactly 0 when p == 0 and n when p == 1."""
    if n == 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    flip = p > 0.5
    pp = 1.0 - p if flip else p
    k = _binomial_btrs(n, pp, state, table) if n * pp >= BTRS_MIN_MEAN else _binomial_inversion(n, pp, state)
    return n - k if flip else k


# --------------------------------------------------------------------------------------------------------------
# one row
# --------------------------------------------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _cumulative(p, cdf):
    """cdf[j] = sum_{i<=j} p[i] in float64; returns the index of the last key with positive probability (-1: none).

    Keys are taken four at a time: their partial sums do not depend on the running total, so the serial add chain
    is a quarter as long. The result is non-decreasing and flat exactly where p is 0 (adding the running total is
    monotone and adding 0 is exact), which is all the inverse-CDF search relies on.
    """
    n = p.shape[0]
    last = n - 1
    while last >= 0 and not p[last] > 0.0:
        last -= 1
    acc = 0.0
    j = 0
    while j + 4 <= n:
        s1 = float(p[j])
        s2 = s1 + float(p[j + 1])
        s3 = s2 + float(p[j + 2])
        s4 = s3 + float(p[j + 3])
        cdf[j] = acc + s1
        cdf[j + 1] = acc + s2
        cdf[j + 2] = acc + s3
        acc += s4
        cdf[j + 3] = acc
        j += 4
    while j < n:
        acc += float(p[j])
        cdf[j] = acc
        j += 1
    return last


@njit(inline="always", cache=True)
def _draw_key(cdf, last, state):
    """Index of one inverse-CDF draw: the first j with cdf[j] > u * total (cdf[last] == total)."""
    x = _uniform(state) * cdf[last]
    if last < LINEAR_SEARCH_MAX_KEYS:  # count the cdf values <= x (branch-free)
        k = 0
        for j in range(last):
            k += cdf[j] <= x
        return k
    lo, hi = 0, last  # bisection; the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) >> 1
        if cdf[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(inline="always", cache=True)
def _row_counts(p, nu, categorical_limit, state, cdf, table, out_row):
    """Write the counts W ~ Multinomial(nu, p / sum p) of one row into out_row (zeros elsewhere).

    ``nu <= categorical_limit``: nu inverse-CDF draws. Otherwise the conditional-binomial chain
    W_j ~ Binomial(nu - sum_{i<j} W_i, p_j / sum_{i>=j} p_i) with the suffix sums accumulated backwards (no
    cancellation), which gives the last positive key probability exactly 1 and zero-probability keys exactly 0.
    """
    n = p.shape[0]
    for j in range(n):
        out_row[j] = 0.0
    if nu <= categorical_limit:
        last = _cumulative(p, cdf)
        if last >= 0:  # else a fully masked row: no key may be chosen, the row stays zero
            for _ in range(nu):
                out_row[_draw_key(cdf, last, state)] += 1.0
        return
    suffix = 0.0
    for j in range(n - 1, -1, -1):
        suffix += float(p[j])
        cdf[j] = suffix
    remaining = nu
    for j in range(n):
        if remaining == 0 or cdf[j] <= 0.0:  # done, or only zero-probability keys are left
            return
        pj = float(p[j])
        w = _binomial(remaining, min(pj / cdf[j], 1.0), state, table)
        out_row[j] = w
        remaining -= w


# --------------------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _weights_rows(probs, nu_rows, seed, categorical_limit, table, out, start, stop):
    """Rows [start, stop) of :func:`multinomial_weights`."""
    n = probs.shape[1]
    per_row = nu_rows.shape[0] > 1
    cdf = np.empty(n, np.float64)
    state = np.empty(1, np.uint64)
    for r in range(start, stop):
        nu = nu_rows[r] if per_row else nu_rows[0]
        p = probs[r]
        o = out[r]
        if nu == 0:
            for j in range(n):
                o[j] = p[j]
            continue
        _start_row(state, seed, r)
        _row_counts(p, nu, categorical_limit, state, cdf, table, o)
        inv = 1.0 / nu
        for j in range(n):
            o[j] *= inv


@njit(inline="always", cache=True)
def _gather_rows(probs, values, nu_rows, seed, out, start, stop):
    """Rows [start, stop) (row r = query r % L of group r // L) of :func:`gather_output`."""
    n_q, n = probs.shape[1], probs.shape[2]
    d = values.shape[2]
    per_row = nu_rows.shape[0] > 1
    cdf = np.empty(n, np.float64)
    acc = np.empty(d, np.float64)
    state = np.empty(1, np.uint64)
    for r in range(start, stop):
        g, i = r // n_q, r % n_q
        nu = nu_rows[r] if per_row else nu_rows[0]
        o = out[g, i]
        last = _cumulative(probs[g, i], cdf)
        if last < 0:
            for e in range(d):
                o[e] = 0.0
            continue
        _start_row(state, seed, r)
        for e in range(d):
            acc[e] = 0.0
        for _ in range(nu):
            v = values[g, _draw_key(cdf, last, state)]
            for e in range(d):
                acc[e] += v[e]
        inv = 1.0 / nu
        for e in range(d):
            o[e] = acc[e] * inv


# NOTE[DIFF]: one thread runs a plain compiled loop, never numba's thread pool. An OpenMP pool's idle workers
# spin after each call and starved the other processes sharing the cores: sampling a small FT-Transformer in two
# single-threaded processes on two cores took 12-16 s instead of 2.3-2.9 s.
@njit(cache=True)
def _weights_serial(probs, nu_rows, seed, categorical_limit, table, out):
    _weights_rows(probs, nu_rows, seed, categorical_limit, table, out, 0, probs.shape[0])


@njit(cache=True)
def _gather_serial(probs, values, nu_rows, seed, out):
    _gather_rows(probs, values, nu_rows, seed, out, 0, probs.shape[0] * probs.shape[1])


@njit(parallel=True, cache=True)
def _weights_parallel(probs, nu_rows, seed, categorical_limit, table, threads, out):
    rows = probs.shape[0]
    chunk = (rows + threads - 1) // threads
    for t in prange(threads):
        _weights_rows(probs, nu_rows, seed, categorical_limit, table, out, t * chunk, min(rows, (t + 1) * chunk))


@njit(parallel=True, cache=True)
def _gather_parallel(probs, values, nu_rows, seed, threads, out):
    rows = probs.shape[0] * probs.shape[1]
    chunk = (rows + threads - 1) // threads
    for t in prange(threads):
        _gather_rows(probs, values, nu_rows, seed, out, t * chunk, min(rows, (t + 1) * chunk))


def _threads() -> int:
    """Use as many threads as torch does (set with torch.set_num_threads)."""
    import torch

    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if threads > 1 and numba.get_num_threads() != threads:
        numba.set_num_threads(threads)
    return threads


# --------------------------------------------------------------------------------------------------------------
# entry points (numpy in, numpy out; stochattn.attention wraps them for torch tensors)
# --------------------------------------------------------------------------------------------------------------
def categorical_limit(n_keys: int) -> int:
    """Largest nu drawn by inverse-CDF draws (the binomial chain beyond) for rows of n_keys keys."""
    per_key = CATEGORICAL_PER_KEY_SHORT if n_keys < LINEAR_SEARCH_MAX_KEYS else CATEGORICAL_PER_KEY_LONG
    return per_key * n_keys


def gather_limit(n_keys: int) -> int:
    """Largest nu for which :func:`gather_output` is cheaper than weights followed by the dense product."""
    return max(GATHER_MIN_NU, n_keys // GATHER_KEYS_PER_DRAW)


def multinomial_weights(
    probs: np.ndarray, nu_rows: np.ndarray, seed: int, out: np.ndarray, limit: int | None = None
) -> None:
    """probs (R, n_k) float32/64 -> out (R, n_k): ``Multinomial(nu_r, p_r)/nu_r`` per row (``nu_r = 0``: copy).

    nu_rows: int64 (R,) or (1,) (one value for every row). ``probs`` rows need not be normalised (all-zero rows
    stay zero). Inverse-CDF draws while ``nu_r <= limit`` (default :func:`categorical_limit`), the
    conditional-binomial chain beyond; both exact.
    """
    limit = categorical_limit(probs.shape[1]) if limit is None else limit
    threads = _threads()
    if threads == 1:
        _weights_serial(probs, nu_rows, np.uint64(seed), int(limit), LOG_FACTORIAL_TABLE, out)
    else:
        _weights_parallel(probs, nu_rows, np.uint64(seed), int(limit), LOG_FACTORIAL_TABLE, threads, out)


def gather_output(probs: np.ndarray, values: np.ndarray, nu_rows: np.ndarray, seed: int, out: np.ndarray) -> None:
    """probs (G, L, n_k), values (G, n_k, D) -> out (G, L, D) = (W/nu) V with ``W ~ Multinomial(nu_r, p_r)``.

    nu_rows: int64 (G*L,) or (1,), every entry >= 1. The row stream of row ``g * L + i`` is the same one
    :func:`multinomial_weights` uses for that row, and the draws are the categorical ones, so for ``nu`` in the
    categorical regime both kernels realise the same counts.
    """
    threads = _threads()
    if threads == 1:
        _gather_serial(probs, values, nu_rows, np.uint64(seed), out)
    else:
        _gather_parallel(probs, values, nu_rows, np.uint64(seed), threads, out)
