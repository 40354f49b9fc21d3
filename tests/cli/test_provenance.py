"""Each run records the git commit of the code that produced it, or says there is none."""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

import selfcaps
from selfcaps.run.provenance import NOT_A_CHECKOUT, cpu_features, cpu_name, git_commit, machine

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
    from selfcaps.run import train as run_module
    from tests.runs import TINY

    calls = iter(["started-here", "checked-out-later"])
    monkeypatch.setattr(run_module, "git_commit", lambda: next(calls))
    out = tmp_path / "run"
    assert main(["run", "coca", "--out", str(out), "--epochs", "1", *TINY]) == 0
    recorded = json.loads((out / "metrics.json").read_text())
    assert recorded["git_commit"] == "started-here"
    # and the machine: the same command gives other numbers on a CPU with other kernels
    assert {k: recorded[k] for k in machine()} == machine()
    assert recorded["device"] == "cpu"
    assert not {"gpu", "tf32_conv", "tf32_matmul"} & set(recorded)  # a CPU run: no GPU, no TF32


def test_cpu_name_reads_the_first_model_name(tmp_path: Path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9R14 96-Core\n\n"
        "processor\t: 1\nmodel name\t: Other\n"
    )
    assert cpu_name(info) == "AMD EPYC 9R14 96-Core"  # inner runs of spaces collapsed


def test_cpu_name_falls_back_where_there_is_no_model_name(tmp_path: Path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t:\nHardware\t: BCM2835\n")  # ARM-style
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert cpu_name(info) == "aarch64"
    assert cpu_name(tmp_path / "absent") == "aarch64"
    monkeypatch.setattr(platform, "machine", lambda: "")
    assert cpu_name(info) == "unknown"


def test_machine_names_the_kernels_torch_runs():
    import torch

    record = machine()
    assert set(record) == {"cpu", "cpu_features", "cpu_capability", "cpu_count", "platform"}
    # torch's own answer, e.g. AVX512 / AVX2 on x86 or DEFAULT / SVE256 on ARM
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["cpu_count"] == os.cpu_count()
    assert record["platform"].split()[0] == platform.system()


def test_cpu_features_lists_the_vector_flags_present_in_a_fixed_order(tmp_path: Path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu amx_tile sse2 avx2 avx512_bf16 avx512f\n")
    assert cpu_features(info) == "avx2 avx512f avx512_bf16 amx_tile"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")  # an AVX2-only CPU
    assert cpu_features(info) == "avx2"
    info.write_text("Features\t: fp asimd\n")  # ARM: no flags line
    assert cpu_features(info) == ""
    assert cpu_features(tmp_path / "absent") == ""
