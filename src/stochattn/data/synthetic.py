"""Synthetic pretraining series in the manner of TimesFM's synthetic corpus (Das et al. 2024, §4 "Pretraining
data": piecewise-linear trends, ARMA processes, sine / cosine seasonal patterns and step functions, mixed).

:func:`synthetic_series` draws ``n`` independent series of one length; every series is the sum of

* a piecewise-linear trend with 0-2 change points,
* 0-3 seasonal components: a period drawn log-uniformly in ``period_range`` (steps), a random phase and
  amplitude, and a random waveform (sine, a few harmonics, or a square-ish wave: a tanh-squashed sine),
* a stationary ARMA(p, q) noise, p, q <= 3 (AR roots drawn inside the unit circle, so it never explodes),
* with probability 1/3, 1-2 level shifts (step functions),

then z-scored per series (the stand-in sees z-scored ETT columns). Nothing is fitted to the data a backbone is
evaluated on: periods, amplitudes and noise are drawn from fixed broad ranges.

NOTE[DIFF]: TimesFM's exact generator (its parameter ranges and mix) is not public; this is a re-creation from the
paper's description, used only by the offline stand-in backbone (the cluster path loads the public checkpoint).
TimesFM's corpus is mostly real series (Google Trends, Wikipedia page views, M4, electricity, traffic, weather) whose
seasonality follows the calendar of their sampling rate; the stand-in cannot have them, so half of the seasonal
components take a calendar period of a common sampling rate (:data:`CALENDAR_PERIODS`, fixed a priori, the same for
every data set) instead of a random one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["synthetic_series"]


def _arma(rng: np.random.Generator, length: int, burn_in: int = 200) -> np.ndarray:
    """One stationary ARMA(p, q) path (length,), p, q in 0..3: AR polynomial from real roots of modulus 0.2-0.95
    (so the process is stationary), MA coefficients in (-0.8, 0.8); the first ``burn_in`` steps are dropped."""
    from scipy.signal import lfilter  # here, not at module level: scipy.signal costs every ETT job 1.6 s to import

    p, q = rng.integers(0, 4, size=2)
    roots = rng.uniform(0.2, 0.95, size=p) * rng.choice([-1.0, 1.0], size=p)
    ma = np.concatenate([[1.0], rng.uniform(-0.8, 0.8, size=q)])
    return lfilter(ma, np.poly(roots), rng.standard_normal(length + burn_in))[burn_in:]


CALENDAR_PERIODS: tuple[float, ...] = (24.0, 168.0, 48.0, 96.0, 672.0, 288.0, 60.0, 7.0, 30.44, 365.25, 12.0, 52.18,
                                       4.0)
"""Calendar periods of common sampling rates, in steps: a day and a week of hourly data (24, 168), a day of
half-hourly, 15-min and 5-min data (48, 96, 288), a week of 15-min data (672), an hour of minutely data (60), a week,
month and year of daily data (7, 30.44, 365.25), a year of monthly and weekly data (12, 52.18), a year of quarterly
data (4)."""


def _seasonal(rng: np.random.Generator, t: np.ndarray, period_range: tuple[float, float],
              calendar_share: float) -> np.ndarray:
    if rng.uniform() < calendar_share:
        period = float(rng.choice(CALENDAR_PERIODS))
    else:
        period = float(np.exp(rng.uniform(*np.log(period_range))))
    phase = rng.uniform(0, 2 * np.pi)
    angle = 2 * np.pi * t / period + phase
    shape = rng.integers(0, 3)
    if shape == 0:
        wave = np.sin(angle)
    elif shape == 1:  # a few harmonics with decaying random weights
        weights = rng.uniform(0.0, 1.0, size=4) / np.arange(1, 5)
        wave = sum(w * np.sin(k * angle + rng.uniform(0, 2 * np.pi)) for k, w in enumerate(weights, start=1))
    else:  # square-ish
        wave = np.tanh(rng.uniform(2.0, 8.0) * np.sin(angle))
    return rng.uniform(0.5, 3.0) * wave / (np.std(wave) + 1e-8)


def _trend(rng: np.random.Generator, length: int) -> np.ndarray:
    knots = np.sort(rng.integers(1, length - 1, size=rng.integers(0, 3)))
    edges = np.concatenate([[0], knots, [length]])
    slopes = rng.normal(0.0, 2.0 / length, size=len(edges) - 1)
    steps = np.repeat(slopes, np.diff(edges))
    return np.cumsum(steps)


def synthetic_series(
    n: int, length: int, seed: int, *, period_range: tuple[float, float] = (4.0, 700.0), calendar_share: float = 0.5
) -> np.ndarray:
    """``n`` synthetic series (n, length), float32, each z-scored; reproducible from ``seed``. Each seasonal
    component takes a calendar period (:data:`CALENDAR_PERIODS`) with probability ``calendar_share``, else a period
    log-uniform in ``period_range``."""
    if n < 0 or length < 8:
        raise ValueError(f"need n >= 0 and length >= 8, got n={n}, length={length}")
    if not 0.0 <= calendar_share <= 1.0:
        raise ValueError(f"calendar_share must lie in [0, 1], got {calendar_share}")
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    out = np.empty((n, length), dtype=np.float32)
    for i in range(n):
        x = _trend(rng, length) * rng.uniform(0.0, 3.0)
        for _ in range(rng.integers(0, 4)):
            x = x + _seasonal(rng, t, period_range, calendar_share)
        noise = _arma(rng, length)
        x = x + rng.uniform(0.05, 1.0) * noise / (np.std(noise) + 1e-8)
        if rng.uniform() < 1 / 3:
            for at in rng.integers(1, length - 1, size=rng.integers(1, 3)):
                x[at:] += rng.normal(0.0, 1.5)
        out[i] = (x - x.mean()) / (x.std() + 1e-8)
    return out
