"""Checks of the keys every method shares (``optim``, ``data``, ``trainer``, ...)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from selfcaps.config.checks._expect import check as check_key
from selfcaps.config.checks._expect import expect

__all__ = ["check"]


def _positive(v: Any) -> bool:
    return v > 0


def _optional_positive(v: Any) -> bool:
    return v is None or v > 0


def check(cfg: Any) -> None:
    """Check the keys every method shares (ranges, choices).

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    check_key(cfg, "optim.lr", _positive, "a learning rate > 0")
    check_key(cfg, "optim.weight_decay", lambda v: v >= 0, "a weight decay >= 0")
    check_key(cfg, "optim.name", lambda v: v in ("adam", "adamw", "sgd"), "adam, adamw or sgd")
    check_key(
        cfg,
        "optim.betas",
        lambda v: v is None or (len(v) == 2 and all(0 <= b < 1 for b in v)),
        "two decay rates in [0, 1), e.g. [0.9, 0.999]",
    )
    check_key(
        cfg,
        "optim.scheduler",
        lambda v: v in ("none", "cosine", "step", "multistep"),
        "none, cosine, step or multistep",
    )
    check_key(cfg, "optim.interval", lambda v: v in ("epoch", "step"), "epoch or step")
    check_key(
        cfg,
        "optim.warmup",
        lambda v: v is None or (v >= 0 and v == int(v)),
        "a whole number of scheduler steps >= 0",
    )
    warmup = OmegaConf.select(cfg, "optim.warmup") or 0
    scheduler = OmegaConf.select(cfg, "optim.scheduler")
    expect(
        warmup == 0 or scheduler == "cosine",
        "optim.warmup",
        f"0 unless optim.scheduler is cosine (it is {scheduler})",
        warmup,
    )
    check_key(
        cfg,
        "trainer.compile_mode",
        lambda v: (
            v in (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        ),
        "null, default, reduce-overhead, max-autotune or max-autotune-no-cudagraphs",
    )
    check_key(cfg, "data.batch_size", _positive, "a batch size >= 1")
    check_key(cfg, "data.eval_batch_size", _positive, "a batch size >= 1")
    check_key(cfg, "data.val_fraction", lambda v: 0 < v < 1, "a fraction in (0, 1)")
    check_key(
        cfg,
        "data.num_workers",
        lambda v: v is None or v >= 0,
        "null (by the accelerator) or a number of workers >= 0",
    )
    check_key(cfg, "data.train_subset", _optional_positive, "null or a number of images >= 1")
    check_key(cfg, "data.shuffle_buffer", _optional_positive, "null or a number of slots >= 1")
    check_key(cfg, "trainer.epochs", lambda v: v >= 0, "a number of epochs >= 0 (0: no training)")
    check_key(cfg, "trainer.max_steps", lambda v: v == -1 or v >= 1, "-1 (no limit) or >= 1")
    check_key(cfg, "trainer.max_time", _optional_positive, "null or minutes > 0")
    check_key(cfg, "trainer.checkpoint_every_n_minutes", _optional_positive, "null or minutes > 0")
    check_key(
        cfg,
        "trainer.checkpoint_every_n_steps",
        lambda v: v is None or (v >= 1 and v == int(v)),
        "null or a number of steps >= 1",
    )
    check_key(cfg, "trainer.devices", lambda v: v == "auto" or v >= 1, "a number of devices >= 1")
    check_key(
        cfg,
        "trainer.threads",
        lambda v: v is None or v == "auto" or (not isinstance(v, str) and v >= 1),
        "null (every core), 'auto' (the cores the load leaves free) or a number >= 1",
    )
    check_key(
        cfg,
        "trainer.routing_precision",
        lambda v: v in ("float32", "autocast"),
        "'float32' (route in float32 under autocast) or 'autocast' (in its low precision)",
    )
    check_key(
        cfg,
        "trainer.vote_precision",
        lambda v: v in ("float32", "bf16"),
        "'float32' or 'bf16' (vote products from bfloat16 inputs, float32 accumulation)",
    )
    check_key(
        cfg,
        "trainer.tf32",
        lambda v: v is None or isinstance(v, bool),
        "null (PyTorch's defaults), true or false (TF32 for float32 on NVIDIA GPUs)",
    )
    check_key(
        cfg,
        "trainer.cudnn_benchmark",
        lambda v: v is None or v is False or (v is True and not cfg.trainer.get("deterministic")),
        "null, true or false (false or null with trainer.deterministic=true: cuDNN's "
        "benchmarking ignores determinism)",
    )
    check_key(cfg, "monitor.knn_every_n_epochs", lambda v: v >= 0, "a number of epochs >= 0")
    check_key(cfg, "monitor.bank_size", _optional_positive, "null or a number of images >= 1")
    for section in ("monitor", "eval"):
        check_key(cfg, f"{section}.knn_k", _positive, "a number of neighbours k >= 1")
        check_key(cfg, f"{section}.knn_t", _positive, "a temperature > 0")
    check_key(cfg, "eval.svm_c", _positive, "an SVM C > 0")
    check_key(
        cfg,
        "eval.svm_gamma",
        lambda v: v in ("scale", "auto") or v > 0,
        "an RBF gamma > 0, 'scale' or 'auto'",
    )
