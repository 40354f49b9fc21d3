"""Checks of the EncapNet method's keys, and the networks it can train."""

from __future__ import annotations

from typing import Any

from selfcaps.config.checks._expect import check as check_key
from selfcaps.config.checks._expect import expect

__all__ = ["ENCAPNETS", "FEEDBACK_NETWORKS", "OTHER_NETWORKS", "check"]

#: EncapNets: capsule networks the feedback units (``loss.ot``) can be attached to.
ENCAPNETS = ("encapnet", "encapnet18")
#: Every network with feedback taps: the EncapNets and the ResNet counterpart (Table 3 a-b), whose
#: taps are each stage's input and the outputs of its two ``BasicBlock`` s.
FEEDBACK_NETWORKS = (*ENCAPNETS, "encapnet18_resnet")
#: Networks other than EncapNet that this method can train, and the ``model`` keys they take
#: (besides ``in_chans``, ``num_classes``, ``input_size``).
OTHER_NETWORKS: dict[str, tuple[str, ...]] = {
    "encapnet18_resnet": ("num_caps", "dims", "strides"),
    "table1_cnn": (),
    "table1_capnet_dynamic": (),
    "table1_capnet_em": (),
    "table1_capnet_em_procedure1": (),
    "table1_encapnet_master": ("num_caps", "coefficients"),
    "table1_encapnet_master_aide": ("num_caps", "coefficients"),
}

_CHECKS = [
    ("loss.ot_weight", lambda v: v >= 0, "a weight >= 0"),
    ("loss.epsilon", lambda v: v > 0, "epsilon > 0"),
    ("loss.iters", lambda v: v >= 1, "iterations >= 1"),
    ("loss.probe_every", lambda v: v >= 0, "steps >= 0 (0 = off)"),
    ("loss.divergence", lambda v: v in ("sinkhorn", "kl"), "sinkhorn or kl"),
    ("loss.cost", lambda v: v in ("cosine", "sqeuclidean", "euclidean"), "a ground cost"),
    ("loss.objective", lambda v: v in ("transport", "entropic"), "transport or entropic"),
    ("augment.recipe", lambda v: v in ("standard", "reference"), "standard or reference"),
]


def check(cfg: Any) -> None:
    """Check EncapNet's keys; the message names the key.

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    m, c = cfg.model, cfg.loss
    names = (*ENCAPNETS, *OTHER_NETWORKS)
    expect(m.name in names, "model.name", f"one of {', '.join(names)}", m.name)
    if c.ot and m.name not in FEEDBACK_NETWORKS:
        raise ValueError(
            f"loss.ot: the feedback units need one of {', '.join(FEEDBACK_NETWORKS)}, "
            f"not {m.name!r}"
        )
    if c.ot and m.name not in ENCAPNETS and c.encapsulated_generator:
        raise ValueError(
            f"loss.encapsulated_generator: {m.name!r} has no capsules to group the generator "
            "by; expected false (a plain deconvolution), got true"
        )
    for key, ok, expected in _CHECKS:
        check_key(cfg, key, ok, expected)
    if c.ot:
        _check_units(cfg)


def _check_units(cfg: Any) -> None:
    """Each ``loss.units`` entry is ``[module, lower tap, higher tap]`` within the network."""
    # EncapNet: input, Type I, Type II outputs; ResNet counterpart: input, its two blocks.
    resnet = cfg.model.name not in ENCAPNETS
    n_modules, n_taps = len(cfg.model.dims), 3 if resnet else 2 + int(cfg.model.num_type2)
    for unit in cfg.loss.units:
        ok = len(unit) == 3 and 1 <= unit[0] <= n_modules
        ok = ok and all(-n_taps <= t < n_taps for t in unit[1:])
        if not ok:
            raise ValueError(
                f"loss.units: {list(unit)} is not [module 1..{n_modules}, lower tap, "
                f"higher tap] with taps in -{n_taps}..{n_taps - 1}"
            )
