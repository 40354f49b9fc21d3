"""Each run records the git commit of the code that produced it, or says there is none."""

import shutil
import subprocess
from pathlib import Path

import pytest

import selfcaps
from selfcaps.cli.provenance import NOT_A_CHECKOUT, git_commit

PACKAGE = Path(selfcaps.__file__).resolve().parent


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def _commit(cwd, *args):
    _git(cwd, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x", *args)


def test_a_checkout_gives_its_head_commit():
    if subprocess.run(["git", "-C", str(PACKAGE), "rev-parse"], capture_output=True).returncode:
        pytest.skip("the tests do not run from a git checkout")
    head = _git(PACKAGE, "rev-parse", "HEAD").stdout.strip()
    dirty = _git(PACKAGE, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    commit = git_commit()
    assert head.startswith(commit.removesuffix("+dirty"))
    assert commit.endswith("+dirty") == bool(dirty)


def test_a_copy_or_an_untracked_package_is_not_a_checkout(tmp_path):
    copy = tmp_path / "site-packages" / "selfcaps"
    copy.mkdir(parents=True)
    shutil.copy(PACKAGE / "__init__.py", copy / "__init__.py")
    assert git_commit(copy) == NOT_A_CHECKOUT
    # A virtualenv inside some other repository: that repository's commit is not ours.
    _git(tmp_path, "init", "-q")
    _git(
        tmp_path,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    assert git_commit(copy) == NOT_A_CHECKOUT


def test_a_dirty_checkout_says_so(tmp_path):
    pkg = tmp_path / "selfcaps"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _commit(tmp_path)
    head = _git(tmp_path, "rev-parse", "HEAD").stdout.strip()
    assert head.startswith(git_commit(pkg)) and not git_commit(pkg).endswith("+dirty")
    (pkg / "__init__.py").write_text("x = 2\n")
    assert git_commit(pkg).endswith("+dirty")


def test_a_run_records_the_commit_it_started_from(tmp_path, monkeypatch):
    """A commit made while a run trains does not relabel the run's code."""
    import json

    from selfcaps.cli import main
    from selfcaps.cli import run as run_module
    from tests.runs import TINY

    calls = iter(["started-here", "checked-out-later"])
    monkeypatch.setattr(run_module, "git_commit", lambda: next(calls))
    out = tmp_path / "run"
    assert main(["run", "coca", "--out", str(out), "--epochs", "1", *TINY]) == 0
    assert json.loads((out / "metrics.json").read_text())["git_commit"] == "started-here"
