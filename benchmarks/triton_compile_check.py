"""Compile the fused SA kernels (stochattn.triton_sa_kernels) for CUDA targets ahead of time: no GPU needed.

    python benchmarks/triton_compile_check.py [--arch 70 75 80 90 120] [--head-dim 64 80] [--dtype fp32 bf16 fp16]

Triton's whole pipeline runs here (front end -> TTIR -> TTGIR -> LLVM IR -> PTX -> cubin through the ptxas its wheel
ships) for every kernel variant the entry point launches (fp32 / bf16 / fp16; no mask, boolean, additive, causal;
head dims 64 (ClimaX) and 80 (TimesFM 2.5)) at the GPU tile sizes of :func:`stochattn.triton_sa._blocks`, and
each row gives the cubin's registers
and stack bytes per thread (``cuobjdump -res-usage``: a stack is spilled registers). What it cannot tell is speed:
that needs a GPU (``make gpu-check``). Must run without TRITON_INTERPRET (the interpreter replaces the kernels).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile

DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
VARIANTS = (("none", 0, False), ("bool", 1, False), ("additive", 2, False), ("causal", 0, True))


def _signature(fn, dtype: str, mask_kind: int, constexprs: dict) -> dict:
    """Triton's argument types of ``fn`` for tensors of ``dtype``: pointers, fp32 scalars, i64 seed / offset, i32
    sizes and strides, constexpr for the meta-parameters."""
    pointers = {"Q": dtype, "K": dtype, "V": dtype, "Out": dtype, "Mask": "i8" if mask_kind == 1 else "fp32",
                "M_out": "fp32", "Z_out": "fp32", "M_in": "fp32", "Z_in": "fp32", "Nu": "i32"}  # fmt: skip
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = "*" + pointers[name]
        elif name == "scale":
            sig[name] = "fp32"
        elif name in ("seed", "offset"):
            sig[name] = "i64"
        else:
            sig[name] = "i32"
    return sig


def _resources(cubin: bytes) -> str:
    """'REG:n STACK:m' of a cubin (cuobjdump from Triton's wheel), or '' where it is missing."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return f"{found.group(1)} registers, {found.group(2)} B stack" if found else ""


def compile_rows(archs=(90,), dtypes=("fp32", "bf16"), variants=VARIANTS, head_dims=(64,), nu_max=512,
                 **tile_overrides) -> list[dict]:  # fmt: skip
    """One row per (arch, dtype, head dim, variant, kernel): {"check", "ok", "value"} (gpu_check.py's row format),
    at the tile sizes the entry point chooses on a GPU for ``nu_max`` (``tile_overrides``: e.g. num_warps=8)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("TRITON_INTERPRET=1 replaces the kernels by the interpreter: unset it")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from stochattn import triton_sa_kernels as kernels
    from stochattn.triton_sa import _blocks, _next_power_of_2

    tiles, launch = _blocks(False, nu_max)
    tiles = {**tiles, **{k: v for k, v in tile_overrides.items() if k != "num_warps"}}
    warps = {kernel: tile_overrides.get("num_warps", opts["num_warps"]) for kernel, opts in launch.items()}
    rows = []
    for arch, dtype, e, (variant, mask_kind, causal) in itertools.product(archs, dtypes, head_dims, variants):
        block_e = max(16, _next_power_of_2(e))
        meta = {"MASK_KIND": mask_kind, "IS_CAUSAL": causal, "BLOCK_M": tiles["BLOCK_M"], "BLOCK_N": tiles["BLOCK_N"],
                "BLOCK_E": block_e, "PRECISION": "ieee" if dtype == "fp32" else "tf32", "UPCAST": False}  # fmt: skip
        sample = {"BLOCK_EV": block_e, "NU_BLOCK": tiles["NU_BLOCK"], "WEIGHTS_IN_V_DTYPE": dtype != "fp32"}
        for fn, constexprs, kernel in ((kernels._stats_kernel, meta, "stats"),
                                       (kernels._sample_kernel, {**meta, **sample}, "sample")):  # fmt: skip
            src = ASTSource(fn, _signature(fn, DTYPES[dtype], mask_kind, constexprs),
                            constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})  # fmt: skip
            try:
                options = {"num_warps": warps[kernel]}
                compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
                ok, value = True, _resources(compiled.asm["cubin"]) or f"{len(compiled.asm['cubin'])} B cubin"
            except Exception as err:  # noqa: BLE001 (a row of the table)
                ok, value = False, f"{type(err).__name__}: {str(err).strip()[:300]}"
            rows.append({"check": f"sm_{arch} {dtype} E={e} {variant}: {fn.__name__}", "ok": ok, "value": value})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, nargs="+", default=[70, 75, 80, 90, 120], help="compute capabilities x 10")
    ap.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--head-dim", type=int, nargs="+", default=[64, 80])
    ap.add_argument("--nu-max", type=int, default=512, help="the largest nu (sets the draw tile)")
    args = ap.parse_args(argv)
    rows = compile_rows(args.arch, args.dtype, VARIANTS, args.head_dim, args.nu_max)
    width = max(len(r["check"]) for r in rows)
    for r in rows:
        print(f"{r['check']:<{width}}  {'ok' if r['ok'] else 'FAIL':<4}  {r['value']}", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
