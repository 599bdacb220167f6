"""The rules of rules/rehearsal_assets.smk: one stochattn.rehearsal writer each, chosen by the rule's name."""

import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)

from pathlib import Path  # noqa: E402

from stochattn import rehearsal  # noqa: E402
from stochattn.io import save_json  # noqa: E402
from stochattn.provenance import JobProvenance  # noqa: E402

sm = snakemake  # noqa: F821
p, rule, out = sm.params, sm.rule, Path(sm.output[0])
job = JobProvenance(sm)

if rule == "rehearsal_timesfm":
    path = rehearsal.write_timesfm_checkpoint(out.parent, seed=p.seed, hf_cache=True)
    save_json(out, {"rehearsal": rehearsal.REHEARSAL_WEIGHTS, "checkpoint": str(path), "seed": p.seed})
elif rule == "rehearsal_weatherbench":
    # writes <mirror>/weatherbench/5.625deg/... and <mirror>/weatherbench/rehearsal.json (the manifest) last
    files = rehearsal.write_weatherbench_mirror(out.parent.parent, years=p.years, steps_per_year=p.steps_per_year,
                                                folders=p.folders, seed=p.seed, progress=sm.config["progress"])
    print(f"{len(files)} files", flush=True)
elif rule == "rehearsal_climax":
    rehearsal.write_climax_checkpoint(out, seed=p.seed)
else:
    raise ValueError(f"workflow_scripts/rehearsal.py: no stage for rule {rule!r}")
# the audit's leaf: random weights / synthetic data written here, with the SHA-256 as written
job.sidecar(out, extra={"rehearsal": rehearsal.REHEARSAL_WEIGHTS if rule != "rehearsal_weatherbench"
                        else rehearsal.REHEARSAL_DATA})
print("wrote", out, flush=True)
