"""Every rule of rules/era5.smk but the figures: one call of stochattn.experiments.era5 (or its data / checkpoint /
evaluation / report helpers), chosen by the rule's name; the log file takes stdout and stderr."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from pathlib import Path  # noqa: E402

from stochattn.provenance import JobProvenance  # noqa: E402

sm = snakemake  # noqa: F821
p, w, rule = sm.params, sm.wildcards, sm.rule
job = JobProvenance(sm)  # the job's records: job.stage() embedded in a JSON output, job.sidecar(<output>)


if rule == "era5_standin":
    from stochattn.data.aquaplanet import generate_held_suarez

    s, c = p.standin, p.climate
    segments = {int(y): int(d) for part in ("train", "val", "test") for y, d in c["years"].get(part, {}).items()}
    manifest = generate_held_suarez(
        sm.output.data, segments=segments, variables=s["variables"], levels=s["levels"],
        spin_up_days=s["spin_up_days"], delta_t_y=c["delta_t_y"], delta_theta_z=c["delta_theta_z"],
        resolution=s["resolution"], dt_minutes=s["dt_minutes"], output_hours=s["output_hours"], seed=c["seed"],
        progress=sm.config["progress"],
    )
    job.sidecar(sm.output.data)
    print(f"stand-in {w.climate}: {manifest.get('seconds')}", flush=True)
elif rule == "era5_fetch":
    from stochattn.data.era5 import fetch_weatherbench
    from stochattn.io import save_json

    from stochattn.staging import STAGE_HINT, staged_only

    wb, data = p.weatherbench, sm.config["data"]
    years = sorted({y for ys in wb["years"].values() for y in ys})
    # an input of this rule is a mirror's manifest <mirror>/weatherbench/rehearsal.json (config/rehearsal.yaml)
    mirrors = [*data["mirrors"], *(str(Path(f).resolve().parent.parent) for f in sm.input)]
    try:
        record = fetch_weatherbench(sm.output.data, wb["folders"], years, mirrors=mirrors,
                                    allow_download=data["allow_download"] and not staged_only(),
                                    url_template=wb.get("url_template"))  # fmt: skip
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{err}; {STAGE_HINT}" if staged_only() else str(err)) from err
    save_json(Path(sm.output.data) / "fetch.json", record)
    job.sidecar(sm.output.data, extra={"fetched": True, "sources": record})  # every file's SHA-256 as fetched
elif rule == "era5_fetch_checkpoint":
    from stochattn.backbones.climax import fetch_climax_checkpoint

    from stochattn.staging import STAGE_HINT, staged_only

    ckpt = p.checkpoint
    try:
        fetched = fetch_climax_checkpoint(sm.output.checkpoint, url=ckpt["url"], sha256=ckpt.get("sha256"),
                                          mirrors=sm.config["data"]["mirrors"], allow_download=not staged_only())  # fmt: skip
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{err}; {STAGE_HINT}") from err
    job.sidecar(sm.output.checkpoint, extra={"fetched": True, "source": fetched["url"],
                                             "expected_sha256": ckpt.get("sha256")})  # fmt: skip
    print(fetched, flush=True)
elif rule == "era5_preprocess":
    from stochattn.data.era5 import preprocess_climax

    manifest = preprocess_climax(sm.input[0], sm.output.shards, p.variables, p.years, num_shards=p.num_shards,
                                 levels=p.levels, constants=p.constants)  # fmt: skip
    job.sidecar(sm.output.shards)
    print(f"keys: {manifest['keys']}", flush=True)
elif rule == "era5_evaluate":
    from stochattn.experiments.era5 import evaluate_spatial
    from stochattn.experiments.evaluate import REFERENCE, evaluate_split

    methods = list(p.methods)
    samples = {m: sm.input[f"{m}_samples"] for m in methods}

    def inputs_of(method):
        files = [samples[method], sm.input[f"{method}_meta"]]
        return files + ([samples[REFERENCE]] if method != REFERENCE and REFERENCE in samples else [])

    evaluate_split(samples, {m: sm.output[m] for m in methods}, seed=p.seed, levels=tuple(p.levels),
                   dataset=p.label, split=None,
                   provenance={m: job.stage(inputs_of(m)) for m in methods})  # fmt: skip
    evaluate_spatial(samples, {m: sm.output[m] for m in methods}, sm.input.prepared,
                     {m: sm.output[f"{m}_spatial"] for m in methods}, provenance=job.stage)  # fmt: skip
elif rule == "era5_analyses":
    from stochattn.experiments.era5 import gather_analyses

    gather_analyses(sm.input.sweep, p.bo_files, sm.output[0], provenance=job.stage())
elif rule == "era5_table":
    import os
    import time

    from stochattn import report
    from stochattn.experiments import era5_report

    started = time.time()
    t = p.table
    name = t["name"]
    files = {k: sm.input.get(k) for k in ("metrics", "spatial", "sweep", "adapter", "analyses", "metas")}
    cases = None
    if name == "climax_summary_cases":  # every case's runs, grouped by the case's folder (results/era5{sub})
        cases = {row: [[f for f in files[k] if str(Path(f).parents[2]) == folder] for k in ("metrics", "spatial")]
                 for folder, row in t["case_rows"].items()}  # fmt: skip
    spec, tidy = era5_report.build_table(name, **files, lead_hours=t["lead_hours"], target=t["target"],
                                         units=t["units"], cases=cases)  # fmt: skip
    written = report.write_table(
        tidy, os.path.splitext(sm.output.csv)[0], p.caption,
        {"rule": rule, "inputs": list(sm.input), "config_subset": p.config_subset, "seeds": p.seeds,
         "started": started, "extra": {"code": p.code}, "repo_dir": os.path.dirname(sm.scriptdir)},
        spec=spec,
    )
    print("wrote", *map(str, written), sep="\n  ", flush=True)
else:
    import torch

    from stochattn.experiments import era5
    from stochattn.provenance import check_model_job, resume_checkpoint
    from stochattn.training import resumable

    torch.set_num_threads(sm.threads)
    if rule != "era5_prepare":  # every other rule here trains or samples a model (the prepare rule is a CPU job)
        check_model_job(sm)
    progress = sm.config["progress"]
    if rule == "era5_pretrain_standin":
        meta = era5.pretrain_standin(sm.input[0], sm.output.state, model=p.model, pretrain=p.pretrain, seed=p.seed,
                                     progress=progress, provenance=job.stage())  # fmt: skip
        print(f"stand-in: best step {meta['best_step']}, {meta['seconds']:.1f} s", flush=True)
    elif rule == "era5_prepare":
        meta = era5.prepare(sm.input[0], sm.output.prepared, variables=p.variables, lead_hours=p.lead_hours,
                            target=p.target, max_pairs=p.max_pairs, progress=progress,
                            provenance=job.stage())  # fmt: skip
        print(f"pairs: {meta['n_pairs']}", flush=True)
    elif rule == "era5_adapt":
        meta = era5.adapt(sm.input.prepared, sm.input.backbone, sm.output.adapter, lora=p.lora, train=p.train,
                          seed=p.seed, allow_pickle=p.allow_pickle, progress=progress,
                          checkpoint=resume_checkpoint(sm), provenance=job.stage())  # fmt: skip
        print(f"LoRA: best epoch {meta['best_epoch']}, test skill {meta['test_skill']}", flush=True)
    elif rule in ("era5_method", "era5_calibrate_sa", "era5_swag", "era5_select", "era5_select_swag"):
        with resumable(resume_checkpoint(sm)):  # the trainings and SWAG phases of a method fitted here resume
            meta = era5.run_method(p.method, sm.input.prepared, sm.input.backbone, sm.input.adapter,
                                   Path(sm.output.samples).parent, lora=p.lora, train=p.train, method_cfg=p.method_cfg,
                                   num_samples=p.num_samples, seed=p.seed, sa_sites=p.sa_sites,
                                   swag_scales=p.swag_scales, allow_pickle=p.allow_pickle,
                                   require_skill=p.require_skill, members=sm.input.get("members"),
                                   swag_member=sm.output.get("member"), candidates=sm.input.get("candidates"),
                                   multiswag_components=p.get("multiswag_components"),
                                   progress=progress, provenance=job.stage())  # fmt: skip
        print(f"{p.method}: seconds {meta['seconds']}", flush=True)
    elif rule == "era5_candidate":
        with resumable(resume_checkpoint(sm)):  # a rerun after a kill resumes the training inside
            record = era5.fit_candidate(p.method, sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.output.state,
                                        index=p.index, lora=p.lora, train=p.train, method_cfg=p.method_cfg,
                                        num_samples=p.num_samples, seed=p.seed, allow_pickle=p.allow_pickle,
                                        require_skill=p.require_skill, progress=progress,
                                        provenance=job.stage())  # fmt: skip
        print(f"{p.method} candidate {p.index}: val CRPS {record['val_crps']}, {record['seconds']:.1f} s", flush=True)
    elif rule == "era5_multiswag_member":
        with resumable(resume_checkpoint(sm)):  # a rerun after a kill resumes the training inside
            meta = era5.train_multiswag_member(sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.output.state,
                                               component=p.component, lora=p.lora, train=p.train,
                                               method_cfg=p.method_cfg, num_samples=p.num_samples, seed=p.seed,
                                               first_path=sm.input.first, allow_pickle=p.allow_pickle,
                                               require_skill=p.require_skill, progress=progress,
                                               provenance=job.stage())  # fmt: skip
        print(f"multiswag member {p.component}: {meta['seconds']:.1f} s", flush=True)
    elif rule == "era5_analyses_sweep":
        a = p.analyses
        era5.sa_analyses_sweep(sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.input.calibration,
                               sm.output[0], lora=p.lora, sa_cfg=p.sa_cfg, nu_grid=a["nu_grid"],
                               latency_nu=a["latency_nu"], latency_batch=a["latency_batch"],
                               latency_repeats=a["latency_repeats"], num_samples=p.num_samples, seed=p.seed,
                               sa_sites=p.sa_sites, allow_pickle=p.allow_pickle, progress=progress,
                               provenance=job.stage())  # fmt: skip
    elif rule == "era5_analyses_bo":
        era5.sa_analyses_bo(sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.output[0], lora=p.lora,
                            sa_cfg=p.sa_cfg, nu_range=p.nu_range, bo_seed=p.bo_seed, seed=p.seed, sa_sites=p.sa_sites,
                            allow_pickle=p.allow_pickle, provenance=job.stage())  # fmt: skip
    else:
        raise ValueError(f"workflow_scripts/era5.py: no stage for rule {rule!r}")
