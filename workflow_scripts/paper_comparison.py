"""Rule paper_comparison: the paper's numbers (params.reference) next to ours (input.tables), with provenance."""

import logging
import os
import sys
import time

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.experiments import paper_comparison as P  # noqa: E402

sm, p = snakemake, snakemake.params  # noqa: F821
started = time.time()
comparison = P.compare(P.paper_cells(p.reference), P.load_tables(sm.input.tables), p.runs, p.aliases)
header = "What ran, per slice: " + "; ".join(f"{k}: {v}" for k, v in p.runs.items()) + (
    ". The paper's values: config/paper_results.yaml (each block with its table / figure label or line).")
written = P.write_comparison(
    comparison, os.path.splitext(sm.output.csv)[0], header,
    {"rule": sm.rule, "inputs": list(sm.input.tables), "config_subset": p.config_subset, "seeds": p.seeds,
     "started": started, "extra": {"code": p.code, "reference": p.reference, "reference_sha256": p.reference_sha256},
     "repo_dir": os.path.dirname(sm.scriptdir)},
)
print("wrote", *map(str, written), sep="\n  ", flush=True)
