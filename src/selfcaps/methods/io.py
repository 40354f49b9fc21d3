"""Files a run writes and reads: atomic writes, safe checkpoint loading, weights + config.

Every file is written atomically, with the permissions ``open()`` would give it
(:mod:`selfcaps.methods.atomic`, re-exported here). Checkpoints are loaded with
``torch.load(weights_only=True)``: a checkpoint crafted to run code when
unpickled is refused.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save

from selfcaps.methods.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    atomic_write_yaml,
    check_writable,
)

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


class CheckpointError(RuntimeError):
    """A checkpoint or weights file that cannot (or must not) be loaded; names the file."""


def load_checkpoint(path: Path | str, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a Lightning checkpoint with ``torch.load(weights_only=True)``.

    Args:
        path: Checkpoint file.
        map_location: Where to put the tensors.

    Returns:
        The checkpoint dictionary.

    Raises:
        CheckpointError: Missing, truncated, or containing Python objects that
            ``weights_only`` loading refuses (which is how a checkpoint crafted
            to execute code on unpickling is stopped).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"refusing to load {path}: it contains Python objects other than tensors and "
            f"plain data, which could execute code when unpickled ({str(e).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(
            f"cannot read checkpoint {path}: truncated or corrupt ({e})"
        ) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a checkpoint (got {type(ckpt).__name__})")
    return ckpt


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


def load_weights(path: Path | str) -> tuple[dict[str, torch.Tensor], dict]:
    """Read ``model.safetensors`` and the ``config.json`` beside it.

    Raises:
        CheckpointError: A missing or unreadable file, named.
    """
    path = Path(path)
    cfg_path = path.with_name("config.json")
    for p in (path, cfg_path):
        if not p.is_file():
            raise CheckpointError(f"{p} does not exist")
    try:
        tensors = safetensors_load(path.read_bytes())
    except Exception as e:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read weights {path}: {e}") from None
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"cannot read {cfg_path}: {e}") from None
    return tensors, config
