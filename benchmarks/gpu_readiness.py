"""How ready each method's training step is for a GPU, measured on the CPU.

For every method's ``paper`` preset (``--tiny``: the same structure at small widths on
mnist5k, the CI smoke test), a few training steps run through Lightning exactly as
``selfcaps run`` trains, with the hot loops sized as on an accelerator
(``selfcaps.caps.chunking.sized_for("accelerator")``: whole batches, no CPU-cache chunks),
under :class:`selfcaps.eval.dispatch.DispatchTally`. Per method it reports:

* **ops per step** by phase: ``augment`` (the batch transform on the device), ``forward``
  (``training_step``: network, loss, logging), ``backward``, ``optimiser`` (gradient checks,
  optimiser step, zeroing); ``load`` (data loading on the main process: per-sample CPU
  transforms and collation, which a GPU run does in loader workers) is shown apart and is not
  part of ``ops_per_step``. A non-view operator is about one kernel launch on a GPU.
* **host syncs per step** outside ``load``, with the source lines that cause them;
* **data ms per batch**: the median time of one training batch from the loader of the counted
  fit (sized as ``--sizing``: on an accelerator a method may load uint8 images and per-image
  parameters for its batch transform), on the main process (one core); the projection
  divides it by the loader workers a GPU run takes
  (``data.num_workers: null`` resolves to one per core but one, at most 8: ``--gpu-workers``);
* **training FLOPs per image** (forward and backward matrix products and convolutions, the
  convolutions' part apart: :func:`selfcaps.eval.profile.flops_by_kind`;
  :func:`selfcaps.eval.profile.flop_counter`: ``torch.utils.flop_counter`` with the backward
  of grouped convolutions counted per group, which torch's own formula counts ``groups``
  times too high for the input gradient);
* **graph breaks** of the method's loss (``compute_loss`` on one augmented batch) under
  ``torch._dynamo.explain`` (``--no-compile-check`` skips it);
* with ``--compiled-kernels``, **kernels of the compiled step**: ``compute_loss`` and its
  backward on one augmented batch compiled by ``torch.compile`` (inductor, code generated
  for this CPU), counted in the generated ``call`` functions: fused kernels inductor wrote
  and library calls (convolutions, matrix products) it left to ATen. On a GPU inductor writes
  Triton kernels instead, with similar but not identical fusion decisions, so this is an
  estimate of the launches of a compiled step, not a count of them; the compiled projection
  adds the eager augment and optimiser ops (compilation takes minutes per method; PoE,
  which makes its own updates inside ``compute_loss``, is not counted);
* **projected images/s** on a GPU: ``batch / t`` with
  ``t = max(ops x launch + syncs x sync, conv FLOPs / conv peak + other FLOPs / peak,
  data / workers)`` per step, where ``launch`` (default 19 µs a launch) and ``peak``
  (default 49 TFLOP/s, float32) are the values a ``paper`` CoCa step measured on an H200
  calibrates (docs/benchmarks.md), ``conv peak`` (``--conv-peak-tflops``, default the same
  ``peak``) is that of float32 convolutions, which PyTorch lets cuDNN run in TF32 on such a
  GPU by default (so the default is a lower bound there: ``gpu_check.py`` measures the TF32
  GEMM peak), and
  ``sync`` (default 20 µs) is the round trip an idle queue costs. It cannot see kernel
  durations of element-wise ops, memory bandwidth, fusion by ``torch.compile``, the
  allocator, host-to-device copies or small-matrix efficiency: it is a ceiling set by the
  launch count and the matrix work, not a prediction of a measurement.

    python benchmarks/gpu_readiness.py --data-root DIR [--methods coca ...] [--json out.json]
    python benchmarks/gpu_readiness.py --tiny            # CI smoke test, mnist5k, no data root

``--precision bf16-mixed`` counts the steps under bfloat16 autocast (and compiles the loss
under it with ``--compiled-kernels``): its casts are ops too. The FLOPs are the same; give the
bfloat16 peak with ``--peak-tflops`` (and ``--conv-peak-tflops``) to project it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from _common import seconds_at_peaks
from _method_steps import METHODS, build_method, fit_steps, paper_copy, quiet_lightning
from selfcaps.caps.chunking import sized_for
from selfcaps.eval.dispatch import DispatchTally
from selfcaps.eval.profile import flop_counter, flops_by_kind

#: The projection's defaults (docs/benchmarks.md says where they come from).
LAUNCH_US = 19.0
SYNC_US = 20.0
PEAK_TFLOPS = 49.0
DEVICE_PHASES = ("augment", "forward", "backward", "optimiser")


class PhaseCounter(Callback):
    """Switches the tally's phase at Lightning's hooks; counts after ``warmup`` steps."""

    def __init__(self, tally: DispatchTally, warmup: int) -> None:
        self.tally, self.warmup, self.steps = tally, warmup, 0

    def on_train_start(self, trainer: Any, module: Any) -> None:
        original = module.on_after_batch_transfer
        tally = self.tally

        def transfer(batch: Any, idx: int) -> Any:
            with tally.phase("augment"):
                return original(batch, idx)

        module.on_after_batch_transfer = transfer
        tally.current = "load"
        tally.__enter__()

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
        self.tally.current = "forward"

    def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None:
        self.tally.current = "backward"

    def on_after_backward(self, trainer: Any, module: Any) -> None:
        self.tally.current = "optimiser"

    def on_train_batch_end(self, trainer: Any, module: Any, out: Any, batch: Any, i: int) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            self.tally.reset()
        self.tally.current = "load"

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.tally.__exit__(None, None, None)

    @property
    def counted(self) -> int:
        """Steps counted after the warm-up."""
        return self.steps - self.warmup


def overrides(name: str, args: argparse.Namespace) -> list[tuple[str, Any]]:
    """The preset overrides of this measurement (PoE is counted in its autoencoder stage)."""
    batches = args.warmup + args.steps + 1
    return [("trainer.accelerator", "cpu"), *paper_copy(name, args.tiny, batches, args.batch_size)]


class LoaderGrab(Callback):
    """Keeps the training loader a fit used (a method may load batches differently on an
    accelerator, e.g. uint8 images and per-image parameters for a batch transform)."""

    loader: Any = None

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.loader = trainer.train_dataloader


def data_ms(loader: Any, batches: int) -> float:
    """Median ms for one training batch from the loader (main process), after one warm-up."""
    it = iter(loader)
    times = []
    for _ in range(batches + 1):
        t0 = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times[1:] or times)


def _fresh_dynamo(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` between two ``torch._dynamo.reset()``; ``None`` (with a message) if it raises."""
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        return fn()
    except Exception as e:
        print(f"  {what} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    finally:
        dynamo.reset()


def graph_breaks(method: Any, dm: Any) -> int | None:
    """Graph breaks of ``compute_loss`` on one augmented training batch (``None``: it failed)."""
    import torch._dynamo as dynamo

    batch = augmented_batch(dm)
    explained = _fresh_dynamo(
        "graph breaks: explain", lambda: dynamo.explain(method.compute_loss)(batch)
    )
    return None if explained is None else int(explained.graph_break_count)


#: A generated kernel's call (inductor: ``cpp_fused_*`` on a CPU, ``triton_*`` on a GPU).
_FUSED_CALL = re.compile(r"^\s+(?:\w+ = )?(?:cpp_fused_\w+|triton_\w+(?:\.run)?)\(")
#: A call inductor leaves to a library: ``extern_kernels.mm(...)``, ``torch.ops.aten.X.Y(...)``.
_LIBRARY_CALL = re.compile(r"^\s+(?:\w+ = )?(?:extern_kernels\.\w+|torch\.ops\.\w+\.\w+\.\w+)\(")


def count_kernels(code: str) -> tuple[int, int]:
    """``(fused, library)`` kernel calls in the ``call`` function of inductor's output code.

    Allocations (``empty_strided_*``), tensor reinterpretations, asserts and ``del`` lines run
    no kernel and are not counted; a ``call`` without a counted line reads ``(0, 0)``.
    """
    if "def call(" not in code:
        return 0, 0
    lines = []
    for line in code[code.index("def call(") :].splitlines()[1:]:
        if line.strip() and not line[0].isspace():
            break  # the end of the function body
        lines.append(line)
    fused = sum(bool(_FUSED_CALL.match(line)) for line in lines)
    library = sum(bool(_LIBRARY_CALL.match(line)) for line in lines)
    return fused, library


def augmented_batch(dm: Any) -> Any:
    """One training batch with the data module's batch transform applied (if it has one)."""
    batch = next(iter(dm.train_dataloader()))
    tf = getattr(dm, "train_transform", None)
    if getattr(tf, "is_batch_transform", False):
        batch = (tf(batch[0], torch.Generator().manual_seed(0)), batch[1])
    return batch


def compiled_kernels(method: Any, dm: Any, precision: str = "32-true") -> dict[str, int] | None:
    """Kernels of ``compute_loss`` and its backward under ``torch.compile`` (module docstring),
    the loss under bfloat16 autocast when ``precision`` is ``bf16-mixed``.

    ``None`` (with a message) when the method optimises manually (PoE: ``compute_loss`` makes
    its own update, so a loss-and-backward step is not its step), when compilation fails, or
    when inductor's output has no kernel this parser recognises (a format it does not know).
    """
    from torch._inductor.utils import run_and_get_code

    if not getattr(method, "automatic_optimization", True):
        print("  compiled kernels: not counted (manual optimisation)", file=sys.stderr)
        return None

    batch = augmented_batch(dm)

    def step(b: Any) -> Tensor:
        with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16-mixed"):
            loss, _ = method.compute_loss(b)
        loss.backward()
        return loss.detach()

    compiled = _fresh_dynamo(
        "compiled kernels: compile", lambda: run_and_get_code(torch.compile(step), batch)
    )
    method.zero_grad(set_to_none=True)
    if compiled is None:
        return None
    codes = compiled[1]
    counts = [count_kernels(code) for code in codes]
    fused, library = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if fused + library == 0:
        print("  compiled kernels: no kernel call recognised in the output", file=sys.stderr)
        return None
    return {"graphs": len(codes), "fused": fused, "library": library}


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One method's row (see the module docstring)."""
    tally = DispatchTally("load")
    counter = PhaseCounter(tally, args.warmup)
    method, dm = build_method(name, "paper", overrides(name, args), args.data_root)
    batch = int(method.cfg.data.batch_size)
    grab = LoaderGrab()
    with sized_for(args.sizing):
        fit_steps(method, dm, args.warmup + args.steps, args.precision, [counter, grab])
    steps = max(counter.counted, 1)
    per_phase = {k: v / steps for k, v in tally.ops_by_phase.items()}
    ops = sum(per_phase.get(p, 0.0) for p in DEVICE_PHASES)
    syncs = sum(n for p, n in tally.syncs_by_phase.items() if p != "load") / steps
    method, dm = build_method(name, "paper", overrides(name, args), args.data_root)
    with flop_counter() as fc, sized_for("accelerator"):
        fit_steps(method, dm, 1)
    flops = fc.get_total_flops() / batch
    conv_flops = flops_by_kind(fc)["conv"] / batch
    ms = data_ms(grab.loader, args.data_batches)
    workers = max(args.gpu_workers, 1) if dm.cfg.data.get("num_workers") is None else 1
    with sized_for(args.sizing):
        breaks = None if args.no_compile_check else graph_breaks(method, dm)
        kernels = compiled_kernels(method, dm, args.precision) if args.compiled_kernels else None
    row = {
        "method": name,
        "precision": args.precision,
        "batch_size": batch,
        "ops_per_step": round(ops, 1),
        "ops_by_phase": {k: round(v, 1) for k, v in sorted(per_phase.items())},
        "syncs_per_step": round(syncs, 2),
        "sync_sites": [
            {"phase": p, "site": s, "per_step": round(n, 2)} for p, s, n in tally.sites(steps)
        ],
        "data_ms_per_batch": round(ms, 2),
        "data_workers": workers,
        "flops_per_image": flops,
        "conv_flops_per_image": conv_flops,
        "graph_breaks": breaks,
        "compiled_kernels": kernels,
    }
    images_s, bound = projection(row, args)
    row |= {"projected_images_per_s": round(images_s, 1), "bound_by": bound}
    if kernels is not None:
        eager = sum(per_phase.get(p, 0.0) for p in ("augment", "optimiser"))
        compiled = row | {"ops_per_step": kernels["fused"] + kernels["library"] + eager}
        images_s, bound = projection(compiled, args)
        row |= {"compiled_projected_images_per_s": round(images_s, 1), "compiled_bound_by": bound}
    return row


def projection(row: dict[str, Any], args: argparse.Namespace) -> tuple[float, str]:
    """Projected images/s on a GPU and what bounds it (module docstring): the slowest of
    launches (ops x launch + syncs x sync), matrix work at the peaks (convolutions at the
    conv peak, the rest at the peak), and data per worker."""
    conv, peaks = row.get("conv_flops_per_image", 0.0), (args.conv_peak_tflops, args.peak_tflops)
    per_image = seconds_at_peaks(row["flops_per_image"], conv, *(p * 1e12 for p in peaks))
    times = {
        "launches": (row["ops_per_step"] * args.launch_us + row["syncs_per_step"] * args.sync_us)
        * 1e-6,
        "compute": per_image * row["batch_size"],
        "data": row["data_ms_per_batch"] / 1000 / max(row.get("data_workers", 1), 1),
    }
    bound = max(times, key=times.__getitem__)
    return row["batch_size"] / times[bound], bound


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The rows as one plain-text table, then the sync sites."""
    head = (
        f"{'method':<11}{'batch':>6}{'ops/step':>10}{'augment':>9}{'forward':>9}{'backward':>9}"
        f"{'optim':>7}{'load':>8}{'syncs':>7}{'data ms':>9}{'GFLOP/img':>10}{'breaks':>7}"
        f"{'proj img/s':>12}  bound"
    )
    lines = [head]
    for r in rows:
        p = r["ops_by_phase"]
        breaks = "-" if r["graph_breaks"] is None else str(r["graph_breaks"])
        lines.append(
            f"{r['method']:<11}{r['batch_size']:>6}{r['ops_per_step']:>10,.0f}"
            f"{p.get('augment', 0):>9,.0f}{p.get('forward', 0):>9,.0f}{p.get('backward', 0):>9,.0f}"
            f"{p.get('optimiser', 0):>7,.0f}{p.get('load', 0):>8,.0f}{r['syncs_per_step']:>7.2f}"
            f"{r['data_ms_per_batch']:>9.2f}{r['flops_per_image'] / 1e9:>10.3f}{breaks:>7}"
            f"{r['projected_images_per_s']:>12,.0f}  {r['bound_by']}"
        )
    lines.append(
        f"({args.precision}; projection: launch {args.launch_us:g} us, sync {args.sync_us:g} "
        f"us, peak {args.peak_tflops:g} TFLOP/s, convolutions {args.conv_peak_tflops:g} TFLOP/s; "
        "ops and syncs exclude the load phase)"
    )
    for r in rows:
        k = r.get("compiled_kernels")
        if k:
            lines.append(
                f"  {r['method']} compiled: {k['fused'] + k['library']:,} kernels "
                f"({k['fused']:,} fused, {k['library']:,} library) in {k['graphs']} graphs, "
                f"projected {r['compiled_projected_images_per_s']:,.0f} images/s "
                f"({r['compiled_bound_by']})"
            )
    for r in rows:
        for s in r["sync_sites"]:
            lines.append(f"  {r['method']}: {s['per_step']:g}/step in {s['phase']}: {s['site']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``None``: ``sys.argv``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--tiny", action="store_true", help="small widths, mnist5k, batch 8")
    p.add_argument(
        "--sizing",
        default="accelerator",
        choices=["accelerator", "cpu"],
        help="hot loops sized as on a GPU (default) or as on this CPU",
    )
    p.add_argument("--data-root", help="dataset root of the paper presets' data")
    p.add_argument("--batch-size", type=int, help="instead of the preset's batch size")
    p.add_argument("--steps", type=int, default=2, help="counted steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=1, help="steps before counting")
    p.add_argument("--data-batches", type=int, default=5, help="batches timed for data ms")
    p.add_argument("--threads", type=int, default=1, help="CPU threads")
    p.add_argument(
        "--precision",
        default="32-true",
        choices=["32-true", "bf16-mixed"],
        help="Lightning precision of the counted steps (autocast adds its casts; the FLOPs are "
        "the same: give the bfloat16 peaks with --peak-tflops and --conv-peak-tflops)",
    )
    p.add_argument("--launch-us", type=float, default=LAUNCH_US)
    p.add_argument("--sync-us", type=float, default=SYNC_US)
    p.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    p.add_argument(
        "--conv-peak-tflops",
        type=float,
        help="peak of float32 convolutions (default: --peak-tflops; TF32 on a GPU: higher)",
    )
    p.add_argument("--gpu-workers", type=int, default=8, help="loader workers on the GPU machine")
    p.add_argument("--no-compile-check", action="store_true", help="skip the graph-break count")
    p.add_argument(
        "--compiled-kernels",
        action="store_true",
        help="also count the kernels of the step compiled by inductor (minutes per method)",
    )
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    if args.conv_peak_tflops is None:
        args.conv_peak_tflops = args.peak_tflops
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_lightning()
    rows = []
    for name in args.methods:
        rows.append(measure(name, args))
        print(f"{name}: {rows[-1]['ops_per_step']:,.0f} ops/step", file=sys.stderr, flush=True)
    print(table(rows, args))
    if args.json:
        args.json.write_text(json.dumps({r["method"]: r for r in rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
