"""A data set added by configuration alone (custom_datasets) runs through every rule, table and figure.

bostonHousing is in the shared mirror (with its SHA256SUMS) but not in the built-in registry. The end-to-end run
uses config/test.yaml's tiny sizes, one split and the three backbone methods, target `uci` (no toy panel).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import pytest
from test_workflow import ALL_DATASETS, MIRROR, REPO, job_stats, needs_mirror, smk, write_config

BOSTON = {"folder": "bostonHousing", "n_splits": 20, "checksums": "../shared/data/SHA256SUMS"}
METHODS = ["sa", "mc_dropout", "swag"]
TRAIN = {"lr": 3.0e-3, "max_epochs": 20}  # test.yaml's 2 epochs at lr 1e-4 leave boston's backbone near the mean


def boston_config(path, **updates):
    """config/test.yaml with bostonHousing added by configuration (mirror checksums), one split, three methods."""
    settings = {"datasets": ["bostonHousing"], "methods": METHODS, "custom_datasets": {"bostonHousing": dict(BOSTON)},
                "train": TRAIN}
    return write_config(path, base=REPO / "config" / "test.yaml", **{**settings, **updates})


def test_unknown_dataset_is_a_parse_time_error(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", datasets=["yacht", "atlantis"])
    res = smk(tmp_path / "work", "-n", configfile=cfg)
    assert res.returncode != 0
    out = res.stdout
    assert "unknown data set 'atlantis'" in out and "known: built-in concrete" in out, out[-3000:]
    assert "custom_datasets" in out
    assert not (tmp_path / "work" / "results").exists()
    # a custom name may not shadow a built-in one (schema)
    cfg = write_config(tmp_path / "shadow.yaml", custom_datasets={"yacht": {"folder": "x", "n_splits": 1}})
    res = smk(tmp_path / "work", "-n", configfile=cfg)
    assert res.returncode != 0 and "Error validating config file" in res.stdout, res.stdout[-3000:]


@needs_mirror  # the custom set's checksums are the mirror's SHA256SUMS
def test_custom_dataset_dag(tmp_path):
    """Dry run: the custom data set gets fetch / prepare / train / method / evaluate jobs and its own figures."""
    cfg = boston_config(tmp_path / "c.yaml", datasets=["yacht", "bostonHousing"], splits=2)
    res = smk(tmp_path / "work", "-n", "uci", configfile=cfg)
    assert res.returncode == 0, res.stdout[-4000:]
    stats = job_stats(res.stdout)
    assert stats["fetch_uci"] == 2 and stats["prepare_uci"] == 4 and stats["train_backbone"] == 4
    runs = set(re.findall(r"results/uci/(\w+)/split(\d+)/(\w+)/metrics\.json", res.stdout))
    assert {(d, str(k), m) for d in ("yacht", "bostonHousing") for k in (0, 1) for m in METHODS} <= runs
    assert stats["evaluate"] == len({(d, k) for d, k, _ in runs}) == 4  # one job per split
    assert stats["uci_pit_figure"] == stats["uci_sharpness_figure"] == 2
    for path in ("results/uci/bostonHousing/split1/swag/metrics.json", "results/figures/uci_pit_bostonHousing.png",
                 "results/figures/uci_sharpness_bostonHousing.pdf"):  # fmt: skip
        assert path in res.stdout
    one = smk(tmp_path / "work", "-n", "uci_bostonHousing", configfile=cfg)
    assert one.returncode == 0 and job_stats(one.stdout)["evaluate"] == 2, one.stdout[-3000:]


def test_tables_order_and_label_custom_rows_after_builtins():
    from stochattn.report import dataset_label, dataset_order

    assert dataset_order(["bostonHousing", "yacht", "abalone", "concrete"]) == [
        "concrete", "yacht", "abalone", "bostonHousing"]  # fmt: skip
    assert dataset_label("bostonHousing") == "bostonHousing" and dataset_label("naval") == "Naval"


def custom_offset(name: str) -> int:
    """The seed layout of rules/common.smk for a custom data set (a lane from the name's SHA-256)."""
    lane = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 40
    return 10_000_000 * (lane % 10) + 100_000 * 20 * (1 + lane // 10)


@needs_mirror
@pytest.mark.slow
def test_custom_dataset_end_to_end(tmp_path):
    """bostonHousing from the mirror, by config alone: its rows are in every table, its figures exist, the
    captions and provenance name it, its logs are plain lines."""
    cfg = boston_config(tmp_path / "c.yaml", progress=True)
    work = tmp_path / "work"
    res = smk(work, "uci", configfile=cfg, timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    tables = work / "results" / "tables"
    for name in ("uci_master", "uci_crps", "uci_cost"):
        csv = (tables / f"{name}.csv").read_text().splitlines()
        rows = [line for line in csv[1:] if line.startswith("bostonHousing,")]
        assert set(METHODS) <= {r.split(",")[1] for r in rows}, name
        assert "| bostonHousing |" in (tables / f"{name}.md").read_text()
        assert "bostonHousing &" in (tables / f"{name}.tex").read_text()
    md = (tables / "uci_master.md").read_text()
    assert "Beyond the paper: datasets +bostonHousing" in md
    assert "Reduced from the paper: datasets=none (paper: the eight UCI data sets); methods=" in md
    prov = json.loads((tables / "uci_master.md.prov.json").read_text())
    assert prov["config"]["custom_datasets"] == {"bostonHousing": {"n_splits": 20, "verify": True}}
    assert "datasets +bostonHousing" in prov["config"]["protocol_deviations"]["added"]
    for fig in ("uci_pit_bostonHousing", "uci_sharpness_bostonHousing", "uci_cost"):
        assert (work / "results" / "figures" / f"{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (work / "results" / "figures" / f"{fig}.pdf").is_file()
    # seeds: built-in indices unchanged; the custom data set's offset depends on its name only
    seeds = prov["seeds"]
    assert seeds["dataset_index"] == {**{d: i for i, d in enumerate(ALL_DATASETS)}, "sinusoid": 8}
    assert seeds["custom_dataset_offset"] == {"bostonHousing": custom_offset("bostonHousing")}
    meta = json.loads((work / "results/uci/bostonHousing/split0/backbone/meta.json").read_text())
    stage = 100_000_000 * seeds["stage_index"]["backbone"]
    assert meta["seed"] == seeds["base"] + stage + custom_offset("bostonHousing")
    fetched = work / "results" / "data" / "uci" / "bostonHousing"
    assert (fetched / "data.txt").read_bytes() == (MIRROR / "UCI_Datasets/bostonHousing/data/data.txt").read_bytes()
    log = (work / "logs" / "uci" / "bostonHousing" / "split0" / "train_backbone.log").read_text()
    assert "\r" not in log and "backbone: epoch 20/20 (100%)" in log and len(log.splitlines()) <= 12, log


@needs_mirror
@pytest.mark.slow
def test_custom_dataset_missing_file_and_unverified(tmp_path):
    """A custom data set whose folder (an absolute path) lacks a file fails naming it and leaves no results/data
    output; with the file back, verify: false fetches it with a warning in the log (captions: test_protocol.py)."""
    folder = tmp_path / "mine"
    shutil.copytree(MIRROR / "UCI_Datasets" / "bostonHousing", folder)
    (folder / "data" / "index_test_0.txt").unlink()
    spec = {"folder": str(folder), "n_splits": 1, "verify": False}
    cfg = boston_config(tmp_path / "c.yaml", datasets=["mine"], custom_datasets={"mine": spec},
                        data={"mirrors": [], "allow_download": False})  # fmt: skip
    work = tmp_path / "work"
    res = smk(work, "results/data/uci/mine", configfile=cfg)
    assert res.returncode != 0
    assert "index_test_0.txt" in res.stdout and "not found" in res.stdout, res.stdout[-4000:]
    assert not (work / "results" / "data" / "uci" / "mine").exists()

    shutil.copy(MIRROR / "UCI_Datasets" / "bostonHousing" / "data" / "index_test_0.txt", folder / "data")
    res = smk(work, "results/data/uci/mine", configfile=cfg)
    assert res.returncode == 0, res.stdout[-4000:]
    assert "WITHOUT a SHA-256 check" in (work / "logs" / "data" / "fetch_uci_mine.log").read_text()
    assert sorted(p.name for p in (work / "results" / "data" / "uci" / "mine").glob("[!.]*")) == sorted(
        ["data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "index_train_0.txt",
         "index_test_0.txt"])  # fmt: skip

