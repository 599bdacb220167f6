# Helpers shared by every rule file: names, seeds, paths, per-experiment configuration, resources, captions.
# Only cheap imports here: the workflow is parsed again for every cluster job; torch is imported by the scripts.

import copy
import math
from pathlib import Path

import yaml

from stochattn.data.uci import UCI_DATASETS


# ---------------------------------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------------------------------
# stochattn.experiments.uci.METHODS / BACKBONE_METHODS (tests/test_workflow.py checks that they agree)
ALL_METHODS = ["sa", "mc_dropout", "swag", "multiswag", "ivon", "hsa"]
BACKBONE_METHODS = ["sa", "mc_dropout", "swag"]  # start from the shared deterministic backbone
BASELINES = [m for m in ALL_METHODS if m != "sa"]
TOY_DATASET = "sinusoid"

DATASETS = list(config["datasets"])
METHODS = list(config["methods"])
TOY_METHODS = list(config["toy"]["methods"])

# Relative mirror folders resolve against the workflow folder (the one holding the Snakefile), not the working
# directory, so `--directory elsewhere` still finds ../shared/data. Read by the fetch script from the config (not a
# param): where a verified copy comes from does not change the data, so it must not trigger reruns.
config["data"]["mirrors"] = [
    str((Path(workflow.basedir) / Path(m).expanduser()).resolve()) for m in config["data"]["mirrors"]
]


def n_splits(dataset):
    """Gal splits used for ``dataset``: the first ``config["splits"]`` of its own (protein has 5)."""
    return min(int(config["splits"]), UCI_DATASETS[dataset].n_splits)


# ---------------------------------------------------------------------------------------------------------------
# seeds: base + stage / data set / split offsets, independent of which data sets, splits or methods are configured
# ---------------------------------------------------------------------------------------------------------------
# Strides leave room for the offsets the library adds to a seed it is given (seed + 1 for calibration-split
# samples, seed + 1000 * (component + 1) for MultiSWAG components), so no two streams collide, and keep every seed
# below 2**31 for base seeds up to 1e9 (schema maximum).
SEED_STAGES = ["prepare", "backbone", *ALL_METHODS, "evaluate"]
DATASET_INDEX = {name: i for i, name in enumerate(UCI_DATASETS)}
DATASET_INDEX[TOY_DATASET] = len(DATASET_INDEX)
STAGE_STRIDE, DATASET_STRIDE, SPLIT_STRIDE = 100_000_000, 10_000_000, 100_000


def seed_for(stage, dataset, split):
    """Seed of ``stage`` (prepare, backbone, a method, evaluate) for one data set and split."""
    return (
        int(config["seed"])
        + STAGE_STRIDE * SEED_STAGES.index(stage)
        + DATASET_STRIDE * DATASET_INDEX[dataset]
        + SPLIT_STRIDE * int(split)
    )


# ---------------------------------------------------------------------------------------------------------------
# per-experiment configuration (the toy overrides model / train / method_params key by key)
# ---------------------------------------------------------------------------------------------------------------
def _merged(base, override):
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def model_cfg(experiment):
    return _merged(config["model"], config["toy"]["model"] if experiment == "toy" else None)


def train_cfg(experiment):
    return _merged(config["train"], config["toy"]["train"] if experiment == "toy" else None)


def method_cfg(experiment, method):
    base = config["method_params"].get(method, {})
    return _merged(base, config["toy"]["method_params"].get(method) if experiment == "toy" else None)


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


def uci_targets():
    files = [f for t in UCI_TABLES for f in table_files(f"uci_{t}")]
    files += [f for d in DATASETS for f in uci_dataset_figures(d)]
    files += figure_files("uci_cost")
    return files


UCI_TABLES = ["master", "crps", "cost"]


def method_inputs(wildcards):
    """Inputs of a baseline run: the prepared split, and the backbone for the methods that start from it."""
    run = f"results/{wildcards.experiment}/{wildcards.dataset}/split{wildcards.split}"
    inputs = {"prepared": f"{run}/prepared.npz"}
    if wildcards.method in BACKBONE_METHODS:
        inputs["backbone"] = f"{run}/backbone/model.pt"
        inputs["backbone_meta"] = f"{run}/backbone/meta.json"
    return inputs


def samples_and_metrics(dataset):
    """{method: {"samples": [...], "metrics": [...]}} over the configured splits (stochattn.figures input)."""
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
    subset["data"] = {k: v for k, v in config["data"].items() if k not in ("mirrors",)}
    if experiment == "toy":
        subset["toy"] = config["toy"]
    subset["protocol_deviations"] = protocol_deviations()
    return subset


SEED_RULE = {
    "base": config["seed"],
    "formula": "seed(stage, dataset, split) = base + 1e8 * stage_index + 1e7 * dataset_index + 1e5 * split",
    "stage_index": {s: i for i, s in enumerate(SEED_STAGES)},
    "dataset_index": DATASET_INDEX,
}


# ---------------------------------------------------------------------------------------------------------------
# resources (rough sizes for a GPU node; a cluster profile overrides them with set-resources)
# ---------------------------------------------------------------------------------------------------------------
def _rows(dataset):
    return UCI_DATASETS[dataset].n_rows if dataset in UCI_DATASETS else int(config["toy"]["n"])


def _trainings(experiment, method):
    """Full trainings a job does, in units of one backbone training (the cost model of facts.md)."""
    cfg = method_cfg(experiment, method)
    if method == "multiswag":
        return int(cfg.get("components", 10)) * 1.5
    if method == "ivon":
        return len(cfg.get("grid", [{}]))
    if method in ("hsa", "swag"):
        return 1
    return 0.25  # sa (BO passes) and mc_dropout (sampling only) on the frozen backbone


def mem_mb_train(wildcards, attempt):
    return int((2000 + _rows(wildcards.dataset) // 20) * attempt)


def runtime_backbone(wildcards, attempt):
    """Minutes: 20 + 2 per 1000 rows per training (generous for one GPU), doubled on each retry."""
    return int(math.ceil((20 + 2 * _rows(wildcards.dataset) / 1000) * attempt))


def runtime_method(wildcards, attempt):
    """Minutes for one method's job (its trainings in backbone units), doubled on each retry."""
    method = wildcards.get("method", "sa")
    one = 20 + 2 * _rows(wildcards.dataset) / 1000
    return int(math.ceil(max(15, one * _trainings(wildcards.experiment, method)) * attempt))


# ---------------------------------------------------------------------------------------------------------------
# captions: every deviation from the paper's protocol (config/config.yaml) is named automatically
# ---------------------------------------------------------------------------------------------------------------
with open(Path(workflow.basedir) / "config" / "config.yaml") as _fh:
    PAPER_CONFIG = yaml.safe_load(_fh)

# keys whose values do not change what a number means
_NOT_PROTOCOL = {"seed", "device", "progress", "data.mirrors", "data.allow_download", "report", "toy"}


def _leaves(tree, prefix=""):
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


def _fmt(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}" if value else "none"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if value is None:
        return "none"
    return str(value)


def protocol_deviations(cfg=None, reference=None):
    """``["key=value (paper protocol: value)", ...]`` for every leaf of the config that differs from
    config/config.yaml (the paper's protocol where the paper states it, our documented choice elsewhere), in the
    config's order."""
    cfg = config if cfg is None else cfg
    reference = PAPER_CONFIG if reference is None else reference
    ref = dict(_leaves(reference))
    out = []
    for key, value in _leaves(cfg):
        if any(key == k or key.startswith(f"{k}.") for k in _NOT_PROTOCOL):
            continue
        if key == "data.mirrors":
            continue
        if key in ref and ref[key] == value:
            continue
        if key == "splits":
            out.append(f"splits={value} (paper protocol: 20, 5 for protein)")
        elif key.startswith("data.max_train."):
            out.append(f"{key}={value} (paper protocol: all training rows)")
        else:
            out.append(f"{key}={_fmt(value)} (config.yaml: {_fmt(ref.get(key, 'not set'))})")
    return out


def protocol_note():
    """One caption sentence naming the configuration and its deviations from the paper's protocol."""
    dev = protocol_deviations()
    head = f"S={config['num_samples']} samples per method."
    if not dev:
        text = f"Paper protocol (config/config.yaml). {head}"
    else:
        text = f"{head} Reduced from the paper's protocol (config/config.yaml): " + "; ".join(dev) + "."
    note = config["report"]["note"].strip()
    return f"{note} {text}" if note else text
