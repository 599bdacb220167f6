"""Figure rules: one stochattn.figures writer (png + pdf), then a <file>.prov.json beside each file.

params.kind: pit | sharpness | yacht_appendix | cost | teaser.
"""

import logging
import os
import sys
import time

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

import pandas as pd  # noqa: E402

from stochattn import figures  # noqa: E402
from stochattn.provenance import provenance_record, write_provenance  # noqa: E402

started = time.time()
sm = snakemake  # noqa: F821
kind = sm.params.kind
out_base = os.path.splitext(sm.output.png)[0]
if kind == "pit":
    written = figures.pit_histograms(list(sm.input.metrics), sm.wildcards.dataset, out_base)
elif kind == "sharpness":
    written = figures.sharpness_boxplot(sm.params.samples_and_metrics, sm.wildcards.dataset, out_base)
elif kind == "yacht_appendix":
    written = figures.yacht_appendix(list(sm.input.metrics), sm.params.samples_and_metrics, "yacht", out_base)
elif kind == "cost":
    written = figures.cost_figure(pd.read_csv(sm.input.table), out_base)
elif kind == "teaser":
    samples = dict(zip(sm.params.methods, sm.input.samples))
    written = figures.teaser_sinusoid(samples, sm.input.prepared, out_base, max_trend_rmse=sm.params.max_trend_rmse)
else:
    raise ValueError(f"params.kind: unknown figure kind {kind!r}")
finished = time.time()

for path in written:
    record = provenance_record(
        rule=sm.rule,
        inputs=list(sm.input),
        outputs=[path],
        config_subset=sm.params.config_subset,
        seeds=sm.params.seeds,
        started=started,
        finished=finished,
        extra={"figure": kind, "caption": sm.params.caption, "code": sm.params.code},
        repo_dir=os.path.dirname(sm.scriptdir),  # git state of the workflow's repository, not the working dir
    )
    print("wrote", path, "and", write_provenance(path, record), flush=True)
