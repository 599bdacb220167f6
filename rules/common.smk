# Helpers shared by the rule files (names, seeds, paths, per-experiment configuration, resources, captions).
# Only cheap imports here: the workflow is parsed again for every cluster job; torch is imported by the scripts.

import functools
import hashlib
import math
import os
from pathlib import Path

import yaml

from stochattn.data.uci import SHARPNESS_GRID_DATASETS, UCI_DATASETS, dataset_registry, locate_uci_file
from stochattn.experiments.grids import needs_backbone, pooled_widening_bound, widening_bound
from stochattn.staging import set_staged_only
from stochattn.protocol import NOT_PROTOCOL, adapter_method_params, dataset_section, load_paper_protocol, merged
from stochattn.protocol import check_multiswag_matches_swag
from stochattn.protocol import protocol_deviations as _protocol_deviations
from stochattn.protocol import protocol_note as _protocol_note
from stochattn.provenance import code_version
from stochattn.resources import ATTEMPTS_SUFFIX, gpu_minutes, load_dataset_estimates, load_step_costs
from stochattn.selection import grid_entries

# Every rule's software, used with `--sdm conda` (the local `make` setup runs in the virtual environment instead);
# envs/stochattn.yaml's header gives both routes on a cluster: --sdm conda, or activate the environment and then run.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "stochattn.yaml")
# Snakemake runs envs/stochattn.post-deploy.sh (it installs this repository into the new environment) from a copy
# under .snakemake/conda/: this is how it finds the repository. Set, not defaulted: the package installed must be
# the one of the workflow that runs. (update(), not os.environ[...] =: `snakemake --lint` takes that form for a read
# of a variable that an envvars directive should assert.)
os.environ.update(STOCHATTN_REPO=workflow.basedir)

# ---------------------------------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------------------------------
# stochattn.experiments.uci.METHODS / DERIVED_METHODS / BACKBONE_METHODS (tests/test_workflow.py checks that they
# agree). Every run (method folder) name; DERIVED_METHODS are written by another method's job from the same
# calibration: sa_match (SA at the BO surrogate's scale-matching nu) by calibrate_sa, beside sa (Algorithm 2's nu).
ALL_METHODS = ["sa", "sa_match", "mc_dropout", "swag", "multiswag", "ivon", "hsa"]
DERIVED_METHODS = {"sa_match": "sa"}
# the adapter slices' methods that choose their settings on validation data (stochattn.experiments.adapters.
# SEARCH_METHODS): with a grid of more than one candidate, one job per candidate and a selection job
SEARCH_METHODS = ["swag", "ivon", "contextual_dropout", "hsa"]
# the same for the UCI methods that train their candidates (stochattn.experiments.uci.SEARCH_METHODS): rule
# uci_candidate; a widening search (MC Dropout) fits the candidates beyond its grid's edge in its choosing job
UCI_SEARCH_METHODS = ["mc_dropout", "ivon", "hsa"]


def searched_methods(methods, method_cfg, search_methods=SEARCH_METHODS):
    """The ``methods`` whose validation grid (``method_cfg(method)``) has more than one candidate (a widening's
    candidates are fitted in the choosing job: they are known only once the grid's are scored)."""
    return [m for m in methods if m in search_methods and len(grid_entries(method_cfg(m))) > 1]


def uci_searched(experiment, method, dataset):
    """Whether ``method``'s grid on ``dataset`` is fitted one candidate a job (rule uci_candidate)."""
    return bool(searched_methods([method], lambda m: method_cfg(experiment, m, dataset), UCI_SEARCH_METHODS))


def uci_candidates(experiment, dataset, split, method):
    """The files of rule uci_candidate for every candidate of ``method``'s grid, in grid order ([] when one job)."""
    if not uci_searched(experiment, method, dataset):
        return []
    run = f"results/{experiment}/{dataset}/split{split}/{method}/candidates"
    return [f"{run}/{k}.pt" for k in range(len(grid_entries(method_cfg(experiment, method, dataset))))]


def one_of(names):
    """Wildcard constraint matching exactly ``names`` (nothing when there is none)."""
    return "|".join(names) if names else "(?!)"


BACKBONE_METHODS = ["sa", "mc_dropout", "swag"]  # start from the shared deterministic backbone
BASELINES = [m for m in ALL_METHODS if m != "sa" and m not in DERIVED_METHODS]
TOY_DATASET = "sinusoid"

DATASETS = list(config["datasets"])
# the configured methods and the runs derived from them (whenever "sa" is configured, "sa_match" is produced too)
METHODS = [r for m in config["methods"] for r in (m, *(d for d, src in DERIVED_METHODS.items() if src == m))]
TOY_METHODS = list(config["toy"]["methods"])

# Relative mirror folders resolve against the workflow folder (the one holding the Snakefile), not the working
# directory, so `--directory elsewhere` still finds ../shared/data. Read by the fetch script from the config (not a
# param): where a verified copy comes from does not change the data, so it must not trigger reruns.
# The store that `stochattn download` fills (data.store, relative to the working directory) is the first mirror.
config["data"]["mirrors"] = [
    str(Path(config["data"]["store"]).expanduser().resolve()),
    *(str((Path(workflow.basedir) / Path(m).expanduser()).resolve()) for m in config["data"]["mirrors"]),
]
# A run that submits jobs to a cluster: the fetch rules (local rules, on the login node) only link staged files
# and never download the large ones (checkpoints, WeatherBench): `stochattn download` stages them beforehand.
if not workflow.local_exec:
    set_staged_only()

# Data sets in Gal's layout added by configuration (custom_datasets): a relative `checksums` path resolves against
# the workflow folder too (written back, so the fetch script reads absolute paths). The registry is the built-in
# data sets in paper order, then the custom ones by name; any name in `datasets` must be in it.
config.setdefault("custom_datasets", {})
for _spec in config["custom_datasets"].values():
    if isinstance(_spec, dict) and _spec.get("checksums"):
        _spec["checksums"] = str((Path(workflow.basedir) / Path(_spec["checksums"]).expanduser()).resolve())
DATASET_REGISTRY = dataset_registry(config["custom_datasets"])
for _what, _names in (("datasets", DATASETS), ("data.max_train", list(config["data"]["max_train"]))):
    _unknown = [d for d in _names if d not in DATASET_REGISTRY]
    if _unknown:
        raise ValueError(
            f"config {_what}: unknown data set {', '.join(map(repr, _unknown))}; known: built-in "
            f"{', '.join(UCI_DATASETS)}; custom {', '.join(config['custom_datasets']) or '(none)'}. Add a data set "
            "in Gal's layout under custom_datasets: {<name>: {folder: ..., n_splits: ..., checksums: ...}}."
        )


def n_splits(dataset):
    """Gal splits used for ``dataset``: the first ``config["splits"]`` of its own (protein has 5), or
    ``dataset_overrides[dataset].splits`` when given."""
    wanted = config.get("dataset_overrides", {}).get(dataset, {}).get("splits", config["splits"])
    return min(int(wanted), DATASET_REGISTRY[dataset].n_splits)


# ---------------------------------------------------------------------------------------------------------------
# seeds: base + stage / data set / split offsets, independent of which data sets, splits or methods are configured
# ---------------------------------------------------------------------------------------------------------------
# Strides leave room for the offsets the library adds to a seed it is given (seed + 1 for calibration-split
# samples, seed + 1000 * (component + 1) for MultiSWAG components), so no two streams collide, and keep every seed
# below 2**31 for base seeds up to 1e9 (schema maximum).
SEED_STAGES = ["prepare", "backbone", *(m for m in ALL_METHODS if m not in DERIVED_METHODS), "evaluate"]
DATASET_INDEX = {name: i for i, name in enumerate(UCI_DATASETS)}
DATASET_INDEX[TOY_DATASET] = len(DATASET_INDEX)
STAGE_STRIDE, DATASET_STRIDE, SPLIT_STRIDE = 100_000_000, 10_000_000, 100_000
# Splits 0..19 use the first 2e6 of each 1e7 data set block. A custom data set gets one of 40 free lanes of 20
# split slots (slots 20-39, 40-59, 60-79, 80-99 of blocks 0-9) chosen from a hash of its name: built-in seeds are
# unchanged, and a custom data set's seeds depend on its name only (two custom names may share a lane: same seeds
# on different data, harmless).
MAX_SPLITS, CUSTOM_LANES = 20, 40


def dataset_offset(dataset):
    """Seed offset of ``dataset``: DATASET_STRIDE * index for built-ins and the toy, a name-hashed lane otherwise."""
    if dataset in DATASET_INDEX:
        return DATASET_STRIDE * DATASET_INDEX[dataset]
    lane = int(hashlib.sha256(dataset.encode()).hexdigest(), 16) % CUSTOM_LANES
    return DATASET_STRIDE * (lane % 10) + SPLIT_STRIDE * MAX_SPLITS * (1 + lane // 10)


def seed_for(stage, dataset, split):
    """Seed of ``stage`` (prepare, backbone, a method, evaluate) for one data set and split."""
    if not 0 <= int(split) < MAX_SPLITS:
        raise ValueError(f"split {split} of {dataset}: the seed layout allows splits 0..{MAX_SPLITS - 1}")
    return (
        int(config["seed"])
        + STAGE_STRIDE * SEED_STAGES.index(stage)
        + dataset_offset(dataset)
        + SPLIT_STRIDE * int(split)
    )


# ---------------------------------------------------------------------------------------------------------------
# code versions: each rule that calls the library gets params.code, the hash of exactly the library functions it
# runs (stochattn.provenance.code_version, an AST walk from the entry points): editing one of them reruns the rule's
# jobs (rerun trigger "params"), editing anything else does not. Recorded in meta.json / metrics.json for the audit.
# ---------------------------------------------------------------------------------------------------------------
_CODE_VERSIONS = {}


def code_for(*entries, exclude=()):
    """code_version of library entry points such as "stochattn.report:write_table" (memoised per parse)."""
    key = (entries, tuple(exclude))
    if key not in _CODE_VERSIONS:
        _CODE_VERSIONS[key] = code_version(entries, exclude)
    return _CODE_VERSIONS[key]


def method_code(method):
    """run_method for one method: its dispatcher without the other methods' stage functions (``_<method>``)."""
    return code_for(
        "stochattn.experiments.uci:run_method",
        exclude=[f"stochattn.experiments.uci:_{m}" for m in ALL_METHODS if m != method],
    )


def uci_search_code(entry, method):
    """``entry`` (fit_candidate or choose_candidate of stochattn.experiments.uci) for one method: the other methods'
    searches (``_<method>_search``) left out."""
    return code_for(
        f"stochattn.experiments.uci:{entry}",
        exclude=[f"stochattn.experiments.uci:_{m}_search" for m in UCI_SEARCH_METHODS if m != method],
    )


def run_method_code(w):
    """A run_method job's code: the choice among fitted candidates (rule uci_candidate) or the whole run."""
    if uci_searched(w.experiment, w.method, w.dataset):
        return uci_search_code("choose_candidate", w.method)
    return method_code(w.method)


def benchmark_file(rule, wildcard_path):
    """results/benchmarks/<rule>/<wildcards>.tsv: Snakemake's benchmark record of one job (wall clock, memory);
    stochattn.resources turns these records into the runtime estimates of the SLURM profile."""
    return f"results/benchmarks/{rule}/{wildcard_path}.tsv"


def attempts_file(rule, wildcard_path):
    """Beside benchmark_file (a log named ``attempts``): the training a job's earlier attempts saved (0 in a first
    attempt), written before the job trains (stochattn.provenance.resume_checkpoint) and added by stochattn.resources
    to the benchmark record, which times the last attempt only. Rules whose jobs resume their training declare it."""
    return benchmark_file(rule, wildcard_path).removesuffix(".tsv") + ATTEMPTS_SUFFIX


# ---------------------------------------------------------------------------------------------------------------
# per-experiment configuration: the toy overrides model / train / method_params key by key, and so does
# dataset_overrides[<dataset>] for one UCI data set (e.g. a learning rate chosen on that data set's validation part)
# ---------------------------------------------------------------------------------------------------------------
def model_cfg(experiment, dataset=None):
    if experiment == "toy":
        return merged(config["model"], config["toy"].get("model"))
    return dataset_section(config, "model", dataset)


def train_cfg(experiment, dataset=None):
    if experiment == "toy":
        return merged(config["train"], config["toy"].get("train"))
    return dataset_section(config, "train", dataset)


def method_cfg(experiment, method, dataset=None):
    if experiment == "toy":
        return merged(config["method_params"].get(method, {}), config["toy"].get("method_params", {}).get(method))
    return dataset_section(config, "method_params", dataset, method)


# MultiSWAG's component 0 is the SWAG run (rule run_swag), so their settings must agree; checked here, when the
# workflow is parsed (an input function's error is passed over for outputs that already exist)
for _experiment, _datasets, _methods in (("uci", DATASETS, config["methods"]), ("toy", [None], TOY_METHODS)):
    if "multiswag" in _methods:
        for _dataset in _datasets:
            check_multiswag_matches_swag(*(method_cfg(_experiment, m, _dataset) for m in ("swag", "multiswag")))


# ---------------------------------------------------------------------------------------------------------------
# paths
# ---------------------------------------------------------------------------------------------------------------


def uci_metrics(datasets=None, methods=None):
    """metrics.json of every configured UCI run (optionally restricted)."""
    return [
        f"results/uci/{d}/split{k}/{m}/metrics.json"
        for d in (DATASETS if datasets is None else datasets)
        for k in range(n_splits(d))
        for m in (METHODS if methods is None else methods)
    ]


def uci_meta(datasets=None, methods=None):
    return [p.replace("metrics.json", "meta.json") for p in uci_metrics(datasets, methods)]


def toy_metrics():
    return [f"results/toy/{TOY_DATASET}/split0/{m}/metrics.json" for m in TOY_METHODS]


def figure_files(name):
    """``results/figures/<name>.{png,pdf}`` and their provenance records."""
    files = [f"results/figures/{name}.png", f"results/figures/{name}.pdf"]
    return files + [f"{f}.prov.json" for f in files]


def table_files(name):
    files = [f"results/tables/{name}.{ext}" for ext in ("csv", "md", "tex")]
    return files + [f"{f}.prov.json" for f in files]


def uci_dataset_figures(dataset):
    names = [f"uci_pit_{dataset}", f"uci_sharpness_{dataset}"]
    if dataset == "yacht":
        names.append("uci_yacht_appendix")
    return [f for n in names for f in figure_files(n)]


SHARPNESS_GRID = [d for d in SHARPNESS_GRID_DATASETS if d in DATASETS]


def uci_targets():
    files = [f for t in UCI_TABLES for f in table_files(f"uci_{t}")]
    files += [f for d in DATASETS for f in uci_dataset_figures(d)]
    files += figure_files("uci_sharpness_remaining") if SHARPNESS_GRID else []
    files += figure_files("uci_cost")
    return files


UCI_TABLES = ["master", "matched", "crps", "cost"]


def method_inputs(wildcards):
    """Inputs of a baseline run: the prepared split, and the backbone for the methods that start from it."""
    run = f"results/{wildcards.experiment}/{wildcards.dataset}/split{wildcards.split}"
    inputs = {"prepared": f"{run}/prepared.npz"}
    if wildcards.method in BACKBONE_METHODS or wildcards.method == "multiswag":  # MultiSWAG: component 0's start
        inputs["backbone"] = f"{run}/backbone/model.pt"
        inputs["backbone_meta"] = f"{run}/backbone/meta.json"
    if wildcards.method == "multiswag":  # component 0: the SWAG run's posterior (rule run_swag)
        n = int(method_cfg(wildcards.experiment, "multiswag", wildcards.dataset)["components"])
        inputs["components"] = [f"{run}/swag/posterior.pt"] + [
            f"{run}/multiswag/components/{c}.pt" for c in range(1, n)
        ]
        inputs["component_metas"] = [p.replace(".pt", ".json") for p in inputs["components"]]
    candidates = uci_candidates(wildcards.experiment, wildcards.dataset, wildcards.split, wildcards.method)
    if candidates:  # the grid fitted one candidate a job: this job chooses and samples
        inputs["candidates"] = candidates
        inputs["candidate_records"] = [p.replace(".pt", ".json") for p in candidates]
    return inputs


def candidate_inputs(wildcards):
    """Inputs of one candidate of a UCI grid: the prepared split, and the backbone where the candidate is it (MC
    Dropout at the backbone's own rates); the candidates that train their own network do not wait for it."""
    run = f"results/{wildcards.experiment}/{wildcards.dataset}/split{wildcards.split}"
    inputs = {"prepared": f"{run}/prepared.npz"}
    cfg = method_cfg(wildcards.experiment, wildcards.method, wildcards.dataset)
    model = model_cfg(wildcards.experiment, wildcards.dataset)
    if needs_backbone(wildcards.method, model, cfg, int(wildcards.candidate)):
        inputs["backbone"] = f"{run}/backbone/model.pt"
        inputs["backbone_meta"] = f"{run}/backbone/meta.json"
    return inputs


def component_inputs(wildcards):
    """Inputs of one MultiSWAG component 1..L-1: the prepared split, and component 0's meta (the candidates the
    SWAG run scored, at which the component draws)."""
    run = f"results/{wildcards.experiment}/{wildcards.dataset}/split{wildcards.split}"
    return {"prepared": f"{run}/prepared.npz", "first": f"{run}/swag/posterior.json"}


def samples_and_metrics(dataset):
    """{method: {"samples": [...], "metrics": [...]}} over the configured splits (stochattn.experiments.uci_figures input)."""
    return {
        m: {
            "samples": [f"results/uci/{dataset}/split{k}/{m}/samples.npz" for k in range(n_splits(dataset))],
            "metrics": [f"results/uci/{dataset}/split{k}/{m}/metrics.json" for k in range(n_splits(dataset))],
        }
        for m in METHODS
    }


def flat_paths(mapping):
    return [p for entry in mapping.values() for paths in entry.values() for p in paths]


def provenance_config(experiment="uci"):
    """The config subset recorded in provenance: what defines the numbers (not where data came from)."""
    keys = ["seed", "datasets", "methods", "splits", "num_samples", "model", "train", "method_params", "evaluate"]
    subset = {k: config[k] for k in keys}
    subset["dataset_overrides"] = {d: o for d, o in config.get("dataset_overrides", {}).items() if d in DATASETS}
    subset["data"] = {k: v for k, v in config["data"].items() if k not in ("mirrors", "store")}
    if experiment == "toy":
        subset["toy"] = config["toy"]
    subset["custom_datasets"] = {  # where the files come from is left out, as for the mirrors
        d: {k: v for k, v in spec.items() if k in ("n_splits", "verify")}
        for d, spec in config["custom_datasets"].items()
        if d in DATASETS
    }
    subset["protocol_deviations"] = protocol_deviations()
    return subset


SEED_RULE = {
    "base": config["seed"],
    "formula": "seed(stage, dataset, split) = base + 1e8 * stage_index + dataset_offset + 1e5 * split; "
    "dataset_offset = 1e7 * dataset_index (built-in data sets, toy) or custom_dataset_offset (hash of the name)",
    "stage_index": {s: i for i, s in enumerate(SEED_STAGES)},
    "dataset_index": DATASET_INDEX,
    "custom_dataset_offset": {d: dataset_offset(d) for d in DATASETS if d not in DATASET_INDEX},
}


# ---------------------------------------------------------------------------------------------------------------
# resources (rough sizes for a GPU node; a cluster profile overrides them with set-resources)
# ---------------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _rows(dataset):
    """Rows of ``dataset``: the registry's n_rows; for a custom data set without one, the lines of its data.txt
    in the first source that has it (10000 when none has it yet)."""
    if dataset == TOY_DATASET:
        return int(config["toy"]["n"])
    ds = DATASET_REGISTRY[dataset]
    if ds.n_rows is not None:
        return ds.n_rows
    path = locate_uci_file(ds, "data.txt", config["data"]["mirrors"])
    if path is None:
        return 10_000
    with open(path, "rb") as fh:
        return max(1, sum(1 for line in fh if line.strip()))


def _trainings(experiment, method, dataset=None):
    """Full trainings a job does, in units of one backbone training (the cost model of facts.md)."""
    cfg = method_cfg(experiment, method, dataset)
    if method == "multiswag_component":  # one backbone training and SWAG's phases (every candidate SWAG scored)
        return 1 + _trainings(experiment, "swag", dataset)
    if method in ("ivon", "hsa"):
        return len(cfg.get("grid", [{}]))
    model = model_cfg(experiment, dataset)
    if method == "swag":  # its grid's SWAG phases count as one training; a widening adds up to its bound of phases
        grid = len(grid_entries(cfg))
        return (grid + widening_bound(method, model, cfg)) / grid
    if method == "mc_dropout":  # one network per grid entry other than the backbone's own rates, and per candidate
        # a widening can add (stochattn.experiments.grids.widening_bound: an upper bound)
        grid = len(grid_entries(cfg))
        trained = sum(not needs_backbone(method, model, cfg, k) for k in range(grid))
        return max(0.25, trained + widening_bound(method, model, cfg))
    if method == "multiswag":  # the pooled samples scored (component 0's are drawn in SWAG's job); where the
        # pooled choice widens the grid, every component's phase at each candidate added (one phase: 1 / grid trainings)
        added = int(cfg["components"]) * pooled_widening_bound(cfg) / len(grid_entries(cfg))
        return 0.25 + added
    return 0.25  # sa (BO passes) on the trained backbone


# ---------------------------------------------------------------------------------------------------------------
# cluster: every rule that trains or samples a model declares its GPU need here (resources gpu=GPUS_PER_JOB,
# threads: GPU_THREADS), so a rule derived with `use rule ... as` inherits it and no profile keeps a list of rules;
# the profile only names partitions (slurm/partitions.yaml: the SLURM plugin sends jobs with a gpu resource to a
# partition with GPUs). Every runtime request is bounded by cluster.max_runtime_hours, retries included.
# ---------------------------------------------------------------------------------------------------------------
CLUSTER = config["cluster"]
GPUS_PER_JOB = int(CLUSTER["gpus_per_job"])
GPU_THREADS = int(CLUSTER["gpu_threads"])
MAX_RUNTIME_MIN = 60 * float(CLUSTER["max_runtime_hours"])


def bounded_runtime(job, minutes, attempt, wildcards, work="", resumable=False):
    """stochattn.resources.runtime_request for one job (``job``: its rule's name) doing ``minutes`` of counted
    work (``work`` described), doubled on a retry, at most cluster.max_runtime_hours; fails the DAG with what to
    change when the work cannot fit. ``resumable``: the job's training resumes from its last saved epoch."""
    from stochattn.resources import runtime_request

    label = f"{job} ({', '.join(f'{k}={v}' for k, v in wildcards.items())})"
    # checked where jobs are planned for a queue: a cluster executor or a dry run (a submitted job re-evaluates its
    # resources without the profile's retries; a local run has no queue)
    queued = workflow.is_main_process and (workflow.dryrun or not workflow.local_exec)
    return runtime_request(minutes, attempt, MAX_RUNTIME_MIN, job=label, work=str(work), resumable=resumable,
                           retries=workflow.execution_settings.retries, check=queued)  # fmt: skip


def mem_mb_train(wildcards, attempt):
    return int((2000 + _rows(wildcards.dataset) // 20) * attempt)


_MEASURED = load_dataset_estimates(
    None if config.get("runtime_estimates") is None else Path(workflow.basedir) / config["runtime_estimates"]
)


def _runtime(family, wildcards, trainings, attempt, resumable=False):
    """Minutes, doubled on each retry (bounded_runtime): the measured request of ``family`` on the job's data set
    (config runtime_estimates, from benchmark records), else the cost model: ``trainings`` x (20 + 2 per 1000
    rows), at least 15 (generous for one GPU)."""
    dataset = wildcards.dataset
    measured = _MEASURED.get(family, {}).get(dataset)
    work = "measured" if measured is not None else f"{trainings:g} trainings of {_rows(dataset)} rows"
    if measured is None:
        measured = max(15, (20 + 2 * _rows(dataset) / 1000) * trainings)
    return bounded_runtime(family, measured, attempt, wildcards, work, resumable)


def runtime_backbone(wildcards, attempt):
    return _runtime("train_backbone", wildcards, 1, attempt, resumable=True)


def runtime_method(wildcards, attempt):
    """One method's job (its trainings in backbone units); calibrate_sa is SA's job."""
    method = wildcards.get("method", "sa")
    family = f"{'calibrate_sa' if method == 'sa' else 'run_method'}/{method}"
    if method != "sa" and uci_searched(wildcards.experiment, method, wildcards.dataset):
        # the choice and the sampling (its grid's candidates are fitted by uci_candidate jobs), and the networks a
        # widening trains beyond the grid's edge (MC Dropout)
        cfg = method_cfg(wildcards.experiment, method, wildcards.dataset)
        trainings = 0.25 + widening_bound(method, model_cfg(wildcards.experiment, wildcards.dataset), cfg)
    else:
        trainings = _trainings(wildcards.experiment, method, wildcards.dataset)
    return _runtime(family, wildcards, trainings, attempt)


def runtime_candidate(wildcards, attempt):
    """One candidate of a UCI grid (a uci_candidate job): one training and its validation samples (the backbone's
    candidate: the samples only)."""
    cfg = method_cfg(wildcards.experiment, wildcards.method, wildcards.dataset)
    model = model_cfg(wildcards.experiment, wildcards.dataset)
    trainings = 0.25 if needs_backbone(wildcards.method, model, cfg, int(wildcards.candidate)) else 1
    return _runtime(f"uci_candidate/{wildcards.method}", wildcards, trainings, attempt, resumable=True)


_STEP_COSTS = (
    None if config.get("gpu_step_costs") is None else load_step_costs(Path(workflow.basedir) / config["gpu_step_costs"])
)


def gpu_runtime(job, flat, model, work, batch, resumable=False):
    """Runtime (minutes, doubled on each retry, bounded_runtime) of the GPU jobs named ``job``:
    stochattn.resources.gpu_minutes of ``work(wildcards)`` (a resources.Work) at the measured step costs of
    ``model(wildcards)`` (a key of config gpu_step_costs) and steps of ``batch`` inputs; ``flat`` minutes where
    gpu_step_costs is null."""

    def runtime(wildcards, attempt):
        if _STEP_COSTS is None:
            return bounded_runtime(job, flat, attempt, wildcards, "flat request", resumable)
        cost = _STEP_COSTS["costs"][model(wildcards)]
        done = work(wildcards)
        minutes = gpu_minutes(done, cost, batch, config["gpu_runtime_factor"])
        return bounded_runtime(job, minutes, attempt, wildcards, done, resumable)

    return runtime


def runtime_component(wildcards, attempt):
    """One MultiSWAG component (one training and one SWAG phase)."""
    return _runtime("multiswag_component", wildcards, _trainings(wildcards.experiment, "multiswag_component"), attempt)


# ---------------------------------------------------------------------------------------------------------------
# captions: what differs from the paper (config/paper_protocol.yaml, the values the paper states, each with its
# section) and the project's choices the paper leaves open, written into every caption (stochattn.protocol)
# ---------------------------------------------------------------------------------------------------------------
PAPER_PROTOCOL = load_paper_protocol(Path(workflow.basedir) / "config" / "paper_protocol.yaml")

# keys whose values do not change what a number means (custom data sets: named under datasets / unverified data)
_NOT_PROTOCOL = set(NOT_PROTOCOL)


def _run_config():
    """The config as run: ``methods`` lists every run the tables show (derived ones such as sa_match included)."""
    return {**config, "methods": METHODS}


def protocol_deviations():
    """{"reduced", "changed", "added", "unverified_data", "project_choices"}: lists of "key=value (paper: ...)"
    for the running config (stochattn.protocol.protocol_deviations)."""
    return _protocol_deviations(_run_config(), PAPER_PROTOCOL, _NOT_PROTOCOL)


def protocol_note():
    """The caption paragraph: report.note, S, reductions / changes from the paper, project choices."""
    return _protocol_note(_run_config(), PAPER_PROTOCOL, config["report"]["note"], _NOT_PROTOCOL)


def toy_caption():
    """Caption of the teaser's toy panel (c): the data, the trend check, the model and training, the protocol."""
    toy = config["toy"]
    return (f"Toy data: n={toy['n']} points (25 % test), noise sd {toy['noise']}; every method's point prediction "
            f"is within RMSE {toy['max_trend_rmse']} of the backbone's (checked when the figure is drawn); model "
            f"{model_cfg('toy')}, training {train_cfg('toy')}. {protocol_note()}")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# evaluate: one job per split (rules/evaluate.smk)
# ---------------------------------------------------------------------------------------------------------------
def evaluate_inputs(experiment, methods):
    """Input function: ``<method>_samples`` and ``<method>_meta`` of every run of the split."""

    def inputs(wildcards):
        run = f"results/{experiment}/{wildcards.dataset}/split{wildcards.split}"
        files = {}
        for m in methods:
            files[f"{m}_samples"] = f"{run}/{m}/samples.npz"
            files[f"{m}_meta"] = f"{run}/{m}/meta.json"
        return files

    return inputs


def evaluate_outputs(experiment, methods):
    return {m: f"results/{experiment}/{{dataset}}/split{{split}}/{m}/metrics.json" for m in methods}
