"""``benchmarks/gpu_check.py`` runs on the CPU (tiny sizes, 3 steps), so that it cannot rot."""

import sys
from pathlib import Path

import pytest
import torch

from selfcaps.cli.main import build_parser
from selfcaps.cli.run import prepare_run

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delenv("SELFCAPS_OUT", raising=False)
    before = torch.get_num_threads()
    import gpu_check

    yield gpu_check
    torch.set_num_threads(before)
    sys.modules.pop("gpu_check", None)


@pytest.mark.parametrize("method", ["coca", "sparsecaps", "mcae", "encapnet", "poe"])
def test_every_methods_tiny_paper_copy_is_a_valid_run(gpu_check, method, tmp_path):
    """The arguments of every method's shrunken ``paper`` run pass all the command's checks."""
    args = gpu_check.parse_args(["--accelerator", "cpu", "--steps", "3", "--tiny"])
    argv = ["pretrain", method, "--out", str(tmp_path / "run"), "--max-steps", "3"]
    argv += gpu_check.method_args(method, "bf16-mixed", args)
    parsed, extra = build_parser(argv).parse_known_args(argv)
    parsed.overrides = extra
    cfg, out, ckpt, _ = prepare_run(parsed)
    assert (cfg.preset, cfg.data.name, cfg.trainer.precision) == ("paper", "mnist5k", "bf16-mixed")
    assert ckpt is None and not out.exists()  # checked, nothing written


def test_smoke_run_on_the_cpu(gpu_check, capsys):
    """Both precisions: finite, resumed exactly, float64 agreement; one table row each."""
    argv = ["--accelerator", "cpu", "--steps", "3", "--tiny", "--methods", "coca"]
    assert gpu_check.main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [r for r in rows if r and r[0] == "coca"]
    assert [r[1] for r in rows] == ["bf16-mixed", "32-true"]
    for r in rows:
        assert r[2:4] == ["yes", "exact"] and r[-1] == "yes", r
        assert float(r[4]) <= 1e-3  # float32 features against float64
