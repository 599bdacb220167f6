"""Captions that say what was run: a workflow config compared with what the paper states.

``config/paper_protocol.yaml`` records, key by key, the values the paper fixes for its UCI experiment (with the
section that states each). :func:`protocol_deviations` sorts a config's values into

    reduced           a stated value run smaller (fewer splits, samples, components; a subset of the data sets or
                      methods; capped training rows)
    changed           a stated value run differently (any other difference)
    added             list entries beyond the paper (a data set added by configuration, an extra method)
    unverified_data   configured data sets whose files are used without a SHA-256 check (``verify: false``)
    project_choices   every other config value that changes the numbers: the paper leaves it open

and :func:`protocol_note` writes one caption paragraph from them. Generic over keys: a new config key is a
project choice until the paper record names it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from stochattn.extras import requires

with requires("workflow"):
    import yaml

__all__ = ["NOT_PROTOCOL", "check_config_order", "check_multiswag_matches_swag", "load_paper_protocol", "merged",
           "dataset_section", "protocol_deviations", "protocol_note"]

NOT_PROTOCOL = ("seed", "device", "require_gpu", "cluster", "progress", "runtime_estimates", "gpu_step_costs",
                "gpu_runtime_factor", "data.mirrors", "data.store", "data.allow_download",
                "report", "toy", "custom_datasets", "ett", "era5")  # fmt: skip
"""Config keys (and their sub-keys) that do not change what a number means, or are reported separately (the toy
panel states its own settings; custom data sets appear under ``datasets`` and ``unverified_data``; the ETT and ERA5
slices' captions state their own settings, so a UCI caption lists the UCI slice's alone)."""

_MISSING = object()


def merged(base: Mapping[str, Any] | None, override: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` with ``override`` merged in key by key (nested mappings merged, anything else replaced); copies."""
    out = copy.deepcopy(dict(base or {}))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def dataset_section(config: Mapping[str, Any], section: str, dataset: str | None, method: str | None = None) -> Any:
    """The settings one UCI data set's runs use: ``config[section]`` (``method_params``: its ``method`` entry)
    with ``config["dataset_overrides"][dataset]`` merged in (e.g. a learning rate chosen on that data set's
    validation part)."""
    base = config.get(section, {})
    override = ((config.get("dataset_overrides") or {}).get(dataset) or {}).get(section) or {}
    if method is not None:
        base, override = (base or {}).get(method, {}), override.get(method)
    return merged(base, override)


UCI_ONLY_METHOD_KEYS = ("widen",)
"""Settings of ``method_params`` that only the UCI searches read: the adapter slices (ETT, ERA5) fit each candidate
in its own job, so a grid cannot grow there (:class:`stochattn.selection.Widening`)."""


def adapter_method_params(config: Mapping[str, Any], section: Mapping[str, Any], method: str) -> Any:
    """The settings an adapter slice's ``method`` runs use: ``config["method_params"][method]`` (shared with UCI)
    without the UCI-only keys (:data:`UCI_ONLY_METHOD_KEYS`), with the slice's ``section["method_params"][method]``
    merged over it."""
    shared = {k: v for k, v in (config.get("method_params", {}).get(method) or {}).items()
              if k not in UCI_ONLY_METHOD_KEYS}
    return merged(shared, (section.get("method_params") or {}).get(method))


def check_multiswag_matches_swag(swag_cfg: Mapping[str, Any], multiswag_cfg: Mapping[str, Any]) -> None:
    """ValueError unless MultiSWAG's settings are SWAG's (but ``components``): the workflow keeps the SWAG run as
    MultiSWAG's member 0 (:func:`stochattn.experiments.adapters.write_swag_as_member`, the UCI SWAG run likewise),
    so both must describe the same SWAG phase and grid."""
    keys = (set(swag_cfg) | set(multiswag_cfg)) - {"components"}
    differ = sorted(k for k in keys if swag_cfg.get(k) != multiswag_cfg.get(k))
    if differ:
        raise ValueError(f"method_params: multiswag must repeat swag's settings (its member 0 is the SWAG run); "
                         f"they differ in {differ}")


def _upper_key(key: str) -> str | None:
    """The key that bounds ``key`` from above: ``nu_min`` -> ``nu_max``, ``min_x`` -> ``max_x``, ``low`` ->
    ``high``, ``x_start`` -> ``x_end``; None for a key that is no lower bound."""
    for lo, hi in (("min", "max"), ("low", "high"), ("start", "end")):
        if key == lo:
            return hi
        if key.endswith(f"_{lo}"):
            return key[: -len(lo)] + hi
        if key.startswith(f"{lo}_"):
            return hi + key[len(lo):]
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _order_errors(layers: list[tuple[str, Any]]) -> Iterator[str]:
    """What is out of order in the settings that ``layers`` give together (``[(dotted key, mapping), ...]``, later
    layers over earlier ones, as :func:`merged`): a lower bound above its upper bound (:func:`_upper_key`), a
    ``[low, high]`` range (a key ending ``_range``) decreasing, ``*_fraction`` parts of one data set summing to 1 or
    more, or the parts of a ``years`` mapping sharing a year. Each error names the keys that set the values."""
    maps = [(prefix, m) for prefix, m in layers if isinstance(m, Mapping)]
    source: dict[str, tuple[str, Any]] = {}  # key -> (dotted key that sets it, value)
    for prefix, m in maps:
        for key, value in m.items():
            source[str(key)] = (f"{prefix}.{key}" if prefix else str(key), value)
    for key, (lo_key, lo) in source.items():
        hi_name = _upper_key(key)
        if hi_name in source and _number(lo) and _number(source[hi_name][1]) and lo > source[hi_name][1]:
            hi_key, hi = source[hi_name]
            yield f"{lo_key} = {lo!r} is above {hi_key} = {hi!r} ({key} must not exceed {hi_name})"
        if (key.endswith("_range") and isinstance(lo, (list, tuple)) and len(lo) == 2 and all(map(_number, lo))
                and lo[0] > lo[1]):  # fmt: skip
            yield f"{lo_key} = {list(lo)!r} is not a range [low, high] (low {lo[0]!r} is above high {lo[1]!r})"
    fractions = {k: v for k, v in source.items() if k.endswith("_fraction") and _number(v[1])}
    if len(fractions) > 1 and sum(v for _, v in fractions.values()) >= 1:
        parts = " + ".join(f"{name} = {v!r}" for name, v in fractions.values())
        yield f"{parts} = {sum(v for _, v in fractions.values()):g}: the parts leave no rows to train on (sum < 1)"
    if "years" in source and isinstance(source["years"][1], Mapping):
        name, years = source["years"]
        owner: dict[Any, str] = {}
        for part, ys in years.items():
            for year in (ys if isinstance(ys, (list, tuple, Mapping)) else [ys]):
                if str(year) in owner:
                    yield f"{name}: year {year} is in both {owner[str(year)]} and {part} (the parts must not overlap)"
                owner.setdefault(str(year), str(part))
    for key in dict.fromkeys(k for _, m in maps for k, v in m.items() if isinstance(v, Mapping)):
        yield from _order_errors([(f"{prefix}.{key}" if prefix else str(key), m[key]) for prefix, m in maps
                                  if isinstance(m.get(key), Mapping)])  # fmt: skip


def check_config_order(config: Mapping[str, Any]) -> None:
    """ValueError naming every key and value out of order (:func:`_order_errors`), checked when the workflow parses
    its config (Snakefile, after the schema), not when a job meets the value: e.g. ``method_params.sa.nu_min = 512
    is above method_params.sa.nu_max = 256``. The settings a run combines are checked together: ``method_params``
    with each data set's ``dataset_overrides`` and with the ``toy`` / ``ett`` / ``era5`` slices' ``method_params``
    merged over it, and every section of a data set's overrides over the section it overrides."""
    views: list[list[tuple[str, Any]]] = [[("", config)]]
    for dataset, override in (config.get("dataset_overrides") or {}).items():
        for section, value in (override or {}).items():
            views.append([(section, config.get(section)), (f"dataset_overrides.{dataset}.{section}", value)])
    for slice_ in ("toy", "ett", "era5"):
        section = (config.get(slice_) or {}).get("method_params")
        if isinstance(section, Mapping):
            views.append([("method_params", config.get("method_params")), (f"{slice_}.method_params", section)])
    errors = list(dict.fromkeys(e for view in views for e in _order_errors(view)))
    if errors:
        raise ValueError("config: " + "; ".join(errors))


def load_paper_protocol(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Read the paper record: ``{dotted key: {"value": ..., "source": str, "shown": str (optional)}}``."""
    with open(path, encoding="utf-8") as fh:
        record = yaml.safe_load(fh) or {}
    if not isinstance(record, Mapping):
        raise ValueError(f"{path}: expected a mapping of config keys")
    for key, entry in record.items():
        if not isinstance(entry, Mapping) or "value" not in entry or not str(entry.get("source", "")).strip():
            raise ValueError(f"{path}: entry {key!r} needs 'value' and a non-empty 'source'")
        unknown = set(entry) - {"value", "source", "shown"}
        if unknown:
            raise ValueError(f"{path}: entry {key!r} has unknown fields {sorted(unknown)}")
    return {str(k): dict(v) for k, v in record.items()}


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, Mapping) and tree:
        for key, value in tree.items():
            yield from _leaves(value, f"{prefix}{key}.")
    elif prefix:
        yield prefix[:-1], tree


def _under(key: str, prefixes: Any) -> bool:
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


def fmt(value: Any) -> str:
    """Compact text of a config value (floats with 4 significant digits, ``none`` for None / empty mappings)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}" if value else "none"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def protocol_deviations(
    cfg: Mapping[str, Any], paper: Mapping[str, Mapping[str, Any]], ignore: Iterable[str] = NOT_PROTOCOL
) -> dict[str, list[str]]:
    """Sort ``cfg``'s values against the paper record ``paper`` (see the module docstring); keys under ``ignore``
    (dotted prefixes) are neither deviations nor project choices.

    Returns ``{"reduced", "changed", "added", "unverified_data", "project_choices"}``, each a list of short
    strings: ``"splits=2 (paper: 20, 5 for protein)"``, ``"datasets +bostonHousing"``, ``"model.n_blocks=1"``
    (values under ``method_params.<m>`` of a method that is not run are left out).
    """
    out: dict[str, list[str]] = {k: [] for k in ("reduced", "changed", "added", "unverified_data", "project_choices")}
    methods = set(cfg.get("methods") or [])

    def runs(key: str) -> bool:
        """False for ``method_params.<m>...`` of a method ``m`` that is not run (its values change nothing)."""
        parts = key.split(".")
        return not (parts[0] == "method_params" and len(parts) > 1 and parts[1] not in methods)

    def compare(key: str, label: str, value: Any) -> None:
        """File ``value`` of paper key ``key`` (shown as ``label``) under reduced / changed / added."""
        entry = paper[key]
        stated, shown = entry["value"], entry.get("shown") or fmt(entry["value"])
        if value is _MISSING:
            out["changed"].append(f"{label} not set (paper: {shown})")
        elif value == stated:
            return
        elif isinstance(stated, list) and isinstance(value, list):
            kept = [v for v in value if v in stated]
            extra = [v for v in value if v not in stated]
            if len(set(kept)) < len(set(stated)):
                out["reduced"].append(f"{label}={fmt(kept) if kept else 'none'} (paper: {shown})")
            if extra:
                out["added"].append(f"{label} " + " ".join(f"+{v}" for v in extra))
        elif _is_number(stated) and _is_number(value) and value < stated:
            out["reduced"].append(f"{label}={fmt(value)} (paper: {shown})")
        elif isinstance(stated, Mapping) and not stated and isinstance(value, Mapping):
            out["reduced"].append(f"{label}={fmt(value)} (paper: {shown})")  # caps where the paper has none
        else:
            out["changed"].append(f"{label}={fmt(value)} (paper: {shown})")

    for key in paper:
        if runs(key):
            compare(key, key, _get(cfg, key))
    overridden = set()  # dataset_overrides.<d>.<paper key>: compared like the global value, named with its data set
    for dataset, override in (cfg.get("dataset_overrides") or {}).items():
        for key, value in _leaves(override):
            if key in paper and runs(key) and dataset in (cfg.get("datasets") or []):
                compare(key, f"{dataset}: {key}", value)
                overridden.add(f"dataset_overrides.{dataset}.{key}")

    custom = cfg.get("custom_datasets") or {}
    out["unverified_data"] = [
        d for d in cfg.get("datasets", []) if isinstance(custom.get(d), Mapping) and custom[d].get("verify") is False
    ]

    for key, value in _leaves(cfg):
        if _under(key, ignore) or _under(key, paper) or key in overridden or not runs(key):
            continue
        parts = key.split(".")
        if parts[0] == "dataset_overrides" and len(parts) > 1 and parts[1] not in (cfg.get("datasets") or []):
            continue  # a data set that is not run
        if isinstance(value, Mapping):  # an empty mapping: nothing set
            continue
        out["project_choices"].append(f"{key}={fmt(value)}")
    return out


def _grouped(items: list[str]) -> str:
    """``["model.n_blocks=1", "model.d_block=64", "train.lr=0.001"]`` -> ``"model: n_blocks=1, d_block=64;
    train: lr=0.001"`` (groups by the key's parent, in first-seen order)."""
    groups: dict[str, list[str]] = {}
    for item in items:
        key, _, value = item.partition("=")
        parent, _, leaf = key.rpartition(".")
        groups.setdefault(parent, []).append(f"{leaf}={value}")
    return "; ".join(f"{p}: {', '.join(v)}" if p else ", ".join(v) for p, v in groups.items())


def protocol_note(
    cfg: Mapping[str, Any], paper: Mapping[str, Mapping[str, Any]], note: str = "", ignore: Iterable[str] = NOT_PROTOCOL
) -> str:
    """One caption paragraph: ``note``, the sample budget, then what differs from the paper and the project's
    choices (:func:`protocol_deviations`). "Paper protocol" is written only when nothing the paper states was
    reduced or changed."""
    dev = protocol_deviations(cfg, paper, ignore)
    parts = [note.strip()] if note and note.strip() else []
    parts.append(f"S={cfg.get('num_samples')} samples per method.")
    if not dev["reduced"] and not dev["changed"]:
        parts.append("Paper protocol: every value the paper states is run.")
    if dev["reduced"]:
        parts.append("Reduced from the paper: " + "; ".join(dev["reduced"]) + ".")
    if dev["changed"]:
        parts.append("Changed from the paper: " + "; ".join(dev["changed"]) + ".")
    if dev["added"]:
        parts.append("Beyond the paper: " + "; ".join(dev["added"]) + ".")
    if dev["unverified_data"]:
        parts.append("NOT checksum-verified (verify: false): " + ", ".join(dev["unverified_data"]) + ".")
    if dev["project_choices"]:
        parts.append("Project choices (not stated in the paper): " + _grouped(dev["project_choices"]) + ".")
    return " ".join(parts)
