"""Workflow conventions a cluster user relies on: `snakemake --lint` finds nothing (among its checks: every rule
declares a log and its software environment) and `snakefmt` leaves every rule file unchanged."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_snakemake_lint_is_clean():
    res = subprocess.run(
        [str(BIN / "snakemake"), "--lint", "--configfile=config/quick.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in out, out[-3000:]


def test_snakefmt_leaves_rule_files_unchanged():
    snakefmt = BIN / "snakefmt"
    if not snakefmt.exists():
        snakefmt = shutil.which("snakefmt")
    if snakefmt is None:
        pytest.fail("snakefmt is not installed: it is in the test extras of pyproject.toml")
    files = ["Snakefile", *sorted(str(p.relative_to(REPO)) for p in (REPO / "rules").glob("*.smk"))]
    res = subprocess.run([str(snakefmt), "--check", *files], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
