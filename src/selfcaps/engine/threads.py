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
command chooses how OpenMP threads wait at a barrier before torch is imported
(:func:`set_openmp_wait`), from the cores other work uses when it starts (CPU use over 0.1 s
of the CPUs the process may run on, from ``/proc/stat``: the load average lags by a minute,
so a run started right after another would count it, and counts other jobs' cores). The
wait policy changes no number a run computes, only its speed, so reading the machine here is
safe:

* cores busy (at least one, rounded): ``OMP_WAIT_POLICY=PASSIVE``. A waiting thread sleeps
  instead of spinning on a core that another job needs while the thread it waits for cannot
  run. With OpenMP's default (libgomp: 300,000 spins before sleeping), two threads on busy
  cores took several times the CPU and wall time of one thread per CoCa step; passive about
  the same as one thread.
* cores free: ``GOMP_SPINCOUNT=3000``, a bounded spin. On free cores a
  thread that sleeps at every barrier must be woken for every parallel operator (two passive
  threads were 1.2x to 1.9x slower per step than two spinning ones in two measurements,
  docs/benchmarks.md); 3,000 spins were as fast
  as the default's 300,000 there, and if other work starts later they cost little (about one
  thread's wall time per step on busy cores).

``benchmarks/threads_contention.py`` measures all of these (docs/benchmarks.md).

Nothing here imports torch at module level: :func:`set_openmp_wait` must run before it.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["apply_threads", "auto_threads", "choose_threads", "set_openmp_wait", "wait_policy"]

#: Variables by which a user already chose how OpenMP threads wait.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
#: libgomp spins before a waiting thread sleeps, on free cores (its default is 300,000).
FREE_CORES_SPINCOUNT = 3000


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
    return max(1, (cores - busy_cores(load)) // processes)


def busy_cores(load: float) -> int:
    """Cores other work uses: the load average rounded, halves up (NaN: unknown, 0).

    Examples:
        >>> busy_cores(0.49), busy_cores(0.5), busy_cores(float("nan"))
        (0, 1, 0)
    """
    return 0 if math.isnan(load) else math.floor(max(0.0, load) + 0.5)


def _load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


def _affinity() -> set[int] | None:
    """The CPUs this process may run on (a scheduler's allocation, ``taskset``), if known."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


def _allowed_cpus() -> int:
    cpus = _affinity()
    return len(cpus) if cpus else (os.cpu_count() or 1)


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


def _cpu_times(
    path: str = "/proc/stat", cpus: set[int] | None = None
) -> tuple[float, float] | None:
    """``(busy, total)`` jiffies since boot of ``cpus`` (default: all), summed (Linux).

    Read from the per-CPU lines ``cpuN`` of ``path``; ``None`` if it cannot be read or names
    none of ``cpus``. Busy is everything but idle and iowait.
    """
    busy = total = 0.0
    seen = False
    try:
        with open(path) as f:
            for line in f:
                name, *values = line.split()
                if not name.startswith("cpu") or name == "cpu":
                    continue
                if not name[3:].isdigit():
                    break
                if cpus is not None and int(name[3:]) not in cpus:
                    continue
                fields = [float(v) for v in values[:8]]  # user .. steal
                if len(fields) < 5:
                    return None
                busy += sum(fields) - fields[3] - fields[4]
                total += sum(fields)
                seen = True
    except (OSError, ValueError):
        return None
    return (busy, total) if seen else None


def cores_busy_now(interval: float = 0.1) -> float:
    """Cores of this process's CPUs that other work keeps busy now, over ``interval`` seconds.

    Read from ``/proc/stat`` twice (Linux), counting only the CPUs this process may run on
    (its affinity: a batch scheduler's allocation, ``taskset``), so that other jobs on other
    cores do not count; the process sleeps in between, so its own use does not count either.
    Elsewhere the one-minute load average, which lags by about a minute (NaN if neither is
    available).
    """
    cpus = _affinity()
    first = _cpu_times(cpus=cpus)
    if first is None:
        return _load_average()
    time.sleep(interval)
    second = _cpu_times(cpus=cpus)
    if second is None or second[1] <= first[1]:
        return _load_average()
    return _allowed_cpus() * (second[0] - first[0]) / (second[1] - first[1])


def set_openmp_wait(
    environ: MutableMapping[str, str] = os.environ,
    modules: Mapping[str, Any] = sys.modules,
    busy: float | None = None,
) -> dict[str, str]:
    """Choose how OpenMP threads wait, from the cores in use, unless the user chose already.

    Args:
        environ: The environment to set the variable in.
        modules: The loaded modules (OpenMP reads the variable when torch loads it, so setting
            it after ``import torch`` would change nothing and is not done).
        busy: Cores other work uses (default: :func:`cores_busy_now`; NaN: unknown, taken
            as 0).

    Returns:
        The variables set: ``{"OMP_WAIT_POLICY": "PASSIVE"}`` when at least one core is busy
        (``round(busy) >= 1``), ``{"GOMP_SPINCOUNT": "3000"}`` when none is, ``{}`` when the
        user set a wait variable or torch is already loaded.

    Examples:
        >>> set_openmp_wait({}, {}, busy=0.2), set_openmp_wait({}, {}, busy=1.1)
        ({'GOMP_SPINCOUNT': '3000'}, {'OMP_WAIT_POLICY': 'PASSIVE'})
    """
    if "torch" in modules or any(v in environ for v in WAIT_VARIABLES):
        return {}
    if busy_cores(cores_busy_now() if busy is None else busy):
        chosen = {"OMP_WAIT_POLICY": "PASSIVE"}
    else:
        chosen = {"GOMP_SPINCOUNT": str(FREE_CORES_SPINCOUNT)}
    environ.update(chosen)
    return chosen


def wait_policy(environ: Mapping[str, str] = os.environ) -> str:
    """How OpenMP threads wait, in words, from the variables in ``environ``.

    Examples:
        >>> wait_policy({}), wait_policy({"GOMP_SPINCOUNT": "3000"})
        ('default', 'spin 3000 then sleep')
        >>> wait_policy({"OMP_WAIT_POLICY": "passive"})
        'passive'
    """
    policy = environ.get("OMP_WAIT_POLICY", "").lower()
    spins = environ.get("GOMP_SPINCOUNT")
    if spins and policy != "passive":
        return f"spin {spins} then sleep"
    return policy or "default"


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
    print(f"threads: {n} ({why}; OpenMP wait policy {wait_policy()})", file=sys.stderr, flush=True)
    return n
