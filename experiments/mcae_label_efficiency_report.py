"""Table of ``experiments/mcae_label_efficiency.sh``: pretrained vs scratch on the same labels.

    python experiments/mcae_label_efficiency_report.py OUT_DIR [--fraction F] [--finetune-epochs N]

Prints one row per seed (the labelled subset), the mean +- standard deviation of each arm, the
paired difference with its 95% interval and the verdict (``selfcaps.results.paired``), and the
minutes each run took.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from selfcaps.config.checks.labels import label_suffix
from selfcaps.results.paired import paired_comparison
from selfcaps.run.rundir import run_finished


def _load(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def main() -> None:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--finetune-epochs", type=int, help="the FINETUNE_EPOCHS of the script")
    args = p.parse_args()
    every = args.fraction == 1  # the paper's protocol: other finetuning seeds, not subsets
    sfx = "" if every else label_suffix(args.fraction)
    other = "_seed" if every else "_ls"
    (pre_dir,) = sorted(d for d in args.out.glob("pretrained_s*") if d.is_dir())
    pre = _load(pre_dir)
    pre_seed = int(pre_dir.name.rsplit("_s", 1)[1])
    rows = []
    ft = "" if args.finetune_epochs is None else f"_ft{args.finetune_epochs}"
    for scratch_dir in sorted(d for d in args.out.glob(f"scratch{ft}_s*") if d.is_dir()):
        seed = int(scratch_dir.name.rsplit("_s", 1)[1])
        # keys: finetune_top1_lf10_ls1_ft20 (a subset), finetune_top1_ft20_seed1 (a finetuning)
        draw = "" if seed == pre_seed else f"{other}{seed}"
        key = f"finetune_top1{sfx}" + (ft + draw if every else draw + ft)
        if key not in pre or not run_finished(scratch_dir):
            continue  # not finished (yet), or stopped by a signal
        scratch = _load(scratch_dir)
        rows.append((seed, float(pre[key]), float(scratch[f"finetune_top1{sfx}"]), scratch))
    minutes = pre.get("train_time_s", float("nan")) / 60
    print(
        f"pretraining: {pre_dir.name}, {pre['pretrain_epochs']} epochs, "
        f"val MSE {pre['pretrain_val_mse']:.4f}, {minutes:.1f} min of pretraining"
    )
    name = "all labels" if every else sfx[1:]
    print(
        f"\n| seed ({'finetuning' if every else 'subset'}) | pretrained {name} | scratch {name} "
        "| difference |"
    )
    print("|---|---|---|---|")
    for seed, a, b, _ in rows:
        print(f"| {seed} | {a:.2f} | {b:.2f} | {a - b:+.2f} |")
    if len(rows) >= 2:
        r = paired_comparison([a for _, a, _, _ in rows], [b for _, _, b, _ in rows])
        print(
            f"| mean +- std | {r.treatment_mean:.2f} +- {r.treatment_std:.2f} | "
            f"{r.control_mean:.2f} +- {r.control_std:.2f} | {r.diff_mean:+.2f} "
            f"[{r.diff_low:+.2f}, {r.diff_high:+.2f}] |"
        )
        print(f"\nverdict: {r.verdict} (95% paired interval over {r.n} seeds)")
    minutes = [s.get(f"finetune_time_s{sfx}", float("nan")) / 60 for *_, s in rows]
    print(f"finetuning: {args.finetune_epochs or pre['finetune_epochs']} epochs")
    print("scratch finetuning minutes: " + ", ".join(f"{m:.1f}" for m in minutes))


if __name__ == "__main__":
    main()
