"""Every test session uses a temporary cache directory, never the user's ``~/.cache/selfcaps``.

Under pytest-xdist (``-n auto``: one test process per core) each process computes with one
torch thread, so that the processes do not fight over the cores.
"""

import os

import pytest
import torch

from selfcaps.data.paths import CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def _temporary_cache(tmp_path_factory):
    """``$SELFCAPS_CACHE`` in a temporary directory for the whole session (subprocesses too)."""
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("selfcaps-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
