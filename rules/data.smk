# Data: fetch each UCI data set once (mirrors first, else download; SHA-256 verified), carve each Gal split into
# standardised fit / validation / calibration / test parts, and make the teaser's toy sinusoid.


rule fetch_uci:
    """Every file of one data set in Gal's layout, verified against the SHA-256 table shipped with stochattn.
    Mirrors and allow_download come from the config (data.*) and are not rerun triggers: a verified copy is the
    same data wherever it came from. On failure Snakemake removes the whole output folder."""
    output:
        directory("results/data/uci/{dataset}"),
    log:
        "logs/data/fetch_uci_{dataset}.log",
    wildcard_constraints:
        dataset="|".join(DATASET_REGISTRY),
    localrule: True
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=30,
    script:
        "../workflow_scripts/fetch_uci.py"


rule prepare_uci:
    """Gal split -> results/uci/<dataset>/split<k>/prepared.npz (standardised on the fitting part only)."""
    input:
        # ancient: a re-fetch must not rerun every split. The folder is verified against a SHA-256 table on every
        # fetch, so a re-fetch gives the same bytes, yet Snakemake reruns fetch_uci whenever its script is newer than
        # the folder (an edit or a checkout of workflow_scripts/fetch_uci.py) and cannot compare a folder by checksum:
        # every prepare job, then every job of every split, would follow. To take changed data (a custom data set's
        # new files), delete the folder: everything made from it is set aside and rebuilt (stochattn.stale).
        raw=ancient("results/data/uci/{dataset}"),
    output:
        prepared="results/uci/{dataset}/split{split}/prepared.npz",
        prov="results/uci/{dataset}/split{split}/prepared.npz.prov.json",
    log:
        "logs/uci/{dataset}/split{split}/prepare.log",
    benchmark:
        benchmark_file("prepare_uci", "{dataset}/split{split}")
    wildcard_constraints:
        dataset="|".join(DATASET_REGISTRY),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        val_fraction=config["data"]["val_fraction"],
        cal_fraction=config["data"]["cal_fraction"],
        max_train=lambda w: config["data"]["max_train"].get(w.dataset),
        seed=lambda w: seed_for("prepare", w.dataset, w.split),
        code=code_for("stochattn.experiments.uci:prepare"),
    script:
        "../workflow_scripts/prepare.py"


rule prepare_toy:
    """The teaser's 1-D noisy sinusoid in the prepared.npz format (one split)."""
    output:
        prepared=f"results/toy/{TOY_DATASET}/split0/prepared.npz",
        prov=f"results/toy/{TOY_DATASET}/split0/prepared.npz.prov.json",
    log:
        f"logs/toy/{TOY_DATASET}/split0/prepare.log",
    benchmark:
        benchmark_file("prepare_toy", f"{TOY_DATASET}/split0")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        n=config["toy"]["n"],
        noise=config["toy"]["noise"],
        seed=seed_for("prepare", TOY_DATASET, 0),
        code=code_for("stochattn.experiments.uci:prepare_sinusoid"),
    script:
        "../workflow_scripts/prepare_toy.py"


rule download:
    """Stage every public file the configuration needs into data.store (stochattn.staging) before any job runs:
    `snakemake download --profile slurm` runs it as one CPU job (`stochattn download` does the same on a transfer
    node). No output: it runs whenever it is asked for, keeps what is staged and verified, resumes the rest."""
    log:
        "logs/data/download.log",
    conda:
        CONDA_ENV
    threads: 4
    resources:
        mem_mb=2000,
        runtime=MAX_RUNTIME_MIN,
    script:
        "../workflow_scripts/download.py"
