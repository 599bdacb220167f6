"""Runtime estimates from Snakemake's ``benchmark:`` records (``results/benchmarks/<rule>/<wildcards>.tsv``).

``python -m stochattn.resources [results/benchmarks]`` prints, per rule family (``run_method`` split by method), the
number of records, the median and largest wall clock and peak memory, and a SLURM runtime request: the largest
measured wall clock times ``safety`` (default 2), in whole minutes. ``--write FILE`` also writes the per-data-set
requests ``{family: {dataset: minutes}}`` as YAML; the workflow's config key ``runtime_estimates: FILE`` makes every
rule request them (rules/common.smk), falling back to its row-count cost model where nothing was measured.
Estimates measured on one machine transfer to another only up to the speed ratio of the two: measure on the
cluster's own nodes (one split per data set is enough: ``--config splits=1``) before running the full protocol.

The GPU rules of the ETT and ERA5 slices request :func:`gpu_minutes` of the work they do at the configuration's
caps (:func:`adapt_work`, :func:`method_work`, :func:`member_work`, :func:`analyses_work`: optimiser steps and
forward passes counted from the configuration, every candidate run to its epoch cap), priced by the per-step costs
that ``benchmarks/step_costs.py`` measured on a GPU at the full model sizes (``config/step_costs.json``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from stochattn.extras import requires

__all__ = ["ATTEMPTS_SUFFIX", "dataset_of", "read_benchmarks", "runtime_estimates", "dataset_estimates",
           "load_dataset_estimates", "pairs_mb", "windows_mb", "memory_needed", "write_measured", "load_measured",
           "load_step_costs", "Sizes", "Work", "adapt_work", "method_work", "candidate_work", "selection_work",
           "member_work", "analyses_work", "analyses_sweep_work", "analyses_bo_work", "gpu_minutes",
           "QueueLimitError", "runtime_request", "main"]

_PER_METHOD = {"run_method", "calibrate_sa", "uci_candidate"}


def dataset_of(parts: tuple[str, ...]) -> str | None:
    """The data set of a benchmark record's wildcard path: the folder before ``split<k>``."""
    return _dataset_split(parts)[0]


def _dataset_split(parts: tuple[str, ...]) -> tuple[str | None, int | None]:
    """(data set, k) of a wildcard path holding ``<dataset>/split<k>``; (None, None) without one."""
    for i, part in enumerate(parts):
        if re.fullmatch(r"split\d+", part) and i > 0:
            return parts[i - 1], int(part[5:])
    return None, None


ATTEMPTS_SUFFIX = ".attempts.json"


def read_benchmarks(root: str | Path) -> list[dict[str, Any]]:
    """One dict per record: ``rule``, ``family`` (rule, or ``rule/method`` for per-method rules), ``job`` (the
    wildcard path), ``dataset`` and ``split`` (of a ``<dataset>/split<k>`` path, else None), ``seconds`` (wall
    clock of every attempt of the job), ``cpu_seconds`` (CPU time of the job's processes; None when not measured),
    ``max_rss_mb`` (None when not measured), ``attempt_seconds`` and ``earlier_seconds``.

    Snakemake's record (``<job>.tsv``: ``s``, ``cpu_time``) times the job's last attempt. A job that can resume saved
    training writes ``<job>.attempts.json`` beside it (:func:`stochattn.provenance.record_earlier_attempts`): the wall
    clock of the training its earlier attempts saved, ``earlier_seconds``, is added to ``seconds``, and its CPU time,
    ``earlier_cpu_seconds``, to ``cpu_seconds``; where a record has no CPU time (checkpoints written before
    2026-12-05), the earlier wall clock at the last attempt's ratio of CPU time to wall clock (an estimate: a paused
    last attempt lowers it). An empty file (Snakemake creates a declared log that a job did not write) counts 0.
    ``attempt_seconds``: the last attempt's own wall clock."""
    root = Path(root)
    rows = []
    for tsv in sorted(root.rglob("*.tsv")):
        rel = tsv.relative_to(root).with_suffix("")
        rule = rel.parts[0]
        family = f"{rule}/{rel.name}" if rule in _PER_METHOD else rule
        dataset, split = _dataset_split(rel.parts)
        attempts = tsv.with_name(tsv.stem + ATTEMPTS_SUFFIX)
        text = attempts.read_text() if attempts.is_file() else ""
        record = json.loads(text) if text.strip() else {}
        earlier, earlier_cpu = float(record.get("earlier_seconds", 0.0)), record.get("earlier_cpu_seconds")
        with open(tsv, newline="") as fh:
            for rec in csv.DictReader(fh, delimiter="\t"):
                rss, cpu, wall = rec.get("max_rss", "NA"), rec.get("cpu_time", "NA"), float(rec["s"])
                cpu = None if cpu in ("NA", "", None) else float(cpu)
                if cpu is not None and earlier:
                    ratio = cpu / wall if wall > 0 else 1.0
                    cpu += float(earlier_cpu) if earlier_cpu is not None else earlier * ratio
                rows.append({
                    "rule": rule, "family": family, "job": "/".join(rel.parts[1:]), "dataset": dataset, "split": split,
                    "seconds": wall + earlier, "cpu_seconds": cpu,
                    "max_rss_mb": None if rss in ("NA", "", None) else float(rss),
                    "attempt_seconds": wall, "earlier_seconds": earlier,
                })  # fmt: skip
    return rows


def runtime_estimates(root: str | Path, safety: float = 2.0) -> dict[str, dict[str, Any]]:
    """``{family: {"n", "median_s", "max_s", "max_rss_mb", "runtime_min"}}`` (``runtime_min`` = ceil(max_s *
    safety / 60), at least 1)."""
    if safety < 1:
        raise ValueError(f"safety must be >= 1, got {safety}")
    by_family: dict[str, list[dict[str, Any]]] = {}
    for row in read_benchmarks(root):
        by_family.setdefault(row["family"], []).append(row)
    out = {}
    for family, rows in sorted(by_family.items()):
        secs = [r["seconds"] for r in rows]
        rss = [r["max_rss_mb"] for r in rows if r["max_rss_mb"] is not None]
        out[family] = {
            "n": len(rows), "median_s": statistics.median(secs), "max_s": max(secs),
            "max_rss_mb": max(rss) if rss else None, "runtime_min": max(1, math.ceil(max(secs) * safety / 60)),
        }  # fmt: skip
    return out


def dataset_estimates(root: str | Path, safety: float = 2.0) -> dict[str, dict[str, int]]:
    """``{family: {dataset: runtime_min}}``: the largest measured wall clock of each family on each data set times
    ``safety``, in whole minutes (at least 1)."""
    if safety < 1:
        raise ValueError(f"safety must be >= 1, got {safety}")
    out: dict[str, dict[str, int]] = {}
    for row in read_benchmarks(root):
        if row["dataset"] is None:
            continue
        minutes = max(1, math.ceil(row["seconds"] * safety / 60))
        per = out.setdefault(row["family"], {})
        per[row["dataset"]] = max(per.get(row["dataset"], 1), minutes)
    return out


def load_dataset_estimates(path: str | Path | None) -> dict[str, dict[str, int]]:
    """Read a file written by ``--write`` (``{}`` for None); a clear error when it is missing or malformed."""
    if path is None:
        return {}
    with requires("workflow"):
        import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"runtime_estimates: {path} does not exist (write it with "
                                f"`python -m stochattn.resources results/benchmarks --write {path}`)")
    with open(path, encoding="utf-8") as fh:
        est = yaml.safe_load(fh) or {}
    ok = isinstance(est, dict) and all(
        isinstance(v, dict) and all(isinstance(m, int) and m >= 1 for m in v.values()) for v in est.values())
    if not ok:
        raise ValueError(f"runtime_estimates: {path} must map rule family -> data set -> minutes (int >= 1)")
    return est


def windows_mb(n_series: int, length: int) -> float:
    """MB of ``n_series`` ETT windows of ``length`` steps (context + horizon) as ``prepare`` stores them (float64)."""
    return int(n_series) * int(length) * 8 / 2**20


def pairs_mb(n_pairs: int, n_variables: int, cells: int = 32 * 64) -> float:
    """MB of ``n_pairs`` ERA5 forecast pairs as ``prepare`` stores them: float32 inputs of ``n_variables`` fields and
    one target field, ``cells`` grid cells each."""
    return int(n_pairs) * (int(n_variables) + 1) * int(cells) * 4 / 2**20


DATA_COPIES = 3
"""A job that loads its data (pairs.npz, prepared.npz) holds about three copies: the arrays, their tensors, the
samples (the memory model of the ERA5 and ETT rules)."""


def memory_needed(measured: dict[str, Any], data_mb: float) -> float:
    """MB a rule needs at a data size of ``data_mb``, from its measured record (``max_rss_mb`` at ``data_mb`` of the
    measurement, the record's ``data_mb``): the model part measured, the data part scaled, :data:`DATA_COPIES`
    copies."""
    return float(measured["max_rss_mb"]) + DATA_COPIES * (float(data_mb) - float(measured.get("data_mb", 0.0)))


def write_measured(root: str | Path, path: str | Path, note: str, data_mb: dict[str, float] | None = None) -> dict:
    """``{family: {"n", "max_s", "max_rss_mb", "data_mb"}}`` of the benchmark records under ``root`` -> ``path``
    (YAML, with ``note``: where and at what size it was measured). ``data_mb``: per family, the size of the data its
    jobs loaded (0 where not given)."""
    with requires("workflow"):
        import yaml

    from .io import atomic_path

    est = runtime_estimates(root)
    out = {f: {"n": e["n"], "max_s": round(e["max_s"], 1), "max_rss_mb": e["max_rss_mb"],
               "data_mb": round(float((data_mb or {}).get(f, 0.0)), 1)} for f, e in est.items()}  # fmt: skip
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(f"# {line}\n" for line in note.splitlines()))
        yaml.safe_dump(out, fh, sort_keys=True)
    return out


def load_measured(path: str | Path) -> dict[str, dict[str, Any]]:
    """The records of :func:`write_measured`."""
    with requires("workflow"):
        import yaml

    with open(path, encoding="utf-8") as fh:
        rec = yaml.safe_load(fh) or {}
    if not all(isinstance(v, dict) and "max_rss_mb" in v for v in rec.values()):
        raise ValueError(f"{path}: expected {{family: {{max_rss_mb, max_s, n, data_mb}}}}")
    return rec


# -- GPU runtime at the configuration's caps: counted work x measured per-step costs ---------------------------------
STEP_COST_KEYS = ("batch", "eval_batch", "train_step_s", "ivon_step_s", "forward_s", "sa_forward_s")


def load_step_costs(path: str | Path) -> dict[str, Any]:
    """The record ``benchmarks/step_costs.py --out`` wrote: ``{"device", "costs": {model: {batch, eval_batch,
    train_step_s, ivon_step_s, forward_s, sa_forward_s, ...}}}``; ValueError when a model lacks a figure."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    costs = rec.get("costs") if isinstance(rec, dict) else None
    if not isinstance(costs, dict) or not costs:
        raise ValueError(f"{path}: expected {{'costs': {{model: {{...}}}}}} (benchmarks/step_costs.py --out)")
    for model, c in costs.items():
        missing = [k for k in STEP_COST_KEYS if not isinstance(c.get(k), (int, float)) or c[k] <= 0]
        if missing:
            raise ValueError(f"{path}: {model} lacks positive {missing}")
    if rec.get("small"):
        raise ValueError(f"{path}: measured on the reduced modules (--small), not the full model sizes")
    return rec


@dataclass(frozen=True)
class Sizes:
    """Inputs (series or forecast pairs) of each part one job reads."""

    train: int
    val: int
    cal: int
    test: int

    @classmethod
    def halving_validation(cls, train: int, validation: int, test: int) -> Sizes:
        """The validation inputs split into val (the larger half) and cal, as both slices' ``prepare`` does."""
        return cls(train=train, val=(validation + 1) // 2, cal=validation // 2, test=test)


@dataclass(frozen=True)
class Work:
    """What one job computes: optimiser steps of ``batch`` inputs (plain: AdamW on the adapters, as the adapter,
    SWAG and Contextual Dropout; ``stochastic_steps``: through stochastic attention, HSA; ``ivon_steps``: one IVON
    weight sample each) and forward passes counted per input (``forward_inputs`` deterministic, ``sa_inputs``
    through stochastic attention: SA, HSA)."""

    train_steps: float = 0.0
    stochastic_steps: float = 0.0
    ivon_steps: float = 0.0
    forward_inputs: float = 0.0
    sa_inputs: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(self.__dict__.values(), other.__dict__.values())))

    def __mul__(self, k: float) -> Work:
        return Work(*(k * a for a in self.__dict__.values()))

    __rmul__ = __mul__

    def __str__(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v:,.0f}" for k, v in self.__dict__.items() if v) or "no work"

    def seconds(self, cost: Mapping[str, float], batch: int) -> float:
        """Seconds at the per-step ``cost`` (one model of :func:`load_step_costs`), steps of ``batch`` inputs
        priced in proportion to the measured batch (never below one measured step)."""
        step = max(1.0, batch / cost["batch"])
        sa_ratio = cost["sa_forward_s"] / cost["forward_s"]
        per_input = cost["forward_s"] / cost["eval_batch"]
        return (step * (self.train_steps + sa_ratio * self.stochastic_steps) * cost["train_step_s"]
                + step * self.ivon_steps * cost["ivon_step_s"]
                + (self.forward_inputs + sa_ratio * self.sa_inputs) * per_input)  # fmt: skip


def _epochs(sizes: Sizes, batch: int, epochs: int, kind: str = "train_steps") -> Work:
    """``epochs`` epochs over the training part with a validation pass after each (early stopping)."""
    steps = epochs * math.ceil(sizes.train / batch)
    return Work(**{kind: steps}) + Work(forward_inputs=epochs * sizes.val)


def _grid(cfg: Mapping[str, Any]) -> int:
    return max(1, len(cfg.get("grid") or [{}]))


def adapt_work(sizes: Sizes, train: Mapping[str, Any]) -> Work:
    """The adapter: ``max_epochs`` epochs, and the zero-shot and adapted predictions of val and test."""
    return _epochs(sizes, int(train["batch_size"]), int(train["max_epochs"])) + Work(
        forward_inputs=2 * (sizes.val + sizes.test))


def _swag_phase(sizes: Sizes, cfg: Mapping[str, Any]) -> Work:
    epochs = int(cfg.get("anneal_epochs", 0)) + int(cfg["epochs"])
    return Work(train_steps=epochs * math.ceil(sizes.train / int(cfg.get("batch_size", 256))))


def _share(sizes: Sizes, num_samples: int, components: int) -> Work:
    """A MultiSWAG component's share of ``num_samples`` (at most, of L = ``components``) on val, test and cal
    (:func:`stochattn.experiments.methods.posterior_draws`)."""
    return Work(forward_inputs=math.ceil(num_samples / components) * (sizes.val + sizes.test + sizes.cal))


def _component_draws(sizes: Sizes, cfg: Mapping[str, Any], num_samples: int) -> Work:
    """One MultiSWAG component at every candidate of its grid: a SWAG phase and its share of ``num_samples`` (L =
    ``cfg["components"]``) on val, test and cal (:func:`stochattn.experiments.methods.multiswag_draws`)."""
    return _grid(cfg) * (_swag_phase(sizes, cfg) + _share(sizes, num_samples, int(cfg.get("components", 1))))


def _final(sizes: Sizes, num_samples: int, kind: str = "forward_inputs") -> Work:
    """The chosen model's point and ``num_samples`` samples on test and cal."""
    return Work(forward_inputs=sizes.test + sizes.cal) + Work(**{kind: num_samples * (sizes.test + sizes.cal)})


def _bo(sizes: Sizes, sa: Mapping[str, Any]) -> Work:
    """One BO calibration of nu: ``budget`` evaluations of ``num_batches`` x ``batch_size`` cal inputs x
    ``num_passes`` SA passes."""
    batch = min(int(sa["batch_size"]), sizes.cal)
    return Work(sa_inputs=int(sa["budget"]) * int(sa["num_batches"]) * batch * int(sa["num_passes"]))


_TRAINED = {"ivon": ("ivon_steps", "forward_inputs"), "contextual_dropout": ("train_steps", "forward_inputs"),
            "hsa": ("stochastic_steps", "sa_inputs")}  # method -> (its optimiser steps, its sampling passes)


def candidate_work(method: str, sizes: Sizes, cfg: Mapping[str, Any], train: Mapping[str, Any],
                   num_samples: int) -> Work:  # fmt: skip
    """One candidate of a method's validation grid (``cfg``: the method's settings with the candidate's overrides):
    SWAG's phase and its SWA-mean point and ``num_samples`` samples on val; IVON, Contextual Dropout and HSA a
    fresh adapter trained to ``max_epochs`` and sampled on val."""
    if method == "swag":
        return _swag_phase(sizes, cfg) + Work(forward_inputs=(num_samples + 1) * sizes.val)
    if method not in _TRAINED:
        raise ValueError(f"no candidate cost model for method {method!r}")
    kind, sample = _TRAINED[method]
    epochs = int(cfg.get("max_epochs", train["max_epochs"]))
    return _epochs(sizes, int(train["batch_size"]), epochs, kind) + Work(**{sample: num_samples * sizes.val})


def selection_work(method: str, sizes: Sizes, num_samples: int, *, swag_scales: int = 0, grid: int = 1,
                   multiswag_components: int = 0) -> Work:  # fmt: skip
    """The choice among a method's fitted candidates: the chosen one's point and ``num_samples`` samples on test
    and cal (SWAG: also the start's val prediction, ``swag_scales`` variance scales on val and test and, with a
    MultiSWAG of ``multiswag_components`` (L), its member 0's share at each of the ``grid`` candidates,
    :class:`stochattn.experiments.methods.KeptDraws`)."""
    if method == "swag":
        scales = Work(forward_inputs=swag_scales * num_samples * (sizes.val + sizes.test))
        member0 = grid * _share(sizes, num_samples, multiswag_components) if multiswag_components else Work()
        return Work(forward_inputs=sizes.val) + _final(sizes, num_samples) + scales + member0
    if method not in _TRAINED:
        raise ValueError(f"no selection cost model for method {method!r}")
    return _final(sizes, num_samples, _TRAINED[method][1])


def method_work(method: str, sizes: Sizes, cfg: Mapping[str, Any], train: Mapping[str, Any], num_samples: int, *,
                swag_scales: int = 0, multiswag_components: int = 0) -> Work:  # fmt: skip
    """One method job (``cfg``: the method's settings with its grid; ``train``: the adapter's): SA's calibration
    and sampling; SWAG's selection, sampling, ``swag_scales`` variance scales (val and test) and the share its
    member 0 draws at every candidate for a MultiSWAG of ``multiswag_components`` (:func:`selection_work`);
    MultiSWAG: the pooled samples scored, no pass (member 0 draws in SWAG's job, members 1..L-1 in
    :func:`member_work`'s); IVON, Contextual Dropout and HSA: every candidate trained to ``max_epochs`` from a fresh
    adapter, sampled on val, the chosen one on test and cal."""
    if method == "sa":
        return _bo(sizes, cfg) + _final(sizes, 2 * num_samples, "sa_inputs")
    if method == "multiswag":
        return Work()
    if method != "swag" and method not in _TRAINED:
        raise ValueError(f"no cost model for method {method!r}")
    return (_grid(cfg) * candidate_work(method, sizes, cfg, train, num_samples)
            + selection_work(method, sizes, num_samples, swag_scales=swag_scales, grid=_grid(cfg),
                             multiswag_components=multiswag_components))  # fmt: skip


def member_work(sizes: Sizes, cfg: Mapping[str, Any], train: Mapping[str, Any], num_samples: int) -> Work:
    """One MultiSWAG member 1..L-1: a fresh adapter, then its SWAG phase and its share of the samples at every
    candidate of the grid."""
    return adapt_work(sizes, train) + _component_draws(sizes, cfg, num_samples)


def analyses_work(sizes: Sizes, sa: Mapping[str, Any], analyses: Mapping[str, Any], num_samples: int) -> Work:
    """ERA5's SA analyses: the nu sweep on cal, two test operating points, BO over the seeds on one or two ranges
    (the per-pass latency is left out: a few hundred passes of one input)."""
    ranges = 2 if analyses.get("bo_second_range") else 1
    return analyses_sweep_work(sizes, analyses, num_samples) + len(analyses["bo_seeds"]) * ranges * _bo(sizes, sa)


def analyses_sweep_work(sizes: Sizes, analyses: Mapping[str, Any], num_samples: int) -> Work:
    """The nu sweep on cal and the two test operating points (the job of the split analyses without BO)."""
    sweep = Work(sa_inputs=len(analyses["nu_grid"]) * num_samples * sizes.cal + 2 * num_samples * sizes.test)
    return sweep + Work(forward_inputs=sizes.cal)


def analyses_bo_work(sizes: Sizes, sa: Mapping[str, Any]) -> Work:
    """One BO seed of the analyses on one range (and the cal point prediction)."""
    return _bo(sizes, sa) + Work(forward_inputs=sizes.cal)


def gpu_minutes(work: Work, cost: Mapping[str, float], batch: int, factor: float, overhead_min: float = 10) -> int:
    """SLURM runtime request (minutes): ``work`` priced at ``cost`` times ``factor`` (the measuring GPU's speed
    over the cluster's, with a margin), plus ``overhead_min`` for start-up and loading."""
    if not factor >= 1:
        raise ValueError(f"factor must be >= 1, got {factor!r}")
    return math.ceil(work.seconds(cost, batch) * factor / 60 + overhead_min)


class QueueLimitError(ValueError):
    """A job's counted work cannot fit the cluster's runtime bound (config ``cluster.max_runtime_hours``)."""


def runtime_request(minutes: float, attempt: int, bound_minutes: float, *, job: str, work: str = "",
                    resumable: bool = False, retries: int = 0, check: bool = True) -> int:
    """SLURM runtime request (minutes) of attempt ``attempt`` (1 = first submission) of a job whose counted work
    takes ``minutes``: the work, doubled on each retry, never above ``bound_minutes`` (the longest job a queue
    takes).

    A job that cannot resume must fit the bound in one attempt. One that resumes from its last saved epoch
    (:func:`stochattn.training.fit_regressor` with a checkpoint) may need several: each attempt requests the bound
    and continues where the previous one was killed, so ``ceil(minutes / bound)`` attempts must be at most
    ``1 + retries`` (the profile's ``retries``).

    ``check=False`` skips the fit check (inside a submitted job, which re-evaluates its resources without the
    profile's retries: the submitting process checked it).

    Raises:
        QueueLimitError: the work cannot fit; the message names ``job``, its counted ``work`` and what to change.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt!r}")
    if not bound_minutes > 0:
        raise ValueError(f"bound_minutes must be > 0, got {bound_minutes!r}")
    needed = math.ceil(minutes / bound_minutes)
    allowed = 1 + retries if resumable else 1
    if check and needed > allowed:
        how = (f"it resumes from its last epoch, so it needs {needed} attempts: set retries >= {needed - 1} in the "
               f"profile, or " if resumable else "it cannot resume, so ")
        raise QueueLimitError(
            f"{job}: counted work {minutes / 60:.1f} h{f' ({work})' if work else ''} exceeds cluster.max_runtime_hours"
            f" = {bound_minutes / 60:g} h; {how}raise cluster.max_runtime_hours to your GPU queue's limit, lower "
            f"gpu_runtime_factor on GPUs faster than a V100 (2 on H100 / H200), or reduce the configuration's work "
            f"(epochs, grid, data)"
        )
    return int(math.ceil(min(minutes * attempt, bound_minutes)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="results/benchmarks")
    parser.add_argument("--safety", type=float, default=2.0)
    parser.add_argument("--write", metavar="FILE", help="write {family: {dataset: minutes}} (YAML) for the config "
                        "key runtime_estimates")
    parser.add_argument("--write-measured", metavar="FILE", help="write {family: {max_rss_mb, max_s, n, data_mb}} "
                        "(YAML; config/measured_resources.yaml, checked by tests/test_workflow.py)")
    parser.add_argument("--data", metavar="FAMILY=PATH", action="append", default=[],
                        help="with --write-measured: the data file the family's jobs load (its size is data_mb)")
    parser.add_argument("--note", default="", help="with --write-measured: where and at what size it was measured")
    args = parser.parse_args(argv)
    est = runtime_estimates(args.root, args.safety)
    if not est:
        print(f"no benchmark records under {args.root}")
        return 1
    print(f"{'rule family':28s} {'n':>4s} {'median s':>9s} {'max s':>9s} {'max RSS MB':>10s} {'runtime min':>11s}")
    for family, e in est.items():
        rss = "NA" if e["max_rss_mb"] is None else f"{e['max_rss_mb']:.0f}"
        print(f"{family:28s} {e['n']:4d} {e['median_s']:9.1f} {e['max_s']:9.1f} {rss:>10s} {e['runtime_min']:11d}")
    if args.write:
        with requires("workflow"):
            import yaml

        from .io import atomic_path

        with atomic_path(args.write) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"# runtime requests in minutes (largest measured wall clock x {args.safety}) from {args.root}\n")
            yaml.safe_dump(dataset_estimates(args.root, args.safety), fh, sort_keys=True)
        print(f"wrote {args.write}")
    if args.write_measured:
        sizes = {}
        for item in args.data:
            family, _, path = item.partition("=")
            sizes[family] = Path(path).stat().st_size / 2**20
        write_measured(args.root, args.write_measured, args.note or f"measured from {args.root}", sizes)
        print(f"wrote {args.write_measured}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
