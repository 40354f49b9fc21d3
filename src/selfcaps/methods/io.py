"""Files a run writes and reads: atomic writes, safe checkpoint loading, weights + config.

Every file of a run directory is written to a temporary file in the same
directory, flushed to disk and then renamed over the target (``os.replace`` is
atomic on POSIX), so a crash or a full disk mid-write leaves the previous good
file (or no file), never a truncated one. Checkpoints are loaded with
``torch.load(weights_only=True)``: a checkpoint crafted to run code when
unpickled is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save

__all__ = [
    "AtomicCheckpointIO",
    "CheckpointError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable",
    "load_checkpoint",
    "load_weights",
    "save_weights",
]


class CheckpointError(RuntimeError):
    """A checkpoint or weights file that cannot (or must not) be loaded; names the file."""


def check_writable(directory: Path) -> None:
    """Fail early, with a clear message, if ``directory`` cannot be created or written.

    Args:
        directory: The directory a run will write.

    Raises:
        PermissionError / OSError: With the directory named in the message.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
            pass
    except OSError as e:
        raise type(e)(
            e.errno, f"cannot write the output directory {directory}: {e.strerror}"
        ) from e


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    On any error (e.g. the disk is full) the temporary file is removed and the
    previous content of ``path``, if any, is left untouched.

    Args:
        path: Target file.
        data: Content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise type(e)(e.errno, f"could not write {path}: {e.strerror}") from e
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write text atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path | str, obj: Any) -> None:
    """Write JSON atomically, refusing NaN and infinity (they are not valid JSON)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def atomic_write_yaml(path: Path | str, obj: Any) -> None:
    """Write YAML atomically (``yaml.safe_dump``: plain data only)."""
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


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
