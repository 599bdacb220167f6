"""The tiny configuration through `--profile slurm`-style settings on a real single-node SLURM (ci/slurm.sh: slurmctld +
slurmd + munge on localhost, fake GPU): real sbatch jobs, GPU rules request a GPU, outputs equal a local run's.

Skips only where SLURM cannot be installed (not root, no apt-get); with CI=true that is a failure instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY_TARGETS, tiny_config
from test_workflow import REPO, SNAKEFILE, _snakemake_cmd, needs_mirror

pytestmark = pytest.mark.slow
SLURM_SH = REPO / "ci" / "slurm.sh"


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but SLURM is unavailable: {reason}")
    pytest.skip(f"SLURM unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm():
    """Install (only if missing) and start the single-node SLURM; stop it at the end if this session started it."""
    if shutil.which("sbatch") is None and (os.geteuid() != 0 or shutil.which("apt-get") is None):
        _unavailable("sbatch not found and it cannot be installed here (needs root and apt-get)")
    was_up = subprocess.run(["bash", str(SLURM_SH), "status"], capture_output=True).returncode == 0
    res = subprocess.run(["bash", str(SLURM_SH), "up"], capture_output=True, text=True, timeout=600)
    if res.returncode == 3:
        _unavailable(res.stderr.strip())
    assert res.returncode == 0, f"ci/slurm.sh up failed:\n{res.stdout}\n{res.stderr}"
    yield
    if not was_up:
        subprocess.run(["bash", str(SLURM_SH), "down"], capture_output=True, timeout=60)


def _profile(path: Path) -> Path:
    """./slurm with this cluster's values: its one partition (a fake GPU) in the plugin's partition file, the
    profile's account expression (no $SBATCH_ACCOUNT here: the plugin submits without -A), squeue status (no
    accounting). The rules declare their GPUs and threads (the tiny config: 1 GPU, 1 thread)."""
    cfg = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    cfg.update({"jobs": 4, "latency-wait": 5, "slurm-status-command": "squeue",
                "slurm-init-seconds-before-status-checks": 2, "retries": 0, "keep-going": False})  # fmt: skip
    # the shipped account expression ($SBATCH_ACCOUNT is unset here: the plugin's sacct guess fails without accounting
    # and it submits without -A); this node's memory and a short default runtime
    cfg["default-resources"] = {"slurm_account": cfg["default-resources"]["slurm_account"], "mem_mb": 1000,
                                "runtime": 10}
    assert not {"set-resources", "set-threads"} & set(cfg), "the profile must not keep per-rule lists"
    path.mkdir(parents=True)
    partitions = path / "partitions.yaml"
    partitions.write_text(yaml.safe_dump({"partitions": {"debug": {"max_runtime": 60, "max_gpu": 1}}}))
    cfg["slurm-partition-config"] = str(partitions)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


#: The SLURM plugin checks its jobs' status 2 s after a submission (the profile's init-seconds), then 10 s later after
#: each check that finds no job finished, up to 180 s (hard-coded in snakemake-executor-plugin-slurm 2.x: on a real
#: cluster it spares slurmctld). In a chain of short jobs most of a run was that wait: a 4-s job seen finished 36 s
#: after its submission, 180 s for the tiny run's 7 jobs. The Snakemake process that submits here keeps the checks
#: at most STATUS_CHECK_CAP seconds apart; the jobs themselves run plain Snakemake. Polling is not what these tests
#: test (the results, limits, signals and resumes are), and a real cluster keeps the plugin's back-off.
STATUS_CHECK_CAP = 3
_CAPPED_STATUS_CHECKS = f"""
import sys
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
interval = RemoteExecutor.next_seconds_between_status_checks
RemoteExecutor.next_seconds_between_status_checks = interval.setter(
    lambda self, seconds: interval.fset(self, min(seconds, {STATUS_CHECK_CAP})))
from snakemake.cli import main
sys.argv[0] = "snakemake"
main()
"""


def _slurm_snakemake_cmd() -> list[str]:
    """Snakemake (``_snakemake_cmd``'s) whose status checks of SLURM jobs are at most STATUS_CHECK_CAP s apart."""
    return [sys.executable, "-c", _CAPPED_STATUS_CHECKS]


def _short_partition(name: str = "short", minutes: int = 1) -> None:
    """A partition ``name`` on the node whose MaxTime is ``minutes`` (created, or updated when it exists)."""
    exists = subprocess.run(["scontrol", "show", "partition", name], capture_output=True).returncode == 0
    partition = ["scontrol", "update" if exists else "create", f"PartitionName={name}", "Nodes=localhost",
                 f"MaxTime={minutes}", "State=UP"]  # fmt: skip
    res = subprocess.run(partition, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _scontrol_job(job_id: str) -> str:
    """``scontrol show job`` of one job (it takes one id)."""
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout


def test_tiny_run_on_slurm_equals_the_local_run(slurm, tiny_chain, tmp_path):
    work = tmp_path / "work"
    # this node has no CUDA: config/test.yaml's require_gpu: false lets the fake-GPU jobs run
    cfg = tiny_config(tmp_path / "slurm.yaml")
    cmd = ["timeout", "-k", "30", "540", *_slurm_snakemake_cmd(), "--snakefile", str(SNAKEFILE),
           "--directory", str(work), "--profile", str(_profile(tmp_path / "profile")), *TINY_TARGETS,
           "--configfile", str(cfg)]  # fmt: skip
    t0 = time.time()
    res = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    wall = time.time() - t0
    log = res.stdout
    assert res.returncode == 0, f"{log[-6000:]}\nslurmctld log: {Path('/tmp/slurmci/log/slurmctld.log')}"
    ids = set(re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+)", log))
    # prepare_uci, train_backbone, MC Dropout's two candidates and its choice, swag and the split's evaluate as sbatch
    # jobs; fetch and the reports run locally
    assert len(ids) >= 7, log[-4000:]
    print(f"SLURM: {len(ids)} sbatch jobs, {wall:.0f} s wall clock")

    jobs = [_scontrol_job(i) for i in sorted(ids)]  # finished jobs stay visible for MinJobAge (600 s)
    assert all("JobId=" in j for j in jobs), jobs
    gpu_jobs = [j for j in jobs if re.search(r"TresPerJob=gres(/|:)gpu:1", j)]
    # the backbone, MC Dropout's two candidates and its choice, SWAG (the rules declare them)
    assert len(gpu_jobs) == 5, "\n\n".join(jobs)[-3000:]
    assert all(re.search(r"NumCPUs=1\b", j) for j in gpu_jobs), "\n\n".join(gpu_jobs)[-3000:]

    ref = tiny_chain["work"]
    run = "results/uci/yacht/split0"
    for method in ("mc_dropout", "swag"):
        a, b = np.load(ref / run / method / "samples.npz"), np.load(work / run / method / "samples.npz")
        for key in a.files:  # bit for bit (the .npz container's zip timestamps aside)
            assert a[key].tobytes() == b[key].tobytes(), (method, key)
        ma, mb = (json.loads((d / run / method / "metrics.json").read_text()) for d in (ref, work))
        for m in (ma, mb):  # wall-clock times and the hashes of files that hold them differ by nature
            m.pop("seconds"), m.pop("provenance")
        assert ma == mb, method
    table = "results/tables/uci_master.csv"
    assert (ref / table).read_bytes() == (work / table).read_bytes()


def test_gpu_request_without_cuda_fails_clearly(tiny_chain, tmp_path):
    """A job given a GPU (here locally, by --set-resources) on a machine without CUDA stops with a clear error."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from conftest import copy_run
    from test_workflow import smk

    work = copy_run(tiny_chain, tmp_path / "w")
    target = "results/uci/yacht/split0/backbone/model.pt"
    cfg = tiny_config(tmp_path / "gpu.yaml", require_gpu=True)  # the rule declares its GPU (cluster.gpus_per_job)
    res = smk(work, target, "--forcerun", "train_backbone", configfile=cfg)
    assert res.returncode != 0
    # the cause (this torch is a CPU-only build) and the install line of a CUDA build; never "require_gpu: false",
    # which would train on the CPU for hours
    assert "requested 1 GPU(s) but torch sees no CUDA device" in res.stdout, res.stdout[-3000:]
    assert "(CPU-only build) cannot use the GPU; install the build that fits" in res.stdout, res.stdout[-3000:]
    assert "pip install --force-reinstall --no-deps torch==" in res.stdout and "require_gpu: false" not in res.stdout


# SLURM kills a 1-minute job 60-90 s after its start (it checks limits every ~30 s). The tiny backbone's training is
# counted to last ~120 s of CPU time on one thread of this machine, measured just before, so at least 120 s of wall
# time: past the first attempt's kill however quiet the machine is when the job runs (a fixed epoch count trained in
# 58 s on a fast CI machine, and a wall-clock probe slowed by the other test worker asked for 51 s of work: the kill
# came after the training, and nothing resumed); the second or third attempt ends it. A job that ends its work just
# after its limit is still marked TIMEOUT; its retry finds the training's completed state and only writes the
# outputs: retries leave room for that and for a loaded machine.
BACKBONE_SECONDS = 120


def _one_thread_seconds(work) -> float:
    """CPU seconds that ``work()`` takes on one torch thread (a SLURM job's). CPU time, not wall-clock time: the probe
    runs beside the other test worker's jobs, and a probe slowed by them asked for half the work, which a quieter
    moment then finished inside the 1-minute limit (2026-11-30); the job's own wall time is never below its CPU time."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.process_time()
        work()
        return time.process_time() - t0
    finally:
        torch.set_num_threads(threads)


def _backbone_epochs(split: Path, train: dict, seconds: float, scratch: Path) -> int:
    """How many epochs of the tiny configuration's backbone training on yacht (``split``: a finished run's split
    folder, for its prepared data; ``train``: the schedule; checkpointed as in the job, in ``scratch``) take
    ``seconds`` here."""
    from stochattn.experiments.uci import train_backbone

    model, probe = yaml.safe_load((REPO / "config" / "test.yaml").read_text())["model"], 300
    scratch.mkdir(parents=True, exist_ok=True)
    took = _one_thread_seconds(lambda: train_backbone(
        split / "prepared.npz", scratch / "model.pt", scratch / "meta.json", model=model,
        train={**train, "max_epochs": probe}, seed=0, device="cpu", progress=False, checkpoint=scratch / "fit.ckpt"))
    return int(seconds * probe / took)


def test_training_killed_at_its_time_limit_resumes_on_slurm(slurm, tiny_chain, tmp_path):
    """A queue whose MaxTime is 1 minute, a backbone training that takes longer: SLURM kills the job at its limit
    (TIMEOUT; SIGTERM saves the training state mid-epoch), Snakemake resubmits it (retries), the training resumes
    from the saved state and ends bit-identical to an uninterrupted local run of the same job."""
    import torch

    _short_partition()
    estimates = tmp_path / "runtime.yaml"  # the counted work: 2 minutes, twice the bound -> two attempts
    estimates.write_text(yaml.safe_dump({"train_backbone": {"yacht": 2}}))
    tiny_train = yaml.safe_load((REPO / "config" / "test.yaml").read_text())["dataset_overrides"]["yacht"]["train"]
    split = tiny_chain["work"] / "results/uci/yacht/split0"
    epochs = _backbone_epochs(split, tiny_train, BACKBONE_SECONDS, tmp_path / "probe")
    long = {"max_epochs": epochs, "patience": None}  # yacht's own schedule too (dataset_overrides)
    cfg = tiny_config(tmp_path / "resume.yaml", train=long, dataset_overrides={"yacht": {"train": long}},
                      cluster={"max_runtime_hours": 1 / 60}, runtime_estimates=str(estimates))  # fmt: skip
    target = "results/uci/yacht/split0/backbone/model.pt"
    reference = tmp_path / "local"
    # the uninterrupted reference, meanwhile on the local executor (one thread, as the SLURM job)
    ref_cmd = [*_snakemake_cmd(), "--snakefile", str(SNAKEFILE), "--directory", str(reference), "--cores", "1",
               target, "--configfile", str(cfg)]  # fmt: skip
    reference.mkdir()
    local = subprocess.Popen(ref_cmd, cwd=reference, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    profile = _profile(tmp_path / "profile")
    prof = yaml.safe_load((profile / "config.yaml").read_text())
    prof["retries"] = 5
    partitions = {"partitions": {"short": {"max_runtime": 1, "max_gpu": 1}}}
    (profile / "partitions.yaml").write_text(yaml.safe_dump(partitions))
    (profile / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    work = tmp_path / "work"
    cmd = ["timeout", "-k", "30", "900", *_slurm_snakemake_cmd(), "--snakefile", str(SNAKEFILE),
           "--directory", str(work), "--profile", str(profile), target, "--configfile", str(cfg)]  # fmt: skip
    t0 = time.time()
    res = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=960)
    log = res.stdout
    ref_out = local.communicate(timeout=900)[0]
    assert res.returncode == 0, log[-6000:]
    assert local.returncode == 0, ref_out[-4000:]

    # the backbone's attempts (Snakemake's job id of rule train_backbone), in submission order, and their states
    job = re.search(r"rule train_backbone:.*?jobid: (\d+)", log, re.S).group(1)
    attempts = [i for j, i in re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log) if j == job]
    shown = "\n\n".join(_scontrol_job(i) for i in attempts)
    backbone = re.findall(r"JobState=(\w+)", shown)
    print(f"SLURM jobs of train_backbone {attempts}: states {backbone}; {time.time() - t0:.0f} s")
    assert "TIMEOUT" in backbone and backbone[-1] == "COMPLETED", shown[-4000:]
    rule_log = (work / "logs/uci/yacht/split0/train_backbone.log").read_text()
    resumed = re.search(r"resuming from \S+: after epoch (\d+)", rule_log)
    # on a loaded machine the retry that resumed can itself pass its limit after the training ended; the next one then
    # finds the completed state and only writes the outputs (its log replaces the earlier attempts')
    completed = re.search(r"training already completed in \S+: best epoch \d+ of (\d+)", rule_log)
    assert (resumed and 0 < int(resumed.group(1)) < epochs) or (
        completed and int(completed.group(1)) == epochs and len(attempts) >= 3), rule_log[-3000:]  # fmt: skip
    print(f"resumed after epoch {resumed.group(1)} of {epochs}" if resumed else
          f"the training ended in attempt {len(attempts) - 1} of {len(attempts)}; the last one found it completed")
    # the job's cost counts its earlier attempts' training (saved in its checkpoint), not only the last attempt's
    from stochattn.resources import read_benchmarks

    record = json.loads((work / "results/benchmarks/train_backbone/uci/yacht/split0.attempts.json").read_text())
    (row,) = [r for r in read_benchmarks(work / "results/benchmarks") if r["rule"] == "train_backbone"]
    assert row["earlier_seconds"] == record["earlier_seconds"] > 0 and record["rule"] == "train_backbone"
    assert row["seconds"] == pytest.approx(row["attempt_seconds"] + record["earlier_seconds"])
    assert row["cpu_seconds"] > record["earlier_cpu_seconds"] > 0
    print(f"train_backbone: {row['attempt_seconds']:.0f} s in its last attempt, {record['earlier_seconds']:.0f} s of "
          f"training saved by the earlier ones ({record['earlier_cpu_seconds']:.0f} CPU-s)")

    a, b = (torch.load(d / target, weights_only=True)["state_dict"] for d in (reference, work))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = (json.loads((d / target).with_name("meta.json").read_text()) for d in (reference, work))
    for key in ("best_epoch", "epochs", "best_val_rmse", "val_rmse"):
        if key in ma:
            assert ma[key] == mb[key], key
    assert not list((work / target).parent.glob(".*resume*")), "the checkpoint is removed when the run succeeds"


# SLURM checks time limits every 30 s and sends a job's early signal at the first check at most 30 s before the time
# asked for: with --signal=USR1@5, 25-55 s into a 1-minute job, 85-115 s into its 2-minute retry (the runtime doubles
# on a retry). A SWAG phase of ~65 s of CPU time (so at least as much wall time) outlasts the first attempt's share,
# and the retry ends it (a machine that slows down meanwhile may need a third attempt: retries leave room for it). Its
# epochs are counted from this machine's speed, measured just before.
SWAG_SECONDS = 65


def _swag_epochs(split: Path, seconds: float) -> int:
    """How many epochs of the tiny configuration's SWAG phase on yacht (``split``: a finished backbone's folder; one
    thread, batch 32 as config.yaml's yacht, a checkpoint saved each epoch as in the job) take ``seconds`` here."""
    from stochattn.baselines.swag import fit_swag
    from stochattn.experiments.uci import load_backbone, load_prepared

    data = load_prepared(split / "prepared.npz")
    net = load_backbone(data, split / "backbone" / "model.pt")
    try:
        took = _one_thread_seconds(lambda: fit_swag(net, data["x_train"], data["y_train"], lr=1e-4, epochs=100, seed=0,
                                                    max_rank=2, batch_size=32, progress=False,
                                                    checkpoint=split / "speed.ckpt"))  # fmt: skip
    finally:
        (split / "speed.ckpt").unlink(missing_ok=True)
    return int(seconds * 100 / took)


_SAVED = re.compile(r"^(\S+ \S+) stochattn\.training WARNING received (SIGUSR1|SIGTERM) at epoch (\d+) step (\d+): "
                    r"state saved", re.M)  # fmt: skip
_RESUMED = re.compile(r"resuming from \S+: after epoch (\d+)(?: step (\d+))?")
# srun's report on the job step (Snakemake running the rule): its exit code; "task 0: User defined signal 1" when
# Snakemake died of the signal (the training may still have saved, but a job that is not training would be lost)
_STEP_EXIT = re.compile(r"^srun: error: \S+: task 0: Exited with exit code 1$", re.M)


def _snapshots(path: Path, done: threading.Event, out: list[str]) -> None:
    """The last content of each attempt's write of ``path`` (a rule log, truncated by each attempt of its job), read
    every 0.1 s until ``done``: a retry overwrites the log of the attempt before it."""
    while not done.wait(0.1):
        text = path.read_text() if path.exists() else ""
        if not text:
            continue
        if out and (len(text) >= len(out[-1]) and text.startswith(out[-1][:80])):
            out[-1] = text
        elif not out or text != out[-1]:
            out.append(text)


@needs_mirror  # fetches yacht offline
def test_swag_phase_signalled_before_its_time_limit_resumes_on_slurm(slurm, tmp_path):
    """The profile's early signal (slurm/config.yaml's ``--signal=USR1@<s>``, here 5 s before the limit of a
    1-minute job) in a SWAG phase: Snakemake ignores it (Snakefile), the phase saves its state (weights, optimizer,
    moments, deviations, trajectory, clock) and exits non-zero, Snakemake resubmits the job (retries, with twice the
    runtime), and the phase resumes exactly where it stopped: posterior and samples equal an uninterrupted local
    run's bit for bit. Prints the work lost."""
    import datetime

    import torch

    _short_partition("short2", 2)
    estimates = tmp_path / "runtime.yaml"  # 1 minute, 2 on the retry (cluster.max_runtime_hours)
    estimates.write_text(yaml.safe_dump({"run_method/swag": {"yacht": 1}}))
    run = "results/uci/yacht/split0/swag"
    targets = [f"{run}/samples.npz", f"{run}/posterior.pt"]
    reference, work = tmp_path / "local", tmp_path / "work"
    reference.mkdir()

    def configured(epochs):
        swag = {"epochs": epochs, "max_rank": 2, "grid": [{"lr": 1.0e-4}]}
        return tiny_config(tmp_path / "swag.yaml", methods=["swag"],
                           method_params={"swag": swag, "multiswag": {**swag, "components": 2}},
                           cluster={"max_runtime_hours": 2 / 60}, runtime_estimates=str(estimates))  # fmt: skip

    def local_run(cfg, *targets):
        cmd = [*_snakemake_cmd(), "--snakefile", str(SNAKEFILE), "--directory", str(reference), "--cores", "1",
               *targets, "--configfile", str(cfg)]  # fmt: skip
        return subprocess.Popen(cmd, cwd=reference, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    # the backbone on the local executor, shared by both runs (a copy, Snakemake's records with it): only the SWAG
    # job goes to SLURM; then the uninterrupted reference of the SWAG job, meanwhile, on the local executor
    backbone = local_run(configured(2), "results/uci/yacht/split0/backbone/model.pt")
    assert backbone.wait(timeout=300) == 0, backbone.communicate()[0][-4000:]
    epochs = _swag_epochs(reference / "results/uci/yacht/split0", SWAG_SECONDS)
    cfg = configured(epochs)  # the SWAG settings are no input of the backbone: it stays up to date
    shutil.copytree(reference, work, symlinks=True)
    local = local_run(cfg, *targets)

    repo_extra = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())["default-resources"]["slurm_extra"]
    assert re.fullmatch(r"'--signal=USR1@\d+'", repo_extra), repo_extra  # no B: (the steps, not the batch shell)
    profile = _profile(tmp_path / "profile")
    prof = yaml.safe_load((profile / "config.yaml").read_text())
    prof["retries"] = 5
    prof["default-resources"]["slurm_extra"] = re.sub(r"@\d+", "@5", repo_extra)
    (profile / "partitions.yaml").write_text(yaml.safe_dump({"partitions": {"short2": {"max_runtime": 2,
                                                                                      "max_gpu": 1}}}))  # fmt: skip
    (profile / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    cmd = ["timeout", "-k", "30", "540", *_slurm_snakemake_cmd(), "--snakefile", str(SNAKEFILE),
           "--directory", str(work), "--profile", str(profile), *targets, "--configfile", str(cfg)]  # fmt: skip
    logs, done = [], threading.Event()
    poll = threading.Thread(target=_snapshots, args=(work / "logs/uci/yacht/split0/swag.log", done, logs))
    poll.start()
    t0 = time.time()
    try:
        res = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=600)  # fmt: skip
    finally:
        done.set()
        poll.join()
    wall, log = time.time() - t0, res.stdout
    ref_out = local.communicate(timeout=600)[0]
    assert res.returncode == 0, log[-6000:]
    assert local.returncode == 0, ref_out[-4000:]

    attempts = re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+)", log)  # the SWAG job's only
    shown = [_scontrol_job(i) for i in attempts]
    states = [re.search(r"JobState=(\w+)", s).group(1) for s in shown]
    print(f"\nSLURM jobs of run_swag {attempts}: states {states}; {wall:.0f} s")
    assert len(attempts) >= 2 and states[-1] == "COMPLETED", "\n\n".join(shown)[-4000:]
    assert len(logs) == len(attempts), [t[:200] for t in logs]
    signals = []
    for k, (text, shown_k) in enumerate(zip(logs[:-1], shown[:-1])):
        saved = _SAVED.findall(text)
        assert len(saved) == 1, text[-3000:]
        at, signame, epoch, step = saved[0]
        signals.append(signame)
        if signame == "SIGUSR1":  # Snakemake in the job step outlived it (it ignores it): the script's failure ended it
            slurm_log = next((work / ".snakemake" / "slurm_logs").rglob(f"{attempts[k]}.log")).read_text()
            assert _STEP_EXIT.search(slurm_log), slurm_log[-3000:]
        resumed = _RESUMED.search(logs[k + 1])
        assert resumed, logs[k + 1][-3000:]
        # (epochs done, steps into the next): a stop "at epoch 5 step 3" and the resume "after epoch 5 step 3" are
        # (4, 3); a stop at an epoch's end "at epoch 6 step 0" and the resume "after epoch 5" are (5, 0)
        done_, into = resumed.groups()
        assert (int(epoch) - 1, int(step)) == ((int(done_), 0) if into is None else (int(done_) - 1, int(into)))
        saved_at = datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        started, ended = (datetime.datetime.fromisoformat(re.search(rf"{key}=(\S+)", shown_k).group(1)).timestamp()
                          for key in ("StartTime", "EndTime"))  # fmt: skip
        limit = 60 * int(re.search(r"TimeLimit=(?:\d+-)?(\d+):(\d+):\d+", shown_k).group(2))
        where = f"epoch {epoch} step {step}" if step != "0" else f"the end of epoch {int(epoch) - 1}"
        print(f"attempt {k + 1} ({states[k]}, limit {limit} s): {signame} {saved_at - started:.0f} s after its start, "
              f"saved at {where} (of {epochs} epochs) and resumed there by attempt {k + 2}: "
              f"training lost 0 s; the job ended {max(0.0, ended - saved_at):.0f} s after the save (its teardown; "
              f"SLURM's times: whole seconds), {started + limit - ended:.0f} s before its limit")

    a, b = np.load(reference / targets[0]), np.load(work / targets[0])
    assert all(a[key].tobytes() == b[key].tobytes() for key in a.files)
    a, b = (torch.load(d / targets[1], map_location="cpu", weights_only=True)["swag"] for d in (reference, work))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)
    print(f"moments equal the local run's: n_collected {b['n_collected']}, mean, second moment and deviations "
          f"bit for bit")
    assert not list((work / run).glob(".*resume*")), "the checkpoints are removed when the run succeeds"


def test_preflight_names_the_jobs_a_short_partition_cannot_run(slurm, tmp_path):
    """`stochattn preflight` on the paper protocol (config/config.yaml) with a profile whose partition file believes
    `short` allows 24 h, while SLURM's MaxTime there is 1 minute: it reads the partitions from SLURM, prints the plan
    and exits 1 naming the CPU jobs sent to `short` (the GPU jobs go to `debug`, whose node has fewer CPUs than
    their threads)."""
    _short_partition()
    profile = _profile(tmp_path / "profile")
    prof = yaml.safe_load((profile / "config.yaml").read_text())
    prof["retries"] = 2  # the paper's long trainings resume over attempts (as ./slurm)
    (profile / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    (profile / "partitions.yaml").write_text(yaml.safe_dump({"partitions": {
        "short": {"max_runtime": 1440, "max_gpu": 0}, "debug": {"max_runtime": 1440, "max_gpu": 1}}}))  # fmt: skip
    cmd = [sys.executable, "-m", "stochattn.cli", "preflight", "--profile", str(profile), "-d",
           str(tmp_path / "work"), "--probe-wait", "30"]  # fmt: skip
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert re.search(r"^short\s+1 min\s+1\s", res.stdout, re.M), res.stdout[-2000:]  # SLURM's MaxTime
    assert re.search(r"^debug\s+unlimited\s+1\s", res.stdout, re.M), res.stdout[-2000:]
    assert re.search(r"^  prepare_uci \(145 jobs; partition short: runtime \d+ min > MaxTime 1 min\): "
                     r"prepare_uci\(dataset=\w+, split=\d+\)", res.stderr, re.M), res.stderr[-3000:]  # fmt: skip
    assert re.search(r"^  train_backbone \(146 jobs; partition debug: 4 threads > \d CPUs per node\)", res.stderr,
                     re.M) or os.cpu_count() >= 4, res.stderr[-3000:]  # fmt: skip
    assert "fetch_uci" not in res.stderr  # local rules run in Snakemake itself, not on a partition
