#!/bin/sh
# Snakemake's post-deploy step for envs/stochattn.yaml (`--sdm conda`): run inside the new environment after its pip
# section, it installs this repository (editable, without dependencies: the lock holds them all), as the manual
# route's `pip install --no-deps -e .` does; the rules' scripts import stochattn. Snakemake runs a copy of this file
# from .snakemake/conda/, which tells nothing of where the repository is: the workflow exports its path as
# STOCHATTN_REPO when it is parsed (rules/common.smk).
set -eu
if [ -z "${STOCHATTN_REPO:-}" ]; then
    echo "envs/stochattn.post-deploy.sh: STOCHATTN_REPO (this repository's path) is not set; the workflow sets it" \
        "(rules/common.smk) when snakemake --sdm conda builds the environment (by hand: pip install --no-deps -e" \
        "<repository>)" >&2
    exit 1
fi
# --no-build-isolation: the build backend is the locked setuptools already in the environment, so nothing is fetched
python -m pip install --no-deps --no-build-isolation -e "$STOCHATTN_REPO"
