"""Checks of the PoE keys (``model``, ``cd``, ``eval``, ``samples``)."""

from __future__ import annotations

from typing import Any

from selfcaps.config.checks._expect import expect, one_of

__all__ = ["check"]


def check(cfg: Any) -> None:
    """Check the PoE keys; every error names its key.

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    m, cd = cfg.model, cfg.cd
    one_of(cfg, "model.normalize", ("children", "parents"), "children or parents")
    one_of(
        cfg,
        "model.decoder_normalize",
        (None, "children", "parents"),
        "null (as model.normalize), children or parents",
    )
    one_of(cfg, "model.generation", ("paper", "alone"), "paper or alone")
    one_of(cfg, "cd.decoder_rule", ("paper", "reconstruction"), "paper or reconstruction")
    one_of(cfg, "cd.decoder_target", ("code", "transpose"), "code or transpose")
    one_of(cfg, "model.agreement", ("cosine", "dot"), "cosine or dot")
    stages = list(m.stage_epochs)
    expect(
        len(stages) == 3 and all(int(s) >= 0 for s in stages),
        "model.stage_epochs",
        "3 epoch counts >= 0",
        stages,
    )
    epochs = int(cfg.trainer.epochs)
    if epochs and sum(stages) != epochs:
        raise ValueError(
            f"trainer.epochs ({epochs}) must equal the sum of model.stage_epochs {stages} "
            f"= {sum(stages)}; set both (e.g. model.stage_epochs=[1,1,1] --epochs 3)"
        )
    for key in ("lr_encoder", "lr_decoder", "lr_decay"):
        expect(cd[key] > 0, f"cd.{key}", "a value > 0", cd[key])
    for key in ("momentum", "weight_decay", "sparsity"):
        expect(cd[key] >= 0, f"cd.{key}", "a value >= 0", cd[key])
    expect(0 < cd.sparsity_target < 1, "cd.sparsity_target", "0 < p < 1", cd.sparsity_target)
    expect(
        isinstance(cd.orthogonal_encoder, bool), "cd.orthogonal_encoder", "true or false",
        cd.orthogonal_encoder,
    )  # fmt: skip
    most = cfg.eval.max_images
    expect(most is None or int(most) >= 1, "eval.max_images", "null or >= 1", most)
    for key in ("rows", "per_capsule"):
        expect(int(cfg.samples[key]) >= 1, f"samples.{key}", ">= 1", cfg.samples[key])
