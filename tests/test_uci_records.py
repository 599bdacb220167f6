"""A rerun against kept UCI records (stochattn.experiments.uci_slice_report.compare_records): run by run, the same
outputs' SHA-256, code hash and values, on a copy of the repository's yacht records."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from stochattn.experiments.uci_slice_report import compare_markdown, compare_records

pytest.importorskip("pandas")
RECORDS = Path(__file__).resolve().parents[1] / "benchmarks" / "records" / "uci_paper"


def later_splits(folder: str, names: list[str]) -> list[str]:
    """shutil.copytree's ignore: the kept records of Gal splits 3 on (folders ``split<k>``, files ``split<k>.tsv``)."""
    return [n for n in names if (m := re.fullmatch(r"split(\d+)(\.tsv)?", n)) and int(m[1]) > 2]


@pytest.fixture()
def records(tmp_path):
    """A copy of the kept yacht records of Gal splits 0-2 (the tests count their runs; later splits are kept too)."""
    out = tmp_path / "records"
    shutil.copytree(RECORDS / "yacht", out / "yacht", ignore=later_splits)
    return out


@pytest.fixture()
def rerun(tmp_path, records):
    """A workdir whose results/ hold those records' files, as a rerun that reproduced them would."""
    work = tmp_path / "work"
    shutil.copytree(records / "yacht", work / "results")
    return work


def edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_a_rerun_that_wrote_the_same_files_is_identical_run_by_run(rerun, records):
    frame = compare_records(rerun, records, ["yacht"])
    runs = sorted((records / "yacht" / "uci" / "yacht").glob("split*/*/meta.json"))
    assert len(frame) == len(runs) == 24  # 3 splits x (backbone + 7 runs)
    assert set(frame["verdict"]) == {"identical"} and set(frame["code"]) == {"same"}
    assert set(frame[frame["method"] != "sa_match"]["outputs"]) == {"identical"}  # samples / model digests
    sa = frame[(frame["split"] == 0) & (frame["method"] == "sa")].iloc[0]
    n = int(sa["values"].split(" of ")[1].split()[0])
    # meta.json's and metrics.json's leaves, the 2 x 31 PIT values among them
    assert sa["values"] == f"0 of {n} differ" and n > 2 * 31
    assert "24 runs in both: 24 identical, 0 same values, 0 last digits, 0 differs." in compare_markdown(frame)


def test_run_times_and_provenance_may_differ_but_a_value_or_output_may_not(rerun, records):
    run = rerun / "results" / "uci" / "yacht"
    edit(run / "split0" / "sa" / "metrics.json", lambda d: d["seconds"].update(evaluate=1e9))  # a run time
    edit(run / "split0" / "sa" / "meta.json", lambda d: d["provenance"].update(git_commit="0" * 40))  # another commit
    w1 = json.loads((run / "split1" / "swag" / "metrics.json").read_text())["native"]["w1"]
    edit(run / "split1" / "swag" / "metrics.json", lambda d: d["native"].update(w1=w1 * 1.01))
    edit(run / "split2" / "mc_dropout" / "meta.json", lambda d: d["sha256"].update({"samples.npz": "f" * 64}))
    edit(run / "split2" / "hsa" / "meta.json", lambda d: d["provenance"]["code"].update(sha256="e" * 64))
    nu = json.loads((run / "split1" / "sa" / "meta.json").read_text())["nu_surrogate_continuous"]
    edit(run / "split1" / "sa" / "meta.json", lambda d: d.update(nu_surrogate_continuous=nu * (1 + 4e-16)))
    frame = compare_records(rerun, records, ["yacht"]).set_index(["split", "method"])
    assert frame.loc[(0, "sa"), "verdict"] == "identical"
    swag = frame.loc[(1, "swag")]
    assert swag["verdict"] == "differs" and swag["values"].startswith("1 of ") and swag["outputs"] == "identical"
    assert swag["largest"] == f"metrics.native.w1: {w1!r} -> {w1 * 1.01!r}"
    mcd = frame.loc[(2, "mc_dropout")]
    assert mcd["verdict"] == "same values" and mcd["outputs"] == "differ: samples.npz"
    assert frame.loc[(2, "hsa"), "code"] == "differs" and frame.loc[(2, "hsa"), "verdict"] == "identical"
    sa = frame.loc[(1, "sa")]  # a value recomputed with its sums in another order
    assert sa["verdict"] == "last digits" and sa["values"].startswith("1 of ")
    assert "nu_surrogate_continuous" in sa["largest"]
    assert (frame["verdict"] == "identical").sum() == 21


def test_nan_equals_nan_and_only_runs_in_both_are_compared(rerun, records):
    run = rerun / "results" / "uci" / "yacht"
    for folder in (run, records / "yacht" / "uci" / "yacht"):  # a NaN in both
        edit(folder / "split0" / "ivon" / "metrics.json", lambda d: d["native"].update(w1=math.nan))
    shutil.rmtree(run / "split2")  # a rerun of splits 0-1 only
    frame = compare_records(rerun, records, ["yacht"])
    assert len(frame) == 16 and set(frame["verdict"]) == {"identical"}
    edit(run / "split0" / "ivon" / "metrics.json", lambda d: d["native"].update(w1=0.1))  # NaN -> a number
    frame = compare_records(rerun, records, ["yacht"]).set_index(["split", "method"])
    assert frame.loc[(0, "ivon"), "largest"] == "metrics.native.w1: nan -> 0.1"
    with pytest.raises(ValueError, match="no run of concrete"):
        compare_records(rerun, records, ["concrete"])


def test_the_cpu_column_names_a_change_of_torch_cpu_kernels_and_leaves_the_verdict_to_the_values(rerun, records):
    """Records kept before the provenance named the CPU kernels say "-"; kept AVX2 against a rerun's AVX512 is named
    (the reason bits may differ), as is another processor on the same kernels, and an identical run stays identical."""
    metas = [*records.glob("yacht/uci/yacht/split*/*/meta.json"), *rerun.glob("results/uci/yacht/split*/*/meta.json")]
    for meta in metas:
        # as kept before 2026-12-02 (yacht's SWAG and MultiSWAG records were kept again since, naming theirs)
        edit(meta, lambda d: [d.get("provenance", {}).pop(k, None) for k in ("cpu", "cpu_capability", "cpu_model")])
    assert set(compare_records(rerun, records, ["yacht"])["cpu"]) == {"-"}
    kept, run = records / "yacht" / "uci" / "yacht" / "split0", rerun / "results" / "uci" / "yacht" / "split0"
    for folder, cpu in ((kept, "AVX2"), (run, "AVX512")):
        edit(folder / "sa" / "meta.json", lambda d, cpu=cpu: d["provenance"].update(cpu_capability=cpu))
        edit(folder / "swag" / "meta.json", lambda d: d["provenance"].update(cpu_capability="AVX2"))
    frame = compare_records(rerun, records, ["yacht"]).set_index(["split", "method"])
    assert frame.loc[(0, "sa"), "cpu"] == "AVX2 -> AVX512" and frame.loc[(0, "sa"), "verdict"] == "identical"
    assert frame.loc[(0, "swag"), "cpu"] == "same" and frame.loc[(0, "ivon"), "cpu"] == "-"
    assert "| cpu |" in compare_markdown(frame.reset_index())
    for folder, name in ((kept, "AMD EPYC"), (run, "Intel(R) Xeon(R) Processor")):  # the same kernels, another vendor
        edit(folder / "swag" / "meta.json", lambda d, name=name: d["provenance"].update(cpu=name))
    frame = compare_records(rerun, records, ["yacht"]).set_index(["split", "method"])
    assert frame.loc[(0, "swag"), "cpu"] == "AMD EPYC -> Intel(R) Xeon(R) Processor (AVX2)"
    assert frame.loc[(0, "sa"), "cpu"] == "AVX2 -> AVX512"  # a change of kernels is named first
    for folder, model in ((kept, "family 25, model 17, stepping 1"), (run, "family 26, model 2, stepping 1")):
        edit(folder / "swag" / "meta.json", lambda d, m=model: d["provenance"].update(cpu="AMD EPYC", cpu_model=m))
    frame = compare_records(rerun, records, ["yacht"]).set_index(["split", "method"])
    generations = "AMD EPYC (family 25, model 17, stepping 1) -> AMD EPYC (family 26, model 2, stepping 1) (AVX2)"
    assert frame.loc[(0, "swag"), "cpu"] == generations  # one name, two generations
