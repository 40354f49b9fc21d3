"""Run directories: created only after validation, removed when a failed run left them empty."""

import os
import stat

import pytest

from selfcaps.cli.main import main
from selfcaps.engine.atomic import atomic_write_text
from selfcaps.run.rundir import (
    args_to_run,
    make_run_dir,
    remove_if_empty,
    run_finished,
)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "coca", "--data", "cifar"],  # unknown dataset
        ["run", "coca", "--data", "cifar10", "--data-root", "EMPTY"],  # files missing
        ["run", "coca", "--data-root", "EMPTY", "--data", "mnist"],
    ],
)
def test_a_run_that_cannot_start_creates_nothing(argv, tmp_path, monkeypatch, capsys):
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SELFCAPS_DATA", raising=False)
    argv = [str(tmp_path / "empty") if a == "EMPTY" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "selfcaps: error:" in err and ("cifar10" in err or "mnist" in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_remove_if_empty_keeps_anything_holding_a_file(tmp_path):
    runs = tmp_path / "runs"
    made = make_run_dir(runs / "coca" / "t1")
    assert made == [runs, runs / "coca", runs / "coca" / "t1"]
    (made[-1] / "tensorboard" / "x").mkdir(parents=True)  # empty subdirectories only
    assert remove_if_empty(made) == made[::-1]
    assert list(tmp_path.iterdir()) == []
    made = make_run_dir(tmp_path / "runs" / "t2")
    (made[-1] / "run.log").write_text("what went wrong")
    assert remove_if_empty(made) == []
    assert (made[-1] / "run.log").is_file()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_respect_the_umask_like_open(umask, tmp_path):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "atomic.txt", "x")
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)


def test_atomic_rewrite_keeps_the_files_mode(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("{}")
    path.chmod(0o640)
    atomic_write_text(path, "{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_run_failing_after_creating_its_directory_removes_it_if_empty(tmp_path, monkeypatch):
    import selfcaps.engine.trainer as engine
    from tests.runs import TINY

    def broken(*_, **__):
        raise RuntimeError("the trainer could not be built")

    monkeypatch.setattr(engine, "build_trainer", broken)
    out = tmp_path / "runs" / "coca" / "t"
    with pytest.raises(RuntimeError, match="could not be built"):
        main(["run", "coca", "--out", str(out), *TINY])
    assert list(tmp_path.iterdir()) == []  # runs/coca/t and its parents, created by the run


def test_a_run_stopped_by_a_signal_is_not_finished(tmp_path):
    """Both have a metrics.json; bench and claims must resume the stopped one, not skip it."""
    assert not run_finished(tmp_path)
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "signal", "signal": "SIGTERM"}')
    assert not run_finished(tmp_path)
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "max_time"}')
    assert run_finished(tmp_path)
    atomic_write_text(tmp_path / "metrics.json", "{not json")
    assert not run_finished(tmp_path)


def test_only_an_interrupted_run_with_a_checkpoint_is_resumed(tmp_path):
    """bench, claims and the experiment scripts continue a run only from its last.ckpt."""
    fresh = ["run", "coca", "--out", str(tmp_path)]
    assert args_to_run("coca", tmp_path, fresh) == fresh  # nothing yet: a fresh run
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "signal", "signal": "SIGTERM"}')
    assert args_to_run("coca", tmp_path, fresh) == fresh  # stopped before its first checkpoint
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert args_to_run("coca", tmp_path, fresh) == [
        "run", "coca", "--out", str(tmp_path), "--resume", "--no-progress",
    ]  # fmt: skip
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "epochs"}')
    assert args_to_run("coca", tmp_path, fresh) is None  # finished: not run again


def test_args_to_run_skips_a_finished_run_resumes_a_stopped_one_and_starts_any_other(tmp_path):
    """The one dispatch bench, claims and the experiment scripts share."""
    fresh = ["run", "coca", "--out", str(tmp_path), "--seed", "3"]
    budget = ["--max-time", "00:00:10:00"]
    assert args_to_run("coca", tmp_path, fresh, resume_extra=budget) == fresh  # nothing yet
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    # A crash after a checkpoint (no metrics.json): continue, with the budget only.
    resumed = ["run", "coca", "--out", str(tmp_path), "--resume", "--no-progress", *budget]
    assert args_to_run("coca", tmp_path, fresh, resume_extra=budget) == resumed
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "signal", "signal": "SIGINT"}')
    assert args_to_run("coca", tmp_path, fresh, resume_extra=budget) == resumed
    atomic_write_text(tmp_path / "metrics.json", '{"stopped_by": "max_steps"}')
    assert args_to_run("coca", tmp_path, fresh, resume_extra=budget) is None
