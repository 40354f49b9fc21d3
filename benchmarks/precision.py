"""float32 against bfloat16 autocast, per method: step time and share of each precision's peak.

For each method, its ``quick`` preset's network and training step (the method's own
``training_step`` through a bare Lightning ``Trainer``, as ``selfcaps run`` trains it: see
``_method_steps.py``) runs at ``--precision 32-true``, ``bf16-mixed`` and ``bf16-mixed`` with
``trainer.routing_precision=autocast`` (``bf16r``: the dynamic routing in bfloat16 too;
the same as ``bf16`` for methods without it) alternately, round
by round in one process, so that machine noise hits both; the ratio printed is the median of
the per-round ratios of the median step times. Steps are timed in CPU seconds of this
process by default (``--clock cpu``: with one thread, the time the step takes on an idle
core, which a shared machine's clock cannot show), ``--clock wall`` for wall seconds.
Each precision's throughput (matrix-product and convolution FLOPs of one float32 step,
counted by ``torch.utils.flop_counter``, per second) is given as a share of the
matrix-product peak *of that precision*, measured in the same run and with the same clock
(square GEMMs of the ``--gemm-sizes`` in float32 and in bfloat16; the best of each).

For one bfloat16 step of each method it also prints the share of the matrix-product and
convolution FLOPs that autocast actually ran in bfloat16, and the operators that took most
of the step's CPU time (``torch.profiler``, self CPU time) with the dtypes each ran in:
where bfloat16 falls back to float32 or is slow.

    python benchmarks/precision.py [--methods coca mcae ...] [--batch 16] [--threads 1]
        [--steps 3] [--rounds 2] [--data-root DIR] [--top 6] [--clock cpu|wall]

``--batch`` overrides every preset's batch size (default: the preset's). The first step of
every fit is a warm-up and is not timed. CPU flags matter: without ``avx512_bf16`` / AMX a
bfloat16 GEMM runs through slow conversion paths, so the peak line prints the CPU capability.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter, defaultdict
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from _common import gemm_peak_flops, load_average, set_threads
from _method_steps import METHODS, build_method, default_data_root, fit_steps, quiet_lightning
from selfcaps.caps.layers import route_in_autocast_dtype

#: name: (Lightning precision, GEMM dtype, dynamic routing in autocast's dtype)
PRECISIONS = {
    "fp32": ("32-true", torch.float32, False),
    "bf16": ("bf16-mixed", torch.bfloat16, False),
    "bf16r": ("bf16-mixed", torch.bfloat16, True),
}
#: Kernels the profiler names below the operator the dispatcher (and so the tally) sees.
KERNEL_OF = {
    "aten::_slow_conv2d_forward": "aten::convolution",
    "aten::_slow_conv2d_backward": "aten::convolution_backward",
    "aten::mkldnn_convolution": "aten::convolution",
    "aten::_convolution": "aten::convolution",
    "aten::addmm": "aten::addmm",
}


class DtypeTally(TorchDispatchMode):
    """Counts, per dtype, the matrix-product/convolution FLOPs and the calls of every operator.

    The dtype of a call is that of its first floating-point tensor argument: what autocast
    handed the kernel.
    """

    def __init__(self) -> None:
        super().__init__()
        self.flops: Counter[torch.dtype] = Counter()
        self.calls: dict[str, Counter[torch.dtype]] = defaultdict(Counter)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        dtype = next((t.dtype for t in tensors if t.is_floating_point()), None)
        if dtype is not None:
            packet = func._overloadpacket
            if packet in flop_registry:
                self.flops[dtype] += int(flop_registry[packet](*args, **kwargs, out_val=out))
            self.calls["aten::" + packet.__name__][dtype] += 1
        return out


class ProfileOneStep(Callback):
    """Runs ``torch.profiler`` over the training step of batch ``at`` (not data loading)."""

    def __init__(self, at: int = 1) -> None:
        self.at = at
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
        if idx == self.at:
            self.prof.start()

    def on_train_batch_end(self, trainer: Any, module: Any, out: Any, batch: Any, idx: int) -> None:
        if idx == self.at:
            self.prof.stop()

    def top(self, n: int) -> tuple[list[tuple[str, float, int]], float]:
        """The ``n`` operators with the most self CPU time: (name, ms, calls), and the total ms."""
        events = [e for e in self.prof.key_averages() if e.key.startswith("aten::")]
        total = sum(e.self_cpu_time_total for e in self.prof.key_averages()) / 1e3
        events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
        return [(e.key, e.self_cpu_time_total / 1e3, e.count) for e in events[:n]], total


def _dtype_names(counter: Counter[torch.dtype]) -> str:
    short = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float64: "fp64"}
    return "+".join(short.get(d, str(d).removeprefix("torch.")) for d, _ in counter.most_common())


def measure_method(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved fp32/bf16 step times, FLOPs, the bf16 FLOP share and the top operators."""
    overrides: list[tuple[str, Any]] = [("trainer.threads", args.threads)]
    if args.batch:
        overrides.append(("data.batch_size", args.batch))
    method, dm = build_method(name, args.preset, overrides, args.data_root)
    with FlopCounterMode(display=False) as fc:
        fit_steps(method, dm, 1, "32-true")
    flops = fc.get_total_flops()
    times: dict[str, list[float]] = {k: [] for k in PRECISIONS}
    cpu: dict[str, list[float]] = {k: [] for k in PRECISIONS}
    loop: dict[str, list[float]] = {k: [] for k in PRECISIONS}
    ratios: dict[str, list[float]] = {k: [] for k in PRECISIONS if k != "fp32"}
    for _ in range(args.rounds):
        for key, (precision, _, low_routing) in PRECISIONS.items():
            with route_in_autocast_dtype(low_routing):
                timer = fit_steps(method, dm, args.steps, precision)
            times[key].append(timer.median(f"step_{args.clock}"))
            cpu[key].append(timer.median("step_cpu"))
            loop[key].append(timer.median(f"loop_{args.clock}"))
        for key in ratios:
            ratios[key].append(times[key][-1] / times["fp32"][-1])
    tally = DtypeTally()
    with tally:
        fit_steps(method, dm, 1, "bf16-mixed")
    prof = ProfileOneStep(at=1)
    fit_steps(method, dm, 2, "bf16-mixed", callbacks=[prof])
    top, total_ms = prof.top(args.top)
    return {
        "name": name,
        "batch": int(method.cfg.data.batch_size),
        "flops": flops,
        "step": {k: statistics.median(v) for k, v in times.items()},
        "cpu": {k: statistics.median(v) for k, v in cpu.items()},
        "loop": {k: statistics.median(v) for k, v in loop.items()},
        "speed": {k: 1 / statistics.median(v) for k, v in ratios.items()},
        "bf16_flop_share": tally.flops[torch.bfloat16] / max(1, sum(tally.flops.values())),
        "top": [(op, ms, n, _dtype_names(tally.calls[KERNEL_OF.get(op, op)])) for op, ms, n in top],
        "profiled_ms": total_ms,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--preset", default="quick")
    p.add_argument("--batch", type=int, help="batch size of every method (default: the preset's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3, help="steps per fit, the first not timed")
    p.add_argument("--rounds", type=int, default=2, help="interleaved fp32/bf16 rounds")
    p.add_argument("--gemm-sizes", type=int, nargs="+", default=[256, 512])
    p.add_argument("--top", type=int, default=6, help="operators listed per method")
    p.add_argument("--data-root", default=default_data_root())
    p.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="time steps and GEMMs in CPU seconds of this process (default: with one thread, "
        "the time on an idle core, which a shared machine cannot show) or in wall seconds",
    )
    args = p.parse_args()
    set_threads(args.threads)
    quiet_lightning()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    dtype_peak = {
        dt: max(gemm_peak_flops(n, 3, dt, clock=clock) for n in args.gemm_sizes)
        for dt in {dt for _, dt, _ in PRECISIONS.values()}
    }
    peak = {k: dtype_peak[dt] for k, (_, dt, _) in PRECISIONS.items()}
    print(
        f"{args.preset} presets, {torch.get_num_threads()} thread(s), {args.clock} time, CPU "
        f"capability {torch.backends.cpu.get_cpu_capability()}, load average "
        f"{load_average():.1f}; GEMM peak (best of n = {', '.join(map(str, args.gemm_sizes))}): "
        f"fp32 {peak['fp32'] / 1e9:.1f} GFLOP/s, bf16 {peak['bf16'] / 1e9:.2f} GFLOP/s "
        f"(bf16/fp32 {peak['bf16'] / peak['fp32']:.3f})",
        flush=True,
    )
    rows = []
    for name in args.methods:
        try:
            r = measure_method(name, args)
        except Exception as e:  # a method that cannot train in bf16 is a result too
            rows.append(f"{name:<11}failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
            print(rows[-1], flush=True)
            continue
        share = {k: 100 * r["flops"] / r["step"][k] / peak[k] for k in PRECISIONS}
        rows.append(
            f"{r['name']:<11}{r['batch']:>6}{r['flops'] / 1e9:>11.2f}{r['step']['fp32']:>12.3f}"
            f"{r['step']['bf16']:>12.3f}{r['step']['bf16r']:>12.3f}{share['fp32']:>10.1f}%"
            f"{share['bf16']:>10.1f}%{share['bf16r']:>10.1f}%{100 * r['bf16_flop_share']:>9.0f}%"
            f"{r['speed']['bf16']:>9.2f}x{r['speed']['bf16r']:>9.2f}x"
            f"{r['loop']['fp32'] / r['loop']['bf16']:>9.2f}x"
        )
        print(
            f"{r['name']}: bf16-mixed runs at {r['speed']['bf16']:.2f}x the speed of float32, "
            f"{r['speed']['bf16r']:.2f}x with the routing in bfloat16 (median of "
            f"{args.rounds} interleaved rounds); top operators of one bf16 step "
            f"({r['profiled_ms']:.0f} ms profiled, self CPU time):"
        )
        for op, ms, n, dtypes in r["top"]:
            print(
                f"    {op:<36}{ms:9.1f} ms {100 * ms / r['profiled_ms']:5.1f}%  {n:5d} calls  "
                f"{dtypes or '-'}",
                flush=True,
            )
    print(
        f"\n{'method':<11}{'batch':>6}{'GFLOP/step':>11}{'fp32 s/step':>12}{'bf16 s/step':>12}"
        f"{'bf16r s/step':>13}{'fp32 %peak':>11}{'bf16 %peak':>11}{'bf16r %peak':>12}"
        f"{'bf16 FLOP':>10}{'speed':>10}{'speed r':>10}{'loop':>9}"
    )
    print("\n".join(rows))
    print(
        f"(s/step: median {args.clock} seconds of the training step; %peak: of the GEMM peak of "
        "the same precision; bf16 FLOP: share of the step's matmul/conv FLOPs autocast ran in "
        "bfloat16; speed: bf16 over fp32, median of per-round ratios; speed r: the same with "
        "the dynamic routing in bfloat16 (bf16r: trainer.routing_precision=autocast); loop: "
        "bf16's speed for step + data loading and batch transforms)"
    )


if __name__ == "__main__":
    main()
