"""The bench suites: every method on every dataset it supports, same budget, one report.

Each (method, dataset) pair runs as its own ``selfcaps run`` process with the
method's ``quick`` preset (``quick_<dataset>`` when the method ships one; on a
GPU the ``paper`` presets with ``--paper``), capped at ``--budget`` minutes of
training, in ``DIR/runs/<method>/<dataset>``. Finished pairs (a ``metrics.json``
exists) are not rerun; interrupted ones are resumed from their ``last.ckpt``.
Then ``DIR/report.md``, ``DIR/report.html`` (self-contained) and
``DIR/results.csv`` are written from the run directories.

``--suite claims`` runs each paper's central claim instead, as a paired, seeded
comparison (:mod:`selfcaps.results.claims`); ``--suite all`` runs both.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from selfcaps.config.loading import ConfigError, default_preset
from selfcaps.engine.atomic import atomic_write_text
from selfcaps.methods import list_methods
from selfcaps.records import get_record
from selfcaps.results.suite_runs import (
    BenchRow,
    environment,
    execute,
    fmt_value,
    png_figure_html,
    run_command,
)

__all__ = [
    "BenchRow",
    "SuiteRequest",
    "collect_rows",
    "environment",
    "execute",
    "methods_budget",
    "plan",
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


@dataclass
class SuiteRequest:
    """What ``selfcaps bench`` runs: the methods, datasets, budget, seeds and where.

    Attributes:
        out: The suite's directory (runs, reports).
        methods: Method names (empty: all).
        datasets: Datasets of the methods suite.
        budget: Training minutes per run (None: methods suite :data:`DEFAULT_BUDGET`, claims
            suite the presets' epoch and step budgets).
        seeds: Claims suite: seeds ``0..seeds-1`` per arm.
        tier: Claims suite: ``short`` or ``long`` (each claim's longer rung).
        paper: Run the paper presets (meant for GPUs).
        data_root: Dataset root of every run.
        set: ``key=value`` overrides applied to every run.
    """

    out: Path = Path("bench")
    methods: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=lambda: list(DEFAULT_DATASETS))
    budget: float | None = None
    seeds: int = 3
    tier: str = "short"
    paper: bool = False
    data_root: str | None = None
    set: list[str] = field(default_factory=list)


def plan(args: SuiteRequest) -> list[BenchRow]:
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
                budget=methods_budget(args),
                data_root=args.data_root,
                extra=args.set,
            )
            rows.append(BenchRow(dataset, m, run_dir, cmd))
    if not rows:
        raise ConfigError(f"no method supports the datasets {args.datasets}")
    return rows


def methods_budget(args: SuiteRequest) -> float:
    """Training minutes per run of the methods suite."""
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
