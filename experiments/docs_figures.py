"""Figures for the manual: small PNGs from real runs, with where they came from.

Two ways in:

    # train a run, then collect its figures (the run directory stays under --runs-root)
    python experiments/docs_figures.py run coca --preset quick --data mnist5k --threads 1 \
        trainer.max_time=null          # any further key=value goes to selfcaps run

    # collect the figures of runs that already exist (any `selfcaps run` output directory)
    python experiments/docs_figures.py collect runs/coca/mnist5k/20261123-103000 ...

Each run's `figures/*.png` is downsized (longest side at most `--max-side` pixels, colours
quantised when that makes the file smaller) into `docs/figures/<method>/<stem>.png`, each file
under `--max-kb` kilobytes. Beside them `docs/figures/<method>/figures.json` records the exact
command (when this script ran it), preset, dataset, date, cores, threads, git commit and the
run's headline metrics, so every figure on a page can be regenerated. Collecting a second run
of the same method replaces that method's figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml
from PIL import Image

from selfcaps.run.rundir import SELFCAPS_COMMAND, args_to_run

ROOT = Path(__file__).resolve().parents[1]
DOCS_FIGURES = ROOT / "docs" / "figures"

#: metrics.json keys copied into figures.json: what a reader needs to judge the figures.
SUMMARY_KEYS = ("epochs_trained", "steps", "train_time_s", "best_epoch", "best_checkpoint")
SUMMARY_PREFIXES = ("knn_top", "svm_top", "finetune_top", "test_top", "purity", "poe_")


def _git_commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _run_commit(metrics: dict[str, Any]) -> str:
    """The commit the run recorded (short, ``+dirty`` kept); the checkout's for older runs."""
    commit = metrics.get("git_commit")
    if not commit:
        return _git_commit()
    head, plus, rest = str(commit).partition("+")
    return head[:7] + plus + rest


def shrink_png(src: Path, max_side: int, max_kb: float) -> bytes:
    """Return ``src`` as PNG bytes no larger than ``max_kb`` kilobytes.

    The image is first scaled so that its longest side is at most ``max_side`` pixels, then
    saved both as full-colour and as a 256-colour palette PNG; the smaller is kept. While it is
    still too large, the longest side shrinks by 20%.

    Args:
        src: a PNG written by a run (RGBA or RGB).
        max_side: longest side in pixels after downsizing.
        max_kb: size limit of the result in kilobytes (1 kB = 1024 bytes).

    Returns:
        The encoded PNG.

    Raises:
        ValueError: if even a 64-pixel version exceeds ``max_kb``.
    """
    image = Image.open(src).convert("RGBA")
    background = Image.new("RGBA", image.size, "white")
    image = Image.alpha_composite(background, image).convert("RGB")
    side = max_side
    while side >= 64:
        scaled = image.copy()
        scaled.thumbnail((side, side), Image.Resampling.LANCZOS)
        candidates = []
        for variant in (scaled, scaled.quantize(colors=256, method=Image.Quantize.MEDIANCUT)):
            buf = io.BytesIO()
            variant.save(buf, format="PNG", optimize=True)
            candidates.append(buf.getvalue())
        best = min(candidates, key=len)
        if len(best) <= max_kb * 1024:
            return best
        side = int(side * 0.8)
    raise ValueError(f"{src}: cannot be brought under {max_kb} kB")


def collect(
    run_dir: Path, *, max_side: int, max_kb: float, command: str | None, dest: str | None = None
) -> Path:
    """Copy the downsized figures of one run into ``docs/figures/<method>/``.

    Args:
        run_dir: a run directory with ``config.yaml``, ``metrics.json`` and ``figures/``.
        max_side: longest side of each PNG in pixels.
        max_kb: size limit of each PNG in kilobytes.
        command: the command that produced the run, if this script ran it.
        dest: directory name under ``docs/figures/`` (default: the run's method).

    Returns:
        The directory the figures were written to.

    Raises:
        FileNotFoundError: naming the missing file when ``run_dir`` is not a finished run.
        ValueError: ``dest`` is not a plain directory name.
    """
    if dest is not None and (not dest or Path(dest).name != dest or dest.startswith(".")):
        raise ValueError(f"--dest: expected a directory name under docs/figures/, got {dest!r}")
    for name in ("config.yaml", "metrics.json", "figures"):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir} is not a finished run: {name} is missing")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    method = metrics.get("method") or config["method"]
    out = DOCS_FIGURES / (dest or method)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    written = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        data = shrink_png(png, max_side, max_kb)
        (out / png.name).write_bytes(data)
        written.append({"file": png.name, "kb": round(len(data) / 1024, 1)})
    summary = {
        k: v for k, v in metrics.items() if k in SUMMARY_KEYS or k.startswith(SUMMARY_PREFIXES)
    }
    record: dict[str, Any] = {
        "method": method,
        "preset": metrics.get("preset"),
        "dataset": metrics.get("dataset"),
        "command": command or "(collected from an existing run; see its config.yaml)",
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "cores": os.cpu_count(),
        "threads": (config.get("trainer") or {}).get("threads"),
        "seed": config.get("seed"),
        "git_commit": _run_commit(metrics),
        "torch_version": metrics.get("torch_version"),
        "cpu": metrics.get("cpu"),  # None for runs made before metrics.json recorded it
        "cpu_features": metrics.get("cpu_features"),
        "metrics": summary,
        "figures": written,
    }
    (out / "figures.json").write_text(json.dumps(record, indent=2) + "\n")
    return out


def run_and_collect(args: argparse.Namespace) -> Path:
    """Train one run with ``selfcaps run`` from this checkout, then collect its figures."""
    run_dir = Path(args.runs_root) / f"{args.method}_{args.preset}_{args.data}"
    cli = ["selfcaps", "run", args.method, "--preset", args.preset, "--data", args.data]
    cli += ["--threads", str(args.threads), "--seed", str(args.seed), "--no-progress"]
    cli += args.overrides
    # A run a stop signal interrupted continues from its last checkpoint, under its saved
    # configuration (the same as cli's), instead of being collected without its evaluation.
    to_run = args_to_run(args.method, run_dir, [*cli[1:], "--out", str(run_dir)])
    if to_run is None:
        print(f"{run_dir} is finished; collecting it (delete it to train again)")
        return collect(run_dir, max_side=args.max_side, max_kb=args.max_kb, command=None)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    print("+", shlex.join(["selfcaps", *to_run]), flush=True)
    subprocess.run([*SELFCAPS_COMMAND, *to_run], env=env, check=True)
    # The recorded command leaves out --out: the run directory is local to the machine.
    return collect(run_dir, max_side=args.max_side, max_kb=args.max_kb, command=shlex.join(cli))


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run ``run`` or ``collect``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-side", type=int, default=720, help="longest side in pixels")
    p.add_argument("--max-kb", type=float, default=150.0, help="size limit per PNG")
    sub = p.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="train a run with `selfcaps run`, then collect it")
    r.add_argument("method")
    r.add_argument("--preset", default="quick")
    r.add_argument("--data", default="mnist5k")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--runs-root", default="runs/docs_figures")
    c = sub.add_parser("collect", help="collect the figures of finished runs")
    c.add_argument("run_dirs", nargs="+", type=Path)
    c.add_argument(
        "--command",
        help="the selfcaps command that made the run (one run directory), for figures.json",
    )
    c.add_argument(
        "--dest",
        help="write into docs/figures/DEST/ instead of docs/figures/<method>/ (one run directory)",
    )
    args, extra = p.parse_known_args(argv)
    if args.action == "run":
        bad = [a for a in extra if "=" not in a or a.startswith("-")]
        if bad:
            p.error(f"unrecognized arguments: {' '.join(bad)} (overrides are key=value)")
        args.overrides = extra
    elif extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.action == "run":
        outs = [run_and_collect(args)]
    else:
        if (args.command or args.dest) and len(args.run_dirs) > 1:
            p.error("--command and --dest describe one run directory; collect others separately")
        outs = [
            collect(
                d, max_side=args.max_side, max_kb=args.max_kb, command=args.command, dest=args.dest
            )
            for d in args.run_dirs
        ]
    for out in outs:
        print(f"wrote {out.relative_to(ROOT)}: {sorted(f.name for f in out.iterdir())}")


if __name__ == "__main__":
    main()
