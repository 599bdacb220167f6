# Metrics of every run of one split, in one job: accuracy, CRPS (+ decomposition), PIT / W1, coverage and width:
# native, temperature-scaled, and (every method but SA) conformally matched to SA's empirical coverage on the same
# split's calibration part. One job per split, not per run: the scoring libraries take ~3.5 s to load.


rule evaluate:
    """samples.npz + meta.json of every UCI run of a split -> their metrics.json
    (stochattn.experiments.evaluate.evaluate_split); NaN/inf samples are an error."""
    input:
        unpack(evaluate_inputs("uci", METHODS)),
    output:
        **evaluate_outputs("uci", METHODS),
    log:
        "logs/uci/{dataset}/split{split}/evaluate.log",
    benchmark:
        benchmark_file("evaluate", "uci/{dataset}/split{split}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        methods=METHODS,
        levels=config["evaluate"]["levels"],
        seed=lambda w: seed_for("evaluate", w.dataset, w.split),
        code=code_for("stochattn.experiments.evaluate:evaluate_split"),
    script:
        "../workflow_scripts/evaluate.py"


rule evaluate_toy:
    """The same for the teaser's toy runs."""
    input:
        unpack(evaluate_inputs("toy", TOY_METHODS)),
    output:
        **evaluate_outputs("toy", TOY_METHODS),
    log:
        "logs/toy/{dataset}/split{split}/evaluate.log",
    benchmark:
        benchmark_file("evaluate", "toy/{dataset}/split{split}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        methods=TOY_METHODS,
        levels=config["evaluate"]["levels"],
        seed=lambda w: seed_for("evaluate", w.dataset, w.split),
        code=code_for("stochattn.experiments.evaluate:evaluate_split"),
    script:
        "../workflow_scripts/evaluate.py"
