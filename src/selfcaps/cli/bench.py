"""``selfcaps bench``: its flags and the command (:mod:`selfcaps.results.bench` runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from selfcaps.results import claims as claims_suite
from selfcaps.results.bench import (
    DEFAULT_BUDGET,
    DEFAULT_DATASETS,
    SuiteRequest,
    collect_rows,
    methods_budget,
    plan,
    render_report,
)
from selfcaps.results.suite_runs import execute

__all__ = ["add_bench_arguments", "cmd_bench", "request_from_args"]


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


def request_from_args(args: argparse.Namespace) -> SuiteRequest:
    """The suite that ``selfcaps bench``'s flags ask for."""
    return SuiteRequest(
        out=args.out,
        methods=list(args.methods or []),
        datasets=list(args.datasets),
        budget=args.budget,
        seeds=args.seeds,
        tier=getattr(args, "tier", "short"),
        paper=bool(args.paper),
        data_root=args.data_root,
        set=list(args.set),
    )


def cmd_bench(args: argparse.Namespace) -> int:
    """``selfcaps bench``: the methods suite, the claims suite, or both."""
    run_methods, run_claims = args.suite in ("methods", "all"), args.suite in ("claims", "all")
    req = request_from_args(args)
    rows = plan(req)
    plans = claims_suite.plan_claims(req) if run_claims else []
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
    render_report(rows, args.out, methods_budget(req), section)
    runs = rows + [r for p in plans for rs in p.runs.values() for r in rs]
    failed = [r for r in runs if r.status.startswith("failed")]
    print(
        f"[bench] report: {args.out / 'report.md'} ({len(runs) - len(failed)} of {len(runs)} "
        "runs with results)"
    )
    return 1 if failed else 0
