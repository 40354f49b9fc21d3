"""A NaN loss or gradient stops the run with a named error (keeping the last good checkpoint),
or is skipped and counted with --skip-nonfinite."""

import json

import torch

from selfcaps.cli import main
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods.coca import CoCa
from tests.runs import TINY


def _poison_loss_at(monkeypatch, step: int) -> None:
    original = CoCa.compute_loss

    def compute_loss(self, batch):
        loss, logs = original(self, batch)
        if self.global_step == step:
            loss = loss * float("nan")
        return loss, logs

    monkeypatch.setattr(CoCa, "compute_loss", compute_loss)


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    _poison_loss_at(monkeypatch, 10)  # epoch 1 (8 steps per epoch)
    out = tmp_path / "run"
    assert main(["run", "coca", "--out", str(out), "--epochs", "3", *TINY]) == 3
    err = capsys.readouterr().err
    assert "step 10" in err and "loss is nan" in err and "skip-nonfinite" in err
    ckpt = load_checkpoint(out / "checkpoints" / "last.ckpt")
    assert ckpt["global_step"] == 8  # the end of the first epoch, the last good state
    assert all(
        torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point()
    )
    assert not (out / "metrics.json").exists()
    assert not (out / "model.safetensors").exists()


def test_nan_gradient_is_named(tmp_path, monkeypatch, capsys):
    def poison(self):
        if self.global_step == 3:
            next(self.parameters()).grad.fill_(float("inf"))
        type(self).__mro__[1].on_after_backward(self)

    monkeypatch.setattr(CoCa, "on_after_backward", poison)
    assert main(["run", "coca", "--out", str(tmp_path / "g"), "--epochs", "1", *TINY]) == 3
    err = capsys.readouterr().err
    assert "step 3" in err and "gradient of net.backbone.0.weight is not finite" in err


def test_skip_nonfinite_skips_and_counts(tmp_path, monkeypatch):
    _poison_loss_at(monkeypatch, 5)
    unchanged = []

    def on_train_batch_start(self, batch, batch_idx):
        if self.global_step == 5:
            self._before = [p.detach().clone() for p in self.parameters()]

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if hasattr(self, "_before") and not unchanged:
            unchanged.append(
                all(torch.equal(a, p) for a, p in zip(self._before, self.parameters()))
            )

    monkeypatch.setattr(CoCa, "on_train_batch_start", on_train_batch_start)
    monkeypatch.setattr(CoCa, "on_train_batch_end", on_train_batch_end)
    out = tmp_path / "skip"
    assert main(["run", "coca", "--out", str(out), "--epochs", "2", "--skip-nonfinite", *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["nonfinite_skipped"] == 1
    assert unchanged == [True]  # the skipped step changed no parameter
