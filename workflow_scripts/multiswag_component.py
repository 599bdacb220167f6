"""Rule multiswag_component: stochattn.experiments.uci.train_multiswag_component (one component of one split); its
training and SWAG phase resume after a kill (stochattn.training.resumable)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import torch  # noqa: E402

from stochattn.experiments.uci import train_multiswag_component  # noqa: E402
from stochattn.provenance import check_model_job, resume_checkpoint, stage_provenance  # noqa: E402
from stochattn.training import resumable  # noqa: E402

sm = snakemake  # noqa: F821
torch.set_num_threads(sm.threads)
check_model_job(sm)
p = sm.params
with resumable(resume_checkpoint(sm)):
    meta = train_multiswag_component(
        sm.input.prepared,
        sm.output.state,
        component=p.component,
        model=p.model,
        train=p.train,
        method_cfg=p.method_cfg,
        seed=p.seed,
        num_samples=p.num_samples,
        first_path=sm.input.first,
        device=sm.config["device"],
        progress=sm.config["progress"],
        provenance=stage_provenance(
            rule=sm.rule, inputs=list(sm.input), code=p.code, params={k: v for k, v in p.items() if k != "code"}
        ),
    )
print(f"multiswag component {p.component}: {meta['seconds']:.1f} s", flush=True)
