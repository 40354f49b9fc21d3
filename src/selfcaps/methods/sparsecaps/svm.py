"""SparseCaps' evaluation (Rawlinson et al. 2018, section 3.1): RBF SVMs on the latent capsules.

:func:`svm_evaluation` encodes the MNIST and affNIST images with a
:class:`~selfcaps.methods.sparsecaps.SparseCaps` in eval mode, fits and tests the SVM of
each protocol and feature kind, and returns the metrics; :func:`svm_key` and
:func:`svm_metric` name and read them in ``metrics.json``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from selfcaps.config.checks.sparsecaps import FEATURE_KINDS
from selfcaps.eval import svm_probe
from selfcaps.eval.method_metrics import evaluation_record
from selfcaps.methods.sparsecaps.affnist_halves import affnist_halves
from selfcaps.models.sparsecaps import winner_frequency

__all__ = ["PROTOCOLS", "routing_metrics", "svm_evaluation", "svm_key", "svm_metric"]


PROTOCOLS = ("mnist", "affnist_a", "affnist_b")


def svm_key(protocol: str, kind: str) -> str:
    """The ``metrics.json`` key of an SVM accuracy: ``v`` is the headline, the others suffixed.

    Args:
        protocol: ``mnist``, ``affnist_a`` or ``affnist_b``.
        kind: ``unmasked`` (v, section 2.3 and the reference classifier), ``masked``
            (v' = m v, eq. 4) or ``pixels``.

    Examples:
        >>> svm_key("affnist_a", "unmasked"), svm_key("affnist_a", "masked")
        ('svm_affnist_a', 'svm_affnist_a_masked')
    """
    return f"svm_{protocol}" if kind == "unmasked" else f"svm_{protocol}_{kind}"


def svm_metric(metrics: dict[str, Any], protocol: str, kind: str) -> float | None:
    """An SVM accuracy of a run's ``metrics.json``, in this layout or the one before it.

    Runs written before the headline read ``v`` hold ``svm_<protocol>_unmasked`` and
    ``svm_<protocol>_masked``, with ``svm_<protocol>`` set by ``eval.feature`` (``v'``
    for ``sparse`` by default): the suffixed keys are read first, so both layouts give
    the feature asked for.

    Args:
        metrics: The parsed ``metrics.json``.
        protocol: See :func:`svm_key`.
        kind: See :func:`svm_key`.

    Returns:
        The accuracy in percent, or None if the run did not compute it.

    Examples:
        >>> old = {"svm_mnist": 90.0, "svm_mnist_masked": 90.0, "svm_mnist_unmasked": 94.0}
        >>> new = {"svm_mnist": 94.0, "svm_mnist_masked": 90.0}
        >>> svm_metric(old, "mnist", "unmasked"), svm_metric(new, "mnist", "unmasked")
        (94.0, 94.0)
    """
    for key in (f"svm_{protocol}_{kind}", svm_key(protocol, kind)):
        if metrics.get(key) is not None:
            return float(metrics[key])
    return None


def length_accuracy(lengths: Tensor, labels: Tensor) -> float:
    """Accuracy (percent) of CapsNet's prediction, the longest digit capsule."""
    return 100.0 * float((lengths.argmax(1) == labels).float().mean())


def svm_evaluation(method: Any, dm: Any) -> dict[str, float | int | str]:
    """SVM protocols on MNIST and affNIST, per feature kind, plus routing statistics.

    Args:
        method: A :class:`~selfcaps.methods.sparsecaps.SparseCaps` (its network in eval
            mode), whose ``encode`` gives the codes.
        dm: The run's data module.

    Returns:
        The metrics (accuracies in percent): ``svm_<protocol>[_<kind>]``
        (:func:`svm_key`), the sizes of every set, the affNIST source and
        :func:`routing_metrics` of the MNIST test split, and ``recon_error_mnist`` /
        ``recon_error_affnist``: the reconstruction error of the test images (each
        image's summed squared pixel error, the training loss, averaged; labels unused:
        the ``supervised`` variant reconstructs through its longest capsule). The paper
        reports it as "batch mean square error is 7.75 and 18.49 on MNIST and affNIST"
        (section 3.5).
    """
    e = method.cfg.eval
    kinds = list(FEATURE_KINDS) + (["pixels"] if e.baselines else [])
    stats = ["support", "ranks", "mask", "lengths", "recon_error"]
    max_train = int(e.svm_max_train) if e.svm_max_train else None
    train = dm.split("train")
    train_idx = method.seeded_subset(len(train), max_train, 0x5F17)
    tr, tr_y = method.encode(train, kinds, train_idx)
    test = dm.split("test")
    max_test = int(e.svm_max_test) if e.get("svm_max_test") else None
    test_idx = method.seeded_subset(len(test), max_test, 0x7E57)
    te, te_y = method.encode(test, kinds + stats, test_idx)
    feats = {"mnist": ((tr, tr_y), (te, te_y))}
    metrics: dict[str, float | int | str] = {
        "variant": method.variant,
        "svm_c": float(e.svm_c),
        "svm_gamma": float(e.svm_gamma),
        "svm_train_mnist": len(train_idx),
        "svm_test_mnist": len(test_idx),
        **evaluation_record(
            "eval_svm_mnist", "test", len(test_idx), "train", len(train_idx), method.sparse_net
        ),
    }
    if e.affnist != "none":
        aff, metrics["affnist_source"] = method.affnist_test(dm)
        mode = str(e.get("affnist_halves", "permutation"))
        aff_train = method.affnist_like(dm, "train") if mode == "train_digits" else None
        halves = affnist_halves(
            len(aff),  # type: ignore[arg-type]
            int(e.affnist_fit),
            int(e.affnist_test),
            mode,
            max_train,
            versions=getattr(aff, "versions", 1),
            n_train=len(aff_train) if aff_train is not None else None,
        )
        af_te, af_te_y = method.encode(
            aff, [*kinds, "lengths", "ranks", "recon_error"], halves.test
        )
        fit_ds = aff_train if aff_train is not None else aff
        af_fit, af_fit_y = method.encode(fit_ds, kinds, halves.fit)
        feats["affnist_a"] = ((af_fit, af_fit_y), (af_te, af_te_y))
        feats["affnist_b"] = ((tr, tr_y), (af_te, af_te_y))
        metrics.update(
            affnist_fit_images=len(halves.fit),
            affnist_test_images=len(halves.test),
            affnist_halves=mode,
            recon_error_affnist=float(af_te["recon_error"].mean()),
        )
        fit_split = "affnist_like train" if aff_train is not None else "affnist test (fit half)"
        metrics.update(
            evaluation_record(
                "eval_svm_affnist_a",
                "affnist test (test half)",
                len(halves.test),
                fit_split,
                len(halves.fit),
                method.sparse_net,
            )
        )
        if method.variant == "supervised":
            metrics["capsnet_acc_affnist"] = length_accuracy(af_te["lengths"], af_te_y)
    else:
        metrics["affnist_source"] = "none (eval.affnist=none)"
    for protocol, ((fit, fit_y), (test, test_y)) in feats.items():
        for kind in kinds:
            gamma = "scale" if kind == "pixels" else float(e.svm_gamma)
            res = svm_probe(fit[kind], fit_y, test[kind], test_y, C=float(e.svm_c), gamma=gamma)
            metrics[svm_key(protocol, kind)] = float(res["top1"])
    boost = method.sparse_net.boosting.boost
    metrics["recon_error_mnist"] = float(te["recon_error"].mean())
    metrics.update(routing_metrics(te["support"], te["ranks"].long(), te["mask"], boost))
    if method.variant == "supervised":
        metrics["capsnet_acc_mnist"] = length_accuracy(te["lengths"], te_y)
    return metrics


def routing_metrics(
    support: Tensor, ranks: Tensor, mask: Tensor, boost: Tensor
) -> dict[str, float]:
    """Summary numbers of the routing statistics over the MNIST test split.

    Args:
        support: ``(N, L)`` routing support.
        ranks: ``(N, L)`` ranks.
        mask: ``(N, L)`` the mask of eq. 3 (or the variant's).
        boost: ``(L,)`` the boost values of the lifetime boosting (Algorithm 1).
    """
    share = support / support.sum(1, keepdim=True).clamp_min(1e-12)
    wins = winner_frequency(ranks)
    return {
        "support_top1_share": 100.0 * float(share.max(1).values.mean()),
        "winning_capsules": int((wins >= 0.01).sum()),
        "mask_nonzero": float((mask > 0).float().sum(1).mean()),
        "boost_max": float(boost.max()),
        "boost_min": float(boost.min()),
    }
