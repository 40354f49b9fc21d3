"""How many threads a run uses, and OpenMP threads that sleep instead of spinning.

With ``trainer.threads: null`` (the default) a run uses every core it may run on,
``cores // processes``, where ``cores`` is the smaller of torch's default thread count (the
physical cores) and the CPUs this process may run on, and ``processes`` the training
processes this machine starts (``trainer.devices`` on the CPU, else 1). The machine's load
is not consulted: some sums depend on the thread count, and the same command must give the
same numbers on a busy machine as on an idle one. ``trainer.threads: auto`` opts in to
leaving the cores other work uses when the run starts::

    threads = max(1, (cores - round(load)) // processes)

with ``load`` the one-minute load average (which lags by about a minute); its numbers then
depend on the load. ``--threads N`` (``trainer.threads``) or ``OMP_NUM_THREADS`` choose the
count instead.

Unless the user set ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME``, the
command sets ``OMP_WAIT_POLICY=PASSIVE`` before torch is imported (:func:`passive_openmp`):
an OpenMP thread waiting at a barrier then sleeps instead of spinning on a core that
another job needs, while the thread it waits for cannot run. With OpenMP's default
(spinning) policy, two threads on two busy cores took several times the CPU and wall time
of one thread per CoCa step; with the passive policy about the same
(``benchmarks/threads_contention.py``, docs/benchmarks.md).

Nothing here imports torch at module level: :func:`passive_openmp` must run before it.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["apply_threads", "auto_threads", "choose_threads", "passive_openmp"]

#: Variables by which a user already chose how OpenMP threads wait.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def choose_threads(cores: int, load: float, processes: int = 1) -> int:
    """Threads per process that leave the cores other work uses to it.

    Args:
        cores: Cores this process may use.
        load: The machine's one-minute load average when the run starts (NaN: unknown,
            taken as 0).
        processes: Training processes this machine runs, sharing the free cores.

    Returns:
        ``max(1, (cores - round(load)) // processes)``, rounding halves up.

    Examples:
        >>> choose_threads(2, 0.1), choose_threads(2, 1.2), choose_threads(8, 2.5, 2)
        (2, 1, 2)
    """
    if cores < 1 or processes < 1:
        raise ValueError(f"cores and processes must be >= 1, got {cores} and {processes}")
    busy = 0 if math.isnan(load) else math.floor(max(0.0, load) + 0.5)
    return max(1, (cores - busy) // processes)


def _load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


def _allowed_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@functools.cache
def _torch_default_threads() -> int:
    """Torch's own thread count (its physical cores), read once: before anything changes it."""
    import torch

    return torch.get_num_threads()


def auto_threads(processes: int = 1, use_load: bool = True) -> tuple[int, str]:
    """The thread count of ``trainer.threads: null`` now, and why (imports torch).

    Args:
        processes: Training processes on this machine.
        use_load: Leave the cores the load average says are busy (``False``: every core,
            so that a rerun has the same count, and the same bits, whatever the load).
    """
    cores = max(1, min(_torch_default_threads(), _allowed_cpus()))
    per = f" for each of {processes} processes" if processes > 1 else ""
    if not use_load:
        n = choose_threads(cores, 0.0, processes)
        return n, f"every core{per}: {cores} cores whatever the load; --threads N to choose"
    load = _load_average()
    n = choose_threads(cores, load, processes)
    return n, (
        f"automatic{per}: {cores} cores, one-minute load average {load:.1f}; --threads N to choose"
    )


def passive_openmp(
    environ: MutableMapping[str, str] = os.environ, modules: Mapping[str, Any] = sys.modules
) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a wait policy or torch is loaded.

    Returns:
        Whether it was set. OpenMP reads the variable when torch loads it, so setting it
        after ``import torch`` would change nothing and is not done.
    """
    if "torch" in modules or any(v in environ for v in WAIT_VARIABLES):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def apply_threads(trainer: Mapping[str, Any]) -> int:
    """Set torch's thread count for a run's ``trainer`` section; print it; return it.

    A number in ``trainer["threads"]`` if set, else ``OMP_NUM_THREADS``'s (torch reads it),
    else :func:`auto_threads` with ``trainer["devices"]`` processes on the CPU: every core
    whatever the load for ``null``, the cores the load leaves free for ``"auto"``.
    """
    import torch

    setting = trainer.get("threads")
    if setting not in (None, "auto"):
        n, why = int(setting), "trainer.threads"
    elif setting is None and os.environ.get("OMP_NUM_THREADS"):
        n, why = torch.get_num_threads(), "OMP_NUM_THREADS"
    else:
        cpu = trainer.get("accelerator", "cpu") == "cpu"
        processes = int(trainer.get("devices", 1)) if cpu else 1
        n, why = auto_threads(processes, use_load=setting == "auto")
    torch.set_num_threads(n)
    policy = os.environ.get("OMP_WAIT_POLICY", "default").lower()
    print(f"threads: {n} ({why}; OpenMP wait policy {policy})", file=sys.stderr, flush=True)
    return n
