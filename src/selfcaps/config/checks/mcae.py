"""Checks of the MCAE keys that need no dataset (the patch size is checked by the method)."""

from __future__ import annotations

from typing import Any

from selfcaps.config.checks._expect import check as check_key
from selfcaps.config.checks._expect import one_of
from selfcaps.config.checks.labels import label_suffix

__all__ = ["BACKBONES", "MASK_MODES", "SCHEDULERS", "check"]

BACKBONES = ("convmixer", "vit")
#: ``model.mask_mode`` (selfcaps.models.mcae.MASK_MODES; repeated here to stay torch-free).
MASK_MODES = ("removed", "pixels_zeroed")
#: MCAE's phases support these of the shared schedulers.
SCHEDULERS = ("none", "cosine")


def check(cfg: Any) -> None:
    """Check MCAE's keys; the error names the key.

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    one_of(cfg, "model.backbone", BACKBONES, " or ".join(BACKBONES))
    check_key(cfg, "model.mask_ratio", lambda v: 0.0 < v < 1.0, "a fraction in (0, 1)")
    if "mask_mode" in cfg.model:  # runs made before the key: pixels_zeroed
        one_of(cfg, "model.mask_mode", MASK_MODES, " or ".join(MASK_MODES))
    check_key(
        cfg,
        "eval.finetune_epochs",
        lambda v: v >= 0 and v == int(v),
        ">= 0 (0: the class capsules are tested untrained, as after --epochs 0)",
    )
    if "finetune_pretrained_lr_scale" in cfg.eval:  # runs made before the key: 1
        check_key(
            cfg,
            "eval.finetune_pretrained_lr_scale",
            lambda v: v >= 0.0,
            ">= 0 (a factor of eval.finetune_lr; 1: the paper's one rate)",
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
