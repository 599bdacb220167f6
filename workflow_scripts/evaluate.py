"""Rule evaluate: stochattn.experiments.evaluate.evaluate (metrics.json of one run; numpy only, no torch import).

input.reference (absent for SA itself): SA's samples.npz of the same split, whose calibration coverage the run's
conformal "matched" block targets."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments.evaluate import evaluate  # noqa: E402
from stochattn.provenance import stage_provenance  # noqa: E402

w = snakemake.wildcards  # noqa: F821
evaluate(
    snakemake.input.samples,  # noqa: F821
    snakemake.output[0],  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
    levels=tuple(snakemake.params.levels),  # noqa: F821
    dataset=w.dataset,
    split=int(w.split),
    reference_path=snakemake.input.get("reference"),  # noqa: F821 (SA's samples.npz of the split; None for SA)
    provenance=stage_provenance(
        rule=snakemake.rule,  # noqa: F821
        inputs=list(snakemake.input),  # noqa: F821
        code=snakemake.params.code,  # noqa: F821
        params={"levels": snakemake.params.levels, "seed": snakemake.params.seed},  # noqa: F821
    ),
)
