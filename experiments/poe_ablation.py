"""PoE capsules: drop each change of the ``center_parents_sparse`` preset in turn, over seeds.

The preset departs from the paper in five settings (docs/methods/poe.md); each arm below
puts one of them back to the paper's value, with the learning rate that value was measured
with where the two go together (the routing normalisation sets the scale of the updates).
``run`` trains ``ARM x SEED`` runs of ``selfcaps run poe --preset center_parents_sparse``
one after the other into ``OUT/ARM_sSEED`` (finished runs are skipped; a run stopped mid-way,
by SIGTERM or a crash, continues with ``selfcaps run poe --out RUN --resume``); ``report``
prints, per arm: classes covered and mean purity in the restricted domain (how
docs/methods/poe.md scores Fig. 2) and in the complete one, per seed, with mean and standard
deviation. Any extra ``key=value`` after ``--`` goes to every run (``--data mnist`` etc.).

Usage::

    PYTHONPATH=src python experiments/poe_ablation.py run OUT [--seeds 0 1 2]
        [--arms full no_center ...] [-- --data-root DIR --data mnist data.train_subset=6000]
    PYTHONPATH=src python experiments/poe_ablation.py report OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from selfcaps.run.rundir import SELFCAPS_COMMAND, args_to_run, run_finished

PRESET = "center_parents_sparse"

#: Arm -> overrides of the preset: ``full`` is the preset, each other arm drops one change.
ARMS: dict[str, tuple[str, ...]] = {
    "full": (),
    "no_center": ("model.center=false",),
    "w_over_children": ("model.normalize=children", "cd.lr_encoder=30"),
    "no_sparsity": ("cd.sparsity=0",),
    "paper_stage3_rule": ("cd.decoder_rule=paper", "cd.lr_decoder=1.0"),
    "paper_generation": ("model.generation=paper",),
}

#: ``metrics.json`` keys reported per run: (column, key).
COLUMNS = (
    ("restricted classes", "purity_classes_covered_restricted"),
    ("restricted purity", "purity_mean_restricted"),
    ("classes", "purity_classes_covered"),
    ("purity", "purity_mean"),
)


def run_args(out: Path, arm: str, seed: int, extra: list[str]) -> list[str]:
    """The arguments of ``selfcaps`` for one run (``run poe ...``)."""
    return [
        "run", "poe", "--preset", PRESET,
        "--out", str(out / f"{arm}_s{seed}"), "--seed", str(seed),
        "--threads", "1", "--no-progress", *ARMS[arm], *extra,
    ]  # fmt: skip


def arm_table(root: Path) -> list[str]:
    """Markdown rows: per arm, each column's value by seed and mean +- sd."""
    arms: dict[str, dict[int, dict[str, float]]] = {}
    for run in sorted(root.iterdir()):
        arm, _, seed = run.name.rpartition("_s")
        if arm in ARMS and seed.isdigit() and run_finished(run):
            m = json.loads((run / "metrics.json").read_text())
            arms.setdefault(arm, {})[int(seed)] = {c: float(m[k]) for c, k in COLUMNS if k in m}
    out = [
        "| arm | overrides | seeds | " + " | ".join(c for c, _ in COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(COLUMNS),
    ]
    for arm in (a for a in ARMS if a in arms):
        seeds = sorted(arms[arm])
        cells = []
        for column, _ in COLUMNS:
            values = [arms[arm][s][column] for s in seeds if column in arms[arm][s]]
            if not values:
                cells.append("-")
                continue
            by = ", ".join(f"{v:g}" for v in values)
            sd = f" +- {statistics.stdev(values):.1f}" if len(values) > 1 else ""
            cells.append(f"{statistics.mean(values):.1f}{sd} ({by})")
        overrides = " ".join(ARMS[arm]) or "(the preset)"
        out.append(f"| {arm} | {overrides} | {len(seeds)} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    """``run`` the arms or ``report`` them."""
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("run", "report"))
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    args = p.parse_args(argv)
    if args.action == "report":
        print("\n".join(arm_table(args.out)))
        return
    for seed in args.seeds:
        for arm in args.arms:
            fresh = run_args(args.out, arm, seed, extra)
            # Finished: skip; SIGTERM, a crash: continue, not restart.
            to_run = args_to_run("poe", args.out / f"{arm}_s{seed}", fresh)
            if to_run is not None:
                subprocess.run([*SELFCAPS_COMMAND, *to_run], check=True)


if __name__ == "__main__":
    main()
