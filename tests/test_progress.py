"""stochattn.progress: plain, bounded progress lines when stderr is a log file; tqdm's bar on a terminal."""

import io
import sys

import numpy as np
import pytest
import torch

from stochattn.progress import LineProgress, progress
from stochattn.training import fit_regressor


class FakeClock:
    """Deterministic time: each call advances by ``step`` seconds."""

    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_non_tty_gets_newline_lines_bounded_by_percent():
    out = io.StringIO()
    bar = progress(range(1000), desc="backbone", unit="epoch", file=out)
    assert isinstance(bar, LineProgress)
    seen = []
    for i in bar:
        seen.append(i)
        bar.set_postfix(val_rmse=f"{i / 1000:.3f}")
    assert seen == list(range(1000))
    text = out.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    # one line per 10 % of the total (the last one is the final line), no more
    assert len(lines) == 10, lines
    assert lines[0].startswith("backbone: epoch 100/1000 (10%) val_rmse=0.099 [")
    assert lines[-1].startswith("backbone: epoch 1000/1000 (100%) val_rmse=0.999 [") and lines[-1].endswith(" s]")


def test_time_rule_and_early_break():
    """Slow items: a line at least every ``every_seconds``; ``close`` after a break writes the final count once."""
    out = io.StringIO()
    bar = LineProgress(range(100), desc="fit", file=out, every_percent=50, every_seconds=30, clock=FakeClock(10.0))
    for epoch in bar:
        if epoch == 20:
            break
    bar.close()
    bar.close()  # idempotent
    lines = out.getvalue().splitlines()
    # clock: +10 s per call (one call per completed item): a line every 3rd item, then the final one at 21 items
    counts = [int(line.split()[1].split("/")[0]) for line in lines]
    assert counts == [3, 6, 9, 12, 15, 18, 21], lines
    assert all("(" in line and "%)" in line for line in lines)


def test_unknown_total_and_empty():
    out = io.StringIO()
    for _ in progress((i for i in range(5)), desc="gen", file=out):
        pass
    assert len(out.getvalue().splitlines()) == 1 and out.getvalue().startswith("gen: 5 [")
    out = io.StringIO()
    assert list(progress([], desc="none", file=out)) == []
    assert out.getvalue().startswith("none: 0 [")


def test_disabled_writes_nothing_and_tty_gets_tqdm():
    out = io.StringIO()
    bar = progress(range(3), desc="x", disable=True, file=out)
    assert list(bar) == [0, 1, 2]
    bar.set_postfix(a=1)  # the no-op interface exists
    assert out.getvalue() == ""
    tty = TTY()
    bar = progress(range(3), desc="bar", file=tty)
    assert not isinstance(bar, LineProgress)
    list(bar)
    assert "\r" in tty.getvalue()  # tqdm redraws in place on a terminal


def test_invalid_settings():
    with pytest.raises(ValueError, match="every_percent"):
        LineProgress(range(3), every_percent=0)
    with pytest.raises(ValueError, match="every_seconds"):
        LineProgress(range(3), every_seconds=0)


def test_training_log_is_plain_lines(monkeypatch, one_thread):
    """fit_regressor with stderr redirected to a file-like log (as the workflow scripts do): no carriage returns,
    one line per 6 epochs, each naming the epoch and the validation RMSE."""
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], dtype=np.float32)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    fit = fit_regressor(model, x, y, x[:16], y[:16], seed=0, lr=1e-2, weight_decay=0.0, batch_size=32, max_epochs=60,
                        patience=None, progress=True, desc="backbone")  # fmt: skip
    text = log.getvalue()
    assert fit.epochs_run == 60
    assert "\r" not in text
    lines = [line for line in text.splitlines() if line.startswith("backbone:")]
    assert len(lines) == 10 and len(text) < 2000, text  # one per 10 % (6 epochs)
    assert lines[-1].startswith("backbone: epoch 60/60 (100%) loss=") and "val_rmse=" in lines[-1]
