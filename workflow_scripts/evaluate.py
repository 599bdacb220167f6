"""Rule evaluate: stochattn.experiments.evaluate.evaluate (metrics.json of one run; numpy only, no torch import)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments.evaluate import evaluate  # noqa: E402

w = snakemake.wildcards  # noqa: F821
evaluate(
    snakemake.input.samples,  # noqa: F821
    snakemake.output[0],  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
    levels=tuple(snakemake.params.levels),  # noqa: F821
    dataset=w.dataset,
    split=int(w.split),
)
