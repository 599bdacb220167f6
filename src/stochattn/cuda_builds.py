"""Which torch build runs on which NVIDIA GPU and driver, and the install line for one that does.

A torch wheel carries its CUDA runtime (PyPI's Linux wheel: CUDA 13 for torch 2.13; PyTorch's own indexes: CUDA 12.6,
12.8, 13.0) and kernels for a list of GPU architectures. It runs on a node when (1) the node's NVIDIA driver is at
least the minimum of the runtime's CUDA major version (CUDA minor version compatibility: NVIDIA's CUDA Toolkit
release notes, table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility") and
(2) the build has machine code (``sm_XY``) for the GPU's compute capability, or PTX (``compute_XY``) of a lower one.
When either fails, ``torch.cuda.is_available()`` is False (old driver) or the first kernel fails ("no kernel image
is available"); a job that then trains on the CPU loses hours. :func:`node_problems` says which, and
:func:`install_command` the fix.

    torch_build()                         the installed torch: version, CUDA version, kernel architectures
    node_problems(build, gpu, driver)     why that build cannot run on a node (empty: it can)
    suggested_index(capability, driver)   the PyTorch wheel index whose build fits a node
    install_command(version, index)       the pip lines that replace the environment's torch by that build
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MIN_DRIVER", "TorchBuild", "torch_build", "gpu_arch_supported", "capability_of", "parse_version",
           "node_problems", "suggested_index", "install_command", "local_driver_version"]  # fmt: skip

# The oldest Linux driver each CUDA major version runs on (minor version compatibility; NVIDIA's release notes).
MIN_DRIVER: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

# PyTorch's wheel indexes. cu126 is the last with kernels for Volta (sm_70) and Pascal (sm_60) and needs a driver
# >= 525.60.13 only; cu128 adds Blackwell (sm_100, sm_120) on the same drivers; cu130 needs R580. NOTE: what each
# index serves for a given torch version is PyTorch's choice: `pip index versions torch --index-url URL` lists it.
INDEX = "https://download.pytorch.org/whl/{tag}"
CU126, CU128, CU130 = (INDEX.format(tag=t) for t in ("cu126", "cu128", "cu130"))

# Compute capability of the GPU models a SLURM Gres type or nvidia-smi name usually carries (lower case,
# first match wins: longer names first).
_CAPABILITY = (
    ("gh200", (9, 0)), ("h100", (9, 0)), ("h200", (9, 0)), ("h800", (9, 0)), ("gb200", (10, 0)), ("b200", (10, 0)),
    ("b100", (10, 0)), ("rtx pro 6000", (12, 0)), ("rtx 50", (12, 0)), ("l40", (8, 9)), ("l4", (8, 9)),
    ("rtx 40", (8, 9)), ("rtx 6000 ada", (8, 9)), ("a100", (8, 0)), ("a800", (8, 0)), ("a30", (8, 0)),
    ("a40", (8, 6)), ("a10", (8, 6)), ("a16", (8, 6)), ("a6000", (8, 6)), ("rtx 30", (8, 6)), ("t4", (7, 5)),
    ("rtx 20", (7, 5)), ("quadro rtx", (7, 5)), ("titan rtx", (7, 5)), ("v100", (7, 0)), ("titan v", (7, 0)),
    ("p100", (6, 0)), ("p40", (6, 1)), ("p4", (6, 1)), ("gtx 10", (6, 1)), ("k80", (3, 7)),
)  # fmt: skip


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: ``version`` (e.g. ``2.13.0+cu126``), ``cuda`` (``"13.0"``, None for a CPU-only build) and
    the architectures it has kernels for (``sm_90``, ``compute_120``; empty for a CPU-only build)."""

    version: str
    cuda: str | None
    arch_list: tuple[str, ...]

    @property
    def base_version(self) -> str:
        return self.version.split("+")[0]

    def describe(self) -> str:
        if self.cuda is None:
            return f"torch {self.version} (CPU-only build)"
        return f"torch {self.version} (CUDA {self.cuda}; kernels {', '.join(self.arch_list) or 'unknown'})"


def torch_build() -> TorchBuild:
    """The torch of this environment. Needs no GPU: the kernel list is the build's compile-time flag list
    (``torch.cuda.get_arch_list()`` returns it only where a device is visible, not on a login node)."""
    import torch

    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    arch = tuple(flags().split()) if torch.version.cuda and flags is not None else ()
    return TorchBuild(torch.__version__, torch.version.cuda, arch)


def gpu_arch_supported(capability: tuple[int, int], arch_list: Iterable[str]) -> bool:
    """Whether a build whose kernels are ``arch_list`` (``sm_XY`` machine code, ``compute_XY`` PTX) runs on a device of
    compute ``capability`` (major, minor): machine code of the same major version and a minor at most the device's,
    or PTX of a capability at most the device's (JIT-compiled)."""
    major, minor = capability
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        if not digits.isdigit() or len(digits) < 2:
            continue
        a_major, a_minor = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def capability_of(name: str) -> tuple[int, int] | None:
    """The compute capability of a GPU named by nvidia-smi (``NVIDIA H100 80GB HBM3``), a SLURM Gres type
    (``v100``, ``a100_80g``) or a capability string (``7.0``); None when unknown."""
    text = name.strip().lower().replace("_", " ").replace("-", " ")
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    if m:
        return int(m[1]), int(m[2])
    text = text.replace("nvidia ", "").replace("tesla ", "").replace("geforce ", "")
    for key, cap in _CAPABILITY:
        if re.search(rf"(^|\s){re.escape(key)}", text) or text.startswith(key.replace(" ", "")):
            return cap
    return None


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"535.104.05"`` -> ``(535, 104, 5)``; None when ``text`` holds no version."""
    m = re.search(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def _fmt(version: Iterable[int]) -> str:
    return ".".join(f"{p:02d}" if i == 2 else str(p) for i, p in enumerate(version))


def suggested_index(capability: tuple[int, int] | None, driver: tuple[int, ...] | None) -> str | None:
    """The PyTorch wheel index whose build runs on a GPU of ``capability`` under ``driver``; None when no current build
    does (a driver older than CUDA 12's minimum: the driver must be updated)."""
    if driver is not None and driver < MIN_DRIVER[12]:
        return None
    old_driver = driver is not None and driver < MIN_DRIVER[13]
    if capability is not None and capability < (7, 5):
        return CU126
    if capability is not None and capability >= (10, 0):
        return CU128 if old_driver else CU130
    return CU126 if old_driver else CU130


def install_command(version: str, index: str) -> str:
    """The pip lines that replace the environment's torch by the same version from ``index``: the wheel alone first
    (``--no-deps``: the locked versions of everything else stay), then the CUDA libraries it needs."""
    v = version.split("+")[0]
    return (f"pip install --force-reinstall --no-deps torch=={v} --index-url {index} && "
            f"pip install torch=={v} --index-url {index}")  # fmt: skip


def node_problems(build: TorchBuild, gpu: str | None, driver: str | None,
                  capability: tuple[int, int] | None = None) -> list[str]:  # fmt: skip
    """Why ``build`` cannot use a node whose GPU is ``gpu`` (a name; ``capability`` overrides what its name implies)
    with NVIDIA ``driver`` (a version string; None: unknown), each with the fix; empty when it can (or when nothing
    is known to check)."""
    cap = capability or (capability_of(gpu) if gpu else None)
    drv = parse_version(driver) if driver else None
    where = f"{gpu or 'GPU'}" + (f" (compute capability {cap[0]}.{cap[1]})" if cap else "")
    problems = []
    if build.cuda is None:
        problems.append(f"{build.describe()} cannot use the {where}")
    else:
        major = int(build.cuda.split(".")[0])
        need = MIN_DRIVER.get(major)
        if drv is not None and need is not None and drv < need:
            problems.append(f"{build.describe()} needs an NVIDIA driver >= {_fmt(need)} (CUDA {major}); the node's "
                            f"driver is {driver}")  # fmt: skip
        if cap is not None and build.arch_list and not gpu_arch_supported(cap, build.arch_list):
            problems.append(f"{build.describe()} has no kernels for the {where}")
    if not problems:
        return []
    index = suggested_index(cap, drv)
    if index is None:
        fix = (f"no current torch build runs on driver {driver}: ask the administrators for a driver >= "
               f"{_fmt(MIN_DRIVER[12])} (CUDA 12 builds) or >= {_fmt(MIN_DRIVER[13])} (CUDA 13)")  # fmt: skip
    else:
        fix = f"install the build that fits, in the workflow's environment: {install_command(build.version, index)}"
    return [f"{p}; {fix}" for p in problems]


def local_driver_version() -> str | None:
    """The NVIDIA driver of this machine (``nvidia-smi``), or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.stdout.strip().splitlines()[:1]
    return first[0].strip() if out.returncode == 0 and first else None
