"""Runtime requests from Snakemake's benchmark records (stochattn.resources) and their use by the rules."""

import re

import pytest
import yaml

from stochattn import resources
from test_workflow import REPO, smk, write_config

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def record(root, rel, seconds, rss="NA"):
    path = root / f"{rel}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t{rss}\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n")


@pytest.fixture
def bench(tmp_path):
    root = tmp_path / "benchmarks"
    record(root, "train_backbone/uci/yacht/split0", 100.0, 300.5)
    record(root, "train_backbone/uci/yacht/split1", 250.0, 310.0)
    record(root, "train_backbone/uci/naval/split0", 1000.0)
    record(root, "run_method/uci/yacht/split0/ivon", 59.0)
    record(root, "multiswag_component/uci/yacht/split0/2", 61.0)
    record(root, "prepare_uci/yacht/split0", 3.0)
    return root


def test_estimates_per_family_and_per_data_set(bench):
    est = resources.runtime_estimates(bench, safety=2.0)
    assert est["train_backbone"] == {"n": 3, "median_s": 250.0, "max_s": 1000.0, "max_rss_mb": 310.0,
                                     "runtime_min": 34}  # fmt: skip
    assert set(est) == {"train_backbone", "run_method/ivon", "multiswag_component", "prepare_uci"}
    per = resources.dataset_estimates(bench, safety=2.0)
    # ceil(max seconds x 2 / 60): yacht 250 s -> 9 min, naval 1000 s -> 34 min; ivon 59 s -> 2; prepare 3 s -> 1
    assert per == {"train_backbone": {"yacht": 9, "naval": 34}, "run_method/ivon": {"yacht": 2},
                   "multiswag_component": {"yacht": 3}, "prepare_uci": {"yacht": 1}}  # fmt: skip
    with pytest.raises(ValueError, match="safety"):
        resources.dataset_estimates(bench, safety=0.5)


def test_a_resumed_job_counts_the_training_of_its_earlier_attempts(tmp_path):
    """A job that resumed saved training wrote ``<job>.attempts.json`` beside Snakemake's record of its last attempt:
    its wall clock, CPU time and per-data-set request count both; a record of checkpoints without CPU time adds the
    earlier wall clock at the last attempt's ratio of CPU time to wall clock; a record without one, or with an empty
    one, is the last attempt alone."""
    root = tmp_path / "benchmarks"
    for rel, wall, cpu in [("train_backbone/uci/naval/split0", 600.0, 540.0),
                           ("train_backbone/uci/naval/split1", 900.0, 800.0),
                           ("train_backbone/uci/naval/split2", 300.0, 290.0)]:  # fmt: skip
        path = root / f"{rel}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{wall}\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\t{cpu}\n")
    (root / "train_backbone/uci/naval/split0.attempts.json").write_text('{"earlier_seconds": 2400.0}')
    (root / "train_backbone/uci/naval/split1.attempts.json").write_text("")  # created by Snakemake, not written
    (root / "train_backbone/uci/naval/split2.attempts.json").write_text(
        '{"earlier_seconds": 1000.0, "earlier_cpu_seconds": 1900.0}')  # two threads in the earlier attempts
    rows = {r["split"]: r for r in resources.read_benchmarks(root)}
    assert (rows[0]["seconds"], rows[0]["attempt_seconds"], rows[0]["earlier_seconds"]) == (3000.0, 600.0, 2400.0)
    assert rows[0]["cpu_seconds"] == pytest.approx(540.0 + 2400.0 * 0.9)
    assert (rows[1]["seconds"], rows[1]["cpu_seconds"], rows[1]["earlier_seconds"]) == (900.0, 800.0, 0.0)
    assert (rows[2]["seconds"], rows[2]["cpu_seconds"]) == (1300.0, 2190.0)
    assert resources.dataset_estimates(root, safety=2.0) == {"train_backbone": {"naval": 100}}  # 3000 s x 2


def test_write_and_load_round_trip(bench, tmp_path, capsys):
    out = tmp_path / "runtime.yaml"
    assert resources.main([str(bench), "--write", str(out)]) == 0
    assert "train_backbone" in capsys.readouterr().out
    assert resources.load_dataset_estimates(out) == resources.dataset_estimates(bench)
    assert resources.load_dataset_estimates(None) == {}
    with pytest.raises(FileNotFoundError, match="--write"):
        resources.load_dataset_estimates(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"train_backbone": {"yacht": "ten"}}))
    with pytest.raises(ValueError, match="minutes"):
        resources.load_dataset_estimates(bad)
    assert resources.main([str(tmp_path / "empty")]) == 1


def test_rules_request_the_measured_runtime(tmp_path):
    """With config runtime_estimates, a measured (family, data set) request replaces the cost model's."""
    est = tmp_path / "runtime.yaml"
    est.write_text(yaml.safe_dump({"train_backbone": {"yacht": 7}, "run_method/swag": {"yacht": 11}}))
    cfg = write_config(tmp_path / "c.yaml", base=REPO / "config" / "test.yaml", runtime_estimates=str(est))
    res = smk(tmp_path / "work", "-n", "results/uci/yacht/split0/swag/samples.npz", configfile=cfg)
    assert res.returncode == 0, res.stdout[-3000:]
    jobs = dict(re.findall(r"rule (\w+):.*?resources: .*?runtime=(\d+)", res.stdout, re.S))
    assert jobs["train_backbone"] == "7" and jobs["run_swag"] == "11"  # SWAG: rule run_swag (family run_method)
    plain = smk(tmp_path / "work", "-n", "results/uci/yacht/split0/swag/samples.npz",
                configfile=write_config(tmp_path / "p.yaml", base=REPO / "config" / "test.yaml"))
    assert dict(re.findall(r"rule (\w+):.*?resources: .*?runtime=(\d+)", plain.stdout, re.S))["train_backbone"] != "7"


def test_measured_records_round_trip_and_scale_the_data_part(bench, tmp_path):
    data = tmp_path / "pairs.npz"
    data.write_bytes(b"0" * 2**20)  # 1 MB
    out = tmp_path / "measured.yaml"
    assert resources.main([str(bench), "--write-measured", str(out), "--data", f"train_backbone={data}",
                           "--note", "line one\nline two"]) == 0  # fmt: skip
    rec = resources.load_measured(out)
    assert rec["train_backbone"] == {"n": 3, "max_s": 1000.0, "max_rss_mb": 310.0, "data_mb": 1.0}
    assert out.read_text().startswith("# line one\n# line two\n")
    # 310 MB measured with 1 MB of data: at 101 MB of data, three more copies of 100 MB
    assert resources.memory_needed(rec["train_backbone"], 101.0) == pytest.approx(310.0 + 300.0)
    assert resources.pairs_mb(2, 47, cells=2**20 // 4 // 48) == pytest.approx(2.0, rel=1e-3)
    assert resources.windows_mb(2**17, 8) == 8.0


# -- the GPU cost model at the configuration's caps ------------------------------------------------------------------
COST = {"batch": 16, "eval_batch": 256, "train_step_s": 0.5, "ivon_step_s": 0.25, "forward_s": 2.56,
        "sa_forward_s": 5.12}  # fmt: skip
SIZES = resources.Sizes(train=160, val=100, cal=50, test=200)
TRAIN = {"batch_size": 16, "max_epochs": 3}


def test_work_is_priced_per_step_and_per_input():
    # 10 steps x 0.5 s, 4 stochastic steps x 0.5 s x (SA/det = 2), 8 IVON steps x 0.25 s, 256 inputs x 0.01 s,
    # 128 SA inputs x 0.02 s
    work = resources.Work(train_steps=10, stochastic_steps=4, ivon_steps=8, forward_inputs=256, sa_inputs=128)
    assert work.seconds(COST, 16) == pytest.approx(5 + 4 + 2 + 2.56 + 2.56)
    assert work.seconds(COST, 32) == pytest.approx(2 * (5 + 4 + 2) + 2.56 + 2.56)  # steps of twice the batch
    assert work.seconds(COST, 8) == pytest.approx(work.seconds(COST, 16))  # never below one measured step
    assert (2 * work).seconds(COST, 16) == pytest.approx(2 * work.seconds(COST, 16))
    assert resources.gpu_minutes(resources.Work(train_steps=120), COST, 16, factor=3, overhead_min=10) == 13
    with pytest.raises(ValueError, match="factor"):
        resources.gpu_minutes(work, COST, 16, factor=0.5)


def test_each_job_counts_its_steps_and_passes():
    """Closed-form counts at SIZES (10 steps per epoch of 16), S = 4."""
    adapt = resources.adapt_work(SIZES, TRAIN)
    assert (adapt.train_steps, adapt.forward_inputs) == (30, 3 * 100 + 2 * (100 + 200))
    ivon = resources.method_work("ivon", SIZES, {"grid": [{}, {}]}, TRAIN, 4)
    # 2 candidates x (3 epochs x 10 steps); val pass per epoch and 4 val samples each; the chosen: point + 4 samples
    assert ivon.ivon_steps == 60 and ivon.train_steps == 0
    assert ivon.forward_inputs == 2 * (3 * 100 + 4 * 100) + 5 * (200 + 50)
    hsa = resources.method_work("hsa", SIZES, {"grid": [{}], "max_epochs": 2}, TRAIN, 4)
    assert (hsa.stochastic_steps, hsa.sa_inputs, hsa.forward_inputs) == (20, 4 * 100 + 4 * 250, 2 * 100 + 250)
    swag_cfg = {"grid": [{}, {}, {}], "anneal_epochs": 1, "epochs": 2, "batch_size": 32}
    swag = resources.method_work("swag", SIZES, swag_cfg, TRAIN, 4, swag_scales=7)
    assert swag.train_steps == 3 * 3 * 5  # 3 candidates x 3 epochs x 5 steps of 32
    assert swag.forward_inputs == 3 * 5 * 100 + 100 + 5 * 250 + 7 * 4 * (100 + 200)
    sa_cfg = {"budget": 12, "num_batches": 4, "batch_size": 512, "num_passes": 16}
    sa = resources.method_work("sa", SIZES, sa_cfg, TRAIN, 4)
    assert sa.sa_inputs == 12 * 4 * 50 * 16 + 8 * 250  # a BO batch holds at most the 50 cal inputs
    multiswag_cfg = dict(swag_cfg, components=2)  # each component draws 2 of the 4 samples at each candidate
    member = resources.member_work(SIZES, multiswag_cfg, TRAIN, 4)
    adapter = resources.adapt_work(SIZES, TRAIN)
    assert member.train_steps == adapter.train_steps + 45  # a fresh adapter and a SWAG phase per candidate
    assert member.forward_inputs == adapter.forward_inputs + 3 * 2 * (100 + 200 + 50)
    pool = resources.method_work("multiswag", SIZES, multiswag_cfg, TRAIN, 4)  # member 0's draws: SWAG's job
    assert (pool.train_steps, pool.forward_inputs) == (0, 0)
    analyses = resources.analyses_work(SIZES, sa_cfg, {"nu_grid": [1, 2, 4], "bo_seeds": [0, 1],
                                                       "bo_second_range": [2, 512]}, 4)  # fmt: skip
    assert analyses.sa_inputs == 3 * 4 * 50 + 2 * 4 * 200 + 2 * 2 * 12 * 4 * 50 * 16
    with pytest.raises(ValueError, match="no cost model"):
        resources.method_work("mc_dropout", SIZES, {}, TRAIN, 4)


def test_step_costs_file_is_the_full_size_measurement(tmp_path):
    rec = resources.load_step_costs(REPO / "config" / "step_costs.json")
    assert {"climax", "timesfm_h96", "timesfm_h192"} <= set(rec["costs"]) and "H200" in rec["device"]
    bad = tmp_path / "costs.json"
    bad.write_text('{"costs": {"climax": {"batch": 16}}}')
    with pytest.raises(ValueError, match="lacks positive"):
        resources.load_step_costs(bad)
    bad.write_text('{"small": true, "costs": {"climax": ' + str(COST).replace("'", '"') + "}}")
    with pytest.raises(ValueError, match="reduced modules"):
        resources.load_step_costs(bad)


def test_runtime_request_is_bounded_and_refuses_work_that_cannot_fit():
    from stochattn.resources import QueueLimitError, runtime_request

    assert runtime_request(100, 1, 1440, job="j") == 100
    assert runtime_request(100, 2, 1440, job="j") == 200  # a retry doubles
    assert runtime_request(1000, 2, 1440, job="j") == 1440  # never above the bound, retries included
    with pytest.raises(QueueLimitError, match=r"ett_method \(x=1\): counted work 25.0 h \(steps 7\) exceeds"):
        runtime_request(1500, 1, 1440, job="ett_method (x=1)", work="steps 7")
    # a job that resumes from its last epoch may take several attempts of the bound, as many as the retries allow
    assert runtime_request(3000, 1, 1440, job="j", resumable=True, retries=2) == 1440
    assert runtime_request(3000, 3, 1440, job="j", resumable=True, retries=2) == 1440
    with pytest.raises(QueueLimitError, match="needs 3 attempts: set retries >= 2"):
        runtime_request(3000, 1, 1440, job="j", resumable=True, retries=1)


def test_model_job_without_its_gpu_fails_clearly():
    from types import SimpleNamespace

    from stochattn.provenance import check_model_job

    def job(gpu, gpus_per_job):
        return SimpleNamespace(rule="ett_swag", resources={"gpu": gpu} if gpu is not None else {},
                               config={"cluster": {"gpus_per_job": gpus_per_job}, "require_gpu": False})

    check_model_job(job(1, 1))
    check_model_job(job(None, 0))  # a CPU configuration
    with pytest.raises(RuntimeError, match=r"rule ett_swag trains or samples a model but requests 0 GPU\(s\)"):
        check_model_job(job(None, 1))


def test_runtime_request_inside_a_job_does_not_recheck():
    from stochattn.resources import runtime_request

    assert runtime_request(3000, 1, 1440, job="j", resumable=True, retries=0, check=False) == 1440
@pytest.mark.parametrize("method", ["swag", "ivon", "contextual_dropout", "hsa"])
def test_a_split_search_prices_its_candidates_and_the_sampling_as_the_single_job(method):
    """The per-candidate jobs and the selection job together do the single method job's work (the runtime model of
    rules ett_candidate / ett_select and their ERA5 twins)."""
    sizes = resources.Sizes(train=1000, val=300, cal=300, test=500)
    cfg = {"grid": [{}, {}, {}], "epochs": 2, "anneal_epochs": 1, "batch_size": 16, "max_epochs": 4}
    train = {"batch_size": 16, "max_epochs": 10}
    one = resources.candidate_work(method, sizes, cfg, train, 19)
    swag = {"swag_scales": 2, "multiswag_components": 10} if method == "swag" else {}  # and MultiSWAG's member 0
    split = 3 * one + resources.selection_work(method, sizes, 19, grid=3, **swag)
    whole = resources.method_work(method, sizes, cfg, train, 19, **swag)
    assert split.__dict__ == pytest.approx(whole.__dict__)
    if method == "swag":  # member 0's share, 2 of 19 (L = 10), on val, test and cal at each of the 3 candidates
        alone = resources.method_work(method, sizes, cfg, train, 19, swag_scales=2)
        assert whole.forward_inputs - alone.forward_inputs == 3 * 2 * (300 + 500 + 300)
    assert resources.selection_work(method, sizes, 19).__dict__ != pytest.approx(one.__dict__)


def test_gpu_architecture_without_kernels_fails_clearly(monkeypatch):
    """A V100 (sm_70) under a torch build without Volta kernels: the job stops at once, naming the device, its
    capability, the build and the wheel index with kernels for it (simulated capability)."""
    import torch

    from stochattn.cuda_builds import gpu_arch_supported
    from stochattn.provenance import check_gpu_arch

    build = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert not gpu_arch_supported((7, 0), build)
    assert gpu_arch_supported((8, 9), build)  # sm_86 machine code runs on 8.9 (same major, lower minor)
    assert not gpu_arch_supported((12, 1), ["sm_90", "sm_100"]) and gpu_arch_supported((12, 1), ["compute_120"])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=0: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: build)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=0: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr("stochattn.cuda_builds.local_driver_version", lambda: "580.95.05")
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # PyPI's CUDA 13 build
    no_kernels = r"no kernels for the Tesla V100-SXM2-32GB \(compute capability 7.0\)"
    with pytest.raises(RuntimeError, match=no_kernels) as err:
        check_gpu_arch()
    assert "whl/cu126" in str(err.value) and "sm_75" in str(err.value)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=0: (9, 0))
    check_gpu_arch()  # an H100 / H200 with this build
