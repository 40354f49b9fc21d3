"""The engine's finetuning phase: its Trainer settings, and the files it leaves on disk."""

import csv
import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from selfcaps.engine.checkpoints import AtomicCheckpointIO, load_checkpoint
from selfcaps.engine.csv_logs import RunCSVLogger
from selfcaps.engine.finetune_runs import finetune_trainer_kwargs, save_finetuned
from selfcaps.models.weights import load_weights, network_state


def config(**trainer):
    base = {"accelerator": "cpu", "precision": "32-true", "log_every_n_steps": 1}
    return OmegaConf.create({"trainer": {**base, **trainer}})


class Tiny(L.LightningModule):
    """A linear classifier that logs its training and validation loss per epoch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Linear(3, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.backbone(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.backbone(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_without_a_directory_only_the_run_settings():
    """No directory: the run's accelerator, precision and log interval; no file of any kind."""
    kwargs = finetune_trainer_kwargs(config(precision="bf16-mixed", log_every_n_steps=7), None)
    assert kwargs == {
        "accelerator": "cpu",
        "precision": "bf16-mixed",
        "log_every_n_steps": 7,
        "use_distributed_sampler": False,
    }


def test_a_phase_logs_per_epoch_and_writes_last_ckpt_atomically(tmp_path):
    """metrics.csv has every epoch (1-based) and the logged validation loss of the final
    weights; checkpoints/ holds last.ckpt alone, with those weights and the step count."""
    out = tmp_path / "finetune"
    kwargs = finetune_trainer_kwargs(config(), out)
    assert isinstance(kwargs["logger"], RunCSVLogger)
    assert [type(c) for c in kwargs["callbacks"]] == [ModelCheckpoint]
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 3, generator=g), torch.arange(24) % 2
    train = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8)
    val = DataLoader(TensorDataset(x[16:], y[16:]), batch_size=8)
    module = Tiny()
    trainer = L.Trainer(
        max_epochs=3, enable_progress_bar=False, enable_model_summary=False, **kwargs
    )
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    trainer.fit(module, train, val)

    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.ckpt"]
    last = load_checkpoint(out / "checkpoints" / "last.ckpt")
    assert last["epoch"] == 3 and last["global_step"] == 3 * 2
    for k, v in module.state_dict().items():
        assert torch.equal(last["state_dict"][k], v)

    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    val_rows = [r for r in rows if r.get("val_loss")]
    assert [int(r["epoch"]) for r in val_rows] == [1, 2, 3]
    assert sorted(int(r["epoch"]) for r in rows if r.get("train_loss")) == [1, 2, 3]
    w, b = (p.detach().double() for p in (module.backbone.weight, module.backbone.bias))
    logits = x[16:].double() @ w.T + b  # the final weights' loss, in float64
    expected = -torch.log_softmax(logits, 1)[torch.arange(8), y[16:]].mean()
    assert float(val_rows[-1]["val_loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert not [p for p in out.rglob("*") if p.name.startswith(".") or ".tmp" in p.name]


@pytest.mark.parametrize("prefix", ["backbone.", ""])
def test_save_finetuned_writes_weights_config_and_the_selected_checkpoint(tmp_path, prefix):
    """model.safetensors + config.json hold the network; best.ckpt the same tensors under
    the trainer's prefix, the selected epoch and how it was selected; nothing else."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    state = net.state_dict()
    cfg = {"model": "tiny", "model_kwargs": {"width": 4}, "method": "test"}
    save_finetuned(tmp_path, state, cfg, epoch=4, selected_on="min val_loss", prefix=prefix)

    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["checkpoints/best.ckpt", "config.json", "model.safetensors"]
    weights, read_cfg = load_weights(tmp_path / "model.safetensors")
    assert read_cfg == cfg == json.loads((tmp_path / "config.json").read_text())
    assert weights.keys() == state.keys() == load_file(tmp_path / "model.safetensors").keys()
    best = load_checkpoint(tmp_path / "checkpoints" / "best.ckpt")
    assert best["epoch"] == 4 and best["selected_on"] == "min val_loss"
    assert sorted(best["state_dict"]) == sorted(prefix + k for k in state)
    # what the run readers take as the network's own weights (``backbone.`` is stripped)
    for k, v in state.items():
        assert torch.equal(weights[k], v)
        assert torch.equal(network_state(best["state_dict"])[k], v)
