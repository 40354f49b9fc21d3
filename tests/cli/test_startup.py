"""The command answers --version, --help, list and configuration errors without torch/Lightning.

Checked on sys.modules in a fresh interpreter (a timing would be flaky on a busy
machine; benchmarks/cli_startup.py measures the time).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("torch", "lightning", "torchvision", "timm", "matplotlib", "sklearn", "numpy")
COMMANDS = [
    ["--version"],
    ["--help"],
    ["list"],
    ["list", "methods"],
    ["list", "models"],
    ["list", "datasets"],
    ["run", "--help"],
    ["run", "sparsecaps", "--help"],
    ["pretrain", "mcae", "--help"],
    ["run"],  # no method: an argument error
    ["run", "cocaa"],  # unknown method
    ["run", "coca", "--preset", "fast"],  # unknown preset
    ["run", "coca", "--data", "cifar"],  # unknown dataset
    ["run", "coca", "optim.lr=-1"],  # bad value of a shared key
    ["run", "coca", "optim.lr=abc"],  # wrong type
    ["run", "coca", "no.such.key=1"],  # unknown key
    ["run", "coca", "--variant", "dense"],  # another method's flag
    ["run", "sparsecaps", "--variant", "desne"],  # a bad choice of its own flag
    ["run", "mcae", "model.mask_ratio=1.5"],  # bad values of each method's own keys
    ["run", "mcae", "eval.label_fraction=2"],
    ["run", "sparsecaps", "model.support=x"],
    ["run", "encapnet", "loss.iters=0"],
    ["run", "poe", "cd.decoder_rule=x"],
    ["eval", "no_such_run"],  # not a run directory
    ["embed", "no_such_run", "--out", "f.npz"],  # not a run directory
    ["profile", "coca", "--preset", "fast"],
]

# One interpreter runs every command in turn and reports what each left in sys.modules:
# a heavy import by any command shows up from that command on.
_PROBE = f"""
import contextlib, io, json, sys
sys.path.insert(0, {SRC!r})
from selfcaps.cli import main
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
    print("PROBE" + json.dumps({{"argv": argv, "code": code, "heavy": heavy}}))
"""


def test_no_heavy_import_before_a_command_needs_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(COMMANDS)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    results = [json.loads(x[5:]) for x in proc.stdout.splitlines() if x.startswith("PROBE")]
    assert [r["argv"] for r in results] == COMMANDS, proc.stdout + proc.stderr
    for r in results:
        assert r["heavy"] == [], r
        expected = 0 if r["argv"][-1] in ("--version", "--help") or r["argv"][0] == "list" else 2
        assert r["code"] == expected, r
    assert list(tmp_path.iterdir()) == []  # no run directory was created


def _run_dir(path: Path, data_root: Path) -> Path:
    """A run directory holding only the config.yaml of a coca run on cifar10."""
    path.mkdir()
    (path / "config.yaml").write_text(
        f"method: coca\ndata:\n  name: cifar10\n  root: {json.dumps(str(data_root))}\n"
    )
    return path


@pytest.mark.parametrize("command", ["run", "resume", "eval"])
def test_missing_data_is_reported_before_torch(command, tmp_path):
    """`run`, `run --resume` and `eval` check the dataset's files before importing torch."""
    empty, cwd = tmp_path / "data", tmp_path / "cwd"
    empty.mkdir()
    cwd.mkdir()
    run = _run_dir(tmp_path / "run", empty)
    argv, source = {
        "run": (["run", "coca", "--data", "cifar10", "--data-root", str(empty)], "--data-root"),
        "resume": (
            ["run", "coca", "--out", str(run), "--resume"],
            f"{run / 'config.yaml'} (data.root)",
        ),
        "eval": (["eval", str(run), "--data-root", str(empty)], "--data-root"),
    }[command]
    paths = [SRC, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("SELFCAPS_DATA", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "selfcaps", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "selfcaps" in imported and not imported & set(HEAVY)
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert message[0] == (
        f"selfcaps: error: dataset 'cifar10' not found under data root {empty} "
        f"(root from {source})."
    )
    assert f"  {empty / 'cifar-10-batches-py' / 'data_batch_1'}" in message
    assert list(cwd.iterdir()) == [] and list(empty.iterdir()) == []  # no run directory
    assert [p.name for p in run.iterdir()] == ["config.yaml"]
