"""`selfcaps bench --suite claims`: the plan, the statistics from run directories, the report."""

import argparse
import csv
import json
from pathlib import Path

import pytest

from selfcaps.cli import main
from selfcaps.methods import list_methods
from selfcaps.records import get_record
from selfcaps.results.claims import claim_figure, collect_claims, plan_claims, render_claims


def _args(out: Path, **kw) -> argparse.Namespace:
    base = dict(
        methods=None, seeds=3, out=out, data_root=None, paper=False, budget=None,
        set=[],
    )  # fmt: skip
    base.update(kw)
    return argparse.Namespace(**base)


def test_every_method_states_a_claim_with_metrics_it_reports():
    for name in list_methods():
        claim = get_record(name).claim
        assert claim is not None, name
        assert claim.comparisons and claim.statement and claim.source
        for comp in claim.comparisons:
            assert comp.treatment.args != comp.control.args or (
                comp.treatment.metric != comp.control.metric
            ), f"{name}: {comp.name} compares a run with itself on the same metric"


def test_plan_shares_runs_between_arms_with_the_same_arguments(tmp_path):
    plans = {p.method: p for p in plan_claims(_args(tmp_path))}
    # CoCa: trained, untrained and pixels come from one run per seed
    assert len(plans["coca"].runs) == 1 and len(plans["coca"].runs[()]) == 3
    # EncapNet: OT on / OT off (= master/aide) / master only: three runs per seed
    assert len(plans["encapnet"].runs) == 3
    sparse = plans["sparsecaps"].runs[("--variant", "sparse")]
    dense = plans["sparsecaps"].runs[("--variant", "dense")]
    for seed, (a, b) in enumerate(zip(sparse, dense)):
        assert a.command[a.command.index("--seed") + 1] == str(seed)
        # same data, budget and seed on both sides: the commands differ only by the variant
        strip = lambda cmd: [x for x in cmd if x not in ("sparse", "dense")]  # noqa: E731
        assert strip(a.command[: a.command.index("--out")]) == strip(
            b.command[: b.command.index("--out")]
        )
        assert a.run_dir != b.run_dir
    assert all(
        "--max-time" not in r.command for p in plans.values() for rs in p.runs.values() for r in rs
    )
    budgeted = plan_claims(_args(tmp_path, budget=2.0, methods=["coca"]))
    assert "--max-time" in budgeted[0].runs[()][0].command


def test_a_claims_own_budget_applies_unless_minutes_are_given(tmp_path):
    claim = get_record("encapnet").claim
    assert claim.args  # EncapNet's claim is cut to fit the suite's two hours
    (plan,) = plan_claims(_args(tmp_path, methods=["encapnet"]))
    n = len(claim.args)
    for rows in plan.runs.values():
        cmd = rows[0].command
        assert any(tuple(cmd[i : i + n]) == claim.args for i in range(len(cmd)))
    (timed,) = plan_claims(_args(tmp_path, methods=["encapnet"], budget=5.0))
    for rows in timed.runs.values():
        assert "--max-time" in rows[0].command and "--epochs" not in rows[0].command


def _write(run_dir: Path, **metrics) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.json").write_text(json.dumps(metrics))


def test_statistics_and_report_from_run_directories(tmp_path):
    plans = plan_claims(_args(tmp_path, methods=["coca", "sparsecaps"]))
    coca, sparse = plans
    for seed, (t, u, p) in enumerate([(92.0, 89.0, 90.0), (93.0, 90.5, 91.0), (91.5, 89.0, 92.5)]):
        _write(coca.runs[()][seed].run_dir, knn_top1_backbone=t, knn_top1_random_init=u,
               knn_top1_pixels=p)  # fmt: skip
    for seed, (s, d) in enumerate([(60.0, 70.0), (61.0, 72.0)]):  # seed 2 never finished
        _write(sparse.runs[("--variant", "sparse")][seed].run_dir, svm_affnist_a=s)
        _write(sparse.runs[("--variant", "dense")][seed].run_dir, svm_affnist_a=d)
    collect_claims(plans)
    html = render_claims(plans, tmp_path, seeds=3, budget="test")

    vs_untrained, vs_pixels = coca.results
    assert vs_untrained[1].verdict == "holds" and vs_untrained[1].n == 3
    assert vs_pixels[1].verdict == "not resolved at this budget"  # 2, 2, -1
    assert coca.verdict == "not resolved at this budget"
    ((_, r, t_vals, c_vals),) = sparse.results
    assert (t_vals, c_vals, r.n) == ([60.0, 61.0], [70.0, 72.0], 2)
    # Two finished seeds: an interval, but no verdict (the design's minimum is three).
    assert r.verdict == "not resolved (too few seeds)" == sparse.verdict
    assert any("seed2" in m for m in sparse.missing)

    rows = list(csv.DictReader((tmp_path / "claims.csv").read_text().splitlines()))
    assert [r["comparison"] for r in rows] == [
        "trained vs untrained",
        "trained vs pixels",
        "sparse vs dense",
    ]
    assert float(rows[0]["diff_mean"]) == pytest.approx(8 / 3)
    assert rows[2]["paper_treatment"] == "90.12"
    assert rows[2]["verdict"] == "not resolved (too few seeds)"
    md = (tmp_path / "claims.md").read_text()
    assert "**not resolved (too few seeds)**" in md and "90.12 vs 60.63" in md
    assert "selfcaps run sparsecaps" in md
    assert (tmp_path / "claims" / "coca.png").stat().st_size > 1000
    assert "data:image/png;base64" in html and "Claims" in html

    # every claim's figure keeps its (long) title inside the figure
    for plan in plans:
        fig = claim_figure(plan)
        fig.canvas.draw()
        box = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (plan.method, box, fig.bbox)


@pytest.mark.slow
def test_claims_suite_end_to_end_and_resumable(tmp_path):
    argv = [
        "bench", "--suite", "claims", "--methods", "coca", "--seeds", "2", "--out", str(tmp_path),
        "--set", "data.batch_size=32", "trainer.epochs=1", "trainer.threads=1",
        "data.train_subset=128", "data.eval_batch_size=256", "monitor.knn_k=10", "eval.knn_k=10",
    ]  # fmt: skip
    assert main(argv) == 0
    rows = list(csv.DictReader((tmp_path / "claims.csv").read_text().splitlines()))
    assert [r["seeds"] for r in rows] == ["2", "2"]
    m0 = json.loads((tmp_path / "claims/coca/trained/seed0/metrics.json").read_text())
    assert float(rows[0]["treatment_values"].split()[0]) == pytest.approx(m0["knn_top1_backbone"])
    assert "Claims" in (tmp_path / "report.html").read_text()
    before = (tmp_path / "claims/coca/trained/seed1/metrics.json").read_text()
    assert main(argv) == 0  # finished runs are not rerun
    assert (tmp_path / "claims/coca/trained/seed1/metrics.json").read_text() == before


def test_the_long_tier_runs_each_claim_at_its_pages_rung(tmp_path):
    from selfcaps.config.loading import ConfigError, list_presets

    plans = plan_claims(_args(tmp_path, tier="long"))
    by_method = {p.method: p for p in plans}
    assert set(by_method) == set(list_methods())  # every claim has a long rung
    for name, plan in by_method.items():
        rung = get_record(name).claim.long
        assert rung.preset in list_presets()[name], (name, rung.preset)
        assert plan.dataset == rung.dataset and plan.suffix == rung.metric_suffix
        for rows in plan.runs.values():
            cmd = rows[0].command
            assert cmd[cmd.index("--preset") + 1] == rung.preset
            assert cmd[cmd.index("--data") + 1] == rung.dataset
            assert rows[0].run_dir.parts[-4] == "claims-long"  # apart from the short tier
    sparse = by_method["sparsecaps"].runs[("--variant", "sparse")][0].command
    assert "quick_long" in sparse and "--epochs" not in sparse  # not the short tier's budget
    assert by_method["mcae"].suffix == "_lf10"
    with pytest.raises(ConfigError, match="--paper"):
        plan_claims(_args(tmp_path, tier="long", paper=True))


def test_the_long_tier_reads_the_rungs_metric_keys(tmp_path):
    (plan,) = plan_claims(_args(tmp_path, tier="long", methods=["mcae"]))
    for seed, (p, s) in enumerate([(55.8, 51.1), (55.7, 50.3), (55.5, 50.4)]):
        _write(plan.runs[()][seed].run_dir, finetune_top1=1.0, finetune_top1_lf10=p)
        _write(plan.runs[("--pretrain-epochs", "0")][seed].run_dir, finetune_top1_lf10=s)
    collect_claims([plan])
    ((_, r, t_vals, c_vals),) = plan.results
    assert t_vals == [55.8, 55.7, 55.5] and c_vals == [51.1, 50.3, 50.4]
    assert r.verdict == "holds"
