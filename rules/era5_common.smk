# Helpers of the ERA5 experiment's rules (rules/era5.smk): names, seeds, paths, per-method configuration, captions.
# Kept apart from the rules (Snakemake's linter wants functions outside rule files); cheap imports only.

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
    if ERA5_STANDIN:
        s = ERA5["standin"]
        return [f"{v}_{lv}" for v in s["variables"] for lv in s["levels"]]
    from stochattn.backbones.climax import CLIMAX_DEFAULT_VARS

    return list(CLIMAX_DEFAULT_VARS)


def era5_years(climate):
    """{partition: [years]} of a climate's data."""
    if ERA5_STANDIN:
        return {p: [int(y) for y in ys] for p, ys in ERA5["standin"]["climates"][climate]["years"].items()}
    return ERA5["weatherbench"]["years"]


def era5_pairs_mb():
    """Size of pairs.npz in MB (float32 inputs of every variable, one target): each partition's pair cap, or every
    step of its years where uncapped (WeatherBench hourly, the stand-in output_hours)."""
    variables = len(era5_variables())
    total = 0
    for part in ("train", "val", "test"):
        cap = ERA5["max_pairs"].get(part)
        if cap is None:
            if ERA5_STANDIN:
                days = sum(ERA5["standin"]["climates"]["finetune"]["years"].get(part, {}).values())
                cap = days * 24 // int(ERA5["standin"]["output_hours"])
            else:
                cap = 8784 * len(ERA5["weatherbench"]["years"][part])
        total += int(cap) * (variables + 1) * 32 * 64 * 4
    return total / 2**20


def era5_mem_mb(base=4000):
    """Memory of a job that loads pairs.npz: three times its size (the arrays, their tensors, the samples) plus
    ``base`` MB."""
    return int(base + 3 * era5_pairs_mb())


def era5_method_cfg(method):
    """method_params[method] (shared with UCI) with era5.method_params[method] merged over it."""
    return merged(config["method_params"].get(method, {}), ERA5.get("method_params", {}).get(method))


def era5_run(method, name):
    return f"{ERA5_DIR}/runs/{method}/{name}"


def era5_targets():
    return [
        *(era5_run(m, f) for m in ERA5_METHODS for f in ("metrics.json", "spatial.json")),
        *(f for t in ERA5_TABLES for f in table_files(t)),
        *(f for name in ERA5_FIGURES for f in figure_files(name)),
    ]


def era5_caption():
    """Caption paragraph of every ERA5 table and figure: the data and backbone (a stand-in is named as such) and
    what the run reduces from the paper's protocol."""
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
    parts.append(f"{ERA5['lead_hours']} h Z500, m^2 s^-2; S = {config['num_samples']} samples per method; SA sites "
                 f"{'+'.join(ERA5['sa_sites'])}; LoRA r {ERA5['lora']['r']}, alpha {ERA5['lora']['alpha']}.")  # fmt: skip
    if config["report"]["note"]:
        parts.append(config["report"]["note"])
    return " ".join(parts)


def era5_provenance_config():
    return {"seed": config["seed"], "num_samples": config["num_samples"], "era5": ERA5, "evaluate": config["evaluate"]}


def era5_run_files(name, methods=None):
    return {m: era5_run(m, name) for m in (methods or ERA5_METHODS)}


def era5_table_inputs(wildcards):
    """What a ClimaX table reads, and nothing else (so its provenance names exactly the files it depends on)."""
    runs = {"metrics": list(era5_run_files("metrics.json").values()),
            "spatial": list(era5_run_files("spatial.json").values())}  # fmt: skip
    sweep = {"sweep": era5_run("swag", "scale_sweep.json")}
    return {
        "climax_summary": runs,
        "climax_crps_decomp": {**runs, "analyses": f"{ERA5_DIR}/analyses.json"},
        "swag_sweep_val": sweep,
        "swag_sweep_test": sweep,
        "climax_skill": {"adapter": f"{ERA5_DIR}/adapter.json"},
        "climax_cost": {"metas": list(era5_run_files("meta.json").values())},
    }[wildcards.era5_table]


def era5_figure_args(name):
    """Arguments of the figure writer of ``name`` (stochattn.experiments.era5_report)."""
    title = f"{name}: {era5_caption()}"
    analyses = f"{ERA5_DIR}/analyses.json"
    if name == "climax_pit_combined":
        return {"metrics": era5_run_files("metrics.json"), "title": title}
    if name == "climax_cost":
        return {"metas": era5_run_files("meta.json"), "title": title}
    if name.startswith("climax_sharp"):
        level = {"climax_sharpness": 0.95, "climax_sharp_levels": [0.25, 0.5, 0.75]}.get(name) or int(name[-2:]) / 100
        return {"samples": era5_run_files("samples.npz"), "metrics": era5_run_files("metrics.json"), "level": level,
                "title": title}  # fmt: skip
    if name in ("latency_appendix", "bo_sensitivity", "bo_beta_hist", "nu_ablation"):
        return {"analyses": analyses, "title": title}
    if name == "teaser_climax_maps":
        return {"samples": era5_run("sa", "samples.npz"), "prepared": f"{ERA5_DIR}/pairs.npz", "title": title,
                "index": int(ERA5["teaser_index"])}  # fmt: skip
    if name == "teaser_axes":
        return {"metrics": era5_run_files("metrics.json"), "spatial": era5_run_files("spatial.json"),
                "metas": era5_run_files("meta.json"), "title": title}  # fmt: skip
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


def era5_members():
    """The MultiSWAG-LoRA member files, in order (one job each: rule era5_multiswag_member)."""
    n = int(era5_method_cfg("multiswag")["components"])
    return [f"{ERA5_DIR}/runs/multiswag/members/{c}.pt" for c in range(n)]


def era5_member_inputs(w):
    inputs = {"prepared": f"{ERA5_DIR}/pairs.npz", "backbone": era5_backbone(), "adapter": f"{ERA5_DIR}/adapter.pt",
              "adapter_meta": f"{ERA5_DIR}/adapter.json"}  # fmt: skip
    if int(w.component) > 0:  # member 0 chose the SWAG settings
        inputs["first"] = f"{ERA5_DIR}/runs/multiswag/members/0.json"
    return inputs
