"""The thread count of ``trainer.threads: null`` and the OpenMP wait policy chosen from the load."""

import math
import subprocess
import sys

import pytest
import torch

from selfcaps.engine import threads
from selfcaps.engine.threads import apply_threads, choose_threads, set_openmp_wait, wait_policy
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


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        (0.0, {"GOMP_SPINCOUNT": "3000"}),  # free cores: a bounded spin
        (0.49, {"GOMP_SPINCOUNT": "3000"}),
        (0.5, {"OMP_WAIT_POLICY": "PASSIVE"}),  # half a core busy rounds up: sleep
        (3.7, {"OMP_WAIT_POLICY": "PASSIVE"}),
        (math.nan, {"GOMP_SPINCOUNT": "3000"}),  # no load average: taken as idle
    ],
)
def test_openmp_wait_follows_the_busy_cores(busy, expected):
    env: dict[str, str] = {"PATH": "x"}
    assert set_openmp_wait(env, modules={}, busy=busy) == expected
    assert env == {"PATH": "x", **expected}


def test_openmp_wait_keeps_the_users_choice_and_never_comes_too_late():
    users = ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}, {"KMP_BLOCKTIME": "0"})
    for chosen in users:
        env = dict(chosen)
        assert set_openmp_wait(env, modules={}, busy=3.0) == {} and env == chosen
    env = {}
    assert set_openmp_wait(env, modules={"torch": object()}, busy=0.0) == {} and env == {}


def test_wait_policy_in_words():
    assert wait_policy({"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "9"}) == "passive"
    assert wait_policy({"OMP_WAIT_POLICY": "active"}) == "active"
    assert wait_policy({"GOMP_SPINCOUNT": "3000"}) == "spin 3000 then sleep"


#: A command of a training subcommand that stops at a configuration error, before torch.
TRAINING_COMMAND = ["run", "coca", "optim.lr=-1"]


def _command_policy(busy: float, argv: list[str] = TRAINING_COMMAND) -> str:
    """The wait variables the command sets, in a fresh interpreter with the busy cores given."""
    code = (
        "import os, sys; from selfcaps.engine import threads; "
        f"threads.cores_busy_now = lambda: {busy}; "
        f"from selfcaps.cli.main import main; main({argv!r}); "
        "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), "
        "'torch' in sys.modules)"
    )
    env = {k: v for k, v in subprocess_env().items() if k not in threads.WAIT_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_command_sets_the_wait_policy_before_torch():
    assert _command_policy(2.0) == "PASSIVE None False"
    assert _command_policy(0.1) == "None 3000 False"


def test_commands_without_tensor_work_skip_the_cpu_sampling():
    assert _command_policy(2.0, ["list"]) == "None None False"


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


def test_cpu_times_reads_proc_stat_format(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  30 4 60 800 10 12 14 16 0 0\n"
        "cpu0 10 2 30 400 5 6 7 8 0 0\n"
        "cpu1 20 2 30 400 5 6 7 8 0 0\n"
        "intr 12345 0 0\n"
    )
    # busy = user + nice + system + irq + softirq + steal; total adds idle and iowait
    assert threads._cpu_times(str(stat)) == (63 + 73, 468 + 478)
    assert threads._cpu_times(str(stat), cpus={1}) == (73, 478)  # only the allowed CPUs
    assert threads._cpu_times(str(stat), cpus={7}) is None  # none of them listed
    assert threads._cpu_times(str(tmp_path / "absent")) is None


def test_cores_busy_now_from_two_readings(monkeypatch):
    readings = iter([(100, 1000), (150, 1100)])  # half the CPU time of the interval was busy
    monkeypatch.setattr(threads, "_cpu_times", lambda cpus: next(readings))
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert threads.cores_busy_now(interval=0.0) == pytest.approx(2.0)  # 4 CPUs x 50%
    monkeypatch.setattr(threads, "_cpu_times", lambda cpus: None)  # not Linux: the load average
    monkeypatch.setattr(threads, "_load_average", lambda: 1.7)
    assert threads.cores_busy_now(interval=0.0) == 1.7
