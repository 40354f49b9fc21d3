"""`selfcaps bench`: one report from tiny runs; every run appears with its numbers; resumable."""

import csv
import json

import pytest

from selfcaps.cli import main
from selfcaps.results.bench import BenchRow, collect_rows, render_report
from selfcaps.run.provenance import cpu_name, git_commit

TINY = [
    "data.batch_size=32",
    "trainer.epochs=1",
    "trainer.threads=1",
    "data.train_subset=128",
    "data.eval_batch_size=256",
    "monitor.knn_k=10",
    "eval.knn_k=10",
    "eval.baselines=false",
]


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    argv = [
        "bench",
        "--methods",
        "coca",
        "--datasets",
        "mnist5k",
        "--budget",
        "1",
        "--out",
        str(out),
        "--set",
        *TINY,
    ]
    assert main(argv) == 0
    return out, argv


def test_bench_runs_each_pair_and_writes_the_report(bench_dir):
    out, _ = bench_dir
    m = json.loads((out / "runs/coca/mnist5k/metrics.json").read_text())
    rows = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert len(rows) == 1 and rows[0]["method"] == "coca" and rows[0]["dataset"] == "mnist5k"
    assert float(rows[0]["top1"]) == m["knn_top1_backbone"]
    assert int(rows[0]["flops_per_image"]) == m["flops_per_image"] > 0
    assert "--max-time 1" in rows[0]["command"]
    # Each run records the code that produced it, and the report shows it per run.
    assert m["git_commit"] == rows[0]["git_commit"] == git_commit()
    assert m["git_commit"] in (out / "report.md").read_text()
    assert f"CPU ({cpu_name()}, {m['cpu_capability']}," in (out / "report.md").read_text()


def test_finished_pairs_are_not_rerun(bench_dir):
    out, argv = bench_dir
    before = (out / "runs/coca/mnist5k/metrics.json").read_text()
    assert main(argv) == 0
    assert (out / "runs/coca/mnist5k/metrics.json").read_text() == before


def test_report_from_two_runs_shows_every_run_with_its_numbers(bench_dir, tmp_path):
    out, _ = bench_dir
    second = tmp_path / "second"
    assert main(["run", "coca", "--out", str(second), "--seed", "1", *TINY, "--no-progress"]) == 0
    rows = collect_rows(
        [
            BenchRow("mnist5k", "coca", out / "runs/coca/mnist5k", ["selfcaps", "run", "coca"]),
            BenchRow("mnist5k-seed1", "coca", second, ["selfcaps", "run", "coca", "--seed", "1"]),
        ]
    )
    render_report(rows, tmp_path, budget=1)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    table = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert len(table) == 2
    for row, record in zip(rows, table):
        m = row.metrics
        for key in ("knn_top1_backbone", "knn_top5_backbone"):
            assert f"{m[key]:.2f}" in md and f"{m[key]:.2f}" in page
        assert float(record["top1"]) == m["knn_top1_backbone"]
        assert record["notes"] == f"capsule kNN {m['knn_top1_capsule']:.2f}"
        assert " ".join(row.command) in md
    assert "## mnist5k" in md and "## mnist5k-seed1" in md
    assert md.count("![coca") >= 4  # curves and retrieval grid of each run
    assert page.count("data:image/png;base64,") >= 4
    for key in ("selfcaps", "git commit", "torch", "device"):
        assert key in md


def test_notes_name_the_values_a_reader_needs_to_judge_the_top1(tmp_path):
    poe = BenchRow("mnist5k", "poe", tmp_path, ["selfcaps", "run", "poe"])
    poe.metrics = {
        "stages_completed": 3,
        "purity_mean": 99.9,
        "purity_classes_covered": 1,
        "purity_classes_covered_untrained": 1,
        "free_energy_gap": -42.99,
        "free_energy_gap_untrained": -0.000171,
    }
    assert poe.values()["notes"] == (
        "stages completed 3; classes covered 1; untrained covers 1; "
        "free-energy gap -42.99; untrained gap -0.000171"
    )
    # the restricted domain (how the docs score Fig. 2) and the judge that reads every purity
    poe.metrics.update(
        purity_mean_restricted=75.17, purity_classes_covered_restricted=9, judge_test_top1=97.4
    )
    assert poe.values()["notes"] == (
        "stages completed 3; classes covered 1; untrained covers 1; restricted purity 75.17; "
        "restricted classes covered 9; judge test top-1 97.40; "
        "free-energy gap -42.99; untrained gap -0.000171"
    )
    encapnet = BenchRow("cifar10", "encapnet", tmp_path, ["selfcaps", "run", "encapnet"])
    encapnet.metrics = {"test_top1": 42.05, "variant": "master_aide"}  # no "ot": left out
    assert encapnet.values()["notes"] == "variant master_aide"
    encapnet.metrics.update(stopped_by="max_time", epochs_trained=1, epochs_planned=3)
    assert encapnet.values()["notes"] == "variant master_aide; stopped by max_time: 1 of 3 epochs"


@pytest.mark.parametrize("state", ["fresh", "stopped", "finished"])
def test_execute_starts_resumes_with_the_budget_or_skips(tmp_path, monkeypatch, state):
    """A stopped row resumes under its saved configuration plus the row's --max-time only."""
    from selfcaps.engine.atomic import atomic_write_text
    from selfcaps.results import suite_runs

    run_dir = tmp_path / "coca"
    budget = ["--max-time", "00:00:05:00"]
    command = ["selfcaps", "run", "coca", "--out", str(run_dir), *budget]
    if state != "fresh":
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
        stop = "signal" if state == "stopped" else "epochs"
        atomic_write_text(run_dir / "metrics.json", json.dumps({"stopped_by": stop}))
    calls = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(cmd, **kwargs):  # the run ends and writes its metrics.json
        calls.append(cmd)
        run_dir.mkdir(exist_ok=True)
        atomic_write_text(run_dir / "metrics.json", json.dumps({"stopped_by": "epochs"}))
        return Done

    monkeypatch.setattr(suite_runs.subprocess, "run", fake_run)
    row = BenchRow(dataset="mnist5k", method="coca", run_dir=run_dir, command=command)
    suite_runs.execute(row)
    expected = {
        "fresh": command[1:],
        "stopped": [*("run", "coca", "--out", str(run_dir), "--resume", "--no-progress"), *budget],
        "finished": None,
    }[state]
    if expected is None:
        assert calls == [] and row.status == "done (earlier)"
    else:
        assert [c[3:] for c in calls] == [expected]  # after "python -m selfcaps"
        assert row.status == "done"
