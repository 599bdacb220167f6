"""Rule download: stochattn.staging.stage for the run's configuration (threads = files fetched at once)."""

import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)

from stochattn.staging import plan_downloads, stage  # noqa: E402

sm = snakemake  # noqa: F821
summary = stage(plan_downloads(sm.config), sm.config, connections=sm.threads, progress=sm.config["progress"])
print(f"download: {len(summary['fetched'])} fetched, {len(summary['kept'])} kept", flush=True)
