"""Rules calibrate_sa, run_method, run_swag and uci_candidate on one split: stochattn.experiments.uci.run_method for one
method, choose_candidate where rule uci_candidate fitted the method's grid (fit_candidate: one candidate); the
trainings and SWAG phases resume after a kill (stochattn.training.resumable)."""

import logging
import os
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import torch  # noqa: E402

from stochattn.experiments.uci import choose_candidate, fit_candidate, run_method  # noqa: E402
from stochattn.provenance import check_model_job, resume_checkpoint, stage_provenance  # noqa: E402
from stochattn.training import resumable  # noqa: E402

sm = snakemake  # noqa: F821
torch.set_num_threads(sm.threads)
# a job given a GPU by the scheduler must not silently train on the CPU (config require_gpu: false allows it)
check_model_job(sm)
p = sm.params
provenance = stage_provenance(rule=sm.rule, inputs=list(sm.input), code=p.code,
                              params={k: v for k, v in p.items() if k != "code"})  # fmt: skip
shared = dict(model=p.model, train=p.train, method_cfg=p.method_cfg, num_samples=p.num_samples, seed=p.seed,
              progress=sm.config["progress"], provenance=provenance)  # fmt: skip
backbone = dict(backbone_path=sm.input.get("backbone"), device=sm.config["device"])  # MC Dropout's own rates
if sm.rule == "uci_candidate":
    with resumable(resume_checkpoint(sm)):  # a rerun after a kill resumes the training inside
        record = fit_candidate(p.method, sm.input.prepared, sm.output.state, index=p.index, **backbone, **shared)
    print(f"{p.method} candidate {p.index}: val CRPS {record['val_crps']}, {record['seconds']:.1f} s", flush=True)
else:
    out_dir = os.path.dirname(sm.output.samples)
    if sm.input.get("candidates"):  # the grid fitted one candidate a job: the choice (a widening's) and the samples
        with resumable(resume_checkpoint(sm)):  # a widening's trainings resume after a kill
            meta = choose_candidate(p.method, sm.input.prepared, out_dir, sm.input.candidates, **backbone, **shared)
    else:
        with resumable(resume_checkpoint(sm)):
            meta = run_method(p.method, sm.input.prepared, out_dir, backbone_path=sm.input.get("backbone"),
                              components=sm.input.get("components"),  # MultiSWAG's trained components, in order
                              swag_member=sm.output.get("member"),  # SWAG: its posterior as MultiSWAG's component 0
                              multiswag_components=p.get("multiswag_components"),
                              device=sm.config["device"], **shared)  # fmt: skip
    print(f"{p.method}: seconds {meta['seconds']}", flush=True)
