"""Each method's own ``selfcaps run`` flags, importable without torch.

The command line builds its parser from this table before anything heavy is
imported, so that ``selfcaps run sparsecaps --help`` answers at once and shows
only SparseCaps' flags. Each flag sets one configuration key; the method checks
the value's range in its ``validate_config``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["METHOD_FLAGS", "NO_TRAINING", "CliFlag", "on_off"]


@dataclass(frozen=True)
class CliFlag:
    """A method-specific command-line flag that sets a configuration key.

    Attributes:
        key: Dotted configuration key the flag sets.
        type: Converts the command-line string (``int``, ``float``, ``str``, :func:`on_off`).
        help: One line for ``--help``.
        choices: Valid values, if they are a fixed set.
    """

    key: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None


def on_off(value: str) -> bool:
    """``on`` / ``off`` (any case) as a boolean.

    Examples:
        >>> on_off("on"), on_off("OFF")
        (True, False)
    """
    v = value.strip().lower()
    if v not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")
    return v == "on"


#: ``{method: {flag: spec}}`` for every method (an empty dict: generic flags only).
METHOD_FLAGS: dict[str, dict[str, CliFlag]] = {
    "coca": {},
    "encapnet": {
        "--variant": CliFlag("model.variant", str, "EncapNet capConvs", ("master", "master_aide")),
        "--ot": CliFlag("loss.ot", on_off, "feedback agreement units: on|off"),  # type: ignore[arg-type]
    },
    "mcae": {
        "--pretrain-epochs": CliFlag(
            "trainer.epochs", int, "MCAE pretraining epochs (0: no pretraining)"
        ),
        "--finetune-epochs": CliFlag("eval.finetune_epochs", int, "MCAE finetuning epochs"),
        "--mask-ratio": CliFlag("model.mask_ratio", float, "MCAE fraction of masked patches"),
        "--backbone": CliFlag("model.backbone", str, "MCAE backbone", ("convmixer", "vit")),
    },
    "poe": {},
    "sparsecaps": {
        "--variant": CliFlag(
            "model.variant",
            str,
            "SparseCaps variant: sparse (the method), dense (no mask), supervised (CapsNet)",
            ("sparse", "dense", "supervised"),  # models.sparsecaps.VARIANTS (checked by a test)
        )
    },
}


#: What ``--epochs 0`` also sets for a method whose evaluation trains, so that ``--epochs 0``
#: means no training at all for every method. ``--epochs`` counts MCAE's pretraining
#: epochs (as ``--pretrain-epochs``); with 0 its finetuning is skipped too and the
#: untrained class capsules are tested. ``--pretrain-epochs 0`` (no pretraining, then the
#: usual finetuning: the no-pretraining baseline of its claim) and an explicit
#: ``--finetune-epochs N`` are unaffected.
NO_TRAINING: dict[str, dict[str, int]] = {"mcae": {"eval.finetune_epochs": 0}}
