"""A check of every method on a GPU that fits a budget: speed, finite steps, exact resume, float64.

Each (method, precision) row runs in a child process, capped at ``--method-cap-s`` seconds, and
the check stops starting rows once ``--budget-s`` is spent. A row is printed, flushed and
appended to ``--jsonl`` as one JSON line the moment it finishes, so a check cut short still
leaves every finished row. For the ``paper`` preset of each method and each precision:

1. **speed**: ``--warmup`` steps, then ``--steps`` bare training steps timed (Lightning's loop
   with no logger, checkpoint, validation, progress bar or figures; determinism off; data
   loading and the batch transform included): images/s from the median step, peak device
   memory, and whether every step was finite (the method's own non-finite guard);
2. **share of peak**: matmul/conv FLOPs of one step (``selfcaps.eval.profile.flop_counter``)
   x steps/s, against square GEMMs measured in the same run at the precision each kind of op
   ran in: ``bf16-mixed`` at the bfloat16 peak; ``32-true`` convolutions at the TF32 peak
   where cuDNN may use TF32 (PyTorch's default, recorded per row as ``tf32``), else at the
   IEEE float32 peak, and matrix products at the IEEE float32 peak (PyTorch's default);
3. **resume**: ``selfcaps pretrain --deterministic --no-figures`` for ``--resume-steps``, and
   again for half of them then ``--resume`` to the end: the weights, buffers and counters of
   both ``last.ckpt`` must be equal bit for bit (the largest difference is shown otherwise);
4. **float64**: the trained network's features of 4 validation images on the device in float32
   against the same network on the CPU in float64 (largest difference relative to the
   largest value; TF32 off for convolutions and matrix products alike).

A child that a signal stops (an outer ``timeout``, a scheduler) ends the whole check with the
rows it has (exit code 1); so does a signal to the check itself. PoE trains in three stages of
epochs: its runs get ``stage_epochs=[1,1,1]`` and subsets of a third of the steps each.

**Fitting five methods x two precisions into 8 minutes on one H200** (``--budget-s 480``):
10 rows of at most 48 s. A row costs a child's start (imports, CUDA context: ~8 s), the speed
run (~5 s of Lightning set-up, 5 warm-up and 30 timed steps: at the readiness projections,
e.g. CoCa's 512 images a step at ~1,500 ops x 19 us, under 2 s), one counted step, three
``pretrain`` runs of 10 + 5 + 5 steps with their start-ups (~15 s) and the float64 features of
4 images on the CPU (~5 s for EncapNet, the heaviest): about 35-45 s. ``--method-cap-s 90``
stops a row that runs long without losing the others.

    python benchmarks/gpu_check.py --data-root DIR [--budget-s 480] [--jsonl rows.jsonl]
    python benchmarks/gpu_check.py --accelerator cpu --steps 3 --tiny   # the CI smoke test

``--tiny``: networks of each paper preset's structure with small widths, on mnist5k (no
data root needed), batch 8. Exit code 1 if any check failed or the check was cut short.

``--set KEY=VALUE`` (repeatable) adds a configuration override to every run of the check,
timed steps and resume runs alike, and each row lists them as ``overrides``: a variant timed
against the defaults, e.g. ``--set trainer.tf32=false`` (float32 convolutions without TF32),
``--set trainer.vote_precision=bf16`` or ``--set trainer.cudnn_benchmark=true`` (the timed
steps only: the resume runs are deterministic). Settings the check makes itself (precision,
determinism, budgets) are not for ``--set``.

``--compile``: the timed steps run with ``trainer.compile`` (``torch.compile``;
``reduce-overhead``, a CUDA graph, on a GPU), and a row is the speed alone: the warm-up steps
include the compilation (give ``--warmup`` at least 3 for a CUDA graph), FLOPs come from an eager
step, and the resume and float64 checks, which are the eager rows' business, are left out. A
compilation takes minutes (on a CPU the first compiled step of a ``quick`` network took 85-138 s,
docs/benchmarks.md), so give such rows a larger ``--method-cap-s`` and fewer methods::

    python benchmarks/gpu_check.py --data-root DIR --compile --warmup 5 --method-cap-s 240 \
        --methods coca mcae --precisions 32-true --jsonl rows.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _common import gemm_peak_flops, seconds_at_peaks
from _method_steps import (
    METHODS,
    TINY_MODEL,
    build_method,
    fit_steps,
    method_from_config,
    paper_copy,
    quiet_lightning,
)
from selfcaps.cli import main as selfcaps
from selfcaps.config.loading import load_config, load_yaml, parse_overrides
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.engine.tf32 import tf32, tf32_state
from selfcaps.eval.profile import flop_counter, flops_by_kind
from selfcaps.methods.base import NonFiniteError
from selfcaps.run.provenance import git_commit

PRECISIONS = ("bf16-mixed", "32-true")
#: The GEMM peaks each check measures: bfloat16, IEEE float32, float32 with TF32 allowed.
PEAKS = ("bf16", "fp32", "tf32")

TINY_DATA = [
    "--data",
    "mnist5k",
    "--batch-size",
    "8",
    "data.eval_batch_size=16",
    "data.train_subset=64",
]


SIGNAL_EXITS = {130: "SIGINT", 143: "SIGTERM"}  # 128 + signal number: the run was stopped


def method_args(name: str, precision: str, args: argparse.Namespace) -> list[str]:
    """The ``selfcaps pretrain`` arguments every resume run of ``name`` at ``precision`` shares."""
    out = ["--preset", "paper", "--accelerator", args.accelerator, "--precision", precision]
    out += ["--threads", str(args.threads), "--no-progress", "--deterministic", "--no-figures"]
    out += ["monitor.knn_every_n_epochs=0"]
    if args.data_root:
        out += ["--data-root", args.data_root]
    if args.tiny:
        out += [*TINY_DATA, "monitor.knn_k=4", "eval.knn_k=4"]
        out += [f"model.{k}={v}" for k, v in TINY_MODEL[name].items()]
    if name == "poe":  # every stage: one epoch each of steps/3 batches
        batch = 8 if args.tiny else int(load_config(name, "paper").data.batch_size)
        per_stage = max(1, math.ceil(args.resume_steps / 3))
        out += ["--epochs", "3", "model.stage_epochs=[1,1,1]"]
        out += [f"data.train_subset={per_stage * batch}"]
    else:
        out += ["--epochs", str(10**6)]
    # cuDNN's benchmarking is refused with --deterministic: a speed setting, for the timed steps
    return out + [kv for kv in args.set if not kv.startswith("trainer.cudnn_benchmark=")]


def speed_overrides(name: str, precision: str, args: argparse.Namespace) -> list[tuple[str, Any]]:
    """The ``paper`` preset's overrides for the timed bare steps (no determinism, no validation;
    ``trainer.compile`` with ``--compile``)."""
    return [
        ("trainer.accelerator", args.accelerator),
        ("trainer.precision", precision),
        ("trainer.deterministic", False),
        ("trainer.compile", bool(args.compile)),
        *paper_copy(name, args.tiny, args.warmup + args.steps),
        *parse_overrides(args.set),
    ]


def pretrain(name: str, out: Path, steps: int, shared: list[str], resume: bool = False) -> int:
    """``selfcaps pretrain`` in this process (its console output swallowed); the exit code."""
    argv = ["pretrain", name, "--out", str(out), "--max-steps", str(steps)]
    argv += ["--resume"] if resume else shared
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return selfcaps(argv)


def largest_difference(a: Path, b: Path) -> float:
    """Largest difference between the weights and buffers of two runs' ``last.ckpt``."""
    wa, wb = (load_checkpoint(r / "checkpoints" / "last.ckpt")["state_dict"] for r in (a, b))
    if wa.keys() != wb.keys():
        return math.inf
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)


def float64_agreement(run: Path, device: str) -> float:
    """Largest |device fp32 - CPU fp64| of the run's features, relative to the largest value."""
    method, dm = method_from_config(load_yaml(run / "config.yaml"))
    method.load_state_dict(load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"])
    val = dm.split("val")
    x = torch.stack([dm.eval_transform(val[i][0]) for i in range(min(4, len(val)))])
    ref = copy.deepcopy(method).double().eval()
    method = method.to(device).eval()
    with torch.no_grad(), tf32(False):
        got = method.features(x.to(device))
        want = ref.features(x.double())
    worst = 0.0
    for k, w in want.items():
        scale = w.abs().max().item() or 1.0
        worst = max(worst, (got[k].double().cpu() - w).abs().max().item() / scale)
    return worst


def timed_steps(name: str, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """Speed on bare steps after warm-up, FLOPs of one step, peak memory, finiteness."""
    cuda = args.accelerator != "cpu"
    overrides = speed_overrides(name, precision, args)
    method, dm = build_method(name, "paper", overrides, args.data_root)
    batch = int(method.cfg.data.batch_size)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with tf32(method.cfg.trainer.get("tf32")):  # as a run applies trainer.tf32
        flags = tf32_state()  # what the timed steps run under
        try:
            timer = fit_steps(method, dm, args.warmup + args.steps, precision, [], args.accelerator)
        except NonFiniteError:
            nan = {"flops_per_image": math.nan, "conv_flops_per_image": math.nan}
            return {"finite": False, "images_s": math.nan, **nan, "tf32": flags}
    step = timer.median("loop_wall", skip=args.warmup)
    row = {"finite": True, "images_s": batch / step, "step_ms": 1000 * step, "tf32": flags}
    row["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else math.nan
    eager = [(k, False if k == "trainer.compile" else v) for k, v in overrides]
    method, dm = build_method(name, "paper", eager, args.data_root)  # FLOPs of an eager step
    with flop_counter() as fc:
        fit_steps(method, dm, 1, precision, accelerator=args.accelerator)
    row["flops_per_image"] = fc.get_total_flops() / batch
    row["conv_flops_per_image"] = flops_by_kind(fc)["conv"] / batch
    return row


def share_of_peak(
    row: dict[str, Any], precision: str, peaks: dict[str, float], cuda: bool = True
) -> float:
    """Images/s x the seconds an image's FLOPs take at the peaks of the precision each kind of
    op ran in (module docstring): the step's share of what the card's GEMMs reach. The TF32
    flags act only on a CUDA device (``cuda``)."""
    if precision == "bf16-mixed":
        conv_peak = matmul_peak = peaks["bf16"]
    else:
        flags = (row.get("tf32") or {}) if cuda else {}
        conv_peak = peaks["tf32" if flags.get("conv") else "fp32"]
        matmul_peak = peaks["tf32" if flags.get("matmul") else "fp32"]
    seconds = seconds_at_peaks(
        row["flops_per_image"], row["conv_flops_per_image"], conv_peak, matmul_peak
    )
    return row["images_s"] * seconds


def check_row(name: str, precision: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One row: speed, share of the peak, exact resume, float64 agreement (``--compile``: the
    speed and share alone)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"method": name, "precision": precision}
    if args.set:
        row["overrides"] = list(args.set)
    row.update(timed_steps(name, precision, args))
    row["share"] = share_of_peak(row, precision, args.peaks, args.accelerator != "cpu")
    if args.compile:  # module docstring
        row.update(compiled=True, resume=None, fp64=None)
    else:
        row.update(resume_and_float64(name, precision, args, root))
    row["seconds"] = time.perf_counter() - t0
    return row


def resume_and_float64(
    name: str, precision: str, args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    """A row's resume check and float64 agreement (and what stopped a run, if a signal did)."""
    shared = method_args(name, precision, args)
    full, split = root / f"{name}-{precision}-full", root / f"{name}-{precision}-split"
    half = max(1, args.resume_steps // 2)
    codes = [pretrain(name, full, args.resume_steps, shared)]
    codes.append(pretrain(name, split, half, shared))
    codes.append(pretrain(name, split, args.resume_steps, shared, resume=True))
    out: dict[str, Any] = {}
    stopped = [SIGNAL_EXITS[c] for c in codes if c in SIGNAL_EXITS]
    if stopped:
        out["stopped_by"] = stopped[0]
    ok = all(c == 0 for c in codes)
    out["resume"] = largest_difference(full, split) if ok else math.nan
    device = "cuda" if args.accelerator != "cpu" else "cpu"
    out["fp64"] = float64_agreement(full, device) if codes[0] == 0 else math.nan
    return out


def row_ok(row: dict[str, Any], tolerance: float) -> bool:
    """A row passes: finite steps, resumed bit for bit, float64 within ``tolerance`` (a compiled
    row: finite steps)."""
    if row.get("compiled"):
        return bool(row.get("finite"))
    return bool(row.get("finite")) and row.get("resume") == 0.0 and row["fp64"] <= tolerance


def format_row(r: dict[str, Any], tolerance: float) -> str:
    """One table line (a row that did not finish says why)."""
    if "status" in r:
        return f"{r['method']:<11}{r['precision']:<11}  {r['status']}"
    if r.get("compiled"):
        resume, fp64, note = "-", "-", "  (compiled: speed only)"
    else:
        resume = "exact" if r["resume"] == 0.0 else format(r["resume"], ".1e")
        fp64, note = format(r["fp64"], ".1e"), ""
    return (
        f"{r['method']:<11}{r['precision']:<11}{'yes' if r['finite'] else 'NO':>7}{resume:>9}"
        f"{fp64:>10}{r['images_s']:>10.1f}{r.get('peak_mem_gib', math.nan):>9.2f}"
        f"{100 * r['share']:>7.1f}%{r['seconds']:>7.0f}s  {'yes' if row_ok(r, tolerance) else 'NO'}"
        + note
    )


HEADER = (
    f"{'method':<11}{'precision':<11}{'finite':>7}{'resume':>9}{'fp64 rel':>10}"
    f"{'images/s':>10}{'peak GiB':>9}{'% peak':>8}{'time':>8}  ok"
)


def row_from_child(code: int, stdout: str, name: str, precision: str) -> dict[str, Any]:
    """The row a child printed as its last line, or what its exit says (a signal stops it)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if code == 0 and lines:
        return json.loads(lines[-1])
    row = {"method": name, "precision": precision}
    if code < 0 or code in SIGNAL_EXITS:
        sig = SIGNAL_EXITS.get(code, f"signal {-code}")
        return row | {"status": f"stopped by {sig}", "signal": True}
    return row | {"status": f"failed (exit code {code})"}


def run_child(name: str, precision: str, argv: list[str], timeout: float) -> dict[str, Any]:
    """One row in a child process, stopped after ``timeout`` seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--row", name, precision]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"method": name, "precision": precision, "status": f"over {timeout:.0f} s: stopped"}
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
    row = row_from_child(proc.returncode, proc.stdout, name, precision)
    return row | {"seconds": time.perf_counter() - t0}  # the child's start-up included


def software(commit: str) -> dict[str, str]:
    """What the rows ran on besides the device: torch, its CUDA, Python and the commit.

    Each JSON line carries these, so a row can go into the registry as it stands; ``cuda`` is
    ``"none"`` for a build of torch without CUDA.
    """
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "commit": commit,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``None``: ``sys.argv``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    p.add_argument("--accelerator", default="gpu", help="gpu (CUDA) | cpu")
    p.add_argument("--steps", type=int, default=30, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=5, help="steps before timing")
    p.add_argument("--resume-steps", type=int, default=10, help="steps of the resume check")
    p.add_argument("--budget-s", type=float, default=480.0, help="whole check, seconds")
    p.add_argument("--method-cap-s", type=float, default=90.0, help="one row, seconds")
    p.add_argument("--in-process", action="store_true", help="rows in this process (no caps)")
    p.add_argument("--jsonl", type=Path, help="append each finished row here as a JSON line")
    p.add_argument("--tiny", action="store_true", help="small widths, mnist5k, batch 8")
    p.add_argument("--data-root", help="dataset root of the paper presets' data")
    p.add_argument("--threads", type=int, default=1, help="CPU threads")
    p.add_argument("--tolerance", type=float, default=1e-3, help="float64 agreement, relative")
    p.add_argument(
        "--compile",
        action="store_true",
        help="time compiled steps (trainer.compile): speed only, no resume or float64 check",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration override for every run of the check (repeatable), e.g. "
        "trainer.tf32=true",
    )
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    p.add_argument(
        "--commit",
        default=None,
        help="the commit to record in every row (default: the checkout's; a copy of the tree "
        "without .git, as on the device machine, records what benchmarks/gpu_bundle.py passes)",
    )
    p.add_argument("--peaks", type=float, nargs=3, metavar=PEAKS, help=argparse.SUPPRESS)
    p.add_argument("--row", nargs=2, metavar=("METHOD", "PRECISION"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peaks:
        args.peaks = dict(zip(PEAKS, args.peaks, strict=True))
    return args


def child_argv(argv: list[str], peaks: dict[str, float], out: Path) -> list[str]:
    """The parent's arguments for a child row: its own peaks and run folder."""
    keep = [a for a in argv if a != "--in-process"]
    return [*keep, "--peaks", *(str(peaks[k]) for k in PEAKS), "--out", str(out)]


def measure_peaks(n: int, device: str) -> dict[str, float]:
    """FLOP/s of an ``n``^3 GEMM in bfloat16, in IEEE float32 and in float32 with TF32 allowed
    (on a CPU, where the TF32 flags act on nothing, the last is the float32 one)."""
    peaks = {"bf16": gemm_peak_flops(n, 3, torch.bfloat16, device)}
    with tf32(False):
        peaks["fp32"] = gemm_peak_flops(n, 3, torch.float32, device)
    if device == "cpu":
        return peaks | {"tf32": peaks["fp32"]}
    with tf32(True):
        return peaks | {"tf32": gemm_peak_flops(n, 3, torch.float32, device)}


class _StopSignalError(Exception):
    """The check itself received a stop signal."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    quiet_lightning()
    cuda = args.accelerator != "cpu"
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --accelerator cpu for the smoke test")
        return 2
    if args.row:  # a child: one row, printed as JSON
        with tempfile.TemporaryDirectory() as tmp:
            row = check_row(*args.row, args, args.out or Path(tmp))
        print(json.dumps(row), flush=True)
        return 0
    return _check(args, argv, cuda)


def _check(args: argparse.Namespace, argv: list[str], cuda: bool) -> int:
    device = "cuda" if cuda else "cpu"
    n = 4096 if cuda else 256
    args.peaks = measure_peaks(n, device)
    name = torch.cuda.get_device_name() if cuda else f"CPU ({args.threads} thread(s))"
    flags = tf32_state()
    versions = software(args.commit or git_commit())
    print(
        f"torch {versions['torch']} (CUDA {versions['cuda']}), Python {versions['python']}, "
        f"commit {versions['commit']}",
        flush=True,
    )
    print(
        f"{name}: {n}^3 GEMM peak TFLOP/s bf16 {args.peaks['bf16'] / 1e12:.3f}, fp32 "
        f"{args.peaks['fp32'] / 1e12:.3f}, tf32 {args.peaks['tf32'] / 1e12:.3f}; float32 "
        f"convolutions in TF32: {flags['conv']}, matrix products: {flags['matmul']}; "
        f"{args.steps} timed steps per row, budget {args.budget_s:g} s, "
        f"{args.method_cap_s:g} s a row",
        flush=True,
    )
    print(HEADER, flush=True)

    def stop(signum: int, frame: Any) -> None:
        raise _StopSignalError(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    rows: list[dict[str, Any]] = []
    start, cut = time.perf_counter(), None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = args.out or Path(tmp)
            for m in args.methods:
                for precision in args.precisions:
                    left = args.budget_s - (time.perf_counter() - start)
                    if left <= 0:
                        cut = "the budget is spent"
                        break
                    if args.in_process:
                        row = check_row(m, precision, args, root)
                    else:
                        cap = min(args.method_cap_s, left)
                        row = run_child(m, precision, child_argv(argv, args.peaks, root), cap)
                    rows.append(row)
                    print(format_row(row, args.tolerance), flush=True)
                    if args.jsonl:
                        with args.jsonl.open("a") as f:
                            f.write(json.dumps(row | {"device": name} | versions) + "\n")
                    if row.get("signal") or row.get("stopped_by"):
                        cut = row.get("status") or f"stopped by {row['stopped_by']}"
                        break
                if cut:
                    break
    except _StopSignalError as e:
        cut = f"this check was stopped by {e}"
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    expected = len(args.methods) * len(args.precisions)
    print(
        "(resume: largest weight difference of a run resumed at half way vs uninterrupted; "
        f"fp64 rel: device float32 features vs CPU float64, tolerance {args.tolerance:g})"
    )
    if cut:
        print(f"gpu_check: {len(rows)} of {expected} rows; stopped: {cut}", flush=True)
    failed = cut is not None or len(rows) < expected
    failed |= not all("status" not in r and row_ok(r, args.tolerance) for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
