"""The final evaluation of a ``poe`` run (``metrics.json``), in one function.

Test-split reconstructions and free energies (:mod:`~selfcaps.methods.poe.reconstruction`),
the judge's per-capsule sample purity in the complete and the restricted domain
(:mod:`~selfcaps.methods.poe.judge`), the test images grouped by their longest capsule
(:mod:`~selfcaps.methods.poe.selectivity`) and the rank-one shares of ``W_j`` and ``U_j``
(:mod:`~selfcaps.methods.poe.geometry`), for the trained capsule layer and, with
``eval.baselines``, an untrained one on the same autoencoder (keys ending ``_untrained``).
Every reading draws from its own seeded generator, so their order does not change them.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from selfcaps.eval.method_metrics import evaluation_record
from selfcaps.methods.poe.geometry import rank_metrics
from selfcaps.methods.poe.judge import purity_metrics, train_judge
from selfcaps.methods.poe.reconstruction import mean_reconstruction_stats
from selfcaps.methods.poe.selectivity import selectivity_metrics

__all__ = ["poe_evaluation"]


@torch.no_grad()
def poe_evaluation(method: Any, dm: Any) -> dict[str, float | int | str]:
    """Every metric of a ``poe`` run's ``metrics.json`` (see docs/methods/poe.md, Metrics).

    Args:
        method: The trained :class:`~selfcaps.methods.poe.PoE` (put in eval mode here; typed
            ``Any`` because ``poe.py`` imports this module).
        dm: Its data module (the test split; the training split trains the judge).

    Returns:
        The metrics, keyed as in ``metrics.json``.
    """
    method.eval()
    cfg, net, device = method.cfg, method.poe, method.device
    done = method.stages_trained()
    if done < 3:
        warnings.warn(
            f"poe: training stopped (trainer.max_time / max_steps) after {done} of 3 stages "
            f"(model.stage_epochs={list(cfg.model.stage_epochs)}); the later stages' "
            "layers are untrained and their metrics describe an initialisation",
            stacklevel=3,
        )
    metrics: dict[str, float | int | str] = {"stages_completed": done}
    untrained = method.untrained_network() if cfg.eval.baselines else None
    test = dm.eval_loader("test")
    n_test = len(test.dataset)
    metrics.update(mean_reconstruction_stats(net, test, cfg))
    metrics.update(evaluation_record("eval_test", "test", n_test, None, None, net))
    if untrained is not None:
        metrics.update(evaluation_record("eval_untrained", "test", n_test, None, None, untrained))
        base = mean_reconstruction_stats(untrained, test, cfg)
        metrics["free_energy_gap_untrained"] = base["free_energy_gap"]
        metrics["recon_caps_mse_untrained"] = base["recon_caps_mse"]
        metrics["recon_caps_spread_untrained"] = base["recon_caps_spread"]
    judge, judge_acc = train_judge(dm, cfg, method.info, device)
    metrics["judge_test_top1"] = judge_acc
    samples, classes = cfg.samples, method.info.num_classes
    nets = {"": net} | ({} if untrained is None else {"_untrained": untrained})
    for suffix, layer in nets.items():
        metrics.update(purity_metrics(layer, judge, samples, device, suffix))
        metrics.update(selectivity_metrics(layer, test, cfg, classes, suffix))
        metrics.update(rank_metrics(layer, suffix))
    if net.hemisphere_measured:
        metrics.update(purity_metrics(net, judge, samples, device, "_restricted", True))
    metrics["purity_samples_per_capsule"] = int(samples.per_capsule)
    n_split = len(dm.split("test"))
    metrics["recon_test_images"] = min(n_split, int(cfg.eval.max_images or n_split))
    return metrics
