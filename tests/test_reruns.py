"""Reruns follow the code and survive crashes: an edited library function reruns its dependants and nothing else,
and `kill -9` + `--unlock` + rerun gives the same samples and tables (the `--profile slurm -n` plan: test_preflight)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TARGETS, copy_run
from test_workflow import REPO, _snakemake_cmd, job_stats, smk


# ------------------------------------------------------------------------------------------------------------------
# an edited library function reruns exactly its dependants
# ------------------------------------------------------------------------------------------------------------------
def _edit_function(src_root: Path, module: str, function: str) -> None:
    """Insert a statement (a real code change) as the first statement after ``function``'s docstring."""
    path = src_root.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    body = node.body
    first = body[1] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "_edited_by_test = None\n")
    path.write_text("".join(lines))


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory):
    """The workflow and the library copied, so that the library can be edited (PYTHONPATH puts the copy first)."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("Snakefile", "rules", "workflow_scripts", "config", "profiles", "report", "src"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, function, expected",
    [
        # report: only the table that calls it (the PIT figure does not). Two cases (a shared helper, a stage
        # function) for the suite's 20-minute budget; the code versions of every rule come from the same code_for
        ("stochattn.report", "write_table", {"uci_table": 1}),
        # one baseline's stage function: that method's run only, not the other method's nor the backbone
        ("stochattn.experiments.uci", "_swag", {"run_swag": 1, "evaluate": 1, "uci_table": 1, "uci_pit_figure": 1}),
    ],
)
def test_editing_a_library_function_reruns_its_dependants_only(tiny_chain, repo_copy, tmp_path, module, function,
                                                               expected):  # fmt: skip
    src = tmp_path / "src"
    shutil.copytree(repo_copy / "src", src)
    work = copy_run(tiny_chain, tmp_path / "work")
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [*_snakemake_cmd(), "--snakefile", str(repo_copy / "Snakefile"), "--directory", str(work), "--cores", "2",
           "-n", *TINY_TARGETS, "--configfile", str(tiny_chain["cfg"])]  # fmt: skip
    before = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert "Nothing to be done" in before.stdout, before.stdout[-3000:]
    _edit_function(src, module, function)
    res = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    assert job_stats(res.stdout) == expected, res.stdout[-3000:]
    if function == "_swag":
        assert set(re.findall(r"method=(\w+)", res.stdout)) == {"swag"}
    assert "params" in res.stdout  # the reason Snakemake gives: params.code changed


# ------------------------------------------------------------------------------------------------------------------
# crash recovery
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_kill9_unlock_rerun_gives_identical_outputs(tiny_chain, tmp_path):
    """`kill -9` of Snakemake (and its jobs) mid-run; the next run refuses the locked directory; `--unlock`; the
    rerun completes and reproduces the shared run's samples and metric table exactly (the cost table aside)."""
    ref = tiny_chain["work"]
    work = copy_run(tiny_chain, tmp_path / "w")
    run = work / "results/uci/yacht/split0"
    for method in ("mc_dropout", "swag"):
        shutil.rmtree(run / method)
        for log in (work / "logs/uci/yacht/split0").glob(f"{method}*.log"):
            log.unlink()  # the job's log appearing tells that it runs
    shutil.rmtree(work / "results/tables")
    cmd = [*_snakemake_cmd(), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--cores", "2",
           *TINY_TARGETS, "--configfile", str(tiny_chain["cfg"])]  # fmt: skip
    log = open(tmp_path / "killed.log", "w")
    proc = subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    while not (work / "logs/uci/yacht/split0/swag.log").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # a job is running
    assert any((work / ".snakemake" / "locks").iterdir()), "Snakemake holds no lock yet"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run / "swag" / "metrics.json").exists(), "the run finished before the kill; nothing was tested"

    locked = smk(work, *TINY_TARGETS, configfile=tiny_chain["cfg"])
    assert locked.returncode != 0 and "cannot be locked" in locked.stdout, locked.stdout[-3000:]
    unlock = smk(work, "--unlock", configfile=tiny_chain["cfg"])
    assert unlock.returncode == 0, unlock.stdout[-3000:]
    rerun = smk(work, *TINY_TARGETS, configfile=tiny_chain["cfg"])
    assert rerun.returncode == 0, rerun.stdout[-5000:]

    for method in ("mc_dropout", "swag"):
        a, b = np.load(ref / f"results/uci/yacht/split0/{method}/samples.npz"), np.load(run / method / "samples.npz")
        assert a.files == b.files
        for key in a.files:  # bit for bit (the .npz container's zip timestamps aside)
            assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), (method, key)
    table = "results/tables/uci_master.csv"
    assert (ref / table).read_bytes() == (work / table).read_bytes()


@pytest.mark.slow
def test_outputs_of_a_failed_rerun_are_rebuilt_with_everything_made_from_them(tiny_chain, tmp_path, capsys):
    """A rerun of SWAG that failed (Snakemake removed its outputs; its metrics and the table made from them stay):
    Snakemake alone would do nothing (snakemake/snakemake#1978) and keep the old numbers. The workflow sets the
    stale metrics and table aside (results/.stale/), a dry run lists them without moving anything, and the run
    rebuilds SWAG, its evaluation and the table, equal to the shared run's; then nothing is left to do and the
    table's audit passes."""
    from conftest import audit_failures

    ref = tiny_chain["work"]
    work = copy_run(tiny_chain, tmp_path / "w")
    run = "results/uci/yacht/split0/swag"
    for name in ("samples.npz", "meta.json", "posterior.pt", "posterior.json"):  # run_swag's outputs
        (work / run / name).unlink()
    failures, _ = audit_failures(work, "results/tables/uci_master.csv")
    assert f"{run}/samples.npz" in failures  # the table's chain is broken, yet every file Snakemake asks for exists
    from stochattn import audit

    assert audit.main(["-d", str(work), "results/tables/uci_master.csv"]) == 1
    assert "rebuilds both (stochattn.stale)" in capsys.readouterr().err  # the audit says what the next run does

    dry = smk(work, *TINY_TARGETS, "-n", configfile=tiny_chain["cfg"])
    assert dry.returncode == 0, dry.stdout[-3000:]
    made_from = rf"stochattn: \d+ stale file\(s\), made from {run}/meta.json, {run}/samples.npz,"
    assert re.search(made_from, dry.stdout), dry.stdout[-3000:]
    assert not (work / "results/.stale").exists() and (work / run / "metrics.json").exists()

    res = smk(work, *TINY_TARGETS, configfile=tiny_chain["cfg"])
    assert res.returncode == 0, res.stdout[-5000:]
    assert re.search(r"stochattn: moved \d+ stale file\(s\)", res.stdout), res.stdout[-5000:]
    stats = job_stats(res.stdout)
    assert stats.get("run_swag") == 1 and stats.get("evaluate") == 1 and stats.get("uci_table") == 1, stats
    (stamp,) = (work / "results/.stale").iterdir()
    assert (stamp / run / "metrics.json").is_file() and (stamp / "results/tables/uci_master.csv").is_file()
    a, b = np.load(ref / run / "samples.npz"), np.load(work / run / "samples.npz")
    assert all(a[k].tobytes() == b[k].tobytes() for k in a.files)  # bit for bit
    table = "results/tables/uci_master.csv"
    assert (ref / table).read_bytes() == (work / table).read_bytes()
    assert audit_failures(work, table)[0] == []
    again = smk(work, *TINY_TARGETS, "-n", configfile=tiny_chain["cfg"])
    assert "Nothing to be done" in again.stdout and "stale" not in again.stdout, again.stdout[-3000:]


@pytest.mark.slow
def test_a_refetch_of_the_data_reruns_nothing_made_from_it(tiny_chain, repo_copy, tmp_path):
    """Snakemake reruns fetch_uci whenever its script is newer than the fetched folder (an edit, a checkout), and a
    folder has no checksum it could compare: without ancient() every prepare job, then every job of every split,
    would follow (it happened to energy's split 0). The re-fetch is verified against the same SHA-256 table, so only
    the fetch runs, the table's chain still audits clean (the folder's recorded digest matches), and nothing is left
    to do or set aside."""
    from conftest import audit_failures

    from test_workflow import MIRROR, write_config

    root = tmp_path / "repo"
    shutil.copytree(repo_copy, root, symlinks=True)
    shutil.copytree(REPO / "envs", root / "envs")  # the metadata Snakemake records names the rule's conda file
    cfg = write_config(tmp_path / "cfg.yaml", base=tiny_chain["cfg"], data={"mirrors": [str(MIRROR)]})  # not ../
    os.utime(root / "workflow_scripts" / "fetch_uci.py")  # now: newer than the fetched folder
    work = copy_run(tiny_chain, tmp_path / "w")
    folder = work / "results/data/uci/yacht"
    before = folder.stat().st_mtime
    cmd = [*_snakemake_cmd(), "--snakefile", str(root / "Snakefile"), "--directory", str(work), "--cores", "2"]
    targets = [*TINY_TARGETS, "--configfile", str(cfg)]  # last: --configfile takes several values
    res = subprocess.run([*cmd, *targets], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    assert job_stats(res.stdout) == {"fetch_uci": 1}, res.stdout[-3000:]
    assert folder.stat().st_mtime > before  # it did re-fetch (for the script's mtime: nothing else changed)
    assert "stale" not in res.stdout, res.stdout[-3000:]
    assert audit_failures(work, "results/tables/uci_master.csv")[0] == []
    again = subprocess.run([*cmd, "-n", *targets], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)  # fmt: skip
    assert "Nothing to be done" in again.stdout, again.stdout[-3000:]
