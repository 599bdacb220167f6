# Tables and figures of the UCI slice and the teaser's toy panel. Each file gets <file>.prov.json (rule, inputs with
# SHA-256, config subset, seeds, git commit + dirty flag, package versions, host, device, times). Figures carry an
# RST caption for `snakemake --report report.html`; captions name every deviation from the paper's protocol.
# Layouts and writers: stochattn.experiments.uci_tables (TableSpecs, run by workflow_scripts/table.py) and
# stochattn.experiments.uci_figures (run by workflow_scripts/figure.py), over stochattn.report / stochattn.figures.


rule uci_table:
    """results/tables/uci_<table>.{csv,md,tex} from every run's metrics.json (stochattn.experiments.uci_tables)."""
    input:
        metrics=uci_metrics(),
    output:
        csv=report(
            "results/tables/uci_{table}.csv",
            caption="../report/uci_table.rst",
            category="Tables",
            labels={"table": "{table}"},
        ),
        md="results/tables/uci_{table}.md",
        tex="results/tables/uci_{table}.tex",
        csv_prov="results/tables/uci_{table}.csv.prov.json",
        md_prov="results/tables/uci_{table}.md.prov.json",
        tex_prov="results/tables/uci_{table}.tex.prov.json",
    log:
        "logs/report/uci_{table}.log",
    wildcard_constraints:
        table="|".join(UCI_TABLES),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        table=lambda w: f"stochattn.experiments.uci_tables:{w.table.upper()}_TABLE",  # its TableSpec
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=lambda w: code_for(
            "stochattn.report:load_runs",
            f"stochattn.experiments.uci_tables:{w.table.upper()}_TABLE",
            "stochattn.report:write_table",
        ),
    script:
        "../workflow_scripts/table.py"


rule uci_pit_figure:
    """Native PIT histograms of every method on one data set, pooled over splits (stochattn.experiments.uci_figures)."""
    input:
        metrics=lambda w: uci_metrics([w.dataset]),
    output:
        png=report(
            "results/figures/uci_pit_{dataset}.png",
            caption="../report/uci_pit.rst",
            category="UCI PIT",
            labels={"dataset": "{dataset}"},
        ),
        pdf="results/figures/uci_pit_{dataset}.pdf",
        png_prov="results/figures/uci_pit_{dataset}.png.prov.json",
        pdf_prov="results/figures/uci_pit_{dataset}.pdf.prov.json",
    log:
        "logs/report/uci_pit_{dataset}.log",
    wildcard_constraints:
        dataset="|".join(DATASET_REGISTRY),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:pit_histograms",
        args=lambda w, input: {"runs": list(map(str, input.metrics)), "dataset": w.dataset},
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:pit_histograms", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"


rule uci_sharpness_figure:
    """PI-95 widths per test point normalised by SA's mean width; the other methods temperature-scaled on the
    calibration split, as the paper (stochattn.experiments.uci_figures)."""
    input:
        unpack(lambda w: {"samples_and_metrics": flat_paths(samples_and_metrics(w.dataset))}),
    output:
        png=report(
            "results/figures/uci_sharpness_{dataset}.png",
            caption="../report/uci_sharpness.rst",
            category="UCI sharpness",
            labels={"dataset": "{dataset}"},
        ),
        pdf="results/figures/uci_sharpness_{dataset}.pdf",
        png_prov="results/figures/uci_sharpness_{dataset}.png.prov.json",
        pdf_prov="results/figures/uci_sharpness_{dataset}.pdf.prov.json",
    log:
        "logs/report/uci_sharpness_{dataset}.log",
    wildcard_constraints:
        dataset="|".join(DATASET_REGISTRY),
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:sharpness_boxplot",
        args=lambda w: {"samples_and_metrics": samples_and_metrics(w.dataset), "dataset": w.dataset},
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:sharpness_boxplot", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"


rule uci_sharpness_grid:
    """The paper's six-panel Fig. uci_sharpness_remaining_1 (the run's data sets among Concrete, Energy, Kin8nm,
    Naval, Power, Protein) in one file; the single-panel files stay beside it."""
    input:
        samples_and_metrics=[p for d in SHARPNESS_GRID for p in flat_paths(samples_and_metrics(d))],
    output:
        png=report(
            "results/figures/uci_sharpness_remaining.png",
            caption="../report/uci_sharpness.rst",
            category="UCI sharpness",
            labels={"dataset": "six-panel"},
        ),
        pdf="results/figures/uci_sharpness_remaining.pdf",
        png_prov="results/figures/uci_sharpness_remaining.png.prov.json",
        pdf_prov="results/figures/uci_sharpness_remaining.pdf.prov.json",
    log:
        "logs/report/uci_sharpness_remaining.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:sharpness_grid",
        args={"samples_and_metrics": {d: samples_and_metrics(d) for d in SHARPNESS_GRID}},
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:sharpness_grid", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"


rule uci_yacht_appendix:
    """Paper fig. uci_yacht_appendix: (a) native PIT overlaid, (b) PI-95 sharpness relative to SA."""
    input:
        metrics=uci_metrics(["yacht"]) if "yacht" in DATASETS else [],
        samples_and_metrics=flat_paths(samples_and_metrics("yacht")) if "yacht" in DATASETS else [],
    output:
        png=report(
            "results/figures/uci_yacht_appendix.png",
            caption="../report/uci_yacht_appendix.rst",
            category="UCI PIT",
            labels={"dataset": "yacht (appendix)"},
        ),
        pdf="results/figures/uci_yacht_appendix.pdf",
        png_prov="results/figures/uci_yacht_appendix.png.prov.json",
        pdf_prov="results/figures/uci_yacht_appendix.pdf.prov.json",
    log:
        "logs/report/uci_yacht_appendix.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:yacht_appendix",
        args=lambda w, input: {
            "runs": list(map(str, input.metrics)),
            "samples_and_metrics": samples_and_metrics("yacht") if "yacht" in DATASETS else {},
            "dataset": "yacht",
        },
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:yacht_appendix", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"


rule uci_cost_figure:
    """Total wall-clock seconds per method and data set, log axis, from the cost table
    (stochattn.experiments.uci_figures)."""
    input:
        table="results/tables/uci_cost.csv",
    output:
        png=report(
            "results/figures/uci_cost.png",
            caption="../report/uci_cost.rst",
            category="UCI cost",
        ),
        pdf="results/figures/uci_cost.pdf",
        png_prov="results/figures/uci_cost.png.prov.json",
        pdf_prov="results/figures/uci_cost.pdf.prov.json",
    log:
        "logs/report/uci_cost_figure.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:cost_figure",
        args=lambda w, input: {"cost_tidy": str(input.table)},
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:cost_figure", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"


rule teaser_sinusoid:
    """Teaser panel (c): the toy's test points, the shared trend and each method's PI-95 band."""
    input:
        prepared=f"results/toy/{TOY_DATASET}/split0/prepared.npz",
        samples=[f"results/toy/{TOY_DATASET}/split0/{m}/samples.npz" for m in TOY_METHODS],
    output:
        png=report(
            "results/figures/teaser_sinusoid.png",
            caption="../report/teaser_sinusoid.rst",
            category="Teaser",
        ),
        pdf="results/figures/teaser_sinusoid.pdf",
        png_prov="results/figures/teaser_sinusoid.png.prov.json",
        pdf_prov="results/figures/teaser_sinusoid.pdf.prov.json",
    log:
        "logs/report/teaser_sinusoid.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.experiments.uci_figures:teaser_sinusoid",
        args=lambda w, input: {
            "samples_paths_by_method": dict(zip(TOY_METHODS, map(str, input.samples))),
            "prepared_path": str(input.prepared),
            "max_trend_rmse": config["toy"]["max_trend_rmse"],
        },
        caption=toy_caption(),
        config_subset=provenance_config("toy"),
        seeds=SEED_RULE,
        code=code_for("stochattn.experiments.uci_figures:teaser_sinusoid", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"
