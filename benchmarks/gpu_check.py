"""``make gpu-check``: what only a CUDA machine can check, in one summary table.

    python benchmarks/gpu_check.py [--repeats 10] [--skip-dag] [--skip-tests] [--skip-kernel] [--device cuda]

1. The CUDA-only tests (``pytest -m cuda``-style: every test whose id names ``cuda``, skipped elsewhere), and the
   fused kernel's law on the GPU (tests/test_triton_sa_cuda.py, in a process of its own).
2. SA against the deterministic pass on the FULL-SIZE modules, random weights (their public architectures: TimesFM
   2.5 200M, 20 layers, d 1280, a batch of 32 series with a 512-step context, a 96-step point forecast; ClimaX
   5.625 deg, 48 variables, D 1024, 8 blocks, a batch of 4 fields, SA in the blocks and the variable aggregation):
   the patched pass at ``nu=None`` must equal the unpatched one (SA off is exact), and at nu in {1, 4, 16, 64, 512}
   the median of per-repeat (SA / deterministic) time ratios, each repeat timing the two passes back to back with
   the device synchronised (the paper, V100, ClimaX: 1.08x at nu=1, ~1.11x at nu=4, 1.25x at nu=512), for the
   explicit path and (CUDA) the fused kernel, which the adapters' SDPA path takes by default; and (CUDA) both passes
   captured in CUDA graphs and replayed ("graphed": SA's cost on the device alone, its streams on the device so
   that every replay draws afresh; a model whose forward cannot be captured says so).
3. The fused SA kernel (:mod:`stochattn.triton_sa`) against fused SDPA on the attention shapes of full-size ClimaX and
   TimesFM 2.5 at nu in {1, 4, 16, 64, 512} (time ratio; at nu=1 every output row must be a row of V), and peak
   memory at 8k / 16k tokens for SDPA, the kernel and the explicit path (benchmarks/bench_triton_sa.py).
4. The tiny DAG of every slice (UCI, ETT, ERA5; ``config/test.yaml``) on the GPU, in a temporary directory.

Where no CUDA device is present it says so and exits 0: the checks need one. ``--device cpu`` runs parts 2 and 4
on the CPU with reduced modules (``--small``), which is how this script itself is tested. Exit status 1 when a check
failed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

REPO = Path(__file__).resolve().parents[1]
NUS = (1, 4, 16, 64, 512)
PAPER_CLIMAX = {1: "1.08x", 4: "~1.11x", 512: "1.25x"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def paired_ratios(call, sa, device: torch.device, repeats: int) -> tuple[float, float]:
    """(median deterministic seconds, median of per-repeat SA / deterministic time ratios); ``sa`` a removed
    :class:`stochattn.patch.StochasticAttention`, applied for each SA pass."""

    def timed() -> float:
        _sync(device)
        start = time.perf_counter()
        call()
        _sync(device)
        return time.perf_counter() - start

    sa.apply()
    timed()  # warm-up (kernels, allocator)
    sa.remove()
    timed()
    det, ratios = [], []
    for _ in range(repeats):
        d = timed()
        sa.apply()
        s = timed()
        sa.remove()
        det.append(d)
        ratios.append(s / d)
    return statistics.median(det), statistics.median(ratios)


def graphed_ratios(call, sa, device: torch.device, repeats: int) -> tuple[float, float, bool]:
    """As :func:`paired_ratios`, with each pass captured once in a CUDA graph and replayed (no host work per
    forward: what SA costs on the device alone, as a sampler replaying one forward N times would run it): (median
    deterministic replay seconds, median per-repeat SA / deterministic ratio, whether two SA replays differ). SA's
    streams are moved to the device (StochasticAttention.streams_to) so that each replay draws afresh; raises where
    the forward cannot be captured (a host synchronisation inside it)."""
    graphs = {}
    for label in ("deterministic", "sa"):
        if label == "sa":
            sa.apply()
            sa.streams_to(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph's documentation asks
            call()
            call()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = call()
        finally:
            if label == "sa":
                sa.remove()
        graphs[label] = (graph, out)

    def replayed(label: str) -> float:
        _sync(device)
        start = time.perf_counter()
        graphs[label][0].replay()
        _sync(device)
        return time.perf_counter() - start

    replayed("sa")
    first = graphs["sa"][1].clone()
    replayed("sa")
    differ = not torch.equal(first, graphs["sa"][1])
    det, ratios = [], []
    for _ in range(repeats):
        d = replayed("deterministic")
        ratios.append(replayed("sa") / d)
        det.append(d)
    sa.streams_to("cpu")
    return statistics.median(det), statistics.median(ratios), differ


def _timesfm(device: torch.device, small: bool):
    """(name, model, call(x), input) of TimesFM 2.5 (200M unless ``small``)."""
    from stochattn.backbones.timesfm import build_timesfm, build_timesfm_200m, module_of, point_forecast

    model = module_of(build_timesfm(2, 64, 2, seed=0) if small else build_timesfm_200m()).to(device).eval()
    x = _timesfm_context(device, small)
    name = "TimesFM 2.5 (reduced)" if small else "TimesFM 2.5 200M"
    return name, model, lambda: point_forecast(model, x, horizon=96)


def _timesfm_context(device: torch.device, small: bool) -> torch.Tensor:
    """(B, 512) random walks: 32 series (4 if ``small``)."""
    return torch.randn(4 if small else 32, 512, generator=torch.Generator().manual_seed(0)).cumsum(1).to(device)


def _graph_call(name: str, model, call, device: torch.device, small: bool):
    """What a CUDA graph captures of a model row: ClimaX's forward as timed; for TimesFM 2.5, the same point forecast
    through ``stochattn.backbones.timesfm.forecast`` (the prefill recomputed without timesfm's decode cache, equal
    to the timed ``point_forecast`` up to round-off): timesfm's decode slices its cache at a device index
    (``next_index[0]``), a host synchronisation that capture refuses."""
    if "TimesFM" not in name:
        return call
    from stochattn.backbones.timesfm import forecast

    x = _timesfm_context(device, small)
    return lambda: forecast(model, x, horizon=96)


def _climax(device: torch.device, small: bool):
    """(name, model, call(x), nu template) of ClimaX 5.625 deg (the full architecture unless ``small``)."""
    from stochattn.backbones.climax import CLIMAX_DEFAULT_VARS, Z500, ClimaX, ClimaXForecaster, build_climax

    net = build_climax(seed=0) if small else ClimaX().eval()
    variables = list(net.default_vars)
    assert small or variables == list(CLIMAX_DEFAULT_VARS)
    model = ClimaXForecaster(net, variables, Z500, 72.0).to(device).eval()
    h, w = net.img_size
    x = torch.randn(2 if small else 4, len(variables) * h * w, generator=torch.Generator().manual_seed(0)).to(device)
    name = "ClimaX 5.625deg (reduced)" if small else "ClimaX 5.625deg (48 vars)"
    return name, model, lambda: model(x)


def _default_sampler(sampler: Optional[str]) -> Optional[str]:
    """The fused kernel's sampler on the SDPA path (stochattn.triton_sa.DEFAULT_SAMPLER) before this call, set to
    ``sampler`` unless None; None where triton does not import."""
    try:
        from stochattn import triton_sa
    except ImportError:
        return None
    previous = triton_sa.DEFAULT_SAMPLER
    if sampler is not None:
        triton_sa.DEFAULT_SAMPLER = sampler
    return previous


def sa_rows(device: torch.device, repeats: int, small: bool) -> list[dict]:
    """One row per (model, nu): deterministic ms, SA/deterministic ratio; nu=None rows check exactness."""
    from stochattn import attention
    from stochattn.backbones.climax import climax_sa_nu
    from stochattn.patch import StochasticAttention

    rows = []
    for build, template in ((_timesfm, lambda nu: nu), (_climax, climax_sa_nu)):
        name, model, call = build(device, small)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            reference = call()
            with StochasticAttention(model, nu=template(None), generator=gen):
                off = call()
            exact = bool(torch.equal(reference, off))
            rows.append({"check": f"{name}: SA off (nu=None) == deterministic", "ok": exact,
                         "value": "exact" if exact else f"max |diff| {float((reference - off).abs().max()):.3g}"})
            for nu in NUS:
                cells, ok, det = [], True, float("nan")
                # the explicit path, then (CUDA) the fused kernel of the adapters' SDPA path with its two-pass
                # sampler, at nu <= 16 with its one-pass race ("auto" takes the race where it was timed faster) and
                # at nu <= 64 with its groups sampler (not yet timed on a GPU)
                paths = (("explicit", False, "cdf"), ("fused", None, "cdf"), ("race", None, "race"),
                         ("groups", None, "groups"))  # fmt: skip
                library_sampler = _default_sampler(None)
                for label, fused, sampler in paths[: len(paths) if device.type == "cuda" else 1]:
                    if label == "race" and nu > 16 or label == "groups" and nu > 64:
                        continue
                    _default_sampler(sampler)
                    sa = StochasticAttention(model, nu=template(nu), generator=gen, fused=fused)
                    sa.remove()
                    try:
                        det, ratio = paired_ratios(call, sa, device, repeats)
                        sa.apply()
                        finite = bool(torch.isfinite(call()).all())
                        sa.remove()
                        if fused is None and attention._fused_failure is not None:  # the explicit path was timed
                            raise RuntimeError(f"fell back to the explicit path ({attention._fused_failure})")
                        cells.append(f"{label} {ratio:.2f}x" + ("" if finite else " (non-finite output)"))
                        ok &= finite
                    except Exception as err:  # noqa: BLE001 (the fused kernel's first GPU compile: a row, not the end)
                        sa.remove()
                        cells.append(f"{label} failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
                        ok = False
                _default_sampler(library_sampler)
                if device.type == "cuda":  # both passes captured in CUDA graphs, the library's default sampler
                    sa = StochasticAttention(model, nu=template(nu), generator=gen)
                    sa.remove()
                    try:
                        graph_det, ratio, differ = graphed_ratios(_graph_call(name, model, call, device, small), sa,
                                                                  device, repeats)  # fmt: skip
                        cells.append(f"graphed {ratio:.2f}x (det {1e3 * graph_det:.1f} ms"
                                     + ("" if differ else "; REPLAYS REPEAT ONE DRAW") + ")")  # fmt: skip
                        ok &= differ
                    except Exception as err:  # noqa: BLE001 (a model that cannot be captured: said, not fatal)
                        sa.remove()
                        cells.append(f"graphed: not captured ({type(err).__name__}: "
                                     f"{str(err).splitlines()[0][:100] if str(err) else ''})")  # fmt: skip
                paper = PAPER_CLIMAX.get(nu, "-") if "ClimaX" in name else "-"
                rows.append({"check": f"{name}: nu={nu} time / deterministic", "ok": ok,
                             "value": f"{', '.join(cells)} (det {1e3 * det:.1f} ms; paper V100 {paper})"})
                print(f"{rows[-1]['check']}: {rows[-1]['value']}", flush=True)  # as it goes: a time limit keeps it
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def arch_row() -> dict:
    """Whether this torch build has kernels for the GPU (stochattn.provenance.check_gpu_arch)."""
    from stochattn.provenance import check_gpu_arch

    cap = torch.cuda.get_device_capability()
    try:
        check_gpu_arch()
        return {"check": "kernels for this GPU in the torch build", "ok": True,
                "value": f"sm_{cap[0]}{cap[1]} in {', '.join(torch.cuda.get_arch_list())}"}  # fmt: skip
    except RuntimeError as err:
        return {"check": "kernels for this GPU in the torch build", "ok": False, "value": str(err)}


def cuda_tests(workers: int = 0) -> list[dict]:
    """The CUDA-only tests: pytest over the tests whose ids name cuda; then the fused kernel's CUDA tests
    (tests/test_triton_sa_cuda.py) in a process of their own (the interpreter tests set TRITON_INTERPRET=1 for
    theirs), in ``workers`` pytest-xdist processes where given (each compiles its share of the kernel variants)."""
    rows = []
    kernel_tests = "tests/test_triton_sa_cuda.py"
    parallel = ["-n", str(workers)] if workers > 1 else []
    runs = (("CUDA-only tests (pytest -k cuda)", ["-k", "cuda", "--ignore", kernel_tests, "tests"]),
            ("fused kernel on CUDA (tests/test_triton_sa_cuda.py)", [*parallel, kernel_tests]))
    for label, args in runs:
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO,
                             capture_output=True, text=True)  # fmt: skip
        lines = res.stdout.strip().splitlines() or ["(no output)"]
        if res.returncode:
            print(f"{label} failed; the end of its output:", *lines[-60:], sep="\n", file=sys.stderr)
        rows.append({"check": label, "ok": res.returncode == 0, "value": lines[-1]})
    return rows


def tiny_dags() -> list[dict]:
    """The tiny DAG of every slice (config/test.yaml) in a temporary directory, on whatever device torch sees."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for slice_name, targets in (("UCI", ["results/tables/uci_master.csv"]), ("ETT", ["ett"]), ("ERA5", ["era5"])):
            work = Path(tmp) / slice_name
            cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                   str(work), "--profile", str(REPO / "profiles" / "default"), "--cores", "4", *targets,
                   "--configfile", str(REPO / "config" / "test.yaml")]  # fmt: skip
            start = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            tail = ""
            if res.returncode:  # the failing job's log (show-failed-logs) is in the output: print its end
                lines = (res.stdout + res.stderr).strip().splitlines()
                print(f"tiny {slice_name} DAG failed; the end of its output:", *lines[-40:], sep="\n", file=sys.stderr)
                tail = " | " + lines[-1][:80]
            rows.append({"check": f"tiny {slice_name} DAG", "ok": res.returncode == 0,
                         "value": f"{seconds:.0f} s{tail}"})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    width = max(len(r["check"]) for r in rows)
    lines = [f"{'check':<{width}}  status  result", f"{'-' * width}  ------  ------"]
    lines += [f"{r['check']:<{width}}  {'ok' if r['ok'] else 'FAIL':<6}  {r['value']}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --small: the self-test)")
    parser.add_argument("--small", action="store_true", help="reduced modules instead of the full-size ones")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-dag", action="store_true", help="leave out the tiny DAGs (part 4)")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the CUDA-only tests (part 1)")
    parser.add_argument("--skip-kernel", action="store_true", help="leave out the fused kernel's rows (part 3)")
    parser.add_argument("--test-workers", type=int, default=0, help="pytest-xdist processes for the kernel tests")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
              "nothing to check. On a cluster: srun --gres=gpu:1 make gpu-check")  # fmt: skip
        return 0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"gpu-check on {name} (torch {torch.__version__})", flush=True)
    parts = []
    if device.type == "cuda":
        parts.append(lambda: [arch_row()] + ([] if args.skip_tests else cuda_tests(args.test_workers)))
    parts.append(lambda: sa_rows(device, args.repeats, args.small))
    if device.type == "cuda" and not args.skip_kernel:  # the fused kernel against fused SDPA; memory
        from bench_triton_sa import fused_rows, memory_rows

        def fused() -> list[dict]:  # never compiled on a GPU before this check: a failure is a row, not the end
            try:
                return fused_rows(device, args.repeats) + memory_rows(device)
            except Exception as err:  # noqa: BLE001 (reported in the table)
                return [{"check": "fused SA kernel (benchmarks/bench_triton_sa.py)", "ok": False,
                         "value": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}]

        parts.append(fused)
    if not args.skip_dag:
        parts.append(tiny_dags)
    rows = []
    for part in parts:  # each part's rows as soon as it ends: a job killed at its time limit still reports them
        rows += part()
        print(table(rows), flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
