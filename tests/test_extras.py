"""The light core and the extras (issue 35): every optional import goes through ``stochattn.extras.requires`` with an
extra that installs it, the SA API imports and runs without any optional package, and a missing one names its
extra."""

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stochattn.extras import EXTRAS, install_hint, requires

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "stochattn"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("torch>=2.5" -> "torch")."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)).lower()


def _extra_distributions(extra: str) -> set[str]:
    """Distributions an extra installs, the extras it names (``stochattn[lora]``) resolved."""
    out: set[str] = set()
    for req in PYPROJECT["optional-dependencies"][extra]:
        nested = re.fullmatch(r"stochattn\[([a-z,]+)\]", req)
        out |= set().union(*(_extra_distributions(e) for e in nested.group(1).split(","))) if nested else {_name(req)}
    return out


CORE = {_name(r) for r in PYPROJECT["dependencies"]}


def _requires_extra(node: ast.AST) -> str | None:
    if isinstance(node, ast.With):
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "requires":
                return call.args[0].value
    return None


def _optional_imports():
    """(file, line, top-level module, extra or None) of every absolute import of a package outside the standard
    library and stochattn; extra: the ``requires`` block around it, "guarded" inside ``try/except ImportError``."""
    out = []

    def visit(node, extra, path):
        for child in ast.iter_child_nodes(node):
            inner = _requires_extra(child) or extra
            handlers = child.handlers if isinstance(child, ast.Try) else []
            if any("ImportError" in ast.dump(h.type or ast.Pass()) for h in handlers):
                inner = inner or "guarded"
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not getattr(child, "level", 0):
                mods = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module]
                for mod in mods:
                    top = mod.partition(".")[0]
                    if top not in sys.stdlib_module_names and top != "stochattn":
                        out.append((path.relative_to(REPO), child.lineno, top, extra))
            visit(child, inner, path)

    for path in sorted(SRC.rglob("*.py")):
        visit(ast.parse(path.read_text()), None, path)
    return out


def test_extras_match_pyproject():
    assert set(EXTRAS) == set(PYPROJECT["optional-dependencies"])
    assert CORE == {"torch", "numpy", "scipy", "numba", "tqdm", "scoringrules"}
    assert not any("==" in r for r in PYPROJECT["dependencies"]), "the core takes ranges; pins live in envs/*.lock"
    assert _extra_distributions("workflow") >= _extra_distributions("uci") | _extra_distributions("climax")


def test_every_optional_import_goes_through_requires_with_an_extra_that_installs_it():
    """An import of a package outside the core sits in ``with requires(extra)`` (or ``try/except ImportError``,
    a registration that skips quietly), and ``extra`` installs the distribution that provides the module."""
    provides = importlib.metadata.packages_distributions()
    problems = []
    for path, line, top, extra in _optional_imports():
        dists = {_name(d) for d in provides.get(top, [top])}
        if dists & CORE or extra == "guarded":
            continue
        if extra is None:
            problems.append(f"{path}:{line}: import of {top!r} outside `with requires(...)`")
        elif not dists & _extra_distributions(extra):
            problems.append(f"{path}:{line}: {top!r} ({sorted(dists)}) is not installed by the {extra!r} extra")
    assert not problems, "\n".join(problems)


def _closure(names: set[str]) -> set[str]:
    """The installed distributions ``names`` need, transitively (extras' own requirements left out)."""
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        try:
            reqs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        out.add(name)
        todo += [_name(r) for r in reqs if "extra ==" not in r]
    return out


def _blocked_modules() -> set[str]:
    """Top-level modules that only the extras bring: what a core-only install lacks."""
    provided: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for d in dists:
            provided.setdefault(_name(d), set()).add(module)
    optional = _closure(set().union(*(_extra_distributions(e) for e in EXTRAS))) - _closure(CORE)
    core_modules = set().union(*(provided.get(d, set()) for d in _closure(CORE)))
    return set().union(*(provided.get(d, set()) for d in optional)) - core_modules - {"stochattn"}


# a subprocess in which every optional package is missing, whatever this environment holds
BLOCKED = """
import importlib.machinery, sys
class PathFinderWithout(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)
sys.meta_path[:] = [PathFinderWithout if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def _run_blocked(code: str) -> subprocess.CompletedProcess:
    prelude = f"BLOCKED = {sorted(_blocked_modules())!r}\n" + BLOCKED
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_sa_api_imports_and_samples_with_the_core_only():
    code = """
import torch
import stochattn
from stochattn import attention, calibrate, metrics, patch, scaling
from stochattn.patch import StochasticAttention, predictive_samples
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0))
with StochasticAttention(mha, nu=4, generator=torch.Generator().manual_seed(0)):
    s = predictive_samples(lambda xb: mha(xb, xb, xb, need_weights=False)[0], x, num_samples=6)
assert s.shape == (6, 3, 5, 8) and float(s.std(0).mean()) > 0
assert metrics.crps(s[:, :, 0, 0].numpy(), x[:, 0, 0].numpy()).shape == (3,)
print("OK", sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED))
"""
    res = _run_blocked(code)
    assert res.returncode == 0 and "OK []" in res.stdout, res.stdout + res.stderr[-3000:]


@pytest.mark.parametrize("module, extra", [("stochattn.backbones.ft_transformer", "uci"),
                                           ("stochattn.baselines.ivon", "uci"),
                                           ("stochattn.backbones.timesfm", "timesfm"),
                                           ("stochattn.protocol", "workflow")])  # fmt: skip
def test_a_missing_optional_package_names_its_extra(module, extra):
    res = _run_blocked(f"import {module}")
    assert res.returncode == 1 and "ModuleNotFoundError" in res.stderr, res.stderr[-3000:]
    assert install_hint(extra) in res.stderr.strip().splitlines()[-1], res.stderr[-3000:]


def test_requires_names_the_extra_and_leaves_other_errors_alone():
    with pytest.raises(ModuleNotFoundError, match=re.escape(install_hint("climax"))) as err:
        with requires("climax"):
            import stochattn_no_such_package  # noqa: F401
    assert err.value.name == "stochattn_no_such_package"
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'stochattn\.no_such_module'$"):
        with requires("climax"):
            import stochattn.no_such_module  # noqa: F401  a bug of the package, not a missing extra
    with pytest.raises(ValueError, match="unknown extra"):
        with requires("gpu"):
            pass
