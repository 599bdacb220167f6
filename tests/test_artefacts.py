"""Artefacts a later job trusts (issue 49, part 6): a model file carries its SHA-256 in the JSON beside it and every
reader checks it (one flipped byte is an error naming the file, in the loader and in `stochattn audit`); a damaged
npz / json / torch file is an error naming it; ordered config keys are checked when the workflow parses; the same
model gives the same bytes."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from stochattn import io as sio
from stochattn.protocol import check_config_order, merged

REPO = Path(__file__).resolve().parents[1]
MODEL = dict(n_blocks=1, d_block=16, attention_n_heads=2)
TRAIN = dict(max_epochs=2, patience=None, lr=1e-3, batch_size=64)


def flip_byte(path: Path) -> None:
    """XOR 0xFF one byte inside the tensor data of a torch zip file (its headers untouched, so torch still loads it):
    the low mantissa byte of a float32 in the middle of the largest data record."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as fh:
        fh.seek(info.header_offset + 26)
        n_name, n_extra = int.from_bytes(fh.read(2), "little"), int.from_bytes(fh.read(2), "little")
        offset = info.header_offset + 30 + n_name + n_extra + (info.file_size // 2) // 4 * 4
        fh.seek(offset)
        old = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([old ^ 0xFF]))


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    """A trained tiny backbone of the sinusoid (model.pt + meta.json) and its prepared data."""
    from stochattn.experiments import uci

    d = tmp_path_factory.mktemp("artefacts")
    uci.prepare_sinusoid(d / "prepared.npz", n=120, seed=0)
    uci.train_backbone(d / "prepared.npz", d / "a" / "model.pt", d / "a" / "meta.json", model=MODEL, train=TRAIN,
                       seed=0, progress=False)  # fmt: skip
    return d


# ------------------------------------------------------------------------------------------------------------------
# repeatable bytes
# ------------------------------------------------------------------------------------------------------------------
def test_save_torch_gives_the_same_bytes_under_any_name(tmp_path):
    """torch.save to a path names the archive's folder after the file (atomic_path's random temporary name); the
    library's writer does not: two saves of one object give identical bytes, whatever the target's name."""
    obj = {"state_dict": {"w": torch.randn(3, 4, generator=torch.Generator().manual_seed(0))}, "model": {"d": 4}}
    a = sio.save_torch(tmp_path / "x" / "model.pt", obj)
    time.sleep(1.1)  # a time stamp in the file would differ
    b = sio.save_torch(tmp_path / "y" / "other.pt", copy.deepcopy(obj))
    assert a.read_bytes() == b.read_bytes()
    assert {i.filename.split("/")[0] for i in zipfile.ZipFile(a).infolist()} == {"archive"}
    # what the writers did before: torch.save to atomic_path's temporary name
    with sio.atomic_path(tmp_path / "z" / "model.pt") as tmp:
        torch.save(obj, tmp)
    assert (tmp_path / "z" / "model.pt").read_bytes() != a.read_bytes()


def test_identical_trainings_write_identical_model_files(backbone, tmp_path):
    from stochattn.experiments import uci

    uci.train_backbone(backbone / "prepared.npz", tmp_path / "model.pt", tmp_path / "meta.json", model=MODEL,
                       train=TRAIN, seed=0, progress=False)  # fmt: skip
    assert (tmp_path / "model.pt").read_bytes() == (backbone / "a" / "model.pt").read_bytes()
    assert sio.load_json(tmp_path / "meta.json")["sha256"] == sio.load_json(backbone / "a" / "meta.json")["sha256"]


# ------------------------------------------------------------------------------------------------------------------
# save with hash, load and verify
# ------------------------------------------------------------------------------------------------------------------
def test_the_backbone_records_its_hash_and_a_flipped_byte_is_refused_naming_the_file(backbone, tmp_path):
    from stochattn.data.uci import load_prepared
    from stochattn.experiments import uci

    (tmp_path / "b").mkdir()
    for name in ("model.pt", "meta.json"):
        (tmp_path / "b" / name).write_bytes((backbone / "a" / name).read_bytes())
    model = tmp_path / "b" / "model.pt"
    assert sio.load_json(tmp_path / "b" / "meta.json")["sha256"] == {"model.pt": sio.sha256_file(model)}
    data = load_prepared(backbone / "prepared.npz")
    clean = uci.load_backbone(data, model, "cpu")
    flip_byte(model)
    torch.load(model, weights_only=True)  # torch itself reads the damaged file without a word
    with pytest.raises(sio.UnreadableFileError, match=rf"{model}: modified since it was written") as err:
        uci.load_backbone(data, model, "cpu")
    assert str(tmp_path / "b" / "meta.json") in str(err.value)
    assert clean is not None


def test_load_model_refuses_a_file_without_a_record(tmp_path):
    sio.save_torch(tmp_path / "model.pt", {"w": torch.zeros(2)})
    with pytest.raises(sio.UnreadableFileError, match=r"model\.pt: no record of its SHA-256"):
        sio.load_model(tmp_path / "model.pt")
    sio.save_json(tmp_path / "meta.json", {"seed": 0})
    with pytest.raises(sio.UnreadableFileError, match=r"records no SHA-256 of 'model\.pt'"):
        sio.load_model(tmp_path / "model.pt")
    sio.save_json(tmp_path / "meta.json", {"sha256": sio.sha256_record(tmp_path / "model.pt")})
    assert torch.equal(sio.load_model(tmp_path / "model.pt")["w"], torch.zeros(2))
    with pytest.raises(FileNotFoundError, match=r"other\.pt"):
        sio.load_model(tmp_path / "other.pt")


def test_a_component_is_checked_against_its_own_record(tmp_path):
    """``<stem>.json`` beside a model file is its record when it exists (MultiSWAG components, adapters)."""
    comp = tmp_path / "components"
    rec = sio.save_model(comp / "1.pt", {"w": torch.ones(3)})
    sio.save_json(comp / "1.json", {"component": 1, "sha256": rec})
    assert sio.record_of(comp / "1.pt") == comp / "1.json" and sio.recorded_problem(comp / "1.pt") is None
    assert sio.record_of(tmp_path / "calibration.json") == tmp_path / "meta.json"
    flip_byte(comp / "1.pt")
    with pytest.raises(sio.UnreadableFileError, match=r"1\.pt: modified since it was written"):
        sio.load_model(comp / "1.pt")


def test_adapters_and_candidates_record_and_check_their_hash(tmp_path):
    from stochattn.experiments import adapters

    net = torch.nn.Linear(3, 2)
    rec = adapters.save_adapter(net, tmp_path / "adapter.pt", horizon=4)
    sio.save_json(tmp_path / "adapter.json", {"sha256": rec})
    assert adapters.adapter_checkpoint(tmp_path / "adapter.pt") == {"horizon": 4}
    flip_byte(tmp_path / "adapter.pt")
    with pytest.raises(sio.UnreadableFileError, match=r"adapter\.pt: modified since it was written"):
        adapters.load_adapter(torch.nn.Linear(3, 2), tmp_path / "adapter.pt")


def test_samples_and_calibration_are_recorded_in_the_run_meta_and_checked_by_evaluate(backbone, tmp_path):
    from stochattn.experiments import uci
    from stochattn.experiments.evaluate import evaluate

    cfg = dict(batch_size=64, num_batches=1, num_passes=4, nu_min=1, nu_max=64, budget=3, initial_design=3)
    uci.run_method("sa", backbone / "prepared.npz", tmp_path / "sa", backbone_path=backbone / "a" / "model.pt",
                   model=MODEL, train=TRAIN, method_cfg=cfg, num_samples=4, seed=1, progress=False)  # fmt: skip
    meta = sio.load_json(tmp_path / "sa" / "meta.json")
    assert meta["sha256"] == sio.sha256_record(tmp_path / "sa" / "samples.npz", tmp_path / "sa" / "calibration.json")
    assert sio.verified(tmp_path / "sa" / "calibration.json")
    match = sio.load_json(tmp_path / "sa_match" / "meta.json")["sha256"]
    assert match == sio.sha256_record(tmp_path / "sa_match" / "samples.npz")
    samples = tmp_path / "sa_match" / "samples.npz"
    data = sio.load_npz(samples)
    data["samples"] = data["samples"] + 1e-9
    sio.save_npz(samples, **data)
    with pytest.raises(sio.UnreadableFileError, match=rf"{samples}: modified since it was written"):
        evaluate(samples, tmp_path / "metrics.json", seed=0)
    assert not (tmp_path / "metrics.json").exists()


# ------------------------------------------------------------------------------------------------------------------
# every load error names its file
# ------------------------------------------------------------------------------------------------------------------
def test_a_truncated_npz_is_an_error_naming_the_file(tmp_path):
    path = sio.save_npz(tmp_path / "samples.npz", samples=np.arange(1000.0), y=np.zeros(3))
    whole = path.read_bytes()
    for cut in (len(whole) // 2, len(whole) - 10, 100):
        path.write_bytes(whole[:cut])
        with pytest.raises(sio.UnreadableFileError, match=rf"{path}: not a readable \.npz file") as err:
            sio.load_npz(path)
        assert err.value.__cause__ is not None  # the reader's own error, chained
    with pytest.raises(FileNotFoundError, match="nothing.npz"):
        sio.load_npz(tmp_path / "nothing.npz")


def test_a_damaged_json_or_torch_file_is_an_error_naming_it(tmp_path):
    js = tmp_path / "meta.json"
    js.write_text('{"seed": 1,')
    with pytest.raises(sio.UnreadableFileError, match=rf"{js}: not a readable JSON file \(JSONDecodeError"):
        sio.load_json(js)
    pt = sio.save_torch(tmp_path / "model.pt", {"w": torch.zeros(100)})
    pt.write_bytes(pt.read_bytes()[:300])
    with pytest.raises(sio.UnreadableFileError, match=rf"{pt}: not a readable torch file") as err:
        sio.load_torch(pt)
    assert isinstance(err.value.__cause__, RuntimeError)


# ------------------------------------------------------------------------------------------------------------------
# ordered config keys
# ------------------------------------------------------------------------------------------------------------------
def _config(name: str | None = None) -> dict:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return merged(base, yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text())) if name else base


@pytest.mark.parametrize("name", [None, "quick", "test", "rehearsal"])
def test_the_shipped_configs_are_in_order(name):
    check_config_order(_config(name))


def test_out_of_order_keys_are_named_with_their_values():
    cfg = _config()
    cfg["method_params"]["sa"].update(nu_min=512, nu_max=256)
    with pytest.raises(ValueError, match=r"method_params\.sa\.nu_min = 512 is above method_params\.sa\.nu_max = 256"):
        check_config_order(cfg)
    cfg = _config()  # the settings a run combines: a data set's override against the shared value
    cfg["dataset_overrides"] = {"yacht": {"method_params": {"sa": {"nu_max": 0}}}}
    with pytest.raises(ValueError, match=r"method_params\.sa\.nu_min = 1 is above "
                                         r"dataset_overrides\.yacht\.method_params\.sa\.nu_max = 0"):  # fmt: skip
        check_config_order(cfg)
    cfg = _config()
    cfg["era5"]["method_params"]["sa"] = {"nu_min": 8192}
    cfg["era5"]["analyses"]["bo_second_range"] = [512, 2]
    cfg["data"].update(val_fraction=0.6, cal_fraction=0.5)
    cfg["era5"]["weatherbench"]["years"]["val"] = [2015, 2016]
    with pytest.raises(ValueError) as err:
        check_config_order(cfg)
    msg = str(err.value)
    assert "era5.method_params.sa.nu_min = 8192 is above method_params.sa.nu_max = 4096" in msg
    assert "era5.analyses.bo_second_range = [512, 2] is not a range [low, high]" in msg
    assert "data.val_fraction = 0.6 + data.cal_fraction = 0.5" in msg
    assert "era5.weatherbench.years: year 2015 is in both train and val" in msg


def test_the_workflow_refuses_nu_min_above_nu_max_when_it_parses(tmp_path):
    """Not 45 s later in the calibration job: a dry run fails at once, naming both keys and values."""
    from test_workflow import REPO as WF_REPO
    from test_workflow import smk, write_config

    cfg = write_config(tmp_path / "bad.yaml", base=WF_REPO / "config" / "test.yaml",
                       method_params={"sa": {"nu_min": 512, "nu_max": 256}})  # fmt: skip
    t0 = time.perf_counter()
    res = smk(tmp_path / "work", "-n", "results/tables/uci_master.csv", configfile=cfg, timeout=120)
    assert res.returncode != 0
    assert "method_params.sa.nu_min = 512 is above method_params.sa.nu_max = 256" in res.stdout, res.stdout[-3000:]
    assert "Job stats" not in res.stdout and time.perf_counter() - t0 < 60


# ------------------------------------------------------------------------------------------------------------------
# the workflow: a corrupted backbone is refused by its consumers and named by the audit
# ------------------------------------------------------------------------------------------------------------------
BACKBONE = "results/uci/yacht/split0/backbone/model.pt"


@pytest.mark.slow
def test_audit_names_a_corrupted_backbone(tiny_chain, tmp_path):
    from conftest import audit_failures, copy_run

    from stochattn import audit

    work = copy_run(tiny_chain, tmp_path / "w")
    flip_byte(work / BACKBONE)
    failed, _ = audit_failures(work, "results/tables/uci_master.csv")
    assert failed == [BACKBONE], failed
    node = next(n for n in audit._iter(audit.audit("results/tables/uci_master.csv", work)) if n.path == BACKBONE)
    assert "modified since it was written (corrupted or replaced): SHA-256 " in node.status, node.status
    assert "recorded in results/uci/yacht/split0/backbone/meta.json" in node.status
    res = subprocess.run([str(Path(sys.executable).with_name("stochattn")), "audit", "results/tables/uci_master.csv",
                          "-d", str(work)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 1
    failed = [line for line in res.stderr.splitlines() if line.startswith("FAILED ")]
    assert failed and all(line.startswith(f"FAILED {BACKBONE}: modified") for line in failed), res.stderr
    assert "modified since it was written" in failed[0]


@pytest.mark.slow
def test_a_rerun_on_a_corrupted_backbone_fails_naming_it_and_the_hint_rebuilds_it(tiny_chain, tmp_path):
    """Snakemake reruns the backbone's consumers (the file is newer than their outputs); each refuses it. The error's
    hint (--forcerun the file) rebuilds it, byte for byte, and everything made from it: the audit passes again."""
    from conftest import TINY_TARGETS, assert_every_output_audits_clean, copy_run
    from test_workflow import smk

    work = copy_run(tiny_chain, tmp_path / "w")
    good = (work / BACKBONE).read_bytes()
    flip_byte(work / BACKBONE)
    res = smk(work, *TINY_TARGETS, configfile=tiny_chain["cfg"])
    assert res.returncode != 0
    assert f"UnreadableFileError: {BACKBONE}: modified since it was written" in res.stdout, res.stdout[-4000:]
    assert f"snakemake --forcerun {BACKBONE}" in res.stdout
    res = smk(work, *TINY_TARGETS, "--forcerun", BACKBONE, configfile=tiny_chain["cfg"])
    assert res.returncode == 0, res.stdout[-4000:]
    assert (work / BACKBONE).read_bytes() == good
    assert_every_output_audits_clean(work, 2)
