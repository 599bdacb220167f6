"""`--sdm conda` (issue 49): Snakemake's own deployment code builds envs/stochattn.yaml's environment from its copy
under .snakemake/conda/, and the post-deploy step installs this repository into it.

The conda solve itself needs a conda channel (and PyPI for the pip section), which this machine cannot reach: a fake
``conda`` stands in for it. It answers Snakemake's checks, records the file it is given to ``conda env create``, and
creates the environment's folder with a fake ``python`` that records the post-deploy step's pip call. Everything
before the solve is checked: what pip would be given in that folder parses, is exactly the lock, and every path
named in it resolves from there."""

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import yaml
from conftest import tiny_config
from packaging.utils import canonicalize_name
from test_workflow import REPO, smk

ENVS = REPO / "envs"
# Snakemake needs conda >= 24.7.1 (snakemake.deployment.conda.MIN_CONDA_VER) and strict channel priority
FAKE_CONDA = r"""#!/bin/bash
case "$1 $2" in
  "--version ") echo "conda 25.1.1" ;;
  "info --json") echo '{"conda_prefix": "'"$FAKE_CONDA_ROOT"'", "platform": "linux-64"}' ;;
  "config --get") echo '{"get": {"channel_priority": "strict"}}' ;;
  "clean -y") ;;  # after the creation: Snakemake's default --conda-cleanup-pkgs tarballs
  "env create")
    while [ $# -gt 0 ]; do
      case "$1" in --file) file="$2"; shift ;; --prefix) prefix="$2"; shift ;; esac; shift
    done
    printf '%s\n' "$file" "$prefix" > "$FAKE_CONDA_ROOT/created"
    mkdir -p "$prefix/bin"
    printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/python-args"\n' "$FAKE_CONDA_ROOT" > "$prefix/bin/python"
    chmod +x "$prefix/bin/python" ;;
  *) echo "fake conda: unexpected call: $*" >&2; exit 1 ;;
esac
"""
# what Snakemake sources (`source <conda_prefix>/bin/activate <env>`) before the post-deploy script
FAKE_ACTIVATE = 'export PATH="$1/bin:$PATH"\n'
# pip options whose value is a file or folder (a URL is not checked)
PATH_OPTION = re.compile(r"(?:^|\s)(?:-r|--requirement|-c|--constraint|-e|--editable|-f|--find-links)(?:=|\s+)(\S+)")


def _conda_env_module():
    spec = importlib.util.spec_from_file_location("conda_env", ENVS / "conda_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pip_requirements(path: Path) -> dict[str, tuple[str, frozenset]]:
    """{package: (version, hashes)} of a requirements file, read by pip's own parser (it opens every -r / -c file
    relative to the file naming it, as pip does when conda runs it); each requirement must be pinned with a hash."""
    from packaging.requirements import Requirement
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    pinned = {}
    for parsed in parse_requirements(str(path), session=PipSession()):
        req = Requirement(parsed.requirement)
        (spec,) = req.specifier
        hashes = (parsed.options or {}).get("hashes", {}).get("sha256", [])
        assert spec.operator == "==" and hashes and not parsed.is_editable, parsed
        pinned[canonicalize_name(req.name)] = (spec.version, frozenset(hashes))
    return pinned


def test_yaml_is_the_lock(tmp_path):
    """envs/stochattn.yaml's pip section is envs/cuda.lock as `make lock` writes it (regenerating changes nothing)."""
    env = _conda_env_module()
    assert env.render(env.YAML.read_text(), env.LOCK.read_text()) == env.YAML.read_text()


def test_post_deploy_needs_the_repository():
    """Outside the workflow (no STOCHATTN_REPO) the post-deploy script stops with a message naming the variable."""
    environ = {k: v for k, v in os.environ.items() if k != "STOCHATTN_REPO"}
    res = subprocess.run(["sh", str(ENVS / "stochattn.post-deploy.sh")], env=environ, capture_output=True, text=True)
    assert res.returncode == 1 and "STOCHATTN_REPO" in res.stderr, res


def test_sdm_conda_builds_from_snakemakes_copy(tmp_path, monkeypatch):
    """`snakemake --sdm conda --conda-create-envs-only`: Snakemake copies the yaml to .snakemake/conda/<hash>.yaml
    and asks conda to create the environment from that copy; pip, run by conda in the copy's folder, would get exactly
    the lock (pinned, hashed) and no path that does not resolve there; the post-deploy step installs the repository."""
    root, bin_ = tmp_path / "conda", tmp_path / "bin"
    (root / "bin").mkdir(parents=True)
    bin_.mkdir()
    (bin_ / "conda").write_text(FAKE_CONDA)
    (bin_ / "conda").chmod(0o755)
    (root / "bin" / "activate").write_text(FAKE_ACTIVATE)
    monkeypatch.setenv("FAKE_CONDA_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("STOCHATTN_REPO", raising=False)  # the workflow must set it

    work = tmp_path / "work"
    res = smk(work, "--sdm", "conda", "--conda-create-envs-only", "results/uci/yacht/split0/swag/metrics.json",
              configfile=tiny_config(tmp_path / "tiny.yaml"), timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout[-4000:]
    created, prefix = (Path(p) for p in (root / "created").read_text().splitlines())

    # the copy Snakemake wrote beside the environment, under the working directory's .snakemake/conda/
    assert created == Path(f"{prefix}.yaml") and created.parent == work / ".snakemake" / "conda", (created, prefix)
    text = created.read_text()
    assert text == (ENVS / "stochattn.yaml").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("name:"))  # after the header comment
    print(f"\nthe environment spec Snakemake wrote, {created.relative_to(tmp_path)} (from `name:`, cut at 120):")
    print("\n".join(line[:120] for line in lines[start : start + 12]))

    # conda's pip installer writes the pip section to a requirements file in the yaml's folder and runs pip there
    (pip_section,) = [d["pip"] for d in yaml.safe_load(text)["dependencies"] if isinstance(d, dict)]
    requirements = created.parent / "condaenv.test.requirements.txt"
    requirements.write_text("\n".join(pip_section))
    named = [m for spec in pip_section for m in PATH_OPTION.findall(spec) if "://" not in m]
    missing = [p for p in named if not (created.parent / p).exists()]
    assert not missing, f"paths in the pip section that do not resolve from {created.parent}: {missing}"
    assert _pip_requirements(requirements) == _pip_requirements(ENVS / "cuda.lock")

    # the post-deploy step: Snakemake's copy of the script, run in the environment, installed this repository
    deploy = Path(f"{prefix}.post-deploy.sh")
    assert deploy.read_text() == (ENVS / "stochattn.post-deploy.sh").read_text()
    args = (root / "python-args").read_text().splitlines()
    assert args[:-1] == ["-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e"], args
    repo = Path(args[-1])
    assert repo == REPO and (repo / "pyproject.toml").is_file(), repo
    assert prefix.with_suffix(".env_setup_done").exists()  # Snakemake counts the environment as built

    print("resolved paths:")
    print(f"  copied yaml:           {created}")
    print(f"  pip requirements file: {requirements} ({len(pip_section)} pinned, hashed requirements)")
    print(f"  paths named in it:     {named or 'none'}")
    print(f"  post-deploy script:    {deploy}")
    print(f"  pip install -e:        {repo} (pyproject.toml: {(repo / 'pyproject.toml').is_file()})")
    print(f"  environment:           {prefix}")
    print("post-deploy's pip call: python", " ".join(args))
