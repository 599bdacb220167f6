"""stochattn.stale: the outputs made from a removed file, found from the provenance records and set aside."""

from __future__ import annotations

import json
from pathlib import Path

from stochattn.stale import STALE_DIR, set_aside_stale, stale_outputs


def _write(work: Path, path: str, text: str = "x") -> None:
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text(text)


def _json_record(work: Path, path: str, inputs: list[str], outputs: list[str] = ()) -> None:
    """A JSON file carrying its rule's record (as meta.json / metrics.json do)."""
    rec = {"rule": "r", "inputs": [{"path": p, "sha256": "0"} for p in inputs]}
    if outputs:
        rec["outputs"] = [{"path": p, "sha256": "0"} for p in outputs]
    _write(work, path, json.dumps({"value": 1, "provenance": rec}))


def _sidecar(work: Path, path: str, inputs: list[str]) -> None:
    """A table or figure with its <file>.prov.json."""
    _write(work, path)
    _write(work, path + ".prov.json", json.dumps({"rule": "t", "inputs": [{"path": p} for p in inputs],
                                                  "outputs": [{"path": path}]}))  # fmt: skip


def _chain(work: Path) -> None:
    """data (outside results) -> prepared -> run (samples + meta) -> metrics -> table; a second, intact run."""
    _write(work, "data/uci/yacht/x.txt")
    _sidecar(work, "results/s/prepared.npz", ["data/uci/yacht"])
    for run in ("a", "b"):
        _write(work, f"results/s/{run}/samples.npz")
        _json_record(work, f"results/s/{run}/meta.json", ["results/s/prepared.npz"], [f"results/s/{run}/samples.npz"])
        _json_record(work, f"results/s/{run}/metrics.json",
                     [f"results/s/{run}/samples.npz", f"results/s/{run}/meta.json"])  # fmt: skip
    _sidecar(work, "results/tables/t.csv", ["results/s/a/metrics.json", "results/s/b/metrics.json"])
    _sidecar(work, "results/figures/b.png", ["results/s/b/metrics.json"])


def test_an_intact_chain_has_nothing_stale_and_removed_data_outside_results_is_not_followed(tmp_path):
    _chain(tmp_path)
    assert stale_outputs(tmp_path) == []
    (tmp_path / "data/uci/yacht/x.txt").unlink()  # a removed download: verified by checksum where it is read
    (tmp_path / "data/uci/yacht").rmdir()
    assert stale_outputs(tmp_path) == []
    assert set_aside_stale(tmp_path) == [] and not (tmp_path / STALE_DIR).exists()


def test_a_removed_run_makes_its_metrics_and_everything_made_from_them_stale(tmp_path):
    _chain(tmp_path)
    for name in ("samples.npz", "meta.json"):  # what Snakemake leaves after the run's rerun failed
        (tmp_path / "results/s/a" / name).unlink()
    expected = [Path(p) for p in ("results/s/a/metrics.json", "results/tables/t.csv", "results/tables/t.csv.prov.json")]
    assert stale_outputs(tmp_path) == expected  # not run b, its metrics or the figure made from them alone

    messages = []
    assert set_aside_stale(tmp_path, dry_run=True, log=messages.append) == expected
    assert all((tmp_path / p).exists() for p in expected) and not (tmp_path / STALE_DIR).exists()
    made_from = "3 stale file(s), made from results/s/a/meta.json, results/s/a/samples.npz,"
    assert len(messages) == 1 and made_from in messages[0]

    (tmp_path / ".snakemake/locks").mkdir(parents=True)
    (tmp_path / ".snakemake/locks/0.input.lock").write_text("")
    assert set_aside_stale(tmp_path, log=messages.append) == []  # another Snakemake runs here: left in place
    assert all((tmp_path / p).exists() for p in expected) and "another Snakemake" in messages[-1]
    (tmp_path / ".snakemake/locks/0.input.lock").unlink()

    assert set_aside_stale(tmp_path, log=messages.append) == expected
    (stamp,) = (tmp_path / STALE_DIR).iterdir()
    assert sorted(p.relative_to(stamp) for p in stamp.rglob("*") if p.is_file()) == expected
    assert not any((tmp_path / p).exists() for p in expected)
    assert (tmp_path / "results/figures/b.png").exists() and (tmp_path / "results/s/b/metrics.json").exists()
    assert stale_outputs(tmp_path) == []  # the set-aside folder is not read


def test_a_removed_prepared_file_makes_the_whole_split_stale(tmp_path):
    _chain(tmp_path)
    (tmp_path / "results/s/prepared.npz").unlink()  # its record stays: the prepare job's own output went
    stale = {str(p) for p in stale_outputs(tmp_path)}
    assert {"results/s/a/samples.npz", "results/s/b/meta.json", "results/figures/b.png.prov.json"} <= stale
    assert "results/s/prepared.npz.prov.json" not in stale  # its inputs are there: Snakemake rebuilds the file
