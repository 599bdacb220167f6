"""stochattn.preflight without a cluster: SLURM's time and Gres formats, the plan from Snakemake's DAG, the checks of
a job against a partition, of the account and of the torch build against the GPU nodes, and the whole screen against
fake SLURM commands, and where the paper protocol's jobs go under `--profile slurm` (the real-SLURM run is in
test_slurm.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stochattn.cuda_builds import TorchBuild, capability_of, node_problems
from stochattn.preflight import (LOCAL, Job, Partition, _gres_gpus, _reason_groups, check_account, parse_slurm_time,
                                 unschedulable)  # fmt: skip

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, minutes", [("UNLIMITED", None), ("30", 30), ("30:59", 30), ("02:00:00", 120),
                                           ("1-00:00:00", 1440), ("2-12", 3600), ("1-01:30", 1530)])  # fmt: skip
def test_slurm_times(text, minutes):
    assert parse_slurm_time(text) == minutes


@pytest.mark.parametrize("gres, expected", [("gpu:1", (1, ())), ("gpu:v100:4(S:0-1)", (4, ("v100",))),
                                            ("gpu:a100:2,gpu:h100:2", (4, ("a100", "h100"))), ("(null)", (0, ())),
                                            ("shard:8", (0, ()))])  # fmt: skip
def test_gres_gpus(gres, expected):
    assert _gres_gpus(gres) == expected


def test_a_job_is_checked_against_its_partition():
    jobs = [Job("train_backbone", "experiment=uci, dataset=yacht, split=0", 4, {"mem_mb": 2596, "runtime": 44,
                                                                                "gpu": 1}),
            Job("fetch_uci", "dataset=yacht", 1, {"mem_mb": 1000, "runtime": 30})]  # fmt: skip
    assert jobs[0].label() == "train_backbone(experiment=uci, dataset=yacht, split=0)"
    gpu = Partition("gpu", 40, 1, ("v100",), 2000, 8, "UP")
    bad = unschedulable(jobs, {0: "gpu", 1: LOCAL}, {"gpu": gpu})
    assert [(j.rule, why) for j, why in bad] == [
        ("train_backbone", "partition gpu: runtime 44 min > MaxTime 40 min; mem 2596 MB > 2000 MB per node")]
    assert unschedulable(jobs, {0: "nowhere", 1: None}, {})[0][1] == "partition 'nowhere' does not exist in SLURM"
    assert unschedulable([Job("x", "", 16, {"gpu": 2})], {0: "gpu"}, {"gpu": gpu})[0][1] == (
        "partition gpu: 2 GPU(s) > 1 per node; 16 threads > 8 CPUs per node")


def test_the_reason_shown_is_that_of_the_largest_request():
    """Several jobs of a rule over MaxTime: the line names the largest runtime, not the alphabetically last."""
    jobs = [Job("era5_figure", f"name={i}", 1, {"runtime": r}) for i, r in enumerate((912, 1440, 95))]
    bad = [(j, f"partition cpu: runtime {j.runtime} min > MaxTime 60 min") for j in jobs]
    [(rule, group, why)] = _reason_groups(bad)
    assert rule == "era5_figure" and len(group) == 3 and why == "partition cpu: runtime 1440 min > MaxTime 60 min"


@pytest.fixture(scope="module")
def slurm_plan(tmp_path_factory) -> dict:
    """`snakemake --profile slurm -n` as a user types it (cwd = repository root) on the paper protocol, through
    plan_jobs: its jobs and local rules (built once for the tests below: ~35 CPU-s of Snakemake's DAG)."""
    return _plan_in_subprocess(["--profile", "slurm", "--directory", str(tmp_path_factory.mktemp("plan"))])


def test_the_plan_comes_from_snakemakes_dag(slurm_plan):
    """plan_jobs reads the jobs and the local rules from Snakemake's own DAG under the SLURM profile (no text
    parsing): the paper protocol's rules with their evaluated resources; era5_figure, whose Snakefile block follows a
    local rule, is a job; the fetch rules that download on the login node are local; era5_fetch, which links and
    hashes ~129 GB, is a job."""
    plan = slurm_plan
    rules = {j["rule"] for j in plan["jobs"]}
    assert {"train_backbone", "era5_figure", "era5_fetch"} <= rules
    assert {"fetch_uci", "fetch_ett", "ett_fetch_checkpoint", "era5_fetch_checkpoint", "all"} <= set(plan["local"])
    assert not {"train_backbone", "download", "prepare_uci", "era5_figure", "era5_fetch"} & set(plan["local"])
    train = next(j for j in plan["jobs"] if j["rule"] == "train_backbone")
    assert train["resources"]["gpu"] == 1 and train["threads"] == 4 and train["resources"]["runtime"] > 0
    assert "Using profiles slurm and workflow specific profile" in plan["log"]


def test_paper_protocol_under_the_slurm_profile_puts_every_model_job_on_a_gpu(slurm_plan):
    """`snakemake --profile slurm -n` as a user types it (cwd = repository root) on the paper protocol
    (config/config.yaml): every job of a rule that trains or samples asks for the configured GPU and threads and the
    plugin's partition scorer (slurm/partitions.yaml) sends it to the GPU partition; every other job stays on the CPU
    partition with one thread; no runtime request exceeds cluster.max_runtime_hours.

    The model rules come from the workflow: those whose jobs declare a GPU, and every rule derived from one with
    `use rule A as B` (a `with: resources:` block replaces the parent's, the drift this guards against). A model
    rule that declares nothing fails its first job in every tiny run (config/test.yaml: check_model_job)."""
    import yaml
    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

    plan = slurm_plan  # Snakemake's own DAG
    assert re.search(r"Using profiles? slurm and workflow specific profile", plan["log"]), plan["log"][:500]
    jobs = [Job(j["rule"], "", j["threads"], j["resources"]) for j in plan["jobs"]]
    cluster = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["cluster"]
    declared = {j.rule for j in jobs if j.gpus > 0}
    derived = {b for f in (REPO / "rules").glob("*.smk")
               for a, b in re.findall(r"^use rule (\w+) as (\w+)", f.read_text(), re.M) if a in declared}  # fmt: skip
    model_rules = declared | derived
    assert {"train_backbone", "ett_adapt", "ett_swag", "run_swag", "era5_swag", "ett_multiswag_member"} <= model_rules
    partitions = read_partition_file(REPO / "slurm" / "partitions.yaml")
    gpu_partitions = {p.name for p in partitions if p.limits.max_gpu > 0}

    class _Log:
        def info(self, *a): pass
        debug = warning = info

    wrong = []
    for job in jobs:
        model = job.rule in model_rules
        partition = get_best_partition(partitions, job, _Log())
        ok = (job.gpus == cluster["gpus_per_job"] and partition in gpu_partitions
              and job.threads == cluster["gpu_threads"]) if model else (
              "gpu" not in job.resources and partition not in gpu_partitions and job.threads == 1)  # fmt: skip
        ok &= job.runtime <= 60 * cluster["max_runtime_hours"]
        if not ok:
            wrong.append((job.rule, job.threads, partition, job.resources))
    assert not wrong, f"{len(wrong)} misplaced jobs, e.g. {wrong[:5]}"
    assert len(jobs) > 1000


def _plan_in_subprocess(args: list[str]) -> dict:
    """plan_jobs in its own interpreter (it runs Snakemake in-process), as JSON."""
    code = ("import json, sys; from stochattn.preflight import plan_jobs; p = plan_jobs(sys.argv[2:], sys.argv[1]); "
            "print(json.dumps({'jobs': [dict(rule=j.rule, threads=j.threads, resources=j.resources) for j in p.jobs],"
            " 'local': sorted(p.local), 'log': p.log}, default=str))")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code, str(REPO), *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


# ------------------------------------------------------------------------------------------------------------------
# the torch build against a node's GPU and driver
# ------------------------------------------------------------------------------------------------------------------
CUDA13 = TorchBuild("2.13.0", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
CU126 = "https://download.pytorch.org/whl/cu126"


@pytest.mark.parametrize("name, cap", [("NVIDIA H100 80GB HBM3", (9, 0)), ("Tesla V100-SXM2-32GB", (7, 0)),
                                       ("v100", (7, 0)), ("a100_80g", (8, 0)), ("NVIDIA A10", (8, 6)),
                                       ("NVIDIA L4", (8, 9)), ("NVIDIA L40S", (8, 9)), ("8.6", (8, 6)),
                                       ("NVIDIA GeForce RTX 5090", (12, 0)), ("mystery", None)])  # fmt: skip
def test_capability_of_gpu_names(name, cap):
    assert capability_of(name) == cap


def test_node_problems_name_the_build_that_fits():
    assert node_problems(CUDA13, "NVIDIA H100 80GB HBM3", "580.95.05") == []
    old = node_problems(CUDA13, "NVIDIA A100-SXM4-80GB", "535.104.05")
    assert len(old) == 1 and "needs an NVIDIA driver >= 580.65.06 (CUDA 13); the node's driver is 535.104.05" in old[0]
    assert f"pip install --force-reinstall --no-deps torch==2.13.0 --index-url {CU126}" in old[0]
    volta = node_problems(CUDA13, "v100", None)
    assert len(volta) == 1 and "has no kernels for the v100 (compute capability 7.0)" in volta[0] and CU126 in volta[0]
    cpu = node_problems(TorchBuild("2.13.0+cpu", None, ()), "NVIDIA H100 80GB HBM3", "580.95.05")
    assert "CPU-only build" in cpu[0] and "cu130" in cpu[0] and "require_gpu" not in cpu[0]
    ancient = node_problems(CUDA13, "NVIDIA A100-SXM4-80GB", "470.57.02")
    assert "no current torch build runs on driver 470.57.02" in ancient[0] and "pip install" not in ancient[0]
    blackwell_old = node_problems(CUDA13, "NVIDIA B200", "570.86.10")
    assert "cu128" in blackwell_old[0]
    assert node_problems(CUDA13, None, None) == []  # nothing known: nothing claimed


# ------------------------------------------------------------------------------------------------------------------
# the whole screen against fake SLURM commands
# ------------------------------------------------------------------------------------------------------------------
def _fake_slurm(bin_dir: Path, *, partitions: dict, assoc: str | None, default_account: str = "",
                recent_accounts: str = "", probe: str | None = None, probe_error: str = "") -> Path:
    """scontrol / sinfo / sacctmgr / sacct / srun answering as a cluster would. ``partitions``: {name: (MaxTime,
    Gres, CPUs, memory MB)} (the first is the default); ``assoc``: sacctmgr's ``account|partition`` lines (None: no
    accounting); ``probe``: the csv srun's nvidia-smi prints (None: the probe job fails with ``probe_error``)."""
    bin_dir.mkdir(parents=True)
    table = "\n".join(f"PartitionName={n} MaxTime={t} State=UP AllowAccounts=ALL" for n, (t, *_) in partitions.items())
    nodes = "".join(f'  *"-p {n} "*) echo "node-{n}|{c}|{m}|{g}";;\n' for n, (t, g, c, m) in partitions.items())
    scripts = {
        "scontrol": f'cat <<"X"\n{table}\nX\n',
        "sinfo": f'case "$*" in\n{nodes}  *"%P"*) echo "{next(iter(partitions))}*";;\nesac\n',
        "sacctmgr": ('echo "sacctmgr: error: Problem talking to the database: Connection refused" >&2; exit 1\n'
                     if assoc is None else f'case "$*" in\n  *associations*) printf "{assoc}\\n";;\n'
                     f'  *defaultaccount*) echo "{default_account}";;\nesac\n'),  # fmt: skip
        "sacct": f'echo "{recent_accounts}"\n',
        "srun": f'cat <<"X"\n{probe}\nX\n' if probe is not None else f'echo "{probe_error}" >&2; exit 1\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


# the login node's environment: PyPI's CUDA 13 build of torch 2.13 (this machine has the CPU build)
_AS_CUDA13 = ("import sys, stochattn.cuda_builds as c; c.torch_build = lambda: c.TorchBuild('2.13.0', '13.0', "
              "('sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120')); from stochattn.preflight import main; "
              "sys.exit(main(sys.argv[1:]))")  # fmt: skip

CLUSTERS = {
    "no_account": dict(partitions={"cpu": ("1-00:00:00", "(null)", 32, 192000),
                                   "gpu": ("1-00:00:00", "gpu:h100:4", 32, 512000)},
                       assoc="proj-a|\nproj-b|", probe="NVIDIA H100 80GB HBM3, 580.95.05, 9.0"),
    "old_driver": dict(partitions={"cpu": ("1-00:00:00", "(null)", 32, 192000),
                                   "gpu": ("1-00:00:00", "gpu:a100:4", 32, 512000)},
                       assoc="proj-a|", default_account="proj-a",
                       probe="NVIDIA A100-SXM4-80GB, 535.104.05, 8.0\nNVIDIA A100-SXM4-80GB, 535.104.05, 8.0"),
    "v100": dict(partitions={"cpu": ("1-00:00:00", "(null)", 32, 192000),
                             "gpu": ("1-00:00:00", "gpu:v100:4", 32, 384000)},
                 assoc=None, probe=None, probe_error="srun: error: Unable to allocate resources: Requested nodes are "
                                                     "busy"),  # fmt: skip
    "short_limit": dict(partitions={"cpu": ("1-00:00:00", "(null)", 32, 192000),
                                    "gpu": ("00:15:00", "gpu:h100:4", 32, 512000)},
                        assoc="proj-a|", recent_accounts="proj-a", probe="NVIDIA H100 80GB HBM3, 580.95.05, 9.0"),
}


@pytest.fixture(scope="module")
def fake_profile(tmp_path_factory):
    """./slurm with a cpu and a gpu partition in its partition file (as a user edits it)."""
    import yaml

    folder = tmp_path_factory.mktemp("profile")
    cfg = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    (folder / "partitions.yaml").write_text(yaml.safe_dump({"partitions": {
        "cpu": {"max_runtime": 1440, "max_gpu": 0}, "gpu": {"max_runtime": 1440, "max_gpu": 4}}}))  # fmt: skip
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return folder


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_preflight_against_a_cluster(cluster, fake_profile, tmp_path):
    """`stochattn preflight` on the tiny configuration (its model jobs ask for a GPU) against fake SLURM commands:
    each cluster's problem is named with its fix and the exit status is 1."""
    from conftest import tiny_config

    cfg = tiny_config(tmp_path / "tiny.yaml")
    bin_dir = _fake_slurm(tmp_path / "bin", **CLUSTERS[cluster])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "USER": "alice"}
    env.pop("SBATCH_ACCOUNT", None)
    cmd = [sys.executable, "-c", _AS_CUDA13, "--profile", str(fake_profile), "--configfile", str(cfg), "-d",
           str(tmp_path / "work"), "--probe-wait", "5"]  # fmt: skip
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    print(f"--- {cluster} ---\n" + out[out.index("partition      MaxTime"):])
    assert res.returncode == 1, out[-3000:]
    if cluster == "no_account":
        assert "account: no account: SLURM knows no default account for alice" in out
        assert "export SBATCH_ACCOUNT=<account>" in out and "(your accounts: proj-a, proj-b)" in out
        assert "gpu: partition gpu: NVIDIA H100 80GB HBM3 (compute capability 9.0), driver 580.95.05 [probe]" in out
    elif cluster == "old_driver":
        assert "account: proj-a (your default account (sbatch without -A))" in out
        assert ("needs an NVIDIA driver >= 580.65.06 (CUDA 13); the node's driver is 535.104.05; install the build "
                f"that fits, in the workflow's environment: pip install --force-reinstall --no-deps torch==2.13.0 "
                f"--index-url {CU126}") in out  # fmt: skip
    elif cluster == "v100":
        assert "SLURM keeps no accounts here" in out
        assert "driver unknown, the probe job did not run (srun: error: Unable to allocate resources" in out
        assert "has no kernels for the v100 (compute capability 7.0)" in out and CU126 in out
    else:
        assert "account: proj-a (the account of your most recent job" in out
        # MC Dropout's trained candidate does not fit; its candidate at the backbone's own rates (the backbone's
        # samples only) and the choosing run_method job do
        line = re.search(r"^  uci_candidate \(2 jobs; partition gpu: runtime 2\d min > MaxTime 15 min\): (.*)$", out,
                         re.M)  # fmt: skip
        assert line and "candidate=1" in line.group(1) and "candidate=0" not in line.group(1), out[-3000:]
        assert re.search(r"^  train_backbone \(2 jobs; partition gpu: runtime 2\d min", out, re.M), out[-3000:]
        assert "  run_method (" not in out, out[-3000:]
        assert "\ngpu: " not in out.split("preflight: nothing should be submitted yet:")[1]  # the build fits


def test_an_account_outside_the_users_associations_is_refused(tmp_path, monkeypatch):
    bin_dir = _fake_slurm(tmp_path / "bin", partitions={"gpu": ("1-00:00:00", "gpu:h100:4", 32, 512000)},
                          assoc="proj-a|cpu\nproj-b|")  # fmt: skip
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    gpu = Partition("gpu", 1440, 4, ("h100",), 512000, 32, "UP")
    assert check_account("proj-b", {"gpu": gpu}, "alice").problems == []
    wrong = check_account("proj-c", {"gpu": gpu}, "alice").problems
    assert len(wrong) == 1 and "account 'proj-c' is not one of alice's (proj-a, proj-b)" in wrong[0]
    only_cpu = check_account("proj-a", {"gpu": gpu}, "alice").problems
    assert only_cpu == ["account 'proj-a' has no association on partition gpu (only cpu); export "
                        "SBATCH_ACCOUNT=<account> before snakemake (the profile passes it on), or set "
                        "default-resources: slurm_account in the profile"]  # fmt: skip
    denied = Partition("gpu", 1440, 4, ("h100",), 512000, 32, "UP", allow_accounts=("proj-x",))
    assert "partition gpu does not accept account 'proj-b'" in check_account("proj-b", {"gpu": denied}, "alice"
                                                                               ).problems[0]  # fmt: skip
