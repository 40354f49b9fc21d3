r"""SparseCaps scale ladder: sparse vs dense vs pixels under affNIST protocol (a), against steps.

A test of the paper's central claim ("sparse generalises better than
dense": RBF SVM on the latent capsules, 90.12% vs 60.63% on affNIST under
protocol (a) after 30,000 steps at batch 128). Every rung trains the ``quick``
preset on full MNIST for a number of steps, once per seed and variant, one run
at a time (``--threads`` torch threads each), and evaluates it with the preset's
SVM protocols. The pixel baseline does not depend on the network, the seed or
the steps (protocol (a) fits and tests on the same affNIST images in every run),
so only the first run computes it (``eval.baselines=true``) and the figure draws
it as a horizontal line.

Finished runs (a ``metrics.json`` in their directory) are skipped, so the
script can be stopped and rerun to extend the ladder. After every run it
rewrites ``ladder.csv`` (one row per run), ``ladder.json`` (mean, standard
deviation and paired sparse - dense differences per rung), ``ladder.md`` (the
same as a markdown table) and the figure.

Examples:
    python experiments/sparsecaps_ladder.py --data-root DIR --out runs/ladder \
        --steps 100 300 --seeds 0 1 2 --set eval.svm_max_train=2000 \
        eval.svm_max_test=2000 eval.affnist_fit=2000 eval.affnist_test=2000
    python experiments/sparsecaps_ladder.py --data-root DIR --out runs/ladder \
        --steps 30000 --seeds 0 1 2                  # the paper's step count (days of CPU)
    python experiments/sparsecaps_ladder.py --out runs/ladder --plot-only \
        --figure docs/figures/sparsecaps_ladder.png
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from selfcaps.methods.sparsecaps.svm import svm_key, svm_metric
from selfcaps.run.rundir import SELFCAPS_COMMAND, args_to_run, run_finished

VARIANTS = ("sparse", "dense")
# (label, variant, key of a row): the curves of the figure. Rows use the method's keys
# (``svm_<protocol>`` = v, the headline; ``svm_<protocol>_masked`` = v' = m v), whichever
# layout the run's metrics.json has (:func:`~selfcaps.methods.sparsecaps.svm.svm_metric`).
V, V_MASKED = "svm_affnist_a", "svm_affnist_a_masked"
CURVES = (
    ("sparse, v (headline: section 2.3, reference code)", "sparse", V),
    ("sparse, v' = m v (section 2.3.1, eq. 4)", "sparse", V_MASKED),
    ("dense, v", "dense", V),
)
PIXELS = "svm_affnist_a_pixels"
# (protocol, feature kind) of the SVM columns of ladder.csv
SVMS = tuple(
    (protocol, kind)
    for protocol in ("mnist", "affnist_a", "affnist_b")
    for kind in ("unmasked", "masked", "pixels")
    if (protocol, kind) != ("affnist_b", "pixels")
)
KEYS = ("support_top1_share", "winning_capsules", "boost_max")
# (name, key of a row) of sparse's two features in the paired differences
FEATURES = (("v", V), ("v'", V_MASKED))


def run_dir(out: Path, steps: int, variant: str, seed: int) -> Path:
    """Where one run of the ladder lives."""
    return out / f"steps{steps}" / f"{variant}_seed{seed}"


def train_and_evaluate(
    target: Path, steps: int, variant: str, seed: int, args: argparse.Namespace, pixels: bool
) -> None:
    """One ``selfcaps run sparsecaps`` of the ladder (skipped if already finished).

    A run that a stop signal interrupted (its ``metrics.json`` says ``stopped_by: signal``)
    or that crashed after a checkpoint is continued with ``--resume`` from its
    ``last.ckpt``, under its saved configuration, instead of being counted as finished.

    ``pixels``: also fit the SVMs on raw pixels (``eval.baselines``).
    """
    fresh = _fresh_args(target, steps, variant, seed, args, pixels)
    to_run = args_to_run("sparsecaps", target, fresh)
    if to_run is None:
        return
    resume = to_run != fresh  # args_to_run chose to continue the run, not start it
    cmd = [*SELFCAPS_COMMAND, *to_run]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with (target.parent / f"{target.name}.log").open("a" if resume else "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)
    minutes = (time.time() - t0) / 60
    load = os.getloadavg()[0]
    print(f"{target}: {minutes:.1f} min (load {load:.1f})", flush=True)


def _fresh_args(
    target: Path, steps: int, variant: str, seed: int, args: argparse.Namespace, pixels: bool
) -> list[str]:
    """The ``selfcaps run sparsecaps`` arguments that train and evaluate one run from scratch."""
    return [
        "run",
        "sparsecaps",
        "--preset",
        args.preset,
        "--data",
        "mnist",
        "--data-root",
        str(args.data_root),
        "--max-steps",
        str(steps),
        "--epochs",
        str(args.max_epochs),
        "--seed",
        str(seed),
        "--variant",
        variant,
        "--threads",
        str(args.threads),
        "--no-progress",
        "--out",
        str(target),
        "trainer.max_time=null",
        f"eval.baselines={str(pixels).lower()}",
        *args.overrides,
    ]


def collect(out: Path) -> list[dict[str, object]]:
    """One row per finished run under ``out`` (runs a stop signal interrupted are left out)."""
    rows: list[dict[str, object]] = []
    for path in sorted(out.glob("steps*/*_seed*/metrics.json")):
        if not run_finished(path.parent):
            continue
        m = json.loads(path.read_text())
        variant, seed = path.parent.name.rsplit("_seed", 1)
        row: dict[str, object] = {
            "steps": int(path.parent.parent.name.removeprefix("steps")),
            "variant": variant,
            "seed": int(seed),
            "steps_trained": m.get("steps"),
            "affnist_source": m.get("affnist_source"),
        }
        row.update({svm_key(p, kind): svm_metric(m, p, kind) for p, kind in SVMS})
        row.update({k: m.get(k) for k in KEYS})
        rows.append(row)
    return rows


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(rows: list[dict[str, object]]) -> dict[str, object]:
    """Per rung: mean and sd of each curve, and the paired sparse - dense differences.

    ``"pixels"`` holds the pixel baseline (one value: it is the same in every run).
    """
    pixels = [float(r[PIXELS]) for r in rows if r.get(PIXELS) is not None]  # type: ignore[arg-type]
    rungs: dict[str, object] = {"pixels": pixels[0]} if pixels else {}
    for steps in sorted({int(r["steps"]) for r in rows}):  # type: ignore[call-overload]
        at = [r for r in rows if r["steps"] == steps]
        rung: dict[str, object] = {}
        for label, variant, key in CURVES:
            vals = [float(r[key]) for r in at if r["variant"] == variant and r[key] is not None]  # type: ignore[arg-type]
            if vals:
                mean, sd = _mean_sd(vals)
                rung[label] = {"mean": mean, "sd": sd, "n": len(vals)}
        by_seed = {(r["variant"], r["seed"]): r for r in at}
        seeds = sorted({int(r["seed"]) for r in at})  # type: ignore[call-overload]
        for name, key in FEATURES:
            diffs = [
                float(by_seed["sparse", s][key])  # type: ignore[arg-type]
                - float(by_seed["dense", s][V])  # type: ignore[arg-type]
                for s in seeds
                if ("sparse", s) in by_seed and ("dense", s) in by_seed
            ]
            if diffs:
                mean, sd = _mean_sd(diffs)
                rung[f"sparse {name} - dense, paired"] = {"mean": mean, "sd": sd, "n": len(diffs)}
        rungs[str(steps)] = rung
    return rungs


def plot(summary: dict[str, object], figure: Path, title: str) -> None:
    """``svm_affnist_a`` (mean and sd over seeds) of each curve against training steps."""
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = sorted(int(s) for s in summary if s != "pixels")
    for i, (label, _, _) in enumerate(CURVES):
        pts = [
            (s, summary[str(s)][label])  # type: ignore[index]
            for s in steps
            if label in summary[str(s)]  # type: ignore[operator]
        ]
        if not pts:
            continue
        xs = [s * 1.03 ** (i - 1) for s, _ in pts]  # nudged apart so the error bars show
        ys = [p["mean"] for _, p in pts]
        sd = [p["sd"] for _, p in pts]
        ax.errorbar(xs, ys, yerr=sd, marker="o", ms=4, capsize=3, label=label)
    if "pixels" in summary:
        ax.axhline(float(summary["pixels"]), color="gray", ls="--", label="raw pixels")  # type: ignore[arg-type]
    ax.set_xscale("log")
    ax.set_xticks(steps, [str(s) for s in steps])
    ax.minorticks_off()
    ax.set_xlabel("training steps (batch 32)")
    ax.set_ylabel("svm_affnist_a (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figure, dpi=120)
    plt.close(fig)


def _cell(entry: object) -> str:
    if not isinstance(entry, dict):
        return "-"
    return f"{entry['mean']:.2f} +/- {entry['sd']:.2f}"


def markdown(summary: dict[str, object]) -> str:
    """The summary as a markdown table: one row per rung, mean +/- sd over seeds."""
    diffs = [f"sparse {name} - dense, paired" for name, _ in FEATURES]
    head = ["steps", "seeds", *(label for label, _, _ in CURVES), *diffs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for steps in sorted(int(s) for s in summary if s != "pixels"):
        rung = summary[str(steps)]
        n = max((e["n"] for e in rung.values() if isinstance(e, dict)), default=0)  # type: ignore[union-attr]
        cells = [_cell(rung.get(key)) for key in head[2:]]  # type: ignore[union-attr]
        lines.append("| " + " | ".join([str(steps), str(n), *cells]) + " |")
    if "pixels" in summary:
        lines.append(f"\nraw pixels (same fit and test images): {float(summary['pixels']):.2f}")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def compare(out: Path, baseline: Path) -> str:
    """Markdown: ``out``'s runs minus ``baseline``'s runs of the same steps, variant and seed.

    For a ladder run with one setting changed (e.g. ``--set model.support=chunk``)
    against the ladder without it; also each run minus the baseline's ``dense`` run.
    """
    base = {(r["steps"], r["variant"], r["seed"]): r for r in collect(baseline)}
    lines = [
        "| steps | variant | feature | minus baseline, paired | minus baseline dense, paired |"
    ]
    lines.append("|---|---|---|---|---|")
    rows = collect(out)
    for steps, variant in sorted({(r["steps"], r["variant"]) for r in rows}):  # type: ignore[type-var]
        at = [r for r in rows if r["steps"] == steps and r["variant"] == variant]
        for kind, key in FEATURES:
            same = [
                float(r[key]) - float(base[steps, variant, r["seed"]][key])  # type: ignore[arg-type]
                for r in at
                if (steps, variant, r["seed"]) in base
            ]
            dense = [
                float(r[key]) - float(base[steps, "dense", r["seed"]][V])  # type: ignore[arg-type]
                for r in at
                if (steps, "dense", r["seed"]) in base
            ]
            cells = [
                f"{m:+.2f} +/- {sd:.2f} (n {len(d)})" if d else "-"
                for d in (same, dense)
                for m, sd in [_mean_sd(d) if d else (0.0, 0.0)]
            ]
            lines.append(f"| {steps} | {variant} | {kind} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, figure: Path) -> None:
    """``ladder.csv``, ``ladder.json`` and the figure from the finished runs."""
    rows = collect(out)
    if not rows:
        return
    with (out / "ladder.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = summarise(rows)
    (out / "ladder.json").write_text(json.dumps(summary, indent=2))
    (out / "ladder.md").write_text(markdown(summary))
    seeds = len({r["seed"] for r in rows})
    source = str(rows[0]["affnist_source"]).split(" (")[0]
    title = (
        f"SparseCaps quick width, full MNIST: protocol (a) on {source}, "
        f"mean +/- sd over up to {seeds} seeds"
    )
    plot(summary, figure, title)


def main(argv: list[str] | None = None) -> int:
    """Run the ladder (or only redraw it with ``--plot-only``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="directory of the ladder's runs")
    p.add_argument("--data-root", type=Path, help="holds MNIST/raw")
    p.add_argument("--steps", type=int, nargs="+", default=[100, 300, 1000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--preset", default="quick")
    p.add_argument("--max-epochs", type=int, default=1000, help="the budget is --steps")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--figure", type=Path, help="default: <out>/sparsecaps_ladder.png")
    p.add_argument("--plot-only", action="store_true")
    p.add_argument(
        "--baseline",
        type=Path,
        help="another ladder's --out: write compare.md (this ladder minus it, paired by seed)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides for every run",
    )
    args = p.parse_args(argv)
    figure = args.figure or args.out / "sparsecaps_ladder.png"
    if not args.plot_only:
        if args.data_root is None:
            p.error("--data-root is required to train")
        first = True
        for steps in sorted(args.steps):
            for seed in args.seeds:
                for variant in args.variants:
                    target = run_dir(args.out, steps, variant, seed)
                    train_and_evaluate(target, steps, variant, seed, args, pixels=first)
                    first = False
                    write_outputs(args.out, figure)
    write_outputs(args.out, figure)
    if args.baseline:
        (args.out / "compare.md").write_text(compare(args.out, args.baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
