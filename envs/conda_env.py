"""Write envs/cuda.lock into envs/stochattn.yaml's pip section, inline (run by `make lock`; stdlib only).

Snakemake's ``--sdm conda`` copies the yaml to ``.snakemake/conda/<hash>.yaml`` and conda runs pip from there, so
a ``-r cuda.lock`` line would not resolve: the pip section carries every locked requirement itself, with its hashes.
The yaml above the marker line is hand-written and kept; everything after it is the lock's requirements, one list
item each (tests/test_conda_env.py checks that the committed yaml is up to date)."""

import json
import re
from pathlib import Path

ENVS = Path(__file__).resolve().parent
LOCK, YAML = ENVS / "cuda.lock", ENVS / "stochattn.yaml"
MARKER = "      # generated from envs/cuda.lock by `make lock` (envs/conda_env.py): do not edit below\n"
# a requirement line YAML reads as a plain scalar; anything else is written double-quoted (a JSON string is one)
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],]*==[^\s:#'\"]+( --hash=sha256:[0-9a-f]{64})*")


def lock_requirements(lock_text: str) -> list[str]:
    """The requirements of a `uv pip compile` lock, one string each: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", lock_text)
    lines = (re.sub(r"(^|\s)#.*", "", line) for line in joined.splitlines())
    return [" ".join(line.split()) for line in lines if line.strip()]


def render(yaml_text: str, lock_text: str) -> str:
    """``yaml_text`` up to the marker line, then every requirement of ``lock_text`` as an item of the pip list."""
    head, found, _ = yaml_text.partition(MARKER)
    if not found:
        raise ValueError(f"{YAML.name}: no marker line {MARKER.strip()!r} before the generated pip list")
    items = (r if PLAIN.fullmatch(r) else json.dumps(r) for r in lock_requirements(lock_text))
    return head + MARKER + "".join(f"      - {item}\n" for item in items)


if __name__ == "__main__":
    YAML.write_text(render(YAML.read_text(), LOCK.read_text()))
