"""Where SA's whole-model overhead goes on a CUDA device: host or device, and which kernels.

    python benchmarks/profile_sa.py [--nu 16] [--repeats 5] [--models timesfm climax]

For the full-size TimesFM 2.5 200M and ClimaX modules of gpu_check.py (random weights), the deterministic pass and
the SA pass (fused kernel, the adapters' default on CUDA, with each of ``--samplers`` cdf / race; ``--explicit`` for
the explicit path): wall milliseconds
per forward (median, device synchronised), the device's busy time per forward (the sum of CUDA kernel times under
torch.profiler), the host time spent in SA's attention calls, and the top operators by device and host time. A
forward whose wall time is far above its device time is bound by the host (Python, launches): there, SA's
overhead is host work per attention call, not the kernel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from gpu_check import _climax, _timesfm  # benchmarks/ is this script's folder, on sys.path


def _wall_ms(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def _profile(call, repeats: int, top: int) -> tuple[float, str]:
    """(device busy ms per forward, top operators table)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            call()
        torch.cuda.synchronize()
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # the kernels themselves
    device_us = sum(e.self_device_time_total for e in (kernels or events))  # else: each operator's own kernels
    by_device = events.table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=60)
    by_host = events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60)
    return device_us / 1e3 / repeats, f"by device time:\n{by_device}\nby host time:\n{by_host}"


def _python_profile(call, top: int) -> str:
    """cProfile of one forward: the functions of largest cumulative host time (Python and launches)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    call()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return f"host (cProfile, one SA forward):\n{text.getvalue()}"


class _HostClock:
    """Host seconds spent inside stochattn.attention.scaled_dot_product_attention (SA's attention calls)."""

    def __init__(self):
        from stochattn import attention

        self.original, self.seconds, self.calls = attention.scaled_dot_product_attention, 0.0, 0
        self.modules = [m for n, m in list(sys.modules.items()) if n.startswith("stochattn")
                        and getattr(m, "scaled_dot_product_attention", None) is self.original]  # fmt: skip

    def __enter__(self):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        for module in self.modules:  # every module that imported it by name
            module.scaled_dot_product_attention = timed
        return self

    def __exit__(self, *exc):
        for module in self.modules:
            module.scaled_dot_product_attention = self.original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nu", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--explicit", action="store_true", help="the explicit path instead of the fused kernel")
    parser.add_argument("--samplers", nargs="+", default=["cdf", "race"], choices=["cdf", "race"],
                        help="the fused kernel's samplers to profile (race: nu <= 16)")  # fmt: skip
    parser.add_argument("--models", nargs="*", default=["timesfm", "climax"], choices=["timesfm", "climax"])
    parser.add_argument("--python-profile", type=int, default=25, metavar="N",
                        help="cProfile one SA forward: the N functions of most cumulative host time")  # fmt: skip
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"profile_sa: no CUDA device here (torch {torch.__version__}); nothing to profile.")
        return 0
    from stochattn import triton_sa
    from stochattn.backbones.climax import climax_sa_nu
    from stochattn.patch import StochasticAttention

    device = torch.device("cuda")
    print(f"profile_sa on {torch.cuda.get_device_name(device)} (torch {torch.__version__}), nu {args.nu}", flush=True)
    builds = {"timesfm": (_timesfm, lambda nu: nu), "climax": (_climax, climax_sa_nu)}
    samplers = ["explicit"] if args.explicit else [s for s in args.samplers if s == "cdf" or args.nu <= 16]
    default_sampler = triton_sa.DEFAULT_SAMPLER
    for key in args.models:
        build, template = builds[key]
        name, model, call = build(device, False)
        with torch.no_grad():
            call(), call()
            det_wall = _wall_ms(call, args.repeats)
            det_dev, det_table = _profile(call, args.repeats, args.top)
            print(f"\n== {name}: deterministic {det_wall:.1f} ms wall, {det_dev:.1f} ms device", flush=True)
            print(f"-- deterministic, {det_table}", flush=True)
            for sampler in samplers:
                triton_sa.DEFAULT_SAMPLER = "race" if sampler == "race" else "cdf"
                sa = StochasticAttention(model, nu=template(args.nu), generator=torch.Generator().manual_seed(0),
                                         fused=False if sampler == "explicit" else None)  # fmt: skip
                call(), call()  # compile and autotune
                sa_wall = _wall_ms(call, args.repeats)
                with _HostClock() as clock:
                    call()
                sa_dev, sa_table = _profile(call, args.repeats, args.top)
                python_table = _python_profile(call, args.python_profile) if args.python_profile else ""
                sa.remove()
                print(f"== {name}: SA ({sampler}, nu {args.nu}) {sa_wall:.1f} ms wall ({sa_wall / det_wall:.2f}x), "
                      f"{sa_dev:.1f} ms device ({sa_dev / det_dev:.2f}x); host time in SA's {clock.calls} attention "
                      f"calls {1e3 * clock.seconds:.1f} ms", flush=True)  # fmt: skip
                print(f"-- SA ({sampler}), {sa_table}\n{python_table}", flush=True)
        triton_sa.DEFAULT_SAMPLER = default_sampler
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
