"""Staging (stochattn.staging, `stochattn download`): against a real HTTP server on localhost that serves Range
requests, redirects, and can cut a transfer short or throttle it. Resumed transfers, length and SHA-256 checks, the
store kept file by file across a kill, WeatherBench zips unpacked, the disk refusal before anything is written,
and model jobs that cannot download."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from stochattn import staging
from stochattn.staging import Download, DownloadError, InsufficientDiskError, fetch_url, stage

REPO = Path(__file__).resolve().parents[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET / HEAD of ``server.files`` (path -> bytes) with Range support; ``server.redirects`` (path -> path) answer
    302; ``server.cut`` (path -> n) sends the full Content-Length but closes after n bytes (once); ``server.slow``
    (path -> seconds per 64 kB); ``server.no_range``: paths answered 200 whatever the Range. Every request is logged
    as (method, path, Range header)."""

    def log_message(self, *args):  # quiet
        pass

    def _serve(self, head: bool) -> None:
        srv = self.server
        srv.log.append((self.command, self.path, self.headers.get("Range")))
        if self.path in srv.redirects:
            self.send_response(302)
            self.send_header("Location", srv.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = srv.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng and self.path not in srv.no_range:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        cut = srv.cut.pop(self.path, None)
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        delay = srv.slow.get(self.path, 0.0)
        for i in range(0, len(body), 1 << 16):
            self.wfile.write(body[i:i + (1 << 16)])
            if delay:
                self.wfile.flush()
                time.sleep(delay)

    def do_GET(self):
        self._serve(head=False)

    def do_HEAD(self):
        self._serve(head=True)


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.redirects, srv.cut, srv.slow, srv.no_range, srv.log = {}, {}, {}, {}, set(), []
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(n: int, seed: int = 0) -> bytes:
    return bytes((i * 31 + seed * 7 + i // 251) % 256 for i in range(n))


# ------------------------------------------------------------------------------------------------------------------
# one file
# ------------------------------------------------------------------------------------------------------------------
def test_a_cut_transfer_is_caught_by_its_length_and_resumed_with_a_range_request(server, tmp_path):
    data = blob(300_000)
    server.files["/f.bin"] = data
    server.cut["/f.bin"] = 100_000
    dest = tmp_path / "f.bin"
    with pytest.raises(DownloadError, match="received 100000 of 300000 bytes"):
        fetch_url(f"{server.url}/f.bin", dest, sha256=sha(data))
    assert not dest.exists() and (tmp_path / "f.bin.part").stat().st_size == 100_000
    got = fetch_url(f"{server.url}/f.bin", dest, sha256=sha(data))
    assert dest.read_bytes() == data and got["resumed_from"] == 100_000 and got["sha256"] == sha(data)
    assert server.log[-1] == ("GET", "/f.bin", "bytes=100000-")
    assert not (tmp_path / "f.bin.part").exists()


def test_a_server_that_ignores_range_restarts_the_file(server, tmp_path):
    data = blob(50_000, 1)
    server.files["/g.bin"] = data
    server.no_range.add("/g.bin")
    (tmp_path / "g.bin.part").write_bytes(b"stale bytes of another transfer")
    got = fetch_url(f"{server.url}/g.bin", tmp_path / "g.bin", sha256=sha(data))
    assert (tmp_path / "g.bin").read_bytes() == data and got["resumed_from"] == 0


def test_a_redirect_is_followed_and_recorded(server, tmp_path):
    """The Hub's resolve URLs (ClimaX's checkpoint) answer 302 to a CDN."""
    data = blob(20_000, 2)
    server.files["/cdn/5.625deg.ckpt"] = data
    server.redirects["/resolve/main/5.625deg.ckpt"] = f"{server.url}/cdn/5.625deg.ckpt"
    got = fetch_url(f"{server.url}/resolve/main/5.625deg.ckpt", tmp_path / "c.ckpt")
    assert got["url"].endswith("/cdn/5.625deg.ckpt") and (tmp_path / "c.ckpt").read_bytes() == data


def test_a_changed_file_fails_its_pinned_sha256_and_leaves_nothing(server, tmp_path):
    server.files["/h.bin"] = blob(10_000, 3)
    with pytest.raises(DownloadError, match="SHA-256 .* expected 0{64}"):
        fetch_url(f"{server.url}/h.bin", tmp_path / "h.bin", sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_the_climax_checkpoint_through_a_redirect_partial_and_changed(server, tmp_path):
    """ClimaX's fetch: a redirect followed, a cut transfer resumed on the next call, a changed file refused."""
    from stochattn.backbones.climax import fetch_climax_checkpoint

    data = blob(200_000, 4)
    server.files["/cdn/ckpt"] = data
    server.redirects["/resolve/ckpt"] = f"{server.url}/cdn/ckpt"
    server.cut["/cdn/ckpt"] = 70_000
    dest = tmp_path / "backbone" / "5.625deg.ckpt"
    with pytest.raises(OSError, match="received 70000 of 200000"):
        fetch_climax_checkpoint(dest, url=f"{server.url}/resolve/ckpt", sha256=sha(data))
    got = fetch_climax_checkpoint(dest, url=f"{server.url}/resolve/ckpt", sha256=sha(data))
    assert got["sha256"] == sha(data) and dest.read_bytes() == data
    assert got["url"].endswith("/cdn/ckpt")
    server.files["/cdn/ckpt"] = blob(200_000, 5)  # the file changed on the server
    with pytest.raises(ValueError, match="a partial or changed file"):
        fetch_climax_checkpoint(tmp_path / "other.ckpt", url=f"{server.url}/resolve/ckpt", sha256=sha(data))
    assert not (tmp_path / "other.ckpt").exists()


def test_a_model_job_cannot_download(monkeypatch, tmp_path):
    monkeypatch.setattr(staging, "_FORBIDDEN", [])
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # restored after the test
    staging.forbid_network("rule ett_adapt is a model job (GPU jobs never download)")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(staging.NetworkForbiddenError, match="ett_adapt .* `stochattn download"):
        fetch_url("https://example.org/x.bin", tmp_path / "x.bin")


# ------------------------------------------------------------------------------------------------------------------
# the store
# ------------------------------------------------------------------------------------------------------------------
def _config(store: Path) -> dict:
    return {"data": {"store": str(store), "mirrors": []}, "datasets": [], "methods": []}


def _plan(server, store: Path, files: dict[str, bytes]) -> list[Download]:
    for name, data in files.items():
        server.files[f"/{name}"] = data
    return [Download("uci", "file", f"{server.url}/{n}", store / "UCI_Datasets" / "x" / "data" / n, sha(d))
            for n, d in files.items()]  # fmt: skip


def test_stage_keeps_verified_files_and_refetches_only_a_bad_one(server, tmp_path):
    store = tmp_path / "store"
    files = {f"f{i}.txt": blob(5_000 + i, i) for i in range(6)}
    plan = _plan(server, store, files)
    first = stage(plan, _config(store), workdir=tmp_path, connections=3, progress=False, echo=lambda s: None)
    assert len(first["fetched"]) == 6 and not first["kept"]
    plan[2].path.write_bytes(b"corrupted on disk")
    server.log.clear()
    second = stage(plan, _config(store), workdir=tmp_path, connections=3, progress=False, echo=lambda s: None)
    assert [Path(f["path"]).name for f in second["fetched"]] == ["f2.txt"] and len(second["kept"]) == 5
    assert [p for m, p, _ in server.log if m == "GET"] == ["/f2.txt"]
    assert plan[2].path.read_bytes() == files["f2.txt"]


def test_stage_refuses_before_writing_when_the_disk_is_too_small(server, tmp_path, monkeypatch):
    store = tmp_path / "store"
    plan = _plan(server, store, {"big.bin": blob(400_000)})
    real = staging.shutil.disk_usage
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda p: real(p)._replace(free=100_000))
    with pytest.raises(InsufficientDiskError) as err:
        stage(plan, _config(store), workdir=tmp_path, progress=False, echo=lambda s: None)
    msg = str(err.value)
    assert "0.4 MB needed" in msg and "0.1 MB free" in msg and "uci" in msg and "nothing was downloaded" in msg
    assert not plan[0].path.exists() and not any(p.name.endswith(".part") for p in store.rglob("*"))


def _weatherbench_zip(folder: str, years: list[int]) -> tuple[bytes, dict[str, bytes]]:
    members = {f"{folder}_{y}_5.625deg.nc": blob(3_000 + y % 7, y) for y in years}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(f"{folder}/{name}", data)
    return buf.getvalue(), members


def test_a_weatherbench_zip_is_unpacked_and_its_members_kept_across_runs(server, tmp_path):
    store = tmp_path / "store"
    data, members = _weatherbench_zip("2m_temperature", [2016, 2017])
    server.files["/t2m.zip"] = data
    folder = store / "weatherbench" / "5.625deg" / "2m_temperature"
    plan = [Download("era5", "zip", f"{server.url}/t2m.zip", folder / "2m_temperature_5.625deg.zip",
                     unpacked=sum(map(len, members.values())), members=tuple(members))]  # fmt: skip
    stage(plan, _config(store), workdir=tmp_path, progress=False, echo=lambda s: None)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == members  # the zip itself is gone
    record = json.loads((store / staging.VERIFIED).read_text())
    assert record["weatherbench/5.625deg/2m_temperature/2m_temperature_2016_5.625deg.nc"]["zip_sha256"] == sha(data)
    server.log.clear()
    again = stage(plan, _config(store), workdir=tmp_path, progress=False, echo=lambda s: None)
    assert again["kept"] and not again["fetched"] and server.log == []


_STAGE_SCRIPT = """
import json, sys
from pathlib import Path
from stochattn.staging import Download, stage
spec = json.loads(Path(sys.argv[1]).read_text())
plan = [Download("uci", "file", d["url"], Path(d["path"]), d["sha256"]) for d in spec["plan"]]
summary = stage(plan, spec["config"], workdir=spec["workdir"], connections=2, progress=False)
Path(sys.argv[2]).write_text(json.dumps(summary))
"""


def test_download_killed_and_rerun_fetches_only_what_was_missing(server, tmp_path):
    """A staging process killed (SIGKILL) while a slow file streams: the rerun keeps every complete file (no
    request for them), continues the interrupted one from its .part with a Range request, and fetches the rest."""
    store = tmp_path / "store"
    files = {"a.txt": blob(4_000, 1), "b.txt": blob(4_000, 2), "slow.bin": blob(2_000_000, 3)}
    plan = _plan(server, store, files)
    server.slow["/slow.bin"] = 0.05  # ~1.3 MB/s: the kill lands mid-file
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"plan": [{"url": d.url, "path": str(d.path), "sha256": d.sha256} for d in plan],
                                "config": _config(store), "workdir": str(tmp_path)}))  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen([sys.executable, "-c", _STAGE_SCRIPT, str(spec), str(tmp_path / "out.json")], env=env)
    part = plan[2].path.with_name("slow.bin.part")
    deadline = time.time() + 60
    while time.time() < deadline and not (part.is_file() and part.stat().st_size > 300_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = part.stat().st_size
    assert 0 < done < len(files["slow.bin"]) and plan[0].path.is_file() and plan[1].path.is_file()
    server.slow.clear()
    server.log.clear()
    subprocess.run([sys.executable, "-c", _STAGE_SCRIPT, str(spec), str(tmp_path / "out.json")], env=env, check=True)
    summary = json.loads((tmp_path / "out.json").read_text())
    assert [Path(f["path"]).name for f in summary["fetched"]] == ["slow.bin"]
    assert summary["fetched"][0]["resumed_from"] >= done - (1 << 16)
    assert [(p, r is not None) for m, p, r in server.log if m == "GET"] == [("/slow.bin", True)]
    assert all(d.path.read_bytes() == files[d.path.name] for d in plan)


# ------------------------------------------------------------------------------------------------------------------
# the plan from a configuration
# ------------------------------------------------------------------------------------------------------------------
def test_the_paper_plan_names_every_slice_and_skips_what_a_mirror_holds(tmp_path):
    config = staging.workflow_config([], REPO)
    config["data"]["store"] = str(tmp_path / "store")
    plan = staging.plan_downloads(config, tmp_path)
    kinds = {(d.slice, d.kind) for d in plan}
    assert kinds == {("uci", "file"), ("ett", "file"), ("ett", "hf"), ("era5", "zip"), ("era5", "file")}
    zips = [d for d in plan if d.kind == "zip"]
    assert len(zips) == len(config["era5"]["weatherbench"]["folders"]) and all(len(d.members) == 40 for d in zips)
    estimate = staging.disk_estimate(config, plan, {})
    assert 130e9 < estimate["era5"]["shards"] < 145e9  # 40 years of 48 hourly float32 channels on 32 x 64
    quick = staging.workflow_config([REPO / "config" / "quick.yaml"], REPO)  # the shared mirror holds UCI and ETT
    quick["data"]["store"] = str(tmp_path / "store")
    if all(Path(m).is_dir() for m in quick["data"]["mirrors"]):
        assert staging.plan_downloads(quick, tmp_path) == []


def test_the_download_target_runs_as_a_job_of_the_workflow(tmp_path):
    """`snakemake download` (what `--profile slurm` submits as one CPU job): on the embedded default every file is
    in the shared mirror, so it stages nothing and says so in its log."""
    from test_workflow import _snakemake_cmd

    quick = staging.workflow_config([REPO / "config" / "quick.yaml"], REPO)
    if not all(Path(m).is_dir() for m in quick["data"]["mirrors"]):
        pytest.skip("the shared data mirror is absent")
    cmd = [*_snakemake_cmd(), "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "2",
           "download", "--configfile", str(REPO / "config" / "quick.yaml")]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:]
    log = (tmp_path / "logs" / "data" / "download.log").read_text()
    assert "0 files needed" in log and "download: 0 fetched, 0 kept" in log, log
