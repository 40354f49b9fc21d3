"""Table of ``experiments/mcae_mask_ratio.sh``: linear probe of the capsules per mask ratio.

    python experiments/mcae_mask_ratio_report.py OUT_DIR

One row per mask ratio: the probe's test top-1 per seed, its mean +- standard deviation, the
validation masked-patch MSE at the end of pretraining, the paired difference to the untrained
network of the same seed (same labelled subset) with its 95% interval and verdict
(``selfcaps.results.paired``), and the minutes of pretraining.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from selfcaps.results.paired import paired_comparison

KEY = "linear_top1_capsule_lf10"


def _probe(run: Path) -> dict | None:
    path = run / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text())
    return metrics if KEY in metrics else None


def ratio_table(out: Path) -> list[str]:
    """The report's lines: the untrained probe per seed, then one table row per mask ratio."""
    control = {}
    for run in sorted(out.glob("untrained_s*")):
        if (m := _probe(run)) is not None:
            control[int(run.name.rsplit("_s", 1)[1])] = float(m[KEY])
    ratios = sorted({r.name.split("_s")[0][len("mask") :] for r in out.glob("mask*_s*")})
    lines = [
        "untrained network: " + ", ".join(f"seed {s} {v:.2f}" for s, v in sorted(control.items())),
        "| mask ratio | probe top-1 per seed | mean +- std | val MSE | minus untrained "
        "[95% interval] | verdict | pretraining minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for ratio in ratios:
        rows = []
        for run in sorted(out.glob(f"mask{ratio}_s*")):
            seed = int(run.name.rsplit("_s", 1)[1])
            if (m := _probe(run)) is not None and seed in control:
                rows.append((seed, float(m[KEY]), m))
        if not rows:
            continue
        values = [v for _, v, _ in rows]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        mse = statistics.mean(float(m["pretrain_val_mse"]) for _, _, m in rows)
        minutes = statistics.mean(float(m["train_time_s"]) for _, _, m in rows) / 60
        if len(rows) >= 2:
            r = paired_comparison(values, [control[s] for s, _, _ in rows])
            diff, verdict = f"{r.diff_mean:+.2f} [{r.diff_low:+.2f}, {r.diff_high:+.2f}]", r.verdict
        else:
            diff, verdict = f"{values[0] - control[rows[0][0]]:+.2f}", "one seed"
        lines.append(
            f"| {ratio} | {', '.join(f'{v:.2f}' for v in values)} | "
            f"{statistics.mean(values):.2f} +- {sd:.2f} | {mse:.4f} | {diff} | {verdict} | "
            f"{minutes:.1f} |"
        )
    return lines


def main() -> None:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    print("\n".join(ratio_table(p.parse_args().out)))


if __name__ == "__main__":
    main()
