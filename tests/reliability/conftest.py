"""Every reliability test starts without a run directory inherited from a DDP launcher."""

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_run_dir(monkeypatch):
    monkeypatch.delenv("SELFCAPS_OUT", raising=False)
