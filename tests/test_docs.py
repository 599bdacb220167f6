"""The documentation: config/README.md documents every key of the schema, the configs' measurement links resolve,
`mkdocs build --strict` passes (a broken link or anchor, a page missing from the nav, a docstring that does not render
fail it), the generated pages cover every module and every NOTE[DIFF], and a built page renders in headless Chromium."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # the theme's and a plugin's banners


def schema_keys(properties: dict, prefix: str = ""):
    """Dotted path of every key the schema defines inline (not through $ref), at every depth."""
    for key, spec in properties.items():
        yield prefix + key
        if isinstance(spec, dict) and "properties" in spec:
            yield from schema_keys(spec["properties"], f"{prefix}{key}.")


def documented_keys(readme: str) -> set[str]:
    """Every key named in a code span of a table row of config/README.md; `a.{b, c}` names a.b and a.c."""
    names = set()
    for row in (ln for ln in readme.splitlines() if ln.startswith("| `")):
        for span in re.findall(r"`([^`]+)`", row):
            for token in re.split(r",\s*(?![^{]*\})", span):
                m = re.fullmatch(r"([\w.<>*]*?)\{([^}]*)\}(.*)", token.strip())
                names.update([m[1] + alt.strip() + m[3] for alt in m[2].split(",")] if m else [token.strip()])
    return names


def is_documented(key: str, names: set[str]) -> bool:
    """Named itself, through one of its sub-keys, or by an ancestor's wildcard (`data.*`)."""
    parts = key.split(".")
    return any(n == key or n.startswith(key + ".") for n in names) or any(
        ".".join(parts[:i] + ["*"]) in names for i in range(len(parts))
    )


def test_config_readme_documents_every_schema_key():
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    names = documented_keys((REPO / "config" / "README.md").read_text())
    missing = [k for k in schema_keys(schema["properties"]) if not is_documented(k, names)]
    assert not missing, f"config/schema.yaml keys without a row in config/README.md: {missing}"


def test_config_measurement_links_resolve():
    """Every `#anchor` in a config file's comments names a section of docs/measurements.md."""
    anchors = set(re.findall(r"\{#([\w-]+)\}", (REPO / "docs" / "measurements.md").read_text()))
    links = {
        (path.name, a)
        for path in (REPO / "config").glob("*.yaml")
        for line in path.read_text().splitlines()
        if "#" in line
        for a in re.findall(r"#([a-z][\w-]*)", line.split("#", 1)[1])
    }
    assert {a for _, a in links} <= anchors, sorted(link for link in links if link[1] not in anchors)
    assert links, "config/quick.yaml links its measurements by #anchor"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation built once, strictly, into a temporary folder."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed: it is in the docs extra, which the test extra includes (make venv)")
    out = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, **QUIET},
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    print(f"mkdocs build --strict: {time.monotonic() - start:.1f} s")
    return out


def test_docs_build_strict(site):
    assert (site / "index.html").exists()
    # an API page for every module of the package (found by importing it, not from a list)
    sys.path.insert(0, str(REPO / "src"))
    import pkgutil

    import stochattn

    for mod in pkgutil.walk_packages(stochattn.__path__, "stochattn."):
        path = Path("reference", *mod.name.split(".")[1:])
        page = site / (path / "index.html" if mod.ispkg else path.with_suffix(".html"))
        assert page.exists(), f"no API page for {mod.name}"
    # every file holding a NOTE[DIFF] has its section on the generated page
    diffs = re.sub(r"<[^>]+>", "", (site / "reproduction" / "differences.html").read_text())
    grep = subprocess.run(["grep", "-rlF", "--include=*.py", "--include=*.smk", "--include=*.yaml", "NOTE[DIFF]", "src",
                           "rules", "workflow_scripts", "config"], cwd=REPO, capture_output=True, text=True)
    assert grep.stdout.split(), grep.stderr
    missing = [f for f in grep.stdout.split() if f not in diffs]
    assert not missing, f"files with a NOTE[DIFF] missing from reproduction/differences: {missing}"


def test_the_uci_records_page_is_remade_from_the_kept_records(site):
    """reproduction/uci-records: every data set of the paper's UCI list, each kept records folder with its table and
    its W1 row beside the paper's (the numbers of the records' own report), the others as holding none; the figure."""
    sys.path.insert(0, str(REPO / "src"))
    from stochattn.experiments import uci_slice_report

    page = site / "reproduction" / "uci-records.html"
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text()))
    records = REPO / "benchmarks" / "records" / "uci_paper"
    folders = sorted(p for p in records.iterdir() if p.is_dir())
    report = uci_slice_report.build(folders, [p.name for p in folders], REPO / "config" / "paper_results.yaml")
    for _, row in report.table.iterrows():  # each cell as the report prints it, in its data set's table
        cell = f"{row['w1']:.3f} ({row['w1_floor']:.3f}) {row['paper_w1']:.3f} {row['ratio']:.2f}"
        assert cell in text, (row["dataset"], row["method"], cell)
    for ds in ("yacht", "energy", "concrete", "wine", "kin8nm", "power", "naval", "protein"):
        held = (records / ds).is_dir()
        assert (f" {ds} none every method " in text) != held, ds
        assert bool(re.search(rf" {ds} \(\d+ splits?; RMSE", text)) == held, ds  # its table's heading
    assert (site / "reproduction" / "uci_records_w1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def chromium() -> str | None:
    return next(filter(None, map(shutil.which, ["chromium", "chromium-browser", "google-chrome", "chrome"])), None)


def test_docs_page_renders_in_headless_chromium(site, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium): the rendering check needs one")
    page = site / "guide" / "running.html"
    res = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    dom = res.stdout
    assert res.returncode == 0 and dom, res.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title and "Running the workflow" in title[1], dom[:2000]
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
    assert h1 and "Running the workflow" in re.sub(r"<[^>]+>", "", h1[1]), dom[:2000]
