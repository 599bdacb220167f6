# Metrics of one run: accuracy, CRPS (+ decomposition), PIT / W1, coverage and width: native, temperature-scaled, and
# (every method but SA) conformally matched to SA's empirical coverage on the same split's calibration part.


def evaluate_inputs(wildcards):
    """The run's samples and meta, and SA's samples of the same split as the coverage reference (non-SA runs)."""
    run = f"results/{wildcards.experiment}/{wildcards.dataset}/split{wildcards.split}"
    inputs = {"samples": f"{run}/{wildcards.method}/samples.npz", "meta": f"{run}/{wildcards.method}/meta.json"}
    methods = TOY_METHODS if wildcards.experiment == "toy" else config["methods"]
    if wildcards.method != "sa" and "sa" in methods:
        inputs["reference"] = f"{run}/sa/samples.npz"
    return inputs


rule evaluate:
    """samples.npz + meta.json (+ SA's samples.npz) -> metrics.json (stochattn.experiments.uci.evaluate); NaN/inf
    samples are an error."""
    input:
        unpack(evaluate_inputs),
    output:
        "results/{experiment}/{dataset}/split{split}/{method}/metrics.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/{method}_evaluate.log",
    benchmark:
        benchmark_file("evaluate", "{experiment}/{dataset}/split{split}/{method}")
    params:
        levels=config["evaluate"]["levels"],
        seed=lambda w: seed_for("evaluate", w.dataset, w.split),
        code=code_for("stochattn.experiments.evaluate:evaluate"),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../workflow_scripts/evaluate.py"
