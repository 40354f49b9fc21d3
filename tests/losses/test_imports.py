"""Every objective imports without Lightning, in under a second after torch.

Each module of ``selfcaps.losses`` is imported in a fresh interpreter that has already
imported torch (whose own import takes seconds on a busy machine and is not ours to
speed up); the import of the module itself must take less than a second and leave
Lightning out of ``sys.modules``.
"""

import json
import pkgutil
import subprocess
import sys

import pytest

import selfcaps.losses
from tests.runs import subprocess_env

MODULES = sorted(
    f"selfcaps.losses.{m.name}" for m in pkgutil.iter_modules(selfcaps.losses.__path__)
)

_PROBE = """
import json, sys, time
import torch
start = time.perf_counter()
import {module}
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "lightning": "lightning" in sys.modules}}))
"""


def test_the_objectives_moved_out_of_the_method_files_are_here():
    for name in ("contrastive_divergence", "reconstruction", "classification"):
        assert f"selfcaps.losses.{name}" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_imports_without_lightning_in_under_a_second(module):
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.splitlines()[-1])
    assert not probe["lightning"], f"importing {module} imports Lightning"
    assert probe["seconds"] < 1.0, f"importing {module} took {probe['seconds']:.2f} s"
