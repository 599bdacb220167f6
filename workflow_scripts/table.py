"""Table rules: one table from every run's metrics.json, with provenance.

params.table names the table's layout, "<module>:<NAME>" of a stochattn.report.TableSpec (e.g.
"stochattn.experiments.uci_tables:MASTER_TABLE"): stochattn.report.load_runs -> spec.build ->
stochattn.report.write_table (csv, md, tex and a .prov.json beside each).
"""

import logging
import os
import sys
import time
from pkgutil import resolve_name

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn import report  # noqa: E402

started = time.time()
spec = resolve_name(snakemake.params.table)  # noqa: F821
runs = report.load_runs(snakemake.input.metrics, progress=snakemake.config["progress"])  # noqa: F821
tidy = spec.build(runs)
basename = os.path.splitext(snakemake.output.csv)[0]  # noqa: F821
written = report.write_table(
    tidy,
    basename,
    snakemake.params.caption,  # noqa: F821
    {
        "rule": snakemake.rule,  # noqa: F821
        "inputs": list(snakemake.input.metrics),  # noqa: F821
        "config_subset": snakemake.params.config_subset,  # noqa: F821
        "seeds": snakemake.params.seeds,  # noqa: F821
        "started": started,
        "extra": {"code": snakemake.params.code},  # noqa: F821
        "repo_dir": os.path.dirname(snakemake.scriptdir),  # noqa: F821 (git state of the workflow's repository)
    },
    spec=spec,
)
print("wrote", *map(str, written), sep="\n  ", flush=True)
