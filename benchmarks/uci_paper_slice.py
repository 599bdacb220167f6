"""The paper configuration's UCI slice beside the paper, in one command (issue 46).

    python benchmarks/uci_paper_slice.py WORKDIR [--datasets ...] [--splits 3] [--fewer protein=1 naval=1]
        [--methods sa mc_dropout swag multiswag ivon hsa] [--cores 2] [--configfile extra.yaml ...] [--report-only]
        [--partial] [--by-split] [--out OUT.md] [--compare RECORDS] [--keep RECORDS] [--from-split K] [--unlock]

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
(results/benchmarks/), of the splits reported only, with the training that a resumed job's earlier attempts saved
(``stochattn.resources.read_benchmarks``). Each data set's lowest split not yet evaluated goes first
(Snakemake's ``--prioritize``, fixed when the run starts: the splits after it share the rest), so a stopped run holds
that split whole (its jobs in no order among themselves: SA's calibration may wait behind a baseline's training). A
split is evaluated once every listed method has run on it; to score SA first, stop the run (SIGTERM the jobs' processes,
not Snakemake: each saves its state), run again with ``--methods sa`` (it evaluates SA alone), then with the full list,
which resumes the saved trainings. ``--report-only`` skips the run and reads WORKDIR as it is; ``--partial`` reports
from the metrics.json files present (the runs evaluated so far) without running anything; with either, several workdirs
(each data set in one) make one report. A figure beside the report (``<out>_w1.png`` / ``.pdf``) puts every method's W1
against the paper's (``uci_figures.paper_w1_figure``). ``--out`` defaults to ``WORKDIR/uci_paper_slice.md`` for one
workdir outside the repository, else to ``benchmarks/out/uci_paper_slice.md`` (ignored by git: the kept records stay as
they were kept). ``--by-split`` adds, per data set, each split's native W1 and PI-95 coverage and the pooled W1 without
each split (its ratio to the paper): whether one split makes a cell, or every split does. ``--keep RECORDS`` copies the
reported data sets' records from the workdir (every run's metrics.json and meta.json, every method's whatever
``--methods`` says, and each job's benchmark record: run ``--compare`` first to see what a keep replaces) into
``RECORDS/<dataset>/`` (file by file: other runs' records stay), one folder a data set laid out like a workdir's
``results/``, which ``--partial`` reads as a workdir: the repository's ``benchmarks/records/uci_paper/`` holds those of
the runs that docs/measurements.md reports, so its tables can be remade (``uci_paper_slice.py
benchmarks/records/uci_paper/*/ --partial``) on a machine without the runs' many CPU-hours; the documentation's page on
the kept records (``docs/gen_pages.py``) is remade from them at every build. ``--compare RECORDS`` checks a rerun
against kept records before ``--keep`` replaces them (``<out>_vs_records.md``): run by run, whether the job wrote the
same bytes (the SHA-256 of its samples and model), with the same code hash, and which values differ
(``uci_slice_report.compare_records``). The report itself is the library's
(:mod:`stochattn.experiments.uci_slice_report`); this script runs the workflow and writes it. ``--from-split K`` runs
only splits K.. of the ``--splits`` (their evaluations, not the master table, which needs every split), to add splits
to kept records in chunks: ``--splits 6 --from-split 3``, then ``--keep`` beside the kept splits 0-2, and the report
of the records (``--partial``) pools all six; its own report is ``--partial``'s, of the splits it ran. A run that was
killed (the machine, a time limit) leaves the workdir locked: ``--unlock`` removes the lock (Snakemake's ``--unlock``)
before the run, which goes on where the killed one stopped."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

from stochattn.experiments import uci_slice_report
from stochattn.io import atomic_path

REPO = Path(__file__).resolve().parents[1]
ALL = ["yacht", "energy", "concrete", "wine", "kin8nm", "power", "naval", "protein"]


def default_out(works: list[Path]) -> Path:
    """Where the report goes without ``--out``: beside a single workdir outside the repository, else into the
    repository's ignored ``benchmarks/out/`` (never into a folder of kept records)."""
    if len(works) == 1 and not works[0].resolve().is_relative_to(REPO):
        return works[0] / "uci_paper_slice.md"
    return REPO / "benchmarks" / "out" / "uci_paper_slice.md"


def slice_config(args: argparse.Namespace) -> dict:
    fewer = dict(item.split("=") for item in args.fewer)
    return {
        "datasets": args.datasets,
        "methods": args.methods,
        "splits": args.splits,
        "data": {"mirrors": [str(Path(args.mirror).resolve())]},
        "require_gpu": False,
        "cluster": {"gpus_per_job": 0, "gpu_threads": 1},
        # each job's log gets a line per 10 % of its epochs or passes, at least every 30 s (stochattn.progress): a
        # network of naval or protein trains for hours, and its log says how far it is (epoch, validation RMSE)
        "progress": True,
        "ett": {"enabled": False},
        "era5": {"enabled": False},
        "dataset_overrides": {d: {"splits": int(k)} for d, k in fewer.items() if d in args.datasets},
    }


def split_target(cfg: dict, dataset: str, split: int) -> str:
    """The evaluation of one split (its first method's metrics.json: the evaluate rule scores every method at once)."""
    return f"results/uci/{dataset}/split{split}/{cfg['methods'][0]}/metrics.json"


def splits_of(cfg: dict, dataset: str, from_split: int = 0) -> range:
    """The Gal splits of ``dataset`` that the slice config ``cfg`` runs, from ``from_split`` on."""
    return range(from_split, int(cfg["dataset_overrides"].get(dataset, {}).get("splits", cfg["splits"])))


def run_targets(cfg: dict, from_split: int = 0) -> list[str]:
    """What the run asks Snakemake for: the master table (every split of every data set), or from ``from_split`` on
    only those splits' evaluations (the splits before it kept elsewhere: ``--keep`` adds the new ones to them)."""
    if from_split == 0:
        return ["results/tables/uci_master.md"]
    return [split_target(cfg, ds, k) for ds in cfg["datasets"] for k in splits_of(cfg, ds, from_split)]


def first_open_splits(work: Path, cfg: dict, from_split: int = 0) -> list[str]:
    """Per data set of the slice config ``cfg``, the evaluation target of its lowest split (from ``from_split`` on) not
    yet evaluated under ``work``: given to Snakemake's ``--prioritize``, a run stopped after it holds that split whole,
    with every method, rather than parts of every split (what ``--partial`` and ``--keep`` can use); each restart moves
    on to the next open split."""
    targets = []
    for dataset in cfg["datasets"]:
        target = next((t for k in splits_of(cfg, dataset, from_split)
                       if not (work / (t := split_target(cfg, dataset, k))).is_file()), None)  # fmt: skip
        targets += [target] if target else []
    return targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path, nargs="+",
                    help="one to run; with --report-only or --partial several, each with its data sets")  # fmt: skip
    ap.add_argument("--datasets", nargs="+", default=ALL)
    ap.add_argument("--methods", nargs="+", default=["sa", "mc_dropout", "swag", "multiswag", "ivon", "hsa"])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--from-split", type=int, default=0, metavar="K",
                    help="run only splits K.. of the --splits (the earlier ones kept: --keep adds these to them); "
                         "the report is then --partial's, of the splits run here")  # fmt: skip
    ap.add_argument("--fewer", nargs="*", default=["protein=1", "naval=1"], help="DATASET=SPLITS")
    ap.add_argument("--mirror", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--configfile", nargs="*", default=[], help="more config files merged over the slice's")
    ap.add_argument("--unlock", action="store_true",
                    help="first remove the lock that a killed run left on the workdir (Snakemake's --unlock), "
                         "then run: its unfinished jobs rerun, their trainings resume from saved state")  # fmt: skip
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
    ap.add_argument("--compare", type=Path, default=None, metavar="RECORDS",
                    help="compare the runs with kept records (before --keep replaces them): the same outputs' "
                         "SHA-256, code hash and values, run by run")  # fmt: skip
    ap.add_argument("--keep", type=Path, default=None, metavar="RECORDS",
                    help="copy the runs' metrics.json, meta.json and benchmark records into RECORDS/<dataset>/ "
                         "(benchmarks/records/uci_paper: what docs/measurements.md reports)")  # fmt: skip
    args = ap.parse_args()
    works = [w.resolve() for w in args.workdir]
    cfg = slice_config(args)
    short = [f"{ds} ({len(splits_of(cfg, ds))})" for ds in args.datasets if not splits_of(cfg, ds, args.from_split)]
    if args.from_split < 0 or short:
        ap.error(f"--from-split {args.from_split} leaves no split to run of: {', '.join(short or args.datasets)} "
                 "(--splits, --fewer)")  # fmt: skip
    if len(works) > 1 and not (args.report_only or args.partial):
        ap.error("several workdirs only with --report-only or --partial (a run has one)")
    if not (args.report_only or args.partial):
        work = works[0]
        work.mkdir(parents=True, exist_ok=True)
        (work / "slice.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        first = first_open_splits(work, cfg, args.from_split)
        workflow = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
                    "--configfile", str(REPO / "config" / "config.yaml"), str(work / "slice.yaml"),
                    *map(str, args.configfile)]  # fmt: skip
        cmd = [*workflow, *(["--prioritize", *first] if first else []), "--cores", str(args.cores),
               "--max-jobs-per-timespan", "100/10s", *run_targets(cfg, args.from_split)]  # fmt: skip
        for step in ([[*workflow, "--unlock"]] if args.unlock else []) + [cmd]:
            print(" ".join(step), flush=True)
            if (code := subprocess.run(step, env=env, cwd=REPO).returncode) != 0:
                raise SystemExit(f"the workflow stopped (exit {code}): Snakemake's lines above say why. A run that "
                                 "was killed leaves the workdir locked ('Directory cannot be locked'): the same "
                                 "command with --unlock goes on where it stopped")  # fmt: skip
    from stochattn.experiments.uci_figures import paper_w1_figure

    try:
        report = uci_slice_report.build(works, args.datasets, REPO / "config" / "paper_results.yaml",
                                        partial=args.partial or args.from_split > 0,
                                        splits_by_split=args.by_split)  # fmt: skip
    except ValueError as err:
        raise SystemExit(str(err)) from None
    table, text = report.table, report.text
    print(text)
    out = args.out or default_out(works)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(text)
    with atomic_path(out.with_suffix(".csv")) as tmp:
        table.to_csv(tmp, index=False)
    figure = paper_w1_figure(table, out.with_name(out.stem + "_w1"))
    print("wrote", out, out.with_suffix(".csv"), *figure)
    if args.compare is not None:
        texts = []
        for work in dict.fromkeys(report.homes.values()):
            datasets = [ds for ds, home in report.homes.items() if home == work]
            try:
                texts.append(f"\n{work} against {args.compare}:\n\n" + uci_slice_report.compare_markdown(
                    uci_slice_report.compare_records(work, args.compare, datasets)))  # fmt: skip
            except ValueError as err:
                texts.append(f"\n{err}\n")
        print(*texts, sep="")
        with atomic_path(out.with_name(out.stem + "_vs_records.md")) as tmp:
            Path(tmp).write_text("".join(texts))
        print("wrote", out.with_name(out.stem + "_vs_records.md"))
    if args.keep is not None:
        for ds in dict.fromkeys(table["dataset"]):
            print("kept", *uci_slice_report.keep_records(report.homes[ds], [ds], args.keep))


if __name__ == "__main__":
    main()
