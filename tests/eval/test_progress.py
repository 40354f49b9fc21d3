"""The console: epoch total and stage in the bar, validation inline, evaluation notes."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from selfcaps.engine.progress import RunProgressBar, note, progress, set_progress


class _Tiny(L.LightningModule):
    stage = 2  # as PoE's property

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)

    def training_step(self, batch, _):
        return self.lin(batch[0]).pow(2).mean()

    def validation_step(self, batch, _):
        self.log("v", self.lin(batch[0]).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_bar_shows_epoch_total_and_stage_without_empty_or_validation_bars(capsys, tmp_path):
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.Trainer(
        max_epochs=2, callbacks=[RunProgressBar()], logger=False, enable_checkpointing=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
        accelerator="cpu",
    )  # fmt: skip
    trainer.fit(_Tiny(), data, data)
    captured = capsys.readouterr()
    out = captured.err  # progress bars go to stderr; stdout is left to the summary
    assert "\r" not in captured.out
    assert "Epoch 1/2 stage 2" in out and "Epoch 2/2 stage 2" in out
    assert "validating 2/2" in out
    assert "0/?" not in out and "Validation" not in out and "Epoch 0" not in out


def test_evaluation_notes_and_bars_follow_the_switch(capsys):
    set_progress(True)
    note("fitting an rbf SVM")
    assert list(progress(range(3), "features")) == [0, 1, 2]
    err = capsys.readouterr().err
    assert "fitting an rbf SVM" in err and "features" in err
    set_progress(False)
    note("hidden")
    assert list(progress(range(3), "features")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    set_progress(True)
