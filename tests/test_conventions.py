"""The code checks itself: `snakemake --lint` finds nothing in the workflow (among its checks: every rule declares a
log and its software environment, which a cluster user relies on), `snakefmt` leaves every rule file unchanged, and
ruff's lint and format check pass (pyproject.toml's [tool.ruff]). Each is a few seconds, so a regression fails CI."""

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
    files = ["Snakefile", *sorted(str(p.relative_to(REPO)) for p in (REPO / "rules").glob("*.smk"))]
    res = subprocess.run([_tool("snakefmt"), "--check", *files], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]


def _tool(name: str) -> str:
    """The console script ``name`` of this environment (the test extra installs it), else the one on PATH."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it is in the test extra of pyproject.toml")
    return found


def test_ruff_lint_is_clean():
    """`ruff check .` with pyproject.toml's [tool.ruff.lint] (pycodestyle at 120 columns, pyflakes, bugbear,
    pyupgrade): each ignored rule says why there."""
    res = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]


def test_ruff_format_leaves_formatted_files_unchanged():
    """`ruff format --check .`: every Python file outside [tool.ruff.format]'s list of hand-aligned files (new files
    included) is as the formatter writes it."""
    res = subprocess.run([_tool("ruff"), "format", "--check", "--no-cache", "."], cwd=REPO, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
