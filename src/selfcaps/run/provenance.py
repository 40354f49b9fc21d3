"""What produced a run: the git commit of the selfcaps checkout and the CPU that ran it.

The CPU belongs with the commit: a command repeats its numbers on one machine, but a CPU
with other vector instructions runs other kernels (oneDNN's convolutions and MKL's matrix
products are chosen per instruction set), whose float32 sums round differently, and a
training run then follows another path (measured in docs/results.md, "Rerunning a number").
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

__all__ = ["NOT_A_CHECKOUT", "VECTOR_FEATURES", "cpu_features", "cpu_name", "git_commit", "machine"]

#: What :func:`git_commit` returns for an installed package (or without git).
NOT_A_CHECKOUT = "not a git checkout"


def _git(package: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=30
    )


def git_commit(package: Path | None = None) -> str:
    """The commit of the git checkout ``selfcaps`` is imported from.

    Args:
        package: The ``selfcaps`` package directory (default: this one).

    Returns:
        The short commit hash, with ``+dirty`` when tracked files have uncommitted
        changes, or :data:`NOT_A_CHECKOUT` when the package is not a file tracked by a
        git repository (an installed wheel, a copy, a virtualenv inside some other
        repository) or git is not available.
    """
    package = package or Path(__file__).resolve().parents[1]
    try:
        if _git(package, "ls-files", "--error-unmatch", "__init__.py").returncode != 0:
            return NOT_A_CHECKOUT
        head = _git(package, "rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return NOT_A_CHECKOUT
        dirty = _git(package, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return NOT_A_CHECKOUT
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _cpuinfo_value(cpuinfo: Path, field: str) -> str:
    """The first non-empty value of ``field`` in a ``/proc/cpuinfo`` file, spaces collapsed.

    Returns ``""`` where the file or the field is absent.
    """
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == field and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return ""


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name: ``/proc/cpuinfo``'s first ``model name`` on Linux.

    Args:
        cpuinfo: The file to read (a parameter for tests).

    Returns:
        For example ``"AMD EPYC 9R14"``; where the file is absent or has no such line
        (macOS, Windows, some ARM kernels), ``platform.processor()``, else
        ``platform.machine()`` (``"x86_64"``), else ``"unknown"``.
    """
    name = _cpuinfo_value(cpuinfo, "model name")
    return name or platform.processor() or platform.machine() or "unknown"


#: The CPU flags that decide which float32 and bfloat16 kernels PyTorch, oneDNN and MKL run.
VECTOR_FEATURES = (
    "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
)  # fmt: skip


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The vector instructions of :data:`VECTOR_FEATURES` the CPU has, space-separated.

    A model name alone may not tell them (a virtual machine can show ``Intel(R) Xeon(R)
    Processor``), and they choose the kernels: oneDNN runs AMX kernels where ``amx_tile``
    is present and AVX-512 ones elsewhere.

    Args:
        cpuinfo: The file to read (a parameter for tests).

    Returns:
        For example ``"avx2 avx512f avx512_bf16"``, in :data:`VECTOR_FEATURES` order;
        ``""`` where ``/proc/cpuinfo`` has no ``flags`` line (not Linux on x86).
    """
    flags = set(_cpuinfo_value(cpuinfo, "flags").split())
    return " ".join(f for f in VECTOR_FEATURES if f in flags)


def machine() -> dict[str, str | int | None]:
    """The machine a run ran on, as ``metrics.json`` records it.

    Returns:
        ``cpu`` (:func:`cpu_name`), ``cpu_features`` (:func:`cpu_features`),
        ``cpu_capability`` (the vector instruction set PyTorch's own CPU kernels use,
        e.g. ``AVX512`` or ``AVX2``; ``ATEN_CPU_CAPABILITY`` lowers it), ``cpu_count``
        (logical CPUs) and ``platform`` (operating system and architecture). Imports
        torch.
    """
    import torch

    return {
        "cpu": cpu_name(),
        "cpu_features": cpu_features(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
    }
