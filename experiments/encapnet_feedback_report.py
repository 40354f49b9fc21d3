"""Tables from the runs of ``experiments/encapnet_feedback_ablation.sh`` (EncapNet).

Prints, for every run directory under ``ROOT``: the setting, steps, training seconds, validation
and test top-1; then one row per arm (runs named ``ARM_sSEED``): test top-1 per seed, mean and
standard deviation, and the difference from the ``off`` arm (``off_X`` for an arm ``..._X``)
paired by seed with its 95% interval and verdict (``selfcaps.results.paired``); and for runs with
the gradient probe (``loss.probe_every``), the trace of the margin loss, the weighted feedback
loss ``lambda * sum W``, the norms of the gradients each term sends into the network's weights,
their ratio and cosine.

    python experiments/encapnet_feedback_report.py ROOT [--trace RUN ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from omegaconf import OmegaConf

from selfcaps.results.paired import paired_comparison
from selfcaps.run.rundir import run_finished

PROBE = ("probe_cls_loss", "probe_ot_loss", "probe_grad_cls", "probe_grad_ot", "probe_grad_cos")


def probe_trace(run: Path, every: int) -> list[dict[str, float]]:
    """The probed steps of a run (Lightning repeats the last value at log steps in between)."""
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("probe_grad_cls")]
    return [
        {"step": int(r["step"]) + 1, **{k: float(r[k]) for k in PROBE}}
        for r in rows
        if (int(r["step"]) + 1) % every == 0
    ]


def summary(run: Path) -> dict[str, str]:
    """One row of the results table."""
    m = json.loads((run / "metrics.json").read_text())
    cfg = OmegaConf.load(run / "config.yaml")
    c = cfg.loss
    every = int(c.probe_every)
    trace = probe_trace(run, every) if every and c.ot else []
    late = [t for t in trace if t["step"] > 100]
    ratio = (
        sum(t["probe_grad_ot"] / t["probe_grad_cls"] for t in late) / len(late) if late else None
    )
    setting = (
        f"lambda {c.ot_weight:g}, {len(c.units)} units, detach_plan {c.detach_plan}, "
        f"epsilon {c.epsilon:g}"
        if c.ot
        else "off"
    )
    return {
        "run": run.name,
        "seed": str(cfg.seed),
        "variant": m["variant"],
        "feedback": setting,
        "steps": str(m["steps"]),
        "train s": f"{m['train_time_s']:.0f}",
        "val top-1": f"{m['best_val_top1']:.2f}",
        "test top-1": f"{m['test_top1']:.2f}",
        "OT/margin grad (steps > 100)": f"{ratio:.2f}" if ratio is not None else "-",
    }


def arm_table(rows: list[dict[str, str]]) -> list[str]:
    """Markdown rows: per arm, test top-1 by seed, mean +- sd, and minus ``off`` paired by seed."""
    arms: dict[str, dict[int, float]] = {}
    for r in rows:
        arm, _, seed = r["run"].rpartition("_s")
        if arm and seed.isdigit():
            arms.setdefault(arm, {})[int(seed)] = float(r["test top-1"])

    def control(arm: str) -> str:
        """``off``, or ``off_X`` for an arm ``..._X`` when that exists (``lambda1_beta99``)."""
        for name in arms:
            if name.startswith("off_") and arm.endswith(name[3:]) and arm != name:
                return name
        return "off"

    out = [
        "| arm | test top-1 by seed | mean +- sd | minus off (or off_X), paired by seed "
        "(95% interval) |",
        "|---|---|---|---|",
    ]
    for arm, by_seed in arms.items():
        seeds = sorted(by_seed)
        values = [by_seed[s] for s in seeds]
        mean = statistics.mean(values)
        sd = statistics.stdev(values) if len(values) > 1 else None
        ref = control(arm)
        off = arms.get(ref, {})
        shared = [s for s in seeds if s in off]
        versus = "-"
        if not arm.startswith("off") and shared:
            c = paired_comparison([by_seed[s] for s in shared], [off[s] for s in shared])
            diffs = ", ".join(f"{by_seed[s] - off[s]:+.2f}" for s in shared)
            interval = f" [{c.diff_low:+.2f}, {c.diff_high:+.2f}], {c.verdict}" if c.n > 1 else ""
            versus = f"{c.diff_mean:+.2f} ({diffs}){interval}"
            versus += "" if ref == "off" else f" vs {ref}"
        by = ", ".join(f"s{s} {by_seed[s]:.2f}" for s in seeds)
        spread = f"{mean:.2f} +- {sd:.2f}" if sd is not None else f"{mean:.2f}"
        out.append(f"| {arm} | {by} | {spread} | {versus} |")
    return out


def main() -> None:
    """Print the results table and the requested probe traces."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--trace", nargs="*", default=[], help="runs whose probe trace to print")
    p.add_argument("--every", type=int, default=20, help="loss.probe_every of the runs")
    args = p.parse_args()
    runs = sorted(d for d in args.root.iterdir() if run_finished(d))  # not a stopped run
    rows = [summary(r) for r in runs]
    if rows:
        keys = list(rows[0])
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rows:
            print("| " + " | ".join(r[k] for k in keys) + " |")
        print()
        print("\n".join(arm_table(rows)))
    for name in args.trace:
        print(f"\n{name}: step, margin loss, lambda*sum W, |g margin|, |g OT|, ratio, cosine")
        for t in probe_trace(args.root / name, args.every):
            print(
                f"{t['step']:5d} {t['probe_cls_loss']:.3f} {t['probe_ot_loss']:.4f} "
                f"{t['probe_grad_cls']:.3f} {t['probe_grad_ot']:.3f} "
                f"{t['probe_grad_ot'] / t['probe_grad_cls']:.2f} {t['probe_grad_cos']:+.3f}"
            )


if __name__ == "__main__":
    main()
