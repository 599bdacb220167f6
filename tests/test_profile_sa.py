"""benchmarks/profile_sa.py: without CUDA it says so and exits 0; ``--device cpu --small`` (the self-test) times SA
against the deterministic pass in paired repeats and names where SA's extra host time goes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import profile_sa  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: profile_sa runs for real")
def test_without_cuda_it_says_so_and_exits_0(capsys):
    assert profile_sa.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_cpu_self_test_pairs_the_wall_times_and_finds_sa_in_the_host_growth(capsys):
    args = ["--device", "cpu", "--small", "--repeats", "2", "--models", "timesfm", "--top", "3"]
    args += ["--python-profile", "6"]
    assert profile_sa.main(args) == 0
    out = capsys.readouterr().out
    wall = re.search(r"SA \(explicit, nu 16\) wall ([0-9.]+)x the deterministic pass \(median of 2 paired repeats", out)
    assert wall and float(wall.group(1)) > 0, out
    calls = re.search(r"host time in SA's (\d+) attention calls ([0-9.]+) ms", out)  # the clock sees SA's calls
    assert calls and int(calls.group(1)) > 0 and float(calls.group(2)) > 0, out
    growth = out[out.index("own time grown most:") :].splitlines()[2:8]
    # SA's attention functions run only in the SA forward: called 0 times in the deterministic one, > 0 in SA's
    ours = [ln.split() for ln in growth if re.search(r"stochattn/(attention|cpu_kernels)\.py", ln)]
    assert ours and all(int(cells[1]) == 0 and int(cells[2]) > 0 for cells in ours), growth
    grown = [float(ln.split()[0]) for ln in growth]
    assert grown == sorted(grown, reverse=True)
