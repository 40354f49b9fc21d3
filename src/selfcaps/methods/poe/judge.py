"""How specific the samples of products of expert capsules are: a judging CNN's class purity.

Capsule ``j``'s purity is the share of its generated samples given its most frequent
class by a small CNN trained on the run's training split (:func:`train_judge`). A
constant generator is 100% pure, so ``purity_classes_covered`` (distinct majority
classes over the capsules) is reported beside it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from selfcaps.data import DatasetInfo, EvalTransform
from selfcaps.data.datamodule import TransformDataset, mix_seed
from selfcaps.engine.progress import progress
from selfcaps.models.poe import PoECapsNet

__all__ = [
    "capsule_predictions",
    "class_purity",
    "judge_network",
    "purity_metrics",
    "train_judge",
]


def class_purity(predictions: Tensor) -> tuple[float, int]:
    """Share (percent) of the most frequent class among ``predictions`` and that class.

    Examples:
        >>> class_purity(torch.tensor([3, 3, 1, 3]))
        (75.0, 3)
    """
    cls, count = Counter(predictions.tolist()).most_common(1)[0]
    return 100.0 * count / len(predictions), int(cls)


def judge_network(in_chans: int, image_size: int, num_classes: int) -> nn.Module:
    """A small CNN that judges the class of generated images."""
    side = image_size // 4
    return nn.Sequential(
        nn.Conv2d(in_chans, 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * side * side, num_classes),
    )


def train_judge(
    dm: Any, cfg: Any, info: DatasetInfo, device: torch.device
) -> tuple[nn.Module, float]:
    """Train the judging CNN on the training split; return it and its test top-1 (%).

    Args:
        dm: The run's data module.
        cfg: The run configuration (``judge`` section and ``seed``).
        info: The dataset's channels, image size and classes.
        device: Where to train.
    """
    j = cfg.judge
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(mix_seed(cfg.seed, 0x70D6E))
        judge = judge_network(info.channels, info.image_size[0], info.num_classes).to(device)
        opt = torch.optim.Adam(judge.parameters(), lr=j.lr)
        data = TransformDataset(dm.split("train"), EvalTransform())
        g = torch.Generator().manual_seed(mix_seed(cfg.seed, 0x70D6F))
        loader = DataLoader(data, batch_size=int(j.batch_size), shuffle=True, generator=g)
        judge.train()
        with torch.enable_grad():
            for _ in progress(range(int(j.epochs)), "training the judging CNN (epochs)"):
                for x, y in loader:
                    loss = F.cross_entropy(judge(x.to(device)), y.to(device))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
    judge.eval()
    correct = total = 0
    for x, y in dm.eval_loader("test"):
        correct += int((judge(x.to(device)).argmax(1).cpu() == y).sum())
        total += len(y)
    return judge, 100.0 * correct / max(total, 1)


@torch.no_grad()
def capsule_predictions(
    net: PoECapsNet,
    judge: nn.Module,
    samples: Any,
    device: torch.device,
    restricted: bool = False,
    suffix: str = "",
) -> tuple[Tensor, Tensor]:
    """The seeded draws of every capsule and the judge's class for the image of each.

    Args:
        net: The network whose capsules generate.
        judge: The judging CNN (:func:`train_judge`).
        samples: The ``samples`` section (``per_capsule``, ``seed``).
        device: Where ``net`` and ``judge`` are.
        restricted: Draw from the restricted domain (the capsules' mean poses' hemisphere).
        suffix: Names the progress bar.

    Returns:
        Draws ``(n, num_caps, out_dim)`` and predicted classes ``(n, num_caps)``.
    """
    n, seed = int(samples.per_capsule), int(samples.seed)
    draws = net.draws(n, torch.Generator().manual_seed(mix_seed(seed, 0xD4A)), restricted)
    preds = [
        torch.cat(
            [
                judge(net.generate(j, chunk.to(device))).argmax(1).cpu()
                for chunk in draws[:, j].split(128)
            ]
        )
        for j in progress(range(net.num_caps), f"judging {n} samples per capsule{suffix}")
    ]
    return draws, torch.stack(preds, dim=1)


def purity_metrics(
    net: PoECapsNet,
    judge: nn.Module,
    samples: Any,
    device: torch.device,
    suffix: str,
    restricted: bool = False,
) -> dict[str, float | int | str]:
    """Per-capsule class purity of ``samples.per_capsule`` generated images (percent).

    Args:
        net: The network whose capsules generate.
        judge: The judging CNN (:func:`train_judge`).
        samples: The ``samples`` section (``per_capsule``, ``seed``).
        device: Where ``net`` and ``judge`` are.
        suffix: Appended to every key (``""``, ``"_restricted"``, ``"_untrained"``).
        restricted: Draw from the restricted domain (the capsules' mean poses' hemisphere).
    """
    purities, classes = [], []
    for preds in capsule_predictions(net, judge, samples, device, restricted, suffix)[1].T:
        p, cls = class_purity(preds)
        purities.append(p)
        classes.append(cls)
    out: dict[str, float | int | str] = {
        f"purity_capsule_{j:02d}{suffix}": p for j, p in enumerate(purities)
    }
    out[f"purity_mean{suffix}"] = math.fsum(purities) / len(purities)  # the same on every Python
    out[f"purity_classes_covered{suffix}"] = len(set(classes))
    out[f"purity_majority_classes{suffix}"] = ",".join(map(str, classes))
    return out
