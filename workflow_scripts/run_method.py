"""Rules calibrate_sa, run_method and run_swag: stochattn.experiments.uci.run_method for one method on one split; its
trainings and SWAG phases resume after a kill (stochattn.training.resumable)."""

import logging
import os
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import torch  # noqa: E402

from stochattn.experiments.uci import run_method  # noqa: E402
from stochattn.provenance import check_model_job, resume_checkpoint, stage_provenance  # noqa: E402
from stochattn.training import resumable  # noqa: E402

torch.set_num_threads(snakemake.threads)  # noqa: F821
# a job given a GPU by the scheduler must not silently train on the CPU (config require_gpu: false allows it)
check_model_job(snakemake)  # noqa: F821
p = snakemake.params  # noqa: F821
with resumable(resume_checkpoint(snakemake)):  # noqa: F821
    meta = run_method(
        p.method,
        snakemake.input.prepared,  # noqa: F821
        os.path.dirname(snakemake.output.samples),  # noqa: F821
        backbone_path=snakemake.input.get("backbone"),  # noqa: F821
        components=snakemake.input.get("components"),  # noqa: F821 (MultiSWAG's trained components, in order)
        model=p.model,
        train=p.train,
        method_cfg=p.method_cfg,
        num_samples=p.num_samples,
        seed=p.seed,
        swag_member=snakemake.output.get("member"),  # noqa: F821 (SWAG: its posterior as MultiSWAG's component 0)
        device=snakemake.config["device"],  # noqa: F821
        progress=snakemake.config["progress"],  # noqa: F821
        provenance=stage_provenance(
            rule=snakemake.rule,  # noqa: F821
            inputs=list(snakemake.input),  # noqa: F821
            code=p.code,
            params={k: v for k, v in p.items() if k != "code"},
        ),
    )
print(f"{p.method}: seconds {meta['seconds']}", flush=True)
