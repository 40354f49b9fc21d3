"""optim.warmup (by hand, against torch, across a resume, in a run) and optim.betas."""

import json
import math

import pytest
import torch

from selfcaps.cli import main
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods.schedules import warmup_cosine
from tests.runs import TINY


def test_warmup_then_cosine_by_hand():
    f = warmup_cosine(2, 6)  # 2 warm-up steps, then a cosine over 4
    hand = [1 / 3, 2 / 3, 1.0, (1 + math.sqrt(0.5)) / 2, 0.5, (1 - math.sqrt(0.5)) / 2, 0.0]
    assert [f(t) for t in range(7)] == pytest.approx(hand, abs=1e-12)
    assert f(9) == pytest.approx(0.0)  # past the end: stays at 0
    with pytest.raises(ValueError, match=r"optim\.warmup"):
        warmup_cosine(-1, 6)


def step_rates(opt, sched, n: int) -> list[float]:
    """The rate of each of ``n`` optimiser steps, stepping the schedule after each."""
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def sgd(lr: float) -> torch.optim.SGD:
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def test_no_warmup_is_torchs_cosine_annealing():
    o = sgd(0.3)
    ours = step_rates(o, torch.optim.lr_scheduler.LambdaLR(o, warmup_cosine(0, 10)), 11)
    o = sgd(0.3)
    theirs = step_rates(o, torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10), 11)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_a_resumed_schedule_continues_where_it_stopped():
    def make():
        opt = sgd(1.0)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(3, 10))

    straight = step_rates(*make(), 10)
    opt, sched = make()
    resumed = step_rates(opt, sched, 4)
    state = (opt.state_dict(), sched.state_dict())
    opt, sched = make()
    opt.load_state_dict(state[0])
    sched.load_state_dict(state[1])
    resumed += step_rates(opt, sched, 6)
    assert resumed == straight


def test_a_run_warms_up_per_step(tmp_path):
    """256 images at batch 32: 8 steps; with 100 warm-up steps the rate after them is
    lr * 9 / 101 (the factor of step t = 8), not the cosine's."""
    out = tmp_path / "run"
    args = ["run", "coca", "--out", str(out), "--epochs", "1", *TINY, "optim.lr=1e-3"]
    sched = ["optim.scheduler=cosine", "optim.interval=step", "optim.warmup=100"]
    assert main([*args, *sched]) == 0
    state = load_checkpoint(out / "checkpoints" / "last.ckpt")["lr_schedulers"][0]
    assert state["_last_lr"][0] == pytest.approx(1e-3 * 9 / 101, rel=1e-9)
    assert json.loads((out / "metrics.json").read_text())["steps"] == 8


def test_warmup_needs_the_cosine_schedule(tmp_path):
    out = tmp_path / "run"
    bad = ["run", "coca", "--out", str(out), *TINY, "optim.scheduler=step", "optim.warmup=2"]
    assert main(bad) == 2
    assert not out.exists() or not (out / "checkpoints").exists()


def test_adam_betas_come_from_the_config():
    from omegaconf import OmegaConf

    from selfcaps.methods.base import build_optimizer

    params = [torch.zeros(2, requires_grad=True)]
    o = OmegaConf.create({"name": "adam", "lr": 0.1, "weight_decay": 0.0, "betas": [0.5, 0.99]})
    assert build_optimizer(params, o).defaults["betas"] == (0.5, 0.99)
    o.name = "adamw"
    assert build_optimizer(params, o).defaults["betas"] == (0.5, 0.99)
    o.betas = None  # an older run's configuration: torch's defaults
    assert build_optimizer(params, o).defaults["betas"] == (0.9, 0.999)
