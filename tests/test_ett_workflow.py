"""The ETT slice of the workflow end to end: config/test.yaml's tiny ETT configuration (ETTh1, H = 96, a 1-layer
stand-in pretrained for 20 steps, every method) run with target ``ett`` in a temporary directory."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import (assert_every_output_audits_clean, assert_only_dependants_fail, audit_failures, copy_run,
                      perturb_samples)  # fmt: skip
from test_workflow import REPO, _prov_ok, job_stats, smk, write_config

MIRROR = (REPO / ".." / "shared" / "data").resolve()
HAVE_MIRROR = (MIRROR / "ETT-small" / "ETTh1.csv.gz").is_file()
RUNS = ["sa", "sa_match", "swag", "multiswag", "ivon", "contextual_dropout", "hsa"]


@pytest.fixture(scope="module")
def ett_run(tmp_path_factory):
    if not HAVE_MIRROR:
        pytest.skip(f"offline ETT mirror {MIRROR} not present")
    root = tmp_path_factory.mktemp("ett")
    cfg = root / "test.yaml"
    shutil.copy(REPO / "config" / "test.yaml", cfg)
    work = root / "work"
    res = smk(work, "ett", configfile=cfg, timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    return {"work": work, "cfg": cfg, "output": res.stdout}


@pytest.mark.slow
def test_ett_run_writes_every_output_with_provenance(ett_run):
    work = ett_run["work"]
    stats = job_stats(ett_run["output"])
    assert stats["ett_method"] == 3 and stats["ett_swag"] == 1 and stats["ett_calibrate_sa"] == 1
    # HSA's grid (two candidates in config/test.yaml): one job per candidate, then the selection job
    assert stats["ett_candidate"] == 2 and stats["ett_select"] == 1
    assert stats["ett_pretrain_standin"] == 1 and stats["ett_multiswag_member"] == 1  # member 0: the SWAG run
    run = work / "results" / "ett" / "ETTh1" / "H96"
    for m in RUNS:
        metrics = json.loads((run / m / "metrics.json").read_text())
        assert metrics["n_test"] == 28 * 96 and np.isfinite(metrics["native"]["crps"])
        assert metrics["provenance"]["code"], m
    # the station-1 stand-in was pretrained on station 2's files only (its inputs)
    backbone = json.loads((work / "results" / "ett" / "backbone" / "station1.json").read_text())
    assert sorted(backbone["sources"]) == ["ETTh2", "ETTm2"]
    assert not (work / "results" / "data" / "ett" / "ETTm1.csv").exists()
    for name in ("ett_sharpness", "ett_sharpness_pooled", "ett_pooled", "ett_pooled_levels", "ett_pooled_scores",
                 "ett_cost", "ett_zero_shot"):
        for ext in ("csv", "md", "tex"):
            _prov_ok(work / "results" / "tables" / f"{name}.{ext}", work)
        md = (work / "results" / "tables" / f"{name}.md").read_text()
        assert "STAND-IN BACKBONE" in md and "ETTh1 H=96" in md
    for name in ("ett_coverage", "ett_coverage_matched", "ett_coverage_matched_cal"):
        for ext in ("png", "pdf"):
            path = work / "results" / "figures" / f"{name}.{ext}"
            assert path.stat().st_size > 1000
            rec = _prov_ok(path, work)
            assert "STAND-IN" in rec["extra"]["caption"]


@pytest.mark.slow
def test_every_ett_table_and_figure_audits_clean(ett_run):
    """stochattn audit walks CSV -> prepared windows -> stand-in -> adapter -> runs -> metrics -> table/figure."""
    from stochattn import audit

    work = ett_run["work"]
    assert_every_output_audits_clean(work, 10)  # 7 tables, 3 figures
    rules = {n.rule for n in audit._iter(audit.audit("results/tables/ett_pooled.csv", work))}
    assert {"fetch_ett", "ett_prepare", "ett_pretrain_standin", "ett_adapt", "ett_calibrate_sa", "ett_method",
            "ett_swag", "ett_multiswag_member", "ett_evaluate", "ett_table"} <= rules, rules  # fmt: skip


@pytest.mark.slow
def test_ett_audit_names_a_modified_sample_file_and_a_corrupted_csv(ett_run, tmp_path):
    work = copy_run(ett_run, tmp_path / "w")
    perturb_samples(work / "results/ett/ETTh1/H96/ivon/samples.npz")
    assert_only_dependants_fail(  # the zero-shot table reads the adapters only
        work, "results/ett/ETTh1/H96/ivon/samples.npz",
        ["results/tables/ett_pooled.csv", "results/tables/ett_sharpness.csv", "results/figures/ett_coverage.png"],
        ["results/tables/ett_zero_shot.csv"],
    )
    csv = work / "results/data/ett/ETTh2.csv"  # a pretraining source of the station-1 stand-in
    csv.write_text(csv.read_text().replace("2016", "2017", 1))
    failed, _ = audit_failures(work, "results/tables/ett_zero_shot.csv")
    assert failed == ["results/data/ett/ETTh2.csv"], failed


@pytest.mark.slow
def test_ett_split_search_equals_the_single_job(ett_run, tmp_path, one_thread):
    """HSA's candidates fitted in their own jobs and chosen in ett_select: the same choice and validation scores and
    byte-identical samples as the library's single-job path (every candidate fitted in one call) on the same files
    (the jobs ran with one thread, as this test does)."""
    from stochattn.experiments import ett

    work = ett_run["work"]
    run = work / "results" / "ett" / "ETTh1" / "H96"
    meta = json.loads((run / "hsa" / "meta.json").read_text())
    lora = json.loads((run / "adapter.json").read_text())["lora"]
    single = ett.run_method("hsa", run / "prepared.npz", work / "results" / "ett" / "backbone" / "station1.pt",
                            run / "adapter.pt", tmp_path / "hsa", lora=lora, train=meta["train"],
                            method_cfg=meta["hyperparameters"], num_samples=meta["num_samples"], seed=meta["seed"],
                            progress=False)  # fmt: skip
    got, want = meta["selection"], single["selection"]
    assert len(want["grid"]) == 2 and got["grid"] == want["grid"]
    for key in ("chosen", "scores", "val_crps", "val_rmse", "val_coverage_95", "errors", "beats_mean_predictor"):
        assert got[key] == want[key], key
    assert (tmp_path / "hsa" / "samples.npz").read_bytes() == (run / "hsa" / "samples.npz").read_bytes()
    records = [json.loads((run / "hsa" / "candidates" / f"{k}.json").read_text()) for k in range(2)]
    assert [r["val_crps"] for r in records] == want["val_crps"]


def test_a_grid_plans_one_candidate_job_per_entry(tmp_path):
    """A dry run of the tiny configuration with IVON given three candidates: one ett_candidate job per grid entry
    (IVON 3, HSA 2), a selection job per searched method; one-candidate methods stay single ett_method jobs."""
    grid = [{"ess": 1.0e4}, {"ess": 1.0e5}, {"ess": 1.0e6}]
    cfg = write_config(tmp_path / "grid.yaml", REPO / "config" / "test.yaml",
                       ett={"method_params": {"ivon": {"grid": grid}}})  # fmt: skip
    res = smk(tmp_path / "work", "ett", "-n", configfile=cfg)
    assert res.returncode == 0, res.stdout[-3000:]
    stats = job_stats(res.stdout)
    assert stats["ett_candidate"] == 3 + 2 and stats["ett_select"] == 2 and stats["ett_method"] == 2, stats
    for k in range(3):
        assert f"results/ett/ETTh1/H96/ivon/candidates/{k}.pt" in res.stdout


@pytest.mark.slow
def test_ett_second_invocation_does_nothing(ett_run):
    res = smk(ett_run["work"], "ett", "-n", configfile=ett_run["cfg"])
    assert res.returncode == 0 and "Nothing to be done" in res.stdout, res.stdout[-3000:]
    assert "stale file" not in res.stdout, res.stdout[-3000:]  # every record's inputs are there (stochattn.stale)


def test_unknown_ett_dataset_is_a_config_error(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", REPO / "config" / "test.yaml", ett={"datasets": ["ETTh3"]})
    res = smk(tmp_path / "work", "ett", "-n", configfile=cfg)
    assert res.returncode != 0 and "ETTh3" in res.stdout


@pytest.mark.slow
def test_ett_html_report_has_the_captions(ett_run):
    res = smk(ett_run["work"], "ett", "--report", "report.html", configfile=ett_run["cfg"])
    assert res.returncode == 0, res.stdout[-3000:]
    html = (ett_run["work"] / "report.html").read_text(errors="replace")
    assert "ETT coverage" in html and "STAND-IN" in html
