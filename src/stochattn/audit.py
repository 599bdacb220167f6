"""``stochattn audit <table-or-figure>``: check the whole chain behind one table or figure, of any slice.

Walks the table's or figure's ``.prov.json`` down through every record it names, whatever the slice:

* UCI: ``metrics.json`` -> ``samples.npz`` / ``meta.json`` -> backbone -> ``prepared.npz`` (+ its ``.prov.json``)
  -> the fetched data set folder;
* ETT: ``metrics.json`` -> runs -> adapter -> stand-in backbone (or the fetched TimesFM checkpoint) ->
  ``prepared.npz`` / ``prepared.json`` -> the fetched CSVs;
* ERA5: ``metrics.json`` / ``spatial.json`` / ``analyses.json`` / ``scale_sweep.json`` -> runs -> adapter ->
  stand-in backbone (or the fetched ClimaX checkpoint) -> ``pairs.npz`` / ``pairs.json`` -> the shard folder ->
  the netCDF folder (aquaplanet climates generated here, or WeatherBench as fetched).

A node's record is its ``<file>.prov.json`` (a folder's: ``<folder>.prov.json`` beside it), the ``provenance`` block
of a JSON file, or, for an array or model file, that of the JSON beside it. Checks per node:

* its SHA-256 against the one its consumer recorded, and against the one its producing rule recorded (a record's
  ``outputs``; for a folder every file's, naming the changed file; a pinned checkpoint SHA-256 as well); a model
  file (``.pt``) must carry its SHA-256 in the JSON beside it (:func:`stochattn.io.save_model`), the check its
  loaders make (:func:`stochattn.io.load_model`), as must a run's samples and calibration where recorded;
* its code version (:func:`stochattn.provenance.code_version` of the entries it recorded), recomputed from the
  current library; run nodes' config values against the config subset the table/figure records;
* fetched data without a record of its own against the registered SHA-256 of its source: UCI folders against
  ``stochattn/data/uci_sha256.txt``, ETT CSVs against ``stochattn/data/ett_sha256.txt``.

Prints one tree line per node (rule, seed, code version, status) and exits 1 naming every offending node when
something is missing, modified or stale; 0 when the chain is intact.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stochattn.io import (RECORD_KEY, UnreadableFileError, load_json, record_of, recorded_problem, save_json,
                          sha256_file, to_jsonable)  # fmt: skip
from stochattn.protocol import dataset_section
from stochattn.provenance import code_version, file_record, folder_files, provenance_path

__all__ = ["Node", "audit", "to_prov", "main"]


@dataclass
class Node:
    """One file of the chain: what produced it and what is wrong with it (``problems`` empty: OK)."""

    path: str
    rule: str | None = None
    seed: Any = None
    code: str | None = None
    config: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    seen: bool = False  # already shown above (a shared input such as prepared.npz)

    @property
    def status(self) -> str:
        return "OK" if not self.problems else "; ".join(self.problems)


def _canon(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True)


def _record_of(path: Path) -> tuple[dict | None, Path | None]:
    """(provenance record, file holding it) of ``path``: its ``.prov.json``, the ``provenance`` block of a JSON
    record (meta.json, metrics.json, a MultiSWAG component's <c>.json), or the record beside a run's samples / a
    model (``<stem>.json``, else meta.json)."""
    prov = provenance_path(path)
    if prov.is_file():
        rec = load_json(prov)
        extra = rec.get("extra") or {}
        return {"rule": rec.get("rule"), "inputs": rec.get("inputs", []), "code": extra.get("code"),
                "params": rec.get("config", {}), "seed": rec.get("seeds"), "outputs": rec.get("outputs", []),
                "files": extra.get("files"), "expected_sha256": extra.get("expected_sha256"),
                "fetched": bool(extra.get("fetched"))}, prov  # fmt: skip
    if path.is_dir():
        return None, None
    if path.suffix == ".json" and path.is_file() and path.name != "calibration.json":
        data = load_json(path)
        rec = data.get("provenance") if isinstance(data, dict) else None
        if rec is None:
            return None, path
        params = rec.get("params") or {}
        return {**rec, "seed": params.get("seed")}, path
    if path.suffix in (".npz", ".pt") or path.name == "calibration.json":
        meta = record_of(path)  # e.g. a MultiSWAG component: components/<c>.pt beside <c>.json; else meta.json
        holder = load_json(meta) if meta.is_file() else {}
        holder = holder if isinstance(holder, dict) else {}
        written = (holder.get("provenance") or {}).get("outputs", [])
        # a model file must carry its SHA-256 in its record; other files are checked against it when it holds one
        recorded = path.suffix == ".pt" or path.name in (holder.get(RECORD_KEY) or {})
        return ({"rule": None, "inputs": [file_record(meta)] if meta.is_file() else [], "code": None, "params": {},
                 "seed": None, "via": "meta.json", "outputs": written, "recorded": recorded}, meta)  # fmt: skip
    return None, None


def _check_written(node: Node, path: Path, rec: dict, digest, workdir: Path) -> None:
    """``path`` against what its producing rule recorded: the SHA-256 its writer put in the record JSON beside it
    (a model file, a run's samples and calibration: :func:`stochattn.io.recorded_problem`, the check its readers
    make), the SHA-256 in the record's ``outputs``, every file of a folder (``files``), and a pinned SHA-256 (a
    checkpoint's ``expected_sha256``)."""
    if rec.get("recorded"):
        problem = recorded_problem(path)
        if problem is not None:  # paths relative to the working directory, the node's own not repeated
            node.problems.append(problem.replace(f"{workdir}{os.sep}", "").removeprefix(f"{node.path}: "))
            return
    for item in rec.get("outputs") or []:
        if os.path.normpath(item.get("path", "")) == node.path and "sha256" in item and digest() != item["sha256"]:
            node.problems.append("modified since its rule wrote it (SHA-256 differs from its own record)")
    files = rec.get("files")
    if files is not None and path.is_dir():
        now = {q.relative_to(path).as_posix(): q for q in folder_files(path)}
        changed = [f"missing {name}" for name in files if name not in now]
        changed += [f"added {name}" for name in now if name not in files]
        changed += [f"modified {name}" for name, q in now.items() if name in files and sha256_file(q) != files[name]]
        if changed:
            node.problems.append("files differ from the record of the rule that wrote them: " + ", ".join(changed))
    pinned = rec.get("expected_sha256")
    if pinned and path.is_file() and digest() != pinned.lower():
        node.problems.append("does not match the pinned SHA-256 of its source")


def _check_fetched(node: Node, path: Path) -> bool:
    """Fetched data without a record of its own, against the registered SHA-256 of its source; False when ``path``
    is no such file (``results/data/uci/<name>/``, ``results/data/ett/<name>.csv``)."""
    kind = path.parent.name if path.parent.parent.name == "data" else None
    if kind == "uci" and path.is_dir():
        _check_uci_folder(node, path)
    elif kind == "ett" and path.suffix == ".csv":
        from stochattn.data.ett import load_ett_checksums

        node.rule, node.code = "fetch_ett", "registered sha256 (stochattn/data/ett_sha256.txt)"
        expected = load_ett_checksums().get(path.name)
        if expected is None:
            node.problems.append(f"no registered checksum for {path.name}")
        elif sha256_file(path) != expected:
            node.problems.append(f"{path.name} does not match its registered SHA-256")
    else:
        return False
    return True


def _check_uci_folder(node: Node, path: Path) -> None:
    """A fetched UCI data set folder: every file against the registered SHA-256 table shipped with stochattn."""
    from stochattn.data.uci import UCI_DATASETS, load_uci_checksums, uci_files

    name = path.name
    if name not in UCI_DATASETS:
        node.problems.append(f"no registered checksums for data set {name!r}")
        return
    table = load_uci_checksums()
    gal = UCI_DATASETS[name].gal_name
    node.rule = "fetch_uci"
    node.code = "registered sha256 (stochattn/data/uci_sha256.txt)"
    for fname in uci_files(name):
        f = path / fname
        key = f"{gal}/data/{fname}"
        if not f.is_file():
            node.problems.append(f"missing raw file {fname}")
        elif key in table and sha256_file(f) != table[key]:
            node.problems.append(f"raw file {fname} does not match its registered SHA-256")


def _check_config(node: Node, params: dict, config: dict) -> None:
    """Run nodes of a UCI table/figure: the values the run used against the config the figure records."""
    if not config or "method" not in params:
        return
    checks = [("num_samples", params.get("num_samples"), config.get("num_samples"))]
    parts = Path(node.path).parts
    if "uci" in parts and "toy" not in config:
        method, dataset = params["method"], parts[parts.index("uci") + 1]
        checks += [("model", params.get("model"), dataset_section(config, "model", dataset)),
                   ("train", params.get("train"), dataset_section(config, "train", dataset)),
                   (f"method_params.{method}", params.get("method_cfg"),
                    dataset_section(config, "method_params", dataset, method))]  # fmt: skip
    for key, used, said in checks:
        if said is not None and used is not None and _canon(used) != _canon(said):
            node.problems.append(f"stale config: made with {key}={_canon(used)}, the figure says {_canon(said)}")


def _walk(path: Path, workdir: Path, expected_sha: str | None, config: dict, memo: dict) -> Node:
    rel = os.path.relpath(path, workdir)
    node = Node(rel)
    if not path.exists():
        node.problems.append("missing")
        return node
    digest = functools.cache(lambda: file_record(path)["sha256"])
    if expected_sha is not None and digest() != expected_sha:
        node.problems.append("modified (SHA-256 differs from the one its consumer recorded)")
    if rel in memo:
        node.seen = True
        node.rule, node.code, node.seed = memo[rel].rule, memo[rel].code, memo[rel].seed
        return node
    memo[rel] = node
    try:
        rec, holder = _record_of(path)
    except UnreadableFileError as err:  # a damaged record: named, the walk goes on
        node.problems.append(str(err).replace(f"{workdir}{os.sep}", ""))
        return node
    if rec is None:
        if not _check_fetched(node, path):
            node.problems.append("no provenance record" + (f" in {os.path.relpath(holder, workdir)}" if holder else ""))
        return node
    _check_written(node, path, rec, digest, workdir)
    node.rule, node.seed = rec.get("rule"), rec.get("seed")
    params = rec.get("params") or {}
    node.config = {k: v for k, v in params.items() if k in ("method", "num_samples", "seed", "max_train")}
    code = rec.get("code")
    if code:
        node.code = code["sha256"][:12]
        try:
            now = code_version(code["entries"], code.get("exclude", ()))["sha256"]
        except KeyError as err:
            now = f"unresolvable ({err})"
        if now != code["sha256"]:
            node.problems.append(f"stale code: made by library version {code['sha256'][:12]}, now {now[:12]}")
    elif rec.get("via") is None and not rec.get("fetched"):  # fetched data: checked by its SHA-256, not by code
        node.problems.append("no code version recorded")
    _check_config(node, params, config)
    for item in rec.get("inputs", []):
        child = workdir / item["path"]
        node.children.append(_walk(child, workdir, item.get("sha256"), config, memo))
    return node


def audit(target: str | os.PathLike, workdir: str | os.PathLike = ".") -> Node:
    """The checked chain below ``target`` (a table or figure, or its ``.prov.json``); paths relative to ``workdir``."""
    workdir = Path(workdir).resolve()
    t = Path(target)
    t = t if t.is_absolute() else workdir / t
    if t.name.endswith(".prov.json"):
        t = t.with_name(t.name[: -len(".prov.json")])
    prov = provenance_path(t)
    config = load_json(prov).get("config", {}) if prov.is_file() else {}
    return _walk(t, workdir, None, config, {})


def _lines(node: Node, prefix: str = "", last: bool = True, top: bool = True):
    branch = "" if top else ("`-- " if last else "|-- ")
    info = [f"rule={node.rule}"] if node.rule else []
    if node.seed is not None and not isinstance(node.seed, dict):
        info.append(f"seed={node.seed}")
    if node.code:
        info.append(f"code={node.code}")
    if node.config:
        info.append("config=" + ",".join(f"{k}:{v}" for k, v in node.config.items() if k != "seed"))
    status = node.status + (" (shown above)" if node.seen else "")
    yield f"{prefix}{branch}{node.path}  [{' '.join(info)}]  {status}"
    child_prefix = prefix + ("" if top else ("    " if last else "|   "))
    for i, child in enumerate(node.children):
        yield from _lines(child, child_prefix, i == len(node.children) - 1, False)


def to_prov(root: Node, workdir: str | os.PathLike = ".") -> dict[str, Any]:
    """The audited chain as a W3C PROV-JSON document (https://www.w3.org/submissions/prov-json/): every file an
    ``entity`` (path, SHA-256, audit status), every job that made one an ``activity`` (rule, code version, seed),
    with ``wasGeneratedBy`` (file <- its job), ``used`` (job <- its inputs) and ``wasDerivedFrom`` (file <- the
    record it is described by, for files such as samples.npz whose job is named in the meta.json beside them)."""
    workdir = Path(workdir)
    doc: dict[str, Any] = {
        "prefix": {"sa": "urn:stochattn:", "file": "urn:stochattn:file:", "job": "urn:stochattn:job:"},
        "entity": {}, "activity": {}, "wasGeneratedBy": {}, "used": {}, "wasDerivedFrom": {},
    }  # fmt: skip

    def relation(kind: str, **fields: str) -> None:
        doc[kind][f"_:{kind}{len(doc[kind]) + 1}"] = fields

    def visit(node: Node) -> None:
        ent = f"file:{node.path}"
        if ent in doc["entity"]:
            return
        path = workdir / node.path
        doc["entity"][ent] = {
            "prov:label": node.path, "sa:status": node.status,
            **({"sa:sha256": sha256_file(path)} if path.is_file() else {}),
        }  # fmt: skip
        if node.rule:
            act = f"job:{node.path}"
            doc["activity"][act] = {"prov:label": node.rule, **({"sa:code": node.code} if node.code else {}),
                                    **({"sa:seed": _canon(node.seed)} if node.seed is not None else {})}  # fmt: skip
            relation("wasGeneratedBy", **{"prov:entity": ent, "prov:activity": act})
            for child in node.children:
                relation("used", **{"prov:activity": act, "prov:entity": f"file:{child.path}"})
        else:
            for child in node.children:
                relation("wasDerivedFrom", **{"prov:generatedEntity": ent, "prov:usedEntity": f"file:{child.path}"})
        for child in node.children:
            visit(child)

    visit(root)
    return doc


def _failures(node: Node):
    if node.problems:
        yield node
    for child in node.children:
        yield from _failures(child)


def main(argv: list[str] | None = None) -> int:
    """``stochattn audit`` (``argv``: its arguments)."""
    p = argparse.ArgumentParser(prog="stochattn audit", description=__doc__.splitlines()[0])
    p.add_argument("target", help="a table or figure, e.g. results/tables/uci_master.csv")
    p.add_argument("-d", "--directory", default=".", help="the workflow's working directory (default: .)")
    p.add_argument("--prov", metavar="FILE", help="also write the chain as a W3C PROV-JSON document")
    args = p.parse_args(argv)
    root = audit(args.target, args.directory)
    for line in _lines(root):
        print(line)
    if args.prov:
        save_json(args.prov, to_prov(root, args.directory))
        print(f"wrote {args.prov} (W3C PROV-JSON)")
    failed = list(dict.fromkeys(f"{node.path}: {node.status}" for node in _failures(root)))  # a shared node once
    n = sum(1 for _ in _iter(root))
    if failed:
        for line in failed:
            print(f"FAILED {line}", file=sys.stderr)
        print(f"audit: {len(failed)} of {n} nodes failed", file=sys.stderr)
        if any(node.problems == ["missing"] and node.path.startswith("results" + os.sep) for node in _failures(root)):
            print("a missing results/ file (e.g. removed by Snakemake when its job's rerun failed): the next run of "
                  "the workflow moves what was made from it to results/.stale/ and rebuilds both (stochattn.stale)",
                  file=sys.stderr)  # fmt: skip
        return 1
    print(f"audit: all {n} nodes OK")
    return 0


def _iter(node: Node):
    yield node
    for child in node.children:
        yield from _iter(child)


if __name__ == "__main__":
    sys.exit(main())
