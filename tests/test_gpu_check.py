"""``benchmarks/gpu_check.py`` runs on the CPU (tiny sizes, a few steps), so that it cannot rot.

All five methods end to end in one process; one row through a child process with its JSON
line; and what the check does when a row's child is stopped by a signal or the budget is
spent (it ends with the rows it has, exit code 1).
"""

import json
import platform
import sys
from pathlib import Path

import pytest
import torch

from selfcaps.cli.main import build_parser
from selfcaps.cli.run import spec_from_args
from selfcaps.run.provenance import git_commit
from selfcaps.run.train import prepare_run

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SMOKE = ["--accelerator", "cpu", "--steps", "2", "--warmup", "1", "--resume-steps", "4", "--tiny"]


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
    cfg, out, ckpt, _ = prepare_run(spec_from_args(parsed))
    assert (cfg.preset, cfg.data.name, cfg.trainer.precision) == ("paper", "mnist5k", "bf16-mixed")
    assert cfg.eval.figures is False  # the resume check draws no figures
    assert ckpt is None and not out.exists()  # checked, nothing written


def _rows(out: str) -> list[list[str]]:
    rows = [line.split() for line in out.splitlines()]
    return [r for r in rows if r and r[0] in ("coca", "sparsecaps", "mcae", "encapnet", "poe")]


@pytest.mark.slow
def test_all_five_methods_end_to_end_on_the_cpu(gpu_check, capsys, tmp_path):
    """Finite, resumed exactly, float64 agreement, one table row and one JSON line each."""
    jsonl = tmp_path / "rows.jsonl"
    argv = [*SMOKE, "--in-process", "--precisions", "32-true", "--jsonl", str(jsonl)]
    assert gpu_check.main(argv) == 0
    rows = _rows(capsys.readouterr().out)
    assert [r[0] for r in rows] == ["coca", "sparsecaps", "mcae", "encapnet", "poe"]
    for r in rows:
        assert r[2:4] == ["yes", "exact"] and r[-1] == "yes", r
        assert float(r[4]) <= 1e-3  # float32 features against float64
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [x["method"] for x in lines] == ["coca", "sparsecaps", "mcae", "encapnet", "poe"]
    assert all(x["images_s"] > 0 and x["resume"] == 0.0 for x in lines)
    for x in lines:  # every network convolves; CoCa's capsule votes are matrix products
        assert 0 < x["conv_flops_per_image"] <= x["flops_per_image"]
        assert (x["conv_flops_per_image"] < x["flops_per_image"]) or x["method"] != "coca", x
        assert set(x["tf32"]) == {"conv", "matmul"}
        assert x["torch"] == torch.__version__ and x["python"] == platform.python_version()
        assert x["cuda"] == (torch.version.cuda or "none")
        assert x["commit"] == git_commit()  # this checkout's, with no --commit


@pytest.mark.slow
def test_a_row_in_a_child_process(gpu_check, capsys):
    argv = [*SMOKE, "--methods", "coca", "--precisions", "bf16-mixed", "--method-cap-s", "300"]
    assert gpu_check.main(argv) == 0
    (row,) = _rows(capsys.readouterr().out)
    assert row[1:4] == ["bf16-mixed", "yes", "exact"] and row[-1] == "yes", row


def test_a_row_stopped_by_a_signal_ends_the_check_with_what_it_has(gpu_check, monkeypatch, capsys):
    calls = []

    def fake_child(name, precision, argv, timeout):
        calls.append(name)
        if name == "sparsecaps":  # an outer `timeout` sent SIGTERM: the run exits 128 + 15
            return gpu_check.row_from_child(143, "", name, precision)
        return {
            "method": name,
            "precision": precision,
            "finite": True,
            "resume": 0.0,
            "fp64": 0.0,
            "images_s": 10.0,
            "share": 0.1,
            "seconds": 1.0,
        }

    monkeypatch.setattr(gpu_check, "run_child", fake_child)
    monkeypatch.setattr(gpu_check, "gemm_peak_flops", lambda *a, **k: 1e9)
    argv = ["--accelerator", "cpu", "--precisions", "32-true"]
    assert gpu_check.main(argv) == 1
    out = capsys.readouterr().out
    assert calls == ["coca", "sparsecaps"]  # no row started after the stopped one
    assert "stopped by SIGTERM" in out and "2 of 5 rows" in out


def test_a_spent_budget_starts_no_row(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "gemm_peak_flops", lambda *a, **k: 1e9)
    monkeypatch.setattr(gpu_check, "run_child", lambda *a: pytest.fail("a row was started"))
    assert gpu_check.main(["--accelerator", "cpu", "--budget-s", "0"]) == 1
    assert "0 of 10 rows; stopped: the budget is spent" in capsys.readouterr().out


def test_child_exits_read_as_rows(gpu_check):
    row = {"method": "coca", "precision": "32-true", "finite": True}
    assert gpu_check.row_from_child(0, "log line\n" + json.dumps(row), "coca", "32-true") == row
    assert gpu_check.row_from_child(-9, "", "coca", "32-true")["status"] == "stopped by signal 9"
    assert gpu_check.row_from_child(130, "", "m", "p")["signal"] is True
    assert gpu_check.row_from_child(1, "", "m", "p")["status"] == "failed (exit code 1)"


@pytest.mark.slow
def test_compiled_rows_time_the_speed_alone(gpu_check, capsys, tmp_path, monkeypatch):
    """``--compile``: the timed steps run with ``trainer.compile`` (the method's network is a
    compiled module), FLOPs come from an eager step, and the row leaves out resume and float64."""
    from selfcaps.methods.base import CapsuleMethod

    compiled = []
    original = CapsuleMethod.__init__

    def spy(self, cfg):
        original(self, cfg)
        compiled.append(bool(cfg.trainer.compile))

    monkeypatch.setattr(CapsuleMethod, "__init__", spy)
    jsonl = tmp_path / "rows.jsonl"
    argv = [*SMOKE, "--in-process", "--precisions", "32-true", "--methods", "poe", "--compile"]
    assert gpu_check.main([*argv, "--jsonl", str(jsonl), "--commit", "abc123+dirty"]) == 0
    assert compiled == [True, False]  # the timed steps, then the eager FLOP count
    (row,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert row["commit"] == "abc123+dirty"  # as given: the device's copy has no .git
    assert row["compiled"] and row["finite"] and row["images_s"] > 0
    assert row["resume"] is None and row["fp64"] is None and row["flops_per_image"] > 0
    (line,) = _rows(capsys.readouterr().out)
    assert line[2:5] == ["yes", "-", "-"] and "(compiled:" in " ".join(line)


def test_share_counts_each_kind_of_op_at_the_peak_of_its_precision(gpu_check):
    """By hand: 300 conv and 100 matrix-product FLOPs an image at 10 images/s."""
    peaks = {"bf16": 4000.0, "fp32": 1000.0, "tf32": 2000.0}
    row = {"images_s": 10.0, "flops_per_image": 400.0, "conv_flops_per_image": 300.0}
    defaults = row | {"tf32": {"conv": True, "matmul": False}}  # PyTorch's defaults
    assert gpu_check.share_of_peak(defaults, "32-true", peaks) == pytest.approx(10 * (0.15 + 0.1))
    ieee = row | {"tf32": {"conv": False, "matmul": False}}
    assert gpu_check.share_of_peak(ieee, "32-true", peaks) == pytest.approx(10 * 0.4)
    both = row | {"tf32": {"conv": True, "matmul": True}}
    assert gpu_check.share_of_peak(both, "32-true", peaks) == pytest.approx(10 * 0.2)
    assert gpu_check.share_of_peak(defaults, "bf16-mixed", peaks) == pytest.approx(10 * 0.1)
    # on a CPU the flags act on nothing: float32 at the float32 peak whatever they say
    assert gpu_check.share_of_peak(both, "32-true", peaks, cuda=False) == pytest.approx(10 * 0.4)


def test_a_cpu_check_measures_no_separate_tf32_peak(gpu_check, monkeypatch):
    dtypes = []
    monkeypatch.setattr(gpu_check, "gemm_peak_flops", lambda n, r, dt, d: dtypes.append(dt) or 5.0)
    assert gpu_check.measure_peaks(64, "cpu") == {"bf16": 5.0, "fp32": 5.0, "tf32": 5.0}
    assert dtypes == [torch.bfloat16, torch.float32]


def test_peaks_reach_a_child_in_order(gpu_check, tmp_path):
    peaks = {"bf16": 3.0, "fp32": 1.0, "tf32": 2.0}
    argv = gpu_check.child_argv(["--accelerator", "cpu"], peaks, tmp_path)
    assert gpu_check.parse_args(argv).peaks == peaks


def test_the_float64_check_runs_the_device_network_with_tf32_off(gpu_check, monkeypatch):
    """The device's float32 features are computed with TF32 off for convolutions and matrix
    products (PyTorch's default lets cuDNN use TF32), and the flags come back after."""
    from types import SimpleNamespace

    from torch import nn

    from selfcaps.engine.tf32 import tf32_state

    seen = []

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def features(self, x):
            seen.append((x.dtype, tf32_state()))
            return {"z": self.lin(x)}

    net = Tiny()
    dm = SimpleNamespace(split=lambda name: [(torch.ones(3),)] * 5, eval_transform=lambda x: x)
    monkeypatch.setattr(gpu_check, "load_yaml", lambda path: {})
    monkeypatch.setattr(gpu_check, "method_from_config", lambda cfg: (net, dm))
    monkeypatch.setattr(gpu_check, "load_checkpoint", lambda p: {"state_dict": net.state_dict()})
    before = tf32_state()
    assert gpu_check.float64_agreement(Path("run"), "cpu") < 1e-6
    off = {"conv": False, "matmul": False}
    assert seen == [(torch.float32, off), (torch.float64, off)]  # the CPU's: flags act on nothing
    assert tf32_state() == before


@pytest.mark.slow
def test_set_overrides_reach_every_run_of_a_row(gpu_check, tmp_path):
    """``--set trainer.tf32=false``: the timed steps run under it (their flags recorded), the
    resume runs' configurations hold it, and the row lists it."""
    jsonl = tmp_path / "rows.jsonl"
    argv = [*SMOKE, "--in-process", "--precisions", "32-true", "--methods", "poe"]
    argv += ["--set", "trainer.tf32=false", "--out", str(tmp_path / "runs"), "--jsonl", str(jsonl)]
    assert gpu_check.main(argv) == 0
    (row,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert row["overrides"] == ["trainer.tf32=false"]
    assert row["tf32"] == {"conv": False, "matmul": False}
    configs = sorted((tmp_path / "runs").glob("*/config.yaml"))
    assert len(configs) == 2 and all("tf32: false" in c.read_text() for c in configs)
    assert torch.backends.cudnn.allow_tf32  # PyTorch's default again after the check


def test_cudnn_benchmarking_reaches_the_timed_steps_not_the_deterministic_resume_runs(gpu_check):
    sets = ["--set", "trainer.tf32=false", "--set", "trainer.cudnn_benchmark=true"]
    args = gpu_check.parse_args(["--accelerator", "cpu", "--tiny", *sets])
    speed = dict(gpu_check.speed_overrides("coca", "32-true", args))
    assert speed["trainer.tf32"] is False and speed["trainer.cudnn_benchmark"] is True
    resume = gpu_check.method_args("coca", "32-true", args)
    assert "trainer.tf32=false" in resume and "--deterministic" in resume
    assert not any(a.startswith("trainer.cudnn_benchmark") for a in resume)
