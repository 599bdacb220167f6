"""Compile the fused SA kernels (stochattn.triton_sa_kernels) for CUDA targets ahead of time: no GPU needed.

    python benchmarks/triton_compile_check.py [--arch 70 75 80 90 120] [--head-dim 64 80] [--dtype fp32 bf16 fp16]
    python benchmarks/triton_compile_check.py --configs --arch 90 --dtype bf16 --head-dim 80   # the autotuner's

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

import torch

DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
VARIANTS = (
    ("none", 0, False),
    ("bool", 1, False),
    ("additive", 2, False),
    ("causal", 0, True),
    ("none, one pass", 0, False),
    ("causal, one pass", 0, True),
)


def _signature(fn, dtype: str, mask_kind: int, constexprs: dict, seed_in_memory: bool = False) -> dict:
    """Triton's argument types of ``fn`` for tensors of ``dtype``: pointers, fp32 scalars, i64 seed / offset (the
    seed a pointer to an int64 with ``seed_in_memory``: a device stream's), i32 sizes and strides, constexpr for the
    meta-parameters."""
    pointers = {"Q": dtype, "K": dtype, "V": dtype, "Out": dtype, "Mask": "i8" if mask_kind == 1 else "fp32",
                "M_out": "fp32", "Z_out": "fp32", "M_in": "fp32", "Z_in": "fp32", "Lse_out": "fp32", "Lse_in": "fp32",
                "Nu": "i32"}  # fmt: skip
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = "*" + pointers[name]
        elif name == "scale":
            sig[name] = "fp32"
        elif name == "seed" and seed_in_memory:
            sig[name] = "*i64"
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


_BLOCKED = re.compile(r"^(#\w+) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\]", re.M)
_SCAN = re.compile(r'"tt\.scan"\(.*?\}\) : \(tensor<([\dx]+)x\w+, (#\w+)>', re.S)


def replicated_scans(ttgir: str) -> list[str]:
    """The scans (``tl.cumsum``, ``tl.associative_scan``) of a TTGIR module whose tensor is shorter, in some
    dimension, than the elements one thread holds along it (its blocked layout's sizePerThread): Triton's scan
    lowering miscounts such a thread's values (3.6 built with assertions stops at ``ScanOpToLLVM.cpp``:
    ``numScanBlocks * ... == srcValues.size()``). Each as 'SHAPE in sizePerThread [..]'."""
    threads = {name: [int(x) for x in spt.split(",")] for name, spt in _BLOCKED.findall(ttgir)}
    found = []
    for shape, layout in _SCAN.findall(ttgir):
        dims, spt = [int(x) for x in shape.split("x")], threads.get(layout)
        if spt is not None and any(d < t for d, t in zip(dims, spt)):
            found.append(f"{shape} in sizePerThread {spt}")
    return found


def compile_rows(archs=(90,), dtypes=("fp32", "bf16"), variants=VARIANTS, head_dims=(64,), nu_max=512,
                 seed_in_memory=False, **tile_overrides) -> list[dict]:  # fmt: skip
    """One row per (arch, dtype, head dim, variant, kernel): {"check", "ok", "value"} (gpu_check.py's row format),
    at the tile sizes the entry point chooses on a GPU for ``nu_max`` (``tile_overrides``: e.g. num_warps=8);
    ``seed_in_memory``: the drawing kernels read their seed from a device stream, and the stream's advance kernel
    gets a row per arch."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("TRITON_INTERPRET=1 replaces the kernels by the interpreter: unset it")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from stochattn import triton_sa_kernels as kernels
    from stochattn.triton_sa import (
        GROUPS_MAX_NU,
        LEGACY_TILES,
        MIN_NU_BLOCK,
        RACE_MAX_NU,
        _next_power_of_2,
        draw_tile,
        scores_precision,
    )

    tiles = {**LEGACY_TILES, **tile_overrides}
    tiles["NU_BLOCK"] = draw_tile(tiles["NU_BLOCK"], nu_max)
    rows = []
    for arch, dtype, e, (variant, mask_kind, causal) in itertools.product(archs, dtypes, head_dims, variants):
        block_e = max(16, _next_power_of_2(e))
        one_pass = variant.endswith("one pass")
        meta = {"MASK_KIND": mask_kind, "IS_CAUSAL": causal, "BLOCK_M": tiles["BLOCK_M"],
                "BLOCK_N": 64 if one_pass else tiles["BLOCK_N"], "BLOCK_E": block_e,
                "PRECISION": scores_precision(TORCH_DTYPES[dtype], divmod(arch, 10)), "UPCAST": False}  # fmt: skip
        sample = {"BLOCK_EV": block_e, "NU_BLOCK": tiles["NU_BLOCK"], "WEIGHTS_IN_V_DTYPE": dtype != "fp32",
                  "ONE_PASS": one_pass, "SEARCH": tiles["search"]}  # fmt: skip
        kernels_here = [(kernels._sample_kernel, {**meta, **sample}, "sample")]
        if not one_pass:
            kernels_here.insert(0, (kernels._stats_kernel, meta, "stats"))
            race = {"BLOCK_EV": block_e, "NU_BLOCK": _next_power_of_2(min(nu_max, RACE_MAX_NU))}
            kernels_here.append((kernels._race_kernel, {**{k: v for k, v in meta.items()}, **race}, "sample"))
            if nu_max <= GROUPS_MAX_NU:  # the groups sampler's two passes, at its group and chunk tiles
                group, chunk = tiles.get("group", 32), tiles.get("chunk", 32)
                mass = {**meta, "BLOCK_N": min(meta["BLOCK_N"], group), "GROUP": group}
                draw = {"MASK_KIND": mask_kind, "IS_CAUSAL": causal, "BLOCK_M": tiles.get("rows", 4), "GROUP": group,
                        "CHUNK": chunk, "BLOCK_G": tiles.get("groups", 32),
                        "NU_BLOCK": max(MIN_NU_BLOCK, _next_power_of_2(nu_max + 1))}  # fmt: skip
                kernels_here += [(kernels._group_mass_kernel, mass, "stats"), (kernels._groups_kernel, draw, "sample")]
        for fn, constexprs, kernel in kernels_here:
            src = ASTSource(fn, _signature(fn, DTYPES[dtype], mask_kind, constexprs, seed_in_memory),
                            constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})  # fmt: skip
            try:
                options = {"num_warps": tiles[f"{kernel}_warps"]}
                compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
                ok, value = True, _resources(compiled.asm["cubin"]) or f"{len(compiled.asm['cubin'])} B cubin"
                broken = replicated_scans(compiled.asm["ttgir"])
                if broken:
                    ok, value = False, f"scan over an axis shorter than a thread's elements: {'; '.join(broken)}"
            except Exception as err:  # noqa: BLE001 (a row of the table)
                ok, value = False, f"{type(err).__name__}: {str(err).strip()[:3000]}"
            rows.append({"check": f"sm_{arch} {dtype} E={e} {variant}: {fn.__name__}", "ok": ok, "value": value})
    for arch in archs if seed_in_memory else ():
        try:
            src = ASTSource(kernels._advance_stream_kernel, {"Stream": "*i64"}, constexprs={})
            compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 1})
            ok, value = True, _resources(compiled.asm["cubin"]) or f"{len(compiled.asm['cubin'])} B cubin"
        except Exception as err:  # noqa: BLE001 (a row of the table)
            ok, value = False, f"{type(err).__name__}: {str(err).strip()[:3000]}"
        rows.append({"check": f"sm_{arch}: _advance_stream_kernel", "ok": ok, "value": value})
    return rows


def config_rows(arch: int = 90, dtype: str = "bf16", head_dim: int = 80, nu_max: int = 512) -> list[dict]:
    """One row per configuration the autotuner may choose (stochattn.triton_sa's STATS_CONFIGS, SAMPLE_CONFIGS,
    ONE_PASS_CONFIGS and, for nu_max <= RACE_MAX_NU, the RACE_CONFIGS its pruning keeps; no mask), with its registers
    and spills: what the autotuner times on a GPU."""
    from stochattn.triton_sa import (
        GROUP_MASS_CONFIGS,
        GROUPS_CONFIGS,
        GROUPS_MAX_NU,
        ONE_PASS_CONFIGS,
        RACE_CONFIGS,
        RACE_MAX_NU,
        SAMPLE_CONFIGS,
        STATS_CONFIGS,
        _next_power_of_2,
        draw_tile,
    )

    def kernel_row(rows: list[dict], name: str) -> dict:
        return next(r for r in rows if r["check"].endswith(name))

    def label(kernel, m, n, nb, w, se):
        place = "" if se is None else (", search" if se else ", compare tile")
        size = f"{m} x {n}" if n else f"{m} rows, one pass"
        return (
            f"sm_{arch} {dtype} E={head_dim} {kernel} {size}"
            + ("" if nb is None else f", {nb} draws")
            + f", {w} warps{place}"
        )

    rows = []
    for m, n, w, _stages in STATS_CONFIGS:
        row = compile_rows((arch,), (dtype,), VARIANTS[:1], (head_dim,), nu_max, BLOCK_M=m, BLOCK_N=n,
                           stats_warps=w)[0]  # fmt: skip
        rows.append({**row, "check": label("pass 1", m, n, None, w, None)})
    for configs, variant in ((SAMPLE_CONFIGS, VARIANTS[0]), (ONE_PASS_CONFIGS, VARIANTS[4])):
        for m, n, nb, w, se in configs:
            tiles = {"BLOCK_M": m, "NU_BLOCK": draw_tile(nb, nu_max), "sample_warps": w, "search": se}
            row = kernel_row(compile_rows((arch,), (dtype,), (variant,), (head_dim,), nu_max, **tiles,
                                          **({"BLOCK_N": n} if n else {})), "_sample_kernel")  # fmt: skip
            rows.append({**row, "check": label("pass 2", m, n, draw_tile(nb, nu_max), w, se)})
    draws = _next_power_of_2(nu_max)
    for m, n, w in RACE_CONFIGS if nu_max <= RACE_MAX_NU else ():
        if m * draws * n <= 32 * 32 * w:  # the autotuner's pruning (triton_sa._tuned)
            row = kernel_row(compile_rows((arch,), (dtype,), VARIANTS[:1], (head_dim,), nu_max, BLOCK_M=m, BLOCK_N=n,
                                          sample_warps=w), "_race_kernel")  # fmt: skip
            rows.append({**row, "check": label("race", m, n, draws, w, None)})
    for m, n, w, _stages in GROUP_MASS_CONFIGS if nu_max <= GROUPS_MAX_NU else ():
        row = kernel_row(compile_rows((arch,), (dtype,), VARIANTS[:1], (head_dim,), nu_max, BLOCK_M=m, BLOCK_N=n,
                                      stats_warps=w, group=max(n, 32)), "_group_mass_kernel")  # fmt: skip
        rows.append({**row, "check": label("groups pass 1", m, n, None, w, None)})
    for group, groups in ((32, 32), (128, 128)) if nu_max <= GROUPS_MAX_NU else ():  # 1k and 16k keys
        for m, n, w in GROUPS_CONFIGS:
            if n <= group:  # the autotuner's pruning (triton_sa._tuned)
                tiles = {"rows": m, "chunk": n, "group": group, "groups": groups, "sample_warps": w}
                row = kernel_row(compile_rows((arch,), (dtype,), VARIANTS[:1], (head_dim,), nu_max, **tiles),
                                 "_groups_kernel")  # fmt: skip
                rows.append({**row, "check": label(f"groups pass 2, group {group}", m, n, None, w, None)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, nargs="+", default=[70, 75, 80, 90, 120], help="compute capabilities x 10")
    ap.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--head-dim", type=int, nargs="+", default=[64, 80])
    ap.add_argument(
        "--nu-max",
        type=int,
        nargs="+",
        default=[512],
        help="the largest nu (sets the draw tile); several: each in turn",
    )
    ap.add_argument("--configs", action="store_true", help="every autotuner configuration (first arch, dtype, head "
                    "dim) instead of every variant at the first version's fixed tiles")  # fmt: skip
    ap.add_argument("--seed-in-memory", action="store_true", help="the seed read from a device stream (CUDA "
                    "graphs), and the stream's advance kernel")  # fmt: skip
    args = ap.parse_args(argv)
    ok = True
    for nu_max in args.nu_max:
        if args.configs:
            rows = config_rows(args.arch[0], args.dtype[0], args.head_dim[0], nu_max)
        else:
            rows = compile_rows(args.arch, args.dtype, VARIANTS, args.head_dim, nu_max, args.seed_in_memory)
        print(f"nu_max {nu_max}:")
        width = max(len(r["check"]) for r in rows)
        for r in rows:
            print(f"{r['check']:<{width}}  {'ok' if r['ok'] else 'FAIL':<4}  {r['value']}", flush=True)
        ok &= all(r["ok"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
