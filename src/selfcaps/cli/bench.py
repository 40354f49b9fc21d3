"""``selfcaps bench``: every method on every dataset it supports, same budget, one report.

Each (method, dataset) pair runs as its own ``selfcaps run`` process with the
method's ``quick`` preset (``quick_<dataset>`` when the method ships one; on a
GPU the ``paper`` presets with ``--paper``), capped at ``--budget`` minutes of
training, in ``DIR/runs/<method>/<dataset>``. Finished pairs (a ``metrics.json``
exists) are not rerun; interrupted ones are resumed from their ``last.ckpt``.
Then ``DIR/report.md``, ``DIR/report.html`` (self-contained) and
``DIR/results.csv`` are written from the run directories.

``--suite claims`` runs each paper's central claim instead, as a paired, seeded
comparison (:mod:`selfcaps.cli.claims`); ``--suite all`` runs both.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
from pathlib import Path

from selfcaps.cli.config import ConfigError, default_preset
from selfcaps.cli.suite_runs import (
    BenchRow,
    environment,
    execute,
    fmt_value,
    png_figure_html,
    run_command,
)
from selfcaps.methods import list_methods
from selfcaps.methods.atomic import atomic_write_text
from selfcaps.records import get_record

__all__ = [
    "BenchRow",
    "add_bench_arguments",
    "cmd_bench",
    "collect_rows",
    "environment",
    "execute",
    "png_figure_html",
    "render_report",
    "run_command",
]

DEFAULT_DATASETS = ("mnist5k", "mnist", "cifar10")
DEFAULT_BUDGET = 10.0  # training minutes per (method, dataset) pair of the methods suite
COLUMNS = [
    "dataset", "method", "protocol", "top1", "top5", "paper_top1", "pixels_top1",
    "random_init_top1", "params", "flops_per_image", "train_images_per_s", "wall_time_min",
    "status", "notes", "git_commit", "run_dir", "command",
]  # fmt: skip


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps bench``."""
    p.add_argument("--methods", nargs="+", default=None, help="default: all")
    p.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS))
    p.add_argument(
        "--suite",
        choices=("methods", "claims", "all"),
        default="methods",
        help="methods: every method on its datasets (default); claims: each paper's central "
        "claim as a paired, seeded comparison; all: both",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MIN",
        help=f"training minutes per run (methods suite: default {DEFAULT_BUDGET:g}; claims "
        "suite: default none, the presets' epoch and step budgets)",
    )
    p.add_argument(
        "--seeds", type=int, default=3, metavar="N", help="claims suite: seeds 0..N-1 per arm"
    )
    p.add_argument(
        "--tier",
        choices=("short", "long"),
        default="short",
        help="claims suite: short (default; every claim at a budget that fits about two hours "
        "on 2 CPU cores) or long (each claim at the longer rung its method's page names; runs "
        "in DIR/claims-long)",
    )
    p.add_argument("--out", type=Path, default=Path("bench"))
    p.add_argument("--data-root", help="dataset root for every run")
    p.add_argument("--paper", action="store_true", help="use the paper presets (meant for GPUs)")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="key=value",
        help="overrides applied to every run (e.g. data.train_subset=512)",
    )
    p.add_argument("--report-only", action="store_true", help="only rebuild the report")


def plan(args: argparse.Namespace) -> list[BenchRow]:
    """The (method, dataset) pairs to run, with their run directories and commands."""
    methods = args.methods or list_methods()
    for m in methods:
        get_record(m)  # unknown names fail here, with the valid ones listed
    rows = []
    for dataset in args.datasets:
        for m in methods:
            if dataset not in get_record(m).bench_datasets:
                continue
            run_dir = args.out / "runs" / m / dataset.replace(":", "_").replace("/", "_")
            preset = "paper" if args.paper else default_preset(m, dataset)
            cmd = run_command(
                m,
                preset,
                dataset,
                run_dir,
                budget=_methods_budget(args),
                data_root=args.data_root,
                extra=args.set,
            )
            rows.append(BenchRow(dataset, m, run_dir, cmd))
    if not rows:
        raise ConfigError(f"no method supports the datasets {args.datasets}")
    return rows


def _methods_budget(args: argparse.Namespace) -> float:
    return DEFAULT_BUDGET if args.budget is None else args.budget


def collect_rows(rows: list[BenchRow]) -> list[BenchRow]:
    """Read each row's metrics from its run directory."""
    for row in rows:
        path = row.run_dir / "metrics.json"
        if path.is_file():
            row.metrics = json.loads(path.read_text())
            if row.status == "not run":
                row.status = "done (earlier)"
    return rows


_HEAD = [
    "method",
    "protocol",
    "top-1",
    "top-5",
    "paper top-1",
    "pixels",
    "random init",
    "params",
    "FLOPs/img",
    "train img/s",
    "wall (min)",
    "status",
    "notes",
    "commit",
]
_KEYS = [
    "method",
    "protocol",
    "top1",
    "top5",
    "paper_top1",
    "pixels_top1",
    "random_init_top1",
    "params",
    "flops_per_image",
    "train_images_per_s",
    "wall_time_min",
    "status",
    "notes",
    "git_commit",
]


def render_report(rows: list[BenchRow], out: Path, budget: float, extra_html: str = "") -> None:
    """Write ``report.md``, ``report.html`` and ``results.csv`` under ``out``.

    Args:
        rows: The methods suite's rows (may be empty when only the claims suite ran).
        out: The bench directory.
        budget: Training minutes per pair (for the header).
        extra_html: Further sections of ``report.html`` (the claims suite's).
    """
    env = environment()
    datasets = list(dict.fromkeys(r.dataset for r in rows))
    md = [f"# selfcaps bench ({budget:g} training minutes per pair)", ""]
    md += [" · ".join(f"**{k}** {v}" for k, v in env.items()), ""]
    body = [
        f"<h1>selfcaps bench ({budget:g} training minutes per pair)</h1>",
        "<p>"
        + " · ".join(f"<b>{html.escape(k)}</b> {html.escape(v)}" for k, v in env.items())
        + "</p>",
    ]
    for ds in datasets:
        ds_rows = [r for r in rows if r.dataset == ds]
        md += [f"## {ds}", "", "| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
        body += [
            f"<h2>{html.escape(ds)}</h2>",
            "<table><tr>" + "".join(f"<th>{h}</th>" for h in _HEAD) + "</tr>",
        ]
        for r in ds_rows:
            vals = r.values()
            cells = [fmt_value(vals[k]) for k in _KEYS]
            md.append("| " + " | ".join(cells) + " |")
            body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        body.append("</table>")
        md += ["", "Reproduce:", "", "```bash"] + [" ".join(r.command) for r in ds_rows] + ["```"]
        body.append(
            "<pre>" + html.escape("\n".join(" ".join(r.command) for r in ds_rows)) + "</pre>"
        )
        for r in ds_rows:
            figs = sorted((r.run_dir / "figures").glob("*.png")) if r.run_dir.is_dir() else []
            if not figs:
                continue
            md += ["", f"### {r.method} on {ds}", ""]
            body.append(f"<h3>{html.escape(r.method)} on {html.escape(ds)}</h3>")
            for f in figs:
                rel = Path(os.path.relpath(f.resolve(), out.resolve())).as_posix()
                md.append(f"![{r.method} {f.stem}]({rel})")
                body.append(png_figure_html(f.read_bytes(), f.stem))
        md.append("")
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1400px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}pre{background:#f6f6f6;padding:8px;overflow-x:auto}"
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>selfcaps bench</title>"
        f"<style>{style}</style></head><body>" + "\n".join(body) + extra_html + "</body></html>"
    )
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for r in rows:
        writer.writerow(r.values())
    atomic_write_text(out / "report.md", "\n".join(md))
    atomic_write_text(out / "report.html", page)
    atomic_write_text(out / "results.csv", buf.getvalue())


def cmd_bench(args: argparse.Namespace) -> int:
    """``selfcaps bench``: the methods suite, the claims suite, or both."""
    from selfcaps.cli import claims as claims_suite

    run_methods, run_claims = args.suite in ("methods", "all"), args.suite in ("claims", "all")
    rows = plan(args)
    plans = claims_suite.plan_claims(args) if run_claims else []
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for row in rows if run_methods else []:
            execute(row)
        claims_suite.run_claims(plans)
    collect_rows(rows)
    if not run_methods:  # keep the methods suite's earlier results in the report, nothing else
        rows = [r for r in rows if r.status != "not run"]
    section = ""
    if plans:
        claims_suite.collect_claims(plans)
        budget = (
            f"{args.budget:g} training minutes per run"
            if args.budget is not None
            else "the presets' epoch and step budgets"
        )
        budget += "; long tier" if getattr(args, "tier", "short") == "long" else ""
        section = claims_suite.render_claims(plans, args.out, args.seeds, budget)
        for p in plans:
            print(f"[bench] claim {p.method}: {p.verdict}", flush=True)
        print(f"[bench] claims: {args.out / 'claims.md'}", flush=True)
    render_report(rows, args.out, _methods_budget(args), section)
    runs = rows + [r for p in plans for rs in p.runs.values() for r in rs]
    failed = [r for r in runs if r.status.startswith("failed")]
    print(
        f"[bench] report: {args.out / 'report.md'} ({len(runs) - len(failed)} of {len(runs)} "
        "runs with results)"
    )
    return 1 if failed else 0
