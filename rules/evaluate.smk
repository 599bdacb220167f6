# Metrics of one run: accuracy, CRPS (+ decomposition), PIT / W1, coverage and width, native and temperature-scaled.


rule evaluate:
    """samples.npz + meta.json -> metrics.json (stochattn.experiments.uci.evaluate); NaN/inf samples are an error."""
    input:
        samples="results/{experiment}/{dataset}/split{split}/{method}/samples.npz",
        meta="results/{experiment}/{dataset}/split{split}/{method}/meta.json",
    output:
        "results/{experiment}/{dataset}/split{split}/{method}/metrics.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/{method}_evaluate.log",
    params:
        levels=config["evaluate"]["levels"],
        seed=lambda w: seed_for("evaluate", w.dataset, w.split),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../workflow_scripts/evaluate.py"
