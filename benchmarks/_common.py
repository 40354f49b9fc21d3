"""Shared helpers of the benchmark scripts: timing, GEMM peak, memory."""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable

import torch


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_ratio(
    slow: Callable[[], object], fast: Callable[[], object], rounds: int = 5
) -> tuple[float, float, float]:
    """Time two callables alternately (so machine noise hits both) and return
    (median slow seconds, median fast seconds, median of per-round ratios)."""
    slow(), fast()
    ts, tf, ratios = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        slow()
        t1 = time.perf_counter()
        fast()
        t2 = time.perf_counter()
        ts.append(t1 - t0)
        tf.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    return statistics.median(ts), statistics.median(tf), statistics.median(ratios)


def load_average() -> float:
    """The machine's one-minute load average (NaN where the OS has none): these CPUs are shared."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def gemm_peak_flops(
    n: int = 2048,
    repeats: int = 5,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """This machine's GEMM throughput in FLOP/s for ``dtype`` on ``device``, measured now.

    The best of ``repeats`` products of two ``n x n`` matrices (CUDA: synchronised), timed
    by ``clock`` (``time.process_time``: CPU seconds, what one thread gets on an idle core).
    """
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = clock()
        a @ b
        sync()
        best = min(best, clock() - t0)
    return 2.0 * n**3 / best


def seconds_at_peaks(flops: float, conv_flops: float, conv_peak: float, peak: float) -> float:
    """Seconds ``flops`` take at the peaks: the ``conv_flops`` among them (convolutions) at
    ``conv_peak``, the rest (matrix products) at ``peak`` (FLOP/s, or any unit per second)."""
    return conv_flops / conv_peak + (flops - conv_flops) / peak


def _read_status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_increase(fn: Callable[[], object]) -> int | None:
    """Bytes by which the process's peak resident memory rises while ``fn()`` runs (Linux).

    Resets the kernel's high-water mark (``/proc/self/clear_refs``), so it
    measures this call only. Returns None where that is not available.
    """
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    base = _read_status("VmRSS")
    out = fn()
    peak = _read_status("VmHWM")
    del out
    if base is None or peak is None:
        return None
    return max(0, peak - base)


def saved_for_backward_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the distinct tensors autograd saves for backward while ``fn()`` runs."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(seen.values())
