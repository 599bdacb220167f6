# The five baselines (paper App. D): MC Dropout and SWAG start from the shared backbone; MultiSWAG, IVON and HSA
# train their own networks with the same architecture and training settings.


rule run_method:
    """One baseline on one split: S predictive samples on the test and calibration parts (samples.npz), meta.json."""
    input:
        unpack(method_inputs),
    output:
        samples="results/{experiment}/{dataset}/split{split}/{method}/samples.npz",
        meta="results/{experiment}/{dataset}/split{split}/{method}/meta.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/{method}.log",
        attempts=attempts_file("run_method", "{experiment}/{dataset}/split{split}/{method}"),
    benchmark:
        benchmark_file("run_method", "{experiment}/{dataset}/split{split}/{method}")
    wildcard_constraints:
        method="|".join(m for m in BASELINES if m != "swag"),
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=mem_mb_train,
        runtime=runtime_method,
    params:
        method=lambda w: w.method,
        model=lambda w: model_cfg(w.experiment, w.dataset),
        train=lambda w: train_cfg(w.experiment, w.dataset),
        method_cfg=lambda w: method_cfg(w.experiment, w.method, w.dataset),
        num_samples=config["num_samples"],
        seed=lambda w: seed_for(w.method, w.dataset, w.split),
        code=run_method_code,
    script:
        "../workflow_scripts/run_method.py"


use rule run_method as run_swag with:
    output:
        samples="results/{experiment}/{dataset}/split{split}/{method}/samples.npz",
        meta="results/{experiment}/{dataset}/split{split}/{method}/meta.json",
        member="results/{experiment}/{dataset}/split{split}/{method}/posterior.pt",
        member_meta="results/{experiment}/{dataset}/split{split}/{method}/posterior.json",
    wildcard_constraints:
        method="swag",
    params:
        # MultiSWAG's L: the posterior file holds component 0's share of the samples at every candidate SWAG scored
        multiswag_components=lambda w: int(method_cfg(w.experiment, "multiswag", w.dataset)["components"]),


rule multiswag_component:
    """One MultiSWAG component 1..L-1: a network trained from its own seed, then its SWAG phase and its share of the
    samples at every candidate SWAG scored (component 0 is the SWAG run on the shared backbone, rule run_swag;
    MultiSWAG's run chooses one setting on the pooled validation samples). One job per component bounds every
    job's runtime."""
    input:
        unpack(component_inputs),
    output:
        state="results/{experiment}/{dataset}/split{split}/multiswag/components/{component}.pt",
        meta="results/{experiment}/{dataset}/split{split}/multiswag/components/{component}.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/multiswag_component{component}.log",
        attempts=attempts_file("multiswag_component", "{experiment}/{dataset}/split{split}/{component}"),
    benchmark:
        benchmark_file("multiswag_component", "{experiment}/{dataset}/split{split}/{component}")
    wildcard_constraints:
        component=r"[1-9]\d*",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=mem_mb_train,
        runtime=runtime_component,
    params:
        component=lambda w: int(w.component),
        model=lambda w: model_cfg(w.experiment, w.dataset),
        train=lambda w: train_cfg(w.experiment, w.dataset),
        method_cfg=lambda w: method_cfg(w.experiment, "multiswag", w.dataset),
        num_samples=config["num_samples"],
        seed=lambda w: seed_for("multiswag", w.dataset, w.split),
        code=code_for("stochattn.experiments.uci:train_multiswag_component"),
    script:
        "../workflow_scripts/multiswag_component.py"


rule uci_candidate:
    """One candidate of MC Dropout's, IVON's or HSA's validation grid on one split (where the grid has more than one):
    a network trained and scored on the validation part (MC Dropout at the backbone's own rates: the backbone itself),
    kept for the method's run_method job, which chooses and samples (stochattn.experiments.uci.fit_candidate /
    choose_candidate: the run of one job, tested equal; a widening's candidates beyond the grid's edge are trained in
    that job). One job per candidate bounds every job's runtime and lets a cluster fit the grid in parallel."""
    input:
        unpack(candidate_inputs),
    output:
        state="results/{experiment}/{dataset}/split{split}/{method}/candidates/{candidate}.pt",
        record="results/{experiment}/{dataset}/split{split}/{method}/candidates/{candidate}.json",
    log:
        "logs/{experiment}/{dataset}/split{split}/{method}_candidate{candidate}.log",
        attempts=attempts_file("uci_candidate", "{experiment}/{dataset}/split{split}/{candidate}/{method}"),
    benchmark:
        benchmark_file("uci_candidate", "{experiment}/{dataset}/split{split}/{candidate}/{method}")
    wildcard_constraints:
        method=one_of(UCI_SEARCH_METHODS),
        candidate=r"\d+",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=mem_mb_train,
        runtime=runtime_candidate,
    params:
        method=lambda w: w.method,
        index=lambda w: int(w.candidate),
        model=lambda w: model_cfg(w.experiment, w.dataset),
        train=lambda w: train_cfg(w.experiment, w.dataset),
        method_cfg=lambda w: method_cfg(w.experiment, w.method, w.dataset),
        num_samples=config["num_samples"],
        seed=lambda w: seed_for(w.method, w.dataset, w.split),
        code=lambda w: uci_search_code("fit_candidate", w.method),
    script:
        "../workflow_scripts/run_method.py"
