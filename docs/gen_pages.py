"""Pages generated at every build (mkdocs-gen-files), so that they cannot drift from the source:

* ``reference/``: one API page per module of the ``stochattn`` package, found by importing the package and walking
  it (a new module gets its page without editing anything here), rendered from its docstrings by mkdocstrings;
* ``guide/configuration.md``: ``config/README.md``, the reference of every config key;
* ``reproduction/differences.md``: every ``NOTE[DIFF]`` of the source, rules and configs with its reason;
* ``reproduction/uci-records.md``: the paper configuration's UCI runs against the paper, remade from the records kept in
  ``benchmarks/records/uci_paper`` (what each holds, the report's tables, the W1 figure).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["src", "rules", "workflow_scripts", "config", "Snakefile", "benchmarks"]
MARK = "NOTE[DIFF]"
# a mention that only points at a note elsewhere ("see its NOTE[DIFF]", "(module NOTE[DIFF])") is not a note
REFERENCE = re.compile(r"(?:\bits|'s|\bmodule|\bsee)\s+NOTE\[DIFF\]|NOTE\[DIFF\] in \S+\.(?:yaml|py)")


def package_modules(package: str = "stochattn") -> list[str]:
    """Every module and subpackage of ``package``, in the checkout's ``src/`` (walk_packages imports the packages)."""
    sys.path.insert(0, str(ROOT / "src"))
    pkg = importlib.import_module(package)
    return [package, *sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, f"{package}."))]


def write_reference() -> None:
    nav = []
    for name in package_modules():
        parts = name.split(".")
        path = Path(*parts[1:]) if len(parts) > 1 else Path("index")
        if (ROOT / "src" / Path(*parts) / "__init__.py").exists() and len(parts) > 1:
            path = path / "index"
        with mkdocs_gen_files.open(Path("reference", path.with_suffix(".md")), "w") as f:
            f.write(f"::: {name}\n")
        mkdocs_gen_files.set_edit_path(Path("reference", path.with_suffix(".md")), ROOT / "src" / Path(*parts))
        nav.append(f"{'    ' * (len(parts) - 1)}* [{name}]({path.with_suffix('.md').as_posix()})")
    with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as f:
        f.write("\n".join(nav) + "\n")


def write_configuration() -> None:
    with mkdocs_gen_files.open("guide/configuration.md", "w") as f:
        f.write((ROOT / "config" / "README.md").read_text())


# ---------------------------------------------------------------------------------------------------------- NOTE[DIFF]


def _defs(node: ast.AST, prefix: tuple = ()):
    """(qualified name, node) of every function and class under ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield (*prefix, child.name), child
            yield from _defs(child, (*prefix, child.name))
        else:
            yield from _defs(child, prefix)


def _owner_py(tree: ast.AST, line: int) -> str:
    """Qualified name of the innermost function or class around ``line`` ('module' at module level)."""
    inner = max(((c.lineno, q) for q, c in _defs(tree) if c.lineno <= line <= c.end_lineno), default=(0, ()))
    return ".".join(inner[1]) or "module"


def _docstring_notes(tree: ast.AST, lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(line of the mark, docstring's first and last line, paragraph) of every docstring paragraph with the mark."""
    out = []
    for node in ast.walk(tree):
        doc = ast.get_docstring(node) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                           ast.AsyncFunctionDef)) else None
        if not doc or MARK not in doc:
            continue
        first = node.body[0]
        marks = [j for j in range(first.lineno, first.end_lineno + 1) for _ in range(lines[j - 1].count(MARK))]
        k = 0
        for para in re.split(r"\n\s*\n", doc):
            if MARK in para and para.count(MARK) > len(REFERENCE.findall(para)):
                items = re.split(r"\n(?=\* )", para)  # of a bulleted paragraph, the items with the note
                out.append((marks[k], first.lineno, first.end_lineno, "\n".join(i for i in items if MARK in i)))
            k += para.count(MARK)
    return out


def _comment_block(lines: list[str], i: int) -> tuple[int, int, str]:
    """The run of comment lines (same indentation of ``#``) around line ``i`` (0-based), as text."""
    col = lines[i].index("#")
    same = lambda j: lines[j].lstrip().startswith("#") and lines[j].index("#") == col  # noqa: E731
    if not lines[i].lstrip().startswith("#"):  # a comment after code: that comment alone
        return i, i, lines[i][col + 1:].strip()
    lo, hi = i, i
    while lo > 0 and same(lo - 1) and lines[lo - 1][col + 1:].strip():
        lo -= 1
    while hi + 1 < len(lines) and same(hi + 1) and lines[hi + 1][col + 1:].strip():
        hi += 1
    return lo, hi, "\n".join(ln[col + 1:].strip() for ln in lines[lo:hi + 1])


def _yaml_key(lines: list[str], after: int) -> str:
    """Dotted key path of the first YAML key at or after line ``after`` (0-based)."""
    stack: list[tuple[int, str]] = []
    for j, ln in enumerate(lines):
        m = re.match(r"^(\s*)(?:-\s+)?([A-Za-z0-9_]+):", ln)
        if not m or ln.lstrip().startswith("#"):
            continue
        indent = len(m.group(1))
        stack = [(d, k) for d, k in stack if d < indent] + [(indent, m.group(2))]
        if j >= after:
            return ".".join(k for _, k in stack)
    return ""


def find_notes(root: Path = ROOT) -> list[dict]:
    """Every NOTE[DIFF] under ``SCANNED``: file, line, owner (function / rule / config key) and its text."""
    notes = []
    files = [p for s in SCANNED for p in ([root / s] if (root / s).is_file() else sorted((root / s).rglob("*")))]
    for path in files:
        if not path.is_file() or path.suffix not in {".py", ".smk", ".yaml", ""} or "__pycache__" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if MARK not in text:
            continue
        lines = text.splitlines()
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(text) if path.suffix == ".py" else None
        seen: set[int] = set()  # lines already part of a note
        for line, lo, hi, para in _docstring_notes(tree, lines) if tree else []:
            seen.update(range(lo, hi + 1))
            notes.append({"file": rel, "line": line, "owner": _owner_py(tree, line), "text": para})
        for i, ln in enumerate(lines):
            if MARK not in ln or i + 1 in seen or "#" not in ln:
                continue
            lo, hi, block = _comment_block(lines, i)
            seen.update(range(lo + 1, hi + 2))
            if block.count(MARK) == len(REFERENCE.findall(block)):
                continue
            if tree is not None:
                owner = _owner_py(tree, i + 1)
            elif path.suffix == ".yaml":
                owner = _yaml_key(lines, hi + 1)
            else:
                owner = next((m.group(1) for ln2 in reversed(lines[:i])
                              if (m := re.match(r"^(?:rule|checkpoint|def)\s+(\w+)", ln2))), "")
            notes.append({"file": rel, "line": lo + 1, "owner": owner, "text": block})
    return sorted(notes, key=lambda n: (n["file"], n["line"]))


def to_markdown(text: str) -> str:
    """One paragraph of source text as Markdown: RST roles and literals to code spans, the rest escaped."""
    text = re.sub(r":(?:func|class|mod|meth|attr|data):`~?([^`]+)`", r"``\1``", " ".join(text.split()))
    parts = re.split(r"(``[^`]+``|`[^`]+`)", text)
    out = []
    for k, part in enumerate(parts):
        if k % 2:
            out.append("`" + part.strip("`") + "`")
        else:
            out.append(re.sub(r"([\\*_\[\]])", r"\\\1", part).replace("<", "&lt;"))
    return "".join(out)


SECTIONS = [("src/", "The library (src/stochattn)"), ("workflow_scripts/", "Workflow scripts"),
            ("rules/", "Workflow rules"), ("Snakefile", "Workflow rules"), ("config/", "Configuration"),
            ("benchmarks/", "Benchmarks")]


def anchor(file: str) -> str:
    """The anchor of a file's section on the differences page, e.g. ``diff-src-stochattn-calibrate-py``."""
    return "diff-" + re.sub(r"[^a-z0-9]+", "-", file.lower()).strip("-")


def write_differences() -> None:
    notes = find_notes()
    out = [
        "# Every NOTE[DIFF]",
        "",
        f"Generated at build time from every `{MARK}` comment and docstring paragraph under "
        + ", ".join(f"`{s}`" for s in SCANNED)
        + f" (`docs/gen_pages.py`): **{len(notes)} notes in {len({n['file'] for n in notes})} files**. Each is a place "
        "where the code departs from the paper on purpose, or does what the paper leaves open, with its reason. "
        "[Paper tables and figures](index.md) says which of them touch which result.",
        "",
    ]
    for prefix, title in SECTIONS:
        mine = [n for n in notes if n["file"].startswith(prefix)]
        if not mine:
            continue
        if f"## {title}" not in out:
            out += [f"## {title}", ""]
        for file in dict.fromkeys(n["file"] for n in mine):
            out += [f"### `{file}` {{#{anchor(file)}}}", ""]
            for n in (n for n in mine if n["file"] == file):
                owner = f"`{n['owner']}`, " if n["owner"] else ""
                out.append(f"- {owner}line {n['line']}: {to_markdown(n['text'])}")
            out.append("")
    with mkdocs_gen_files.open("reproduction/differences.md", "w") as f:
        f.write("\n".join(out))


# ------------------------------------------------------------------------------------------------------ UCI records
RECORDS = ROOT / "benchmarks" / "records" / "uci_paper"


def _split_ranges(splits: list[int]) -> str:
    """[0, 1, 2, 4] -> "0-2, 4"."""
    runs: list[list[int]] = []
    for k in splits:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def uci_records_page(records: Path = RECORDS) -> tuple[str, bytes]:
    """The page's markdown and its W1 figure (PNG bytes) from the records folders."""
    import tempfile

    import yaml

    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    from stochattn.experiments import uci_slice_report
    from stochattn.experiments.uci import DERIVED_METHODS
    from stochattn.experiments.uci_figures import paper_w1_figure
    from stochattn.report import method_label

    folders = sorted(p for p in records.iterdir() if p.is_dir())
    report = uci_slice_report.build(folders, [p.name for p in folders], ROOT / "config" / "paper_results.yaml")
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    # every run the tables show, as rules/common.smk lists them: each configured method and the runs derived from it
    expected = [r for m in config["methods"] for r in (m, *(d for d, src in DERIVED_METHODS.items() if src == m))]
    held = ["| data set | splits of each method | no record yet | commits | device |", "|:--|:--|:--|:--|:--|"]
    for folder in folders:
        origin = uci_slice_report.record_origin(folder, folder.name)
        groups: dict[str, list[str]] = {}
        for method, splits in origin["splits"].items():
            groups.setdefault(_split_ranges(splits), []).append(method_label(method))
        kept = "; ".join(f"{', '.join(m)}: {s}" for s, m in groups.items())
        missing = ", ".join(method_label(m) for m in expected if m not in origin["splits"]) or "-"
        commits = ", ".join(c[:7] if c != "unknown" else "not recorded" for c in origin["commits"])
        held.append(f"| {folder.name} | {kept} | {missing} | {commits} | {', '.join(origin['devices'])} |")
    held += [f"| {ds} | none | every method | | |" for ds in config["datasets"] if not (records / ds).is_dir()]
    with tempfile.TemporaryDirectory() as tmp:
        png = paper_w1_figure(report.table, Path(tmp) / "uci_records_w1")[0].read_bytes()
    text = "\n".join([
        "# UCI, the paper's configuration: the kept records against the paper",
        "",
        "Generated at every build (`docs/gen_pages.py`) from the records of the paper configuration's UCI runs kept in "
        "`benchmarks/records/uci_paper/` (each run's `metrics.json`, `meta.json` and Snakemake benchmark records; "
        "no samples, no models): the same report as "
        "`python benchmarks/uci_paper_slice.py benchmarks/records/uci_paper/*/ --partial`. "
        "The [measurements log](../measurements.md#uci-paper-eight) tells each run's story (the machine, the session, "
        "the diagnosis of each cell beyond 2x); this page is where the records stand now. "
        "Each row pools the splits its `splits` column counts; the paper pools 20 splits (5 for protein), so the "
        "floor (the W1 of as many calibrated PIT values) is ours, and a data set without every method or split "
        "is a run in progress, not a result.",
        "",
        "## What the records hold",
        "",
        "The splits of each method's evaluated runs, the commits of the code that wrote them (\"not recorded\": jobs "
        "that ran before a job's record named its commit; each record's code hash says which code ran), and the "
        "device.",
        "",
        *held,
        "",
        "## Against the paper",
        report.text,
        "![native pooled-PIT W1 of the kept records, ours against the paper's, one panel per method]"
        "(uci_records_w1.png)",
        "",
    ])
    return text, png


def write_uci_records() -> None:
    text, png = uci_records_page()
    with mkdocs_gen_files.open("reproduction/uci-records.md", "w") as f:
        f.write(text)
    with mkdocs_gen_files.open("reproduction/uci_records_w1.png", "wb") as f:
        f.write(png)


write_reference()
write_configuration()
write_differences()
write_uci_records()
