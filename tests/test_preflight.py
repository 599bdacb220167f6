"""stochattn.preflight without a cluster: SLURM's time and Gres formats, the dry run's job blocks, local rules, and
the checks of a job against a partition (the real-SLURM run is in test_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stochattn.preflight import (LOCAL, Job, Partition, _gres_gpus, dry_run_jobs, local_rules, parse_slurm_time,
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


DRY_RUN = """
rule train_backbone:
    input: results/uci/yacht/split0/prepared.npz
    jobid: 12
    wildcards: experiment=uci, dataset=yacht, split=0
    threads: 4
    resources: tmpdir=/tmp, mem_mb=2596, mem=2.6 GB, runtime=44, gpu=1

rule fetch_uci:
    output: results/data/uci/yacht
    jobid: 3
    wildcards: dataset=yacht
    resources: tmpdir=/tmp, mem_mb=1000, runtime=30
"""


def test_dry_run_blocks_and_checks_against_a_partition():
    jobs = dry_run_jobs(DRY_RUN)
    assert [(j.rule, j.threads, j.gpus, j.runtime, j.mem_mb) for j in jobs] == [
        ("train_backbone", 4, 1, 44, 2596), ("fetch_uci", 1, 0, 30, 1000)]  # fmt: skip
    assert jobs[0].label() == "train_backbone(experiment=uci, dataset=yacht, split=0)"
    gpu = Partition("gpu", 40, 1, ("v100",), 2000, 8, "UP")
    bad = unschedulable(jobs, {0: "gpu", 1: LOCAL}, {"gpu": gpu})
    assert [(j.rule, why) for j, why in bad] == [
        ("train_backbone", "partition gpu: runtime 44 min > MaxTime 40 min; mem 2596 MB > 2000 MB per node")]
    assert unschedulable(jobs, {0: "nowhere", 1: None}, {})[0][1] == "partition 'nowhere' does not exist in SLURM"
    assert unschedulable([Job("x", "", 16, {"gpu": 2})], {0: "gpu"}, {"gpu": gpu})[0][1] == (
        "partition gpu: 2 GPU(s) > 1 per node; 16 threads > 8 CPUs per node")


def test_local_rules_are_read_from_the_workflow():
    local = local_rules(REPO)
    assert {"fetch_uci", "fetch_ett", "ett_fetch_checkpoint", "all"} <= local
    assert not {"train_backbone", "download", "prepare_uci"} & local
