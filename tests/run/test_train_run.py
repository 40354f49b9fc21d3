"""``selfcaps.run.train.train_run`` from Python: the run ``selfcaps run`` makes, no argparse."""

from __future__ import annotations

import json

import pytest

from selfcaps.cli.main import build_parser
from selfcaps.cli.run import spec_from_args
from selfcaps.config.loading import ConfigError
from selfcaps.run.train import RunSpec, prepare_run, train_run
from tests.runs import RUN_FILES

TINY = [
    ("trainer.epochs", 1),
    ("trainer.threads", 1),
    ("trainer.progress_bar", False),
    ("trainer.deterministic", True),
    ("data.batch_size", 32),
    ("data.train_subset", 256),
    ("data.eval_batch_size", 256),
    ("monitor.knn_k", 10),
    ("eval.knn_k", 10),
    ("eval.baselines", False),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train_run") / "run"
    return train_run(RunSpec("coca", preset="quick", overrides=TINY, out=out))


def test_train_run_writes_the_run_directory_and_returns_its_metrics(trained):
    result, out = trained, trained.out
    assert result.exit_code == 0
    assert [f for f in RUN_FILES if not (out / f).is_file()] == []
    assert json.loads((out / "metrics.json").read_text()) == result.metrics
    assert result.metrics["epochs_trained"] == 1 and "knn_top1_backbone" in result.metrics
    assert not result.method.training  # the evaluated weights, in eval mode


def test_the_command_line_asks_for_the_same_configuration(tmp_path):
    """``selfcaps run`` flags and a RunSpec with the same keys resolve to one configuration."""
    argv = ["run", "coca", "--epochs", "1", "--batch-size", "32", "--out", str(tmp_path / "a"),
            "data.train_subset=256"]  # fmt: skip
    args, extra = build_parser(argv).parse_known_args(argv)
    args.overrides = extra
    from_flags = prepare_run(spec_from_args(args))[0]
    spec = RunSpec(
        "coca",
        overrides=[("trainer.epochs", 1), ("data.batch_size", 32), ("data.train_subset", 256)],
        out=tmp_path / "b",
    )
    assert prepare_run(spec)[0] == from_flags


def test_bad_requests_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="coca"):
        prepare_run(RunSpec("cocaa", out=tmp_path / "x"))
    with pytest.raises(ConfigError, match="--resume needs --out"):
        prepare_run(RunSpec("coca", resume=True))
    with pytest.raises(ConfigError, match=r"trainer\.epochz"):
        prepare_run(RunSpec("coca", overrides=[("trainer.epochz", 1)], out=tmp_path / "y"))
    assert list(tmp_path.iterdir()) == []


def test_evaluate_run_gives_what_selfcaps_eval_writes(trained, capsys):
    from selfcaps.cli import main
    from selfcaps.run.evaluate import EvalRequest, evaluate_run

    metrics, title = evaluate_run(EvalRequest(trained.out, "knn", progress=False))
    assert "knn evaluation of" in title and metrics["knn_top1_backbone"] == pytest.approx(
        trained.metrics["knn_top1_backbone"]
    )  # the run's own kNN on the same checkpoint, bank and test split
    assert main(["eval", str(trained.out), "--protocol", "knn", "--no-progress"]) == 0
    written = json.loads((trained.out / "metrics.json").read_text())
    assert {k: written[k] for k in metrics} == metrics
