import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import TensorDataset

from selfcaps.caps import caps_length
from selfcaps.eval import finetune, topk_accuracy

# lightning 2.6's pytree helper trips a torch 2.14 FutureWarning; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated:FutureWarning")


def blobs(n, seed):
    """Two Gaussian blobs as 1x4x4 images."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 1, 4, 4, generator=g) + 1.5 * (2 * y - 1)[:, None, None, None]
    return TensorDataset(x, y)


SPLITS = (blobs(64, 0), blobs(32, 1), blobs(64, 2))


def backbone():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())


class History(Callback):
    def __init__(self):
        self.val_top1 = []

    def on_train_epoch_end(self, trainer, pl_module):  # runs after the epoch's validation
        self.val_top1.append(float(trainer.callback_metrics["val_top1"]))


class SabotageLastEpoch(Callback):
    """Flip the head after the last training step, so the last epoch validates badly."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last_batch = batch_idx == trainer.num_training_batches - 1
        if trainer.current_epoch == trainer.max_epochs - 1 and last_batch:
            with torch.no_grad():
                for p in pl_module.head.parameters():
                    p.neg_()


def test_best_epoch_selected_on_val_and_test_uses_it():
    history = History()
    net = backbone()
    result = finetune(
        net,
        8,
        2,
        *SPLITS,
        epochs=4,
        lr=0.02,
        weight_decay=0.0,
        batch_size=16,
        trainer_kwargs={"callbacks": [history, SabotageLastEpoch()]},
    )
    assert len(history.val_top1) == 4
    assert result["best_val_top1"] == max(history.val_top1) > 90.0
    assert result["best_epoch"] == history.val_top1.index(max(history.val_top1)) < 3
    assert result["last_val_top1"] == history.val_top1[-1] < 10.0  # the sabotaged epoch
    assert result["test_top1"] > 90.0  # so the test ran with the best state, not the last
    assert result["test_top5"] == 100.0


def test_reproducible_under_a_seed():
    a = finetune(backbone(), 8, 2, *SPLITS, epochs=2, lr=0.01, weight_decay=1e-4, batch_size=16)
    b = finetune(backbone(), 8, 2, *SPLITS, epochs=2, lr=0.01, weight_decay=1e-4, batch_size=16)
    assert a == b


def test_capsule_head_with_loss_and_score_hooks():
    class Capsules(nn.Module):  # 2 class capsules of dimension 4 from 8 features
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x):
            s = self.linear(x).view(-1, 2, 4)
            n2 = s.pow(2).sum(-1, keepdim=True)
            return s * n2 / (1 + n2) / (n2 + 1e-9).sqrt()

    def margin_loss(v, y):
        length = caps_length(v)
        t = F.one_hot(y, 2).float()
        loss = t * F.relu(0.9 - length) ** 2 + 0.5 * (1 - t) * F.relu(length - 0.1) ** 2
        return loss.sum(1).mean()

    scored = []

    def score(v):
        scored.append(v.shape)
        return caps_length(v)

    head, net = Capsules(), backbone()
    result = finetune(
        net,
        8,
        2,
        *SPLITS,
        epochs=3,
        lr=0.02,
        weight_decay=0.0,
        batch_size=16,
        head=head,
        loss_fn=margin_loss,
        score_fn=score,
    )
    assert result["test_top1"] > 90.0
    assert scored and all(shape[1:] == (2, 4) for shape in scored)
    # backbone and head hold the selected state afterwards: it gives the reported test numbers
    x, y = SPLITS[2].tensors
    net.eval()
    with torch.no_grad():
        accuracy = topk_accuracy(caps_length(head(net(x))), y, ks=(1, 5))
    assert accuracy == {"top1": result["test_top1"], "top5": result["test_top5"]}


def test_max_epochs_belongs_to_epochs():
    with pytest.raises(ValueError, match="max_epochs is set by epochs"):
        finetune(
            backbone(),
            8,
            2,
            *SPLITS,
            epochs=1,
            lr=0.01,
            weight_decay=0.0,
            batch_size=16,
            trainer_kwargs={"max_epochs": 3},
        )


def test_a_backbone_given_in_eval_mode_trains_in_training_mode():
    """A reloaded network comes in eval() mode; finetuning must update BatchNorm and use dropout.

    Lightning keeps the modes it finds, so without ``train()`` BatchNorm would keep its
    pretrained running statistics and normalise training batches with them.
    """
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(8)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), bn).eval()
    modes = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            modes.append(bn.training)
            return self.net(x)

    before = bn.running_mean.clone()
    finetune(Spy(), 8, 2, *SPLITS, epochs=1, lr=0.01, weight_decay=0.0, batch_size=16)
    assert True in modes  # the training steps saw BatchNorm in training mode
    assert not torch.equal(bn.running_mean, before)  # and it updated its statistics


def test_given_callbacks_run_beside_the_progress_bar():
    from selfcaps.engine.progress import RunProgressBar

    seen = {}

    class Spy(Callback):
        def on_train_start(self, trainer, pl_module):
            seen["bars"] = [type(c) for c in trainer.callbacks if isinstance(c, RunProgressBar)]

    for bar in (True, False):
        finetune(
            backbone(),
            8,
            2,
            *SPLITS,
            epochs=1,
            lr=0.01,
            weight_decay=0.0,
            batch_size=32,
            progress_bar=bar,
            trainer_kwargs={"callbacks": [Spy()]},
        )
        assert seen["bars"] == ([RunProgressBar] if bar else [])
