"""Trained weights: reading them from a run directory, a ``.safetensors`` or a Lightning ``.ckpt``.

Nothing here imports Lightning. A run directory (``selfcaps run --out DIR``) holds
the network's weights twice: ``model.safetensors`` with ``config.json`` beside it
(the model's name and keyword arguments), and the Lightning checkpoints
``checkpoints/best.ckpt`` / ``last.ckpt``, whose ``state_dict`` holds the whole
method (the network under ``net.``). :func:`read_weights` reads any of them as
the network's own ``state_dict``; :func:`load_network_state` loads it into a
network and names the first key that does not fit.

Checkpoints are read with ``torch.load(weights_only=True)``: a checkpoint crafted
to run code when unpickled is refused. A file that torch cannot load is then read (never
unpickled) with :mod:`pickletools` to tell the two failures apart: a well-formed pickle
that names Python objects outside torch's allowed set is refused as unsafe; anything
else (random bytes, a truncated file, another format) is "not a valid checkpoint".
"""

from __future__ import annotations

import json
import pickletools
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as safetensors_load
from torch import Tensor, nn

__all__ = [
    "CHECKPOINTS",
    "CheckpointError",
    "TrainedWeights",
    "disallowed_globals",
    "load_checkpoint",
    "load_network_state",
    "load_weights",
    "network_state",
    "read_weights",
    "run_weights_file",
]

#: The checkpoints of a run directory ``load_run`` / ``--checkpoint`` accept.
CHECKPOINTS = ("best", "last")
#: Prefixes a Lightning ``state_dict`` puts before the network's own keys: the method's
#: ``net`` attribute, or ``backbone`` (the classifier a finetuning writes, e.g. MCAE's).
_NETWORK_PREFIXES = ("net.", "backbone.")
#: What ``torch.compile`` inserts into the keys of the module it wraps.
_COMPILED = "_orig_mod."


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
        CheckpointError: Missing; not a valid checkpoint (random bytes, truncated,
            another format); or a well-formed pickle naming Python objects that
            ``weights_only`` loading refuses (which is how a checkpoint crafted to
            execute code on unpickling is stopped). The message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with warnings.catch_warnings():  # torch's note on pickle protocols of foreign files
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many types here; its messages may advise unsafe loading
        unsafe = disallowed_globals(path)
        if unsafe:
            raise CheckpointError(
                f"refusing to load {path}: it is a well-formed pickle that names Python objects "
                f"other than tensors and plain data ({', '.join(unsafe)}), which could execute "
                "code when unpickled"
            ) from None
        raise CheckpointError(
            f"{path} is not a valid checkpoint: truncated or corrupt, or not written by "
            f"torch.save ({_reason(e)})"
        ) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a checkpoint (got {type(ckpt).__name__})")
    return ckpt


def _reason(e: Exception) -> str:
    """A short reason from torch's exception, without its advice to load unsafely."""
    text = str(e)
    if "Weights only load failed" in text or not text.strip():
        return (
            "not a readable pickle" if text.strip() else f"{type(e).__name__}: empty or ended early"
        )
    return f"{type(e).__name__}: {text.splitlines()[0].split('. ')[0][:200]}"


def _pickle_bytes(path: Path) -> bytes:
    """The pickle of a checkpoint: ``*/data.pkl`` of a torch zip archive, else the whole file."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            return z.read(name) if name is not None else b""
    return path.read_bytes()


def _allowed_globals() -> set[str]:
    """What ``torch.load(weights_only=True)`` accepts by default (module.name)."""
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        return set(_get_allowed_globals())
    except (ImportError, AttributeError):  # another torch: only its own classes
        return set()


def disallowed_globals(path: Path | str) -> list[str] | None:
    """The Python objects a well-formed pickle names that weights-only loading refuses.

    The pickle is read with :func:`pickletools.genops` (its opcodes are parsed, nothing
    is constructed or run).

    Args:
        path: A checkpoint file (torch zip archive or plain pickle).

    Returns:
        ``module.name`` of each refused global, in order of appearance (empty if none);
        None if the file is not a well-formed pickle (random bytes, truncated, another
        format).
    """
    try:
        data = _pickle_bytes(Path(path))
        found: list[str] = []
        strings: list[str] = []  # string operands seen, for STACK_GLOBAL (module, name)
        memo: dict[int, str] = {}
        with warnings.catch_warnings():  # odd escapes in the STRING operands of random bytes
            warnings.simplefilter("ignore")
            ops = list(pickletools.genops(data))
        for op, arg, _ in ops:
            if isinstance(arg, str) and op.name not in ("GLOBAL", "INST"):
                strings.append(arg)
            elif op.name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif op.name in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT") and strings:
                memo[len(memo) if op.name == "MEMOIZE" else int(arg)] = strings[-1]
            elif op.name in ("BINGET", "LONG_BINGET", "GET") and int(arg) in memo:
                strings.append(memo[int(arg)])
    except (ValueError, KeyError, EOFError, OSError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    if not data:
        return None
    allowed = _allowed_globals()
    return [
        g
        for g in dict.fromkeys(found)
        if g not in allowed and (allowed or not g.startswith("torch."))
    ]


def load_weights(path: Path | str) -> tuple[dict[str, Tensor], dict]:
    """Read ``model.safetensors`` and the ``config.json`` beside it.

    Raises:
        CheckpointError: A missing or unreadable file, named.
    """
    path = Path(path)
    cfg_path = path.with_name("config.json")
    for p in (path, cfg_path):
        if not p.is_file():
            raise CheckpointError(f"{p} does not exist")
    return _read_safetensors(path), _read_config_json(cfg_path)


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return safetensors_load(path.read_bytes())
    except Exception as e:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read weights {path}: {e}") from None


def _read_config_json(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"cannot read {path}: {e}") from None
    if not isinstance(config, dict) or "model" not in config:
        raise CheckpointError(f"{path}: expected an object with a 'model' key, got {config!r:.80}")
    return config


def network_state(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """The network's own keys of a Lightning ``state_dict``.

    The keys under ``net.`` (a method's network), else under ``backbone.`` (a
    finetuned classifier), with the prefix removed; ``torch.compile``'s
    ``_orig_mod.`` is removed too. A ``state_dict`` with neither prefix is
    returned as it is (a plain network's).

    Examples:
        >>> import torch
        >>> sd = {"net._orig_mod.fc.weight": torch.zeros(1), "criterion.t": torch.ones(1)}
        >>> list(network_state(sd))
        ['fc.weight']
    """
    for prefix in _NETWORK_PREFIXES:
        own = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if own:
            return {k.removeprefix(_COMPILED): v for k, v in own.items()}
    return {k.removeprefix(_COMPILED): v for k, v in state_dict.items()}


def run_weights_file(run_dir: Path | str, checkpoint: str = "best") -> Path:
    """The file of a run directory that holds the weights of ``checkpoint``.

    ``best``: ``checkpoints/best.ckpt`` (what the run evaluated and wrote to
    ``model.safetensors``), else ``model.safetensors`` (a directory holding only the
    exported weights). ``last``: ``checkpoints/last.ckpt``.

    Raises:
        CheckpointError: ``run_dir`` is not a directory, ``checkpoint`` is not one of
            :data:`CHECKPOINTS`, or the file is missing (named).
    """
    run_dir = Path(run_dir)
    if checkpoint not in CHECKPOINTS:
        raise CheckpointError(
            f"checkpoint: expected one of {', '.join(CHECKPOINTS)}, got {checkpoint!r}"
        )
    if not run_dir.is_dir():
        raise CheckpointError(f"run directory {run_dir} does not exist")
    ckpt = run_dir / "checkpoints" / f"{checkpoint}.ckpt"
    if ckpt.is_file():
        return ckpt
    exported = run_dir / "model.safetensors"
    if checkpoint == "best" and exported.is_file():
        return exported
    also = f" nor {exported}" if checkpoint == "best" else ""
    raise CheckpointError(f"{run_dir} holds no {checkpoint} weights: {ckpt} does not exist{also}")


@dataclass(frozen=True)
class TrainedWeights:
    """A network's ``state_dict`` read from disk, with what is known of the network.

    Attributes:
        state_dict: The network's own keys (no ``net.`` prefix).
        model_config: ``config.json``'s content (``model``, ``model_kwargs``, ``method``),
            or ``None`` when no ``config.json`` belongs to the file.
        path: The file the tensors came from.
    """

    state_dict: dict[str, Tensor]
    model_config: dict[str, Any] | None
    path: Path


def read_weights(source: Path | str, checkpoint: str = "best") -> TrainedWeights:
    """Read trained weights from a run directory, a ``.safetensors`` or a ``.ckpt`` file.

    Args:
        source: A run directory (the weights of ``checkpoint``, see
            :func:`run_weights_file`), a ``.safetensors`` file (``config.json`` beside
            it, if any) or a Lightning ``.ckpt`` (``config.json`` of its run directory,
            ``<run>/checkpoints/x.ckpt`` -> ``<run>/config.json``, if any).
        checkpoint: For a run directory: ``best`` or ``last``.

    Raises:
        CheckpointError: A missing, unreadable or unsupported file, named.
    """
    source = Path(source)
    path = run_weights_file(source, checkpoint) if source.is_dir() else source
    if not path.is_file():
        raise CheckpointError(f"weights file {path} does not exist")
    if path.suffix == ".safetensors":
        state, cfg_path = _read_safetensors(path), path.with_name("config.json")
    elif path.suffix == ".ckpt":
        ckpt = load_checkpoint(path)
        if not isinstance(ckpt.get("state_dict"), dict):
            raise CheckpointError(f"{path} has no 'state_dict' (not a Lightning checkpoint)")
        state, cfg_path = network_state(ckpt["state_dict"]), path.parent.parent / "config.json"
    else:
        raise CheckpointError(
            f"{path}: expected a run directory, a .safetensors or a .ckpt file, "
            f"got a {path.suffix or 'suffix-less'} file"
        )
    config = _read_config_json(cfg_path) if cfg_path.is_file() else None
    return TrainedWeights(state, config, path)


def _shape(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def load_network_state(net: nn.Module, state_dict: dict[str, Tensor], source: Any) -> nn.Module:
    """Load a ``state_dict`` into ``net`` strictly, naming the first key that does not fit.

    Args:
        net: The network (its keys and shapes are what is expected).
        state_dict: The weights read from ``source``.
        source: What the weights came from, for the error messages.

    Returns:
        ``net``, with the weights loaded.

    Raises:
        CheckpointError: A key of the network missing from the file, a key of the
            file the network does not have, or a tensor of another shape (expected vs got).
    """
    expected = net.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(
                f"{len(missing)} keys of the network are not in it (first: {missing[0]!r})"
            )
        if unexpected:
            parts.append(
                f"{len(unexpected)} keys are not in the network (first: {unexpected[0]!r})"
            )
        raise CheckpointError(f"{source} does not hold this network's weights: {'; '.join(parts)}")
    for k, want in expected.items():
        got = state_dict[k]
        if got.shape != want.shape:
            raise CheckpointError(
                f"{source}: {k!r} has shape {_shape(got)}, the network expects {_shape(want)} "
                "(built with other model arguments than the weights were trained with?)"
            )
    net.load_state_dict(state_dict, strict=True)
    return net
