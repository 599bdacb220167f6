"""The ETT report's per-window statistic (the paper's Table timesfm_sharpness): SA's coverage k/H on one stated
window, every other method matched to it on that window; checked against a hand count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stochattn.experiments import ett_report as R
from stochattn.io import save_npz


def write_run(path, samples, point, y):
    path.parent.mkdir(parents=True, exist_ok=True)
    save_npz(path, samples=samples, point=point, y=y, cal_samples=samples, cal_point=point, cal_y=y,
             sigma_y=np.float64(1.0))  # fmt: skip
    return path


@pytest.fixture
def window(tmp_path):
    """Two series of H = 8 steps; series 1 is 'the window'. SA's 95 % interval there is [point - 1, point + 1]
    (two members at +-1, the others inside): the truth, point + [0, 0.5, 2, -0.5, -3, 0.9, 1.5, 0], falls inside
    at 5 of the 8 steps (hand count). The baseline has the same point and half SA's spread."""
    H, S = 8, 41
    point = np.zeros((2, H))
    offsets = np.array([0.0, 0.5, 2.0, -0.5, -3.0, 0.9, 1.5, 0.0])
    y = np.stack([np.zeros(H), offsets])
    base = np.linspace(-1.0, 1.0, S)[:, None, None] * np.ones((1, 2, H))  # quantiles 2.5/97.5 % at -0.95, +0.95
    runs = {"sa": write_run(tmp_path / "sa" / "samples.npz", base, point, y),
            "swag": write_run(tmp_path / "swag" / "samples.npz", 0.5 * base, point, y)}  # fmt: skip
    return runs, y


def test_sa_coverage_on_the_window_is_the_hand_count_and_baselines_are_matched_to_it(window):
    runs, y = window
    lo, hi = np.quantile(np.linspace(-1, 1, 41), [0.025, 0.975])
    hand = int(np.sum((y[1] >= lo) & (y[1] <= hi)))
    assert hand == 5  # 0, 0.5, -0.5, 0.9, 0 inside [-0.95, 0.95]
    match = R.window_match(runs, row=1)
    sa, swag = match["sa"], match["swag"]
    assert (sa["covered"], sa["steps"], sa["factor"]) == (5, 8, 1.0)
    assert sa["width"] == pytest.approx(hi - lo)
    # the baseline's interval is half as wide: it must be scaled by the factor whose interval covers the 5th
    # smallest |y - point| / half-width: |offsets| sorted 0, 0, 0.5, 0.5, 0.9 -> 0.9 / 0.475
    assert swag["factor"] == pytest.approx(0.9 / (0.5 * hi), rel=1e-9)
    assert swag["coverage"] == pytest.approx(5 / 8) and swag["width"] == pytest.approx(swag["factor"] * 0.5 * (hi - lo))


def test_a_baseline_without_spread_on_the_window_is_nan_not_an_error(window, tmp_path):
    runs, y = window
    flat = np.zeros((41, 2, 8))
    runs = dict(runs, ivon=write_run(tmp_path / "ivon" / "samples.npz", flat, np.zeros((2, 8)), y))
    match = R.window_match(runs, row=1)
    assert math.isnan(match["ivon"]["factor"]) and math.isnan(match["ivon"]["width"])
    with pytest.raises(ValueError, match="SA's run"):
        R.window_match({"swag": runs["swag"]}, row=1)
