"""Rule train_backbone: stochattn.experiments.uci.train_backbone (the deterministic FT-Transformer of one split)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import torch  # noqa: E402

from stochattn.experiments.uci import train_backbone  # noqa: E402
from stochattn.provenance import check_model_job, resume_checkpoint, stage_provenance  # noqa: E402

torch.set_num_threads(snakemake.threads)  # noqa: F821
# a job given a GPU by the scheduler must not silently train on the CPU (config require_gpu: false allows it)
check_model_job(snakemake)  # noqa: F821
p = snakemake.params  # noqa: F821
meta = train_backbone(
    snakemake.input.prepared,  # noqa: F821
    snakemake.output.model,  # noqa: F821
    snakemake.output.meta,  # noqa: F821
    model=p.model,
    train=p.train,
    seed=p.seed,
    device=snakemake.config["device"],  # noqa: F821
    progress=snakemake.config["progress"],  # noqa: F821
    checkpoint=resume_checkpoint(snakemake),  # noqa: F821 (a rerun after a kill resumes from its last epoch)
    provenance=stage_provenance(
        rule=snakemake.rule,  # noqa: F821
        inputs=list(snakemake.input),  # noqa: F821
        code=p.code,
        params={k: v for k, v in p.items() if k != "code"},
    ),
)
print(f"backbone: best epoch {meta['best_epoch']}, {meta['seconds']:.1f} s", flush=True)
