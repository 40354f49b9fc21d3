"""A method added from a package of its own, touching no file of selfcaps.

The package (:mod:`tests.plugins.toy_method`) is written into a temporary
directory and found through its ``selfcaps.methods`` entry point; ``selfcaps
list``, ``selfcaps run`` (flags, configuration check, training, evaluation,
run directory) and ``create_model`` then treat it as a shipped method.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from selfcaps import records
from tests.plugins.toy_method import FILES, write_toy_package
from tests.runs import FAST, assert_run_files, selfcaps_cmd, subprocess_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding_a_method.md"


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    return write_toy_package(tmp_path_factory.mktemp("plugin"))


def _run(toy_root, *args):
    env = subprocess_env()
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}{os.pathsep}{toy_root}"
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(selfcaps_cmd(*args), env=env, capture_output=True, text=True, timeout=300)


def test_the_toy_method_is_unknown_without_its_package():
    assert "toymethod" not in [r.name for r in records.list_records()]


def test_list_and_help_show_the_toy_method_and_its_flag(toy_root):
    listing = _run(toy_root, "list", "methods")
    assert listing.returncode == 0, listing.stderr
    assert "toymethod    presets: paper, quick" in listing.stdout
    helped = _run(toy_root, "run", "toymethod", "--help")
    assert "--width" in helped.stdout and "sets model.width" in helped.stdout


def test_its_configuration_check_refuses_a_bad_value(toy_root):
    done = _run(toy_root, "run", "toymethod", "--width", "0", "--out", str(toy_root / "bad"))
    assert done.returncode == 2
    assert "model.width: expected a positive integer, got 0" in done.stderr
    assert not (toy_root / "bad").exists()


@pytest.mark.slow
def test_selfcaps_run_trains_and_evaluates_the_toy_method(toy_root):
    out = toy_root / "run"
    args = ["run", "toymethod", "--out", str(out), "--epochs", "1", "--width", "8", *FAST]
    done = _run(toy_root, *args, "data.train_subset=64", "data.eval_batch_size=500")
    assert done.returncode == 0, done.stderr[-2000:]
    assert_run_files(out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "toymethod" and 0.0 <= metrics["knn_top1_backbone"] <= 100.0
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "toynet" and config["model_kwargs"]["width"] == 8


def test_create_model_and_get_method_find_it_in_process(toy_root, monkeypatch):
    from selfcaps.models import _registry

    # the registry as it was, restored by undo(): later tests see no toynet
    monkeypatch.setattr(_registry, "_MODELS", dict(_registry._MODELS))
    monkeypatch.setattr(_registry, "_IMPORTED", set(_registry._IMPORTED))
    monkeypatch.syspath_prepend(str(toy_root))
    records.refresh()
    try:
        import selfcaps
        from selfcaps.methods import get_method

        assert get_method("toymethod").name == "toymethod"
        assert "toynet" in selfcaps.list_models()
        assert selfcaps.create_model("toynet", width=4).num_features == 4
    finally:
        monkeypatch.undo()
        for name in [m for m in sys.modules if m == "toypkg" or m.startswith("toypkg.")]:
            del sys.modules[name]
        records.refresh()
    assert "toynet" not in selfcaps.list_models()


def test_the_adding_a_method_page_shows_these_very_files():
    text = DOC.read_text()
    shown = [n for n, body in FILES.items() if body.strip() and "dist-info" not in n]
    missing = [n for n in shown if FILES[n].rstrip() not in text]
    assert missing == [], f"docs/adding_a_method.md does not show {missing} as the test writes it"


class _EntryPoint:
    """What ``importlib.metadata.entry_points`` gives, loading ``value``."""

    def __init__(self, name, value, loaded):
        self.name, self.value, self._loaded = name, value, loaded

    def load(self):
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


@pytest.mark.parametrize(
    ("loaded", "message"),
    [
        (ModuleNotFoundError("No module named 'gone'"), "entry point bad = 'gone:RECORD'.*cannot"),
        ("not a record", "entry point bad = 'gone:RECORD'.*expected a selfcaps.records"),
        (replace(records.get_record("coca")), "'coca' is defined twice: by selfcaps.records.coca"),
    ],
)
def test_a_broken_plugin_is_named(monkeypatch, loaded, message):
    name = "coca" if isinstance(loaded, records.MethodRecord) else "bad"
    monkeypatch.setattr(
        records, "entry_points", lambda group: [_EntryPoint(name, "gone:RECORD", loaded)]
    )
    records.refresh()
    try:
        with pytest.raises((ImportError, TypeError, ValueError), match=message):
            records.list_records()
    finally:
        monkeypatch.undo()
        records.refresh()
