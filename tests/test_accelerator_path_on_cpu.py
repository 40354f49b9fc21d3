"""``experiments/accelerator_path_on_cpu.py``: the whole command runs on the accelerator path."""

import torch

from selfcaps.caps.chunking import cpu_path, sizing
from tests.scripts import load_script


def test_the_command_runs_sized_for_an_accelerator_and_returns_its_exit_code(monkeypatch):
    script = load_script("accelerator_path_on_cpu")
    seen = []

    def fake_main(argv):
        seen.append((argv, sizing(), cpu_path(torch.zeros(1))))
        return 3

    monkeypatch.setattr(script, "main", fake_main)
    before = sizing()
    assert script.run(["run", "encapnet", "--seed", "0"]) == 3
    # inside: the accelerator's sizing, so a CPU tensor takes the GPU's code path
    assert seen == [(["run", "encapnet", "--seed", "0"], "accelerator", False)]
    assert sizing() == before and cpu_path(torch.zeros(1))
