# Helpers of the ERA5 experiment's rules (rules/era5.smk): names, seeds, paths, per-method configuration, captions.
# Kept apart from the rules (Snakemake's linter wants functions outside rule files); cheap imports only.

import re

ERA5 = config["era5"]
ERA5_STANDIN = ERA5["source"] == "standin"
ERA5_STANDIN_BACKBONE = ERA5["backbone"]["source"] == "standin"
ERA5_METHODS = [r for m in ERA5["methods"] for r in (m, *(d for d, src in DERIVED_METHODS.items() if src == m))]
ERA5_RUN_METHODS = [m for m in ERA5["methods"] if m not in ("sa", "swag")]  # rule era5_method
ERA5_STAGES = ["standin", "pretrain", "adapt", "sa", "swag", "multiswag", "ivon", "contextual_dropout", "hsa",
               "evaluate", "analyses"]  # fmt: skip
ERA5_METHOD_FUNCTIONS = ["sa", "swag", "multiswag", "ivon", "contextual_dropout", "hsa"]
ERA5_DIR = "results/era5"
ERA5_TABLES = [
    "climax_summary",
    "climax_crps_decomp",
    "swag_sweep_val",
    "swag_sweep_test",
    "climax_skill",
    "climax_cost",
]
ERA5_FIGURES = {
    "climax_pit_combined": "pit_combined",
    "climax_cost": "cost_figure",
    "climax_sharpness": "sharpness_figure",
    "climax_sharp25": "sharpness_figure",
    "climax_sharp50": "sharpness_figure",
    "climax_sharp75": "sharpness_figure",
    "climax_sharp_levels": "sharpness_figure",  # the paper's combined PI-25 / 50 / 75 figure
    "latency_appendix": "latency_figure",
    "bo_sensitivity": "bo_sensitivity",
    "bo_beta_hist": "bo_beta_hist",
    "nu_ablation": "nu_ablation",
    "teaser_climax_maps": "teaser_maps",
    "teaser_axes": "teaser_axes",
}
ERA5_NAMES = {*ERA5_TABLES, *ERA5_FIGURES, "climax_summary_cases"}
if ERA5_STANDIN != ERA5_STANDIN_BACKBONE:
    raise ValueError("config era5: source and backbone.source must both be 'standin' (offline) or neither")


def era5_seed(stage, component=0):
    """Seed of an ERA5 stage: base + 10^7 x stage + component."""
    return int(config["seed"]) + 10_000_000 * (1 + ERA5_STAGES.index(stage)) + int(component) + 7


def era5_backbone():
    if ERA5_STANDIN_BACKBONE:
        return f"{ERA5_DIR}/backbone/standin.pt"
    return f"{ERA5_DIR}/backbone/5.625deg.ckpt"


def era5_variables():
    """Input keys of the forecast: every key of the stand-in, ClimaX's 48 variables on WeatherBench."""
    from stochattn.data.era5 import WEATHERBENCH_VARIABLES

    if ERA5_STANDIN:
        s = ERA5["standin"]
        return [k for v in s["variables"]
                for k in ([f"{v}_{lv}" for lv in s["levels"]] if WEATHERBENCH_VARIABLES[v][1] else [v])]  # fmt: skip
    from stochattn.data.era5 import CLIMAX_DEFAULT_VARS

    return list(CLIMAX_DEFAULT_VARS)


def era5_cases():
    """Every (target, lead) case of era5.targets x era5.lead_hours (or the explicit list era5.cases), checked at
    parse time (stochattn.data.era5.forecast_cases). The first case is the main one: its files keep the paper's
    names (results/era5/..., climax_summary); each other case lives in results/era5/<target>_<lead>h/ and its tables
    and figures end in _<target>_<lead>h."""
    from stochattn.data.era5 import forecast_cases

    step = int(ERA5["standin"]["output_hours"]) if ERA5_STANDIN else 1  # WeatherBench: hourly
    return forecast_cases(ERA5["targets"], ERA5["lead_hours"], era5_variables(), step, ERA5.get("cases"))


ERA5_CASES = era5_cases()
ERA5_CASE_BY_SUB = {c.sub: c for c in ERA5_CASES}
ERA5_CASE_DIR = f"{ERA5_DIR}{{era5_sub}}"  # results/era5 (the main case) or results/era5/<target>_<lead>h


def era5_case(w):
    """The case of a job's wildcards (``era5_sub``), or the one a table or figure name ends with."""
    if hasattr(w, "era5_sub"):
        return ERA5_CASE_BY_SUB[w.era5_sub]
    return era5_split_name(getattr(w, "era5_table", None) or w.era5_figure)[1]


def era5_split_name(name):
    """(table or figure name without the case suffix, case)."""
    for c in ERA5_CASES[1:]:
        if name.endswith(c.sfx) and name[: -len(c.sfx)] in ERA5_NAMES:
            return name[: -len(c.sfx)], c
    return name, ERA5_CASES[0]


def era5_years(climate):
    """{partition: [years]} of a climate's data."""
    if ERA5_STANDIN:
        return {p: [int(y) for y in ys] for p, ys in ERA5["standin"]["climates"][climate]["years"].items()}
    return ERA5["weatherbench"]["years"]


def era5_pair_counts():
    """Forecast pairs per partition (train, val, test): the partition's cap, or every step of its years where
    uncapped (WeatherBench hourly, the stand-in output_hours); an upper bound."""
    counts = {}
    for part in ("train", "val", "test"):
        cap = ERA5["max_pairs"].get(part)
        if cap is None:
            if ERA5_STANDIN:
                days = sum(ERA5["standin"]["climates"]["finetune"]["years"].get(part, {}).values())
                cap = days * 24 // int(ERA5["standin"]["output_hours"])
            else:
                cap = 8784 * len(ERA5["weatherbench"]["years"][part])
        counts[part] = int(cap)
    return counts


def era5_pairs_mb():
    """Size of pairs.npz in MB (float32 inputs of every variable, one target) at :func:`era5_pair_counts`."""
    from stochattn.resources import pairs_mb

    return sum(pairs_mb(n, len(era5_variables())) for n in era5_pair_counts().values())


def era5_runtime(job, flat, work, resumable=False):
    """gpu_runtime of the ERA5 jobs named ``job`` doing ``work(sizes, wildcards)``, at the ClimaX step costs and the
    pair counts with the validation pairs halved into val and cal (experiments.era5.val_cal_split)."""
    from stochattn.resources import Sizes

    n = era5_pair_counts()
    sizes = Sizes.halving_validation(n["train"], n["val"], n["test"])
    return gpu_runtime(job, flat, lambda w: "climax", lambda w: work(sizes, w), int(ERA5["train"]["batch_size"]),
                       resumable)  # fmt: skip


def era5_adapt_runtime():
    from stochattn.resources import adapt_work

    return era5_runtime("era5_adapt", 240, lambda sizes, w: adapt_work(sizes, ERA5["train"]), resumable=True)


def era5_method_runtime(method=None):
    """Runtime of one method's job (``method``, else the job's era5_method wildcard)."""
    from stochattn.resources import method_work

    def work(sizes, w):
        m = method or w.era5_method
        return method_work(m, sizes, era5_method_cfg(m), ERA5["train"], config["num_samples"],
                           swag_scales=len(ERA5["swag_scales"]) if m == "swag" else 0,
                           multiswag_components=ERA5_MULTISWAG_L if m == "swag" else 0)  # fmt: skip

    return era5_runtime("era5_method" if method is None else f"era5_method ({method})", 480, work)


def era5_member_runtime():
    from stochattn.resources import member_work

    return era5_runtime("era5_multiswag_member", 480,
                        lambda sizes, w: member_work(sizes, era5_method_cfg("multiswag"), ERA5["train"],
                                                     config["num_samples"]), resumable=True)  # fmt: skip


def era5_analyses_sweep_runtime():
    """The analyses' nu sweep and test operating points (the latency is left out: a few hundred passes)."""
    from stochattn.resources import analyses_sweep_work

    return era5_runtime(
        "era5_analyses_sweep", 120, lambda sizes, w: analyses_sweep_work(sizes, ERA5["analyses"], config["num_samples"])
    )


def era5_analyses_bo_runtime():
    """One BO seed of the analyses on one nu range."""
    from stochattn.resources import analyses_bo_work

    return era5_runtime("era5_analyses_bo", 60, lambda sizes, w: analyses_bo_work(sizes, era5_method_cfg("sa")))


def era5_bo_ranges():
    """{"bo_seeds": the sa run's nu range, "bo_second_range": the second one (when configured)}."""
    sa, second = era5_method_cfg("sa"), ERA5["analyses"].get("bo_second_range")
    ranges = {"bo_seeds": [int(sa["nu_min"]), int(sa["nu_max"])]}
    if second is not None:
        ranges["bo_second_range"] = [int(second[0]), int(second[1])]
    return ranges


def era5_bo_files(w, grouped=False):
    """The BO runs' files of a case (written by era5_analyses_bo), per range in seed order (``grouped``: by range)."""
    files = {key: [f"{ERA5_DIR}{w.era5_sub}/analyses/{key}_{int(s)}.json" for s in ERA5["analyses"]["bo_seeds"]]
             for key in era5_bo_ranges()}  # fmt: skip
    return files if grouped else [f for paths in files.values() for f in paths]


def era5_mem_mb(base=8000):
    """Memory of a job that loads pairs.npz: three times its size (the arrays, their tensors, the samples) plus
    ``base`` MB for the model (stochattn.resources.memory_needed; tests/test_workflow.py::test_dry_run_paper_protocol checks it against the
    rehearsal's measured peaks, config/measured_resources.yaml: up to 5.5 GB for the full-size ClimaX on CPU, where
    the activations are in host memory too; the former 4000 was short)."""
    from stochattn.resources import DATA_COPIES

    return int(base + DATA_COPIES * era5_pairs_mb())


def era5_method_cfg(method):
    """method_params[method] (shared with UCI, less its UCI-only keys) with era5.method_params[method] merged over it."""
    return adapter_method_params(config, ERA5, method)


if "multiswag" in ERA5["methods"]:  # its member 0 is the SWAG-LoRA run (rule era5_swag)
    check_multiswag_matches_swag(era5_method_cfg("swag"), era5_method_cfg("multiswag"))

# MultiSWAG-LoRA's L: SWAG's posterior file (member 0) holds its share of the samples at every candidate SWAG scored
ERA5_MULTISWAG_L = int(era5_method_cfg("multiswag")["components"])


def era5_run(method, name, sub="{era5_sub}"):
    """A run file of one case (``sub``: the case's folder suffix; a wildcard in rules)."""
    return f"{ERA5_DIR}{sub}/runs/{method}/{name}"


def era5_targets(cases=None):
    """Every run score, table and figure of ``cases`` (default: all, with the pooled table when there are
    several)."""
    cases = ERA5_CASES if cases is None else cases
    pooled = ["climax_summary_cases"] if cases is ERA5_CASES and len(ERA5_CASES) > 1 else []
    return [
        *(era5_run(m, f, c.sub) for c in cases for m in ERA5_METHODS for f in ("metrics.json", "spatial.json")),
        *(f for c in cases for t in ERA5_TABLES for f in table_files(t + c.sfx)),
        *(f for t in pooled for f in table_files(t)),
        *(f for c in cases for name in ERA5_FIGURES for f in figure_files(name + c.sfx)),
    ]


def era5_caption(case=None):
    """Caption paragraph of every ERA5 table and figure of a case (default: the main one): the data and backbone (a
    stand-in is named as such), the target, lead and units, and what the run reduces from the paper's protocol."""
    case = case or ERA5_CASES[0]
    parts = []
    if ERA5_STANDIN:
        s = ERA5["standin"]
        c = s["climates"]
        m = ERA5["backbone"]["standin"]["model"]
        parts.append(
            "AQUAPLANET STAND-IN, not ERA5: a Held-Suarez run of the dinosaur dynamical core "
            f"({s['resolution']}, regridded to the 5.625 deg grid, {s['output_hours']}-hourly; no seasons, orography "
            f"or moisture); backbone: a reduced ClimaX (patch {m['patch_size']}, D {m['embed_dim']}, {m['depth']} "
            f"blocks) pretrained in the DAG on a second climate (equator-pole contrast {c['pretrain']['delta_t_y']} K "
            f"vs {c['finetune']['delta_t_y']} K), not the 5.625deg.ckpt checkpoint."
        )
    else:
        parts.append("ERA5 (WeatherBench 5.625 deg), ClimaX 5.625deg.ckpt.")
    caps = {k: v for k, v in ERA5["max_pairs"].items() if v is not None}
    if caps:
        listed = ", ".join(f"{k} {v}" for k, v in caps.items())
        parts.append(f"Forecasts subsampled (evenly spaced): {listed}.")
    parts.append(f"{case.lead} h {case.target.label}, {case.target.units}; S = {config['num_samples']} samples per "
                 f"method; SA sites {'+'.join(ERA5['sa_sites'])}; LoRA r {ERA5['lora']['r']}, alpha "
                 f"{ERA5['lora']['alpha']}.")  # fmt: skip
    parts.append(
        "PIT, W1 and coverage pool every cell and forecast; the cells of one field are correlated, so "
        "W1 floors (which assume independent values) are lower bounds. ACC's climatology is the test "
        "period's own time mean per cell (ClimaX's convention), not WeatherBench 2's day-of-year one."
    )
    if config["report"]["note"]:
        parts.append(config["report"]["note"])
    return " ".join(parts)


def era5_marker(case=None):
    """The one line an ERA5 figure carries (stochattn.figures.figure_marker): the stand-in and the case, and whether
    the run is reduced (forecasts subsampled, or a report.note run); ``""`` for the paper's setting."""
    from stochattn.figures import figure_marker

    case = case or ERA5_CASES[0]
    reduced = any(v is not None for v in ERA5["max_pairs"].values()) or bool(config["report"]["note"])
    return figure_marker("aquaplanet" if ERA5_STANDIN else "", reduced=reduced,
                         detail=f"{case.target.label} {case.lead} h")  # fmt: skip


def era5_provenance_config():
    return {"seed": config["seed"], "num_samples": config["num_samples"], "era5": ERA5, "evaluate": config["evaluate"]}


def era5_run_files(name, case, methods=None):
    return {m: era5_run(m, name, case.sub) for m in (methods or ERA5_METHODS)}


def era5_table_inputs(wildcards):
    """What a ClimaX table reads, and nothing else (so its provenance names exactly the files it depends on)."""
    table, case = era5_split_name(wildcards.era5_table)
    if table == "climax_summary_cases":
        return {"metrics": [f for c in ERA5_CASES for f in era5_run_files("metrics.json", c).values()],
                "spatial": [f for c in ERA5_CASES for f in era5_run_files("spatial.json", c).values()]}  # fmt: skip
    runs = {"metrics": list(era5_run_files("metrics.json", case).values()),
            "spatial": list(era5_run_files("spatial.json", case).values())}  # fmt: skip
    sweep = {"sweep": era5_run("swag", "scale_sweep.json", case.sub)}
    case_dir = f"{ERA5_DIR}{case.sub}"
    return {
        "climax_summary": runs,
        "climax_crps_decomp": {**runs, "analyses": f"{case_dir}/analyses.json"},
        "swag_sweep_val": sweep,
        "swag_sweep_test": sweep,
        "climax_skill": {"adapter": f"{case_dir}/adapter.json"},
        "climax_cost": {"metas": list(era5_run_files("meta.json", case).values())},
    }[table]


def era5_table_params(wildcards):
    """Row label parts and units of a ClimaX table (the pooled table: every case's row label by its folder)."""
    table, case = era5_split_name(wildcards.era5_table)
    return {"name": table, "lead_hours": case.lead, "target": case.target.label, "units": case.target.units,
            "case_rows": {f"{ERA5_DIR}{c.sub}": c.row for c in ERA5_CASES}}  # fmt: skip


def era5_figure_args(figure):
    """Arguments of the figure writer of ``figure`` (stochattn.experiments.era5_report), a figure name with its
    case's suffix."""
    name, case = era5_split_name(figure)
    marker = era5_marker(case)  # the full caption: the rule's params.caption (report, .prov.json)
    analyses = f"{ERA5_DIR}{case.sub}/analyses.json"
    runs = lambda n: era5_run_files(n, case)  # noqa: E731
    if name == "climax_pit_combined":
        return {"metrics": runs("metrics.json"), "marker": marker}
    if name == "climax_cost":
        return {"metas": runs("meta.json"), "marker": marker}
    if name.startswith("climax_sharp"):
        level = {"climax_sharpness": 0.95, "climax_sharp_levels": [0.25, 0.5, 0.75]}.get(name) or int(name[-2:]) / 100
        return {"samples": runs("samples.npz"), "metrics": runs("metrics.json"), "level": level,
                "marker": marker}  # fmt: skip
    if name in ("latency_appendix", "bo_sensitivity", "bo_beta_hist", "nu_ablation"):
        return {"analyses": analyses, "marker": marker}
    if name == "teaser_climax_maps":
        units = {} if case.target.name == "z500" else {"target": case.target.label, "units": case.target.units}
        return {"samples": era5_run("sa", "samples.npz", case.sub), "prepared": f"{ERA5_DIR}{case.sub}/pairs.npz",
                "marker": marker, "index": int(ERA5["teaser_index"]), **units}  # fmt: skip
    if name == "teaser_axes":
        return {"metrics": runs("metrics.json"), "spatial": runs("spatial.json"),
                "metas": runs("meta.json"), "marker": marker}  # fmt: skip
    raise ValueError(f"unknown ERA5 figure {name!r}")


def era5_figure_inputs(wildcards):
    args = era5_figure_args(wildcards.era5_figure)
    files = []
    for value in args.values():
        if isinstance(value, dict):
            files += list(value.values())
        elif isinstance(value, str) and value.startswith("results/"):
            files.append(value)
    return files


def era5_members(w):
    """The MultiSWAG-LoRA member files of a job's case, in order (one job each: rule era5_multiswag_member)."""
    n = int(era5_method_cfg("multiswag")["components"])
    runs = f"{ERA5_DIR}{w.era5_sub}/runs"
    return [f"{runs}/swag/posterior.pt"] + [f"{runs}/multiswag/members/{c}.pt" for c in range(1, n)]


def era5_member_inputs(w):
    d = f"{ERA5_DIR}{w.era5_sub}"
    inputs = {"prepared": f"{d}/pairs.npz", "backbone": era5_backbone(), "adapter": f"{d}/adapter.pt",
              "adapter_meta": f"{d}/adapter.json"}  # fmt: skip
    # member 0 (the SWAG run): the candidates it scored, where the member draws
    inputs["first"] = f"{d}/runs/swag/posterior.json"
    return inputs


# ---------------------------------------------------------------------------------------------------------------
# validation searches split in jobs: one per candidate (rule era5_candidate), the choice and sampling in rule
# era5_select (era5_select_swag), the same samples as one era5_method (era5_swag) job fitting every candidate
# ---------------------------------------------------------------------------------------------------------------
ERA5_SEARCHED = searched_methods(ERA5["methods"], era5_method_cfg)


def era5_candidates(w, method=None):
    """The candidate files of a searched method's job (in grid order); none for a method fitted in one job."""
    m = method or w.era5_method
    if m not in ERA5_SEARCHED:
        return []
    return [era5_run(m, f"candidates/{k}.pt", w.era5_sub) for k in range(len(grid_entries(era5_method_cfg(m))))]


def era5_method_code(method, *extra):
    """run_method's code version for one method: the other methods' stage and search functions left out."""
    others = [m for m in ERA5_METHOD_FUNCTIONS if m != method]
    return code_for("stochattn.experiments.era5:run_method", *extra,
                    exclude=[f"stochattn.experiments.adapters:_{m}" for m in others]
                    + [f"stochattn.experiments.adapters:_{m}_search" for m in others
                       if m in SEARCH_METHODS])  # fmt: skip


def era5_candidate_code(method):
    """fit_candidate's code version for one method: its own search only (no method's stage function runs there)."""
    others = [m for m in SEARCH_METHODS if m != method]
    return code_for("stochattn.experiments.era5:fit_candidate",
                    exclude=[f"stochattn.experiments.adapters:_{m}_search" for m in others]
                    + [f"stochattn.experiments.adapters:_{m}" for m in ERA5_METHOD_FUNCTIONS])  # fmt: skip


def era5_candidate_runtime():
    """One candidate's fit and validation samples (its own settings: the grid entry over the method's)."""
    from stochattn.resources import candidate_work

    def work(sizes, w):
        cfg = era5_method_cfg(w.era5_method)
        return candidate_work(w.era5_method, sizes, {**cfg, **grid_entries(cfg)[int(w.candidate)]}, ERA5["train"],
                              config["num_samples"])  # fmt: skip

    return era5_runtime("era5_candidate", 480, work, resumable=True)


def era5_select_runtime(method=None):
    """The choice among fitted candidates: the winner's sampling only (SWAG: and its variance-scale sweep)."""
    from stochattn.resources import selection_work

    def work(sizes, w):
        m = method or w.era5_method
        return selection_work(m, sizes, config["num_samples"], grid=len(grid_entries(era5_method_cfg(m))),
                              swag_scales=len(ERA5["swag_scales"]) if m == "swag" else 0,
                              multiswag_components=ERA5_MULTISWAG_L if m == "swag" else 0)  # fmt: skip

    return era5_runtime("era5_select", 120, work)
