"""The files of a toy method, as a user writes them in a package of their own.

:func:`write_toy_package` writes them into a directory (the test puts it on ``sys.path``):
a network, a method, its record, two presets, and the ``dist-info`` whose
``entry_points.txt`` declares the record, as ``pip install`` writes it for a package
whose ``pyproject.toml`` has::

    [project.entry-points."selfcaps.methods"]
    toymethod = "toypkg.record:RECORD"

``docs/adding_a_method.md`` walks through the same files.
"""

from __future__ import annotations

from pathlib import Path

FILES = {
    "toypkg/__init__.py": '"""A method of my own for selfcaps."""\n',
    "toypkg/model.py": '''"""The network: a linear autoencoder, timm style."""

import torch
from torch import nn

from selfcaps.models import register_model


class ToyNet(nn.Module):
    def __init__(self, in_chans: int, image_size: int, width: int) -> None:
        super().__init__()
        d = in_chans * image_size * image_size
        self.encoder, self.decoder = nn.Linear(d, width), nn.Linear(width, d)
        self.num_features = width

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.encoder(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.forward_features(x)).view_as(x)


@register_model
def toynet(in_chans: int = 1, image_size: int = 28, width: int = 16) -> ToyNet:
    return ToyNet(in_chans, image_size, width)
''',
    "toypkg/method.py": '''"""How the toy method learns: it reconstructs the image."""

from typing import Any

import torch.nn.functional as F

from selfcaps.data.transforms import EvalTransform
from selfcaps.methods import CapsuleMethod
from selfcaps.eval.method_metrics import knn_metrics
from selfcaps.models import create_model


class ToyMethod(CapsuleMethod):
    name = "toymethod"

    def model_config(self) -> dict[str, Any]:
        cfg = super().model_config()
        cfg["model_kwargs"].update(
            in_chans=self.info.channels, image_size=self.info.image_size[0]
        )
        return cfg

    def build_network(self):
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def build_transforms(self):
        tf = EvalTransform(mean=self.info.mean, std=self.info.std)
        return tf, tf

    def compute_loss(self, batch):
        x, _ = batch
        return F.mse_loss(self.net(x), x), {}

    def features(self, x):
        return {"backbone": self.network.forward_features(x)}

    def evaluate(self, dm):
        return knn_metrics(self, dm, self.features, ["backbone"], self.info.num_classes)
''',
    "toypkg/record.py": '''"""The toy method's record (no torch)."""

from selfcaps.records import CliFlag, MethodRecord


def check(cfg) -> None:
    if int(cfg.model.width) < 1:
        raise ValueError(f"model.width: expected a positive integer, got {cfg.model.width}")


RECORD = MethodRecord(
    name="toymethod",
    method="toypkg.method:ToyMethod",
    model_module="toypkg.model",
    models=("toynet",),
    presets="toypkg.configs",
    flags={"--width": CliFlag("model.width", int, "width of the code")},
    config_check="toypkg.record:check",
    bench_notes={},
    bench_datasets=("mnist5k",),
)
''',
    "toypkg/configs/__init__.py": "",
    "toypkg/configs/toymethod_quick.yaml": (
        "data:\n  name: mnist5k\n  batch_size: 32\ntrainer:\n  epochs: 1\n"
        "monitor:\n  knn_k: 10\neval:\n  knn_k: 10\nmodel:\n  name: toynet\n  width: 16\n"
    ),
    "toypkg/configs/toymethod_paper.yaml": (
        "data:\n  name: mnist\n  batch_size: 256\ntrainer:\n  epochs: 100\n"
        "monitor:\n  knn_k: 200\neval:\n  knn_k: 200\nmodel:\n  name: toynet\n  width: 256\n"
    ),
    "toypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: toypkg\nVersion: 0.1\n",
    "toypkg-0.1.dist-info/entry_points.txt": (
        "[selfcaps.methods]\ntoymethod = toypkg.record:RECORD\n"
    ),
}


def write_toy_package(root: Path) -> Path:
    """Write :data:`FILES` under ``root``; returns ``root`` (the directory for ``sys.path``)."""
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
