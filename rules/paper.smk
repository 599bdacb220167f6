# The reproduction report: every number of config/paper_results.yaml next to ours (after every slice's rules:
# it reads the UCI, ETT and ERA5 tables of the slices this run makes).

from stochattn.io import sha256_file

PAPER_RESULTS = os.path.join(workflow.basedir, "config", "paper_results.yaml")
PAPER_COMPARISON_FILES = [f"results/tables/paper_comparison.{ext}{prov}" for ext in ("csv", "md")
                          for prov in ("", ".prov.json")]  # fmt: skip


def paper_comparison_tables():
    """Our tables' CSVs that hold a statistic of the reference file, for the slices this run makes."""
    from stochattn.experiments.paper_comparison import paper_cells, slice_of

    enabled = {"uci": True, "ett": ETT["enabled"], "era5": ERA5["enabled"]}
    names = sorted(set(paper_cells(PAPER_RESULTS)["table"]))
    return [f"results/tables/{t}.csv" for t in names if enabled[slice_of(t)]]


def paper_comparison_runs():
    """What ran for each slice, as the report's ``run`` column says it."""
    m = config["model"]
    full = config["splits"] == 20 and (m["n_blocks"], m["d_block"]) == (3, 192)
    runs = {"uci": f"FT-Transformer {m['n_blocks']} block(s), d {m['d_block']}, {config['splits']} splits"
                   + ("" if full else ", REDUCED protocol (see the UCI captions)")}  # fmt: skip
    if ETT["enabled"]:
        runs["ett"] = ("STAND-IN TimesFM backbone pretrained here, not the public checkpoint" if ETT_STANDIN
                       else "TimesFM 2.5 200M checkpoint")  # fmt: skip
    if ERA5["enabled"]:
        runs["era5"] = ("AQUAPLANET STAND-IN for ERA5, reduced ClimaX pretrained here" if ERA5_STANDIN
                        else "ERA5 (WeatherBench) and the ClimaX checkpoint")  # fmt: skip
        if float(ERA5["lead_hours"]) != 72:
            runs["era5"] += f", Z500 at {ERA5['lead_hours']} h (the paper: 72 h)"
    return runs


def paper_comparison_aliases():
    """The ClimaX row of ours that stands for the paper's 72 h row when the run forecasts another lead."""
    from stochattn.experiments.era5_report import ROW, row_label

    return {ROW: row_label(ERA5["lead_hours"])} if ERA5["enabled"] else {}


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


TEASER_PANELS = [["results/figures/teaser_climax_maps.png"], ["results/figures/teaser_axes.png",
                 "results/figures/teaser_sinusoid.png"]] if ERA5["enabled"] else [["results/figures/teaser_sinusoid.png"]]
TEASER_FILES = figure_files("teaser")


rule teaser:
    """The paper's teaser (Fig. teaser) in one file: (a) truth / forecast / bias maps, (b) the four axes measured,
    (c) the toy's intervals, composed from the three panel figures (which stay as files of their own)."""
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
        args={"rows": TEASER_PANELS, "title": "Useful uncertainty is multi-dimensional (panels: their own captions)"},
        caption=protocol_note(),
        config_subset=provenance_config(),
        seeds=SEED_RULE,
        code=code_for("stochattn.figures:compose_panels", "stochattn.provenance:provenance_record"),
    script:
        "../workflow_scripts/figure.py"
