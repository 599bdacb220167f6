"""What the backbones' strict checkpoint loaders share: the mismatch error and the comparison of a checkpoint's
tensors with a module's state_dict (every missing / unexpected key and shape mismatch, reported at once)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CheckpointMismatchError", "state_dict_mismatch"]


class CheckpointMismatchError(ValueError):
    """A checkpoint's tensor names or shapes do not match the module."""


def _listing(names: Iterable[str], limit: int = 12) -> str:
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def state_dict_mismatch(
    expected: Mapping[str, Any], tensors: Mapping[str, Any], *, strict: bool = True
) -> tuple[list[str], set[str], set[str]]:
    """``(problems, missing, unexpected)`` of loading ``tensors`` into a module whose state_dict is ``expected``.

    ``problems`` holds one readable line per kind (missing keys, unexpected keys, shape mismatches; the first two
    only when ``strict``); empty means the checkpoint fits."""
    missing = set(expected) - set(tensors)
    unexpected = set(tensors) - set(expected)
    wrong_shape = [
        f"{k} (checkpoint {tuple(tensors[k].shape)}, module {tuple(expected[k].shape)})"
        for k in sorted(set(expected) & set(tensors))
        if tensors[k].shape != expected[k].shape
    ]
    problems = []
    if missing and strict:
        problems.append(f"{len(missing)} missing key(s): {_listing(missing)}")
    if unexpected and strict:
        problems.append(f"{len(unexpected)} unexpected key(s): {_listing(unexpected)}")
    if wrong_shape:
        problems.append(f"{len(wrong_shape)} shape mismatch(es): {_listing(wrong_shape)}")
    return problems, missing, unexpected
