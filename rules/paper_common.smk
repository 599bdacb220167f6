# Helpers of rules/paper.smk (the reproduction report and the composed teaser), included after every slice's
# rules: they read the UCI, ETT and ERA5 settings.

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
        main = ERA5_CASES[0]
        if (main.target.name, main.lead) != ("z500", 72):
            runs["era5"] += f", {main.target.label} at {main.lead} h (the paper: Z500 at 72 h)"
    if config["report"]["note"]:  # e.g. the rehearsal's "REHEARSAL, RANDOM WEIGHTS ..."
        runs = {k: f"{v}; {config['report']['note']}" for k, v in runs.items()}
    return runs


def paper_comparison_aliases():
    """The ClimaX row of ours (the main case's) that stands for the paper's Z500 72 h row."""
    from stochattn.data.era5 import ROW

    return {ROW: ERA5_CASES[0].row} if ERA5["enabled"] else {}


TEASER_PANELS = (
    [
        ["results/figures/teaser_climax_maps.png"],
        ["results/figures/teaser_axes.png", "results/figures/teaser_sinusoid.png"],
    ]
    if ERA5["enabled"]
    else [["results/figures/teaser_sinusoid.png"]]
)
TEASER_FILES = figure_files("teaser")


def teaser_caption():
    """The composed teaser's full caption (report, .prov.json): each panel's own, since the panels carry one line
    of stand-in marker each (rules era5_figure and teaser_sinusoid)."""
    if not ERA5["enabled"]:
        return toy_caption()
    return f"(a), (b): {era5_caption()} (c): {toy_caption()}"
