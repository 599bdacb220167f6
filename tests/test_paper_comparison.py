"""The reproduction report: the reference file's numbers (each with its source), their transcription from the paper,
and the comparison with our tables."""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stochattn.experiments import era5_report, ett_report, uci_tables
from stochattn.experiments import paper_comparison as P
from stochattn.report import mean_row, tidy_frame

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "config" / "paper_results.yaml"
PAPER = REPO.parent / "shared" / "paper" / "stochastic-attention.tex"
EXTRA_METRICS = {"ett_sharpness": {"native_coverage_95"}}  # tidy rows a table writes beyond its shown columns


def blocks():
    return yaml.safe_load(REFERENCE.read_text())


def our_specs():
    specs = {f"uci_{n}": s for n, s in uci_tables.UCI_TABLE_SPECS.items()}
    specs.update({("ett_" + n if not n.startswith("ett_") else n): s for n, s in ett_report.ETT_TABLE_SPECS.items()})
    specs.update(era5_report.ERA5_TABLE_SPECS)
    return specs


def test_every_number_names_its_source_and_an_existing_statistic_of_ours():
    cells = P.paper_cells(REFERENCE)
    assert len(cells) > 200 and cells["paper"].map(math.isfinite).all()
    specs = our_specs()
    for name, b in blocks().items():
        assert re.search(r"(tab|fig):\w+|L\d+", b["source"]), (name, b["source"])
        assert b["table"] in specs, (name, b["table"])
        shown = {g.metric for g in specs[b["table"]].groups} | EXTRA_METRICS.get(b["table"], set())
        for metric in [b["metric"]] if "metric" in b else b["metrics"]:
            assert metric in shown, (name, metric)


@pytest.mark.skipif(not PAPER.is_file(), reason="the paper's .tex is not beside the repository")
def test_the_reference_values_are_the_papers_own():
    """Transcription check: every labelled source exists in the .tex, and each table row's values appear, in
    order, among the numbers of the paper's row of that table (rows found by their label)."""
    tex = PAPER.read_text()
    lines = tex.splitlines()
    for name, b in blocks().items():
        for label in re.findall(r"(?:tab|fig):\w+", b["source"]):
            assert f"\\label{{{label}}}" in tex, (name, label)
        for line_no in re.findall(r"L(\d+)", b["source"]):
            assert 0 < int(line_no) <= len(lines), (name, line_no)
        if "rows" not in b or not str(b["source"]).startswith("Table tab:"):
            continue
        label = re.search(r"tab:\w+", b["source"])[0]
        start = tex.index(f"\\label{{{label}}}")
        body = tex[start: tex.index("\\end{tabular}", start)].splitlines()
        for row, values in b["rows"].items():
            key = _tex_row_key(row)
            hits = [ln for ln in body if "&" in ln and re.match(rf"\s*{re.escape(key)}(?!\w)", ln, re.IGNORECASE)]
            assert len(hits) == 1, (name, row, key)
            numbers = [float(x) for x in re.findall(r"(?<![\w.])\d+\.\d+", hits[0])]
            values = [float(v) for v in (values if isinstance(values, list) else [values])]
            assert _contains_run(numbers, values), (name, row, values, numbers)


def _tex_row_key(row: str) -> str:
    m = re.match(r"(ETT[hm][12]) H=(\d+)", row)
    return f"{m[1]} (H={m[2]})" if m else {"power": "Power"}.get(row, row)


def _contains_run(numbers, values):
    """``values`` appear in ``numbers`` in order (the paper's row may interleave other columns, e.g. std)."""
    it = iter(numbers)
    return all(any(math.isclose(v, x, rel_tol=1e-9) for x in it) for v in values)


def test_compare_puts_ours_next_to_the_papers_with_ratio_verdict_and_run():
    reference = {
        "w1": {"source": "Table tab:uci_master, Panel A", "table": "uci_master", "metric": "w1_native_pooled",
               "methods": ["sa", "swag"], "rows": {"yacht": [0.02, 0.04], "wine": [0.2, 0.2]}},
        "cov": {"source": "Table tab:timesfm_sharpness", "table": "ett_sharpness", "metric": "sa_coverage_95",
                "scale": 0.01, "methods": ["sa"], "rows": {"ETTh1 H=96": 61.46}},
        "climax": {"source": "Table tab:climax_summary", "table": "climax_summary", "methods": ["sa"],
                   "metrics": {"w1_native": [0.056]}, "row": "Z500 72 h"},
    }  # fmt: skip
    cells = P.paper_cells(reference)
    assert cells.loc[cells["block"] == "cov", "paper"].item() == pytest.approx(0.6146)
    tables = {
        "uci_master": tidy_frame([mean_row("yacht", "sa", "w1_native_pooled", [0.021]),
                                  mean_row("yacht", "swag", "w1_native_pooled", [0.1]),
                                  mean_row("wine", "sa", "w1_native_pooled", [0.3])]),
        "ett_sharpness": tidy_frame([mean_row("ETTh1 H=96", "sa", "sa_coverage_95", [0.59])]),
    }  # fmt: skip
    runs = {"uci": "FT-Transformer 1 block(s), REDUCED", "ett": "STAND-IN TimesFM"}
    out = P.compare(cells, tables, runs)
    assert list(out.columns) == list(P.COLUMNS)
    look = out.set_index(["row", "method", "metric"])
    assert look.loc[("yacht", "sa", "w1_native_pooled"), "verdict"] == "within 10%"
    assert look.loc[("yacht", "swag", "w1_native_pooled"), "ratio"] == pytest.approx(2.5)
    assert look.loc[("yacht", "swag", "w1_native_pooled"), "verdict"] == "differs > 2x"
    assert look.loc[("wine", "sa", "w1_native_pooled"), "verdict"] == "within 2x"
    assert look.loc[("wine", "swag", "w1_native_pooled"), "verdict"] == "not run"  # no such cell of ours
    assert look.loc[("ETTh1 H=96", "sa", "sa_coverage_95"), "run"] == "STAND-IN TimesFM"
    assert look.loc[("Z500 72 h", "sa", "w1_native"), "verdict"] == "not run"  # the ERA5 table was not made
    assert look.loc[("Z500 72 h", "sa", "w1_native"), "run"] == "not run"
    # a stand-in at another lead: its row stands for the paper's (the run label says so), keyed by the paper's row
    tables["climax_summary"] = tidy_frame([mean_row("Z500 24 h", "sa", "w1_native", [0.07])])
    runs["era5"] = "AQUAPLANET STAND-IN, Z500 at 24 h (the paper: 72 h)"
    lead = P.compare(cells, tables, runs, {"Z500 72 h": "Z500 24 h"}).set_index(["row", "method", "metric"])
    assert lead.loc[("Z500 72 h", "sa", "w1_native"), "ours"] == 0.07
    assert lead.loc[("Z500 72 h", "sa", "w1_native"), "verdict"] == "within 2x"
    md = P.to_markdown(out, "header: stand-ins named")
    assert md.startswith("# Reproduction report") and "header: stand-ins named" in md
    assert "## Table tab:uci_master, Panel A" in md and "| Yacht |" not in md and "| yacht | SA |" in md
    with pytest.raises(ValueError, match="no source"):
        P.paper_cells({"x": {**reference["w1"], "source": ""}})
    with pytest.raises(ValueError, match="2 values for 1 methods"):
        P.paper_cells({"x": {**reference["cov"], "rows": {"ETTh1 H=96": [1, 2]}}})


def test_both_operating_points_floor_and_bias_flag():
    """Every SA cell at the loss arg-min and the scale-matching point, each with its ratio and the nearer one named;
    the W1 floor beside a W1 cell; the PIT-mean flag on a biased method only; verdict counts of the default."""
    reference = {"w1": {"source": "Table tab:uci_master, Panel A", "table": "uci_master", "metric": "w1_native_pooled",
                        "methods": ["sa", "swag"], "rows": {"yacht": [0.02, 0.04]}}}  # fmt: skip
    rows = [mean_row("yacht", m, "w1_native_pooled", [v]) for m, v in (("sa", 0.08), ("sa_match", 0.03),
                                                                       ("swag", 0.041))]
    rows += [mean_row("yacht", m, "w1_floor", [0.013]) for m in ("sa", "sa_match", "swag")]
    rows += [mean_row("yacht", m, "pit_mean_z", [z]) for m, z in (("sa", 5.2), ("sa_match", 2.9), ("swag", -0.4))]
    out = P.compare(P.paper_cells(reference), {"uci_master": tidy_frame(rows)}, {"uci": "paper configuration"})
    look = out.set_index(["method"])
    assert list(out["method"]) == ["sa", "sa_match", "swag"]
    assert look.loc["sa_match", "paper"] == 0.02 and look.loc["sa_match", "ratio"] == pytest.approx(1.5)
    assert look.loc["sa", "nearer"] == look.loc["sa_match", "nearer"] == "sa_match" and look.loc["swag", "nearer"] == ""
    assert (out["floor"] == 0.013).all()
    assert look.loc["sa", "flag"].startswith("PIT-mean bias (z = +5.2)")
    assert look.loc["sa_match", "flag"] == look.loc["swag", "flag"] == ""
    acc = {"acc": {"source": "Acc.", "table": "uci_master", "metric": "rmse_over_sigma", "methods": ["sa"],
                   "rows": {"yacht": 0.05}}}  # one backbone for both points: no scale-matching row of its accuracy
    assert list(P.compare(P.paper_cells(acc), {"uci_master": tidy_frame(rows)}, {})["method"]) == ["sa"]
    twice = pd.concat([out, out.assign(table="uci_crps", metric="crps")])
    assert P.to_markdown(twice, "hdr").count("- yacht, SA: PIT-mean bias") == 1
    md = P.to_markdown(out, "hdr")
    # counted: SA (arg-min, 4x: differs > 2x) and SWAG (within 10%); the scale-matching row apart
    verdicts = "Verdicts (ours / paper; SA at Algorithm 2's loss arg-min): within 10%: 1, within 2x: 0, differs > 2x: 1"
    assert verdicts in md
    assert "w1_native_pooled: loss arg-min 0, scale-match 1" in md and "3.91-3.95" in md
    assert "- yacht, SA: PIT-mean bias (z = +5.2)" in md
    # the cause, where the table has the point's own bias: a biased point, or an ensemble off an unbiased one
    for point_z, cause in ((9.9, "; its point is biased, z = +9.9"),
                           (1.5, "; its point is not (z = +1.5): the ensemble sits off it")):  # fmt: skip
        more = rows + [mean_row("yacht", "sa", "point_bias_z", [point_z])]
        flagged = P.compare(P.paper_cells(reference), {"uci_master": tidy_frame(more)}, {}).set_index("method")
        assert flagged.loc["sa", "flag"] == f"PIT-mean bias (z = +5.2{cause})"
        assert flagged.loc["swag", "flag"] == ""


def test_write_comparison_is_atomic_with_provenance(tmp_path):
    out = P.compare(P.paper_cells(REFERENCE), {}, {"uci": "reduced"})
    written = P.write_comparison(out, tmp_path / "paper_comparison", "hdr",
                                 {"rule": "test", "inputs": [], "config_subset": {}, "seeds": {}})  # fmt: skip
    assert [p.name for p in written] == ["paper_comparison.csv", "paper_comparison.md",
                                         "paper_comparison.csv.prov.json", "paper_comparison.md.prov.json"]  # fmt: skip
    back = pd.read_csv(written[0])
    assert len(back) == len(out) and set(back["verdict"]) == {"not run"}
    assert not list(tmp_path.glob(".*tmp"))


def test_two_reports_give_the_cells_that_moved_and_the_verdict_transitions(tmp_path, load_script):
    """benchmarks/compare_reports.py: two runs' reports cell by cell. The transition table counts the default rows
    only (SA at the loss arg-min); a moved value without a verdict change is listed after the verdict changes; a cell
    one run lacks is "not run" there; an unmoved cell is not listed."""
    reference = {"w1": {"source": "Table tab:uci_master, Panel A", "table": "uci_master", "metric": "w1_native_pooled",
                        "methods": ["sa", "swag", "hsa"],
                        "rows": {"yacht": [0.02, 0.04, 0.1], "wine": [0.2, 0.2, 0.2]}}}  # fmt: skip
    cells = P.paper_cells(reference)

    def report(values):
        rows = [mean_row(r, m, "w1_native_pooled", [v]) for (r, m), v in values.items()]
        return P.compare(cells, {"uci_master": tidy_frame(rows)}, {"uci": "paper configuration"})

    before = {("yacht", "sa"): 0.021, ("yacht", "sa_match"): 0.03, ("yacht", "swag"): 0.041, ("yacht", "hsa"): 0.105,
              ("wine", "sa"): 0.3, ("wine", "swag"): 0.21}  # fmt: skip
    after = {**before, ("yacht", "sa"): 0.03, ("yacht", "sa_match"): 0.05, ("wine", "swag"): 0.215,
             ("wine", "hsa"): 0.5}  # fmt: skip
    changes = P.report_changes(report(before), report(after))
    t = changes["transitions"]
    assert int(t.to_numpy().sum()) == 6  # six default cells; the scale-matching row is not counted
    assert t.loc["within 10%", "within 2x"] == 1  # yacht SA 1.05 -> 1.5
    assert t.loc["not run", "differs > 2x"] == 1  # wine HSA ran only after
    assert t.loc["within 10%", "within 10%"] == 3 and t.loc["within 2x", "within 2x"] == 1
    moved = changes["changed"]
    keys = list(zip(moved["row"], moved["method"]))
    # verdict changes first (in the after report's order), then the values that moved within their verdict
    assert keys == [("yacht", "sa"), ("yacht", "sa_match"), ("wine", "hsa"), ("wine", "swag")]
    assert list(moved["verdict_changed"]) == [True, True, True, False]
    assert moved.loc[0, "ours_before"] == pytest.approx(0.021) and moved.loc[0, "ratio_after"] == pytest.approx(1.5)
    assert math.isnan(moved.loc[2, "ours_before"]) and moved.loc[2, "verdict_before"] == "not run"
    # eight cells: six default ones and SA's scale-matching row of each data set (wine's not run in either)
    assert len(changes["cells"]) == 8 and P.report_changes(report(before), report(before))["changed"].empty
    with pytest.raises(ValueError, match="lacks the columns"):
        P.report_changes(report(before).drop(columns="verdict"), report(after))
    with pytest.raises(ValueError, match="names a cell twice"):
        P.report_changes(pd.concat([report(before)] * 2), report(after))
    # the script, as a user runs it on two paper_comparison.csv files
    report(before).to_csv(tmp_path / "a.csv", index=False)
    report(after).to_csv(tmp_path / "b.csv", index=False)
    script = load_script(REPO / "benchmarks" / "compare_reports.py")
    out = tmp_path / "changes.md"
    md = script.main([str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--labels", "a73a0fd", "773b32d",
                      "--out", str(out)])  # fmt: skip
    assert out.read_text() == md
    assert "a73a0fd within 10%: 4, within 2x: 1, differs > 2x: 0, not run: 1" in md
    assert "773b32d within 10%: 3, within 2x: 2, differs > 2x: 1, not run: 0" in md
    assert "4 of 8 cells moved (3 changed verdict" in md
    assert "| yacht | SA | w1_native_pooled | 0.02 | 0.021 | 0.03 | 1.05 | 1.5 | **within 10% -> within 2x** |" in md
    assert "| wine | SWAG | w1_native_pooled | 0.2 | 0.21 | 0.215 | 1.05 | 1.075 | within 10% |" in md


def test_uci_slice_comparison_puts_each_method_beside_the_paper():
    """benchmarks/uci_paper_slice.py's table: per (data set, method) the run's native W1 with its floor, PI-95
    coverage and PIT-mean z beside the paper's W1; SA's row also RMSE/sigma_y beside the paper's; the scale-matching
    SA is read against the paper's SA; a method the paper has no number for gets NaN."""
    rows = []
    for method, w1, cov in (("sa", 0.05, 0.8), ("sa_match", 0.04, 0.9), ("mc_dropout", 0.1, 0.6)):
        rows += [{"dataset": "energy", "method": method, "metric": "w1_native_pooled", "value": w1, "n": 3},
                 {"dataset": "energy", "method": method, "metric": "w1_floor", "value": 0.02, "n": 3},
                 {"dataset": "energy", "method": method, "metric": "coverage_95_native", "value": cov, "n": 3},
                 {"dataset": "energy", "method": method, "metric": "pit_mean_z", "value": 1.0, "n": 3}]
    rows.append({"dataset": "energy", "method": "sa", "metric": "rmse_over_sigma", "value": 0.04, "n": 3})
    table = uci_tables.uci_slice_comparison(pd.DataFrame(rows), P.paper_cells(REFERENCE))
    by = table.set_index("method")
    assert by.loc["sa", "paper_w1"] == by.loc["sa_match", "paper_w1"] == 0.030  # the paper's energy SA W1
    assert by.loc["mc_dropout", "paper_w1"] == 0.039 and by.loc["sa", "paper_rmse_over_sigma"] == 0.068
    assert math.isnan(by.loc["mc_dropout", "rmse_over_sigma"]) and by.loc["sa", "rmse_over_sigma"] == 0.04
    assert by.loc["mc_dropout", "coverage_95"] == 0.6 and by.loc["sa_match", "w1_floor"] == 0.02
    assert list(table["n"]) == [3, 3, 3]
    assert by.loc["mc_dropout", "ratio"] == 0.1 / 0.039 and not by.loc["mc_dropout", "within"]  # 2.56x, 5x floor
    assert by.loc["sa", "within"] and by.loc["sa_match", "within"]  # 1.67x; 1.33x
    floor = uci_tables.uci_slice_comparison(pd.DataFrame(rows).replace({0.02: 0.07}), P.paper_cells(REFERENCE))
    assert floor.set_index("method").loc["mc_dropout", "within"]  # 2.56x the paper, but 1.43x our floor
    unknown = pd.DataFrame(rows).replace({"energy": "mine"})  # no paper value: no verdict
    assert uci_tables.uci_slice_comparison(unknown, P.paper_cells(REFERENCE))["within"].isna().all()
    assert table["crps"].isna().all() and by.loc["sa", "paper_crps"] == by.loc["sa_match", "paper_crps"] == 0.369
    crps = pd.DataFrame([{"dataset": "energy", "method": "mc_dropout", "metric": "crps", "value": 0.25, "n": 3}])
    with_crps = uci_tables.uci_slice_comparison(pd.concat([pd.DataFrame(rows), crps]), P.paper_cells(REFERENCE))
    by = with_crps.set_index("method")  # the paper's appendix CRPS beside ours; nothing else moves
    assert by.loc["mc_dropout", "crps"] == 0.25 and by.loc["mc_dropout", "paper_crps"] == 0.413
    assert math.isnan(by.loc["sa", "crps"])
    pd.testing.assert_frame_equal(with_crps.drop(columns="crps"), table.drop(columns="crps"))
    assert table["point_bias"].isna().all()  # metrics files without the point's residual moments
    bias = pd.DataFrame([{"dataset": "energy", "method": "sa", "metric": m, "value": v, "n": 3}
                         for m, v in (("point_bias", 0.046), ("point_bias_z", 9.9))])
    by = uci_tables.uci_slice_comparison(pd.concat([pd.DataFrame(rows), bias]), P.paper_cells(REFERENCE)).set_index(
        "method")
    assert (by.loc["sa", "point_bias"], by.loc["sa", "point_bias_z"]) == (0.046, 9.9)
    assert math.isnan(by.loc["sa_match", "point_bias"])


def test_the_kept_uci_records_remake_their_report(tmp_path):
    """benchmarks/records/uci_paper (uci_paper_slice.py --keep): the repository's records of the paper
    configuration's UCI runs stay readable by the report that docs/measurements.md quotes, each data set with its
    backbone's RMSE/sigma_y, every cell beside the paper's W1 and with its CPU-hours."""
    records = sorted(p for p in (REPO / "benchmarks" / "records" / "uci_paper").iterdir() if p.is_dir())
    assert records, "no records kept"
    out = tmp_path / "slice.md"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "uci_paper_slice.py"), *map(str, records),
                          "--partial", "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    text = out.read_text()
    for folder in records:
        assert f"**{folder.name}** (" in text and "paper 0." in text
    table = pd.read_csv(out.with_suffix(".csv"))
    assert set(table["dataset"]) == {p.name for p in records}
    assert table["paper_w1"].notna().all() and table["w1"].between(0, 0.5).all()
    assert "CPU-hours wall" in text and "; - CPU-hours" not in text  # every data set with its benchmark records


def test_cells_within_only_pooled_are_named_from_their_splits_alone():
    """The report names each cell that is within 2x pooled while most of its splits, read alone, are beyond (the
    kept records: naval's SWAG, biased one way on split 0 and the other on split 2, pools to 1.18x), and no other:
    every within cell is checked here against its own splits' comparisons."""
    from stochattn.experiments.paper_comparison import paper_cells
    from stochattn.experiments.uci_slice_report import build, split_comparisons
    from stochattn.report import method_label

    records = sorted(p for p in (REPO / "benchmarks" / "records" / "uci_paper").iterdir() if p.is_dir())
    names = [p.name for p in records]
    report = build(records, names, REPO / "config" / "paper_results.yaml")
    cells = paper_cells(REPO / "config" / "paper_results.yaml")
    listed = report.text.split("**Within only pooled**")[1] if "**Within only pooled**" in report.text else ""
    within = report.table[report.table["within"].fillna(False).astype(bool)]
    assert len(within) > 10
    for _, r in within.iterrows():
        splits, single, _ = split_comparisons(report.homes[r["dataset"]], r["dataset"], cells)
        alone = [single[s][single[s]["method"] == r["method"]]["within"] for s in splits]
        alone = [bool(a.iloc[0]) for a in alone if len(a) and pd.notna(a.iloc[0])]
        named = f"- {r['dataset']} {method_label(r['method'])}: pooled" in listed
        assert named == (len(alone) >= 2 and 2 * alone.count(False) > len(alone)), (r["dataset"], r["method"], alone)
    if "naval" in names and (report.table["method"] == "swag").any():
        assert "- naval SWAG: pooled 0.062 (1.18x), but 2 of 3 splits beyond" in listed


def test_a_data_sets_cpu_hours_are_those_of_the_splits_its_report_holds(tmp_path):
    """The slice report's CPU-hours of a data set sum the benchmark records of the splits it reports: a job of a split
    not yet evaluated (a run still going) is left out, a data set the report does not hold is not summed."""
    from stochattn.experiments.uci_slice_report import dataset_hours
    from stochattn.resources import read_benchmarks

    head = "s\th:m:s\tmax_rss\tcpu_time\n"
    for path, s, cpu in [("train_backbone/uci/power/split0.tsv", 3600.0, 3000.0),
                         ("uci_candidate/uci/power/split1/2/ivon.tsv", 1800.0, 1700.0),
                         ("run_method/uci/power/split2/ivon.tsv", 7200.0, 7000.0),
                         ("run_method/uci/wine/split0/sa.tsv", 360.0, "NA")]:  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(head + f"{s}\t0:00:00\t100\t{cpu}\n")
    records = read_benchmarks(tmp_path)
    assert {(r["dataset"], r["split"]) for r in records} == {("power", 0), ("power", 1), ("power", 2), ("wine", 0)}
    hours = dataset_hours(records, {"power": {0, 1}})
    assert set(hours) == {"power"} and hours["power"] == pytest.approx((1.5, 4700 / 3600))
    every = dataset_hours(records, {"power": None, "wine": {0}})  # None: every split; cpu_time NA counts as 0
    assert every["power"] == pytest.approx((3.5, 3.25)) and every["wine"] == pytest.approx((0.1, 0.0))


def test_kept_records_carry_each_jobs_earlier_attempts(tmp_path):
    """keep_records copies a benchmark record with the record of its job's earlier attempts, and a rerun kept without
    one (it did not resume) removes the earlier run's, so the kept CPU-hours are those of the kept runs."""
    from stochattn.experiments.uci_slice_report import keep_records
    from stochattn.resources import read_benchmarks

    work, dest = tmp_path / "work", tmp_path / "records"
    bench = work / "results" / "benchmarks" / "train_backbone" / "uci" / "naval"
    bench.mkdir(parents=True)
    (bench / "split0.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n600.0\t0:10:00\t100\t600.0\n")
    (bench / "split0.attempts.json").write_text('{"earlier_seconds": 3000.0}')
    keep_records(work, ["naval"], dest)
    kept = dest / "naval" / "benchmarks"
    assert [r["seconds"] for r in read_benchmarks(kept)] == [3600.0]
    (bench / "split0.attempts.json").unlink()  # the job run again from the start
    keep_records(work, ["naval"], dest)
    assert [r["seconds"] for r in read_benchmarks(kept)] == [600.0]
    assert not (kept / "train_backbone" / "uci" / "naval" / "split0.attempts.json").exists()


def test_the_report_of_kept_records_goes_to_the_ignored_out_folder_not_into_them(tmp_path, load_script):
    """Without --out the report lies beside a single workdir outside the repository; several workdirs, or the kept
    records themselves, put it in benchmarks/out/ (ignored by git), never into a records folder."""
    script = load_script(REPO / "benchmarks" / "uci_paper_slice.py")
    records = sorted(p for p in (REPO / "benchmarks" / "records" / "uci_paper").iterdir() if p.is_dir())
    ignored = REPO / "benchmarks" / "out" / "uci_paper_slice.md"
    assert script.default_out([tmp_path]) == tmp_path / "uci_paper_slice.md"
    assert script.default_out([tmp_path, tmp_path / "b"]) == ignored
    assert script.default_out(records) == ignored and script.default_out(records[:1]) == ignored
    res = subprocess.run(["git", "check-ignore", "-q", str(ignored)], cwd=REPO)
    assert res.returncode == 0, "benchmarks/out/ is not ignored by git"


def test_the_slice_runs_its_jobs_with_progress_lines_in_their_logs(load_script):
    """The slice's config keeps the workflow's progress lines (epoch, validation RMSE) in every job's log: its
    trainings run for hours on naval and protein."""
    script = load_script(REPO / "benchmarks" / "uci_paper_slice.py")
    args = argparse.Namespace(datasets=["naval"], methods=["sa"], splits=3, fewer=["naval=1"], mirror="data")
    cfg = script.slice_config(args)
    assert cfg["progress"] is True
    assert cfg["dataset_overrides"] == {"naval": {"splits": 1}}


def test_the_slice_from_a_split_on_runs_only_those_splits(load_script, tmp_path):
    """--from-split K asks Snakemake for splits K.. of each data set (their evaluations; the master table needs every
    split), puts the lowest of those not yet evaluated first, and refuses a K that leaves a data set no split."""
    script = load_script(REPO / "benchmarks" / "uci_paper_slice.py")
    cfg = {"datasets": ["yacht", "wine"], "methods": ["sa", "swag"], "splits": 6,
           "dataset_overrides": {"wine": {"splits": 4}}}  # fmt: skip
    target = "results/uci/{}/split{}/sa/metrics.json".format
    assert script.run_targets(cfg) == ["results/tables/uci_master.md"]
    assert script.run_targets(cfg, 3) == [target("yacht", 3), target("yacht", 4), target("yacht", 5), target("wine", 3)]
    done = tmp_path / target("yacht", 3)
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    assert script.first_open_splits(tmp_path, cfg, 3) == [target("yacht", 4), target("wine", 3)]
    assert script.first_open_splits(tmp_path, cfg) == [target("yacht", 0), target("wine", 0)]
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "uci_paper_slice.py"), str(tmp_path / "w"),
                          "--datasets", "yacht", "protein", "--splits", "6", "--from-split", "3"],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "--from-split 3 leaves no split to run of: protein (1)" in res.stderr, res.stderr
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "uci_paper_slice.py"), str(tmp_path / "w"),
                          "--datasets", "yacht", "--from-split=-1"], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "--from-split -1 leaves no split to run of: yacht" in res.stderr, res.stderr
    assert not (tmp_path / "w").exists()  # refused before anything is written


def test_a_killed_slice_goes_on_with_unlock(load_script, tmp_path, monkeypatch):
    """A killed run leaves its workdir locked (Snakemake's lock files): the slice stops with one message that names
    --unlock, not a traceback, and leaves the lock; with --unlock it removes the lock (Snakemake's --unlock) and the run
    goes on (here Snakemake's dry run of the same command, which schedules the slice's jobs); --report-only of a run
    without its master table says that it has not finished."""
    script = load_script(REPO / "benchmarks" / "uci_paper_slice.py")
    work = tmp_path / "w"
    lock = work / ".snakemake" / "locks" / "0.output.lock"  # what a killed run leaves: the outputs it was writing
    lock.parent.mkdir(parents=True)
    lock.write_text("results/uci/yacht/split0/sa/metrics.json\n")
    run, calls = subprocess.run, []

    def planned(cmd, **kwargs):  # the run's command as a dry run; a lock stops Snakemake before any job all the same
        dry = bool(calls) and "--unlock" not in cmd
        calls.append(res := run([*cmd, *["-n"] * dry], capture_output=True, text=True, timeout=300, **kwargs))
        return res

    monkeypatch.setattr(script.subprocess, "run", planned)
    argv = ["uci_paper_slice.py", str(work), "--datasets", "yacht", "--splits", "1", "--methods", "sa"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="the same command with --unlock goes on where it stopped"):
        script.main()
    assert len(calls) == 1 and calls[0].returncode == 1 and "Directory cannot be locked" in calls[0].stderr
    assert lock.is_file()
    monkeypatch.setattr(sys, "argv", [*argv, "--unlock"])
    with pytest.raises(SystemExit, match="has no master table .*: its run has not finished; --partial"):
        script.main()  # the dry run writes nothing to report
    unlock, dry = calls[1:]
    assert "--unlock" in unlock.args and unlock.returncode == 0 and not lock.exists()
    assert dry.returncode == 0 and "train_backbone" in dry.stdout and "calibrate_sa" in dry.stdout, dry.stderr[-2000:]


def test_sas_nu_column_lists_the_splits_in_their_order(tmp_path):
    """The report's SA nu column names each split's calibrated nu in split order: split 10 after split 9, not after
    split 1 as the file names sort; a split calibrated but not evaluated (no metrics.json) is left out."""
    from stochattn.experiments.uci_slice_report import sa_nus

    for split in range(12):
        run = tmp_path / "uci" / "yacht" / f"split{split}" / "sa"
        run.mkdir(parents=True)
        (run / "meta.json").write_text(json.dumps({"nu": 100 + split, "at_boundary": split == 3}))
        if split != 11:
            (run / "metrics.json").write_text("{}")
    table = pd.DataFrame({"dataset": ["yacht", "yacht"], "method": ["sa", "mc_dropout"]})
    expected = " / ".join(str(100 + s) for s in range(11)) + " (boundary on 1 of 11)"
    assert sa_nus(tmp_path, table) == {("yacht", "sa"): expected}
