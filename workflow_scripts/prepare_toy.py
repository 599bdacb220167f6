"""Rule prepare_toy: stochattn.experiments.uci.prepare_sinusoid (the teaser's noisy sinusoid)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import os  # noqa: E402
import time  # noqa: E402

from stochattn.experiments.uci import prepare_sinusoid  # noqa: E402
from stochattn.provenance import provenance_record, write_provenance  # noqa: E402

started = time.time()

p = snakemake.params  # noqa: F821
prepare_sinusoid(snakemake.output.prepared, n=p.n, noise=p.noise, seed=p.seed)  # noqa: F821
sm = snakemake  # noqa: F821
record = provenance_record(
    rule=sm.rule,
    inputs=list(sm.input),
    outputs=[sm.output.prepared],
    config_subset={k: v for k, v in sm.params.items() if k not in ("code", "seed")},
    seeds=sm.params.seed,
    started=started,
    finished=time.time(),
    extra={"code": sm.params.code},
    repo_dir=os.path.dirname(sm.scriptdir),
)
print("wrote", write_provenance(sm.output.prepared, record), flush=True)  # = output.prov
