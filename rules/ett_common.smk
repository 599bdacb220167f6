# Helpers of the ETT experiment's rules (rules/ett.smk): names, seeds, paths, per-method configuration, captions.
# Kept apart from the rules (Snakemake's linter wants functions outside rule files); cheap imports only.

from stochattn.data.ett import ETT_DATASETS, check_horizons, pretraining_sources

ETT = config["ett"]
ETT_DATASETS_RUN = list(ETT["datasets"])
ETT_HORIZONS = [int(h) for h in ETT["horizons"]]
ETT_METHODS = [r for m in ETT["methods"] for r in (m, *(d for d, src in DERIVED_METHODS.items() if src == m))]
ETT_STANDIN = ETT["backbone"]["source"] == "standin"
_unknown_ett = [d for d in ETT_DATASETS_RUN if d not in ETT_DATASETS]
if _unknown_ett:
    raise ValueError(f"config ett.datasets: unknown ETT data set(s) {_unknown_ett}; known: {', '.join(ETT_DATASETS)}")

check_horizons(ETT_DATASETS_RUN, ETT_HORIZONS, int(ETT["context"]), ETT["adaptation_percent"])  # config errors
if ETT["enabled"] and ETT["figure"]["horizon"] not in ETT_HORIZONS:
    raise ValueError(f"config ett.figure.horizon: {ETT['figure']['horizon']} is not among ett.horizons {ETT_HORIZONS}")
# the stage functions of stochattn.experiments.ett (one per method): a job's code version leaves out the others'
ETT_METHOD_FUNCTIONS = ["sa", "swag", "multiswag", "ivon", "contextual_dropout", "hsa"]
ETT_STAGES = ["prepare", "pretrain", "adapt", *ETT_METHOD_FUNCTIONS, "evaluate"]
ETT_CONFIG = "results/ett/{ett_dataset}/H{horizon}"


def ett_seed(stage, dataset=None, horizon=0):
    """Seed of an ETT stage for one configuration: base + 10^7 x stage + 10^5 x data set + horizon."""
    index = 0 if dataset is None else 1 + list(ETT_DATASETS).index(dataset)
    return int(config["seed"]) + 10_000_000 * (1 + ETT_STAGES.index(stage)) + 100_000 * index + int(horizon)


def ett_backbone(wildcards):
    """The backbone file a configuration uses: its station's stand-in, or the public checkpoint."""
    if ETT_STANDIN:
        return f"results/ett/backbone/station{ETT_DATASETS[wildcards.ett_dataset].station}.pt"
    return "results/ett/backbone/timesfm-2.5-200m.safetensors"


def standin_sources(wildcards):
    """{data set: CSV} the stand-in of a station is pretrained on: the other station's data sets only."""
    evaluated = next(d for d in ETT_DATASETS.values() if d.station == int(wildcards.station))
    return {name: f"results/data/ett/{name}.csv" for name in pretraining_sources(evaluated)}


def ett_method_cfg(method):
    """method_params[method] (shared with UCI, less its UCI-only keys) with ett.method_params[method] merged over it."""
    return adapter_method_params(config, ETT, method)


if "multiswag" in ETT["methods"]:  # its member 0 is the SWAG-LoRA run (rule ett_swag)
    check_multiswag_matches_swag(ett_method_cfg("swag"), ett_method_cfg("multiswag"))

# MultiSWAG-LoRA's L: SWAG's posterior file (member 0) holds its share of the samples at every candidate SWAG scored
ETT_MULTISWAG_L = int(ett_method_cfg("multiswag")["components"])


def ett_run(dataset, horizon, method, name):
    return f"results/ett/{dataset}/H{horizon}/{method}/{name}"


def ett_metrics():
    return [ett_run(d, h, m, "metrics.json") for d in ETT_DATASETS_RUN for h in ETT_HORIZONS for m in ETT_METHODS]


ETT_TABLES = ["sharpness", "sharpness_pooled", "pooled", "pooled_levels", "pooled_scores", "cost", "zero_shot"]
# native; matched on the window to SA's coverage there (the paper's); matched by the factors fitted on the cal windows
ETT_FIGURES = {"ett_coverage": None, "ett_coverage_matched": "window", "ett_coverage_matched_cal": "cal"}
ETT_COLUMN_NAMES = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def ett_targets():
    return [
        *ett_metrics(),
        *(f for t in ETT_TABLES for f in table_files(f"ett_{t}")),
        *(f for name in ETT_FIGURES for f in figure_files(name)),
    ]


def ett_dataset_targets(dataset):
    return [ett_run(dataset, h, m, "metrics.json") for h in ETT_HORIZONS for m in ETT_METHODS]


# ---------------------------------------------------------------------------------------------------------------
# tables and figures (stochattn.experiments.ett_report)
# ---------------------------------------------------------------------------------------------------------------
def ett_caption():
    """Caption paragraph of every ETT table and figure: which backbone (a stand-in is named as such) and what the
    run reduces from the paper's protocol (App. C.1)."""
    parts = []
    if ETT_STANDIN:
        m, pre = ETT["backbone"]["standin"]["model"], ETT["backbone"]["standin"]["pretrain"]
        synthetic = f" and {pre['synthetic']} synthetic series" if pre.get("synthetic") else ""
        parts.append(
            f"STAND-IN BACKBONE, not the public TimesFM 2.5 200M checkpoint: a reduced TimesFM 2.5 module "
            f"({m['num_layers']} layers, d {m['model_dims']}, {m['num_heads']} heads) pretrained offline, per "
            f"station, on the other station's training rows{synthetic} ({pre['steps']} steps)."
        )
    else:
        parts.append("Backbone: TimesFM 2.5 200M (public checkpoint).")
    caps = {k: v for k, v in ETT["max_series"].items() if v is not None}
    if caps:
        parts.append("Windows subsampled (series per configuration, evenly spaced whole windows): "
                     + ", ".join(f"{k} {v}" for k, v in caps.items()) + " (paper: every window).")  # fmt: skip
    t = ETT["train"]
    parts.append(f"LoRA r {ETT['lora']['r']}, alpha {ETT['lora']['alpha']}; adapters: AdamW lr {t['lr']}, batch "
                 f"{t['batch_size']}, at most {t['max_epochs']} epochs (paper: 50), best validation epoch.")  # fmt: skip
    parts.append(f"S = {config['num_samples']} samples per method; flip invariance and positivity clamp off; "
                 "normalised units; coverage pooled over every column, window and step unless stated.")  # fmt: skip
    f = ETT["figure"]
    parts.append(f"Stated window (ett_sharpness, the coverage figures): column {f['column']}, test window "
                 f"{int(f['window'])} of each configuration (the figures: {f['dataset']} H={f['horizon']}).")  # fmt: skip
    if config["report"]["note"]:
        parts.append(config["report"]["note"])
    return " ".join(parts)


def ett_marker():
    """The one line an ETT figure carries (stochattn.figures.figure_marker): the stand-in backbone, and whether the
    run is reduced (windows subsampled, or a report.note run); ``""`` for the paper's setting."""
    from stochattn.figures import figure_marker

    reduced = any(v is not None for v in ETT["max_series"].values()) or bool(config["report"]["note"])
    return figure_marker("TimesFM pretrained offline" if ETT_STANDIN else "", reduced=reduced)


def ett_adapter_metas():
    return [f"results/ett/{d}/H{h}/adapter.json" for d in ETT_DATASETS_RUN for h in ETT_HORIZONS]


def ett_table_inputs(wildcards):
    """What an ETT table reads, and nothing else (so its provenance names exactly the files it depends on): the
    zero-shot table the adapters' records; the per-window sharpness table every run's samples, the prepared
    windows and SA's meta.json (its nu); every other table the runs' metrics."""
    if wildcards.table == "zero_shot":
        return {"adapters": ett_adapter_metas()}
    if wildcards.table == "sharpness":
        configs = [(d, h) for d in ETT_DATASETS_RUN for h in ETT_HORIZONS]
        return {"samples": [ett_run(d, h, m, "samples.npz") for d, h in configs for m in ETT_METHODS],
                "prepared": [f"results/ett/{d}/H{h}/prepared.npz" for d, h in configs],
                "sa_meta": [ett_run(d, h, "sa", "meta.json") for d, h in configs]}  # fmt: skip
    return {"metrics": ett_metrics()}


def ett_window():
    """The stated test window of the per-window sharpness table and the coverage figures (config ett.figure)."""
    f = ETT["figure"]
    return {"column": f["column"], "window": int(f["window"]), "columns": ETT_COLUMN_NAMES}


def ett_provenance_config():
    return {"seed": config["seed"], "num_samples": config["num_samples"], "ett": ETT, "evaluate": config["evaluate"]}


def ett_figure_inputs(wildcards):
    f = ETT["figure"]
    run = f"results/ett/{f['dataset']}/H{f['horizon']}"
    return {
        "prepared": f"{run}/prepared.npz",
        **{f"{m}_samples": f"{run}/{m}/samples.npz" for m in ETT_METHODS},
        **{f"{m}_metrics": f"{run}/{m}/metrics.json" for m in ETT_METHODS},
    }


def ett_figure_args(matched):
    f = ETT["figure"]
    run = f"results/ett/{f['dataset']}/H{f['horizon']}"
    which = {
        None: "native 95 % intervals",
        "window": "baselines conformally rescaled to SA's coverage on this window (as the paper)",
        "cal": "baselines conformally rescaled by factors fitted on the cal windows to SA's cal coverage",
    }[matched]
    return {
        "runs": {m: f"{run}/{m}/samples.npz" for m in ETT_METHODS},
        "metrics": {m: f"{run}/{m}/metrics.json" for m in ETT_METHODS},
        "prepared_path": f"{run}/prepared.npz",
        **ett_window(),
        "matched": matched,
        "title": f"{f['dataset']} H={f['horizon']}, {f['column']}, test window {f['window']}: {which}.",
        "marker": ett_marker(),  # the full caption: the rule's params.caption (report, .prov.json)
    }


def ett_members(w):
    """The MultiSWAG-LoRA member files of one configuration, in order (one job each: rule ett_multiswag_member)."""
    n = int(ett_method_cfg("multiswag")["components"])
    run = f"results/ett/{w.ett_dataset}/H{w.horizon}"
    return [f"{run}/swag/posterior.pt"] + [f"{run}/multiswag/members/{c}.pt" for c in range(1, n)]


def ett_member_inputs(w):
    run = f"results/ett/{w.ett_dataset}/H{w.horizon}"
    inputs = {"prepared": f"{run}/prepared.npz", "backbone": ett_backbone(w), "adapter": f"{run}/adapter.pt",
              "adapter_meta": f"{run}/adapter.json"}  # fmt: skip
    # member 0 (the SWAG run): the candidates it scored, where the member draws
    inputs["first"] = f"{run}/swag/posterior.json"
    return inputs


@functools.lru_cache(maxsize=None)  # asked once per job and retry; the same for every method of a configuration
def ett_sizes(dataset, horizon):
    """stochattn.resources.Sizes of one configuration: its windows (every column a series) at the configuration's
    caps, the validation windows halved into val and cal (experiments.ett.prepare)."""
    from stochattn.data.ett import ETT_COLUMNS, window_starts
    from stochattn.resources import Sizes

    caps, n = ETT["max_series"], {}
    for part in ("train", "val", "test"):
        pct = ETT["adaptation_percent"] if part == "train" else None
        count = len(window_starts(dataset, part, ETT["context"], int(horizon), adaptation_percent=pct)) * len(
            ETT_COLUMNS
        )
        n[part] = count if caps.get(part) is None else min(count, int(caps[part]))
    return Sizes.halving_validation(n["train"], n["val"], n["test"])


def _ett_measured_horizon(horizon):
    """The measured TimesFM horizon whose step costs price ``horizon``: the smallest at or above it, else the
    largest (then :func:`ett_runtime` scales the work by the decode passes, 128 steps each)."""
    measured = sorted(int(k.split("_h")[1]) for k in _STEP_COSTS["costs"] if k.startswith("timesfm_h"))
    fits = [h for h in measured if h >= int(horizon)]
    return fits[0] if fits else measured[-1]


def ett_runtime(job, flat, work, resumable=False):
    """gpu_runtime of the ETT jobs named ``job`` doing ``work(sizes, wildcards)``."""

    def priced(w):
        passes = math.ceil(int(w.horizon) / 128) / math.ceil(_ett_measured_horizon(w.horizon) / 128)
        return max(1.0, passes) * work(ett_sizes(w.ett_dataset, w.horizon), w)

    return gpu_runtime(job, flat, lambda w: f"timesfm_h{_ett_measured_horizon(w.horizon)}", priced,
                       int(ETT["train"]["batch_size"]), resumable)  # fmt: skip


def ett_adapt_runtime():
    from stochattn.resources import adapt_work

    return ett_runtime("ett_adapt", 120, lambda sizes, w: adapt_work(sizes, ETT["train"]), resumable=True)


def ett_method_runtime(method=None):
    """Runtime of one method's job (``method``, else the job's ett_method wildcard)."""
    from stochattn.resources import method_work

    def work(sizes, w):
        m = method or w.ett_method
        return method_work(m, sizes, ett_method_cfg(m), ETT["train"], config["num_samples"],
                           multiswag_components=ETT_MULTISWAG_L if m == "swag" else 0)  # fmt: skip

    return ett_runtime("ett_method" if method is None else f"ett_method ({method})", 240, work)


def ett_member_runtime():
    from stochattn.resources import member_work

    return ett_runtime("ett_multiswag_member", 240,
                       lambda sizes, w: member_work(sizes, ett_method_cfg("multiswag"), ETT["train"],
                                                    config["num_samples"]), resumable=True)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# validation searches split in jobs: one per candidate (rule ett_candidate), the choice and sampling in rule
# ett_select (ett_select_swag), the same samples as one ett_method job fitting every candidate
# ---------------------------------------------------------------------------------------------------------------
ETT_SEARCHED = searched_methods(ETT["methods"], ett_method_cfg)


def ett_candidates(w):
    """The candidate files of a searched method's job (in grid order); none for a method fitted in one job."""
    if w.ett_method not in ETT_SEARCHED:
        return []
    run = f"results/ett/{w.ett_dataset}/H{w.horizon}/{w.ett_method}/candidates"
    return [f"{run}/{k}.pt" for k in range(len(grid_entries(ett_method_cfg(w.ett_method))))]


def ett_method_code(method):
    """run_method's code version for one method: the other methods' stage and search functions left out."""
    others = [m for m in ETT_METHOD_FUNCTIONS if m != method]
    return code_for("stochattn.experiments.ett:run_method",
                    exclude=[f"stochattn.experiments.adapters:_{m}" for m in others]
                    + [f"stochattn.experiments.adapters:_{m}_search" for m in others
                       if m in SEARCH_METHODS])  # fmt: skip


def ett_candidate_code(method):
    """fit_candidate's code version for one method: its own search only (no method's stage function runs there)."""
    others = [m for m in SEARCH_METHODS if m != method]
    return code_for("stochattn.experiments.ett:fit_candidate",
                    exclude=[f"stochattn.experiments.adapters:_{m}_search" for m in others]
                    + [f"stochattn.experiments.adapters:_{m}" for m in ETT_METHOD_FUNCTIONS])  # fmt: skip


def ett_candidate_runtime():
    """One candidate's fit and validation samples (its own settings: the grid entry over the method's)."""
    from stochattn.resources import candidate_work

    def work(sizes, w):
        cfg = ett_method_cfg(w.ett_method)
        return candidate_work(w.ett_method, sizes, {**cfg, **grid_entries(cfg)[int(w.candidate)]}, ETT["train"],
                              config["num_samples"])  # fmt: skip

    return ett_runtime("ett_candidate", 240, work, resumable=True)


def ett_select_runtime():
    """The choice among fitted candidates: the winner's sampling only."""
    from stochattn.resources import selection_work

    def work(sizes, w):
        m = w.ett_method
        return selection_work(m, sizes, config["num_samples"], grid=len(grid_entries(ett_method_cfg(m))),
                              multiswag_components=ETT_MULTISWAG_L if m == "swag" else 0)  # fmt: skip

    return ett_runtime("ett_select", 60, work)
