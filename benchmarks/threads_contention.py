"""Threads that fight: CPU and wall time per CoCa step at 1 and 2 threads, spinning or passive.

Each configuration runs in a fresh subprocess (OpenMP reads its wait policy when torch is
loaded, so the variable must be set before; the workers import nothing that loads torch
first): ``--steps`` training steps of the CoCa
``quick`` network (mnist5k, batched augmentation, NT-Xent, Adam) through the method's own
training step, then ``--eval-batches`` forward passes of ``eval_batch_size`` images (what
the kNN monitor and the final evaluation do). Configurations, run round-robin
``--rounds`` times so that changes in the machine's load hit all of them:

* ``1 thread``: ``torch.set_num_threads(1)``;
* ``2 threads``: 2 threads, OpenMP's default wait policy (libgomp: threads spin on a
  barrier before they sleep);
* ``2 threads passive``: 2 threads, ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep);
* ``2 threads spin N`` (N = 3000, 30000): 2 threads, ``GOMP_SPINCOUNT=N``: a waiting thread
  spins N times, then sleeps (libgomp's default is 300,000 spins, passive is 0);
* ``auto``: ``trainer.threads: auto``: the thread count the load leaves free now
  (:func:`selfcaps.engine.threads.auto_threads`), with the command's wait policy;
* ``default``: the command's default (``trainer.threads: null``): every core, and the wait
  policy :func:`selfcaps.engine.threads.set_openmp_wait` chooses from the load now.

For each it prints the median wall and CPU seconds (user + system of the whole process,
all threads) per training step and per evaluation batch, and their ratios to ``1 thread``.
Meant to be run while other jobs use the cores (print the load average with it): on an
idle machine 2 threads are simply faster.

    python benchmarks/threads_contention.py [--steps 6] [--rounds 2] [--batch 64] [--nice 0]

``--nice N`` runs the workers at that niceness (e.g. that of the other jobs, so that the
kernel shares the cores between them equally).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")
CONFIGS = {
    "1 thread": ("1", {}),
    "2 threads": ("2", {}),
    "2 threads passive": ("2", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "2 threads spin 3000": ("2", {"GOMP_SPINCOUNT": "3000"}),
    "2 threads spin 30000": ("2", {"GOMP_SPINCOUNT": "30000"}),
    "auto": ("auto", {}),
    "default": ("default", {}),
}


def worker(args: argparse.Namespace) -> None:
    """Train and evaluate in this process; print one JSON line of medians."""
    if args.threads in ("auto", "default"):
        from selfcaps.engine.threads import auto_threads, set_openmp_wait

        set_openmp_wait()  # before torch is imported, as the command does
        threads, _ = auto_threads(use_load=args.threads == "auto")
    else:
        threads = int(args.threads)
    import torch

    from _method_steps import build_method, fit_steps, quiet_lightning
    from selfcaps.engine.threads import wait_policy

    torch.set_num_threads(threads)
    quiet_lightning()
    method, dm = build_method(
        "coca", "quick", [("data.batch_size", args.batch), ("trainer.threads", threads)]
    )
    timer = fit_steps(method, dm, args.steps + 1, "32-true")
    val = dm.split("val")
    n = min(len(val), int(method.cfg.data.eval_batch_size))
    x = torch.stack([dm.eval_transform(val[i][0]) for i in range(n)])
    method.eval()
    wall, cpu = [], []
    with torch.no_grad():
        for _ in range(args.eval_batches):
            t0, c0 = time.perf_counter(), time.process_time()
            method.features(x)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print(
        json.dumps(
            {
                "threads": torch.get_num_threads(),
                "wait_policy": wait_policy(),
                "step_wall": timer.median("step_wall"),
                "step_cpu": timer.median("step_cpu"),
                "eval_wall": statistics.median(wall),
                "eval_cpu": statistics.median(cpu),
            }
        )
    )


def run_config(name: str, args: argparse.Namespace) -> dict:
    threads, extra = CONFIGS[name]
    env = {k: v for k, v in os.environ.items() if k not in WAIT_VARS}
    env.update(extra)
    src = HERE.parent / "src"
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--threads", threads]
    cmd += ["--steps", str(args.steps), "--batch", str(args.batch)]
    cmd += ["--eval-batches", str(args.eval_batches)]
    nice = (lambda: os.nice(args.nice)) if args.nice else None
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=nice)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: the worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6, help="timed training steps (after 1 warm-up)")
    p.add_argument("--eval-batches", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--nice", type=int, default=0, help="niceness of the worker processes")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", default="1", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    from _common import load_average  # imports torch: never in a worker before its policy is set

    loads = [load_average()]
    runs: dict[str, list[dict]] = {name: [] for name in args.configs}
    for _ in range(args.rounds):
        for name in args.configs:
            runs[name].append(run_config(name, args))
            loads.append(load_average())
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "wait_policy"}
        for name, rs in runs.items()
    }
    policies = {name: "/".join(sorted({r["wait_policy"] for r in rs})) for name, rs in runs.items()}
    base = med.get("1 thread")
    print(
        f"CoCa quick (mnist5k), batch {args.batch}: {args.steps} steps + {args.eval_batches} "
        f"evaluation batches per run, {args.rounds} round(s), niceness {args.nice}, "
        f"{os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        f"{'configuration':<20}{'threads':>8}{'step wall':>10}{'step CPU':>9}{'CPU/wall':>9}"
        f"{'eval wall':>10}{'eval CPU':>9}" + (f"{'wall/1t':>9}{'CPU/1t':>8}" if base else "")
    )
    for name, m in med.items():
        line = (
            f"{name:<20}{m['threads']:>8.0f}{m['step_wall']:>9.3f}s{m['step_cpu']:>8.3f}s"
            f"{m['step_cpu'] / m['step_wall']:>9.2f}{m['eval_wall']:>9.3f}s{m['eval_cpu']:>8.3f}s"
        )
        if base:
            line += (
                f"{m['step_wall'] / base['step_wall']:>8.2f}x"
                f"{m['step_cpu'] / base['step_cpu']:>7.2f}x"
            )
        print(line)
    print("(medians over rounds of the per-run medians; CPU = user + system of all threads)")
    print("OpenMP wait policy: " + "; ".join(f"{n}: {p}" for n, p in policies.items()))


if __name__ == "__main__":
    main()
