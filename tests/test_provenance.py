"""Tests for stochattn.provenance: the <file>.prov.json records."""

import datetime as dt
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from stochattn.io import load_json
from stochattn.provenance import file_record, git_state, provenance_record, write_provenance

T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(seconds=90.5)


def _inputs(tmp_path):
    a = tmp_path / "in" / "a.csv"
    a.parent.mkdir()
    a.write_bytes(b"x,y\n1,2\n")
    b = tmp_path / "in" / "b.npz"
    b.write_bytes(np.random.default_rng(0).bytes(5000))
    return a, b


def test_record_hashes_inputs_like_hashlib(tmp_path):
    a, b = _inputs(tmp_path)
    out = tmp_path / "table.csv"
    out.write_text("dataset,method\n")
    rec = provenance_record(
        rule="uci_table",
        inputs=[a, str(b)],
        outputs=[out, tmp_path / "not_yet.png"],
        config_subset={"uci": {"n_samples": np.int64(19)}},
        seeds=[0, 1],
        started=T0,
        finished=T1,
        extra={"note": "x"},
    )
    assert rec["rule"] == "uci_table"
    assert [r["sha256"] for r in rec["inputs"]] == [
        hashlib.sha256(a.read_bytes()).hexdigest(),
        hashlib.sha256(b.read_bytes()).hexdigest(),
    ]
    assert [r["size"] for r in rec["inputs"]] == [a.stat().st_size, 5000]
    assert rec["inputs"][1]["path"] == str(b)
    assert rec["outputs"][0]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert rec["outputs"][1] == {"path": str(tmp_path / "not_yet.png")}
    assert rec["config"] == {"uci": {"n_samples": 19}} and type(rec["config"]["uci"]["n_samples"]) is int
    assert rec["seeds"] == [0, 1] and rec["extra"] == {"note": "x"}
    assert "git_commit" in rec and "git_dirty" in rec
    assert isinstance(rec["git_commit"], str) and rec["git_commit"]
    assert rec["started"] == "2025-01-02T03:04:05+00:00" and rec["seconds"] == 90.5
    assert rec["host"] == platform.node()
    assert rec["packages"]["numpy"] == np.__version__
    assert rec["packages"]["python"] == platform.python_version()
    assert {"torch", "scipy", "pandas", "scoringrules", "rtdl_revisiting_models", "ivon-opt", "snakemake"} <= set(
        rec["packages"]
    )
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert rec["device"] == "cpu"
    assert rec["torch_threads"] == torch.get_num_threads()


def test_a_job_without_torch_records_no_device_and_never_imports_torch(tmp_path):
    """A table or figure job's record, in a process that never imported torch: device and threads are None (the job
    used neither), and building the record did not import torch; in a process that uses torch they are named."""
    import json
    import sys

    code = (
        "import json, sys\n"
        "from stochattn.provenance import provenance_record\n"
        f"rec = provenance_record(rule='t', inputs=[], outputs=[], config_subset={{}}, seeds=[], started=0.0,\n"
        f"                        finished=1.0, repo_dir={str(tmp_path)!r})\n"
        "torch_before = 'torch' in sys.modules\n"
        "import torch\n"
        "from stochattn.provenance import device_info\n"
        "print(json.dumps([rec['device'], rec['torch_threads'], torch_before, device_info()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    device, threads, torch_before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert (device, threads, torch_before) == (None, None, False)
    assert after["device"] and isinstance(after["torch_threads"], int) and after["torch_threads"] >= 1


def test_directory_input_and_missing_input(tmp_path):
    a, b = _inputs(tmp_path)
    rec = file_record(tmp_path / "in")
    lines = "".join(
        f"{p.name}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in sorted([a, b])
    )
    assert rec["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert rec["n_files"] == 2 and rec["size"] == a.stat().st_size + b.stat().st_size
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        provenance_record(rule="r", inputs=[tmp_path / "missing.txt"], outputs=[], config_subset={}, seeds=0,
                          started=T0, finished=T1)


def test_bad_arguments(tmp_path):
    a, _ = _inputs(tmp_path)
    kw = dict(rule="r", outputs=[], config_subset={}, seeds=0)
    with pytest.raises(TypeError, match="inputs"):
        provenance_record(inputs=str(a), started=T0, finished=T1, **kw)
    with pytest.raises(ValueError, match="before started"):
        provenance_record(inputs=[a], started=T1, finished=T0, **kw)
    rec = provenance_record(inputs=[a], started=1_700_000_000.0, finished=1_700_000_002.25, **kw)
    assert rec["seconds"] == 2.25


@pytest.mark.skipif(shutil.which("git") is None, reason="git executable not found")
def test_git_commit_and_dirty_flag(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              check=True, capture_output=True, text=True).stdout.strip()

    assert git_state(repo) == {"git_commit": "unknown", "git_dirty": None}  # not a repository yet
    git("init", "-q")
    assert git_state(repo)["git_commit"] == "unknown"  # repository without a commit
    (repo / "f.txt").write_text("1\n")
    git("add", "f.txt")
    git("commit", "-q", "-m", "c")
    head = git("rev-parse", "HEAD")
    assert git_state(repo) == {"git_commit": head, "git_dirty": False}
    (repo / "untracked.txt").write_text("u\n")
    assert git_state(repo)["git_dirty"] is False  # untracked files do not count
    (repo / "f.txt").write_text("2\n")
    assert git_state(repo) == {"git_commit": head, "git_dirty": True}
    monkeypatch.chdir(repo)  # default: the repository of the working directory
    rec = provenance_record(rule="r", inputs=[], outputs=[], config_subset={}, seeds=None, started=T0, finished=T1)
    assert rec["git_commit"] == head and rec["git_dirty"] is True


def test_write_provenance_atomic(tmp_path):
    a, _ = _inputs(tmp_path)
    rec = provenance_record(rule="r", inputs=[a], outputs=[], config_subset={"k": 1}, seeds={"train": 3},
                            started=T0, finished=T1)
    target = tmp_path / "results" / "tables" / "uci.csv"
    path = write_provenance(target, rec)
    assert path == tmp_path / "results" / "tables" / "uci.csv.prov.json"
    assert load_json(path) == rec
    with pytest.raises(TypeError):
        write_provenance(tmp_path / "other.csv", {**rec, "bad": object()})
    assert not (tmp_path / "other.csv.prov.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_remove_finished_resumes_deletes_only_checkpoints_whose_output_exists(tmp_path):
    """The onsuccess hook's clean-up: a job's training checkpoints (resume_checkpoint, and the numbered files of
    fits inside training.resumable) go once its first output exists; a job without its output keeps them."""
    from types import SimpleNamespace

    from stochattn.provenance import remove_finished_resumes, resume_checkpoint

    done, pending = tmp_path / "a" / "model.pt", tmp_path / "b" / "state.pt"
    files = []
    for out in (done, pending):
        out.parent.mkdir()
        ckpt = resume_checkpoint(SimpleNamespace(params={"seed": 1}, output=[str(out)]))
        files += [ckpt, ckpt.with_name(f"{ckpt.stem}.0{ckpt.suffix}"), ckpt.with_name(f"{ckpt.stem}.11{ckpt.suffix}")]
    other = tmp_path / "a" / ".model.pt.notes.pt"  # not a checkpoint name
    staged = tmp_path / "data" / "2024"  # a directory output (the walk does not enter it)
    staged.mkdir(parents=True)
    (staged.parent / ".snakemake_timestamp").write_bytes(b"")
    (staged / "x.nc").write_bytes(b"x")
    inside = staged / f".x.nc.resume-{'0' * 12}.pt"
    for f in (*files, other, inside):
        f.write_bytes(b"x")
    done.write_bytes(b"model")
    removed = remove_finished_resumes(tmp_path)
    assert sorted(removed) == sorted(files[:3])
    assert all(not f.exists() for f in files[:3]) and all(f.exists() for f in (*files[3:], other, done, inside))
    assert remove_finished_resumes(tmp_path / "missing") == []


ENTRIES = ["stochattn.experiments.uci:run_method", "stochattn.report:write_table"]


def _fresh(P):
    P._parse_module.cache_clear()  # the process's own memo: every call below reads the disk cache or parses


def test_code_summaries_read_from_the_disk_cache_equal_a_fresh_parse(tmp_path, monkeypatch):
    import stochattn.provenance as P

    monkeypatch.setenv("STOCHATTN_CACHE_DIR", str(tmp_path / "cache"))
    _fresh(P)
    parsed = P.code_closure(ENTRIES)
    summaries = sorted((tmp_path / "cache" / "code").glob("*.json"))
    assert len(summaries) >= 5  # one per module the closure reached
    _fresh(P)
    with monkeypatch.context() as m:  # a warm cache parses nothing
        m.setattr(P, "_summarise", lambda *a: pytest.fail("parsed although every summary is on disk"))
        assert P.code_closure(ENTRIES) == parsed
    for f in summaries:  # a damaged summary is parsed afresh (and replaced)
        f.write_text('{"digests": ')
    _fresh(P)
    assert P.code_closure(ENTRIES) == parsed
    assert all(load_json(f)["digests"] for f in summaries)
    monkeypatch.setenv("STOCHATTN_CACHE_DIR", str(tmp_path / "file"))  # a cache that cannot be written: parse only
    (tmp_path / "file").write_text("not a folder")
    _fresh(P)
    assert P.code_closure(ENTRIES) == parsed
    _fresh(P)


def test_exclusions_hold_in_the_entry_and_in_dispatch_tables_only():
    """A rule hashes one method of a dispatcher: an excluded name is not followed from the entry's body nor from a
    module-level table reached from it (``_SEARCHES``, ``_STAGES``), but still is where a function calls it."""
    from stochattn.provenance import code_closure

    U, M = "stochattn.experiments.uci", "stochattn.experiments.methods"
    everything = code_closure([f"{U}:fit_candidate"])
    assert {f"{U}:_ivon_search", f"{U}:_hsa_search", f"{M}:hsa_search"} <= set(everything)
    ivon = code_closure([f"{U}:fit_candidate"], [f"{U}:_hsa_search"])  # fit_candidate -> _search -> _SEARCHES
    assert {f"{U}:_SEARCHES", f"{U}:_ivon_search", f"{M}:ivon_search"} <= set(ivon)
    assert f"{U}:_hsa_search" not in ivon and f"{M}:hsa_search" not in ivon
    assert len(ivon) < len(everything)
    via_function = code_closure([f"{U}:_hsa"], [f"{M}:hsa_search"])  # _hsa -> _hsa_search (a function) -> hsa_search
    assert f"{M}:hsa_search" in via_function


def test_an_edited_module_is_never_served_its_old_summary(tmp_path, monkeypatch):
    """The cache is keyed by the module's text: an edit of a body (same size, same mtime even) hashes anew."""
    import os

    import stochattn.provenance as P

    monkeypatch.setenv("STOCHATTN_CACHE_DIR", str(tmp_path / "cache"))
    module = tmp_path / "fake.py"
    module.write_text('def f(x):\n    """doc"""\n    return x + 1\n')
    st = module.stat()
    before = P._parse_module(str(module), st.st_mtime_ns, st.st_size, "stochattn.fake")[0]["f"]
    module.write_text('def f(x):\n    """doc"""\n    return x + 2\n')
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    P._parse_module.cache_clear()
    after = P._parse_module(str(module), st.st_mtime_ns, st.st_size, "stochattn.fake")[0]["f"]
    assert after != before
    module.write_text('def f(x):\n    """another doc"""\n    return x + 2  # a comment\n')
    P._parse_module.cache_clear()
    assert P._parse_module(str(module), st.st_mtime_ns + 1, st.st_size, "stochattn.fake")[0]["f"] == after
    P._parse_module.cache_clear()


def test_a_stage_record_names_the_cpu_kernels_torch_runs_and_the_variable_that_selects_them(tmp_path):
    """meta.json's provenance says which CPU kernels ran (a CPU rerun repeats its bits only on the same ones);
    ATEN_CPU_CAPABILITY, which selects them, is what the record shows."""
    import json
    import sys

    import torch

    from stochattn.provenance import stage_provenance

    rec = stage_provenance(rule="r", inputs=[], code=None)
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and rec["cpu_capability"]
    assert rec["cpu"] is None or (isinstance(rec["cpu"], str) and rec["cpu"])
    first = Path("/proc/cpuinfo").read_text().split("\n\n")[0] if Path("/proc/cpuinfo").is_file() else ""
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    if "cpu family" in fields:  # the generation behind the name (VMs often name every one alike)
        generation = f"family {fields['cpu family']}, model {fields['model']}, stepping {fields['stepping']}"
        assert rec["cpu_model"] == generation
    code = ("import json, torch; from stochattn.provenance import stage_provenance; "
            "print(json.dumps(stage_provenance(rule='r', inputs=[], code=None)['cpu_capability']))")  # fmt: skip
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == "DEFAULT"


@pytest.mark.skipif(shutil.which("git") is None, reason="git executable not found")
def test_a_stage_record_names_the_commit_of_the_checkout_the_library_runs_from(tmp_path):
    """A job's meta.json / metrics.json block (stage_provenance) carries the commit of the source checkout that
    stochattn is imported from (what the kept records of a run name), as git reports it there; a copy of the package
    that no repository tracks (an installed wheel) records "unknown"."""
    import json
    import sys

    import stochattn
    from stochattn.provenance import library_git_state, stage_provenance

    a, _ = _inputs(tmp_path)
    rec = stage_provenance(rule="r", inputs=[a], code=None, params={"seed": 3})
    package = Path(stochattn.__file__).resolve().parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=package, capture_output=True, text=True).stdout.strip()
    assert rec["git_commit"] == head and len(head) == 40 and isinstance(rec["git_dirty"], bool)
    assert (rec["git_commit"], rec["git_dirty"]) == tuple(library_git_state().values())
    assert rec["rule"] == "r" and rec["params"] == {"seed": 3} and rec["inputs"][0]["path"] == str(a)
    copy = tmp_path / "site" / "stochattn"  # an installed copy inside a repository that does not track it
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "site" / "README").write_text("x\n")
    for args in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "c"]):  # a repository with a commit
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path / "site", check=True)
    code = "import json, stochattn.provenance as p; print(json.dumps(p.library_git_state()), p.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "site", capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    state, where = out.stdout.split()[0:-1], out.stdout.split()[-1]
    assert where.startswith(str(copy)) and json.loads(" ".join(state)) == {"git_commit": "unknown", "git_dirty": None}
