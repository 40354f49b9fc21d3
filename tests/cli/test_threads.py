"""The thread count of ``trainer.threads: null`` and the passive OpenMP wait policy."""

import math
import subprocess
import sys

import pytest
import torch

from selfcaps.cli import threads
from selfcaps.cli.threads import apply_threads, choose_threads, passive_openmp
from tests.runs import subprocess_env


@pytest.mark.parametrize(
    ("cores", "load", "processes", "expected"),
    [
        (2, 0.0, 1, 2),  # quiet machine: every core
        (2, 0.49, 1, 2),  # less than half a core busy: rounds to 0 busy
        (2, 0.5, 1, 1),  # half a core rounds up: 1 busy, 1 free
        (2, 1.0, 1, 1),  # one other single-thread job: the other core
        (2, 2.3, 1, 1),  # every core busy: still one thread, never 0
        (16, 3.4, 1, 13),  # 3 busy of 16
        (8, 2.5, 2, 2),  # 3 busy, 5 free shared by 2 processes: 2 each
        (8, 0.0, 3, 2),  # 8 free cores, 3 processes: 2 each (floor)
        (4, math.nan, 1, 4),  # no load average on this OS: taken as idle
    ],
)
def test_choose_threads_hand_computed(cores, load, processes, expected):
    assert choose_threads(cores, load, processes) == expected


def test_choose_threads_rejects_no_cores():
    with pytest.raises(ValueError, match="cores and processes must be >= 1, got 0 and 1"):
        choose_threads(0, 0.0)


def test_passive_openmp_only_when_unset_and_before_torch():
    env: dict[str, str] = {}
    assert passive_openmp(env, modules={}) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for chosen in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}):
        env = dict(chosen)
        assert not passive_openmp(env, modules={}) and env == chosen  # the user's choice
    env = {}
    assert not passive_openmp(env, modules={"torch": object()}) and env == {}  # too late


def test_the_command_sets_the_passive_policy_before_torch():
    code = (
        "import os, sys; from selfcaps.cli.main import main; main(['list']); "
        "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    )
    env = {k: v for k, v in subprocess_env().items() if k not in threads.WAIT_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE False"


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_apply_threads_auto_uses_the_free_cores_and_says_so(monkeypatch, capsys, torch_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_torch_default_threads", lambda: 4)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: 2)  # e.g. taskset: 2 of 4 cores
    monkeypatch.setattr(threads, "_load_average", lambda: 1.2)
    assert apply_threads({"threads": "auto", "accelerator": "cpu", "devices": 1}) == 1
    assert torch.get_num_threads() == 1
    err = capsys.readouterr().err
    assert "threads: 1 (automatic: 2 cores, one-minute load average 1.2" in err


def test_apply_threads_setting_wins_over_the_rule(monkeypatch, capsys, torch_threads):
    monkeypatch.setattr(threads, "_load_average", lambda: 99.0)
    assert apply_threads({"threads": 2}) == 2 and torch.get_num_threads() == 2
    assert "threads: 2 (trainer.threads;" in capsys.readouterr().err


def test_apply_threads_default_ignores_the_load(monkeypatch, capsys, torch_threads):
    """Sums depend on the thread count: the default must not depend on the load."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_torch_default_threads", lambda: 2)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: 2)
    monkeypatch.setattr(threads, "_load_average", lambda: 1.7)
    assert apply_threads({"threads": None}) == 2
    assert apply_threads({"threads": None, "deterministic": True}) == 2
    assert "threads: 2 (every core: 2 cores whatever the load" in capsys.readouterr().err
