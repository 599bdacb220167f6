"""The paper configuration's UCI slice beside the paper, in one command (issue 46).

    python benchmarks/uci_paper_slice.py WORKDIR [--datasets ...] [--splits 3] [--fewer protein=1 naval=1]
        [--methods sa mc_dropout swag multiswag ivon hsa] [--cores 2] [--configfile extra.yaml ...] [--report-only]
        [--partial] [--by-split] [--out WORKDIR/uci_paper_slice.md] [--keep RECORDS]

Runs the workflow's own rules (``snakemake -s Snakefile --directory WORKDIR --configfile config/config.yaml
WORKDIR/slice.yaml ... results/tables/uci_master.md``) on the paper's architecture and schedules (config/config.yaml),
the first ``--splits`` Gal splits of each data set (``--fewer`` gives some data sets fewer: what a 2-core machine can do
with protein and naval in a session), the data from ``--mirror`` (default ../shared/data beside the repository), every
job on the CPU with one thread. Then prints, per data set, one row per method (both SA operating points): RMSE/sigma_y
of the deterministic backbone, native pooled-PIT W1 with the W1 of as many calibrated PIT values (its floor), the native
PI-95 test coverage, the PIT mean's z and the point prediction's bias (mean of (y - point)/sigma_y over the test rows of
all splits, with its z: a cell's PIT bias named by its cause; the line of a cell beyond 2x says so where |z| > 3),
beside the paper's RMSE/sigma_y and W1 (config/paper_results.yaml; the paper pools 20 splits, 5 for protein), SA's
calibrated nu per split ("(boundary)" where the calibration ended at nu = 1 wanting more dispersion, as the workflow's
tables mark it), the ensemble CRPS (mean over the same splits, target units) beside the paper's appendix Table
tab:uci_crps (the paper's own statistic for it, 20 splits), and the data set's CPU-hours: the wall-clock seconds of its
jobs (every job runs one thread; on a shared machine wall time exceeds CPU time) and Snakemake's ``cpu_time`` of them
(results/benchmarks/). Each data set's lowest split not yet evaluated goes first (Snakemake's ``--prioritize``, fixed
when the run starts: the splits after it share the rest), so a stopped run holds that split whole. ``--report-only``
skips the run and reads WORKDIR as it is; ``--partial`` reports from the metrics.json files present (the runs evaluated
so far) without running anything; with either, several workdirs (each data set in one) make one report. A figure
beside the report (``<out>_w1.png`` / ``.pdf``) puts every method's W1 against the paper's
(``uci_figures.paper_w1_figure``).
``--by-split`` adds, per data set, each split's native W1 and PI-95 coverage and the pooled W1 without each
split (its ratio to the paper): whether one split makes a cell, or every split does.
``--keep RECORDS`` copies what the report read (each run's metrics.json and meta.json, each job's benchmark record)
into ``RECORDS/<dataset>/`` (file by file: other runs' records stay), one folder a data set laid out like a workdir's
``results/``, which ``--partial`` reads as a workdir: the repository's ``benchmarks/records/uci_paper/`` holds those of
the runs that docs/measurements.md reports, so its tables can be remade (``uci_paper_slice.py
benchmarks/records/uci_paper/*/ --partial``) on a machine without the runs' many CPU-hours.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from stochattn.experiments.paper_comparison import paper_cells
from stochattn.experiments.uci_tables import uci_crps_table, uci_master_table, uci_slice_comparison
from stochattn.io import atomic_path, load_json
from stochattn.metrics import PIT_BIAS_Z
from stochattn.report import load_runs, method_label
from stochattn.resources import dataset_of, read_benchmarks

REPO = Path(__file__).resolve().parents[1]
ALL = ["yacht", "energy", "concrete", "wine", "kin8nm", "power", "naval", "protein"]


def slice_config(args: argparse.Namespace) -> dict:
    fewer = dict(item.split("=") for item in args.fewer)
    return {
        "datasets": args.datasets,
        "methods": args.methods,
        "splits": args.splits,
        "data": {"mirrors": [str(Path(args.mirror).resolve())]},
        "require_gpu": False,
        "cluster": {"gpus_per_job": 0, "gpu_threads": 1},
        "progress": False,
        "ett": {"enabled": False},
        "era5": {"enabled": False},
        "dataset_overrides": {d: {"splits": int(k)} for d, k in fewer.items() if d in args.datasets},
    }


def first_open_splits(work: Path, cfg: dict) -> list[str]:
    """Per data set of the slice config ``cfg``, the evaluation target of its lowest split not yet evaluated (its first
    method's metrics.json under ``work``): given to Snakemake's ``--prioritize``, a run stopped after it holds that
    split whole, with every method, rather than parts of every split (what ``--partial`` and ``--keep`` can use); each
    restart moves on to the next open split."""
    targets = []
    for dataset in cfg["datasets"]:
        n = int(cfg["dataset_overrides"].get(dataset, {}).get("splits", cfg["splits"]))
        for split in range(n):
            target = f"results/uci/{dataset}/split{split}/{cfg['methods'][0]}/metrics.json"
            if not (work / target).is_file():
                targets.append(target)
                break
    return targets


def results_dir(work: Path) -> Path:
    """A workdir's ``results/``, or ``work`` itself where it is a records folder (``--keep``): one without it."""
    return work / "results" if (work / "results").is_dir() else work


def keep_records(work: Path, datasets: list[str], dest: Path) -> list[Path]:
    """Copy each data set's metrics.json and meta.json files and its benchmark records from the workdir ``work`` into
    ``dest/<dataset>/`` (laid out like ``results/``), each file replaced atomically; the records of other runs already
    there stay, so runs made in several workdirs (sessions, machines) add up. Returns the folders written."""
    src = results_dir(work)
    written = []
    for ds in datasets:
        files = [p for name in ("metrics.json", "meta.json") for p in (src / "uci" / ds).glob(f"split*/*/{name}")]
        records = (src / "benchmarks").rglob("*.tsv")
        files += [p for p in records if dataset_of(p.relative_to(src).with_suffix("").parts) == ds]
        for path in files:
            out = dest / ds / path.relative_to(src)
            if out.resolve() == path.resolve():
                continue  # keeping a records folder into itself
            out.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(out) as tmp:
                shutil.copyfile(path, tmp)
        if files:
            written.append(dest / ds)
    return written


def fmt(v: float, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def sa_nus(work: Path, table) -> dict:
    """{(data set, method): "2 / 2 / 3 (boundary on 1 of 3)"}: the calibrated nu of each split's SA run (meta.json)."""
    out = {}
    sa_rows = table[table["method"].isin(["sa", "sa_match"])]
    for ds, method in zip(sa_rows["dataset"], sa_rows["method"]):
        metas = [load_json(p) for p in sorted((results_dir(work) / "uci" / ds).glob(f"split*/{method}/meta.json"))]
        if not metas:
            continue
        at = sum(bool(m.get("at_boundary")) for m in metas)
        mark = "" if not at else " (boundary)" if at == len(metas) else f" (boundary on {at} of {len(metas)})"
        out[ds, method] = " / ".join(f"{m['nu']:g}" for m in metas) + mark
    return out


def markdown(table, hours: dict, nus: dict) -> str:
    out = []
    for ds in dict.fromkeys(table["dataset"]):
        d = table[table["dataset"] == ds]
        wall, cpu = hours.get(ds, (math.nan, math.nan))
        sa = d[d["method"] == "sa"].iloc[0] if (d["method"] == "sa").any() else None
        acc = "" if sa is None else (f"; RMSE/σ_y {fmt(sa['rmse_over_sigma'])} (paper "
                                     f"{fmt(sa['paper_rmse_over_sigma'])})")  # fmt: skip
        out.append(
            f"\n**{ds}** ({int(d['n'].max())} splits{acc}; {fmt(wall, '.2f')} CPU-hours wall, "
            f"{fmt(cpu, '.2f')} by cpu_time)\n"
        )
        out.append("| method | splits | native W1 (floor) | paper W1 | ratio | PI-95 coverage | PIT-mean z | "
                   "point bias (z) | SA's nu | CRPS | paper CRPS |")  # fmt: skip
        out.append("|:--|--:|--:|--:|--:|--:|--:|--:|:--|--:|--:|")
        for _, r in d.iterrows():
            out.append(
                f"| {method_label(r['method'])} | {int(r['n'])} | {fmt(r['w1'])} ({fmt(r['w1_floor'])}) | "
                f"{fmt(r['paper_w1'])} | "
                f"{fmt(r['ratio'], '.2f')} | {fmt(r['coverage_95'], '.2f')} | {fmt(r['pit_mean_z'], '+.1f')} | "
                f"{point_bias(r)} | {nus.get((ds, r['method']), '')} | {fmt(r['crps'], '.4g')} | "
                f"{fmt(r['paper_crps'], '.4g')} |"
            )
    return "\n".join(out) + "\n"


def point_bias(r) -> str:
    """The point prediction's bias as "+0.046 (+9.9)": its mean residual in sigma_y units and its z (blank for records
    without)."""
    return "" if not math.isfinite(r["point_bias"]) else f"{r['point_bias']:+.3f} ({r['point_bias_z']:+.1f})"


def beyond(table) -> str:
    """One line per cell whose W1 is beyond 2x the paper's and beyond 1.5x its floor (a paper value below our floor
    cannot be reached by a calibrated method on as many test rows), and the count of cells within."""
    known = table["within"].notna()
    out_mask = known & ~table["within"].fillna(True).astype(bool)
    lines = [f"\n**Against the paper**: {int((known & ~out_mask).sum())} of {int(known.sum())} cells within 2x of the "
             "paper's W1 or 1.5x our floor; beyond:"]  # fmt: skip
    for _, r in table[out_mask].iterrows():
        side = "worse" if r["w1"] > r["paper_w1"] else "better"
        lines.append(f"- {r['dataset']} {method_label(r['method'])} ({side}): {fmt(r['w1'])} against "
                     f"{fmt(r['paper_w1'])} ({fmt(r['ratio'], '.2f')}x; floor {fmt(r['w1_floor'])}), "
                     f"PI-95 {fmt(r['coverage_95'], '.2f')}"
                     + (f"; its point is biased: mean residual {r['point_bias']:+.3f} σ_y, z {r['point_bias_z']:+.1f}"
                        if abs(r["point_bias_z"]) > PIT_BIAS_Z else ""))  # fmt: skip
    if not out_mask.any():
        lines.append("- none")
    return "\n".join(lines) + "\n"


def by_split(work: Path, datasets: list[str], cells) -> str:
    """Per data set, one row per method: each split's native test W1 / PI-95 coverage, then the pooled W1 (ratio to
    the paper's) over every split but one; from the metrics.json files present, through the workflow's own tables."""
    out = []
    runs = results_dir(work) / "uci"
    for ds in datasets:
        files = sorted((runs / ds).glob("split*/*/metrics.json"))
        loaded = load_runs(files, progress=False) if files else None
        splits = [] if loaded is None else sorted(int(s) for s in loaded["split"].unique())
        if len(splits) < 2:
            continue

        def comparison(keep):
            return uci_slice_comparison(uci_master_table(loaded[loaded["split"].isin(keep)]), cells)

        single = {s: comparison({s}) for s in splits}
        without = {s: comparison(set(splits) - {s}) for s in splits}
        out.append(f"\n**{ds}** by split: native W1 / PI-95 of each split; pooled W1 (paper ratio) without one\n")
        out.append("| method | " + " | ".join(f"split {s}" for s in splits) + " | "
                   + " | ".join(f"without {s}" for s in splits) + " |")  # fmt: skip
        out.append("|:--|" + "--:|" * (2 * len(splits)))
        methods = list(dict.fromkeys(m for s in splits for m in without[s]["method"]))
        for method in methods:
            cells_ = []
            for s in splits:
                r = single[s][single[s]["method"] == method]
                cells_.append("-" if r.empty else f"{fmt(r['w1'].iloc[0])} / {fmt(r['coverage_95'].iloc[0], '.2f')}")
            for s in splits:
                r = without[s][without[s]["method"] == method]
                cells_.append("-" if r.empty else f"{fmt(r['w1'].iloc[0])} ({fmt(r['ratio'].iloc[0], '.2f')})")
            out.append(f"| {method_label(method)} | " + " | ".join(cells_) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path, nargs="+",
                    help="one to run; with --report-only or --partial several, each with its data sets")  # fmt: skip
    ap.add_argument("--datasets", nargs="+", default=ALL)
    ap.add_argument("--methods", nargs="+", default=["sa", "mc_dropout", "swag", "multiswag", "ivon", "hsa"])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--fewer", nargs="*", default=["protein=1", "naval=1"], help="DATASET=SPLITS")
    ap.add_argument("--mirror", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--configfile", nargs="*", default=[], help="more config files merged over the slice's")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--partial", action="store_true",
                    help="report-only, from every metrics.json of --datasets present (a run still going or "
                         "stopped) instead of the workflow's master table; the splits column says what each row "
                         "pools")  # fmt: skip
    ap.add_argument(
        "--by-split",
        action="store_true",
        help="also each split's W1 and the pooled W1 without each split (from the metrics.json files)",
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, metavar="RECORDS",
                    help="copy the runs' metrics.json, meta.json and benchmark records into RECORDS/<dataset>/ "
                         "(benchmarks/records/uci_paper: what docs/measurements.md reports)")  # fmt: skip
    args = ap.parse_args()
    works = [w.resolve() for w in args.workdir]
    if len(works) > 1 and not (args.report_only or args.partial):
        ap.error("several workdirs only with --report-only or --partial (a run has one)")
    if not (args.report_only or args.partial):
        work = works[0]
        work.mkdir(parents=True, exist_ok=True)
        cfg = slice_config(args)
        (work / "slice.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        first = first_open_splits(work, cfg)
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
               "--configfile", str(REPO / "config" / "config.yaml"), str(work / "slice.yaml"),
               *map(str, args.configfile), *(["--prioritize", *first] if first else []), "--cores", str(args.cores),
               "--max-jobs-per-timespan", "100/10s", "results/tables/uci_master.md"]  # fmt: skip
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, env=env, cwd=REPO, check=True)
    import pandas as pd

    from stochattn.experiments.uci_figures import paper_w1_figure

    masters, home, hours = [], {}, {}
    for work in works:
        uci = results_dir(work) / "uci"
        files = [p for ds in args.datasets for p in sorted((uci / ds).glob("split*/*/metrics.json"))]
        runs = load_runs(files, progress=False) if files else None
        if args.partial:
            master = uci_master_table(runs) if runs is not None else None
        else:
            master = pd.read_csv(work / "results" / "tables" / "uci_master.csv")
            master = master[master["dataset"].isin(args.datasets)]
        if master is None or master.empty:
            continue
        if runs is not None and not args.partial:  # the CRPS of the runs the workflow's table pools: splits 0..n-1
            pooled = master.groupby(["dataset", "method"])["n"].max()
            runs = runs[[pooled.get((d, m), 0) > k for d, m, k in zip(runs["dataset"], runs["method"], runs["split"])]]
        if runs is not None and len(runs):  # with --partial, the same metrics.json files as the master table
            crps = uci_crps_table(runs)
            master = pd.concat([master, crps[crps["metric"] == "crps"]], ignore_index=True)
        for ds in dict.fromkeys(master["dataset"]):
            if ds in home:
                raise SystemExit(f"{ds} is in both {home[ds]} and {work}: give each data set's workdir once")
            home[ds] = work
        masters.append(master)
        for rec in read_benchmarks(results_dir(work) / "benchmarks"):
            if home.get(rec["dataset"]) == work:
                wall, cpu = hours.get(rec["dataset"], (0.0, 0.0))
                hours[rec["dataset"]] = (wall + rec["seconds"] / 3600, cpu + (rec["cpu_seconds"] or 0.0) / 3600)
    if not masters:
        raise SystemExit(f"no results of {', '.join(args.datasets)} in {', '.join(map(str, works))}")
    cells = paper_cells(REPO / "config" / "paper_results.yaml")
    table = uci_slice_comparison(pd.concat(masters, ignore_index=True), cells)
    nus = {key: v for work in set(home.values()) for key, v in sa_nus(work, table).items() if home[key[0]] == work}
    text = markdown(table, hours, nus) + beyond(table)
    if args.by_split:
        text += "".join(by_split(home[ds], [ds], cells) for ds in dict.fromkeys(table["dataset"]))
    print(text)
    out = args.out or works[0] / "uci_paper_slice.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    table.to_csv(out.with_suffix(".csv"), index=False)
    figure = paper_w1_figure(table, out.with_name(out.stem + "_w1"))
    print("wrote", out, out.with_suffix(".csv"), *figure)
    if args.keep is not None:
        for ds in dict.fromkeys(table["dataset"]):
            print("kept", *keep_records(home[ds], [ds], args.keep))


if __name__ == "__main__":
    main()
