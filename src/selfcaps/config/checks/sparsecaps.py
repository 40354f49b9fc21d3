"""Checks of the SparseCaps keys, and the option names they accept."""

from __future__ import annotations

from typing import Any

from selfcaps.config.checks._expect import expect, one_of
from selfcaps.records.sparsecaps import VARIANTS

__all__ = [
    "AFFNIST_CHOICES",
    "FEATURE_KINDS",
    "HALVES_CHOICES",
    "SHIFT_ORDERS",
    "SUPPORTS",
    "VARIANTS",
    "check",
]

#: ``model.support``: how a capsule's support is computed (see ``models/sparsecaps.py``).
SUPPORTS: tuple[str, ...] = ("paper", "chunk")
#: The latent-capsule features the evaluation extracts: ``unmasked`` (v) gives the
#: headline ``svm_<protocol>``, ``masked`` (v' = m v) the ``svm_<protocol>_masked`` keys.
FEATURE_KINDS = ("unmasked", "masked")
#: ``eval.affnist``: which affNIST the transfer protocols use.
AFFNIST_CHOICES = ("auto", "affnist", "affnist_like", "none")
#: ``augment.shift_order``: one random shift per digit and epoch, or every shift in turn.
SHIFT_ORDERS = ("random", "exhaustive")
#: ``eval.affnist_halves``: how protocol (a)'s fit and test images are drawn
#: (:mod:`selfcaps.methods.sparsecaps.affnist_halves`).
HALVES_CHOICES = ("permutation", "file_order", "same_digits", "train_digits")


def check(cfg: Any) -> None:
    """Check the SparseCaps keys; errors name the key.

    Raises:
        ValueError: The first bad key, its value and what is expected.
    """
    m, e, a = cfg.model, cfg.eval, cfg.augment
    one_of(cfg, "model.variant", VARIANTS)
    one_of(cfg, "model.support", SUPPORTS)
    expect(m.mask_gamma > 0, "model.mask_gamma", "a steepness > 0", m.mask_gamma)
    expect(0 <= m.mask_threshold < 1, "model.mask_threshold", "in [0, 1)", m.mask_threshold)
    expect(0 <= m.boost_ema < 1, "model.boost_ema", "a decay in [0, 1)", m.boost_ema)
    expect(m.boost_every >= 1, "model.boost_every", "a number of batches >= 1", m.boost_every)
    expect(m.boost_step >= 0, "model.boost_step", "a boost step >= 0", m.boost_step)
    expect(
        0 <= m.boost_min_freq <= m.boost_max_freq <= 1,
        "model.boost_min_freq/boost_max_freq",
        "0 <= min <= max <= 1",
        (m.boost_min_freq, m.boost_max_freq),
    )
    staircase = cfg.optim.get("staircase", True)
    expect(isinstance(staircase, bool), "optim.staircase", "true or false", staircase)
    one_of(cfg, "eval.affnist", AFFNIST_CHOICES)
    expect(e.affnist_fit >= 1, "eval.affnist_fit", "a number of images >= 1", e.affnist_fit)
    expect(e.affnist_test >= 1, "eval.affnist_test", "a number of images >= 1", e.affnist_test)
    if "affnist_halves" in e:  # absent from configs saved before the key existed
        one_of(cfg, "eval.affnist_halves", HALVES_CHOICES)
    if e.get("affnist_halves") in ("same_digits", "train_digits"):
        expected = f"affnist_like (eval.affnist_halves={e.affnist_halves} needs its known layout)"
        expect(e.affnist == "affnist_like", "eval.affnist", expected, e.affnist)
    expect(a.max_shift >= 0, "augment.max_shift", "a shift >= 0", a.max_shift)
    if "shift_order" in a:
        one_of(cfg, "augment.shift_order", SHIFT_ORDERS)
        if a.shift_order == "exhaustive":
            expected = "a canvas for the shifts (augment.shift_order=exhaustive)"
            expect(bool(a.canvas), "augment.canvas", expected, a.canvas)
    if e.affnist != "none":
        expected = "40 (affNIST's size) unless eval.affnist=none"
        expect(a.canvas == 40, "augment.canvas", expected, a.canvas)
