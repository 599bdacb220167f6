"""benchmarks/gpu_check.py (``make gpu-check``): without CUDA it says so and exits 0; its checks run on the CPU with
reduced modules (the self-test), SA off equal to the deterministic pass and one timing row per nu."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: make gpu-check runs for real")
def test_without_cuda_it_says_so_and_exits_0(capsys):
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "srun --gres=gpu:1 make gpu-check" in out


def test_cpu_self_test_checks_exactness_and_times_every_nu(capsys):
    assert gpu_check.main(["--device", "cpu", "--small", "--repeats", "1", "--skip-dag"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [ln for ln in lines if "deterministic" in ln]
    assert sum("SA off (nu=None) == deterministic" in ln and " ok " in ln and "exact" in ln for ln in rows) == 2
    for nu in gpu_check.NUS:  # TimesFM and ClimaX, each nu
        timed = [ln for ln in rows if f": nu={nu} time / deterministic" in ln]
        assert sum(" ok " in ln and "explicit " in ln for ln in timed) == 2, nu
    assert any("paper V100 1.25x" in ln for ln in rows)


def test_a_failed_check_fails_the_run(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "sa_rows", lambda *a: [{"check": "x", "ok": False, "value": "broken"}])
    assert gpu_check.main(["--device", "cpu", "--skip-dag"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_step_costs_self_test_writes_what_the_runtime_requests_read(tmp_path, capsys):
    """benchmarks/step_costs.py on the CPU with a reduced module: every figure positive, and the record is refused
    as a pricing source (it is not the full model size)."""
    import step_costs

    from stochattn import resources

    out = tmp_path / "costs.json"
    assert step_costs.main(["--device", "cpu", "--small", "--repeats", "1", "--models", "timesfm_h96",
                            "--out", str(out)]) == 0  # fmt: skip
    assert "timesfm_h96" in capsys.readouterr().out
    rec = json.loads(out.read_text())
    assert set(rec["costs"]) == {"timesfm_h96"}
    assert all(rec["costs"]["timesfm_h96"][k] > 0 for k in resources.STEP_COST_KEYS)
    with pytest.raises(ValueError, match="reduced modules"):
        resources.load_step_costs(out)
