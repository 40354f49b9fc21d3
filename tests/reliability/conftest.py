"""Every reliability test starts without a run directory inherited from a DDP launcher.

``reference``: the uninterrupted run every kill / budget / signal test resumes into.
"""

import json

import pytest

from selfcaps.cli import main
from tests.reliability.resume_helpers import ARGS, csv_rows


@pytest.fixture(autouse=True)
def _no_inherited_run_dir(monkeypatch):
    monkeypatch.delenv("SELFCAPS_OUT", raising=False)


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main([*ARGS, "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["stopped_by"], m["steps"], m["epochs_trained"], m["epochs_planned"]) == (
        "max_steps",
        20,
        2,
        3,
    )
    assert [r["step"] for r in csv_rows(out) if r["train_loss"]] == ["7", "15", "19"]
    return out
