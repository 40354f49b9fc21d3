import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No test sees the user's data root or writes to the user's cache."""
    monkeypatch.delenv("SELFCAPS_DATA", raising=False)
    monkeypatch.setenv("SELFCAPS_CACHE", str(tmp_path / "cache"))


def shared_data_dir() -> Path:
    """``../shared/data`` next to the repository, or ``SELFCAPS_SHARED_DATA``."""
    env = os.environ.get("SELFCAPS_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
