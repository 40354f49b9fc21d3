"""``torch.compile`` and channels-last against the eager float32 step, per method, on the CPU.

For each method's ``quick`` preset (its own training step through a bare Lightning
``Trainer``, see ``_method_steps.py``) and each variant:

* ``channels_last``: the network's 4-D weights in channels-last memory format (convolution
  outputs follow their weight's format), against the same network in the default format;
* ``compile``: the network wrapped by ``torch.compile`` (``trainer.compile=true``, what
  ``--compile`` does), against an eager copy with the same initial weights. The first
  compiled step (compilation included, with the CPU time of the compiler subprocesses
  that finished) is reported separately, in seconds.

Variant and eager fits alternate round by round in one process so that machine noise hits
both; printed is the median of the per-round ratios of the median step times (eager /
variant: above 1 the variant is faster). Steps are timed in CPU seconds of this process by
default (``--clock cpu``; with one thread, the time on an idle core).

    python benchmarks/cpu_variants.py [--methods ...] [--variants channels_last compile]
        [--batch 8] [--steps 3] [--rounds 2] [--threads 1] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any

import torch

from _common import load_average, set_threads
from _method_steps import METHODS, build_method, default_data_root, fit_steps, quiet_lightning

VARIANTS = ("channels_last", "compile")


def _children_cpu() -> float:
    """CPU seconds of this process's finished subprocesses (inductor's compiler runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _set_format(method: Any, fmt: torch.memory_format) -> None:
    method.network.to(memory_format=fmt)


def measure(name: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved eager / variant step times of ``name`` (and the compile step's seconds)."""
    overrides: list[tuple[str, Any]] = [("trainer.threads", args.threads)]
    if args.batch:
        overrides.append(("data.batch_size", args.batch))
    eager, dm = build_method(name, "quick", overrides, args.data_root)
    if variant == "compile":
        compiled = [*overrides, ("trainer.compile", True)]
        other, _ = build_method(name, "quick", compiled, args.data_root)
        children = _children_cpu()
        first = fit_steps(other, dm, 1)  # compilation (forward and backward graphs)
        compile_s = (
            first.step_wall[0]
            if args.clock == "wall"
            else first.step_cpu[0] + _children_cpu() - children  # + the C++ compiler's
        )
    else:
        other, compile_s = eager, float("nan")
    kind = f"step_{args.clock}"
    ratios, base, var = [], [], []
    for _ in range(args.rounds):
        if variant == "channels_last":
            _set_format(eager, torch.contiguous_format)
        base.append(fit_steps(eager, dm, args.steps).median(kind))
        if variant == "channels_last":
            _set_format(eager, torch.channels_last)
        var.append(fit_steps(other, dm, args.steps).median(kind))
        ratios.append(base[-1] / var[-1])
    return {
        "eager": statistics.median(base),
        "variant": statistics.median(var),
        "speed": statistics.median(ratios),
        "compile_s": compile_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--batch", type=int, help="batch size of every method (default: the preset's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3, help="steps per fit, the first not timed")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--data-root", default=default_data_root())
    args = p.parse_args()
    set_threads(args.threads)
    quiet_lightning()
    t0 = time.process_time()
    print(
        f"quick presets, float32, {torch.get_num_threads()} thread(s), {args.clock} time, "
        f"load average {load_average():.1f}"
    )
    print(
        f"{'method':<11}{'variant':<15}{'eager s/step':>13}{'variant s/step':>15}{'speed':>8}"
        f"{'first step':>12}"
    )
    for name in args.methods:
        for variant in args.variants:
            try:
                r = measure(name, variant, args)
            except Exception as e:  # a variant that does not run is a result too
                print(f"{name:<11}{variant:<15}failed: {type(e).__name__}: {str(e)[:80]}")
                continue
            first = "" if variant != "compile" else f"{r['compile_s']:>11.1f}s"
            print(
                f"{name:<11}{variant:<15}{r['eager']:>13.3f}{r['variant']:>15.3f}"
                f"{r['speed']:>7.2f}x{first}",
                flush=True,
            )
    print(
        f"(speed: eager / variant step time, median of {args.rounds} interleaved rounds; first "
        f"step: the compiled network's first step, compilation included; this script used "
        f"{time.process_time() - t0:.0f} CPU seconds)"
    )


if __name__ == "__main__":
    main()
