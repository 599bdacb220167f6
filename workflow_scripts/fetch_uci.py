"""Rule fetch_uci: stochattn.data.uci.fetch_uci for one data set (mirrors first, else download; SHA-256 verified)."""

import logging
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from stochattn.data.uci import dataset_registry, fetch_uci  # noqa: E402

data = snakemake.config["data"]  # noqa: F821
registry = dataset_registry(snakemake.config.get("custom_datasets"))  # noqa: F821 (paths resolved in common.smk)
fetch_uci(
    registry[snakemake.wildcards.dataset],  # noqa: F821
    snakemake.output[0],  # noqa: F821
    mirrors=data["mirrors"],  # resolved against the workflow folder in rules/common.smk
    allow_download=data["allow_download"],
    progress=snakemake.config["progress"],  # noqa: F821
)
