"""Every rule of rules/ett.smk: one call of stochattn.experiments.ett (or its data / checkpoint / evaluation
helpers), chosen by the rule's name; the log file takes stdout and stderr."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from pathlib import Path  # noqa: E402

from stochattn.provenance import JobProvenance  # noqa: E402

sm = snakemake  # noqa: F821
p, w, rule = sm.params, sm.wildcards, sm.rule
job = JobProvenance(sm)  # the job's records: job.stage() embedded in a JSON output, job.sidecar(<output>)


if rule == "fetch_ett":
    from stochattn.data.ett import fetch_ett

    data = sm.config["data"]
    out = Path(sm.output[0])
    path = fetch_ett(w.ett_dataset, out.parent, mirrors=data["mirrors"], allow_download=data["allow_download"])
    print(f"{w.ett_dataset}: {path}", flush=True)
elif rule == "ett_fetch_checkpoint":
    import shutil

    from stochattn.backbones.timesfm import fetch_timesfm_checkpoint
    from stochattn.io import atomic_path
    from stochattn.staging import STAGE_HINT, staged_only

    ckpt = p.checkpoint
    try:  # on a cluster run only the staged copy (the same cache, filled by `stochattn download`)
        local = fetch_timesfm_checkpoint(ckpt["cache"], repo_id=ckpt["repo_id"], revision=ckpt.get("revision"),
                                         sha256=ckpt.get("sha256"), local_files_only=staged_only())  # fmt: skip
    except Exception as err:
        raise RuntimeError(f"{err}; {STAGE_HINT}" if staged_only() else str(err)) from err
    with atomic_path(sm.output.checkpoint) as tmp:
        shutil.copyfile(local, tmp)
    # the SHA-256 recorded at fetch (and the pinned one, when the config pins it) is what the audit checks
    job.sidecar(sm.output.checkpoint, extra={"fetched": True, "expected_sha256": ckpt.get("sha256"),
                                             "source": f"hf://{ckpt['repo_id']}@{ckpt.get('revision') or 'main'}"})
    print(f"checkpoint: {local}", flush=True)
elif rule == "ett_evaluate":
    from stochattn.experiments.evaluate import REFERENCE, evaluate_split

    methods = list(p.methods)
    samples = {m: sm.input[f"{m}_samples"] for m in methods}

    def inputs_of(method):
        files = [samples[method], sm.input[f"{method}_meta"]]
        return files + ([samples[REFERENCE]] if method != REFERENCE and REFERENCE in samples else [])

    evaluate_split(
        samples, {m: sm.output[m] for m in methods}, seed=p.seed, levels=tuple(p.levels),
        dataset=f"{w.ett_dataset} H={w.horizon}", split=None,
        provenance={m: job.stage(inputs_of(m)) for m in methods},
    )
elif rule == "ett_table":
    import os
    import time
    from pkgutil import resolve_name

    from stochattn import report
    from stochattn.experiments import ett_report

    started = time.time()
    spec = resolve_name(p.table)
    if w.table == "zero_shot":  # the adapters' meta files (its only inputs)
        tidy = ett_report.zero_shot_table(list(sm.input.adapters))
    elif w.table == "sharpness":  # the stated window of every configuration, from the runs' samples
        configs = ett_report.runs_by_config(list(sm.input.samples), list(sm.input.prepared))
        tidy = ett_report.sharpness_table(configs, **p.window)
    else:
        tidy = spec.build(ett_report.load_ett_runs(list(sm.input.metrics)))
    written = report.write_table(
        tidy, os.path.splitext(sm.output.csv)[0], p.caption,
        {"rule": rule, "inputs": list(sm.input), "config_subset": p.config_subset, "seeds": p.seeds,
         "started": started, "extra": {"code": p.code}, "repo_dir": os.path.dirname(sm.scriptdir)},
        spec=spec,
    )
    print("wrote", *map(str, written), sep="\n  ", flush=True)
else:
    import torch

    from stochattn.experiments import ett
    from stochattn.provenance import check_model_job, resume_checkpoint
    from stochattn.training import resumable

    torch.set_num_threads(sm.threads)
    if rule != "ett_prepare":  # every other rule here trains or samples a model (the prepare rule is a CPU job)
        check_model_job(sm)
    progress = sm.config["progress"]
    if rule == "ett_prepare":
        meta = ett.prepare(sm.input.csv, w.ett_dataset, int(w.horizon), sm.output.prepared, context=p.context,
                           adaptation_percent=p.adaptation_percent, max_series=p.max_series,
                           provenance=job.stage())  # fmt: skip
        print(f"windows: {meta['n_series']}", flush=True)
    elif rule == "ett_pretrain_standin":
        sources = {name: path for name, path in sm.input.items()}
        meta = ett.pretrain_standin(sources, int(w.station), sm.output.state, model=p.model, pretrain=p.pretrain,
                                    context=p.context, seed=p.seed, progress=progress,
                                    provenance=job.stage())  # fmt: skip
        print(f"stand-in station {w.station}: best step {meta['best_step']}, {meta['seconds']:.1f} s", flush=True)
    elif rule == "ett_adapt":
        meta = ett.adapt(sm.input.prepared, sm.input.backbone, sm.output.adapter, dataset=w.ett_dataset,
                         horizon=int(w.horizon), lora=p.lora, train=p.train, seed=p.seed, progress=progress,
                         checkpoint=resume_checkpoint(sm), provenance=job.stage())  # fmt: skip
        print(f"LoRA: best epoch {meta['best_epoch']}, test MAE {meta['test_mae']}", flush=True)
    elif rule in ("ett_method", "ett_calibrate_sa", "ett_swag", "ett_select", "ett_select_swag"):
        with resumable(resume_checkpoint(sm)):  # the trainings and SWAG phases of a method fitted here resume
            meta = ett.run_method(p.method, sm.input.prepared, sm.input.backbone, sm.input.adapter,
                                  Path(sm.output.samples).parent, lora=p.lora, train=p.train, method_cfg=p.method_cfg,
                                  num_samples=p.num_samples, seed=p.seed, members=sm.input.get("members"),
                                  require_skill=p.require_skill, swag_member=sm.output.get("member"),
                                  multiswag_components=p.get("multiswag_components"),
                                  candidates=sm.input.get("candidates"), progress=progress,
                                  provenance=job.stage())  # fmt: skip
        print(f"{p.method}: seconds {meta['seconds']}", flush=True)
    elif rule == "ett_candidate":
        with resumable(resume_checkpoint(sm)):  # a rerun after a kill resumes the training inside
            record = ett.fit_candidate(p.method, sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.output.state,
                                       index=p.index, lora=p.lora, train=p.train, method_cfg=p.method_cfg,
                                       num_samples=p.num_samples, seed=p.seed, require_skill=p.require_skill,
                                       progress=progress, provenance=job.stage())  # fmt: skip
        print(f"{p.method} candidate {p.index}: val CRPS {record['val_crps']}, {record['seconds']:.1f} s", flush=True)
    elif rule == "ett_multiswag_member":
        with resumable(resume_checkpoint(sm)):  # a rerun after a kill resumes the training inside
            meta = ett.train_multiswag_member(sm.input.prepared, sm.input.backbone, sm.input.adapter, sm.output.state,
                                              component=p.component, lora=p.lora, train=p.train, method_cfg=p.method_cfg,
                                              num_samples=p.num_samples, seed=p.seed, first_path=sm.input.first,
                                              require_skill=p.require_skill, progress=progress,
                                              provenance=job.stage())  # fmt: skip
        print(f"multiswag member {p.component}: {meta['seconds']:.1f} s", flush=True)
    else:
        raise ValueError(f"workflow_scripts/ett.py: no stage for rule {rule!r}")
