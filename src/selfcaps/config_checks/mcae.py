"""Checks of the MCAE keys that need no dataset (the patch size is checked by the method)."""

from __future__ import annotations

from typing import Any

from selfcaps.config_checks._expect import expect, one_of
from selfcaps.config_checks.labels import label_suffix

__all__ = ["BACKBONES", "SCHEDULERS", "check"]

BACKBONES = ("convmixer", "vit")
#: MCAE's phases support these of the shared schedulers.
SCHEDULERS = ("none", "cosine")


def check(cfg: Any) -> None:
    """Check MCAE's keys; the error names the key.

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    m = cfg.model
    one_of(cfg, "model.backbone", BACKBONES, " or ".join(BACKBONES))
    ratio = m.mask_ratio
    expect(0.0 < float(ratio) < 1.0, "model.mask_ratio", "a fraction in (0, 1)", ratio)
    epochs = cfg.eval.finetune_epochs
    expect(int(epochs) >= 1, "eval.finetune_epochs", ">= 1 (finetuning is the evaluation)", epochs)
    scale = cfg.eval.get("finetune_pretrained_lr_scale", 1.0)
    expect(
        float(scale) >= 0.0,
        "eval.finetune_pretrained_lr_scale",
        ">= 0 (a factor of eval.finetune_lr; 1: the paper's one rate)",
        scale,
    )
    fraction, per_class = cfg.eval.get("label_fraction"), cfg.eval.get("labels_per_class")
    if fraction is not None or per_class is not None:
        try:
            label_suffix(
                None if fraction is None else float(fraction),
                None if per_class is None else int(per_class),
            )
        except ValueError as err:
            raise ValueError(f"eval.label_fraction / eval.labels_per_class: {err}") from err
    one_of(cfg, "optim.scheduler", SCHEDULERS, "none or cosine (MCAE)")
