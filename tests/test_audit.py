"""`stochattn audit`: passes on a fresh tiny run; fails naming the node after a sample file is modified, a raw data
file is corrupted, or the library changes without a rerun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_run, perturb_samples

from stochattn import audit as audit_mod

pytestmark = pytest.mark.slow
FIGURE = "results/figures/uci_pit_yacht.png"
TABLE = "results/tables/uci_master.csv"


def run_audit(work: Path, target: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("stochattn")
    return subprocess.run([str(exe), "audit", target, "-d", str(work)], capture_output=True, text=True, timeout=120)


def failed_nodes(res: subprocess.CompletedProcess) -> list[str]:
    return [line.split()[1].rstrip(":") for line in res.stderr.splitlines() if line.startswith("FAILED ")]


def test_fresh_run_passes_and_shows_the_whole_chain(tiny_chain):
    work = tiny_chain["work"]
    for target in (FIGURE, TABLE):
        res = run_audit(work, target)
        assert res.returncode == 0, res.stdout + res.stderr
        out = res.stdout
        for node in ("metrics.json", "mc_dropout/samples.npz", "mc_dropout/meta.json", "backbone/model.pt",
                     "backbone/meta.json", "prepared.npz", "results/data/uci/yacht", "swag/meta.json"):  # fmt: skip
            assert node in out, (node, out)
        for rule in ("rule=evaluate", "rule=run_method", "rule=train_backbone", "rule=prepare_uci", "rule=fetch_uci"):
            assert rule in out, (rule, out)
        assert "code=" in out and "seed=" in out and "all" in out.splitlines()[-1]


def test_modified_sample_file_is_named(tiny_chain, tmp_path):
    work = copy_run(tiny_chain, tmp_path / "w")
    perturb_samples(work / "results/uci/yacht/split0/swag/samples.npz")
    res = run_audit(work, FIGURE)
    assert res.returncode == 1
    assert failed_nodes(res) == ["results/uci/yacht/split0/swag/samples.npz"], res.stderr
    assert "modified" in res.stderr


def test_corrupted_raw_file_is_named(tiny_chain, tmp_path):
    work = copy_run(tiny_chain, tmp_path / "w")
    raw = work / "results/data/uci/yacht/data.txt"
    raw.write_text(raw.read_text().replace("0.", "1.", 1))
    res = run_audit(work, TABLE)
    assert res.returncode == 1
    assert failed_nodes(res) == ["results/data/uci/yacht"], res.stderr
    assert "data.txt does not match its registered SHA-256" in res.stderr
    assert "modified" in res.stderr  # and the hash prepared.npz recorded for the folder no longer matches


def test_library_change_without_rerun_is_stale(tiny_chain, monkeypatch):
    """A changed evaluate_split() (stochattn.experiments.evaluate) makes every metrics.json stale, nothing above or
    below."""
    real = audit_mod.code_version

    def changed(entries, exclude=()):
        v = dict(real(entries, exclude))
        if "stochattn.experiments.evaluate:evaluate_split" in entries:
            v["sha256"] = "0" * 64  # what the hash of an edited evaluate() is: anything else
        return v

    monkeypatch.setattr(audit_mod, "code_version", changed)
    root = audit_mod.audit(FIGURE, tiny_chain["work"])
    failed = sorted(n.path for n in audit_mod._failures(root))
    assert failed == ["results/uci/yacht/split0/mc_dropout/metrics.json", "results/uci/yacht/split0/swag/metrics.json"]
    assert all("stale code" in n.status for n in audit_mod._failures(root))


def test_component_records_are_found_beside_their_state(tmp_path):
    """A MultiSWAG component (components/<c>.pt) is audited through its own <c>.json, not a meta.json."""
    from stochattn.io import save_json
    from stochattn.provenance import stage_provenance

    comp = tmp_path / "multiswag" / "components"
    comp.mkdir(parents=True)
    (comp / "0.pt").write_bytes(b"state")
    prov = stage_provenance(rule="multiswag_component", inputs=[], code=None, params={"seed": 7, "component": 0})
    save_json(comp / "0.json", {"component": 0, "provenance": prov})
    rec, holder = audit_mod._record_of(comp / "0.pt")
    assert holder == comp / "0.json" and rec["via"] == "meta.json" and rec["inputs"][0]["path"].endswith("0.json")
    rec, holder = audit_mod._record_of(comp / "0.json")
    assert holder == comp / "0.json" and rec["rule"] == "multiswag_component" and rec["seed"] == 7
    save_json(tmp_path / "other.json", {"no": "record"})
    assert audit_mod._record_of(tmp_path / "other.json") == (None, tmp_path / "other.json")


def test_prov_export_is_the_same_chain(tiny_chain, tmp_path):
    """`--prov FILE`: W3C PROV-JSON with one entity per audited file, the jobs as activities, and their links."""
    import json

    from stochattn.io import sha256_file

    work, out = tiny_chain["work"], tmp_path / "chain.prov.json"
    exe = Path(sys.executable).with_name("stochattn")
    res = subprocess.run([str(exe), "audit", TABLE, "-d", str(work), "--prov", str(out)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    nodes = {n.path for n in audit_mod._iter(audit_mod.audit(TABLE, work))}
    assert {e["prov:label"] for e in doc["entity"].values()} == nodes
    table = doc["entity"][f"file:{TABLE}"]
    assert table["sa:sha256"] == sha256_file(work / TABLE) and table["sa:status"] == "OK"
    assert doc["activity"][f"job:{TABLE}"]["prov:label"] == "uci_table"
    generated = {(r["prov:entity"], r["prov:activity"]) for r in doc["wasGeneratedBy"].values()}
    assert (f"file:{TABLE}", f"job:{TABLE}") in generated
    used = {(r["prov:activity"], r["prov:entity"]) for r in doc["used"].values()}
    metrics = "results/uci/yacht/split0/swag/metrics.json"
    assert (f"job:{TABLE}", f"file:{metrics}") in used
    assert doc["activity"][f"job:{metrics}"]["prov:label"] == "evaluate"
    assert all(r["prov:entity"] in doc["entity"] for r in doc["used"].values())  # every link names a known file


def test_fetched_and_generated_files_are_checked_against_their_own_records(tmp_path, monkeypatch):
    """A fetched checkpoint (SHA-256 recorded at fetch and pinned) and a generated folder (every file's SHA-256, as
    the rule wrote it), each with the sidecar record its rule writes: clean, then each change named."""
    import time

    from stochattn.io import sha256_file
    from stochattn.provenance import code_version, provenance_record, write_provenance, write_sidecar

    monkeypatch.chdir(tmp_path)  # records hold paths relative to the working directory, as in the workflow
    ckpt, folder, table = Path("results/backbone/model.ckpt"), Path("results/data/climate"), Path("results/t.csv")
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights")
    (folder / "geopotential").mkdir(parents=True)
    (folder / "geopotential" / "a.nc").write_bytes(b"field")
    (folder / ".snakemake_timestamp").write_bytes(b"")  # Snakemake's marker is not data
    common = {"config_subset": {}, "seeds": None, "started": time.time()}
    write_sidecar(ckpt, rule="fetch_checkpoint", inputs=[],
                  extra={"fetched": True, "expected_sha256": sha256_file(ckpt)}, **common)  # fmt: skip
    code = code_version(["stochattn.metrics:crps"])
    write_sidecar(folder, rule="generate", inputs=[], code=code, **common)
    table.write_text("a,b\n")
    write_provenance(table, provenance_record(rule="table", inputs=[ckpt, folder], outputs=[table],
                                              finished=time.time(), extra={"code": code}, **common))  # fmt: skip
    assert audit_mod.audit(table, tmp_path).children and not list(audit_mod._failures(audit_mod.audit(table, tmp_path)))

    (folder / ".snakemake_timestamp").write_bytes(b"touched")
    assert not list(audit_mod._failures(audit_mod.audit(table, tmp_path)))
    (folder / "geopotential" / "a.nc").write_bytes(b"other field")
    ckpt.write_bytes(b"other weights")
    failed = {n.path: n.status for n in audit_mod._failures(audit_mod.audit(table, tmp_path))}
    assert set(failed) == {str(ckpt), str(folder)}
    assert "pinned SHA-256" in failed[str(ckpt)] and "modified since its rule wrote it" in failed[str(ckpt)]
    assert "modified geopotential/a.nc" in failed[str(folder)]
