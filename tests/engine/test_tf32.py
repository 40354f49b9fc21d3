"""``trainer.tf32``: the TF32 flags a run sets, restores and records."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from selfcaps.cli import main
from selfcaps.engine import tf32 as tf32_module
from selfcaps.engine.tf32 import tf32, tf32_state
from selfcaps.run import train as run_module
from tests.runs import TINY

FLAGS = (torch.backends.cudnn, torch.backends.cuda.matmul)


def _flags() -> tuple[bool, bool]:
    return tuple(bool(owner.allow_tf32) for owner in FLAGS)


@pytest.fixture(autouse=True)
def _pytorch_defaults():
    """Each test starts from PyTorch's defaults (convolutions TF32, matrix products IEEE)."""
    before = _flags()
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("allow", [True, False])
def test_the_setting_holds_inside_and_the_flags_come_back(allow):
    with tf32(allow):
        assert _flags() == (allow, allow)
        assert tf32_state() == {"conv": allow, "matmul": allow}
    assert _flags() == (True, False)
    with pytest.raises(KeyError), tf32(allow):  # restored when the block fails too
        raise KeyError("x")
    assert _flags() == (True, False)


def test_null_leaves_the_flags_as_they_stand():
    with tf32(None):
        assert tf32_state() == {"conv": True, "matmul": False}
    torch.backends.cudnn.allow_tf32 = False
    with tf32(None):
        assert _flags() == (False, False)


def test_a_flag_pytorch_refuses_to_read_is_recorded_as_unknown(monkeypatch):
    """PyTorch raises when the old ``allow_tf32`` and the new ``fp32_precision`` APIs are mixed."""

    class Mixed:
        @property
        def allow_tf32(self) -> bool:
            raise RuntimeError("mix of the legacy and new APIs")

    monkeypatch.setattr(torch.backends, "cudnn", Mixed())
    assert tf32_module.tf32_state() == {"conv": None, "matmul": False}


def test_a_run_trains_and_evaluates_under_its_setting_and_restores_the_flags(tmp_path, monkeypatch):
    seen = {}
    fit, finish = run_module.fit, run_module.finish

    def watched_fit(*a, **k):
        seen["fit"] = _flags()
        return fit(*a, **k)

    def watched_finish(*a, **k):
        seen["finish"] = _flags()
        return finish(*a, **k)

    monkeypatch.setattr(run_module, "fit", watched_fit)
    monkeypatch.setattr(run_module, "finish", watched_finish)
    out = tmp_path / "run"
    argv = ["run", "coca", "--out", str(out), "--epochs", "1", *TINY, "trainer.tf32=false"]
    assert main(argv) == 0
    assert seen == {"fit": (False, False), "finish": (False, False)}
    assert _flags() == (True, False)
    recorded = json.loads((out / "metrics.json").read_text())
    assert "tf32_conv" not in recorded  # a CPU run: the flags do not act on it


def test_a_cuda_run_records_its_gpu_and_tf32_flags(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"NVIDIA H200 ({device})")
    method = SimpleNamespace(device=torch.device("cuda", 0))
    with tf32(True):
        ran_on = run_module.run_provenance("abc", method, 1, 8)
    assert ran_on["device"] == "cuda:0"
    assert ran_on["gpu"] == "NVIDIA H200 (cuda:0)"
    assert (ran_on["tf32_conv"], ran_on["tf32_matmul"]) == (True, True)
    assert all(isinstance(v, int | float | str) for v in ran_on.values())  # metrics.json is flat
    torch.backends.cudnn.allow_tf32 = False
    monkeypatch.setattr(tf32_module, "_read", lambda flag: None if flag == "matmul" else False)
    ran_on = run_module.run_provenance("abc", method, 1, 8)
    assert (ran_on["tf32_conv"], ran_on["tf32_matmul"]) == (False, "unknown")


def test_a_bad_value_is_refused_before_training(tmp_path, capsys):
    assert main(["run", "coca", "--out", str(tmp_path / "r"), "trainer.tf32=sometimes"]) == 2
    err = capsys.readouterr().err
    assert "trainer.tf32" in err and "sometimes" in err
    assert not (tmp_path / "r").exists()
