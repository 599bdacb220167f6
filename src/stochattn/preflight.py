"""``stochattn preflight``: the plan of a configuration under a cluster profile, checked against the cluster before
anything is submitted.

One screen: jobs per rule with their GPUs, threads, longest runtime and peak memory requests; GPU-hours (the
runtime requests, i.e. the counted work at the configured speed factor); the longest job against
``cluster.max_runtime_hours``; the disk the data, ERA5 shards and results need (:mod:`stochattn.staging`). Where
SLURM answers, every partition a job is sent to (the SLURM plugin's own choice from the profile's partition file,
else the job's ``slurm_partition`` or the default partition) is read from ``scontrol show partition`` and ``sinfo``
(MaxTime, GPUs per node with their type, memory and CPUs per node), and every job that could not run there is named;
the account the jobs will be charged to is checked against the user's associations (``sacctmgr``) and the
partitions' AllowAccounts; and the GPU partitions' nodes (one asked through a 2-minute ``srun ... nvidia-smi`` job for
its GPU and driver, every GPU type SLURM names) against this environment's torch build (:mod:`stochattn.cuda_builds`).
The exit status is 1 when anything would stop or waste the run, each problem with its fix.

    plan_jobs(args, workflow_dir) the jobs of ``snakemake -n args``, from Snakemake's own DAG
    slurm_partitions(names)       {name: Partition} from scontrol / sinfo
    unschedulable(jobs, ...)      the jobs a partition cannot run, each with the reason
    check_account(requested, ...) the account the SLURM plugin submits with, and why it would be refused
    check_gpu_nodes(...)          the GPU nodes' model and driver against the torch build
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

__all__ = ["Job", "Plan", "Partition", "plan_jobs", "parse_slurm_time", "slurm_partitions", "place", "unschedulable",
           "check_account", "check_gpu_nodes", "main"]  # fmt: skip


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


@dataclass
class Plan:
    """The jobs of a dry run (every job it would run), the rules that run in the Snakemake process itself, and what
    Snakemake printed."""

    jobs: list[Job]
    local: set[str]
    log: str = ""


def _is_local(workflow: Any, rule: Any) -> bool:
    # Workflow.is_local without its `local_exec` short cut, which a dry run sets for every rule
    return rule.group is None and (rule.name in workflow._localrules or rule.norun or rule.is_template_engine)


def plan_jobs(snakemake_args: Sequence[str], workflow_dir: str | Path = ".") -> Plan:
    """The jobs of ``snakemake -n <snakemake_args>`` run from ``workflow_dir``, read from Snakemake's own DAG (the
    rules' resources evaluated as for submission: the profile's default resources, the rules' functions, the
    config), and the workflow's local rules (``localrule: True``, which a dry run does not report).

    Runs Snakemake in this process (the CLI's own argument and profile handling; its output is captured and shown
    only when the dry run fails, as a RuntimeError)."""
    import contextlib
    import io
    import os

    with requires("workflow"):
        from snakemake import api, cli

    captured: dict[str, Any] = {}
    execute = api.DAGApi.execute_workflow

    def keep_workflow(self: Any, *a: Any, **kw: Any) -> Any:
        out = execute(self, *a, **kw)
        captured["workflow"] = self.workflow_api._workflow
        return out

    here, out = os.getcwd(), io.StringIO()
    try:
        os.chdir(workflow_dir)
        api.DAGApi.execute_workflow = keep_workflow
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            parser, args = cli.parse_args(["--dry-run", "--quiet", "all", *snakemake_args])
            ok = cli.args_to_api(args, parser)
    except SystemExit as err:  # argparse
        ok = err.code == 0
    finally:
        api.DAGApi.execute_workflow = execute
        os.chdir(here)
    workflow = captured.get("workflow")
    if not ok or workflow is None or workflow.dag is None:
        raise RuntimeError(f"the dry run failed:\n{out.getvalue()[-6000:]}")
    jobs = []
    for job in workflow.dag.needrun_jobs(exclude_finished=False):
        resources = {k: v for k, v in job.resources.items() if not k.startswith("_")}
        wildcards = ", ".join(f"{k}={v}" for k, v in job.wildcards_dict.items())
        jobs.append(Job(job.rule.name, wildcards, int(job.threads), resources))
    jobs.sort(key=lambda j: (j.rule, j.wildcards))
    return Plan(jobs, {r.name for r in workflow.rules if _is_local(workflow, r)}, out.getvalue())


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
    allow_accounts: tuple[str, ...] | None = None  # None: every account (scontrol's AllowAccounts=ALL)
    deny_accounts: tuple[str, ...] = ()


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
        allow = fields.get("AllowAccounts", "ALL")
        deny = fields.get("DenyAccounts", "(null)")
        parts[name] = Partition(name, parse_slurm_time(fields.get("MaxTime", "UNLIMITED")), 0, (), 0, 0,
                                fields.get("State", "?"), None if allow == "ALL" else tuple(allow.lower().split(",")),
                                () if deny in ("(null)", "") else tuple(deny.lower().split(",")))  # fmt: skip
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
# the account and the GPU nodes
# ------------------------------------------------------------------------------------------------------------------
def _answer(cmd: Sequence[str], timeout: float = 60) -> tuple[bool, str]:
    """(exit status 0, stdout or the last line of stderr) of ``cmd``; (False, why) when it cannot run."""
    if shutil.which(cmd[0]) is None:
        return False, f"no {cmd[0]} on this machine"
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"{cmd[0]} did not answer in {timeout:.0f} s"
    if out.returncode != 0:
        return False, (out.stderr.strip().splitlines() or [f"{cmd[0]} exited {out.returncode}"])[-1]
    return True, out.stdout


@dataclass
class AccountCheck:
    """Which account the jobs are charged to (``account``; None: SLURM's default for the user, or no accounting),
    where that comes from, and what stops a submission with it (``problems``, each with its fix)."""

    account: str | None
    source: str
    problems: list[str]


def check_account(requested: str | None, partitions: Mapping[str, Partition], user: str | None = None) -> AccountCheck:
    """The account the SLURM plugin submits with, checked against the user's associations (``sacctmgr``) and the
    partitions' AllowAccounts / DenyAccounts.

    ``requested``: the jobs' ``slurm_account`` resource (the profile's default resource: ``$SBATCH_ACCOUNT`` or a
    fixed name). Without one, the plugin (2.x) takes the account of the user's most recent job (``sacct``) and, when
    there is none, submits without ``-A``, so that SLURM charges the user's default account; this function follows
    the same order."""
    import getpass

    user = user or getpass.getuser()
    fix = ("export SBATCH_ACCOUNT=<account> before snakemake (the profile passes it on), or set default-resources: "
           "slurm_account in the profile")  # fmt: skip
    ok, assoc = _answer(["sacctmgr", "-n", "-P", "show", "associations", f"where user={user}",
                         "format=account,partition"])  # fmt: skip
    if not ok:
        # no slurmdbd (AccountingStorageType=accounting_storage/none): SLURM checks no account
        return AccountCheck(requested or None, f"SLURM keeps no accounts here ({assoc}); none is checked", [])
    rows = [line.split("|") + [""] for line in assoc.lower().splitlines() if line.strip()]
    mine: dict[str, set[str]] = collections.defaultdict(set)  # account -> partitions ("" = any)
    for account, partition, *_ in rows:
        mine[account].add(partition)
    if requested:
        account, source = requested, "the profile's slurm_account ($SBATCH_ACCOUNT or a fixed name)"
    else:
        ok, recent = _answer(["sacct", "-n", "-X", "-u", user, "-o", "Account%256"])
        recent_accounts = [a for a in recent.replace("(null)", "").split() if a != "none"] if ok else []
        ok, default = _answer(["sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount"])
        default = default.strip().lower() if ok else ""
        if recent_accounts:
            account, source = recent_accounts[-1], "the account of your most recent job (the SLURM plugin's guess)"
        elif default:
            account, source = default, "your default account (sbatch without -A)"
        else:
            yours = f" (your accounts: {', '.join(sorted(mine))})" if mine else ""
            return AccountCheck(None, "none", [f"no account: SLURM knows no default account for {user} and the "
                                               f"plugin finds no earlier job; {fix}{yours}"])  # fmt: skip
    problems = []
    key = account.lower()
    if not mine:
        problems.append(f"{user} has no SLURM association (sacctmgr shows none): ask the administrators for an account")
    elif key not in mine:
        problems.append(f"account {account!r} is not one of {user}'s ({', '.join(sorted(mine))}); {fix}")
    for name, part in sorted(partitions.items()):
        allowed = part.allow_accounts is None or key in part.allow_accounts
        if not allowed or key in part.deny_accounts:
            problems.append(f"partition {name} does not accept account {account!r} (AllowAccounts "
                            f"{','.join(part.allow_accounts or ('ALL',))}, DenyAccounts "
                            f"{','.join(part.deny_accounts) or '-'}); {fix}")  # fmt: skip
        elif key in mine and "" not in mine[key] and name not in mine[key]:
            problems.append(f"account {account!r} has no association on partition {name} (only "
                            f"{', '.join(sorted(mine[key]))}); {fix}")  # fmt: skip
    return AccountCheck(account, source, problems)


@dataclass
class GpuNode:
    """What a GPU node of a partition runs: the GPU's name and compute capability, the NVIDIA driver (None where
    unknown) and how that was learnt (``probe``: nvidia-smi in a job on the node; ``gres``: SLURM's GPU type)."""

    partition: str
    gpu: str
    capability: tuple[int, int] | None
    driver: str | None
    via: str


def probe_gpu_node(partition: str, account: str | None, wait_s: int = 120) -> list[GpuNode] | str:
    """Ask one GPU node of ``partition`` for its GPUs and driver: a two-minute job (``srun --gpus=1``) running
    ``nvidia-smi``, given up after ``wait_s`` seconds in the queue (``--immediate``). The nodes, or why not."""
    cmd = ["srun", f"--partition={partition}", "--gpus=1", "--ntasks=1", "--time=2", f"--immediate={wait_s}",
           "--job-name=stochattn-preflight", *([f"--account={account}"] if account else []),
           "nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]  # fmt: skip
    ok, out = _answer(cmd, timeout=wait_s + 180)
    if not ok:
        return f"the probe job did not run ({out})"
    nodes = []
    for line in dict.fromkeys(out.splitlines()):  # a node's identical GPUs once
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 2 and fields[0]:
            from stochattn.cuda_builds import capability_of

            cap = capability_of(fields[2]) if len(fields) > 2 else None
            nodes.append(GpuNode(partition, fields[0], cap or capability_of(fields[0]), fields[1], "probe"))
    return nodes or f"nvidia-smi printed nothing usable: {out.strip()[:200]!r}"


def check_gpu_nodes(partitions: Mapping[str, Partition], account: str | None, probe: bool, wait_s: int = 120
                    ) -> tuple[list[GpuNode], list[str], list[str]]:  # fmt: skip
    """The GPU nodes of ``partitions`` (those with GPUs) against this environment's torch build: (nodes, notes,
    problems). Every GPU type SLURM names is checked for kernels; with ``probe``, one node per partition is asked
    for its driver too (:func:`probe_gpu_node`)."""
    from stochattn.cuda_builds import capability_of, node_problems, torch_build

    nodes: list[GpuNode] = []
    notes: list[str] = []
    problems: list[str] = []
    try:
        build = torch_build()
    except ImportError:
        return [], ["torch is not installed in this environment: the GPU build is not checked"], []
    notes.append(f"this environment: {build.describe()}")
    for name, part in sorted(partitions.items()):
        if part.gpus_per_node == 0:
            continue
        found = probe_gpu_node(name, account, wait_s) if probe else "not probed (--no-gpu-probe)"
        if isinstance(found, str):
            notes.append(f"partition {name}: driver unknown, {found}")
            found = [GpuNode(name, t, capability_of(t), None, "gres") for t in part.gpu_types]
            if not found:
                notes.append(f"partition {name}: SLURM names no GPU type (Gres gpu:N): the GPU model is not checked")
        nodes += found
        for node in found:
            problems += [f"partition {name}: {p}" for p in node_problems(build, node.gpu, node.driver, node.capability)]
    return nodes, notes, sorted(set(problems))


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


def _reason_groups(bad: Sequence[tuple[Job, str]]) -> list[tuple[str, list[Job], str]]:
    """(rule, jobs, reason) per rule and kind of reason; the reason shown is that of the job asking the most."""
    groups: dict[tuple[str, str], list[tuple[Job, str]]] = collections.defaultdict(list)
    for job, why in bad:
        groups[(job.rule, re.sub(r"\d+", "N", why))].append((job, why))
    out = []
    for (rule, _), members in sorted(groups.items()):
        worst = max(members, key=lambda jw: (jw[0].runtime, jw[0].mem_mb, jw[0].threads, jw[0].gpus))
        out.append((rule, [j for j, _ in members], worst[1]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stochattn preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="slurm", help="the Snakemake profile to plan with (default: slurm)")
    parser.add_argument("--configfile", nargs="*", default=[], help="configuration files merged over the default")
    parser.add_argument("-d", "--directory", default=".", help="the working directory of the run (default: .)")
    parser.add_argument("-s", "--workflow", default=".", help="the folder holding the Snakefile (default: .)")
    parser.add_argument("--all", action="store_true", help="name every job that cannot run (default: 3 per rule)")
    parser.add_argument("--no-gpu-probe", action="store_true",
                        help="do not run the 2-minute nvidia-smi job on a GPU node (driver then unchecked)")
    parser.add_argument("--probe-wait", type=int, default=120, metavar="S",
                        help="seconds the GPU probe job may wait in the queue (default: 120)")
    parser.add_argument("targets", nargs="*", help="Snakemake targets (default: all)")
    args = parser.parse_args(argv)
    cwd = Path(args.workflow).resolve()
    smk_args = ["--profile", args.profile, "--directory", args.directory,
                *(["--configfile", *args.configfile] if args.configfile else []), *args.targets]  # fmt: skip
    print(f"preflight: snakemake -n {' '.join(smk_args)}", flush=True)
    try:
        plan = plan_jobs(smk_args, cwd)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        print("preflight: the dry run failed (above): the plan itself does not hold", file=sys.stderr)
        return 1
    jobs = plan.jobs
    placement = place(jobs, _profile_partition_file(args.profile, cwd), plan.local)
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
    downloads = plan_downloads(config, Path(args.directory).resolve())
    print("\ndisk (what is not staged yet; `stochattn download` fetches it):")
    print(estimate_table(disk_estimate(config, downloads, {})))

    used = sorted({p for p in placement.values() if p not in (None, LOCAL)})
    try:
        partitions = slurm_partitions(used)
    except SlurmUnavailable as err:
        print(f"\nSLURM does not answer here ({err}): the partitions, the account and the GPU nodes are not checked; "
              "run preflight on the cluster's login node")  # fmt: skip
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
    problems: list[str] = []
    bad = unschedulable(jobs, placement, partitions)
    if bad:
        problems.append(f"{len(bad)} of {len(jobs)} jobs cannot run where they would be sent:")
        for rule, group, why in _reason_groups(bad):
            labels = [j.label() for j in group]
            shown = ", ".join(labels if args.all or len(labels) <= 3 else labels[:3] + [f"... {len(labels) - 3} more"])
            problems.append(f"  {rule} ({len(group)} jobs; {why}): {shown}")
        problems.append("  Fix slurm/partitions.yaml (the partitions and their limits) or config cluster.* (GPUs, "
                        "threads, max_runtime_hours), then run preflight again (--all names every job).")  # fmt: skip

    requested = {str(j.resources.get("slurm_account") or "") for i, j in enumerate(jobs)
                 if placement.get(i) not in (None, LOCAL)}  # fmt: skip
    requested.discard("")
    account = check_account(sorted(requested)[0] if requested else None,
                            {n: p for n, p in partitions.items() if n in used})  # fmt: skip
    print(f"\naccount: {account.account or '-'} ({account.source})")
    if len(requested) > 1:
        account.problems.append(f"jobs ask for several accounts ({', '.join(sorted(requested))}); only the first "
                                "was checked")  # fmt: skip
    problems += [f"account: {p}" for p in account.problems]

    gpu_parts = {n: p for n, p in partitions.items() if n in used and p.gpus_per_node > 0}
    if gpu_parts:
        nodes, notes, gpu_problems = check_gpu_nodes(gpu_parts, account.account, not args.no_gpu_probe,
                                                     args.probe_wait)  # fmt: skip
        for note in notes:
            print(f"gpu: {note}")
        for node in nodes:
            cap = f"{node.capability[0]}.{node.capability[1]}" if node.capability else "?"
            print(f"gpu: partition {node.partition}: {node.gpu} (compute capability {cap}), driver "
                  f"{node.driver or 'unknown'} [{node.via}]")  # fmt: skip
        problems += [f"gpu: {p}" for p in gpu_problems]
    if problems:
        print("\npreflight: nothing should be submitted yet:", file=sys.stderr)
        for line in problems:
            print(line, file=sys.stderr)
        return 1
    print(f"\npreflight: every job fits its partition ({', '.join(used)}); the account and the GPU build are fine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
