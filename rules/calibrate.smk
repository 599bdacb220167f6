# Stochastic attention: calibrate nu on the calibration split (BO under uncertainty, Algorithms 2-3) on the frozen
# backbone once, then draw S samples at both operating points (paper §4, App. A): sa/ at Algorithm 2's nu (the
# arg-min of the observed loss, paper-faithful, "SA") and sa_match/ at the BO surrogate's scale-matching nu
# (App. B's nu_opt, "SA (scale-match)"). calibration.json (both nus, the BO history) stays in sa/.


rule calibrate_sa:
    """SA runs of one split: calibration.json (the BO history, nu_loss_argmin, nu_surrogate) and samples.npz +
    meta.json of sa (nu_loss_argmin) and of sa_match (nu_surrogate)."""
    input:
        prepared="results/{experiment}/{dataset}/split{split}/prepared.npz",
        backbone="results/{experiment}/{dataset}/split{split}/backbone/model.pt",
        backbone_meta="results/{experiment}/{dataset}/split{split}/backbone/meta.json",
    output:
        samples="results/{experiment}/{dataset}/split{split}/sa/samples.npz",
        meta="results/{experiment}/{dataset}/split{split}/sa/meta.json",
        calibration="results/{experiment}/{dataset}/split{split}/sa/calibration.json",
        match_samples="results/{experiment}/{dataset}/split{split}/sa_match/samples.npz",
        match_meta="results/{experiment}/{dataset}/split{split}/sa_match/meta.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/sa.log",
        attempts=attempts_file("calibrate_sa", "{experiment}/{dataset}/split{split}/sa"),
    benchmark:
        benchmark_file("calibrate_sa", "{experiment}/{dataset}/split{split}/sa")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=mem_mb_train,
        runtime=runtime_method,
    params:
        method="sa",
        model=lambda w: model_cfg(w.experiment, w.dataset),
        train=lambda w: train_cfg(w.experiment, w.dataset),
        method_cfg=lambda w: method_cfg(w.experiment, "sa", w.dataset),
        num_samples=config["num_samples"],
        seed=lambda w: seed_for("sa", w.dataset, w.split),
        code=method_code("sa"),
    script:
        "../workflow_scripts/run_method.py"
