"""Optional dependencies: the one way the library imports a package that the core install does not bring.

``pip install stochattn`` installs what the SA API needs (``attention``, ``patch``, ``calibrate``, ``metrics``,
``scaling``: torch, numpy, scipy, numba, tqdm, scoringrules). Every other package belongs to an extra of
pyproject.toml and is imported inside ``with requires(extra):``, so that a missing package fails with the command
that installs it::

    with requires("timesfm"):
        from timesfm.torch import transformer

    ModuleNotFoundError: No module named 'timesfm': it comes with stochattn's "timesfm" extra:
    pip install "stochattn[timesfm]"
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["EXTRAS", "install_hint", "requires"]

# the extras of pyproject.toml ([project.optional-dependencies]; tests/test_extras.py keeps the two equal)
EXTRAS = ("uci", "lora", "timesfm", "climax", "hf", "timm", "triton", "workflow", "docs", "test")


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install "stochattn[extra]"``."""
    return f'pip install "stochattn[{extra}]"'


@contextlib.contextmanager
def requires(extra: str) -> Iterator[None]:
    """Import the packages of ``extra`` in this block; a missing one raises ModuleNotFoundError naming the extra.

    A module of stochattn itself that fails to import is re-raised unchanged (that is a bug, not a missing extra).
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    try:
        yield
    except ModuleNotFoundError as err:
        if err.name is None or err.name.partition(".")[0] == "stochattn":
            raise
        message = f"No module named {err.name!r}: it comes with stochattn's {extra!r} extra: {install_hint(extra)}"
        raise ModuleNotFoundError(message, name=err.name, path=err.path) from err
