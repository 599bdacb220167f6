# stochattn: the workflow that regenerates the tables and figures of "Calibrating Scientific Foundation Models with
# Inference-Time Stochastic Attention" from three slices, every method drawing the same number of samples:
#   UCI   regression, 8 data sets in Gal's splits, an FT-Transformer per split; SA, MC Dropout, SWAG, MultiSWAG, IVON
#         and HSA (rules/data, train, calibrate, methods, evaluate, report.smk)
#   ETT   forecasting, ETTh1/ETTh2/ETTm1/ETTm2 at horizons 96 and 192, TimesFM 2.5 adapted with LoRA (rules/ett*.smk)
#   ERA5  forecasting, Z500 (era5.targets x era5.lead_hours), ClimaX adapted with LoRA (rules/era5*.smk)
# ETT and ERA5 run SA, SWAG, MultiSWAG, IVON, Contextual Dropout and HSA; SA at two operating points everywhere (sa: the
# BO loss arg-min, sa_match: the scale-matching nu). Besides the slices: the teaser's toy sinusoid, the teaser and the
# reproduction report results/tables/paper_comparison (rules/paper*.smk).
#
#   make run                      # snakemake --cores <every core> --configfile=config/quick.yaml (CORES=n to choose):
#                                 # the embedded default, offline on the CPU, stand-ins for TimesFM 2.5 and ERA5
#   stochattn download -j 8       # on a cluster: every public file config/config.yaml needs, into data.store ...
#   snakemake --profile slurm     # ... then the paper's protocol (config/config.yaml) as SLURM jobs (./slurm)
#   make rehearsal                # the cluster configuration's code paths at full model size, offline on the CPU
#
# Targets: all (default), uci, uci_<dataset> (e.g. uci_yacht), toy, ett, ett_<dataset> (e.g. ett_ETTh1), era5
# (= climax), era5_<target>_<lead>h (e.g. era5_z500_24h), download, or any output path such as
# results/uci/yacht/split0/sa/metrics.json. Every output lives under results/ with a .prov.json beside each table and
# figure (stochattn audit FILE), every log under logs/.
# The logic lives in the stochattn package; workflow_scripts/ only adapt the snakemake object to one call.

import os

from snakemake.utils import min_version, validate

min_version("9.0")


# Inside a SLURM job, `sbatch --signal=USR1@<seconds>` (slurm/config.yaml) signals every process of the job's steps
# before the time limit: Snakemake itself (the job step running this rule) would die of it (Python's default for
# SIGUSR1). Ignored here; the rule's script process inherits that, and a training installs its own handler
# (stochattn.training: it saves its state and raises, the job exits non-zero and is resubmitted).
if os.environ.get("SLURM_JOB_ID"):
    import signal

    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


# The paper's protocol; --configfile files are merged over it. Absolute, so `--directory` works from anywhere.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


validate(config, schema="config/schema.yaml")
# what the schema cannot say: nu_min <= nu_max, [low, high] ranges, fractions summing below 1, disjoint years; each
# error names the keys and values, at parse time (stochattn.protocol.check_config_order)
from stochattn.protocol import check_config_order

check_config_order(config)


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/rehearsal.smk"


wildcard_constraints:
    experiment="uci|toy",
    dataset="|".join([*DATASET_REGISTRY, TOY_DATASET]),
    split=r"\d+",
    method="|".join(ALL_METHODS),
    ett_dataset="ETTh1|ETTh2|ETTm1|ETTm2",
    horizon=r"\d+",


include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/calibrate.smk"
include: "rules/methods.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
include: "rules/ett_common.smk"
include: "rules/ett.smk"
include: "rules/era5_common.smk"
include: "rules/era5.smk"
include: "rules/paper_common.smk"
include: "rules/paper.smk"
include: "rules/rehearsal_assets.smk"


# Outputs made from files that a failed or killed rerun removed: Snakemake does not rebuild a missing intermediate
# file while the files made from it exist (snakemake/snakemake#1978), so the tables would keep the numbers of before
# the rerun. Moved to results/.stale/<time>/ when a run starts, so that it rebuilds them; a dry run lists them
# (stochattn.stale). Not in spawned jobs.
if workflow.is_main_process:
    from snakemake.logging import logger

    from stochattn.stale import set_aside_stale

    set_aside_stale(dry_run=workflow.output_settings.dryrun, log=logger.warning)


# A run that succeeded has accepted every output it wrote: the training checkpoints beside them (each training keeps
# its final state until then, so that a job killed in its teardown does not train again) are deleted; those of jobs
# without their output yet stay, to be resumed. Spawned jobs (--no-hooks) never run this.
onsuccess:
    from stochattn.provenance import remove_finished_resumes

    remove_finished_resumes("results")


# Target rules and the fetch rule (which needs the network on a cluster's login node) run locally (localrule).
rule all:
    """Every table and figure of the UCI slice, the teaser's toy panel and (ett.enabled, era5.enabled) the ETT and ERA5
    slices."""
    default_target: True
    input:
        uci_targets(),
        figure_files("teaser_sinusoid"),
        ett_targets() if ETT["enabled"] else [],
        era5_targets() if ERA5["enabled"] else [],
        PAPER_COMPARISON_FILES,
        TEASER_FILES,
    localrule: True


rule uci:
    """UCI tables (master, CRPS, cost) and figures (PIT, sharpness, Yacht appendix, cost)."""
    input:
        uci_targets(),
    localrule: True


rule toy:
    """The teaser's panel (c): predictive intervals of each method on a noisy sinusoid."""
    input:
        figure_files("teaser_sinusoid"),
    localrule: True


rule ett:
    """The ETT slice: every configuration's metrics, the coverage figures and the ETT tables."""
    input:
        ett_targets(),
    localrule: True


rule era5:
    """The ERA5 slice: every method's metrics, the ClimaX tables and figures, the teaser's panels (a) and (b)."""
    input:
        era5_targets(),
    localrule: True


rule climax:
    """The same as era5: the ClimaX tables and figures."""
    input:
        era5_targets(),
    localrule: True


# One target per configured data set: every run's metrics and the data set's own figures, e.g. `uci_yacht`.
for _dataset in DATASETS:

    rule:
        name:
            f"uci_{_dataset}"
        input:
            uci_metrics([_dataset]),
            uci_dataset_figures(_dataset),
        localrule: True


for _dataset in ETT_DATASETS_RUN:

    rule:
        name:
            f"ett_{_dataset}"
        input:
            ett_dataset_targets(_dataset),
        localrule: True
