"""Shared test fixtures."""

import importlib.util
import os
import shutil
import tempfile
import urllib.response

import pytest

# Two workers share 2 cores, and the processes they start (examples, DAG jobs, the CLI) run beside the other worker's
# load: OpenMP's threads that spin while they wait for one another then hold a core that the thread they wait for
# needs. Sleeping instead changes no result, only the waiting: examples/sa_on_diabetes.py at 2 threads with the other
# core busy took 514 s spinning, 27 s sleeping (18 s on idle cores; 2026-12-02). Set before torch loads its OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs 2 workers), each worker's own torch uses its share of the cores: two
    workers at the default (all cores each) oversubscribe them. Subprocesses (the DAG runs) set their own threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    _skip_the_slurm_plugins_config_probe()


_PROBE_SHIM = None
#: `scontrol`: `show config` answered at once (exit 1) unless a slurmctld runs here (found in /proc: no procps needed)
_SHIM = """#!/bin/sh
if [ "$1 $2" = "show config" ]; then
  for c in /proc/[0-9]*/comm; do
    if {{ read -r n < "$c"; }} 2>/dev/null && [ "$n" = slurmctld ]; then exec {real} "$@"; fi
  done
  exit 1
fi
exec {real} "$@"
"""


def _skip_the_slurm_plugins_config_probe():
    """Every Snakemake process imports the SLURM executor plugin, whose import runs ``scontrol show config``
    (snakemake-executor-plugin-slurm 2.x, ``get_min_job_age``; a SLURM run also reads MinJobAge from it to choose its
    status command). Where SLURM's client is installed but no controller answers (here, while tests/test_slurm.py's
    single-node cluster is down), that call waits ~9 s, in each of the suite's many Snakemake runs. The tests'
    processes see an ``scontrol`` that, while no slurmctld runs on this machine, answers ``show config`` as a machine
    without a controller does (exit 1) at once; everything else, and everything while the cluster is up, goes to
    the real one."""
    global _PROBE_SHIM
    real = shutil.which("scontrol")
    if real is None or _PROBE_SHIM is not None:
        return
    _PROBE_SHIM = tempfile.mkdtemp(prefix="stochattn-scontrol-")
    shim = os.path.join(_PROBE_SHIM, "scontrol")
    with open(shim, "w") as f:
        f.write(_SHIM.format(real=real))
    os.chmod(shim, 0o755)
    os.environ["PATH"] = _PROBE_SHIM + os.pathsep + os.environ.get("PATH", "")


#: The test files that take longest under `make test`, started first (their tests' seconds summed in the run at
#: 20adc4e, 2 cores: 742 / 429 / 217 / 349 / 138 / 365 / 104 / 118 / 64; the two workers ended within 3 % of half the
#: suite's sum): a long file started last runs alone at the end while the other worker idles (pytest-xdist's own
#: order, by number of tests, put tests/test_slurm.py's ~15 minutes of mostly waiting on SLURM's time limits last).
#: The Makefile passes --no-loadscope-reorder so that this order is kept.
LONGEST_FIRST = ("test_slurm.py", "test_era5_workflow.py", "test_ett_workflow.py", "test_workflow.py", "test_reruns.py",
                 "test_triton_sa.py", "test_custom_dataset.py", "test_examples.py", "test_artefacts.py")  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """The files of :data:`LONGEST_FIRST` first, in that order; every file's tests in their own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


def pytest_unconfigure(config):
    if _PROBE_SHIM is not None:
        shutil.rmtree(_PROBE_SHIM, ignore_errors=True)


@pytest.fixture(autouse=True)
def _network_allowed_again():
    """A model job's ``stochattn.staging.forbid_network`` lasts for its process (the job); a test that runs a job's
    code in the test process must not leave it (nor HF_HUB_OFFLINE) to the tests after it."""
    from stochattn import staging

    forbidden, offline = list(staging._FORBIDDEN), os.environ.get("HF_HUB_OFFLINE")
    yield
    staging._FORBIDDEN[:] = forbidden
    if offline is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = offline


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run several times faster single-threaded (thread overhead dominates); restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------------------------------------------------------
# one finished tiny run shared by tests/test_audit.py, test_reruns.py and test_slurm.py (session-scoped: ~40 s)
# ------------------------------------------------------------------------------------------------------------------
TINY_TARGETS = ["results/tables/uci_master.csv", "results/figures/uci_pit_yacht.png"]


def tiny_config(path, **updates):
    """config/test.yaml restricted to yacht split 0 and two methods on the shared backbone."""
    from test_workflow import REPO, write_config

    base = {"datasets": ["yacht"], "splits": 1, "methods": ["mc_dropout", "swag"]}
    return write_config(path, base=REPO / "config" / "test.yaml", **{**base, **updates})


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory):
    """A finished tiny run of TINY_TARGETS: {"work", "cfg", "root"}. Read-only: copy it (copy_run) to change files.

    Run once per test session: under pytest-xdist the workers share it (the first one builds it under a file lock in
    the session's common temporary folder; the others wait for it and reuse it)."""
    from filelock import FileLock
    from test_workflow import HAVE_MIRROR, MIRROR, smk

    if not HAVE_MIRROR:
        pytest.skip(f"offline data mirror {MIRROR} not present")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder common to every worker of this session
    root, done = shared / "tiny_chain", shared / "tiny_chain.done"
    with FileLock(str(shared / "tiny_chain.lock")):
        if not done.exists():
            root.mkdir(exist_ok=True)
            cfg = tiny_config(root / "tiny.yaml")
            res = smk(root / "work", *TINY_TARGETS, configfile=cfg)
            assert res.returncode == 0, res.stdout[-6000:]
            done.touch()
    return {"root": root, "work": root / "work", "cfg": root / "tiny.yaml"}


def copy_run(chain, dest):
    """A copy of the shared tiny run (results, logs and Snakemake's metadata, mtimes kept) at ``dest``."""
    import shutil

    shutil.copytree(chain["work"], dest, symlinks=True)
    return dest


def audit_failures(work, target):
    """The paths of the nodes that ``stochattn audit target`` fails on (empty: the chain is intact) and the number
    of nodes it checked."""
    from stochattn import audit

    root = audit.audit(target, work)
    return sorted({n.path for n in audit._failures(root)}), sum(1 for _ in audit._iter(root))


def assert_every_output_audits_clean(work, expected):
    """Every table (csv) and figure (png) under ``work/results``: ``expected`` of them, each with an intact chain of
    at least 5 nodes."""
    targets = [p.relative_to(work).as_posix() for folder, suffix in (("tables", ".csv"), ("figures", ".png"))
               for p in sorted((work / "results" / folder).glob(f"*{suffix}"))]  # fmt: skip
    assert len(targets) == expected, targets
    for target in targets:
        failed, n = audit_failures(work, target)
        assert not failed and n >= 5, (target, failed)


def perturb_samples(path, delta=1e-9):
    """Add ``delta`` to a run's ``samples`` in place: a change only the hash can see."""
    import numpy as np

    from stochattn.io import save_npz

    data = dict(np.load(path))
    data["samples"] = data["samples"] + delta
    save_npz(path, **data)


def assert_only_dependants_fail(work, changed, dependants, others):
    """After ``changed`` (a path relative to ``work``) was modified: the audit of each of ``dependants`` fails
    naming exactly that file, and each of ``others`` (outputs not built from it) still passes."""
    for target in dependants:
        assert audit_failures(work, target)[0] == [changed], target
    for target in others:
        assert audit_failures(work, target)[0] == [], target


# What each measured rule's memory scales with at the paper's caps (config/config.yaml)
ERA5_DATA_RULES = ("era5_prepare", "era5_adapt", "era5_method", "era5_candidate", "era5_select", "era5_select_swag",
                   "era5_multiswag_member", "era5_analyses_sweep", "era5_analyses_bo", "era5_evaluate")  # fmt: skip
ETT_DATA_RULES = ("ett_adapt", "ett_calibrate_sa", "ett_method", "ett_candidate", "ett_select", "ett_select_swag",
                  "ett_multiswag_member", "ett_evaluate")  # fmt: skip


def paper_data_mb(repo):
    """MB of the data each data-loading rule holds at the paper's caps: ERA5 pairs.npz (8760 / 4356 / 2920 pairs of
    48 variables) and the largest ETT prepared.npz (every window of the largest data set and horizon)."""
    import yaml

    from stochattn import resources
    from stochattn.data.ett import ETT_DATASETS, window_starts

    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    era5 = resources.pairs_mb(sum(cfg["era5"]["max_pairs"].values()), 48)
    ett, c = cfg["ett"], cfg["ett"]["context"]
    ett_mb = max(
        resources.windows_mb(7 * sum(len(window_starts(d, part, c, h, adaptation_percent=pct))
                                     for part, pct in (("train", ett["adaptation_percent"]), ("val", None),
                                                       ("test", None))), c + h)  # fmt: skip
        for d in ETT_DATASETS for h in ett["horizons"]
    )
    return {**{r: era5 for r in ERA5_DATA_RULES}, **{r: ett_mb for r in ETT_DATA_RULES}}


# rules whose work now runs in several jobs (one per grid candidate, the selection; the SA analyses per BO seed)
SPLIT_RULES = {
    "ett_method": ["ett_method", "ett_candidate", "ett_select", "ett_select_swag"],
    "era5_method": ["era5_method", "era5_candidate", "era5_select", "era5_select_swag"],
    "era5_analyses": ["era5_analyses_sweep", "era5_analyses_bo"],
}


def assert_requests_cover_the_measured_peaks(dry_run_output, repo):
    """config/measured_resources.yaml holds each rule's peak memory measured by `make rehearsal` (the cluster code
    path at the real model sizes on CPU, tiny data). Every rule of the dry run (of config/config.yaml) asks for at
    least that peak with its data part scaled to the paper's caps (stochattn.resources.memory_needed)."""
    import re

    from stochattn import resources

    measured = resources.load_measured(repo / "config" / "measured_resources.yaml")
    requested = {}
    for rule, mem in re.findall(r"rule (\w+):.*?resources: .*?mem_mb=(\d+)", dry_run_output, re.S):
        requested[rule] = min(requested.get(rule, 10**9), int(mem))
    data = paper_data_mb(repo)
    checked = []
    for family, rec in measured.items():
        if rec["max_rss_mb"] is None:
            continue
        # a rule measured before its work was split in jobs: each job doing part of it holds the same data
        for rule in SPLIT_RULES.get(family.split("/")[0], [family.split("/")[0]]):
            if rule not in requested:
                continue
            need = resources.memory_needed(rec, data.get(rule, rec.get("data_mb", 0.0)))
            assert requested[rule] >= need, (family, rule, requested[rule], need)
            checked.append(rule)
    assert {"era5_adapt", "era5_method", "ett_adapt", "ett_method", "train_backbone"} <= set(checked), checked


def _training_floor(cfg, rule, wildcards, costs):
    """Seconds the training of one GPU job takes at least at the paper's caps, counted here from config/config.yaml
    (epochs x steps per epoch x candidates) and the measured per-step costs: a floor independent of
    stochattn.resources' count of every pass. None for a job without training."""
    import math

    from stochattn.data.ett import ETT_COLUMNS, window_starts

    slice_ = "era5" if rule.startswith("era5_") else "ett"
    s = cfg[slice_]
    if slice_ == "era5":
        n_train, cost = s["max_pairs"]["train"], costs["climax"]
    else:
        h = int(wildcards["horizon"])
        n_train = len(ETT_COLUMNS) * len(window_starts(wildcards["ett_dataset"], "train", s["context"], h,
                                                       adaptation_percent=s["adaptation_percent"]))  # fmt: skip
        cost = costs[f"timesfm_h{h}"]
    steps = math.ceil(n_train / s["train"]["batch_size"])
    adapter = s["train"]["max_epochs"] * steps * cost["train_step_s"]
    method = wildcards.get("era5_method") or wildcards.get("ett_method")
    if rule.endswith(("_select", "_select_swag")):
        return None  # the choice among fitted candidates and the winner's sampling: no training
    if rule.endswith("_adapt"):
        return adapter
    if rule.endswith("_multiswag_member"):
        swag = s["method_params"]["multiswag"]
        return adapter + (swag["anneal_epochs"] + swag["epochs"]) * steps * cost["train_step_s"]
    if method in ("ivon", "contextual_dropout", "hsa"):
        step = cost["ivon_step_s"] if method == "ivon" else cost["train_step_s"]
        candidates = 1 if rule.endswith("_candidate") else len(s["method_params"][method]["grid"])
        return candidates * s["train"]["max_epochs"] * steps * step
    return None


def assert_gpu_runtimes_cover_the_measured_work(dry_run_output, repo, retries=2):
    """Every ETT / ERA5 GPU job of the dry run (of config/config.yaml) requests at least gpu_runtime_factor times the
    training it does at the paper's caps priced at the measured step costs (config/step_costs.json, full model
    sizes on a GPU), and none needs more than a day on the measured GPU (its request over the factor). A training
    that resumes (adapters, grid candidates, MultiSWAG members) requests at most cluster.max_runtime_hours per
    attempt: its ``1 + retries`` attempts cover it."""
    import re

    import yaml

    from stochattn import resources

    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    costs = resources.load_step_costs(repo / cfg["gpu_step_costs"])["costs"]
    factor = float(cfg["gpu_runtime_factor"])
    checked = set()
    for block in dry_run_output.split("\n\n"):
        rule = re.search(r"rule (\w+):", block)
        runtime = re.search(r"resources: .*?runtime=(\d+)", block)
        if not rule or not runtime or not re.match(r"(era5|ett)_(adapt|method|multiswag_member|swag|calibrate_sa|"
                                                   r"candidate|select|select_swag|analyses_sweep|analyses_bo)$",
                                                   rule.group(1)):  # fmt: skip
            continue
        wildcards = dict(re.findall(r"(\w+)=([^,\s]*)", (re.search(r"wildcards: (.*)", block) or [None, ""])[1]))
        minutes = int(runtime.group(1))
        assert minutes / factor <= 24 * 60, (rule.group(1), wildcards, minutes)
        floor = _training_floor(cfg, rule.group(1), wildcards, costs)
        if floor is not None:
            bound = 60 * cfg["cluster"]["max_runtime_hours"]
            attempts = 1 + retries if rule.group(1).endswith(("_adapt", "_candidate", "_multiswag_member")) else 1
            assert minutes <= bound and minutes * attempts >= factor * floor / 60, (
                rule.group(1), wildcards, minutes, factor * floor / 60)  # fmt: skip
            checked.add(rule.group(1))
    assert checked == {"era5_adapt", "era5_candidate", "era5_multiswag_member", "ett_adapt", "ett_candidate",
                       "ett_multiswag_member"}, checked  # fmt: skip


def served(data: bytes, request) -> urllib.response.addinfourl:
    """What ``urllib.request.urlopen(request)`` returns for a 200 answer with body ``data`` (for fakes of urlopen:
    ``request`` a URL or a ``urllib.request.Request``)."""
    import email.message
    import io

    headers = email.message.Message()
    headers["Content-Length"] = str(len(data))
    return urllib.response.addinfourl(io.BytesIO(data), headers, url_of(request), code=200)


def url_of(request) -> str:
    """The URL of what a fake ``urlopen`` was given (a string or a ``urllib.request.Request``)."""
    return getattr(request, "full_url", request)


@pytest.fixture
def load_script():
    """``load_script(path)``: a script outside the package (``benchmarks/*.py``) imported from its file as a module."""

    def load(path):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
