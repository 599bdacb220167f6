"""The Snakemake workflow: DAG of the paper's protocol (dry run), a tiny end-to-end run, reruns, bad input.

Snakemake runs in a subprocess with ``--directory <tmp>`` and the repository's Snakefile, so nothing is written
into the repository's results/. The tiny run (config/test.yaml: yacht, 1 split, 2 epochs, S=5, MultiSWAG L=2)
reads the shared offline data mirror (../shared/data); tests that need it are skipped where it is missing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import assert_gpu_runtimes_cover_the_measured_work, assert_requests_cover_the_measured_peaks

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
PROFILE = REPO / "profiles" / "default"
MIRROR = (REPO / ".." / "shared" / "data").resolve()
HAVE_MIRROR = (MIRROR / "UCI_Datasets" / "yacht" / "data" / "data.txt").is_file()
needs_mirror = pytest.mark.skipif(not HAVE_MIRROR, reason=f"offline data mirror {MIRROR} not present")

ALL_DATASETS = ["concrete", "energy", "kin8nm", "naval", "power", "protein", "wine", "yacht"]
ALL_METHODS = ["sa", "mc_dropout", "swag", "multiswag", "ivon", "hsa"]  # what a config lists
RUNS = ["sa", "sa_match", "mc_dropout", "swag", "multiswag", "ivon", "hsa"]  # + sa_match, written beside sa
PIPELINE_RULES = [
    "fetch_uci", "prepare_uci", "prepare_toy", "train_backbone", "calibrate_sa", "run_method", "run_swag",
    "multiswag_component", "uci_candidate", "evaluate",
    "uci_table", "uci_pit_figure", "uci_sharpness_figure", "uci_yacht_appendix", "uci_cost_figure",
    "teaser_sinusoid",
]  # fmt: skip
TABLES = ["uci_master", "uci_matched", "uci_crps", "uci_cost"]
FIGURES = ["uci_pit_yacht", "uci_sharpness_yacht", "uci_yacht_appendix", "uci_cost", "teaser_sinusoid"]


def _snakemake_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("snakemake")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "snakemake"]


def smk(workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run Snakemake on the repository's workflow with ``workdir`` as working directory (stdout+stderr merged)."""
    cmd = [*_snakemake_cmd(), "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
           "--profile", str(PROFILE), "--cores", "2"]  # fmt: skip
    cmd += list(args)
    if configfile is not None:  # last: --configfile takes several values and would swallow targets
        cmd += ["--configfile", str(configfile)]
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=env)  # fmt: skip


# the rules whose jobs resume saved training (their scripts call stochattn.provenance.resume_checkpoint)
RESUMING_RULES = {
    "train_backbone", "calibrate_sa", "run_method", "run_swag", "uci_candidate", "multiswag_component", "ett_adapt",
    "ett_calibrate_sa", "ett_method", "ett_swag", "ett_candidate", "ett_select", "ett_select_swag",
    "ett_multiswag_member", "era5_adapt", "era5_calibrate_sa", "era5_method", "era5_swag", "era5_candidate",
    "era5_select", "era5_select_swag", "era5_multiswag_member",
}  # fmt: skip


def assert_resumed_jobs_record_their_earlier_attempts(output: str) -> None:
    """Every job of a rule whose jobs resume declares the log ``attempts`` beside its own benchmark record (where
    stochattn.resources.read_benchmarks looks for it; a ``use rule ... with:`` that moves the benchmark moves it too),
    and no other job does."""
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?=^\S|\Z)", output, re.M | re.S)
    seen = set()
    for rule, body in jobs:
        logs = re.search(r"^\s+log: (.*)$", body, re.M)
        bench = re.search(r"^\s+benchmark: (\S+)\.tsv$", body, re.M)
        attempts = [p for p in (logs.group(1).split(", ") if logs else []) if p.endswith(".attempts.json")]
        if rule in RESUMING_RULES:
            assert bench and attempts == [bench.group(1) + ".attempts.json"], (rule, body)
            seen.add(rule)
        else:
            assert not attempts, (rule, body)
    assert seen, "no job of a rule that resumes was planned"


def job_stats(output: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake run or dry run as {rule: count} (without 'total')."""
    m = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\n(?:\n|$)", output, re.S)
    assert m, f"no job stats in the output:\n{output[-3000:]}"
    stats = {}
    for line in m.group(1).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            stats[parts[0]] = int(parts[1])
    stats.pop("total", None)
    return stats


def write_config(path: Path, base: Path | None = None, **updates) -> Path:
    """A config file: ``base`` (a YAML file) updated key by key (nested mappings merged) with ``updates``."""
    cfg = yaml.safe_load(base.read_text()) if base is not None else {}

    def merge(a, b):
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v

    merge(cfg, updates)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def n_splits(dataset: str, splits: int) -> int:
    return min(splits, 5 if dataset == "protein" else 20)


# ------------------------------------------------------------------------------------------------------------------
# names: the workflow's lists agree with the library's
# ------------------------------------------------------------------------------------------------------------------
def test_names_agree_with_library():
    from stochattn.data.uci import UCI_DATASETS
    from stochattn.experiments import uci

    common = (REPO / "rules" / "common.smk").read_text()

    def literal(name):
        m = re.search(rf"^{name} = (\[.*?\])", common, re.M)
        assert m, f"{name} not found in rules/common.smk"
        return ast.literal_eval(m.group(1))

    assert literal("ALL_METHODS") == list(uci.METHODS) == RUNS
    assert literal("BACKBONE_METHODS") == list(uci.BACKBONE_METHODS)
    assert literal("UCI_SEARCH_METHODS") == list(uci.SEARCH_METHODS) == ["mc_dropout", "ivon", "hsa"]
    m = re.search(r"^DERIVED_METHODS = (\{.*?\})", common, re.M)
    assert m and ast.literal_eval(m.group(1)) == uci.DERIVED_METHODS == {"sa_match": "sa"}
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    assert schema["$defs"]["dataset"]["enum"] == list(UCI_DATASETS) == ALL_DATASETS
    assert schema["$defs"]["method"]["enum"] == list(uci.RUN_METHODS) == ALL_METHODS
    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert paper["datasets"] == ALL_DATASETS and paper["methods"] == ALL_METHODS
    assert paper["splits"] == 20 and paper["num_samples"] == 19
    assert paper["method_params"]["multiswag"]["components"] == 10
    assert (paper["model"]["n_blocks"], paper["model"]["d_block"]) == (3, 192)


# ------------------------------------------------------------------------------------------------------------------
# dry runs
# ------------------------------------------------------------------------------------------------------------------
def test_dry_run_paper_protocol(tmp_path):
    """config/config.yaml: every rule appears; 20 splits x 8 data sets (5 for protein) x 6 methods metrics; every
    rule's memory request covers the rehearsal's measured peak scaled to the paper's caps, every GPU rule's runtime the
    measured per-step cost of its training."""
    # the retries of ./slurm: a training longer than cluster.max_runtime_hours resumes in a second attempt
    res = smk(tmp_path, "-n", "--retries", "2")
    assert res.returncode == 0, res.stdout[-5000:]
    assert_requests_cover_the_measured_peaks(res.stdout, REPO)
    assert_gpu_runtimes_cover_the_measured_work(res.stdout, REPO)
    assert_resumed_jobs_record_their_earlier_attempts(res.stdout)
    stats = job_stats(res.stdout)
    n_runs = sum(n_splits(d, 20) for d in ALL_DATASETS)
    assert n_runs == 7 * 20 + 5
    toy = len(ALL_METHODS)
    assert stats == {
        "fetch_uci": 8,
        "prepare_uci": n_runs,
        "prepare_toy": 1,
        "train_backbone": n_runs + 1,
        "calibrate_sa": n_runs + 1,
        "run_method": (n_runs + 1) * (toy - 2),
        "run_swag": n_runs + 1,  # SWAG keeps its posterior as MultiSWAG's component 0
        "multiswag_component": (n_runs + 1) * 9,  # one job per MultiSWAG component 1..L-1 (L = 10)
        # one job per candidate of MC Dropout's grid (4), IVON's (4) and HSA's (2)
        "uci_candidate": (n_runs + 1) * (4 + 4 + 2),
        "evaluate": n_runs,  # one job per split evaluates all of its runs
        "uci_table": len(TABLES),
        "uci_pit_figure": 8,
        "uci_sharpness_figure": 8,
        "uci_sharpness_grid": 1,  # the paper's six-panel figure
        "uci_yacht_appendix": 1,
        "uci_cost_figure": 1,
        "teaser_sinusoid": 1,
        # the ETT slice (4 data sets x 2 horizons) on the public TimesFM 2.5 checkpoint: no stand-in pretraining
        "fetch_ett": 4,
        "ett_fetch_checkpoint": 1,
        "ett_prepare": 8,
        "ett_adapt": 8,
        "ett_calibrate_sa": 8,
        # one job per validation-grid candidate (SWAG 3 + IVON 5 + Contextual Dropout 4 + HSA 2 rates / settings), then
        # one selection job per searched method (ett_select_swag: SWAG-LoRA keeps its posterior as MultiSWAG's member 0)
        "ett_candidate": 8 * 14,
        "ett_select": 8 * 3,
        "ett_select_swag": 8,
        "ett_method": 8,  # MultiSWAG-LoRA pools its members
        "ett_multiswag_member": 8 * 9,  # one job per MultiSWAG-LoRA member 1..L-1 (L = 10)
        "ett_evaluate": 8,
        "ett_table": 7,
        "ett_figure": 3,
        # the ERA5 slice on WeatherBench and the official ClimaX checkpoint: no stand-in, no pretraining
        "era5_fetch": 1,
        "era5_fetch_checkpoint": 1,
        "era5_preprocess": 1,
        "era5_prepare": 1,
        "era5_adapt": 1,
        "era5_calibrate_sa": 1,
        "era5_candidate": 14,
        "era5_select": 3,
        "era5_select_swag": 1,
        "era5_method": 1,
        "era5_multiswag_member": 9,
        "era5_analyses_sweep": 1,
        "era5_analyses_bo": 5 * 2,  # one job per BO seed and nu range
        "era5_analyses": 1,  # gathers them
        "era5_evaluate": 1,
        "era5_table": 6,
        "era5_figure": 13,
        "paper_comparison": 1,  # the reproduction report over every slice's tables
        "teaser": 1,  # the teaser's three panels in one file
        "all": 1,
    }
    out = res.stdout
    # no UCI job asks for more than a day (the row-count cost model, minutes): MultiSWAG runs one job per component;
    # the ETT / ERA5 GPU jobs need at most a day on the GPU that measured their step costs (asserted above)
    runtimes = [int(r) for rule, r in re.findall(r"rule (\w+):.*?runtime=(\d+)", out, re.S)
                if not rule.startswith(("ett_", "era5_"))]  # fmt: skip
    assert runtimes and max(runtimes) < 24 * 60, max(runtimes)
    assert "results/uci/protein/split4/multiswag/components/9.pt" in out
    assert "results/uci/protein/split4/multiswag/metrics.json" in out
    assert "results/uci/protein/split5/" not in out
    assert "results/uci/concrete/split19/sa/calibration.json" in out
    assert "results/uci/concrete/split19/sa_match/metrics.json" in out
    for name in TABLES:
        assert f"results/tables/{name}.tex" in out
    assert not (tmp_path / "results").exists(), "a dry run must not write results"

    targets = smk(tmp_path, "--list-target-rules")
    assert targets.returncode == 0, targets.stdout
    listed = set(targets.stdout.split())
    assert {"all", "uci", "toy", "ett", "era5", "climax", *(f"uci_{d}" for d in ALL_DATASETS),
            *(f"ett_{d}" for d in ("ETTh1", "ETTh2", "ETTm1", "ETTm2"))} <= listed  # fmt: skip
    rules = smk(tmp_path, "--list-rules")
    assert set(PIPELINE_RULES) <= set(rules.stdout.split())


def test_dry_run_quick_config(tmp_path):
    """config/quick.yaml: all eight data sets, 2 splits (1 for the four large ones), the shared mirror; one data set
    alone via uci_yacht."""
    res = smk(tmp_path, "-n", "--quiet", "rules", configfile=REPO / "config" / "quick.yaml")
    assert res.returncode == 0, res.stdout[-5000:]
    stats = job_stats(res.stdout)
    splits = 4 * 2 + 4 * 1  # kin8nm, naval, power, protein: 1 split (dataset_overrides)
    assert stats["evaluate"] == splits
    assert stats["fetch_uci"] == 8 and stats["train_backbone"] == splits + 1
    one = smk(tmp_path, "-n", "uci_yacht", "--quiet", "rules", configfile=REPO / "config" / "quick.yaml")
    assert one.returncode == 0, one.stdout[-3000:]
    stats = job_stats(one.stdout)
    assert stats["evaluate"] == 2 and stats["fetch_uci"] == 1
    assert "uci_table" not in stats and "teaser_sinusoid" not in stats
    path = smk(tmp_path, "-n", "results/uci/energy/split1/sa/metrics.json", configfile=REPO / "config" / "quick.yaml")
    assert path.returncode == 0, path.stdout[-3000:]
    # one split's evaluation scores all of its runs (every baseline is matched to SA's coverage)
    split_jobs = {"fetch_uci": 1, "prepare_uci": 1, "train_backbone": 1, "calibrate_sa": 1, "run_swag": 1,
                  "run_method": len(ALL_METHODS) - 2, "multiswag_component": 1, "uci_candidate": 3 + 2 + 2,
                  "evaluate": 1}  # fmt: skip
    assert job_stats(path.stdout) == split_jobs
    # sa_match comes out of the same calibrate_sa job; its evaluation reads SA's samples as the coverage reference
    match = smk(
        tmp_path, "-n", "results/uci/energy/split1/sa_match/metrics.json", configfile=REPO / "config" / "quick.yaml"
    )
    assert match.returncode == 0, match.stdout[-3000:]
    assert job_stats(match.stdout) == split_jobs
    assert "results/uci/energy/split1/sa/samples.npz" in match.stdout


def test_grids_fitted_one_candidate_a_job(tmp_path):
    """MC Dropout's, IVON's and HSA's grids: one uci_candidate job per candidate, their files the run_method job's
    inputs (it chooses and samples, under its own code hash); only MC Dropout's candidate at the backbone's own rates
    waits for the backbone; a grid of one candidate stays one job."""
    targets = [f"results/uci/yacht/split0/{m}/meta.json" for m in ("mc_dropout", "ivon", "hsa")]
    res = smk(tmp_path, "-n", "-p", *targets, configfile=REPO / "config" / "test.yaml")
    assert res.returncode == 0, res.stdout[-3000:]
    assert job_stats(res.stdout) == {"fetch_uci": 1, "prepare_uci": 1, "train_backbone": 1, "uci_candidate": 6,
                                     "run_method": 3}  # fmt: skip
    jobs = {}  # (rule, first output) -> its inputs
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", res.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m and "output: " in block:
            inputs = re.search(r"input: (.*)", block)
            jobs[m.group(1), re.search(r"output: ([^,\s]+)", block).group(1)] = inputs.group(1) if inputs else ""
    for method in ("mc_dropout", "ivon", "hsa"):
        inputs = jobs["run_method", f"results/uci/yacht/split0/{method}/samples.npz"]
        assert all(f"{method}/candidates/{k}.pt" in inputs for k in (0, 1)), inputs
    candidates = {out: inputs for (rule, out), inputs in jobs.items() if rule == "uci_candidate"}
    assert len(candidates) == 6
    with_backbone = sorted(out[: -len(".pt")] for out, v in candidates.items() if "backbone/model.pt" in v)
    assert with_backbone == ["results/uci/yacht/split0/mc_dropout/candidates/0"], candidates  # test.yaml: {} first
    one = write_config(tmp_path / "one.yaml", base=REPO / "config" / "test.yaml",
                       method_params={"ivon": {"grid": [{"hess_init": 0.3, "ess_factor": 200.0}]}})  # fmt: skip
    res = smk(tmp_path, "-n", "results/uci/yacht/split0/ivon/meta.json", configfile=one)
    assert res.returncode == 0, res.stdout[-3000:]
    assert job_stats(res.stdout) == {"fetch_uci": 1, "prepare_uci": 1, "run_method": 1}


def test_slurm_profile_requests_gpus_for_training_and_sampling(tmp_path):
    """./slurm named by its path from another folder (dry run, no cluster needed): its partition file resolves
    beside it, a GPU for the train/sample rules only (declared by the rules), the rules' own runtime estimates."""
    cmd = [*_snakemake_cmd(), "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "--profile",
           str(REPO / "slurm"), "-n", "--configfile", str(REPO / "config" / "test.yaml")]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:]
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", res.stdout)
    seen = set()
    for block in blocks:
        m = re.match(r"(?:local)?rule (\w+):", block)
        r = re.search(r"resources: (.*)", block)
        if not m or not r:
            continue
        rule, resources = m.group(1), r.group(1)
        seen.add(rule)
        gpu = "gpu=1" in resources
        model_rules = ("train_backbone", "calibrate_sa", "run_method", "run_swag", "multiswag_component",
                       "uci_candidate")  # fmt: skip
        assert gpu == (rule in model_rules), (rule, resources)
        assert "runtime=" in resources and "slurm_partition" not in resources  # the plugin picks it per job
    assert {"train_backbone", "calibrate_sa", "run_method", "evaluate", "prepare_uci"} <= seen


# ------------------------------------------------------------------------------------------------------------------
# bad configuration: a clear error at parse time, nothing written
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "updates, message",
    [
        ({"splits": -1}, "-1 is less than the minimum of 1"),
        ({"methods": ["sa", "deep_ensemble"]}, "'deep_ensemble' is not one of"),
        ({"datasets": ["atl antis"]}, "'atl antis' does not match"),  # unknown names: test_custom_dataset.py
        ({"num_samples": 1}, "1 is less than the minimum of 4"),
        ({"model": {"d_block": "wide"}}, "'wide' is not of type 'integer'"),
        ({"method_params": {"swag": {"learning_rate": 0.1}}}, "'learning_rate' was unexpected"),
    ],
)
def test_schema_violation_is_a_clear_error(tmp_path, updates, message):
    cfg = write_config(tmp_path / "bad.yaml", **updates)
    res = smk(tmp_path / "work", "-n", configfile=cfg)
    assert res.returncode != 0
    assert "Error validating config file" in res.stdout and message in res.stdout, res.stdout[-3000:]
    assert not (tmp_path / "work" / "results").exists()


def test_unknown_dataset_in_a_target_path(tmp_path):
    res = smk(tmp_path, "-n", "results/uci/atlantis/split0/sa/metrics.json")
    assert res.returncode != 0
    assert "results/uci/atlantis/split0/sa/metrics.json" in res.stdout and "MissingRule" in res.stdout, res.stdout


# ------------------------------------------------------------------------------------------------------------------
# bad data: fetch fails naming the file, and no results/data/... output remains
# ------------------------------------------------------------------------------------------------------------------
@needs_mirror
@pytest.mark.slow
def test_corrupt_mirror_fails_naming_the_file(tmp_path):
    mirror = tmp_path / "mirror"
    src = MIRROR / "UCI_Datasets" / "yacht" / "data"
    shutil.copytree(src, mirror / "UCI_Datasets" / "yacht" / "data")
    bad = mirror / "UCI_Datasets" / "yacht" / "data" / "index_test_7.txt"
    bad.write_text(bad.read_text() + "1\n")
    cfg = write_config(tmp_path / "c.yaml", datasets=["yacht"], splits=1,
                       data={"mirrors": [str(mirror)], "allow_download": False})  # fmt: skip
    work = tmp_path / "work"
    res = smk(work, "results/uci/yacht/split0/prepared.npz", configfile=cfg)
    assert res.returncode != 0
    assert "index_test_7.txt" in res.stdout and "checksum mismatch" in res.stdout, res.stdout[-4000:]
    assert not (work / "results" / "data" / "uci" / "yacht").exists()
    assert not (work / "results" / "uci").exists()


@pytest.mark.slow
def test_missing_mirror_without_network_is_a_clear_error(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", datasets=["yacht"], splits=1,
                       data={"mirrors": [str(tmp_path / "no_such_mirror")], "allow_download": False})  # fmt: skip
    work = tmp_path / "work"
    res = smk(work, "results/data/uci/yacht", configfile=cfg)
    assert res.returncode != 0
    out = res.stdout
    assert "no_such_mirror" in out and "folder does not exist" in out and "allow_download=False" in out, out[-4000:]
    assert not (work / "results" / "data" / "uci" / "yacht").exists()


# ------------------------------------------------------------------------------------------------------------------
# tiny end-to-end run
# ------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """config/test.yaml run to completion in a temporary directory (module-scoped: ~1-2 min on 2 cores)."""
    if not HAVE_MIRROR:
        pytest.skip(f"offline data mirror {MIRROR} not present")
    root = tmp_path_factory.mktemp("tiny")
    cfg = root / "test.yaml"
    shutil.copy(REPO / "config" / "test.yaml", cfg)
    work = root / "work"
    res = smk(work, configfile=cfg)
    assert res.returncode == 0, res.stdout[-6000:]
    return {"root": root, "work": work, "cfg": cfg, "output": res.stdout}


def _prov_ok(target: Path, work: Path) -> dict:
    prov = Path(str(target) + ".prov.json")
    assert prov.is_file(), f"missing provenance {prov}"
    rec = json.loads(prov.read_text())
    for key in ("rule", "inputs", "outputs", "config", "seeds", "git_commit", "git_dirty", "packages", "host",
                "device", "started", "finished"):  # fmt: skip
        assert key in rec, f"{prov} lacks {key!r}"
    assert rec["inputs"], f"{prov} lists no inputs"
    for item in rec["inputs"]:
        assert item["sha256"] == sha256(work / item["path"]), f"{prov}: stale hash of {item['path']}"
    assert rec["git_commit"] != "unknown" or not (REPO / ".git").exists()
    return rec


@pytest.mark.slow
def test_tiny_run_outputs_follow_the_contract(tiny_run):
    work = tiny_run["work"]
    cfg = yaml.safe_load(tiny_run["cfg"].read_text())
    S = cfg["num_samples"]
    run = work / "results" / "uci" / "yacht" / "split0"
    n_test = None
    for method in RUNS:
        d = np.load(run / method / "samples.npz")
        assert set(d.files) == {"y", "point", "samples", "cal_y", "cal_point", "cal_samples", "sigma_y"}
        n = d["y"].shape[0]
        n_test = n_test or n
        assert n == n_test == 31  # Gal's yacht split 0 has 31 test points
        assert d["point"].shape == (n,) and d["samples"].shape == (S, n)
        n_cal = d["cal_y"].shape[0]
        assert d["cal_point"].shape == (n_cal,) and d["cal_samples"].shape == (S, n_cal)
        assert d["sigma_y"].shape == () and float(d["sigma_y"]) > 0
        assert np.all(np.isfinite(d["samples"])) and np.ptp(d["samples"], axis=0).max() > 0
        meta = json.loads((run / method / "meta.json").read_text())
        assert meta["method"] == method and {"train", "calibrate", "predict"} <= set(meta["seconds"])
        metrics = json.loads((run / method / "metrics.json").read_text())
        assert (metrics["dataset"], metrics["split"], metrics["method"]) == ("yacht", 0, method)
        for block in ("native", "scaled"):
            assert {"rmse", "nrmse", "crps", "coverage_95", "width_95", "w1"} <= set(metrics[block])
        assert len(metrics["pit_native"]) == n
        # every run has a matched block; SA's is native, the others' reach SA's calibration coverage within 1/n_cal
        gap = metrics["matched"]["cal_coverage_95"] - metrics["matched"]["target_coverage_95"]
        assert 0 <= gap < 1 / n_cal + 1e-12
        assert (metrics["matched"]["factor_95"] == 1.0) == (method == "sa")
    cal = json.loads((run / "sa" / "calibration.json").read_text())
    for method, op in (("sa", "loss_argmin"), ("sa_match", "surrogate")):
        meta = json.loads((run / method / "meta.json").read_text())
        assert meta["operating_point"] == op and meta["nu"] == cal["runs"][method]["nu"]
        assert meta["calibration"] == "results/uci/yacht/split0/sa/calibration.json"
    assert (run / "sa" / "calibration.json").is_file()
    assert (run / "backbone" / "model.pt").is_file()
    # each training keeps its completed state until the run succeeds; then the onsuccess hook deletes it
    assert not list((work / "results").rglob(".*.resume-*.pt"))

    for name in TABLES:
        csv = work / "results" / "tables" / f"{name}.csv"
        header = csv.read_text().splitlines()[0]
        assert header == "dataset,method,metric,value,std,n"
        for ext in ("csv", "md", "tex"):
            rec = _prov_ok(csv.with_suffix(f".{ext}"), work)
            assert rec["rule"] == "uci_table"
            assert len(rec["inputs"]) == len(RUNS)  # one metrics.json per run
    master = (work / "results" / "tables" / "uci_master.csv").read_text()
    assert "yacht,sa,pi95_width_ratio" in master and "yacht,sa_match,pi95_width_ratio" in master
    md = (work / "results" / "tables" / "uci_master.md").read_text()
    assert "Reduced from the paper: " in md and "splits=1 (paper: 20, 5 for protein)" in md  # reductions reach captions

    for name in FIGURES:
        png = work / "results" / "figures" / f"{name}.png"
        pdf = png.with_suffix(".pdf")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
        for f in (png, pdf):
            rec = _prov_ok(f, work)
            assert rec["outputs"][0]["path"] == str(f.relative_to(work))
    teaser = _prov_ok(work / "results" / "figures" / "teaser_sinusoid.png", work)
    assert any(i["path"].startswith("results/toy/sinusoid/split0/") for i in teaser["inputs"])
    assert (work / "logs" / "uci" / "yacht" / "split0" / "train_backbone.log").is_file()


@pytest.mark.slow
def test_candidate_jobs_record_one_methods_search(tiny_run):
    """MC Dropout's, IVON's and HSA's candidate jobs and their choosing run_method jobs: every candidate's record in
    grid order with its validation scores, the run's selection made of them, and each job's code hash covering its
    own method's search only (a change to HSA's search does not rerun IVON's jobs)."""
    from stochattn.provenance import code_closure, code_version

    run = tiny_run["work"] / "results" / "uci" / "yacht" / "split0"
    backbone = {"results/uci/yacht/split0/backbone/model.pt", "results/uci/yacht/split0/backbone/meta.json"}
    searches = ("mc_dropout", "ivon", "hsa")
    for method in searches:
        records = [json.loads((run / method / "candidates" / f"{k}.json").read_text()) for k in range(2)]
        meta = json.loads((run / method / "meta.json").read_text())
        assert [r["index"] for r in records] == [0, 1]
        assert [r["candidate"] for r in records] == meta["selection"]["grid"]
        assert [r["val_crps"] for r in records] == meta["selection"]["val_crps"]
        assert meta["provenance"]["rule"] == "run_method"
        inputs = {i["path"] for i in meta["provenance"]["inputs"]}
        fitted = {f"results/uci/yacht/split0/{method}/candidates/{k}.{e}" for k in (0, 1) for e in ("pt", "json")}
        own = backbone if method == "mc_dropout" else set()  # MC Dropout's run samples the backbone if it is chosen
        assert inputs == {"results/uci/yacht/split0/prepared.npz", *fitted, *own}
        for code in (records[0]["provenance"]["code"], meta["provenance"]["code"]):
            closure = code_closure(code["entries"], code["exclude"])
            assert f"stochattn.experiments.uci:_{method}_search" in closure
            for other in set(searches) - {method}:
                assert f"stochattn.experiments.uci:_{other}_search" not in closure
                assert f"stochattn.experiments.methods:{other}_search" not in closure
            assert code_version(code["entries"], code["exclude"]) == code  # what the audit recomputes
    # test.yaml's MC Dropout grid: the backbone's own rates (candidate 0: the backbone, read by its job only) and 0.05
    records = [json.loads((run / "mc_dropout" / "candidates" / f"{k}.json").read_text()) for k in range(2)]
    assert [backbone <= {i["path"] for i in r["provenance"]["inputs"]} for r in records] == [True, False]


@pytest.mark.slow
def test_second_invocation_does_nothing(tiny_run):
    res = smk(tiny_run["work"], configfile=tiny_run["cfg"])
    assert res.returncode == 0, res.stdout[-3000:]
    assert "Nothing to be done" in res.stdout, res.stdout[-3000:]
    assert "stale" not in res.stdout and not (tiny_run["work"] / "results/.stale").exists()  # stochattn.stale


@pytest.mark.slow
def test_changing_a_method_parameter_reruns_only_its_dependents(tiny_run):
    # MultiSWAG's component 0 is the SWAG run: a SWAG setting that MultiSWAG does not repeat is a parse-time error
    cfg = write_config(tiny_run["root"] / "swag_lr.yaml", base=tiny_run["cfg"], method_params={"swag": {"lr": 0.02}})
    res = smk(tiny_run["work"], "-n", configfile=cfg)
    assert res.returncode != 0 and "multiswag must repeat swag's settings" in res.stdout, res.stdout[-3000:]
    cfg = write_config(tiny_run["root"] / "swag_lr.yaml", base=tiny_run["cfg"],
                       method_params={"swag": {"lr": 0.02}, "multiswag": {"lr": 0.02}})  # fmt: skip
    res = smk(tiny_run["work"], "-n", configfile=cfg)
    assert res.returncode == 0, res.stdout[-3000:]
    stats = job_stats(res.stdout)
    # uci swag + toy swag; uci MultiSWAG's component 1 and pooling; the uci runs' evaluation; every table and figure
    # downstream of them
    assert stats.pop("run_swag") == 2 and stats.pop("multiswag_component") == 1, stats
    assert stats.pop("run_method") == 1 and stats.pop("evaluate") == 1, stats
    assert set(stats) <= {"uci_table", "uci_pit_figure", "uci_sharpness_figure", "uci_yacht_appendix",
                          "uci_cost_figure", "teaser_sinusoid", "teaser", "paper_comparison", "uci_sharpness_grid",
                          "all"}, stats  # fmt: skip
    methods = set(re.findall(r"method=(\w+)", res.stdout))
    assert methods == {"swag", "multiswag"}, methods
    # the unchanged config still has nothing to do
    assert "Nothing to be done" in smk(tiny_run["work"], "-n", configfile=tiny_run["cfg"]).stdout


@pytest.mark.slow
def test_html_report(tiny_run):
    out = tiny_run["root"] / "report.html"
    res = smk(tiny_run["work"], "--report", str(out), configfile=tiny_run["cfg"])
    assert res.returncode == 0, res.stdout[-3000:]
    assert out.is_file() and out.stat().st_size > 10_000


@pytest.mark.slow
def test_uci_paper_slice_report_is_remade_from_its_kept_records(tiny_run, tmp_path, load_script):
    """benchmarks/uci_paper_slice.py --keep copies what its report read (metrics.json, meta.json, benchmark records)
    into RECORDS/<dataset>/; --partial on that folder alone (no workdir, no samples) prints the same report."""
    script = REPO / "benchmarks" / "uci_paper_slice.py"
    records = tmp_path / "records"

    def report(work: Path, out: Path, *extra: str) -> str:
        res = subprocess.run([sys.executable, str(script), str(work), "--partial", "--datasets", "yacht",
                              "--out", str(out), *extra], capture_output=True, text=True)  # fmt: skip
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return out.read_text()

    first = report(tiny_run["work"], tmp_path / "a" / "slice.md", "--keep", str(records))
    kept = records / "yacht"
    assert sorted(p.name for p in kept.iterdir()) == ["benchmarks", "uci"]
    for method in RUNS:
        for name in ("metrics.json", "meta.json"):
            run = Path("uci") / "yacht" / "split0" / method / name
            assert (kept / run).read_bytes() == (tiny_run["work"] / "results" / run).read_bytes()
    assert (kept / "benchmarks" / "train_backbone" / "uci" / "yacht" / "split0.tsv").is_file()
    from stochattn.provenance import library_git_state

    for name in ("meta.json", "metrics.json"):  # a kept record names the commit its job ran (and the code hash)
        prov = json.loads((kept / "uci" / "yacht" / "split0" / "sa" / name).read_text())["provenance"]
        assert prov["git_commit"] == library_git_state()["git_commit"] and len(prov["code"]["sha256"]) == 64
    assert not list(kept.rglob("*.npz")) and not list(records.glob(".*"))  # no samples; no temporary folder left
    assert "**yacht**" in first and "| SA |" in first and "CPU-hours wall" in first
    assert report(kept, tmp_path / "b" / "slice.md") == first
    report(tiny_run["work"], tmp_path / "c" / "slice.md", "--keep", str(records))  # a second keep replaces the first
    assert sorted(p.name for p in records.iterdir()) == ["yacht"]
    other = kept / "uci" / "yacht" / "split7" / "sa" / "metrics.json"  # another run's record (another workdir) stays
    other.parent.mkdir(parents=True)
    other.write_bytes((kept / "uci" / "yacht" / "split0" / "sa" / "metrics.json").read_bytes())
    report(tiny_run["work"], tmp_path / "d" / "slice.md", "--keep", str(records))
    assert other.is_file() and not list(records.rglob("*.tmp"))
    report(tiny_run["work"], tmp_path / "e" / "slice.md", "--compare", str(records))  # the run against its records
    compared = (tmp_path / "e" / "slice_vs_records.md").read_text()
    n = len(RUNS) + 1  # and the backbone
    assert f"{n} runs in both: {n} identical, 0 same values, 0 last digits, 0 differs." in compared, compared
    slice_script = load_script(script)  # the target it puts first is the path the evaluate rule writes
    cfg = {"datasets": ["yacht"], "methods": ["sa", "swag"], "splits": 1, "dataset_overrides": {}}
    assert slice_script.first_open_splits(tiny_run["work"], cfg) == []  # split 0 evaluated: nothing left to put first
    assert slice_script.first_open_splits(tiny_run["work"], {**cfg, "dataset_overrides": {"yacht": {"splits": 3}}}) == [
        "results/uci/yacht/split1/sa/metrics.json"]  # fmt: skip


@pytest.mark.slow
def test_uci_bias_measures_the_training_offset_of_each_point(tiny_run, tmp_path):
    """benchmarks/uci_bias.py --training-offset: each split's backbone residual on its training part (the same number
    as recomputed here from the prepared split and the saved backbone), the SWA mean's and the mean of MultiSWAG's
    components' SWA means (recomputed here too), each also with dropout on, and W1 with that offset removed for the
    methods whose point is one of them (SA at both points: the backbone's; SWAG: the SWA mean's; IVON: its chosen
    candidate's mean network) and for MultiSWAG (its samples' centre, the mean of its SWA means); not where a
    component is missing."""
    from stochattn.experiments.uci import load_backbone, load_prepared
    from stochattn.training import predict

    out = tmp_path / "bias.json"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "uci_bias.py"), str(tiny_run["work"]), "--datasets",
                          "yacht", "--methods", "sa", "sa_match", "swag", "multiswag", "ivon", "--training-offset",
                          "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    split = tiny_run["work"] / "results" / "uci" / "yacht" / "split0"
    prep = load_prepared(split / "prepared.npz")
    net = load_backbone(prep, split / "backbone" / "model.pt")
    expected = float(np.mean(prep["y_train"] - predict(net, prep["x_train"]).numpy().ravel()))
    report = json.loads(out.read_text())["yacht"]
    measured = report["splits"][0]["training_residual"]
    assert measured["backbone"]["mean"] == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert measured["backbone"]["n"] == measured["swa_mean"]["n"] == len(prep["y_train"])
    assert measured["backbone_dropout_on"]["mean"] != measured["backbone"]["mean"]  # the network as trained
    assert measured["swa_mean"]["mean"] != measured["backbone"]["mean"]
    from stochattn.experiments.methods import swa_mean_network, swag_phase
    from stochattn.experiments.uci import _load_component, multiswag_component_networks
    from stochattn.selection import ValidationSplit

    # MultiSWAG's components at the candidate its run chose on the pooled validation samples: component 0 is the
    # SWAG run (its file where SWAG chose that candidate too, else its phase repeated), component 1 its file's
    chosen = json.loads((split / "multiswag" / "meta.json").read_text())["selection"]["chosen"]
    swag_record = json.loads((split / "swag" / "posterior.json").read_text())
    if swag_record["candidate"] == chosen["candidate"]:
        member, swag, _ = _load_component(prep, split / "swag" / "posterior.pt")
    else:
        member, swag = swag_phase(net, chosen["candidate"], ValidationSplit.from_prepared(prep), swag_record["seed"],
                                  False)  # fmt: skip
    component1 = multiswag_component_networks(prep, split / "multiswag" / "components" / "1.pt", chosen["candidate"])
    networks = [(member, swa_mean_network(member, swag)), component1]
    swa_means = [predict(m, prep["x_train"]).numpy().ravel() for _, m in networks]
    last_iterates = [predict(n, prep["x_train"]).numpy().ravel() for n, _ in networks]
    expected = float(np.mean(prep["y_train"] - np.mean(swa_means, axis=0)))
    assert measured["swa_means"]["mean"] == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert measured["swa_means"]["mean"] != measured["swa_mean"]["mean"]
    assert measured["swa_means_dropout_on"]["mean"] != measured["swa_means"]["mean"]
    per_component = measured["swa_means_per_component"]
    assert [c["eval"]["mean"] for c in per_component] == pytest.approx(
        [float(np.mean(prep["y_train"] - s)) for s in swa_means], rel=1e-6, abs=1e-9)  # fmt: skip
    if swag_record["candidate"] == chosen["candidate"]:
        assert per_component[0]["eval"]["mean"] == measured["swa_mean"]["mean"]  # SWAG's own is component 0
    assert [c["last_iterate"]["mean"] for c in per_component] == pytest.approx(
        [float(np.mean(prep["y_train"] - s)) for s in last_iterates], rel=1e-6, abs=1e-9)  # fmt: skip
    assert per_component[1]["last_iterate"]["mean"] != per_component[1]["eval"]["mean"]
    for name in ("backbone", "swa_mean", "swa_means"):
        assert f"{name} split0, training part" in res.stdout
    methods = report["methods"]
    assert methods["sa"]["point_model"] == methods["sa_match"]["point_model"] == ["backbone"]
    assert methods["swag"]["point_model"] == ["swa_mean"] and methods["multiswag"]["point_model"] == ["swa_means"]
    assert methods["ivon"]["point_model"] == ["ivon_mean"]  # its chosen candidate's file gives IVON's own point
    assert measured["ivon_mean_dropout_on"]["mean"] != measured["ivon_mean"]["mean"]
    for method in ("sa", "sa_match", "swag", "multiswag", "ivon"):
        assert {"w1_shifted", "pit_mean_z_shifted"} <= set(methods[method]["test"]["all"])
    missing = tmp_path / "missing"  # a component file gone: MultiSWAG's samples are not those of the models loaded
    shutil.copytree(tiny_run["work"] / "results", missing / "results")
    (missing / "results" / "uci" / "yacht" / "split0" / "multiswag" / "components" / "1.pt").unlink()
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "uci_bias.py"), str(missing), "--datasets",
                          "yacht", "--methods", "multiswag", "--training-offset", "--out", str(out)],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(out.read_text())["yacht"]["methods"]["multiswag"]["point_model"] == [None]
    assert "multiswag   (its point is none of" in res.stdout


@pytest.mark.slow
def test_nan_in_predictions_is_a_clear_error(tiny_run):
    """Runs last on the tiny run's files: a samples.npz with NaN makes evaluate fail and leaves no metrics."""
    work = tiny_run["work"]
    run = work / "results" / "uci" / "yacht" / "split0" / "mc_dropout"
    data = dict(np.load(run / "samples.npz"))
    data["samples"][0, 3] = np.nan
    with open(run / "samples.npz", "wb") as fh:  # newer than metrics.json: evaluate reruns
        np.savez(fh, **data)
    meta = json.loads((run / "meta.json").read_text())  # recorded as a run that drew the NaN records it (else
    meta["sha256"]["samples.npz"] = sha256(run / "samples.npz")  # evaluate refuses the file as modified)
    (run / "meta.json").write_text(json.dumps(meta))
    res = smk(work, str((run / "metrics.json").relative_to(work)), configfile=tiny_run["cfg"])
    assert res.returncode != 0
    assert "NaN or inf in 'samples'" in res.stdout and "mc_dropout" in res.stdout, res.stdout[-4000:]
    assert not (run / "metrics.json").exists()
