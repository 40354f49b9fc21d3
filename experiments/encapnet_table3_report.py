"""One table from the runs of ``encapnet_table3.py``: each Table 3 case against the paper.

For every case whose two arms have runs (``OUT/ARM_sSEED/metrics.json``): the paper's label and
numbers (error %), the paper's direction, each arm's test top-1 mean +- sd over the seeds both
arms share, the paired difference (arm - control, by seed) with its 95% interval
(``selfcaps.results.paired``) and the verdict against the paper's direction. With fewer than three
shared seeds there is no verdict ("not resolved (too few seeds)") and the per-seed differences are
printed instead of an interval. Cases whose paper direction is ``=`` ("barely matter") are
*reversed* when the interval excludes 0.

    python experiments/encapnet_table3_report.py OUT [--quotes]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

from selfcaps.results.paired import NOT_RESOLVED, REVERSED, paired_comparison
from selfcaps.run.rundir import run_finished

_spec = importlib.util.spec_from_file_location(
    "encapnet_table3", Path(__file__).with_name("encapnet_table3.py")
)
assert _spec is not None and _spec.loader is not None
table3 = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = table3  # the dataclass needs its module registered
_spec.loader.exec_module(table3)

TOO_FEW = "not resolved (too few seeds)"
MIN_SEEDS = 3


def finished_metrics(root: Path) -> list[Path]:
    """``metrics.json`` of every finished run under ``root`` (not of runs stopped mid-way)."""
    return [p for p in sorted(root.glob("*_s*/metrics.json")) if run_finished(p.parent)]


def arm_results(root: Path) -> dict[str, dict[int, float]]:
    """Test top-1 of every finished run under ``root``, by arm and seed."""
    out: dict[str, dict[int, float]] = {}
    for path in finished_metrics(root):
        arm, _, seed = path.parent.name.rpartition("_s")
        if arm in table3.ARMS and seed.isdigit():
            out.setdefault(arm, {})[int(seed)] = float(json.loads(path.read_text())["test_top1"])
    return out


def _mean_sd(values: list[float]) -> str:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return f"{mean:.2f} (n = 1)"
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.2f} +- {sd:.2f} (n = {len(values)})"


def case_row(case: table3.Case, results: dict[str, dict[int, float]]) -> list[str] | None:
    """The table row of one case, or ``None`` when no seed has both arms."""
    arm, control = results.get(case.arm, {}), results.get(case.control, {})
    seeds = sorted(set(arm) & set(control))
    if not seeds:
        return None
    a, c = [arm[s] for s in seeds], [control[s] for s in seeds]
    r = paired_comparison(a, c)
    diffs = ", ".join(f"{x - y:+.2f}" for x, y in zip(a, c, strict=True))
    if r.n < MIN_SEEDS:
        diff, verdict = f"{r.diff_mean:+.2f} (per seed: {diffs})", TOO_FEW
    else:
        diff = f"{r.diff_mean:+.2f} [{r.diff_low:+.2f}, {r.diff_high:+.2f}] ({diffs})"
        verdict = r.verdict
        if case.direction == "=":
            verdict = REVERSED if r.diff_low > 0 or r.diff_high < 0 else NOT_RESOLVED
    direction = {"+": f"{case.arm} ahead", "=": "no difference"}[case.direction]
    return [
        case.name,
        case.paper_case,
        case.paper,
        direction,
        f"{case.arm} {_mean_sd(a)}",
        f"{case.control} {_mean_sd(c)}",
        diff,
        verdict,
    ]


HEADER = [
    "case",
    "Table 3",
    "paper (error %)",
    "paper's direction",
    "arm: test top-1",
    "control: test top-1",
    "arm - control, paired [95% interval] (per seed)",
    "verdict",
]


def table(root: Path) -> list[str]:
    """Markdown lines: one row per case with runs, then the cases still missing runs."""
    results = arm_results(root)
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    missing = []
    for case in table3.CASES:
        row = case_row(case, results)
        if row is None:
            missing.append(case.name)
        else:
            lines.append("| " + " | ".join(row) + " |")
    if missing:
        lines.append("")
        lines.append(f"no paired runs yet: {', '.join(missing)}")
    return lines


def main() -> None:
    """Print the table (and, with ``--quotes``, the sentence of the paper behind each case)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--quotes", action="store_true", help="print each case's sentence")
    args = p.parse_args()
    steps = {json.loads(m.read_text()).get("steps") for m in finished_metrics(args.root)}
    print(f"{args.root}: CIFAR-10 test top-1 (%), steps per run {sorted(map(str, steps))}\n")
    print("\n".join(table(args.root)))
    if args.quotes:
        print()
        for case in table3.CASES:
            print(f"- {case.name} ({case.paper_case}): \u201c{case.quote}\u201d")


if __name__ == "__main__":
    main()
