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
    assert jobs["train_backbone"] == "7" and jobs["run_method"] == "11"
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
