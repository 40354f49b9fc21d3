"""Every objective imports without Lightning, in under a second of CPU after torch.

The modules of ``selfcaps.losses`` are imported one after another in a fresh interpreter
that has already imported torch (whose own import takes seconds and is not ours to speed
up). Each import must take less than a second of the process's CPU time (not wall time,
which a busy machine stretches) and leave Lightning out of ``sys.modules``; a module that
pulls Lightning in is named, since the check runs after each import.
"""

import json
import pkgutil
import subprocess
import sys

import selfcaps.losses
from tests.runs import subprocess_env

MODULES = sorted(
    f"selfcaps.losses.{m.name}" for m in pkgutil.iter_modules(selfcaps.losses.__path__)
)

_PROBE = """
import importlib, json, sys, time
import torch
for name in sys.argv[1:]:
    start = time.process_time()
    importlib.import_module(name)
    seconds = time.process_time() - start
    print(json.dumps({"module": name, "seconds": seconds, "lightning": "lightning" in sys.modules}))
"""


def test_the_objectives_moved_out_of_the_method_files_are_here():
    for name in ("contrastive_divergence", "reconstruction", "classification"):
        assert f"selfcaps.losses.{name}" in MODULES


def test_every_objective_imports_without_lightning_in_under_a_cpu_second():
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *MODULES],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    probes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [p["module"] for p in probes] == MODULES
    for p in probes:
        assert not p["lightning"], f"importing {p['module']} imports Lightning"
        assert p["seconds"] < 1.0, f"importing {p['module']} took {p['seconds']:.2f} CPU s"
