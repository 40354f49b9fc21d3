"""EncapNet's Table 1 on this machine: parameters, FLOPs, peak memory, seconds per batch.

Rows (the six-layer networks of ``selfcaps.models.encapnet``, one layout):

    (a) CapNet, dynamic routing   (b) CapNet, EM routing   (c) plain CNN
    (e) EncapNet, master only     (f) EncapNet, master/aide

For each row: parameters; forward FLOPs per 32x32 image (matmul/conv only, see
``selfcaps.eval.profile``); the rise of the peak resident memory during the first
forward+backward at ``--memory-batch``, measured in a fresh process per row (Linux
only; the weights themselves are not included); and the median wall time of a
forward+backward of a batch of ``--batch`` (margin loss on the class scores;
cross-entropy for the CNN), with ratios to row (c), and the paper's parameter ratio
to its row (c) (Table 1, "param #" column in Mb: (a) 151.24, (b) 152.44, (c) 24.44,
(e) 25.76, (f) 60.68).
The paper's row (d) is not part of this set. ``--params-only`` skips memory and time.

Our capsule rows recompute their votes in backward (fused dynamic routing;
EM routing in checkpointed chunks), so their memory is far below what an
implementation that stores every vote tensor needs (the reference code's
CapNet stores 8.6 GB of votes alone at batch 128).

    PYTHONPATH=src python benchmarks/encapnet_table1.py [--batch 128] [--memory-batch 128]
        [--threads 2] [--repeats 2] [--rows a,b,c,e,f] [--params-only]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from _common import load_average, peak_rss_increase, set_threads, time_call
from selfcaps.eval import count_flops, count_parameters
from selfcaps.losses import MarginLoss
from selfcaps.models import create_model

#: Li et al. 2018, Table 1, "param #" (Mb).
PAPER_PARAMS = {"a": 151.24, "b": 152.44, "c": 24.44, "e": 25.76, "f": 60.68}

ROWS = {
    "a": ("table1_capnet_dynamic", "CapNet, dynamic routing"),
    "b": ("table1_capnet_em", "CapNet, EM routing"),
    "c": ("table1_cnn", "CNN"),
    "e": ("table1_encapnet_master", "EncapNet, master only"),
    "f": ("table1_encapnet_master_aide", "EncapNet, master/aide"),
}


def train_pass(net: torch.nn.Module, batch: int) -> None:
    """One forward+backward of a random batch, gradients dropped afterwards."""
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    out = net(x)
    if net.score_kind == "logit":
        loss = F.cross_entropy(out, y)
    else:
        loss = MarginLoss()(out.norm(dim=-1) if out.dim() == 3 else out, y)
    loss.backward()
    net.zero_grad(set_to_none=True)


def peak_memory(key: str, batch: int) -> int | None:
    """Peak RSS rise of the first forward+backward of row ``key`` (call in a fresh process)."""
    torch.manual_seed(0)
    net = create_model(ROWS[key][0]).train()
    return peak_rss_increase(lambda: train_pass(net, batch))


def peak_memory_in_subprocess(key: str, batch: int, threads: int) -> float:
    """:func:`peak_memory` in a fresh interpreter, in MB (nan where unavailable)."""
    cmd = [sys.executable, __file__, "--memory-of", key, "--memory-batch", str(batch)]
    out = subprocess.run(
        [*cmd, "--threads", str(threads)], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[-1]) / 2**20 if out and out[-1] != "None" else float("nan")


def measure(key: str, args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    net = create_model(ROWS[key][0]).train()
    flops = count_flops(net, torch.randn(1, 3, 32, 32))
    net.train()
    res = {"params": count_parameters(net), "flops": flops}
    if args.params_only:
        return {**res, "peak_mb": float("nan"), "seconds": float("nan")}
    seconds = time_call(lambda: train_pass(net, args.batch), repeats=args.repeats, warmup=1)
    peak_mb = peak_memory_in_subprocess(key, args.memory_batch, args.threads)
    return {**res, "peak_mb": peak_mb, "seconds": seconds}


def _ratio(v: float, ref: float) -> str:
    return f"{v / ref:6.2f}x" if ref == ref and ref > 0 else "    n/a"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128, help="batch of the timed forward+backward")
    p.add_argument("--memory-batch", type=int, default=128, help="batch of the memory pass")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timed passes (median)")
    p.add_argument("--rows", default="a,b,c,e,f", help="comma-separated rows")
    p.add_argument("--params-only", action="store_true", help="parameters and FLOPs only")
    p.add_argument("--memory-of", choices=sorted(ROWS), help=argparse.SUPPRESS)
    args = p.parse_args()
    set_threads(args.threads)
    if args.memory_of:  # the subprocess of peak_memory_in_subprocess
        print(peak_memory(args.memory_of, args.memory_batch))
        return
    keys = [k for k in args.rows.split(",") if k]
    if "c" not in keys:
        keys.append("c")  # the reference row
    t0 = time.perf_counter()
    res = {}
    for k in keys:
        res[k] = measure(k, args)
        print(f"measured ({k}) in {time.perf_counter() - t0:.0f} s", flush=True)
    load = load_average()
    ref = res["c"]
    measured = (
        "parameters and FLOPs only"
        if args.params_only
        else f"time = median of {args.repeats} forward+backward passes of {args.batch} images; "
        f"memory = peak RSS rise during one pass of {args.memory_batch}"
    )
    print(
        f"\nEncapNet Table 1 on this machine: torch {torch.__version__}, {args.threads} threads, "
        f"load average {load:.1f}; {measured}; paper = the paper's parameter ratio to (c)"
    )
    header = (
        f"{'row':<4}{'network':<25}{'params':>11}{'':>8}{'paper':>8}{'MFLOP/img':>11}{'':>8}"
        f"{'peak MB':>9}{'':>8}{'s/batch':>9}{'':>8}"
    )
    print(header)
    print("-" * len(header))
    for k in sorted(res):
        r = res[k]
        print(
            f"({k}) {ROWS[k][1]:<25}{r['params']:>11,}{_ratio(r['params'], ref['params']):>8}"
            f"{_ratio(PAPER_PARAMS[k], PAPER_PARAMS['c']):>8}"
            f"{r['flops'] / 1e6:>11.1f}{_ratio(r['flops'], ref['flops']):>8}"
            f"{r['peak_mb']:>9.0f}{_ratio(r['peak_mb'], ref['peak_mb']):>8}"
            f"{r['seconds']:>9.2f}{_ratio(r['seconds'], ref['seconds']):>8}"
        )


if __name__ == "__main__":
    main()
