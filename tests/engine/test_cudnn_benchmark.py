"""``trainer.cudnn_benchmark``: passed to Lightning as ``benchmark``, refused with determinism."""

from __future__ import annotations

import pytest
import torch

from selfcaps.cli import main
from selfcaps.config.loading import load_config
from selfcaps.engine.trainer import build_trainer


@pytest.fixture(autouse=True)
def _restore_flag():
    before = torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.benchmark = before


@pytest.mark.parametrize("value", [True, False])
def test_the_trainer_sets_cudnns_flag(tmp_path, value):
    cfg = load_config("coca", "quick", [("trainer.cudnn_benchmark", value)])
    torch.backends.cudnn.benchmark = not value
    build_trainer(cfg, tmp_path)
    assert torch.backends.cudnn.benchmark is value


def test_null_leaves_the_flag_as_it_stands(tmp_path):
    cfg = load_config("coca", "quick")
    assert cfg.trainer.cudnn_benchmark is None
    torch.backends.cudnn.benchmark = True
    build_trainer(cfg, tmp_path)
    assert torch.backends.cudnn.benchmark is True


def test_benchmarking_is_refused_in_a_deterministic_run(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["run", "coca", "--out", str(out), "--deterministic", "trainer.cudnn_benchmark=true"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "trainer.cudnn_benchmark" in err and "deterministic" in err
    assert not out.exists()
    assert main(["run", "coca", "--out", str(out), "trainer.cudnn_benchmark=maybe"]) == 2
    assert "'maybe'" in capsys.readouterr().err
