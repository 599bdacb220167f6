# The reproduction report (every number of config/paper_results.yaml next to ours) and the composed teaser; helpers
# in rules/paper_common.smk.


rule paper_comparison:
    """results/tables/paper_comparison.{csv,md}: every number of config/paper_results.yaml (the paper's, each with
    its source label) next to ours from the run's own tables, with the ratio and a verdict; rows of a stand-in or
    reduced slice say so (stochattn.experiments.paper_comparison)."""
    input:
        tables=paper_comparison_tables(),
    output:
        csv=report(
            "results/tables/paper_comparison.csv",
            caption="../report/paper_comparison.rst",
            category="Tables",
            labels={"table": "paper_comparison"},
        ),
        md="results/tables/paper_comparison.md",
        csv_prov="results/tables/paper_comparison.csv.prov.json",
        md_prov="results/tables/paper_comparison.md.prov.json",
    log:
        "logs/report/paper_comparison.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        # the reference values are not a job's output: their content (and path) is a param, so editing the file
        # reruns the report, and the audit checks our tables' chains only
        reference=PAPER_RESULTS,
        reference_sha256=sha256_file(PAPER_RESULTS),
        runs=paper_comparison_runs(),
        aliases=paper_comparison_aliases(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for(
            "stochattn.experiments.paper_comparison:compare",
            "stochattn.experiments.paper_comparison:write_comparison",
        ),
    script:
        "../workflow_scripts/paper_comparison.py"


rule teaser:
    """The paper's teaser (Fig. teaser) in one file: (a) truth / forecast / bias maps, (b) the four axes measured,
    (c) the toy's intervals, composed from the three panel figures (which stay as files of their own); each panel
    carries at most a one-line stand-in marker, the full caption (teaser_caption) is the report's and the sidecar's."""
    input:
        [p for row in TEASER_PANELS for p in row],
    output:
        png=report("results/figures/teaser.png", caption="../report/teaser.rst", category="Teaser"),
        pdf="results/figures/teaser.pdf",
        png_prov="results/figures/teaser.png.prov.json",
        pdf_prov="results/figures/teaser.pdf.prov.json",
    log:
        "logs/report/teaser.log",
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        figure="stochattn.figures:compose_panels",
        args={"rows": TEASER_PANELS, "title": "Useful uncertainty is multi-dimensional"},
        caption=teaser_caption(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.figures:compose_panels", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"
