"""Value checks of the shared configuration keys; each error names its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from selfcaps.cli.config import ConfigError

__all__ = ["check", "validate_config"]


def check(cfg: DictConfig, key: str, ok: Callable[[Any], bool], expected: str) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``ok(value)``.

    Args:
        cfg: Configuration.
        key: Dotted key.
        ok: Predicate on the value.
        expected: What a valid value is, for the message.
    """
    value = OmegaConf.select(cfg, key)
    try:
        good = ok(value)
    except TypeError:
        good = False
    if not good:
        raise ConfigError(f"{key}: expected {expected}, got {value!r}")


def _positive(v: Any) -> bool:
    return v > 0


def _optional_positive(v: Any) -> bool:
    return v is None or v > 0


def validate_config(cfg: DictConfig) -> None:
    """Check the keys every method shares (ranges, choices)."""
    check(cfg, "optim.lr", _positive, "a learning rate > 0")
    check(cfg, "optim.weight_decay", lambda v: v >= 0, "a weight decay >= 0")
    check(cfg, "optim.name", lambda v: v in ("adam", "adamw", "sgd"), "adam, adamw or sgd")
    check(
        cfg,
        "optim.scheduler",
        lambda v: v in ("none", "cosine", "step", "multistep"),
        "none, cosine, step or multistep",
    )
    check(cfg, "optim.interval", lambda v: v in ("epoch", "step"), "epoch or step")
    check(cfg, "data.batch_size", _positive, "a batch size >= 1")
    check(cfg, "data.eval_batch_size", _positive, "a batch size >= 1")
    check(cfg, "data.val_fraction", lambda v: 0 < v < 1, "a fraction in (0, 1)")
    check(cfg, "data.num_workers", lambda v: v >= 0, "a number of workers >= 0")
    check(cfg, "data.train_subset", _optional_positive, "null or a number of images >= 1")
    check(cfg, "trainer.epochs", lambda v: v >= 0, "a number of epochs >= 0 (0: no training)")
    check(cfg, "trainer.max_steps", lambda v: v == -1 or v >= 1, "-1 (no limit) or >= 1")
    check(cfg, "trainer.max_time", _optional_positive, "null or minutes > 0")
    check(cfg, "trainer.devices", lambda v: v == "auto" or v >= 1, "a number of devices >= 1")
    check(cfg, "trainer.threads", _optional_positive, "null or a number of threads >= 1")
    check(cfg, "monitor.knn_every_n_epochs", lambda v: v >= 0, "a number of epochs >= 0")
    check(cfg, "monitor.bank_size", _optional_positive, "null or a number of images >= 1")
    for section in ("monitor", "eval"):
        check(cfg, f"{section}.knn_k", _positive, "a number of neighbours k >= 1")
        check(cfg, f"{section}.knn_t", _positive, "a temperature > 0")
    check(cfg, "eval.svm_c", _positive, "an SVM C > 0")
    check(
        cfg,
        "eval.svm_gamma",
        lambda v: v in ("scale", "auto") or v > 0,
        "an RBF gamma > 0, 'scale' or 'auto'",
    )
