"""The ERA5 slice of the workflow end to end: config/test.yaml's tiny ERA5 configuration (two stand-in climates of a
few days, a 1-block ClimaX pretrained for 4 steps, every method, every table and figure) run with target ``era5`` in
a temporary directory."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import yaml

from conftest import (assert_every_output_audits_clean, assert_only_dependants_fail, audit_failures, copy_run,
                      perturb_samples)  # fmt: skip
from test_workflow import REPO, _prov_ok, job_stats, smk, write_config

RUNS = ["sa", "sa_match", "swag", "multiswag", "ivon", "contextual_dropout", "hsa"]


@pytest.fixture(scope="module")
def era5_run(tmp_path_factory):
    pytest.importorskip("dinosaur")
    root = tmp_path_factory.mktemp("era5")
    cfg = root / "test.yaml"
    shutil.copy(REPO / "config" / "test.yaml", cfg)
    work = root / "work"
    res = smk(work, "era5", configfile=cfg, timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    return {"work": work, "cfg": cfg, "output": res.stdout}


@pytest.mark.slow
def test_era5_run_writes_every_output_with_provenance(era5_run):
    work = era5_run["work"]
    stats = job_stats(era5_run["output"])
    assert stats["era5_standin"] == 2 and stats["era5_preprocess"] == 2 and stats["era5_method"] == 3
    # HSA's two candidates in their own jobs, then the selection; one BO job per seed and range (1 seed x 2 ranges)
    assert stats["era5_candidate"] == 2 and stats["era5_select"] == 1
    assert stats["era5_analyses_bo"] == 2 and stats["era5_analyses_sweep"] == 1 and stats["era5_analyses"] == 1
    runs = work / "results" / "era5" / "runs"
    for m in RUNS:
        metrics = json.loads((runs / m / "metrics.json").read_text())
        assert metrics["n_test"] == 3 * 32 * 64 and np.isfinite(metrics["native"]["crps"])
        assert metrics["provenance"]["code"], m
        spatial = json.loads((runs / m / "spatial.json").read_text())
        assert spatial["crps"] == pytest.approx(spatial["crps_error"] - spatial["crps_spread"], rel=1e-6)
    # the backbone was pretrained on the pretraining climate only (its input is that climate's folder)
    backbone = json.loads((work / "results" / "era5" / "backbone" / "standin.json").read_text())
    assert backbone["source"]["source_root"].endswith("data/pretrain")
    assert json.loads((runs / "sa" / "meta.json").read_text())["sa_sites"] == ["blocks", "var_agg"]
    sweep = json.loads((runs / "swag" / "scale_sweep.json").read_text())
    assert [r["scale"] for r in sweep["rows"]] == [1.0, 4.0]
    analyses = json.loads((work / "results" / "era5" / "analyses.json").read_text())
    assert [r["nu"] for r in analyses["score_sweep"]["grid"]] == [1, 8] and len(analyses["bo_seeds"]) == 1
    for name in ("climax_summary", "climax_crps_decomp", "swag_sweep_val", "swag_sweep_test", "climax_skill",
                 "climax_cost"):
        for ext in ("csv", "md", "tex"):
            _prov_ok(work / "results" / "tables" / f"{name}.{ext}", work)
        assert "AQUAPLANET STAND-IN" in (work / "results" / "tables" / f"{name}.md").read_text()
    figures = ["climax_pit_combined", "climax_cost", "climax_sharpness", "climax_sharp25", "latency_appendix",
               "bo_sensitivity", "bo_beta_hist", "nu_ablation", "teaser_climax_maps", "teaser_axes"]
    for name in figures:
        for ext in ("png", "pdf"):
            path = work / "results" / "figures" / f"{name}.{ext}"
            assert path.stat().st_size > 1000
            assert "AQUAPLANET STAND-IN" in _prov_ok(path, work)["extra"]["caption"]


@pytest.mark.slow
def test_every_era5_table_and_figure_audits_clean(era5_run, tmp_path):
    """stochattn audit walks netCDF -> shards -> pairs -> backbone -> adapter -> runs -> spatial scores / analyses ->
    table/figure, and --prov writes the same chain as W3C PROV-JSON."""
    import subprocess
    import sys
    from pathlib import Path

    from stochattn import audit

    work = era5_run["work"]
    assert_every_output_audits_clean(work, 19)  # 6 tables, 13 figures
    nodes = {n.path: n for n in audit._iter(audit.audit("results/tables/climax_crps_decomp.csv", work))}
    rules = {n.rule for n in nodes.values()}
    assert {"era5_standin", "era5_preprocess", "era5_prepare", "era5_pretrain_standin", "era5_adapt",
            "era5_calibrate_sa", "era5_swag", "era5_method", "era5_evaluate",
            "era5_analyses"} <= rules, rules  # fmt: skip
    assert {"results/era5/runs/sa/spatial.json", "results/era5/data/finetune",
            "results/era5/data/pretrain"} <= set(nodes)  # fmt: skip
    out = tmp_path / "chain.prov.json"
    exe = Path(sys.executable).with_name("stochattn")
    res = subprocess.run([str(exe), "audit", "results/figures/latency_appendix.png", "-d", str(work), "--prov",
                          str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    labels = {a["prov:label"] for a in doc["activity"].values()}
    assert {"era5_analyses", "era5_preprocess", "era5_standin", "era5_figure"} <= labels, labels


@pytest.mark.slow
def test_era5_audit_names_a_modified_sample_file_and_shard(era5_run, tmp_path):
    work = copy_run(era5_run, tmp_path / "w")
    perturb_samples(work / "results/era5/runs/hsa/samples.npz")
    assert_only_dependants_fail(  # SA's analyses and the adapter's skill table read no HSA samples
        work, "results/era5/runs/hsa/samples.npz",
        ["results/tables/climax_summary.csv", "results/figures/climax_sharpness.png"],
        ["results/figures/latency_appendix.png", "results/tables/climax_skill.csv"],
    )
    shard = sorted((work / "results/era5/processed/pretrain").rglob("*.npz"))[0]
    shard.write_bytes(shard.read_bytes() + b"\0")
    failed, _ = audit_failures(work, "results/figures/latency_appendix.png")
    assert failed == ["results/era5/processed/pretrain"], failed
    from stochattn import audit

    node = next(n for n in audit._iter(audit.audit("results/figures/latency_appendix.png", work))
                if n.path == "results/era5/processed/pretrain")  # fmt: skip
    assert f"modified {shard.relative_to(work / 'results/era5/processed/pretrain').as_posix()}" in node.status


@pytest.mark.slow
def test_era5_split_jobs_equal_the_single_jobs(era5_run, tmp_path, one_thread):
    """HSA chosen in era5_select from its per-candidate jobs: the same choice and byte-identical samples as the
    single-job path on the same files; analyses.json gathered from the sweep and per-seed BO jobs: the same numbers
    as sa_analyses in one call (the jobs ran with one thread, as this test does)."""
    from stochattn.experiments import era5

    work = era5_run["work"]
    case = work / "results" / "era5"
    backbone = case / "backbone" / "standin.pt"
    meta = json.loads((case / "runs" / "hsa" / "meta.json").read_text())
    lora = json.loads((case / "adapter.json").read_text())["lora"]
    single = era5.run_method("hsa", case / "pairs.npz", backbone, case / "adapter.pt", tmp_path / "hsa", lora=lora,
                             train=meta["train"], method_cfg=meta["hyperparameters"], num_samples=meta["num_samples"],
                             seed=meta["seed"], require_skill=False, progress=False)  # fmt: skip
    got, want = meta["selection"], single["selection"]
    assert len(want["grid"]) == 2
    for key in ("chosen", "scores", "val_crps", "val_rmse", "val_coverage_95", "errors"):
        assert got[key] == want[key], key
    assert (tmp_path / "hsa" / "samples.npz").read_bytes() == (case / "runs" / "hsa" / "samples.npz").read_bytes()
    gathered = json.loads((case / "analyses.json").read_text())
    test_cfg = yaml.safe_load(era5_run["cfg"].read_text())
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    sa_cfg = {**base["method_params"]["sa"], **test_cfg["method_params"]["sa"],
              **test_cfg["era5"]["method_params"]["sa"]}  # fmt: skip
    an = test_cfg["era5"]["analyses"]
    seed = 10_000_000 * 11 + 7  # rules/era5_common.smk era5_seed("analyses") at seed 0
    one = era5.sa_analyses(case / "pairs.npz", backbone, case / "adapter.pt", case / "runs" / "sa" / "calibration.json",
                           tmp_path / "analyses.json", lora=lora, sa_cfg=sa_cfg, nu_grid=an["nu_grid"],
                           bo_seeds=an["bo_seeds"], latency_nu=an["latency_nu"], latency_batch=an["latency_batch"],
                           latency_repeats=an["latency_repeats"], num_samples=meta["num_samples"], seed=seed,
                           second_range=an["bo_second_range"], progress=False)  # fmt: skip
    def untimed(obj):  # as written (JSON types), wall-clock seconds left out
        if isinstance(obj, dict):
            return {k: untimed(v) for k, v in obj.items() if k != "seconds"}
        return [untimed(v) for v in obj] if isinstance(obj, list) else obj

    one, gathered = untimed(json.loads(json.dumps(one))), untimed(gathered)
    for key in ("sa_sites", "num_samples", "score_sweep", "bo_seeds", "bo_second_range"):
        assert gathered[key] == one[key], key
    assert set(gathered) - {"provenance"} == set(one)  # the file: the same keys (save_json sorts them)


@pytest.mark.slow
def test_era5_second_invocation_does_nothing(era5_run):
    res = smk(era5_run["work"], "era5", "-n", configfile=era5_run["cfg"])
    assert res.returncode == 0 and "Nothing to be done" in res.stdout, res.stdout[-3000:]
    assert "stale file" not in res.stdout, res.stdout[-3000:]  # every record's inputs are there (stochattn.stale)


def test_unknown_sa_site_is_a_config_error(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", REPO / "config" / "test.yaml", era5={"sa_sites": ["heads"]})
    res = smk(tmp_path / "work", "era5", "-n", configfile=cfg)
    assert res.returncode != 0 and "heads" in res.stdout


def test_a_lead_off_the_data_step_is_a_config_error_naming_the_allowed_values(tmp_path):
    """Before anything runs (a dry run): era5.lead_hours: 7 on the stand-in's 6-hourly data passed the schema and
    failed only inside a job (the checks themselves: stochattn.data.era5.forecast_cases, unit-tested)."""
    cfg = write_config(tmp_path / "lead.yaml", REPO / "config" / "test.yaml", era5={"enabled": True, "lead_hours": 7})
    res = smk(tmp_path / "w", "era5", "-n", configfile=cfg)
    assert res.returncode != 0 and "not a multiple" in res.stdout and "6-hourly" in res.stdout
    assert "6 h or 12 h" in res.stdout and not (tmp_path / "w" / "results").exists()


@pytest.mark.slow
def test_a_second_case_plans_its_whole_slice_and_leaves_the_main_case_alone(era5_run, tmp_path):
    """Adding a case (T850 at 24 h) to the finished tiny run plans that case's whole slice under its own names
    (pairs, adapter, every method, tables, figures, the pooled table) and no computing job of the main case (Z500
    72 h): its params, code and inputs are unchanged (Snakemake's rerun triggers), so its files keep their names and
    values; only its tables and figures are rendered again from the same inputs (the config they record changed).
    (A real run of four cases: config/targets.yaml; captions and units per target: tests/test_era5_report.py.)"""
    cfg = write_config(tmp_path / "cases.yaml", era5_run["cfg"],
                       era5={"cases": [{"target": "z500", "lead_hours": 72}, {"target": "t850", "lead_hours": 24}]})
    res = smk(era5_run["work"], "era5", "-n", configfile=cfg)
    assert res.returncode == 0, res.stdout[-6000:]
    stats = job_stats(res.stdout)
    assert stats["era5_prepare"] == 1 and stats["era5_adapt"] == 1 and stats["era5_method"] == 3, stats
    assert stats["era5_candidate"] == 2 and stats["era5_select"] == 1, stats
    assert not {"era5_standin", "era5_preprocess", "era5_pretrain_standin"} & set(stats), stats
    # the main case's tables and figures are rendered again from the same inputs (their provenance records the
    # config, which now lists two cases); none of its pairs, adapter, runs or scores is recomputed
    assert stats["era5_table"] == 2 * 6 + 1 and stats["era5_figure"] == 2 * 13, stats
    jobs = re.findall(r"rule (\w+):.*?output: ([^\n]+)", res.stdout, re.S)
    outputs = {p.strip() for _, line in jobs for p in line.split(",")}
    compute = {p.strip() for rule, line in jobs if rule not in ("era5_table", "era5_figure", "era5")
               for p in line.split(",")}  # fmt: skip
    assert compute and all("t850_24h" in p for p in compute), sorted(compute)[:5]
    for path in ("results/era5/t850_24h/pairs.npz", "results/era5/t850_24h/runs/sa/samples.npz",
                 "results/tables/climax_summary_t850_24h.csv", "results/figures/teaser_climax_maps_t850_24h.png"):
        assert path in outputs, path
    res = smk(era5_run["work"], "era5_t850_24h", "-n", configfile=cfg)  # the case's target rule
    assert res.returncode == 0 and "results/tables/climax_summary_cases.csv" not in res.stdout
