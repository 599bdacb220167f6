"""Rule evaluate / evaluate_toy: stochattn.experiments.evaluate.evaluate_split (metrics.json of every run of one
split, in one process; numpy only, no torch import).

Inputs ``<method>_samples`` / ``<method>_meta`` for every method of the split; outputs named by method. SA's
samples.npz is the coverage reference of every other run's conformal "matched" block, so it is recorded among their
inputs."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments.evaluate import REFERENCE, evaluate_split  # noqa: E402
from stochattn.provenance import stage_provenance  # noqa: E402

sm = snakemake  # noqa: F821
w = sm.wildcards
methods = list(sm.params.methods)
samples = {m: sm.input[f"{m}_samples"] for m in methods}
params = {"levels": list(sm.params.levels), "seed": sm.params.seed}


def inputs_of(method):
    files = [samples[method], sm.input[f"{method}_meta"]]
    if method != REFERENCE and REFERENCE in samples:
        files.append(samples[REFERENCE])
    return files


evaluate_split(
    samples,
    {m: sm.output[m] for m in methods},
    seed=sm.params.seed,
    levels=tuple(sm.params.levels),
    dataset=w.dataset,
    split=int(w.split),
    provenance={
        m: stage_provenance(rule=sm.rule, inputs=inputs_of(m), code=sm.params.code, params=params) for m in methods
    },
)
