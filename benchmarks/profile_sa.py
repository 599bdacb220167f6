"""Where SA's whole-model overhead goes on a CUDA device: host or device, and which kernels.

    python benchmarks/profile_sa.py [--nu 16] [--repeats 20] [--models timesfm climax] [--fp32-scores tf32x3 ieee]
    python benchmarks/profile_sa.py --device cpu --small      # the self-test

For the full-size TimesFM 2.5 200M and ClimaX modules of gpu_check.py (random weights), the deterministic pass and
the SA pass (fused kernel, the adapters' default on CUDA, with each of ``--samplers`` cdf / race / groups;
``--explicit`` for the explicit path; ``--fp32-scores tf32x3 ieee`` times the fused kernel's fp32 q k^T both ways):
- wall: the median of per-repeat SA / deterministic ratios, each repeat timing the two passes back to back with the
  device synchronised (gpu_check.paired_ratios). Two medians taken minutes apart are not compared: on a host-bound
  forward the host's speed drifts by more than SA's cost (TimesFM's deterministic pass took 33-59 ms in one hour);
- the device's busy time per forward (the sum of CUDA kernel times under torch.profiler) and the top operators by
  device and host time;
- the host time spent in SA's attention calls, and where the rest of the host's extra time goes: one forward each
  under cProfile, the functions whose own time grew most from the deterministic pass to SA;
- the synchronising CUDA calls per forward (``torch.cuda.set_sync_debug_mode``), deterministic and SA: a call that
  waits for the device stops the host from queueing work ahead of it.
A forward whose wall time is far above its device time is bound by the host (Python, launches): there, SA's
overhead is host work per attention call, not the kernel. ``--device cpu --small`` runs the reduced modules on the
CPU (the explicit path; no device time or synchronisations to count): how this script itself is tested.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import pstats
import sys
import time
import warnings

import torch

from gpu_check import _climax, _sync, _timesfm, paired_ratios  # benchmarks/ is this script's folder, on sys.path


def _profile(call, device: torch.device, repeats: int, top: int) -> tuple[float, str]:
    """(device busy ms per forward, nan on the CPU; top operators table)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(device)
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            call()
        _sync(device)
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # the kernels themselves
    device_us = sum(e.self_device_time_total for e in (kernels or events)) if cuda else float("nan")
    by_host = events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60)
    if not cuda:
        return device_us, f"by host time:\n{by_host}"
    by_device = events.table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=60)
    return device_us / 1e3 / repeats, f"by device time:\n{by_device}\nby host time:\n{by_host}"


def _host_profile(call, device: torch.device) -> pstats.Stats:
    """cProfile of one forward (Python functions and the C calls they make)."""
    profiler = cProfile.Profile()
    _sync(device)
    profiler.enable()
    call()
    _sync(device)
    profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def host_growth(det: pstats.Stats, sa: pstats.Stats, top: int) -> str:
    """The ``top`` functions whose own (exclusive) host time grew most from ``det`` to ``sa``, with call counts,
    and the two forwards' totals: where SA's extra host time is spent, function by function."""

    def own(stats: pstats.Stats) -> dict:
        return {key: (calls, seconds) for key, (_, calls, seconds, _, _) in stats.stats.items()}

    before, after = own(det), own(sa)
    rows = []
    for key in before.keys() | after.keys():
        (n0, t0), (n1, t1) = before.get(key, (0, 0.0)), after.get(key, (0, 0.0))
        rows.append((t1 - t0, n0, n1, t1, pstats.func_std_string(key)))
    rows.sort(reverse=True)
    lines = [f"host time under cProfile, one forward: deterministic {1e3 * det.total_tt:.1f} ms, SA "
             f"{1e3 * sa.total_tt:.1f} ms ({1e3 * (sa.total_tt - det.total_tt):+.1f} ms); own time grown most:",
             f"{'+ms':>7} {'calls det':>9} {'calls SA':>9} {'SA ms':>7}  function"]  # fmt: skip
    lines += [f"{1e3 * d:7.2f} {n0:9d} {n1:9d} {1e3 * t1:7.2f}  {name}" for d, n0, n1, t1, name in rows[:top]]
    return "\n".join(lines)


def sync_count(call, device: torch.device) -> int:
    """Synchronising CUDA calls in one forward (``torch.cuda.set_sync_debug_mode("warn")``); -1 on the CPU."""
    if device.type != "cuda":
        return -1
    _sync(device)
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    _sync(device)
    return sum("synchroniz" in str(w.message) for w in caught)


def _device_text(device_ms: float, syncs: int, det_ms: float | None = None) -> str:
    if syncs < 0:
        return "no device time or synchronisations on the CPU"
    ratio = "" if det_ms is None else f" ({device_ms / det_ms:.2f}x)"
    return f"{device_ms:.1f} ms device{ratio}, {syncs} synchronising calls"


class _HostClock:
    """Host seconds spent inside SA's attention calls on the SDPA path (stochattn.patch.SAState.sdpa: the stream's
    seed, the fused kernel's or the explicit path's work; every adapter profiled here goes through it)."""

    def __init__(self):
        from stochattn.patch import SAState

        self.owner, self.original, self.seconds, self.calls = SAState, SAState.sdpa, 0.0, 0

    def __enter__(self):
        original = self.original

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        self.owner.sdpa = timed
        return self

    def __exit__(self, *exc):
        self.owner.sdpa = self.original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nu", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=20, help="paired wall repeats (profiler: a quarter, >= 1)")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--explicit", action="store_true", help="the explicit path instead of the fused kernel")
    parser.add_argument("--samplers", nargs="+", default=["cdf", "race", "groups"], choices=["cdf", "race", "groups"],
                        help="the fused kernel's samplers to profile (race: nu <= 16; groups: nu <= 64)")  # fmt: skip
    parser.add_argument("--fp32-scores", nargs="+", choices=["tf32x3", "ieee"],
                        help="the fused kernel's fp32 q k^T on GPUs with TF32 (triton_sa.FP32_SCORES_PRECISION, "
                             "RACE_FP32_SCORES_PRECISION); default: the library's per sampler")  # fmt: skip
    parser.add_argument("--models", nargs="*", default=["timesfm", "climax"], choices=["timesfm", "climax"])
    parser.add_argument("--python-profile", type=int, default=25, metavar="N",
                        help="the N functions whose host time grew most under SA (cProfile of each pass)")  # fmt: skip
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for the self-test (the explicit path)")
    parser.add_argument("--small", action="store_true", help="the reduced modules (the CPU self-test)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"profile_sa: no CUDA device here (torch {torch.__version__}); nothing to profile.")
        return 0
    from stochattn import triton_sa
    from stochattn.backbones.climax import climax_sa_nu
    from stochattn.patch import StochasticAttention

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"profile_sa on {where} (torch {torch.__version__}), nu {args.nu}", flush=True)
    builds = {"timesfm": (_timesfm, lambda nu: nu), "climax": (_climax, climax_sa_nu)}
    explicit = args.explicit or device.type != "cuda"
    most = {"cdf": float("inf"), "race": triton_sa.RACE_MAX_NU, "groups": triton_sa.GROUPS_MAX_NU}
    samplers = ["explicit"] if explicit else [s for s in args.samplers if args.nu <= most[s]]
    precisions = args.fp32_scores or [None]  # None: each sampler's library default
    library_scores = {"cdf": triton_sa.FP32_SCORES_PRECISION, "race": triton_sa.RACE_FP32_SCORES_PRECISION,
                      "groups": triton_sa.FP32_SCORES_PRECISION}  # fmt: skip
    profiled = max(1, args.repeats // 4)
    default_sampler = triton_sa.DEFAULT_SAMPLER
    for key in args.models:
        build, template = builds[key]
        name, model, call = build(device, args.small)
        with torch.no_grad():
            call(), call()
            det_dev, det_table = _profile(call, device, profiled, args.top)
            det_syncs = sync_count(call, device)
            det_host = _host_profile(call, device)
            print(f"\n== {name}: deterministic {_device_text(det_dev, det_syncs)}", flush=True)
            print(f"-- deterministic, {det_table}", flush=True)
            for sampler, scores in itertools.product(samplers, precisions):
                scores = scores or library_scores.get(sampler)
                label = sampler if sampler == "explicit" else f"{sampler}, fp32 scores {scores}"
                triton_sa.DEFAULT_SAMPLER = "cdf" if sampler == "explicit" else sampler
                triton_sa.FP32_SCORES_PRECISION = scores if sampler in ("cdf", "groups") else library_scores["cdf"]
                triton_sa.RACE_FP32_SCORES_PRECISION = scores if sampler == "race" else library_scores["race"]
                sa = StochasticAttention(model, nu=template(args.nu), generator=torch.Generator().manual_seed(0),
                                         fused=False if sampler == "explicit" else None)  # fmt: skip
                call(), call()  # compile and autotune
                sa.remove()
                det_wall, ratio = paired_ratios(call, sa, device, args.repeats)
                sa.apply()
                with _HostClock() as clock:
                    call()
                sa_dev, sa_table = _profile(call, device, profiled, args.top)
                sa_syncs = sync_count(call, device)
                growth = host_growth(det_host, _host_profile(call, device), args.python_profile)
                sa.remove()
                print(f"== {name}: SA ({label}, nu {args.nu}) wall {ratio:.2f}x the deterministic pass (median "
                      f"of {args.repeats} paired repeats; deterministic {1e3 * det_wall:.1f} ms), "
                      f"{_device_text(sa_dev, sa_syncs, det_dev)}; host time in SA's "
                      f"{clock.calls} attention calls {1e3 * clock.seconds:.1f} ms "
                      f"({clock.seconds / det_wall:.2f} of the deterministic pass)", flush=True)  # fmt: skip
                print(f"-- SA ({label}), {sa_table}\n{growth if args.python_profile else ''}", flush=True)
        triton_sa.FP32_SCORES_PRECISION = library_scores["cdf"]
        triton_sa.RACE_FP32_SCORES_PRECISION = library_scores["race"]
        triton_sa.DEFAULT_SAMPLER = default_sampler
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
