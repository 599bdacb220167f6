# The ERA5 experiment (paper §6.2, §7, App. C.2, App. "Additional ClimaX Results"): ClimaX + LoRA, Z500 at 72 h in the
# paper; here every (target, lead) case of era5.targets x era5.lead_hours (rules/era5_common.smk: era5_cases). The data,
# preprocessing and backbone are shared; from the pairs on, each case has its own jobs in results/era5{era5_sub}
# (era5_sub: "" for the main case, the first, whose files keep the paper's names; the case's folder otherwise).
# Library: stochattn.experiments.era5 (stages), stochattn.experiments.era5_report (tables, figures), stochattn.data
# .era5 (WeatherBench files, ClimaX preprocessing) and stochattn.data.aquaplanet (the offline stand-in). Every ERA5
# rule but the figures runs workflow_scripts/era5.py, which dispatches on the rule's name to one library call.
#
# Offline default (era5.source: standin): two Held-Suarez climates generated here in WeatherBench's layout; the
# backbone is a reduced ClimaX pretrained on one, fine-tuned and tested on the other. On a cluster (weatherbench):
# the public files and the official 5.625deg.ckpt.


wildcard_constraints:
    era5_sub="(?:" + "|".join(re.escape(c.sub) for c in ERA5_CASES) + ")",


if ERA5_STANDIN:

    rule era5_standin:
        """One stand-in climate: a Held-Suarez run of dinosaur written as WeatherBench netCDF (standin.json last);
        its provenance (every file's SHA-256 as generated) beside the folder."""
        output:
            data=directory(f"{ERA5_DIR}/data/{{climate}}"),
            prov=f"{ERA5_DIR}/data/{{climate}}.prov.json",
        log:
            "logs/era5/standin_{climate}.log",
        benchmark:
            benchmark_file("era5_standin", "{climate}")
        wildcard_constraints:
            climate="pretrain|finetune",
        # the longest chains of the DAG start first, while the short UCI jobs fill the other cores
        priority: 20
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=60,
        params:
            standin=ERA5["standin"],
            climate=lambda w: ERA5["standin"]["climates"][w.climate],
            code=code_for("stochattn.data.aquaplanet:generate_held_suarez"),
        script:
            "../workflow_scripts/era5.py"

else:

    rule era5_fetch:
        """The WeatherBench 5.625 deg files of ClimaX's variables and years (mirrors first, else downloaded); their
        SHA-256 as fetched in the provenance beside the folder (WeatherBench publishes none). A job, not a local
        rule: from a staged store (`stochattn download`) it links ~129 GB and hashes every file, hours that belong on
        a compute node rather than the login node; under a cluster executor it never downloads."""
        input:
            rehearsal_input("weatherbench"),
        output:
            data=directory(f"{ERA5_DIR}/data/finetune"),
            prov=f"{ERA5_DIR}/data/finetune.prov.json",
        log:
            "logs/era5/fetch.log",
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=600,
        params:
            weatherbench=ERA5["weatherbench"],
        script:
            "../workflow_scripts/era5.py"

    rule era5_fetch_checkpoint:
        """The official ClimaX 5.625deg.ckpt (SHA-256 recorded in its provenance; verified when pinned)."""
        input:
            rehearsal_input("climax"),
        output:
            checkpoint=f"{ERA5_DIR}/backbone/5.625deg.ckpt",
            prov=f"{ERA5_DIR}/backbone/5.625deg.ckpt.prov.json",
        log:
            "logs/era5/fetch_checkpoint.log",
        localrule: True
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=60,
        params:
            checkpoint=ERA5["backbone"]["checkpoint"],
        script:
            "../workflow_scripts/era5.py"


rule era5_preprocess:
    """ClimaX's preprocessing of one climate's netCDF files: shards, normalisation, climatology (provenance beside
    the folder)."""
    input:
        f"{ERA5_DIR}/data/{{climate}}",
    output:
        shards=directory(f"{ERA5_DIR}/processed/{{climate}}"),
        prov=f"{ERA5_DIR}/processed/{{climate}}.prov.json",
    log:
        "logs/era5/preprocess_{climate}.log",
    benchmark:
        benchmark_file("era5_preprocess", "{climate}")
    wildcard_constraints:
        climate="pretrain|finetune",
    priority: 20
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=16000,
        runtime=240,
    params:
        variables=lambda w: ERA5["standin"]["variables"] if ERA5_STANDIN else ERA5["weatherbench"]["folders"],
        levels=lambda w: ERA5["standin"]["levels"] if ERA5_STANDIN else ERA5["weatherbench"]["levels"],
        years=lambda w: era5_years(w.climate),
        num_shards=ERA5["standin"]["num_shards"] if ERA5_STANDIN else ERA5["weatherbench"]["num_shards"],
        constants={} if ERA5_STANDIN else None,
        code=code_for("stochattn.data.era5:preprocess_climax"),
    script:
        "../workflow_scripts/era5.py"


rule era5_pretrain_standin:
    """The offline stand-in backbone: a reduced ClimaX pretrained on the pretraining climate only."""
    input:
        f"{ERA5_DIR}/processed/pretrain",
    output:
        state=f"{ERA5_DIR}/backbone/standin.pt",
        meta=f"{ERA5_DIR}/backbone/standin.json",
    log:
        "logs/era5/pretrain_standin.log",
    benchmark:
        benchmark_file("era5_pretrain_standin", "standin")
    priority: 20
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=8000,
        runtime=120,
    params:
        model=ERA5["backbone"]["standin"]["model"] if ERA5_STANDIN_BACKBONE else None,
        pretrain=ERA5["backbone"]["standin"]["pretrain"] if ERA5_STANDIN_BACKBONE else None,
        seed=era5_seed("pretrain"),
        code=code_for("stochattn.experiments.era5:pretrain_standin"),
    script:
        "../workflow_scripts/era5.py"


rule era5_prepare:
    """(input, target at lead) pairs of the fine-tuning data of one case (Z500 at 72 h in the paper): train / val / cal
    (alternate validation pairs) / test."""
    input:
        f"{ERA5_DIR}/processed/finetune",
    output:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        meta=f"{ERA5_CASE_DIR}/pairs.json",
    log:
        "logs/era5{era5_sub}/prepare.log",
    benchmark:
        benchmark_file("era5_prepare", "pairs{era5_sub}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=era5_mem_mb(),
        runtime=60,
    params:
        variables=era5_variables(),
        lead_hours=lambda w: era5_case(w).lead,
        target=lambda w: era5_case(w).target.name,
        max_pairs=ERA5["max_pairs"],
        code=code_for("stochattn.experiments.era5:prepare"),
    script:
        "../workflow_scripts/era5.py"


rule era5_adapt:
    """The LoRA adapter of one case (best validation epoch; the backbone competes as epoch 0) and the test skill of the
    backbone, the adapter, persistence and climatology."""
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
    output:
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
        meta=f"{ERA5_CASE_DIR}/adapter.json",
    log:
        "logs/era5{era5_sub}/adapt.log",
        attempts=attempts_file("era5_adapt", "adapter{era5_sub}"),
    benchmark:
        benchmark_file("era5_adapt", "adapter{era5_sub}")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_adapt_runtime(),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        seed=era5_seed("adapt"),
        code=code_for("stochattn.experiments.era5:adapt"),
    script:
        "../workflow_scripts/era5.py"


rule era5_multiswag_member:
    """One MultiSWAG-LoRA member 1..L-1: a fresh adapter from its own seed, then its SWAG-LoRA phase and its share of
    the samples at every candidate SWAG-LoRA scored (member 0 is the SWAG-LoRA run itself, written by rule
    era5_swag; rule era5_method chooses one setting on the pooled validation samples). One job per member: the
    paper's ten members took ~12 V100 days together."""
    input:
        unpack(era5_member_inputs),
    output:
        state=f"{ERA5_CASE_DIR}/runs/multiswag/members/{{component}}.pt",
        meta=f"{ERA5_CASE_DIR}/runs/multiswag/members/{{component}}.json",
    log:
        "logs/era5{era5_sub}/multiswag_member{component}.log",
        attempts=attempts_file("era5_multiswag_member", "{component}{era5_sub}"),
    benchmark:
        benchmark_file("era5_multiswag_member", "{component}{era5_sub}")
    wildcard_constraints:
        component=r"[1-9]\d*",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_member_runtime(),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        component=lambda w: int(w.component),
        method_cfg=era5_method_cfg("multiswag"),
        num_samples=config["num_samples"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        require_skill=ERA5["require_skill"],
        seed=era5_seed("multiswag"),
        code=code_for("stochattn.experiments.era5:train_multiswag_member"),
    script:
        "../workflow_scripts/era5.py"


rule era5_method:
    """One method (SA writes sa_match and calibration.json too; SWAG its variance-scale sweep; MultiSWAG pools the
    members of its per-member jobs): S samples on the test and cal pairs."""
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
        adapter_meta=f"{ERA5_CASE_DIR}/adapter.json",
        members=lambda w: era5_members(w) if getattr(w, "era5_method", None) == "multiswag" else [],
    output:
        samples=f"{ERA5_CASE_DIR}/runs/{{era5_method}}/samples.npz",
        meta=f"{ERA5_CASE_DIR}/runs/{{era5_method}}/meta.json",
    log:
        "logs/era5{era5_sub}/{era5_method}.log",
        attempts=attempts_file("era5_method", "{era5_method}{era5_sub}"),
    benchmark:
        benchmark_file("era5_method", "{era5_method}{era5_sub}")
    wildcard_constraints:
        era5_method=one_of([m for m in ERA5_RUN_METHODS if m not in ERA5_SEARCHED]),
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_method_runtime(),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        method=lambda w: w.era5_method,
        method_cfg=lambda w: era5_method_cfg(w.era5_method),
        num_samples=config["num_samples"],
        sa_sites=ERA5["sa_sites"],
        swag_scales=[],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        require_skill=ERA5["require_skill"],
        seed=lambda w: era5_seed(w.era5_method),
        code=lambda w: era5_method_code(w.era5_method),
    script:
        "../workflow_scripts/era5.py"


use rule era5_method as era5_calibrate_sa with:
    output:
        samples=era5_run("sa", "samples.npz"),
        meta=era5_run("sa", "meta.json"),
        calibration=era5_run("sa", "calibration.json"),
        match_samples=era5_run("sa_match", "samples.npz"),
        match_meta=era5_run("sa_match", "meta.json"),
    log:
        "logs/era5{era5_sub}/sa.log",
        attempts=attempts_file("era5_method", "sa{era5_sub}"),
    benchmark:
        benchmark_file("era5_method", "sa{era5_sub}")
    resources:  # `with: resources` replaces the parent's whole block
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_method_runtime("sa"),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        method="sa",
        method_cfg=era5_method_cfg("sa"),
        num_samples=config["num_samples"],
        sa_sites=ERA5["sa_sites"],
        swag_scales=[],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        require_skill=ERA5["require_skill"],
        seed=era5_seed("sa"),
        code=era5_method_code("sa"),


use rule era5_method as era5_swag with:
    output:
        samples=era5_run("swag", "samples.npz"),
        meta=era5_run("swag", "meta.json"),
        sweep=era5_run("swag", "scale_sweep.json"),
        member=era5_run("swag", "posterior.pt"),
        member_meta=era5_run("swag", "posterior.json"),
    log:
        "logs/era5{era5_sub}/swag.log",
        attempts=attempts_file("era5_method", "swag{era5_sub}"),
    benchmark:
        benchmark_file("era5_method", "swag{era5_sub}")
    resources:  # `with: resources` replaces the parent's whole block
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_method_runtime("swag"),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        method="swag",
        method_cfg=era5_method_cfg("swag"),
        num_samples=config["num_samples"],
        sa_sites=ERA5["sa_sites"],
        swag_scales=ERA5["swag_scales"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        require_skill=ERA5["require_skill"],
        seed=era5_seed("swag"),
        multiswag_components=ERA5_MULTISWAG_L,
        code=era5_method_code("swag", "stochattn.experiments.era5:swag_scale_sweep"),


rule era5_candidate:
    """One candidate of a method's validation grid (a SWAG-LoRA rate, an IVON-LoRA setting, a Contextual Dropout or
    HSA candidate): fitted, scored on the val pairs (stochattn.selection.fit_candidate), its fitted state (adapter,
    posterior) kept for rule era5_select. One job per candidate bounds every job's runtime."""
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
        adapter_meta=f"{ERA5_CASE_DIR}/adapter.json",
    output:
        state=f"{ERA5_CASE_DIR}/runs/{{era5_method}}/candidates/{{candidate}}.pt",
        record=f"{ERA5_CASE_DIR}/runs/{{era5_method}}/candidates/{{candidate}}.json",
    log:
        "logs/era5{era5_sub}/{era5_method}_candidate{candidate}.log",
        attempts=attempts_file("era5_candidate", "{era5_method}/{candidate}{era5_sub}"),
    benchmark:
        benchmark_file("era5_candidate", "{era5_method}/{candidate}{era5_sub}")
    wildcard_constraints:
        era5_method=one_of(ERA5_SEARCHED),
        candidate=r"\d+",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_candidate_runtime(),
    params:
        lora=ERA5["lora"],
        train=ERA5["train"],
        method=lambda w: w.era5_method,
        method_cfg=lambda w: era5_method_cfg(w.era5_method),
        index=lambda w: int(w.candidate),
        num_samples=config["num_samples"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        require_skill=ERA5["require_skill"],
        seed=lambda w: era5_seed(w.era5_method),
        code=lambda w: era5_candidate_code(w.era5_method),
    script:
        "../workflow_scripts/era5.py"


# the choice among a searched method's candidates (stochattn.selection.choose, the single-job search's choice), the
# winner's state loaded and sampled: the same run files as one era5_method (era5_swag) job
use rule era5_method as era5_select with:
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
        adapter_meta=f"{ERA5_CASE_DIR}/adapter.json",
        candidates=era5_candidates,
    log:
        "logs/era5{era5_sub}/{era5_method}.log",
        attempts=attempts_file("era5_select", "{era5_method}{era5_sub}"),
    benchmark:
        benchmark_file("era5_select", "{era5_method}{era5_sub}")
    wildcard_constraints:
        era5_method=one_of([m for m in ERA5_SEARCHED if m != "swag"]),
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_select_runtime(),


if "swag" in ERA5_SEARCHED:

    use rule era5_swag as era5_select_swag with:
        input:
            prepared=f"{ERA5_CASE_DIR}/pairs.npz",
            backbone=era5_backbone(),
            adapter=f"{ERA5_CASE_DIR}/adapter.pt",
            adapter_meta=f"{ERA5_CASE_DIR}/adapter.json",
            candidates=lambda w: era5_candidates(w, "swag"),
        log:
            "logs/era5{era5_sub}/swag.log",
            attempts=attempts_file("era5_select", "swag{era5_sub}"),
        benchmark:
            benchmark_file("era5_select", "swag{era5_sub}")
        threads: GPU_THREADS
        resources:
            gpu=GPUS_PER_JOB,
            mem_mb=era5_mem_mb(),
            runtime=era5_select_runtime("swag"),

    ruleorder: era5_select_swag > era5_swag


rule era5_analyses_sweep:
    """SA's score-oriented nu sweep (cal), its two test operating points and the per-pass latency vs nu."""
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
        calibration=era5_run("sa", "calibration.json"),
    output:
        f"{ERA5_CASE_DIR}/analyses/sweep.json",
    log:
        "logs/era5{era5_sub}/analyses_sweep.log",
    benchmark:
        benchmark_file("era5_analyses_sweep", "sweep{era5_sub}")
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_analyses_sweep_runtime(),
    params:
        lora=ERA5["lora"],
        sa_cfg=era5_method_cfg("sa"),
        analyses=ERA5["analyses"],
        num_samples=config["num_samples"],
        sa_sites=ERA5["sa_sites"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        seed=era5_seed("analyses"),
        code=code_for("stochattn.experiments.era5:sa_analyses_sweep"),
    script:
        "../workflow_scripts/era5.py"


rule era5_analyses_bo:
    """One BO run of the analyses (App. "BO sensitivity"): the sa run's BO under seed {bo_seed} on the sa run's nu
    range (bo_seeds) or on the second one (bo_second_range). One job per seed and range."""
    input:
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
        backbone=era5_backbone(),
        adapter=f"{ERA5_CASE_DIR}/adapter.pt",
    output:
        f"{ERA5_CASE_DIR}/analyses/{{bo_range}}_{{bo_seed}}.json",
    log:
        "logs/era5{era5_sub}/analyses_{bo_range}_{bo_seed}.log",
    benchmark:
        benchmark_file("era5_analyses_bo", "{bo_range}_{bo_seed}{era5_sub}")
    wildcard_constraints:
        bo_range="bo_seeds|bo_second_range",
        bo_seed=r"-?\d+",
    conda:
        CONDA_ENV
    threads: GPU_THREADS
    resources:
        gpu=GPUS_PER_JOB,
        mem_mb=era5_mem_mb(),
        runtime=era5_analyses_bo_runtime(),
    params:
        lora=ERA5["lora"],
        sa_cfg=era5_method_cfg("sa"),
        nu_range=lambda w: era5_bo_ranges()[w.bo_range],
        bo_seed=lambda w: int(w.bo_seed),
        sa_sites=ERA5["sa_sites"],
        allow_pickle=ERA5["backbone"]["checkpoint"].get("allow_pickle", False),
        seed=era5_seed("analyses"),
        code=code_for("stochattn.experiments.era5:sa_analyses_bo"),
    script:
        "../workflow_scripts/era5.py"


rule era5_analyses:
    """SA's operating-point analyses (score-oriented nu sweep, BO over several seeds, per-pass latency vs nu)
    gathered from their jobs into one file, as one job running them all would write it."""
    input:
        sweep=f"{ERA5_CASE_DIR}/analyses/sweep.json",
        bo=era5_bo_files,
    output:
        f"{ERA5_CASE_DIR}/analyses.json",
    log:
        "logs/era5{era5_sub}/analyses.log",
    benchmark:
        benchmark_file("era5_analyses", "analyses{era5_sub}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        bo_files=lambda w: era5_bo_files(w, grouped=True),
        code=code_for("stochattn.experiments.era5:gather_analyses"),
    script:
        "../workflow_scripts/era5.py"


rule era5_evaluate:
    """metrics.json (pooled over cells and forecasts; SA the coverage reference) and spatial.json (field scores) of
    every method."""
    input:
        **{f"{m}_samples": era5_run(m, "samples.npz") for m in ERA5_METHODS},
        **{f"{m}_meta": era5_run(m, "meta.json") for m in ERA5_METHODS},
        prepared=f"{ERA5_CASE_DIR}/pairs.npz",
    output:
        **{m: era5_run(m, "metrics.json") for m in ERA5_METHODS},
        **{f"{m}_spatial": era5_run(m, "spatial.json") for m in ERA5_METHODS},
    log:
        "logs/era5{era5_sub}/evaluate.log",
    benchmark:
        benchmark_file("era5_evaluate", "evaluate{era5_sub}")
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=era5_mem_mb(),
        runtime=60,
    params:
        methods=ERA5_METHODS,
        levels=config["evaluate"]["levels"],
        label=lambda w: f"ERA5 {era5_case(w).row}",
        seed=era5_seed("evaluate"),
        code=code_for("stochattn.experiments.evaluate:evaluate_split", "stochattn.experiments.era5:evaluate_spatial"),
    script:
        "../workflow_scripts/era5.py"


rule era5_table:
    """results/tables/<table>.{csv,md,tex}: the ClimaX tables."""
    input:
        unpack(era5_table_inputs),
    output:
        csv=report(
            "results/tables/{era5_table}.csv",
            caption="../report/era5_table.rst",
            category="ERA5 tables",
            labels={"table": "{era5_table}"},
        ),
        md="results/tables/{era5_table}.md",
        tex="results/tables/{era5_table}.tex",
        csv_prov="results/tables/{era5_table}.csv.prov.json",
        md_prov="results/tables/{era5_table}.md.prov.json",
        tex_prov="results/tables/{era5_table}.tex.prov.json",
    log:
        "logs/report/{era5_table}.log",
    wildcard_constraints:
        era5_table="|".join(
            [t + c.sfx for c in ERA5_CASES for t in ERA5_TABLES]
            + (["climax_summary_cases"] if len(ERA5_CASES) > 1 else [])
        ),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        caption=lambda w: era5_caption(era5_split_name(w.era5_table)[1]),
        table=era5_table_params,
        config_subset=era5_provenance_config(),
        seeds={"evaluate": era5_seed("evaluate")},
        code=code_for("stochattn.experiments.era5_report:build_table", "stochattn.report:write_table"),
    script:
        "../workflow_scripts/era5.py"


rule era5_figure:
    """results/figures/<figure>.{png,pdf}: the ClimaX figures and the teaser's panels (a) and (b)."""
    input:
        era5_figure_inputs,
    output:
        png=report(
            "results/figures/{era5_figure}.png",
            caption="../report/era5_figure.rst",
            category="ERA5 figures",
            labels={"figure": "{era5_figure}"},
        ),
        pdf="results/figures/{era5_figure}.pdf",
        png_prov="results/figures/{era5_figure}.png.prov.json",
        pdf_prov="results/figures/{era5_figure}.pdf.prov.json",
    log:
        "logs/report/{era5_figure}.log",
    wildcard_constraints:
        era5_figure="|".join(f + c.sfx for c in ERA5_CASES for f in ERA5_FIGURES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        figure=lambda w: f"stochattn.experiments.era5_report:{ERA5_FIGURES[era5_split_name(w.era5_figure)[0]]}",
        args=lambda w: era5_figure_args(w.era5_figure),
        caption=lambda w: era5_caption(era5_split_name(w.era5_figure)[1]),
        config_subset=era5_provenance_config(),
        seeds={},
        code=lambda w: code_for(f"stochattn.experiments.era5_report:{ERA5_FIGURES[era5_split_name(w.era5_figure)[0]]}"),
    script:
        "../workflow_scripts/figure.py"


# One target rule per (target, lead) case: era5_<target>_<lead>h (e.g. era5_t850_120h), its tables and figures.
for _case in ERA5_CASES:

    rule:
        name:
            f"era5_{_case.name}"
        input:
            era5_targets([_case]),
        localrule: True
