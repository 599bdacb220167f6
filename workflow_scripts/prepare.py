"""Rule prepare_uci: stochattn.experiments.uci.prepare for one data set and Gal split."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments.uci import prepare  # noqa: E402
from stochattn.provenance import JobProvenance  # noqa: E402

job = JobProvenance(snakemake)  # noqa: F821

p = snakemake.params  # noqa: F821
prepare(
    snakemake.wildcards.dataset,  # noqa: F821
    int(snakemake.wildcards.split),  # noqa: F821
    snakemake.input.raw,  # noqa: F821
    snakemake.output.prepared,  # noqa: F821
    val_fraction=p.val_fraction,
    cal_fraction=p.cal_fraction,
    max_train=p.max_train,
    seed=p.seed,
)
print("wrote", job.sidecar(snakemake.output.prepared), flush=True)  # noqa: F821 (= output.prov)
