"""A run directory as a trained model, in one call: :func:`load_run` and :func:`load_method`.

:func:`load_run` gives the network (``selfcaps.create_model``'s, in ``eval()``
mode) with the run's resolved configuration, and is itself callable on a dataset's own
uint8 images: ``run(images)`` applies the run's evaluation transform and returns the
features ``selfcaps embed`` writes. Loading imports Lightning only for a run without
``config.json`` (one that stopped before writing its weights), whose network arguments
come from the method; the first ``run(images)`` imports it to build the method's
transform. :func:`load_method` gives the method's LightningModule (what ``selfcaps
eval`` and ``selfcaps embed`` use: its ``features`` and transforms).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from selfcaps.config.loading import read_yaml
from selfcaps.models import create_model
from selfcaps.models.weights import (
    CheckpointError,
    load_checkpoint,
    load_network_state,
    read_weights,
    run_weights_file,
)

if TYPE_CHECKING:
    from selfcaps.methods.base import CapsuleMethod

__all__ = ["LoadedRun", "load_method", "load_run", "run_config"]


@dataclass
class LoadedRun:
    """What :func:`load_run` returns: the trained network, and features of images in one call.

    ``run(images)`` takes images as the dataset holds them (``get_dataset(...).data``, or
    ``ds[i][0]`` of a dataset without transform): uint8, ``(C, H, W)`` or ``(B, C, H, W)``.
    It applies the run's evaluation transform (:attr:`transform`: scaling to ``[0, 1]``,
    the dataset's normalisation, SparseCaps' canvas, ...) and returns the method's named
    features (CoCa: ``backbone``, ``capsule``, ``embedding``), each ``(B, D)``: the values
    ``selfcaps embed`` writes for the same images. No gradients; :attr:`network` stays in
    ``eval()`` mode.

    Attributes:
        network: The trained network, in ``eval()`` mode. Its ``forward_features`` takes
            images *after* the run's evaluation transform (floats, normalised).
        config: The run's resolved configuration (``config.yaml``; ``{}`` without one).
        model_config: ``model``, ``model_kwargs`` and ``method`` that rebuild the network
            (``config.json``, or derived from ``config.yaml``).
        weights: The file the weights were read from.
    """

    network: nn.Module
    config: dict[str, Any]
    model_config: dict[str, Any]
    weights: Path
    _method: Any = field(default=None, init=False, repr=False, compare=False)

    def _features_method(self) -> CapsuleMethod:
        """The run's method around :attr:`network` (built on first use; imports Lightning)."""
        if self._method is None:
            if not self.config.get("method"):
                raise CheckpointError(
                    f"{self.weights}: the run has no config.yaml, so its evaluation transform "
                    "is unknown; call run.network on images you have transformed yourself"
                )
            from selfcaps.methods import get_method

            cfg = copy.deepcopy(self.config)
            cfg.setdefault("trainer", {})["compile"] = False
            method = get_method(cfg["method"])(cfg)
            method.net = self.network  # the very network of this run, not a copy
            self._method = method.eval()
        return self._method

    @property
    def transform(self) -> Callable[[Tensor], Any]:
        """The run's evaluation transform: one uint8 ``(C, H, W)`` image -> the network's input."""
        return self._features_method().build_transforms()[1]

    def __call__(self, images: Tensor) -> dict[str, Tensor]:
        """Features of a dataset's own images, through the run's evaluation transform.

        Args:
            images: uint8 ``(C, H, W)`` or ``(B, C, H, W)``, as the dataset holds them.

        Returns:
            ``{kind: (B, D) tensor}``, the kinds and values of ``selfcaps embed``.

        Raises:
            ValueError: Not uint8 images (already transformed images go to :attr:`network`).
            CheckpointError: The run has no ``config.yaml`` (its transform is unknown).
        """
        if images.dtype != torch.uint8 or images.dim() not in (3, 4):
            raise ValueError(
                "run(images): expected uint8 images (C, H, W) or (B, C, H, W) as the dataset "
                f"holds them, got {images.dtype} of shape {tuple(images.shape)}; the run's "
                "evaluation transform scales and normalises them (for images you have "
                "transformed yourself, call run.network.forward_features)"
            )
        batch = images.unsqueeze(0) if images.dim() == 3 else images
        method = self._features_method()
        transform = method.build_transforms()[1]
        x = torch.stack([transform(image) for image in batch])
        was_training = self.network.training
        self.network.eval()
        try:
            with torch.no_grad():
                return method.features(x)
        finally:
            self.network.train(was_training)


def run_config(run_dir: Path | str) -> dict[str, Any]:
    """The resolved configuration a run wrote (``config.yaml``); ``{}`` if there is none.

    Raises:
        CheckpointError: ``config.yaml`` is not a YAML mapping (named).
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    return read_yaml(path, dict, CheckpointError)


def load_run(run_dir: Path | str, checkpoint: str = "best", method: str | None = None) -> LoadedRun:
    """Load a run directory's trained network in one call.

    Args:
        run_dir: A directory written by ``selfcaps run`` / ``pretrain``.
        checkpoint: ``best`` (``checkpoints/best.ckpt``, the weights the run evaluated
            and exported; else ``model.safetensors``) or ``last``
            (``checkpoints/last.ckpt``).
        method: If given, the run must be of this method.

    Returns:
        A :class:`LoadedRun`: the network in ``eval()`` mode (``create_model(...,
        checkpoint_path=RUN_DIR)`` gives the same weights in training mode), the run's
        configuration, the network's arguments and the weights' file. Called on a
        dataset's own uint8 images, it applies the run's evaluation transform and returns
        the features ``selfcaps embed`` writes.

    Raises:
        CheckpointError: A missing or unreadable file, a run of another method, or
            weights that do not fit the network (the key, expected vs got shape).

    Examples:
        >>> import selfcaps
        >>> run = selfcaps.load_run("runs/coca_quick")  # doctest: +SKIP
        >>> images = selfcaps.data.get_dataset("mnist5k", split="test").data[:8]  # doctest: +SKIP
        >>> run(images)["backbone"].shape  # uint8 in, the run's transform applied  # doctest: +SKIP
        torch.Size([8, 2048])
    """
    run_dir = Path(run_dir)
    weights_file = run_weights_file(run_dir, checkpoint)
    config = run_config(run_dir)
    weights = read_weights(weights_file)
    model_config = weights.model_config or _model_config_of(run_dir, config)
    found = model_config.get("method") or config.get("method")
    if method is not None and found != method:
        raise CheckpointError(f"{run_dir} is a {found!r} run, not a {method!r} run")
    net = create_model(model_config["model"], **model_config.get("model_kwargs", {}))
    load_network_state(net, weights.state_dict, weights.path)
    return LoadedRun(net.eval(), config, model_config, weights.path)


def _model_config_of(run_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config.json``'s content for a run that has none, from its method and ``config.yaml``."""
    if not config.get("method"):
        raise CheckpointError(
            f"{run_dir} has neither config.json nor a config.yaml naming its method: "
            "cannot tell which network the weights belong to"
        )
    from selfcaps.methods import get_method

    built = get_method(config["method"])(config)
    return {**built.model_config(), "method": built.name}


def load_method(run_dir: Path | str, checkpoint: str = "best", cfg: Any = None) -> CapsuleMethod:
    """The method (LightningModule) of a run directory with its weights, in ``eval()`` mode.

    Args:
        run_dir: A directory written by ``selfcaps run`` / ``pretrain``.
        checkpoint: ``best`` or ``last``, as for :func:`load_run`. A Lightning checkpoint
            restores the whole method (e.g. EncapNet's feedback units); ``model.safetensors``
            (``best`` when the checkpoint is gone) restores the network.
        cfg: The configuration to build the method with (default: the run's
            ``config.yaml``), e.g. with ``data.root`` changed.

    Raises:
        CheckpointError: No ``config.yaml``, or a missing, unreadable or unfitting file.
    """
    from selfcaps.methods import get_method

    run_dir = Path(run_dir)
    cfg = run_config(run_dir) if cfg is None else cfg
    if not cfg:
        raise CheckpointError(
            f"{run_dir} is not a run directory: {run_dir / 'config.yaml'} does not exist"
        )
    path = run_weights_file(run_dir, checkpoint)
    method = get_method(cfg["method"])(cfg)
    if path.suffix == ".ckpt":
        method.load_state_dict(load_checkpoint(path)["state_dict"])
    else:
        load_network_state(method.network, read_weights(path).state_dict, path)
    return method.eval()
