# The deterministic FT-Transformer of one split, shared by SA, MC Dropout and SWAG.


rule train_backbone:
    """AdamW with early stopping on the validation part; writes the state dict and meta.json (seconds, epochs)."""
    input:
        prepared="results/{experiment}/{dataset}/split{split}/prepared.npz",
    output:
        model="results/{experiment}/{dataset}/split{split}/backbone/model.pt",
        meta="results/{experiment}/{dataset}/split{split}/backbone/meta.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/train_backbone.log",
        attempts=attempts_file("train_backbone", "{experiment}/{dataset}/split{split}"),
    benchmark:
        benchmark_file("train_backbone", "{experiment}/{dataset}/split{split}")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=mem_mb_train,
        runtime=runtime_backbone,
    params:
        model=lambda w: model_cfg(w.experiment, w.dataset),
        train=lambda w: train_cfg(w.experiment, w.dataset),
        seed=lambda w: seed_for("backbone", w.dataset, w.split),
        code=code_for("stochattn.experiments.uci:train_backbone"),
    script:
        "../workflow_scripts/train_backbone.py"
