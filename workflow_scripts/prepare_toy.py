"""Rule prepare_toy: stochattn.experiments.uci.prepare_sinusoid (the teaser's noisy sinusoid)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments.uci import prepare_sinusoid  # noqa: E402
from stochattn.provenance import JobProvenance  # noqa: E402

job = JobProvenance(snakemake)  # noqa: F821

p = snakemake.params  # noqa: F821
prepare_sinusoid(snakemake.output.prepared, n=p.n, noise=p.noise, seed=p.seed)  # noqa: F821
print("wrote", job.sidecar(snakemake.output.prepared), flush=True)  # noqa: F821 (= output.prov)
