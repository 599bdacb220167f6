"""The paper configuration's UCI slice beside the paper: the report of ``benchmarks/uci_paper_slice.py`` and of the
documentation's page on the kept records, read from runs' workdirs or from records folders laid out like them.

    build          workdirs or records folders -> SliceReport (markdown text, comparison frame, each data set's folder)
    keep_records   a workdir's metrics.json / meta.json files and benchmark records -> RECORDS/<dataset>/
    record_origin  per data set: the splits and methods its records hold, their commits and devices
    compare_records  a rerun against kept records: the same outputs (SHA-256), code and values, run by run

Per data set, one row per method (both SA operating points): RMSE/sigma_y of the deterministic backbone, native
pooled-PIT W1 with its floor (the W1 of as many calibrated PIT values), PI-95 coverage, the PIT mean's z, the point
prediction's bias, SA's calibrated nu per split, the ensemble CRPS, each beside the paper's value
(``config/paper_results.yaml``; the paper pools 20 splits, 5 for protein), and the data set's CPU-hours from
Snakemake's benchmark records; then every cell beyond 2x of the paper's W1 and 1.5x our floor.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stochattn.experiments.paper_comparison import paper_cells
from stochattn.experiments.uci_tables import uci_crps_table, uci_master_table, uci_slice_comparison
from stochattn.extras import requires
from stochattn.io import atomic_path, load_json
from stochattn.metrics import PIT_BIAS_Z
from stochattn.report import load_runs, method_label
from stochattn.resources import ATTEMPTS_SUFFIX, dataset_of, read_benchmarks

with requires("workflow"):
    import pandas as pd

__all__ = ["SliceReport", "build", "compare_records", "dataset_hours", "keep_records", "record_origin", "results_dir"]


@dataclass
class SliceReport:
    """``text``: the markdown report; ``table``: :func:`~stochattn.experiments.uci_tables.uci_slice_comparison`'s
    frame (one row per data set and method, CRPS included); ``homes``: each data set's folder."""

    text: str
    table: pd.DataFrame
    homes: dict[str, Path]


def results_dir(work: Path) -> Path:
    """A workdir's ``results/``, or ``work`` itself where it is a records folder (:func:`keep_records`): one without
    it."""
    work = Path(work)
    return work / "results" if (work / "results").is_dir() else work


def keep_records(work: Path, datasets: Sequence[str], dest: Path) -> list[Path]:
    """Copy each data set's metrics.json and meta.json files and its benchmark records from the workdir ``work`` into
    ``dest/<dataset>/`` (laid out like ``results/``), each file replaced atomically; the records of other runs already
    there stay, so runs made in several workdirs (sessions, machines) add up. A benchmark record goes with the record
    of its job's earlier attempts (``<job>.attempts.json``, :func:`stochattn.resources.read_benchmarks`), or replaces
    one kept for an earlier run of the job without. Returns the folders written."""
    src = results_dir(work)
    written = []
    for ds in datasets:
        files = [p for name in ("metrics.json", "meta.json") for p in (src / "uci" / ds).glob(f"split*/*/{name}")]
        records = [p for p in (src / "benchmarks").rglob("*.tsv")
                   if dataset_of(p.relative_to(src).with_suffix("").parts) == ds]  # fmt: skip
        files += records
        for path in files:
            out = Path(dest) / ds / path.relative_to(src)
            if out.resolve() == path.resolve():
                continue  # keeping a records folder into itself
            out.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(out) as tmp:
                shutil.copyfile(path, tmp)
        for path in records:
            kept = Path(dest) / ds / path.relative_to(src)
            attempts, kept = (p.with_name(p.stem + ATTEMPTS_SUFFIX) for p in (path, kept))
            if attempts.resolve() == kept.resolve():
                continue
            if attempts.is_file():
                with atomic_path(kept) as tmp:
                    shutil.copyfile(attempts, tmp)
            else:
                kept.unlink(missing_ok=True)
        if files:
            written.append(Path(dest) / ds)
    return written


def fmt(v: float | None, spec: str = ".3f") -> str:
    """``v`` formatted, ``-`` for None or NaN."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def sa_nus(work: Path, table: pd.DataFrame) -> dict:
    """{(data set, method): "2 / 2 / 3 (boundary on 1 of 3)"}: the calibrated nu (meta.json) of each split's SA run
    that the table pools (those evaluated: with a metrics.json), in split order (split 10 after split 9)."""
    out = {}
    sa_rows = table[table["method"].isin(["sa", "sa_match"])]
    for ds, method in zip(sa_rows["dataset"], sa_rows["method"]):
        runs = sorted((results_dir(work) / "uci" / ds).glob(f"split*/{method}/metrics.json"),
                      key=lambda p: int(p.parent.parent.name.removeprefix("split")))  # fmt: skip
        metas = [load_json(p.with_name("meta.json")) for p in runs if p.with_name("meta.json").is_file()]
        if not metas:
            continue
        at = sum(bool(m.get("at_boundary")) for m in metas)
        mark = "" if not at else " (boundary)" if at == len(metas) else f" (boundary on {at} of {len(metas)})"
        out[ds, method] = " / ".join(f"{m['nu']:g}" for m in metas) + mark
    return out


def point_bias(r) -> str:
    """The point prediction's bias as "+0.046 (+9.9)": its mean residual in sigma_y units and its z (blank for records
    without)."""
    return "" if not math.isfinite(r["point_bias"]) else f"{r['point_bias']:+.3f} ({r['point_bias_z']:+.1f})"


def markdown(table: pd.DataFrame, hours: dict, nus: dict) -> str:
    """One table per data set: a row per method (:func:`build`'s columns), its header with the backbone's RMSE/sigma_y
    and the data set's CPU-hours (``hours``: data set -> (wall, cpu_time))."""
    out = []
    for ds in dict.fromkeys(table["dataset"]):
        d = table[table["dataset"] == ds]
        wall, cpu = hours.get(ds, (math.nan, math.nan))
        sa = d[d["method"] == "sa"].iloc[0] if (d["method"] == "sa").any() else None
        acc = "" if sa is None else (f"; RMSE/σ_y {fmt(sa['rmse_over_sigma'])} (paper "
                                     f"{fmt(sa['paper_rmse_over_sigma'])})")  # fmt: skip
        n = int(d["n"].max())
        out.append(f"\n**{ds}** ({n} split{'s' * (n != 1)}{acc}; {fmt(wall, '.2f')} CPU-hours wall, "
                   f"{fmt(cpu, '.2f')} by cpu_time)\n")  # fmt: skip
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


def beyond(table: pd.DataFrame) -> str:
    """One line per cell whose W1 is beyond 2x the paper's and beyond 1.5x its floor (a paper value below our floor
    cannot be reached by a calibrated method on as many test rows), and the count of cells within."""
    known = table["within"].notna()
    out_mask = known & ~table["within"].fillna(True).astype(bool)
    # the header's blank line makes the lines below a Markdown list (the documentation's records page)
    lines = [f"\n**Against the paper**: {int((known & ~out_mask).sum())} of {int(known.sum())} cells within 2x of the "
             "paper's W1 or 1.5x our floor; beyond:\n"]  # fmt: skip
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


def split_comparisons(work: Path, dataset: str, cells: pd.DataFrame) -> tuple[list[int], dict, dict]:
    """``(splits, single, without)``: the splits of ``dataset`` whose metrics.json files ``work`` holds, and
    :func:`uci_slice_comparison` tables per split (``single[s]``: split s alone; ``without[s]``: every split but s),
    through the workflow's own tables. No splits where there are fewer than 2."""
    files = sorted((results_dir(work) / "uci" / dataset).glob("split*/*/metrics.json"))
    loaded = load_runs(files, progress=False) if files else None
    splits = [] if loaded is None else sorted(int(s) for s in loaded["split"].unique())
    if len(splits) < 2:
        return [], {}, {}

    def comparison(keep):
        return uci_slice_comparison(uci_master_table(loaded[loaded["split"].isin(keep)]), cells)

    return splits, {s: comparison({s}) for s in splits}, {s: comparison(set(splits) - {s}) for s in splits}


def within_only_pooled(table: pd.DataFrame, comparisons: Mapping[str, tuple]) -> str:
    """The cells within 2x (or 1.5x the floor) pooled while most of their splits, each read alone against the paper,
    are beyond: errors of opposite sign or unequal size that the pooled PIT averages out (a reader checking number
    for number should know); ``comparisons``: each data set's :func:`split_comparisons`. Empty where there are none."""
    lines = []
    for _, r in table[table["within"].fillna(False).astype(bool)].iterrows():
        splits, single, _ = comparisons[r["dataset"]]
        alone = [single[s][single[s]["method"] == r["method"]] for s in splits]
        alone = [a.iloc[0] for a in alone if not a.empty and pd.notna(a["within"].iloc[0])]
        beyond_alone = [a for a in alone if not bool(a["within"])]
        if len(alone) >= 2 and 2 * len(beyond_alone) > len(alone):
            lines.append(f"- {r['dataset']} {method_label(r['method'])}: pooled {fmt(r['w1'])} "
                         f"({fmt(r['ratio'], '.2f')}x), but {len(beyond_alone)} of {len(alone)} splits beyond on their "
                         f"own (W1 {' / '.join(fmt(a['w1']) for a in alone)})")  # fmt: skip
    if not lines:
        return ""
    head = "\n**Within only pooled** (most splits, each read alone against the paper, beyond 2x either way):\n\n"
    return head + "\n".join(lines) + "\n"


def by_split(
    work: Path, datasets: Sequence[str], cells: pd.DataFrame, comparisons: Mapping[str, tuple] | None = None
) -> str:
    """Per data set, one row per method: each split's native test W1 / PI-95 coverage, then the pooled W1 (ratio to
    the paper's) over every split but one; from the metrics.json files present, through the workflow's own tables
    (or ``comparisons``, each data set's :func:`split_comparisons` made already)."""
    out = []
    for ds in datasets:
        splits, single, without = (comparisons or {}).get(ds) or split_comparisons(work, ds, cells)
        if not splits:
            continue
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


def dataset_hours(records: Sequence[dict], splits: dict[str, set[int] | None]) -> dict[str, tuple[float, float]]:
    """Data set -> (wall-clock hours, ``cpu_time`` hours) of its benchmark ``records``
    (:func:`stochattn.resources.read_benchmarks`) whose split the report holds (``splits``: data set -> the split
    numbers reported, None for all): the jobs of a split not yet evaluated (its first candidates of a run still going)
    are not the reported splits' cost."""
    hours: dict[str, tuple[float, float]] = {}
    for rec in records:
        ds = rec["dataset"]
        if ds not in splits or (splits[ds] is not None and rec["split"] not in splits[ds]):
            continue
        wall, cpu = hours.get(ds, (0.0, 0.0))
        hours[ds] = (wall + rec["seconds"] / 3600, cpu + (rec["cpu_seconds"] or 0.0) / 3600)
    return hours


def build(
    works: Sequence[Path],
    datasets: Sequence[str],
    paper_results: Path,
    *,
    partial: bool = True,
    splits_by_split: bool = False,
) -> SliceReport:
    """The report of ``datasets`` from the folders ``works`` (run workdirs or :func:`keep_records` folders; each data
    set in one of them). ``partial``: from every metrics.json present (a run still going or stopped, or records);
    else from each workdir's ``results/tables/uci_master.csv`` (a finished run), with the CRPS of the same splits.
    ``splits_by_split`` adds :func:`by_split`'s tables. Raises ValueError where no folder has results of
    ``datasets``, a data set is in two folders, or (not ``partial``) a workdir has no master table."""
    masters, homes, hours = [], {}, {}
    for work in map(Path, works):
        uci = results_dir(work) / "uci"
        files = [p for ds in datasets for p in sorted((uci / ds).glob("split*/*/metrics.json"))]
        runs = load_runs(files, progress=False) if files else None
        if partial:
            master = uci_master_table(runs) if runs is not None else None
        elif not (table := work / "results" / "tables" / "uci_master.csv").is_file():
            raise ValueError(f"{work} has no master table ({table.relative_to(work)}): its run has not finished; "
                             "--partial reports the splits evaluated so far")  # fmt: skip
        else:
            master = pd.read_csv(table)
            master = master[master["dataset"].isin(datasets)]
        if master is None or master.empty:
            continue
        if runs is not None and not partial:  # the CRPS of the runs the workflow's table pools: splits 0..n-1
            pooled = master.groupby(["dataset", "method"])["n"].max()
            runs = runs[[pooled.get((d, m), 0) > k for d, m, k in zip(runs["dataset"], runs["method"], runs["split"])]]
        if runs is not None and len(runs):  # with partial, the same metrics.json files as the master table
            crps = uci_crps_table(runs)
            master = pd.concat([master, crps[crps["metric"] == "crps"]], ignore_index=True)
        for ds in dict.fromkeys(master["dataset"]):
            if ds in homes:
                raise ValueError(f"{ds} is in both {homes[ds]} and {work}: give each data set's folder once")
            homes[ds] = work
        masters.append(master)
        reported = {} if runs is None else runs.groupby("dataset")["split"].agg(set).to_dict()
        mine = {ds: reported.get(ds) for ds, home in homes.items() if home == work}
        hours.update(dataset_hours(read_benchmarks(results_dir(work) / "benchmarks"), mine))
    if not masters:
        raise ValueError(f"no results of {', '.join(datasets)} in {', '.join(map(str, works))}")
    cells = paper_cells(paper_results)
    table = uci_slice_comparison(pd.concat(masters, ignore_index=True), cells)
    nus = {key: v for work in set(homes.values()) for key, v in sa_nus(work, table).items() if homes[key[0]] == work}
    # each data set's per-split tables once, for the within-only-pooled list and --by-split
    comparisons = {ds: split_comparisons(homes[ds], ds, cells) for ds in dict.fromkeys(table["dataset"])}
    text = markdown(table, hours, nus) + beyond(table) + within_only_pooled(table, comparisons)
    if splits_by_split:
        text += "".join(by_split(homes[ds], [ds], cells, comparisons) for ds in comparisons)
    return SliceReport(text, table, homes)


def record_origin(folder: Path, dataset: str) -> dict:
    """What a data set's records (or a run's workdir) hold: ``{"splits": {method: [k, ...]}, "commits": [sha, ...],
    "devices": [...]}`` from its meta.json files (the commit from the job's provenance: "unknown" in the records of jobs
    that ran before jobs recorded it; the device where the file names one)."""
    splits: dict[str, list[int]] = {}
    commits, devices = set(), set()
    for meta_path in sorted((results_dir(folder) / "uci" / dataset).glob("split*/*/meta.json")):
        method, split = meta_path.parent.name, int(meta_path.parent.parent.name.removeprefix("split"))
        meta = load_json(meta_path)
        if method != "backbone" and (meta_path.parent / "metrics.json").is_file():
            splits.setdefault(method, []).append(split)
        commits.add((meta.get("provenance") or {}).get("git_commit") or "unknown")
        device = meta.get("device")
        if isinstance(device, dict) and device.get("device"):
            devices.add(str(device["device"]))
    return {"splits": {m: sorted(v) for m, v in splits.items()}, "commits": sorted(commits), "devices": sorted(devices)}


# What a rerun may change without changing a result: run times, the job's provenance (commit, input files' digests:
# the JSON inputs hold run times), the package versions and the device description; the outputs' digests
# (``sha256``) are compared on their own.
_CONTEXT_KEYS = frozenset({"seconds", "provenance", "packages", "device", "sha256"})


def _values(obj, prefix: str = "") -> dict:
    """{dotted key: value} of a JSON document's leaves, without :data:`_CONTEXT_KEYS` at any depth."""
    if isinstance(obj, dict):
        items = ((k, v) for k, v in obj.items() if k not in _CONTEXT_KEYS)
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return {prefix: obj}
    out = {}
    for key, value in items:
        out.update(_values(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _run_values(run: Path) -> dict:
    """:func:`_values` of a run folder's meta.json and (where present) metrics.json, keyed "meta.*" / "metrics.*"."""
    docs = {name: run / f"{name}.json" for name in ("meta", "metrics")}
    return {
        f"{name}.{k}": v for name, path in docs.items() if path.is_file() for k, v in _values(load_json(path)).items()
    }


def _same(a, b) -> bool:
    """Equal JSON leaves, NaN equal to NaN (bool and int told apart)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def compare_records(work: Path, records: Path, datasets: Sequence[str]) -> pd.DataFrame:
    """A rerun (workdir ``work``) against kept records (``records/<dataset>/``, :func:`keep_records`): one row per run
    (data set, split, method; the backbone too) with a meta.json in both.

    Columns: ``outputs`` ("identical", "differ: samples.npz", "-" where the run records no digest): the SHA-256 of
    the files the job wrote (meta.json's ``sha256``: samples, model); ``code``: "same" or "differs" (the rule's code
    hash); ``cpu``: "same", "kept -> rerun" (e.g. "AVX2 -> AVX512": torch's CPU kernels differ, so the bits may; or
    another processor on the same kernels, :func:`_cpu_change`) or "-" where a record does not say
    (:func:`stochattn.provenance.cpu_info`; records kept before 2026-12-02);
    ``values``: how many of the leaves of meta.json and metrics.json (without run times, provenance, package
    versions and device: :data:`_CONTEXT_KEYS`) present in both are compared and how many differ; ``largest``: the
    differing number with the largest relative difference, as "key: kept -> rerun"; ``verdict``: "identical" (the
    same outputs and values), "same values" (the values equal, an output's bytes not), "last digits" (every differing
    value a number within :data:`LAST_DIGITS` of the kept one, relatively: a sum taken in another order) or "differs".
    Raises ValueError where no run is in both."""
    rows = []
    for ds in datasets:
        mine, kept = results_dir(work) / "uci" / ds, Path(records) / ds / "uci" / ds
        for kept_meta in sorted(kept.glob("split*/*/meta.json")):
            rel = kept_meta.relative_to(kept)
            if not (mine / rel).is_file():
                continue
            a_meta, b_meta = load_json(kept_meta), load_json(mine / rel)
            a_vals, b_vals = _run_values(kept_meta.parent), _run_values((mine / rel).parent)
            common = [k for k in a_vals if k in b_vals]
            differ = [k for k in common if not _same(a_vals[k], b_vals[k])]
            a_sha, b_sha = a_meta.get("sha256") or {}, b_meta.get("sha256") or {}
            files = [f for f in a_sha if f in b_sha]
            changed = [f for f in files if a_sha[f] != b_sha[f]]
            outputs = "-" if not files else "identical" if not changed else "differ: " + ", ".join(changed)
            code_a, code_b = (((m.get("provenance") or {}).get("code") or {}).get("sha256") for m in (a_meta, b_meta))
            code = "-" if not (code_a and code_b) else "same" if code_a == code_b else "differs"
            cpu = _cpu_change(a_meta.get("provenance") or {}, b_meta.get("provenance") or {})
            verdict = "identical" if not changed else "same values"
            if differ:
                near = all(_relative_difference(a_vals[k], b_vals[k]) <= LAST_DIGITS for k in differ)
                verdict = "last digits" if near else "differs"
            rows.append({"dataset": ds, "split": int(rel.parts[0].removeprefix("split")), "method": rel.parts[1],
                         "outputs": outputs, "code": code, "cpu": cpu,
                         "values": f"{len(differ)} of {len(common)} differ",
                         "largest": _largest(differ, a_vals, b_vals), "verdict": verdict})  # fmt: skip
    if not rows:
        raise ValueError(f"no run of {', '.join(datasets)} is both in {work} and in {records}")
    return pd.DataFrame(rows)


def _cpu_change(kept: dict, rerun: dict) -> str:
    """Two runs' processors from their provenance: "-" where either does not name its kernels' instruction set,
    "same" for the same processor and kernels, else what changed: "AVX2 -> AVX512", or "AMD EPYC -> Intel(R) Xeon(R)
    Processor (AVX512)" (the same kernels on another vendor's processor: the math libraries may take other code paths
    there: protein's split-0 backbone, trained on an AMD EPYC and on an Intel Xeon, both AVX512, had its best epoch at
    95 and at 82, docs/measurements.md#uci-paper-protein), or "AMD EPYC (family 25, ...) -> AMD EPYC (family 26, ...)
    (AVX512)" (one name, two generations: records that name ``cpu_model``, since 2026-12-06)."""
    cap_a, cap_b = kept.get("cpu_capability"), rerun.get("cpu_capability")
    if not (cap_a and cap_b):
        return "-"
    if cap_a != cap_b:
        return f"{cap_a} -> {cap_b}"
    name_a, name_b = kept.get("cpu"), rerun.get("cpu")
    model_a, model_b = kept.get("cpu_model"), rerun.get("cpu_model")
    if model_a and model_b and model_a != model_b:  # one name, another generation (VMs often name them alike)
        return f"{name_a} ({model_a}) -> {name_b} ({model_b}) ({cap_b})"
    return "same" if not (name_a and name_b) or name_a == name_b else f"{name_a} -> {name_b} ({cap_b})"


LAST_DIGITS = 1e-12  # relative difference of a value recomputed with its sums in another order


def _relative_difference(a, b) -> float:
    """``|a - b| / max(|a|, |b|)`` of two finite numbers; inf for any other pair (a string, a NaN, a bool)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (a, b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def _largest(keys: Sequence[str], kept: dict, rerun: dict) -> str:
    """ "key: kept -> rerun" for the differing leaf with the largest relative difference (a non-number first)."""
    if not keys:
        return ""
    key = max(keys, key=lambda k: _relative_difference(kept[k], rerun[k]))
    return f"{key}: {kept[key]!r} -> {rerun[key]!r}"


def compare_markdown(frame: pd.DataFrame) -> str:
    """:func:`compare_records`' frame as a markdown table and a count of its verdicts."""
    cols = ["dataset", "split", "method", "verdict", "outputs", "code", "cpu", "values", "largest"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(":--" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for _, r in frame.iterrows()]
    counts = frame["verdict"].value_counts()
    summary = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("identical", "same values", "last digits", "differs"))
    return "\n".join(lines) + f"\n\n{len(frame)} runs in both: {summary}.\n"
