"""Files a run writes and reads: atomic writes, safe checkpoint loading, weights + config.

Every file is written atomically, with the permissions ``open()`` would give it
(:mod:`selfcaps.engine.atomic`, re-exported here). Checkpoints are loaded with
``torch.load(weights_only=True)``: a checkpoint crafted to run code when
unpickled is refused. Reading trained weights needs no Lightning and lives in
:mod:`selfcaps.models.weights` (``load_checkpoint``, ``load_weights`` and
``CheckpointError`` are re-exported here).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from safetensors.torch import save as safetensors_save

from selfcaps.engine.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    atomic_write_yaml,
    check_writable,
)
from selfcaps.models.weights import CheckpointError, load_checkpoint, load_weights

__all__ = [
    "AtomicCheckpointIO",
    "CheckpointError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_write_yaml",
    "check_writable",
    "load_checkpoint",
    "load_weights",
    "save_weights",
]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO that writes atomically and loads with ``weights_only=True``."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Serialise ``checkpoint`` to memory, then write it atomically to ``path``."""
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        atomic_write_bytes(path, buf.getvalue())

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Load safely (the ``weights_only`` argument is ignored: always True)."""
        return load_checkpoint(path, map_location=map_location or "cpu")


def save_weights(path: Path | str, state_dict: Mapping[str, torch.Tensor], config: dict) -> None:
    """Write ``model.safetensors`` and ``config.json`` beside it, both atomically.

    Args:
        path: The ``.safetensors`` file.
        state_dict: The network's weights.
        config: What is needed to rebuild the network (``model`` name and kwargs, ...).
    """
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    atomic_write_bytes(path, safetensors_save(tensors))
    atomic_write_json(Path(path).with_name("config.json"), config)
