"""The examples a user copies run as they are (issue 35 item 4)."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_quickstart_prints_both_operating_points_with_their_coverage_and_which_to_use():
    res = subprocess.run([sys.executable, "examples/quickstart.py"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    coverage = {}
    for op in ("loss_argmin", "scale_match"):
        line = re.search(rf"^{op} +nu = +(\d+): .*95% interval coverage ([0-9.]+)", res.stdout, re.M)
        assert line, res.stdout
        coverage[op] = float(line.group(2))
    assert 0 < coverage["loss_argmin"] <= coverage["scale_match"] < 1  # the loss arg-min under-disperses
    assert "Which to use" in res.stdout and "(2/pi) s0" in res.stdout
