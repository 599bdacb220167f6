# Stochastic attention: calibrate nu on the calibration split (BO under uncertainty, Algorithms 2-3) on the frozen
# backbone, then draw S samples at the operating point (paper §4, App. A).


rule calibrate_sa:
    """SA run of one split: calibration.json (the BO history, nu_surrogate, nu_loss_argmin), samples.npz, meta.json."""
    input:
        prepared="results/{experiment}/{dataset}/split{split}/prepared.npz",
        backbone="results/{experiment}/{dataset}/split{split}/backbone/model.pt",
        backbone_meta="results/{experiment}/{dataset}/split{split}/backbone/meta.json",
    output:
        samples="results/{experiment}/{dataset}/split{split}/sa/samples.npz",
        meta="results/{experiment}/{dataset}/split{split}/sa/meta.json",
        calibration="results/{experiment}/{dataset}/split{split}/sa/calibration.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/sa.log",
    params:
        method="sa",
        model=lambda w: model_cfg(w.experiment),
        train=lambda w: train_cfg(w.experiment),
        method_cfg=lambda w: method_cfg(w.experiment, "sa"),
        num_samples=config["num_samples"],
        seed=lambda w: seed_for("sa", w.dataset, w.split),
    threads: 1
    resources:
        mem_mb=mem_mb_train,
        runtime=runtime_method,
    script:
        "../workflow_scripts/run_method.py"
