"""The release artefact as a user gets it: the sdist and the wheel built from this checkout (as `make dist` builds
them), the wheel's contents, and the wheel installed into a fresh virtual environment running
``examples/quickstart.py`` from outside the checkout.

The rest of the suite imports the checkout itself (``make venv`` installs it in editable mode), so a module or a data
file missing from the wheel would go unseen there; here every ``stochattn`` module the quickstart imports must come
from the installed wheel.

How the fresh environment gets its dependencies without a download: ``python -m venv --without-pip`` (a bare
environment of the base interpreter, no system site-packages), plus one ``.pth`` file in its site-packages naming the
suite's own site-packages (torch, numpy, rtdl, ... at the lock's versions). A ``.pth`` line adds that directory to
``sys.path`` *after* the fresh environment's site-packages, and the ``.pth`` files inside it are not processed (only
site directories' are), so the checkout's editable install (a ``.pth`` naming ``src/``) does not reach the fresh
environment: ``stochattn`` resolves to the wheel alone. The wheel is installed by pip, imported through that same path,
with ``--no-deps --no-index`` (nothing fetched) and ``--ignore-installed`` (the editable install's metadata, visible on
the path, is neither uninstalled nor taken as already satisfying the wheel). Both builds run without build isolation
on the suite's setuptools (in the lock), so nothing is downloaded.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_examples import check_quickstart_output

import stochattn

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DATA = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
# what the quickstart process reports after running: where every stochattn module it imported came from
_PROBE = """
import json, runpy, sys
runpy.run_path("quickstart.py", run_name="__main__")
import stochattn
mods = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n.split(".")[0] == "stochattn"}
print("PROBE " + json.dumps({"file": stochattn.__file__, "version": stochattn.__version__, "modules": mods,
                             "path": sys.path}))
"""


def _checkout_files(dest: Path) -> None:
    """The files of a fresh clone of this checkout (tracked, plus new files git does not ignore) copied to ``dest``:
    the build sees what a clone holds, never a local results/ or .venv/, and writes nothing into the checkout."""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("the release test builds from the checkout's git file list: no git, or not a git checkout")
    out = subprocess.run([git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, check=True).stdout  # fmt: skip
    for name in filter(None, out.decode().split("\0")):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(REPO / name, dest / name)
        except (FileNotFoundError, IsADirectoryError):  # deleted in the working tree (or meanwhile): not part of it
            pass


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """{"sdist", "wheel"}: ``python -m build`` of a copy of the checkout (the sdist, then the wheel from it)."""
    missing = [m for m in ("build", "twine", "pip") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"build tooling missing: {', '.join(missing)} (the test extra of pyproject.toml installs them)")
    root = tmp_path_factory.mktemp("release")
    _checkout_files(root / "src")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", root / "dist", root / "src"])
    _run([sys.executable, "-m", "twine", "check", "--strict", *sorted((root / "dist").iterdir())])
    (wheel,) = (root / "dist").glob("*.whl")
    (sdist,) = (root / "dist").glob("*.tar.gz")
    return {"root": root, "wheel": wheel, "sdist": sdist}


def test_the_version_has_one_source():
    """pyproject.toml takes its version from stochattn.__version__ (setuptools' dynamic version)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "stochattn.__version__"}


def test_the_wheel_holds_the_package_and_its_data_only(dist):
    version = stochattn.__version__
    assert dist["wheel"].name == f"stochattn-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(dist["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"stochattn", f"stochattn-{version}.dist-info"}, tops  # no tests, results, config, docs
    modules = {p.relative_to(REPO / "src").as_posix() for p in (REPO / "src" / "stochattn").rglob("*.py")}
    assert modules <= set(names), sorted(modules - set(names))
    data = {f"{pkg.replace('.', '/')}/{f}" for pkg, files in PACKAGE_DATA.items() for f in files}
    others = {n for n in names if n.startswith("stochattn/") and not n.endswith(".py")}
    assert others == data, others  # the declared package data, nothing else (no __pycache__, no stray files)
    meta = zipfile.ZipFile(dist["wheel"]).read(f"stochattn-{version}.dist-info/METADATA").decode()
    assert f"Version: {version}" in meta and "Requires-Dist: torch>=2.5" in meta
    entry = zipfile.ZipFile(dist["wheel"]).read(f"stochattn-{version}.dist-info/entry_points.txt").decode()
    assert "stochattn = stochattn.cli:cli" in entry


def test_the_sdist_holds_the_package_its_data_and_the_changelog(dist):
    names = {n.split("/", 1)[1] for n in tarfile.open(dist["sdist"]).getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO"} <= names
    data = {f"src/{pkg.replace('.', '/')}/{f}" for pkg, files in PACKAGE_DATA.items() for f in files}
    assert data <= names and "src/stochattn/__init__.py" in names
    assert not any(n.split("/")[0] in ("tests", "results", "config", "rules", "docs") for n in names)


def test_the_installed_wheel_runs_the_quickstart_outside_the_checkout(dist, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    (site / "_stochattn_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PYTHONNOUSERSITE="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    _run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--no-compile",
          dist["wheel"]], env=env)  # fmt: skip
    run = tmp_path / "outside"
    run.mkdir()
    shutil.copy(REPO / "examples" / "quickstart.py", run / "quickstart.py")
    res = _run([py, "-c", _PROBE], cwd=run, env=env)
    check_quickstart_output(res.stdout)
    probe = json.loads(res.stdout.rsplit("PROBE ", 1)[1])
    venv_site = site.resolve()
    assert Path(probe["file"]).resolve().is_relative_to(venv_site), probe["file"]
    assert probe["version"] == stochattn.__version__
    outside = {m: f for m, f in probe["modules"].items() if f and not Path(f).resolve().is_relative_to(venv_site)}
    assert not outside, f"stochattn modules imported from outside the installed wheel: {outside}"
    deps = Path(sysconfig.get_path("purelib")).resolve()  # the one directory of the checkout on the path (in CI)
    inside = [p for p in probe["path"] if p and Path(p).resolve().is_relative_to(REPO) and Path(p).resolve() != deps]
    assert not inside, f"the checkout on the quickstart's sys.path: {inside}"
    cli = _run([venv / "bin" / "stochattn", "--help"], cwd=run, env=env)  # the console script, installed
    assert "stochattn audit" in cli.stdout + cli.stderr
