"""Figure rules: one figure writer (png + pdf), then a <file>.prov.json beside each file.

params.figure names the writer, "<module>:<function>" (e.g. "stochattn.experiments.uci_figures:pit_histograms");
it is called as writer(**params.args, out_base=<output.png without suffix>) and returns the files it wrote.
"""

import logging
import os
import sys
import time
from pkgutil import resolve_name

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.provenance import provenance_record, write_provenance  # noqa: E402

started = time.time()
sm = snakemake  # noqa: F821
writer = resolve_name(sm.params.figure)
written = writer(**sm.params.args, out_base=os.path.splitext(sm.output.png)[0])
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
        extra={"figure": sm.params.figure, "caption": sm.params.caption, "code": sm.params.code},
        repo_dir=os.path.dirname(sm.scriptdir),  # git state of the workflow's repository, not the working dir
    )
    print("wrote", path, "and", write_provenance(path, record), flush=True)
