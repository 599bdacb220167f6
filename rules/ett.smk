# The ETT experiment (paper §5.1, §6.1, App. C.1): TimesFM 2.5 + LoRA on ETTh1/h2/m1/m2 at horizons 96 and 192.
# Library: stochattn.experiments.ett (stages), stochattn.experiments.ett_report (tables, figures). Every ETT rule
# runs workflow_scripts/ett.py, which dispatches on the rule's name to one library call.
#
# Offline default (ett.backbone.source: standin): a reduced TimesFM 2.5 module pretrained here, per station, on the
# OTHER station's training rows (ETTh1 is ETTm1 sampled hourly); on a cluster (source: checkpoint) the public
# google/timesfm-2.5-200m-pytorch checkpoint, fetched once and verified.


rule fetch_ett:
    """One ETT-small CSV, verified against the SHA-256 table shipped with stochattn (mirrors first)."""
    output:
        "results/data/ett/{ett_dataset}.csv",
    log:
        "logs/data/fetch_ett_{ett_dataset}.log",
    priority: 20  # the stand-in pretraining it feeds is the longest chain of the DAG
    localrule: True
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=30,
    script:
        "../workflow_scripts/ett.py"


rule ett_prepare:
    """Windows of one (data set, horizon): adaptation (10 % rule), val / cal (alternate validation windows), test."""
    input:
        csv="results/data/ett/{ett_dataset}.csv",
    output:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        meta=f"{ETT_CONFIG}/prepared.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/prepare.log",
    benchmark:
        benchmark_file("ett_prepare", "{ett_dataset}/H{horizon}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        context=ETT["context"],
        adaptation_percent=ETT["adaptation_percent"],
        max_series=ETT["max_series"],
        code=code_for("stochattn.experiments.ett:prepare"),
    script:
        "../workflow_scripts/ett.py"


rule ett_pretrain_standin:
    """The offline stand-in backbone for one station, pretrained on the other station's training rows only (its
    inputs are exactly those CSVs: the evaluated station's files are not among them)."""
    input:
        unpack(standin_sources),
    output:
        state="results/ett/backbone/station{station}.pt",
        meta="results/ett/backbone/station{station}.json",
    log:
        "logs/ett/backbone/station{station}.log",
    benchmark:
        benchmark_file("ett_pretrain_standin", "station{station}")
    wildcard_constraints:
        station="1|2",
    # the longest chains of the DAG start first, while the short UCI jobs fill the other cores
    priority: 20
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=120,
    params:
        model=ETT["backbone"]["standin"]["model"],
        pretrain=ETT["backbone"]["standin"]["pretrain"],
        context=ETT["context"],
        seed=lambda w: ett_seed("pretrain", None, int(w.station)),
        code=code_for("stochattn.experiments.ett:pretrain_standin"),
    script:
        "../workflow_scripts/ett.py"


rule ett_fetch_checkpoint:
    """The public TimesFM 2.5 200M checkpoint (Hugging Face Hub, cached, SHA-256 recorded / verified; provenance
    beside it)."""
    input:
        rehearsal_input("timesfm"),
    output:
        checkpoint="results/ett/backbone/timesfm-2.5-200m.safetensors",
        prov="results/ett/backbone/timesfm-2.5-200m.safetensors.prov.json",
    log:
        "logs/ett/backbone/fetch_checkpoint.log",
    localrule: True
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        checkpoint=ETT["backbone"]["checkpoint"],
    script:
        "../workflow_scripts/ett.py"


rule ett_adapt:
    """LoRA adapter of one configuration (best validation epoch, epoch 0 = the backbone included) and the
    backbone's zero-shot test MAE next to the seasonal-naive and last-value forecasts."""
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
    output:
        adapter=f"{ETT_CONFIG}/adapter.pt",
        meta=f"{ETT_CONFIG}/adapter.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/adapt.log",
        attempts=attempts_file("ett_adapt", "{ett_dataset}/H{horizon}"),
    benchmark:
        benchmark_file("ett_adapt", "{ett_dataset}/H{horizon}")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_adapt_runtime(),
    params:
        lora=ETT["lora"],
        train=ETT["train"],
        seed=lambda w: ett_seed("adapt", w.ett_dataset, w.horizon),
        code=code_for("stochattn.experiments.ett:adapt"),
    script:
        "../workflow_scripts/ett.py"


rule ett_calibrate_sa:
    """SA on the adapted model: nu by BO on the cal windows (Algorithms 2-3), samples at both operating points
    (sa: Algorithm 2's nu; sa_match: the surrogate's scale-matching nu) and calibration.json."""
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
        adapter=f"{ETT_CONFIG}/adapter.pt",
        adapter_meta=f"{ETT_CONFIG}/adapter.json",
    output:
        samples=f"{ETT_CONFIG}/sa/samples.npz",
        meta=f"{ETT_CONFIG}/sa/meta.json",
        calibration=f"{ETT_CONFIG}/sa/calibration.json",
        match_samples=f"{ETT_CONFIG}/sa_match/samples.npz",
        match_meta=f"{ETT_CONFIG}/sa_match/meta.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/sa.log",
        attempts=attempts_file("ett_calibrate_sa", "{ett_dataset}/H{horizon}"),
    benchmark:
        benchmark_file("ett_calibrate_sa", "{ett_dataset}/H{horizon}")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_method_runtime("sa"),
    params:
        lora=ETT["lora"],
        train=ETT["train"],
        method="sa",
        method_cfg=ett_method_cfg("sa"),
        num_samples=config["num_samples"],
        require_skill=ETT["require_skill"],
        seed=lambda w: ett_seed("sa", w.ett_dataset, w.horizon),
        code=ett_method_code("sa"),
    script:
        "../workflow_scripts/ett.py"


rule ett_multiswag_member:
    """One MultiSWAG-LoRA member 1..L-1 of one configuration: a fresh adapter from its own seed, then its SWAG-LoRA
    phase and its share of the samples at every candidate SWAG-LoRA scored (member 0 is the SWAG-LoRA run itself,
    written by rule ett_swag; rule ett_method chooses one setting on the pooled validation samples). One job per
    member bounds every job's runtime."""
    input:
        unpack(lambda w: ett_member_inputs(w)),
    output:
        state=f"{ETT_CONFIG}/multiswag/members/{{component}}.pt",
        meta=f"{ETT_CONFIG}/multiswag/members/{{component}}.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/multiswag_member{component}.log",
        attempts=attempts_file("ett_multiswag_member", "{ett_dataset}/H{horizon}/{component}"),
    benchmark:
        benchmark_file("ett_multiswag_member", "{ett_dataset}/H{horizon}/{component}")
    wildcard_constraints:
        component=r"[1-9]\d*",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_member_runtime(),
    params:
        lora=ETT["lora"],
        train=ETT["train"],
        component=lambda w: int(w.component),
        method_cfg=ett_method_cfg("multiswag"),
        num_samples=config["num_samples"],
        require_skill=ETT["require_skill"],
        seed=lambda w: ett_seed("multiswag", w.ett_dataset, w.horizon),
        code=code_for("stochattn.experiments.ett:train_multiswag_member"),
    script:
        "../workflow_scripts/ett.py"


rule ett_method:
    """One method on one configuration: S predictive samples on the test and cal windows (SA writes sa_match too;
    MultiSWAG pools the members of its per-member jobs; SWAG, rule ett_swag, keeps its posterior as member 0)."""
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
        adapter=f"{ETT_CONFIG}/adapter.pt",
        adapter_meta=f"{ETT_CONFIG}/adapter.json",
        members=lambda w: ett_members(w) if getattr(w, "ett_method", None) == "multiswag" else [],
    output:
        samples=f"{ETT_CONFIG}/{{ett_method}}/samples.npz",
        meta=f"{ETT_CONFIG}/{{ett_method}}/meta.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/{ett_method}.log",
        attempts=attempts_file("ett_method", "{ett_dataset}/H{horizon}/{ett_method}"),
    benchmark:
        benchmark_file("ett_method", "{ett_dataset}/H{horizon}/{ett_method}")
    wildcard_constraints:
        ett_method=one_of([m for m in ETT["methods"] if m not in ("sa", "swag", *ETT_SEARCHED)]),
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_method_runtime(),
    params:
        lora=ETT["lora"],
        train=ETT["train"],
        method=lambda w: w.ett_method,
        method_cfg=lambda w: ett_method_cfg(w.ett_method),
        num_samples=config["num_samples"],
        require_skill=ETT["require_skill"],
        seed=lambda w: ett_seed(w.ett_method, w.ett_dataset, w.horizon),
        code=lambda w: ett_method_code(w.ett_method),
    script:
        "../workflow_scripts/ett.py"


use rule ett_method as ett_swag with:
    output:
        samples=f"{ETT_CONFIG}/{{ett_method}}/samples.npz",
        meta=f"{ETT_CONFIG}/{{ett_method}}/meta.json",
        member=f"{ETT_CONFIG}/{{ett_method}}/posterior.pt",
        member_meta=f"{ETT_CONFIG}/{{ett_method}}/posterior.json",
    wildcard_constraints:
        ett_method=one_of([] if "swag" in ETT_SEARCHED else ["swag"]),
    params:
        multiswag_components=ETT_MULTISWAG_L,


rule ett_candidate:
    """One candidate of a method's validation grid on one configuration (a SWAG-LoRA rate, an IVON-LoRA setting, a
    Contextual Dropout or HSA candidate): fitted, scored on the val windows (stochattn.selection.fit_candidate), its
    fitted state (adapter, posterior) kept for rule ett_select. One job per candidate bounds every job's runtime."""
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
        adapter=f"{ETT_CONFIG}/adapter.pt",
        adapter_meta=f"{ETT_CONFIG}/adapter.json",
    output:
        state=f"{ETT_CONFIG}/{{ett_method}}/candidates/{{candidate}}.pt",
        record=f"{ETT_CONFIG}/{{ett_method}}/candidates/{{candidate}}.json",
    log:
        "logs/ett/{ett_dataset}/H{horizon}/{ett_method}_candidate{candidate}.log",
        attempts=attempts_file("ett_candidate", "{ett_dataset}/H{horizon}/{ett_method}/{candidate}"),
    benchmark:
        benchmark_file("ett_candidate", "{ett_dataset}/H{horizon}/{ett_method}/{candidate}")
    wildcard_constraints:
        ett_method=one_of(ETT_SEARCHED),
        candidate=r"\d+",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_candidate_runtime(),
    params:
        lora=ETT["lora"],
        train=ETT["train"],
        method=lambda w: w.ett_method,
        method_cfg=lambda w: ett_method_cfg(w.ett_method),
        index=lambda w: int(w.candidate),
        num_samples=config["num_samples"],
        require_skill=ETT["require_skill"],
        seed=lambda w: ett_seed(w.ett_method, w.ett_dataset, w.horizon),
        code=lambda w: ett_candidate_code(w.ett_method),
    script:
        "../workflow_scripts/ett.py"


# the choice among a searched method's candidates (stochattn.selection.choose, the single-job search's choice), the
# winner's state loaded and sampled: the same samples.npz / meta.json as one ett_method (ett_swag) job
use rule ett_method as ett_select with:
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
        adapter=f"{ETT_CONFIG}/adapter.pt",
        adapter_meta=f"{ETT_CONFIG}/adapter.json",
        candidates=ett_candidates,
    log:
        "logs/ett/{ett_dataset}/H{horizon}/{ett_method}.log",
        attempts=attempts_file("ett_select", "{ett_dataset}/H{horizon}/{ett_method}"),
    benchmark:
        benchmark_file("ett_select", "{ett_dataset}/H{horizon}/{ett_method}")
    wildcard_constraints:
        ett_method=one_of([m for m in ETT_SEARCHED if m != "swag"]),
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_select_runtime(),


use rule ett_swag as ett_select_swag with:
    input:
        prepared=f"{ETT_CONFIG}/prepared.npz",
        backbone=ett_backbone,
        adapter=f"{ETT_CONFIG}/adapter.pt",
        adapter_meta=f"{ETT_CONFIG}/adapter.json",
        candidates=ett_candidates,
    log:
        "logs/ett/{ett_dataset}/H{horizon}/{ett_method}.log",
        attempts=attempts_file("ett_select", "{ett_dataset}/H{horizon}/{ett_method}"),
    benchmark:
        benchmark_file("ett_select", "{ett_dataset}/H{horizon}/{ett_method}")
    wildcard_constraints:
        ett_method=one_of([m for m in ETT_SEARCHED if m == "swag"]),
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=ett_select_runtime(),


rule ett_evaluate:
    """metrics.json of every method of one configuration (series x steps pooled; SA the coverage reference)."""
    input:
        **{f"{m}_samples": f"{ETT_CONFIG}/{m}/samples.npz" for m in ETT_METHODS},
        **{f"{m}_meta": f"{ETT_CONFIG}/{m}/meta.json" for m in ETT_METHODS},
    output:
        **{m: f"{ETT_CONFIG}/{m}/metrics.json" for m in ETT_METHODS},
    log:
        "logs/ett/{ett_dataset}/H{horizon}/evaluate.log",
    benchmark:
        benchmark_file("ett_evaluate", "{ett_dataset}/H{horizon}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        methods=ETT_METHODS,
        levels=config["evaluate"]["levels"],
        seed=lambda w: ett_seed("evaluate", w.ett_dataset, w.horizon),
        code=code_for("stochattn.experiments.evaluate:evaluate_split"),
    script:
        "../workflow_scripts/ett.py"


rule ett_table:
    """results/tables/ett_<table>.{csv,md,tex}: sharpness at SA's coverage on the stated window (the paper's) and
    pooled, pooled metrics, zero-shot MAE."""
    input:
        unpack(ett_table_inputs),
    output:
        csv=report(
            "results/tables/ett_{table}.csv",
            caption="../report/ett_table.rst",
            category="ETT tables",
            labels={"table": "{table}"},
        ),
        md="results/tables/ett_{table}.md",
        tex="results/tables/ett_{table}.tex",
        csv_prov="results/tables/ett_{table}.csv.prov.json",
        md_prov="results/tables/ett_{table}.md.prov.json",
        tex_prov="results/tables/ett_{table}.tex.prov.json",
    log:
        "logs/report/ett_{table}.log",
    wildcard_constraints:
        table="|".join(ETT_TABLES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        table=lambda w: f"stochattn.experiments.ett_report:{w.table.upper()}_TABLE",
        window=ett_window(),
        caption=ett_caption(),
        config_subset=ett_provenance_config(),
        seeds={"evaluate": "ett_seed('evaluate', dataset, horizon)"},
        code=lambda w: code_for(
            "stochattn.experiments.ett_report:load_ett_runs",
            f"stochattn.experiments.ett_report:{w.table.upper()}_TABLE",  # its layout and builder
            *([f"stochattn.experiments.ett_report:{w.table}_table"] if w.table in ("sharpness", "zero_shot") else []),
            "stochattn.report:write_table",
        ),
    script:
        "../workflow_scripts/ett.py"


rule ett_figure:
    """The coverage figure (one stated window, native intervals), the same window with every method but SA
    conformally rescaled to SA's coverage there (the paper's), and rescaled by factors fitted on the cal windows."""
    input:
        unpack(ett_figure_inputs),
    output:
        png=report(
            "results/figures/{ett_figure}.png",
            caption="../report/ett_coverage.rst",
            category="ETT coverage",
            labels={"figure": "{ett_figure}"},
        ),
        pdf="results/figures/{ett_figure}.pdf",
        png_prov="results/figures/{ett_figure}.png.prov.json",
        pdf_prov="results/figures/{ett_figure}.pdf.prov.json",
    log:
        "logs/report/{ett_figure}.log",
    wildcard_constraints:
        ett_figure="|".join(ETT_FIGURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.ett_report:coverage_figure",
        args=lambda w: ett_figure_args(ETT_FIGURES[w.ett_figure]),
        caption=ett_caption(),
        config_subset=ett_provenance_config(),
        seeds={},
        code=code_for("stochattn.experiments.ett_report:coverage_figure", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"
