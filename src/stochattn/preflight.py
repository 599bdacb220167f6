"""``stochattn preflight``: the plan of a configuration under a cluster profile, checked against the cluster before
anything is submitted.

One screen: jobs per rule with their GPUs, threads, longest runtime and peak memory requests; GPU-hours (the
runtime requests, i.e. the counted work at the configured speed factor); the longest job against
``cluster.max_runtime_hours``; the disk the data, ERA5 shards and results need (:mod:`stochattn.staging`). Where
SLURM answers, every partition a job is sent to (the SLURM plugin's own choice from the profile's partition file,
else the job's ``slurm_partition`` or the default partition) is read from ``scontrol show partition`` and ``sinfo``
(MaxTime, GPUs per node with their type, memory and CPUs per node), and every job that could not run there is named;
the exit status is then 1.

    dry_run_jobs(text)            the jobs of ``snakemake -n``'s output
    slurm_partitions(names)       {name: Partition} from scontrol / sinfo
    unschedulable(jobs, ...)      the jobs a partition cannot run, each with the reason
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stochattn.extras import requires

__all__ = ["Job", "Partition", "dry_run_jobs", "parse_slurm_time", "slurm_partitions", "place", "unschedulable",
           "main"]  # fmt: skip


@dataclass
class Job:
    """One job of a dry run: its rule, wildcards, threads and resources (numbers as int)."""

    rule: str
    wildcards: str
    threads: int
    resources: dict[str, Any]

    # what the SLURM plugin's partition scorer reads of a job
    @property
    def name(self) -> str:
        return self.rule

    @property
    def gpus(self) -> int:
        from stochattn.provenance import _gpu_count

        return _gpu_count(self.resources.get("gpu", 0))

    @property
    def runtime(self) -> int:
        return int(self.resources.get("runtime", 0))

    @property
    def mem_mb(self) -> int:
        return int(self.resources.get("mem_mb", 0))

    def label(self) -> str:
        return f"{self.rule}({self.wildcards})" if self.wildcards else self.rule


def dry_run_jobs(text: str) -> list[Job]:
    """The jobs of ``snakemake -n``'s output (its per-job blocks: ``rule X:``, ``wildcards:``, ``threads:``,
    ``resources:``)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        m = re.match(r"(?:local)?rule (\w+):", block)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        if m and res:
            t = re.search(r"^\s+threads: (\d+)", block, re.M)
            w = re.search(r"^\s+wildcards: (.*)$", block, re.M)
            resources = {k: int(v) if v.isdigit() else v
                         for k, v in (kv.split("=", 1) for kv in res.group(1).split(", ") if "=" in kv)}  # fmt: skip
            jobs.append(Job(m.group(1), w.group(1) if w else "", int(t.group(1)) if t else 1, resources))
    return jobs


# ------------------------------------------------------------------------------------------------------------------
# SLURM
# ------------------------------------------------------------------------------------------------------------------
@dataclass
class Partition:
    """What SLURM says of one partition: MaxTime in minutes (None: unlimited), and per node the most GPUs (with
    their types), memory (MB) and CPUs."""

    name: str
    max_minutes: int | None
    gpus_per_node: int
    gpu_types: tuple[str, ...]
    mem_per_node_mb: int
    cpus_per_node: int
    state: str


def parse_slurm_time(value: str) -> int | None:
    """Minutes of a SLURM time (``UNLIMITED``, ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``); None for
    unlimited. Partial minutes round down (a job must fit)."""
    value = value.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        return int(days) * 1440 + parts[0] * 60 + parts[1]
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0]  # MM:SS
    return parts[0] * 60 + parts[1]


def _gres_gpus(gres: str) -> tuple[int, tuple[str, ...]]:
    """(GPU count, GPU types) of a node's Gres string, e.g. ``gpu:v100:4(S:0-1)`` or ``gpu:2,shard:4``."""
    count, types = 0, []
    for item in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", item).split(":")
        if fields[0] != "gpu" or len(fields) < 2:
            continue
        n = fields[-1]
        count += int(n) if n.isdigit() else 1
        if len(fields) == 3:
            types.append(fields[1])
    return count, tuple(types)


class SlurmUnavailable(RuntimeError):
    """SLURM does not answer here (no scontrol, or no controller)."""


def slurm_partitions(names: Sequence[str] | None = None) -> dict[str, Partition]:
    """{name: Partition} for ``names`` (None: every partition) from ``scontrol show partition -o`` and ``sinfo``;
    raises :class:`SlurmUnavailable` where SLURM does not answer."""
    if shutil.which("scontrol") is None:
        raise SlurmUnavailable("no scontrol on this machine")
    out = subprocess.run(["scontrol", "show", "partition", "-o"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SlurmUnavailable(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "scontrol failed")
    parts: dict[str, Partition] = {}
    for line in out.stdout.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        name = fields.get("PartitionName")
        if not name or (names is not None and name not in names):
            continue
        parts[name] = Partition(name, parse_slurm_time(fields.get("MaxTime", "UNLIMITED")), 0, (), 0, 0,
                                fields.get("State", "?"))  # fmt: skip
    for name, part in parts.items():
        nodes = subprocess.run(["sinfo", "-h", "-N", "-p", name, "-o", "%N|%c|%m|%G"], capture_output=True, text=True,
                               timeout=60)  # fmt: skip
        types: set[str] = set()
        for row in nodes.stdout.splitlines():
            _, cpus, mem, gres = (row.split("|") + ["", "", ""])[:4]
            n, t = _gres_gpus(gres)
            part.gpus_per_node = max(part.gpus_per_node, n)
            types.update(t)
            part.mem_per_node_mb = max(part.mem_per_node_mb, int(re.sub(r"\D", "", mem) or 0))
            part.cpus_per_node = max(part.cpus_per_node, int(re.sub(r"\D", "", cpus) or 0))
        part.gpu_types = tuple(sorted(types))
    return parts


def default_partition() -> str | None:
    """SLURM's default partition (``sinfo`` marks it with ``*``)."""
    if shutil.which("sinfo") is None:
        return None
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60).stdout.split()
    return next((p.rstrip("*") for p in out if p.endswith("*")), None)


LOCAL = "(local)"
"""The placement of a local rule's job: it runs in the Snakemake process itself (the login node)."""


def local_rules(workflow_dir: Path) -> set[str]:
    """The rules of the workflow in ``workflow_dir`` that declare ``localrule: True`` (the dry run does not say)."""
    names: set[str] = set()
    for path in [workflow_dir / "Snakefile", *sorted((workflow_dir / "rules").glob("*.smk"))]:
        if path.is_file():
            for block in re.split(r"\n(?=\s*rule \w+:)", path.read_text()):
                m = re.match(r"\s*rule (\w+):", block)
                if m and re.search(r"^\s+localrule: True", block, re.M):
                    names.add(m.group(1))
    return names


def place(jobs: Sequence[Job], partition_file: Path | None, local: set[str] = frozenset()) -> dict[int, str | None]:
    """{job index: partition}: :data:`LOCAL` for the rules in ``local``, else the SLURM plugin's choice from
    ``partition_file`` (its ``get_best_partition``), else the job's ``slurm_partition`` resource, else SLURM's
    default partition."""
    chosen: dict[int, str | None] = {}
    fallback = default_partition()
    partitions = None
    if partition_file is not None:
        with requires("workflow"):
            from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

        partitions = read_partition_file(partition_file)

    class _Quiet:
        def info(self, *a: Any) -> None:
            pass

        debug = warning = info

    for i, job in enumerate(jobs):
        if job.rule in local:
            chosen[i] = LOCAL
        elif "slurm_partition" in job.resources:
            chosen[i] = str(job.resources["slurm_partition"])
        elif partitions is not None:
            chosen[i] = get_best_partition(partitions, job, _Quiet())
        else:
            chosen[i] = fallback
    return chosen


def unschedulable(jobs: Sequence[Job], placement: Mapping[int, str | None],
                  partitions: Mapping[str, Partition]) -> list[tuple[Job, str]]:  # fmt: skip
    """Every job its partition cannot run, with the reason (no partition, unknown to SLURM, runtime over MaxTime,
    more GPUs / memory / CPUs than any of its nodes has)."""
    bad = []
    for i, job in enumerate(jobs):
        name = placement.get(i)
        if name == LOCAL:
            continue
        if name is None:
            bad.append((job, "no partition of the profile's partition file fits it"))
            continue
        part = partitions.get(name)
        if part is None:
            bad.append((job, f"partition {name!r} does not exist in SLURM"))
            continue
        why = []
        if part.max_minutes is not None and job.runtime > part.max_minutes:
            why.append(f"runtime {job.runtime} min > MaxTime {part.max_minutes} min")
        if job.gpus > part.gpus_per_node:
            why.append(f"{job.gpus} GPU(s) > {part.gpus_per_node} per node")
        if part.mem_per_node_mb and job.mem_mb > part.mem_per_node_mb:
            why.append(f"mem {job.mem_mb} MB > {part.mem_per_node_mb} MB per node")
        if part.cpus_per_node and job.threads > part.cpus_per_node:
            why.append(f"{job.threads} threads > {part.cpus_per_node} CPUs per node")
        if why:
            bad.append((job, f"partition {name}: " + "; ".join(why)))
    return bad


# ------------------------------------------------------------------------------------------------------------------
# the screen
# ------------------------------------------------------------------------------------------------------------------
def rule_table(jobs: Sequence[Job], placement: Mapping[int, str | None]) -> str:
    """One line per rule: jobs, GPUs and threads per job, partitions, longest runtime (h), peak memory (GB)."""
    by_rule: dict[str, list[int]] = collections.defaultdict(list)
    for i, job in enumerate(jobs):
        by_rule[job.rule].append(i)
    lines = [f"{'rule':32s} {'jobs':>5s} {'gpu':>4s} {'thr':>4s} {'partition':>12s} {'max h':>6s} {'mem GB':>7s}"]
    for rule, idx in sorted(by_rule.items(), key=lambda kv: -max(jobs[i].runtime for i in kv[1])):
        js = [jobs[i] for i in idx]
        parts = ",".join(sorted({str(placement.get(i)) for i in idx}))
        lines.append(f"{rule:32s} {len(js):5d} {max(j.gpus for j in js):4d} {max(j.threads for j in js):4d} "
                     f"{parts:>12s} {max(j.runtime for j in js) / 60:6.1f} {max(j.mem_mb for j in js) / 1000:7.1f}")
    return "\n".join(lines)


def _profile_partition_file(profile: str | None, cwd: Path) -> Path | None:
    """The partition file a profile names (``slurm-partition-config``, relative to the profile's folder)."""
    if profile is None:
        return None
    with requires("workflow"):
        import yaml

    places = (cwd / profile, Path(profile), Path.home() / ".config" / "snakemake" / profile,
              Path("/etc/xdg/snakemake") / profile)  # fmt: skip
    folder = next((d for d in places if (d / "config.yaml").is_file()), None)
    if folder is None:
        return None
    name = (yaml.safe_load((folder / "config.yaml").read_text()) or {}).get("slurm-partition-config")
    if not name:
        return None
    return folder / name if (folder / name).is_file() else Path(name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stochattn preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="slurm", help="the Snakemake profile to plan with (default: slurm)")
    parser.add_argument("--configfile", nargs="*", default=[], help="configuration files merged over the default")
    parser.add_argument("-d", "--directory", default=".", help="the working directory of the run (default: .)")
    parser.add_argument("-s", "--workflow", default=".", help="the folder holding the Snakefile (default: .)")
    parser.add_argument("--all", action="store_true", help="name every job that cannot run (default: 3 per rule)")
    parser.add_argument("targets", nargs="*", help="Snakemake targets (default: all)")
    args = parser.parse_args(argv)
    cwd = Path(args.workflow).resolve()
    cmd = [sys.executable, "-m", "snakemake", "-n", "--profile", args.profile, "--directory", args.directory,
           *(["--configfile", *args.configfile] if args.configfile else []), *args.targets]  # fmt: skip
    print(f"preflight: {' '.join(cmd[2:])}", flush=True)
    run = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        print(run.stdout[-6000:])
        print("preflight: the dry run failed (above): the plan itself does not hold", file=sys.stderr)
        return 1
    jobs = dry_run_jobs(run.stdout)
    placement = place(jobs, _profile_partition_file(args.profile, cwd), local_rules(cwd))
    print(rule_table(jobs, placement))

    from stochattn.staging import disk_estimate, estimate_table, plan_downloads, workflow_config

    config = workflow_config(args.configfile, cwd)
    bound = 60 * float(config.get("cluster", {}).get("max_runtime_hours", 24))
    gpu_h = sum(j.runtime * j.gpus for j in jobs) / 60
    longest = max(jobs, key=lambda j: j.runtime, default=None)
    peak = max((j.mem_mb for j in jobs), default=0) / 1000
    print(f"\n{len(jobs)} jobs; {sum(j.gpus > 0 for j in jobs)} on GPUs, {gpu_h:,.0f} GPU-hours requested "
          f"(gpu_runtime_factor {config.get('gpu_runtime_factor')}); longest "
          f"{longest.label() if longest else '-'} {longest.runtime / 60 if longest else 0:.1f} h "
          f"(bound {bound / 60:.0f} h); peak memory {peak:.1f} GB")  # fmt: skip
    plan = plan_downloads(config, Path(args.directory).resolve())
    print("\ndisk (what is not staged yet; `stochattn download` fetches it):")
    print(estimate_table(disk_estimate(config, plan, {})))

    used = sorted({p for p in placement.values() if p not in (None, LOCAL)})
    try:
        partitions = slurm_partitions(used)
    except SlurmUnavailable as err:
        print(f"\nSLURM does not answer here ({err}): the partitions are not checked; run preflight on the "
              "cluster's login node")  # fmt: skip
        return 0
    print("\npartition      MaxTime  GPUs/node  GPU types       mem/node  CPUs/node  state")
    for name in used:
        p = partitions.get(name)
        if p is None:
            print(f"{name:12s}  (not in SLURM)")
            continue
        maxt = ("unlimited" if p.max_minutes is None else f"{p.max_minutes} min" if p.max_minutes < 60
                else f"{p.max_minutes / 60:.1f} h")  # fmt: skip
        print(f"{name:12s} {maxt:>9s} {p.gpus_per_node:10d}  {','.join(p.gpu_types) or '-':14s} "
              f"{p.mem_per_node_mb / 1000:7.1f} GB {p.cpus_per_node:9d}  {p.state}")
    bad = unschedulable(jobs, placement, partitions)
    if bad:
        groups: dict[tuple[str, str], list[Job]] = collections.defaultdict(list)
        for job, why in bad:
            groups[(job.rule, re.sub(r"runtime \d+ min", "runtime", why))].append(job)
        print(f"\n{len(bad)} of {len(jobs)} jobs cannot run where they would be sent:", file=sys.stderr)
        for (rule, _), group in sorted(groups.items()):
            reasons = sorted({why for job, why in bad if job in group})
            labels = [j.label() for j in group]
            shown = ", ".join(labels if args.all or len(labels) <= 3 else labels[:3] + [f"... {len(labels) - 3} more"])
            print(f"  {rule} ({len(group)} jobs; {reasons[-1]}): {shown}", file=sys.stderr)
        print("Fix slurm/partitions.yaml (the partitions and their limits) or config cluster.* (GPUs, threads, "
              "max_runtime_hours), then run preflight again (--all names every job).", file=sys.stderr)  # fmt: skip
        return 1
    print(f"\npreflight: every job fits its partition ({', '.join(used)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
