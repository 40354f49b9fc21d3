"""``selfcaps bench --suite claims``: each paper's central claim as a paired, seeded test.

For every method, its :class:`~selfcaps.records.Claim` names the arms to run
(treatment and control: ``selfcaps run`` arguments) and the metric to read. Each arm
runs once per seed in ``DIR/claims/<method>/<arm>/seed<k>`` with the same data, budget
and seed on both sides; finished runs are kept, interrupted ones resumed (as ``bench``
does). Then ``DIR/claims.md``, ``DIR/claims.csv`` and one figure per claim
(``DIR/claims/<method>.png``: each seed of both arms as points, the paper's numbers as
lines) are written, and ``report.html`` gets a "Claims" section.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from selfcaps.config.loading import ConfigError, default_preset
from selfcaps.engine.checkpoints import atomic_write_bytes, atomic_write_text
from selfcaps.methods import list_methods
from selfcaps.records import Arm, Claim, Comparison, get_record
from selfcaps.results.paired import NOT_RESOLVED, PairedResult, overall_verdict, paired_comparison
from selfcaps.results.suite_runs import BenchRow, environment, execute, png_figure_html, run_command

if TYPE_CHECKING:
    from selfcaps.results.bench import SuiteRequest

__all__ = [
    "ClaimResult",
    "claim_figure",
    "collect_claims",
    "plan_claims",
    "render_claims",
    "run_claims",
]

CSV_COLUMNS = [
    "method", "claim", "comparison", "dataset", "metric", "seeds", "treatment_mean",
    "treatment_std", "control_mean", "control_std", "diff_mean", "diff_low", "diff_high",
    "verdict", "paper_dataset", "paper_treatment", "paper_control", "treatment_values",
    "control_values", "missing", "commands",
]  # fmt: skip


@dataclass
class ClaimResult:
    """One method's claim: its runs (per arm, per seed) and, once collected, the statistics."""

    method: str
    claim: Claim
    dataset: str
    runs: dict[tuple[str, ...], list[BenchRow]]
    results: list[tuple[Comparison, PairedResult | None, list[float], list[float]]] = field(
        default_factory=list
    )
    missing: list[str] = field(default_factory=list)
    suffix: str = ""

    @property
    def verdict(self) -> str:
        """The claim's overall verdict (every comparison must hold)."""
        return overall_verdict([r.verdict if r else NOT_RESOLVED for _, r, _, _ in self.results])


def _arm_dir(arm: Arm) -> str:
    return arm.label.replace(" ", "_").replace("/", "_")


def plan_claims(args: SuiteRequest) -> list[ClaimResult]:
    """The runs of every claim: one per (method, distinct arm, seed).

    Args:
        args: The suite's request (``budget`` None: the presets' budgets).

    Returns:
        One :class:`ClaimResult` per method that has a claim, runs planned, none executed.

    Raises:
        ConfigError: Fewer than one seed, or no requested method has a claim.
    """
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {args.seeds}")
    methods = args.methods or list_methods()
    long_tier = getattr(args, "tier", "short") == "long"
    if long_tier and args.paper:
        raise ConfigError("--tier long is a CPU rung; --paper runs the paper presets instead")
    suite_dir = "claims-long" if long_tier else "claims"
    plans = []
    for m in methods:
        claim = get_record(m).claim  # unknown names fail here, with the valid ones listed
        if claim is None:
            continue
        rung = claim.long if long_tier else None
        if long_tier and rung is None:
            raise ConfigError(f"{m}'s claim has no long rung; run it with --tier short")
        dataset = claim.paper_dataset if args.paper else claim.dataset
        preset = "paper" if args.paper else default_preset(m, dataset)
        if rung is not None:
            dataset, preset = rung.dataset, rung.preset
        # The claim's own budget (its args) gives way to a --budget in minutes.
        own = claim.paper_args if args.paper else (rung.args if rung else claim.args)
        shared = list(own) if args.budget is None else []
        runs: dict[tuple[str, ...], list[BenchRow]] = {}
        for arm in claim.arms():
            rows = []
            for seed in range(args.seeds):
                run_dir = args.out / suite_dir / m / _arm_dir(arm) / f"seed{seed}"
                cmd = run_command(
                    m,
                    preset,
                    dataset,
                    run_dir,
                    seed=seed,
                    budget=args.budget,
                    data_root=args.data_root,
                    extra=[*shared, *arm.args, *args.set],
                )
                rows.append(BenchRow(dataset, m, run_dir, cmd))
            runs[arm.args] = rows
        plans.append(
            ClaimResult(m, claim, dataset, runs, suffix=rung.metric_suffix if rung else "")
        )
    if not plans:
        raise ConfigError(f"none of the methods {methods} states a claim")
    return plans


def run_claims(plans: list[ClaimResult]) -> None:
    """Run (or resume) every planned run that has no ``metrics.json`` yet."""
    for plan in plans:
        for rows in plan.runs.values():
            for row in rows:
                execute(row)


def _read(row: BenchRow, key: str) -> float | None:
    path = row.run_dir / "metrics.json"
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get(key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def collect_claims(plans: list[ClaimResult]) -> list[ClaimResult]:
    """Read every run's metric and compute each comparison over the seeds both arms have."""
    for plan in plans:
        plan.results, plan.missing = [], []
        for comp in plan.claim.comparisons:
            t_rows, c_rows = plan.runs[comp.treatment.args], plan.runs[comp.control.args]
            t_vals, c_vals = [], []
            for t_row, c_row in zip(t_rows, c_rows, strict=True):
                t_key, c_key = (
                    comp.treatment.metric + plan.suffix,
                    comp.control.metric + plan.suffix,
                )
                a, b = _read(t_row, t_key), _read(c_row, c_key)
                if a is None or b is None:  # pair by seed: a seed missing on one side is dropped
                    for row, v, key in ((t_row, a, t_key), (c_row, b, c_key)):
                        if v is None:
                            plan.missing.append(f"{row.run_dir.name} of {row.run_dir.parent.name}"
                                                f" ({key})")  # fmt: skip
                    continue
                t_vals.append(a)
                c_vals.append(b)
            result = paired_comparison(t_vals, c_vals, comp.higher_is_better) if t_vals else None
            plan.results.append((comp, result, t_vals, c_vals))
        plan.missing = list(dict.fromkeys(plan.missing))
    return plans


def _num(v: float | None, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pm(mean: float, std: float) -> str:
    return _num(mean) if math.isnan(std) else f"{mean:.2f} ± {std:.2f}"


def _rows(plans: list[ClaimResult]) -> list[dict[str, Any]]:
    out = []
    for plan in plans:
        for comp, r, t_vals, c_vals in plan.results:
            row = {
                "method": plan.method,
                "claim": plan.claim.statement,
                "comparison": comp.name,
                "dataset": plan.dataset,
                "metric": comp.treatment.metric + plan.suffix
                if comp.treatment.metric == comp.control.metric
                else f"{comp.treatment.metric}{plan.suffix} vs {comp.control.metric}{plan.suffix}",
                "paper_dataset": plan.claim.paper_dataset,
                "paper_treatment": comp.paper[0],
                "paper_control": comp.paper[1],
                "treatment_values": " ".join(f"{v:g}" for v in t_vals),
                "control_values": " ".join(f"{v:g}" for v in c_vals),
                "missing": "; ".join(plan.missing),
                "commands": " && ".join(
                    " ".join(r0.command) for rows in plan.runs.values() for r0 in rows[:1]
                ),
                "verdict": r.verdict if r else NOT_RESOLVED,
                "seeds": r.n if r else 0,
            }
            if r:
                stats = r.as_dict()
                row.update({k: stats[k] for k in CSV_COLUMNS if k in stats})
            out.append(row)
    return out


def claim_figure(plan: ClaimResult) -> Any:
    """Each seed of both arms as points joined by a line, per comparison; paper values dashed.

    Returns:
        The matplotlib figure; its title is wrapped to the figure's width.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(plan.results)
    width = 3.6 * n + 0.6
    fig, axes = plt.subplots(1, n, figsize=(width, 3.9), squeeze=False)
    for ax, (comp, r, t_vals, c_vals) in zip(axes[0], plan.results, strict=True):
        for a, b in zip(t_vals, c_vals, strict=True):
            ax.plot([0, 1], [a, b], color="0.6", lw=0.8, zorder=1)
        ax.scatter([0] * len(t_vals), t_vals, color="tab:blue", zorder=2, label="seeds")
        ax.scatter([1] * len(c_vals), c_vals, color="tab:orange", zorder=2)
        for x, value in enumerate(comp.paper):
            if value is not None:
                ax.hlines(value, x - 0.25, x + 0.25, colors="k", linestyles="--",
                          label=f"paper ({plan.claim.paper_dataset})")  # fmt: skip
        ax.set_xticks([0, 1], [comp.treatment.label, comp.control.label])
        ax.set_xlim(-0.5, 1.5)
        ax.set_ylabel(comp.treatment.metric)
        verdict = r.verdict if r else NOT_RESOLVED
        ax.set_title(f"{comp.name}\n{verdict}", fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            uniq = dict(zip(labels, handles, strict=True))
            # below the axes: inside, it could hide a seed or the paper's line
            ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper center",
                      bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)  # fmt: skip
    title = f"{plan.method} on {plan.dataset}: {plan.claim.statement}"
    # about 12 characters of 10-point text per inch
    fig.suptitle(textwrap.fill(title, width=int(12 * width)), fontsize=10)
    fig.tight_layout()
    return fig


def _figure(plan: ClaimResult) -> bytes:
    """:func:`claim_figure` as PNG bytes."""
    import matplotlib.pyplot as plt

    fig = claim_figure(plan)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def render_claims(plans: list[ClaimResult], out: Path, seeds: int, budget: str) -> str:
    """Write ``claims.md``, ``claims.csv`` and the figures; return the report's HTML section.

    Args:
        plans: Collected claims (:func:`collect_claims`).
        out: The bench directory.
        seeds: Seeds requested.
        budget: How the runs were budgeted, in words (for the header).

    Returns:
        The "Claims" section of ``report.html`` (HTML, figures embedded).
    """
    env = environment()
    head = ["claim", "comparison", "metric", "treatment", "control", "difference (95% CI)",
            "verdict", "paper"]  # fmt: skip
    md = [f"# selfcaps claims ({seeds} seeds; {budget})", ""]
    md += [" · ".join(f"**{k}** {v}" for k, v in env.items()), ""]
    md += ["| method | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    body = [f"<h2>Claims ({seeds} seeds; {html.escape(budget)})</h2>", "<table><tr>"]
    body[-1] += "".join(f"<th>{h}</th>" for h in ["method", *head]) + "</tr>"
    for plan in plans:
        for comp, r, _, _ in plan.results:
            paper = (
                f"{_num(comp.paper[0])} vs {_num(comp.paper[1])} ({plan.claim.paper_dataset})"
                if any(v is not None for v in comp.paper)
                else "–"
            )
            if r:
                diff = f"{r.diff_mean:+.2f} [{_num(r.diff_low)}, {_num(r.diff_high)}]"
                cells = [_pm(r.treatment_mean, r.treatment_std), _pm(r.control_mean, r.control_std),
                         diff, f"**{r.verdict}** (n={r.n})"]  # fmt: skip
            else:
                cells = ["–", "–", "–", f"**{NOT_RESOLVED}** (no finished seed)"]
            row = [plan.method, plan.claim.statement, comp.name, comp.treatment.metric]
            row += [*cells, paper]
            md.append("| " + " | ".join(row) + " |")
            cells_html = "".join(f"<td>{html.escape(c.replace('**', ''))}</td>" for c in row)
            body.append(f"<tr>{cells_html}</tr>")
    body.append("</table>")
    md += ["", "Overall: " + "; ".join(f"{p.method} **{p.verdict}**" for p in plans), ""]
    for plan in plans:
        md += [f"## {plan.method}: {plan.claim.statement}", "", f"Source: {plan.claim.source}", ""]
        if plan.missing:
            md += [f"Missing (not counted): {', '.join(plan.missing)}", ""]
        png = _figure(plan)
        fig_path = out / "claims" / f"{plan.method}.png"
        fig_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(fig_path, png)
        md += [f"![{plan.method}](claims/{plan.method}.png)", "", "Reproduce:", "", "```bash"]
        md += [" ".join(r.command) for rows in plan.runs.values() for r in rows] + ["```", ""]
        body.append(f"<h3>{html.escape(plan.method)}: {html.escape(plan.claim.statement)}</h3>")
        body.append(f"<p>{html.escape(plan.claim.source)}</p>")
        body.append(png_figure_html(png, plan.method))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(_rows(plans))
    atomic_write_text(out / "claims.md", "\n".join(md))
    atomic_write_text(out / "claims.csv", buf.getvalue())
    return "\n".join(body)
