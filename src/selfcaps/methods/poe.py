"""How products of expert capsules learn: three stages, the last two by contrastive divergence.

Hauser, "Training products of expert capsules with mixing by dynamic routing"
(2019, arXiv:1907.11643), section 4.1. One Lightning fit with manual
optimisation; the stage is a function of the epoch (``model.stage_epochs =
[a, b, c]``; epochs past ``a + b + c``, e.g. after ``--resume --epochs``, stay
in stage 3), so a resumed run continues in the right stage:

1. **Autoencoder** (epochs ``[0, a)``): the tied-weight convolutional
   autoencoder by backpropagation of the binary cross-entropy of its
   reconstructions (dropout on the code), Adam from the ``optim`` section.
   Frozen afterwards (and in eval mode: no dropout).
2. **Capsule encoder W** (``[a, a+b)``), Algorithm 1, no backpropagation: route the
   primary capsules ``x_i`` to get ``c_ij``, ``z_j = sum_i c_ij W_ij x_i``,
   ``x_j = squash(z_j)``; reconstruct with the same ``c``:
   ``x~_i = squash(sum_j c_ij W_ij^T x_j)``; forward again ``z~_j = sum_i c_ij W_ij x~_i``;
   update (batch mean)

       dW_ij = 2 c_ij ( z_j x_i^T / (1 + |z_j|^2) - z~_j x~_i^T / (1 + |z~_j|^2) ).

   The first term is the gradient of the log unnormalised marginal
   ``sum_j log(1 + |z_j|^2)`` (eq. 10) at fixed ``c`` (:func:`data_term`), the
   second the same at the reconstruction: one step of contrastive divergence
   lowering the free energy ``F(x) = -sum_j log(1 + |z_j|^2)`` of the data
   relative to its one-step reconstruction.
   With ``model.center=true`` (not the paper's; see :mod:`selfcaps.models.poe`) the
   primary capsules are squashed *centred* codes; the mean code is the running mean
   over the first epoch after stage 1 (every code seen so far is in it).
3. **Capsule decoder U** (``[a+b, ...)``), W frozen, the paper's rule
   (``cd.decoder_rule=paper``, section 4.1, :func:`decoder_cd_update`): with the data's
   capsules ``x_j`` (through W) and the data's ``z_i``, route ``x_j`` through ``U``
   (children: the 20 capsules, parents: the 576 primary capsules, coefficients ``e_ji``),
   ``z~_i = sum_j e_ji U_ji x_j``, ``x~_j = squash(sum_i e_ji U_ji^T z~_i)``, and

       dU_ji = 2 e_ji ( z_i x_j^T / (1 + |z_i|^2) - z~_i x~_j^T / (1 + |z~_i|^2) ).

   The paper says the data's ``z_i`` and ``x_j`` "are fixed by the W_ij's" and does not
   spell out ``z_i``: ``cd.decoder_target=code`` (default) takes the data's pre-squash
   primary capsules ``unsquash(x_i)`` (the autoencoder's code, which generation decodes);
   ``transpose`` takes Algorithm 1's reconstruction ``sum_j c_ij W_ij^T x_j``.
   ``cd.decoder_rule=reconstruction`` is ours (:func:`decoder_reconstruction_update`):
   ``dU_ji = 2 e_ji (x_i - x^_i) y_j^T`` with ``x^_i = squash(sum_j e_ji U_ji y_j)``.

CD updates are applied as gradients (``p.grad = -dW``) of SGD with momentum,
L2 regularisation (``weight_decay``) and a per-epoch learning-rate decay
``lr * lr_decay ** (epochs into the stage)`` (the paper's note under
Algorithm 1), so the base class's non-finite check sees them: a NaN in an
update stops the run with :class:`~selfcaps.methods.base.NonFiniteError`
naming the parameter, or skips the step with ``trainer.skip_nonfinite``.

Routing normalisation: the paper normalises ``sum_i c_ij = 1`` over children
(``model.normalize=children``, the default, used by both W and U); ``parents``
is Sabour's softmax over parents. The coefficients set the scale of the
updates (they enter squared): for W, children normalisation gives ``c_ij ~
1/576`` and parents ``~1/20``; for U (whose children are the 20 capsules) it is
the other way round. Switching to ``parents`` therefore needs ``cd.lr_encoder``
about 1000 times smaller and ``cd.lr_decoder`` about 1000 times larger.
``model.decoder_normalize`` gives U its own normalisation.

Why the paper's settings collapse (measured in docs/methods/poe.md): at the initial ``W``
every capsule is off (``|z_j|`` about 2e-3), so Algorithm 1's model term vanishes and the data
term is about ``W_j E[c^2 x x^T]``: a power iteration that turns every capsule's ``W_j``
towards the top eigenvector of the primaries' second moment before any capsule turns on.
After every stage-2 epoch :func:`collapse_stats` logs how far it went (``w_top_share``,
``w_pair_similarity``).

Competing capsules (the ``center_parents_sparse`` preset, formerly ``competitive``; not the
paper): centred codes (``model.center``) remove the common direction of the primaries, W
routed with the softmax over parents makes the 20 capsules compete for each primary capsule
(U keeps the normalisation over children), and a sparsity penalty
``lambda/2 sum_j (q_j - p)^2`` on each capsule's mean on-probability ``q_j``
(:func:`sparsity_term`, ``cd.sparsity``, ``cd.sparsity_target``) is added to Algorithm 1's
update in stage 2, as sparse RBMs do; with our stage-3 rule and generation ``alone``. Under
DDP ``q_j`` is each process's batch mean.

Model selection (``best.ckpt``): lowest ``val_select = (3 - stage) +
val_recon_caps_mse``, where ``val_recon_caps_mse`` is the pixel MSE (at most 1)
of validation images reconstructed through the whole model (autoencoder, W, U,
unsquash, decoder) -- the path generation uses. So the best checkpoint is the
epoch of the latest stage reached (normally stage 3: a trained decoder) whose
capsule reconstructions of the validation split are best.

Final evaluation (``metrics.json``): reconstruction errors on the test split
(autoencoder alone, through W and its transpose, through W and U), the free
energies of data and one-step reconstructions and their gap for the trained
and an untrained capsule layer (same trained autoencoder; W and U a fresh draw
of the initial distribution); and per-capsule **class purity** of generated
samples, judged by a small CNN trained on the run's training split: capsule
``j``'s purity is the share of its samples given its most frequent class. A
constant generator is 100% pure, so ``purity_classes_covered`` (distinct
majority classes over the capsules) is reported beside it, and the same numbers
for the untrained capsule layer are the baseline. ``eval.max_images`` caps the
images of the validation and test reconstruction metrics (for CPU runs).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from selfcaps.caps import squash, unsquash
from selfcaps.config_checks.poe import check as check_poe_config
from selfcaps.data import EvalTransform
from selfcaps.eval.progress import progress
from selfcaps.methods.base import CapsuleMethod, build_optimizer
from selfcaps.methods.datamodule import TransformDataset, mix_seed
from selfcaps.methods.figures import Figure, ImageGrid, capsule_columns
from selfcaps.models import create_model
from selfcaps.models.poe import PoECapsNet, RoutedCaps

__all__ = [
    "CDChain",
    "PoE",
    "capsule_pair_similarity",
    "capsule_rows",
    "cd_chain",
    "class_purity",
    "collapse_stats",
    "data_term",
    "decoder_cd_update",
    "decoder_reconstruction_update",
    "encoder_cd_terms",
    "encoder_cd_update",
    "free_energies",
    "log_marginal",
    "second_moment_spectrum",
    "sparsity_term",
    "spread_images",
    "stage_of",
    "top_direction_share",
]


# ------------------------------------------------------------------ the mathematics
def log_marginal(z: Tensor) -> Tensor:
    """Log of the unnormalised marginal of the visible capsules, eq. (10).

    ``sum_j log(1 + |z_j|^2)`` for parent total inputs ``z`` ``(B, M, D)``; the free
    energy is its negative.

    Examples:
        >>> log_marginal(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))
        tensor([0.6931])
    """
    return torch.log1p(z.pow(2).sum(-1)).sum(-1)


def _expert_statistic(z: Tensor) -> Tensor:
    """``z / (1 + |z|^2)``: half the gradient of ``log(1 + |z|^2)`` with respect to ``z``."""
    return z / (1.0 + z.pow(2).sum(-1, keepdim=True))


def _outer(coef: Tensor, parent: Tensor, child: Tensor) -> Tensor:
    """Batch mean of ``coef_bnm * parent_bm child_bn^T``, in the layer's weight layout.

    Args:
        coef: Routing coefficients ``(B, N, M)``.
        parent: ``(B, M, Dp)``.
        child: ``(B, N, Dc)``.

    Returns:
        ``(N, Dc, M * Dp)`` (the GEMM layout of :class:`~selfcaps.caps.DenseCaps`, whose
        ``matrices`` view has the matrix ``coef parent child^T`` at ``[i, j]``).
    """
    b, n, _ = coef.shape
    cp = (coef.unsqueeze(-1) * parent.unsqueeze(1)).transpose(0, 1).reshape(n, b, -1)
    return torch.bmm(child.permute(1, 2, 0), cp) / b


def data_term(layer: RoutedCaps, x: Tensor, c: Tensor) -> Tensor:
    """Positive term of Algorithm 1: ``2 c_ij z_j x_i^T / (1 + |z_j|^2)``, batch mean.

    Equals the gradient of ``mean_b sum_j log(1 + |z_j|^2)`` (eq. 10) with respect to
    ``W`` with ``c`` held fixed.

    Args:
        layer: The capsule layer (``W``).
        x: Children ``(B, N, D_in)``.
        c: Routing coefficients ``(B, N, M)``.

    Returns:
        The update in ``layer.weight``'s layout.
    """
    z = layer.forward_with(x, c)
    return 2.0 * _outer(c, _expert_statistic(z), x)


class CDChain(NamedTuple):
    """One step of Algorithm 1's chain: data, its capsules, the reconstruction, forward again."""

    z: Tensor  #: parents' total input for the data, ``(B, M, D_out)``
    y: Tensor  #: parents ``squash(z)``
    c: Tensor  #: routing coefficients ``(B, N, M)``
    x_rec: Tensor  #: reconstructed children ``squash(sum_j c_ij W_ij^T y_j)``
    z_rec: Tensor  #: parents' total input for the reconstruction (same ``c``)


def cd_chain(layer: RoutedCaps, x: Tensor) -> CDChain:
    """Route ``x``, reconstruct it with the same coefficients, and go forward again."""
    z, y, c = layer.route(x)
    x_rec = squash(layer.transpose(y, c))
    return CDChain(z, y, c, x_rec, layer.forward_with(x_rec, c))


def free_energies(chain: CDChain) -> dict[str, Tensor]:
    """Batch means of the free energy of the data and of its reconstruction, and the gap."""
    f_data, f_rec = -log_marginal(chain.z).mean(), -log_marginal(chain.z_rec).mean()
    return {
        "free_energy_data": f_data,
        "free_energy_recon": f_rec,
        "free_energy_gap": f_data - f_rec,
    }


def sparsity_term(x: Tensor, z: Tensor, c: Tensor, target: float) -> Tensor:
    """Descent direction of the sparsity penalty on how often each capsule is on.

    A capsule's length ``a_j = |squash(z_j)| = |z_j|^2 / (1 + |z_j|^2)`` is the
    probability that it is on (the paper's premise). The penalty is
    ``P = 1/2 sum_j (q_j - p)^2`` with ``q_j = mean_b a_bj`` the batch's mean
    on-probability of capsule ``j`` and ``p`` the target, the sparsity target of sparse
    RBMs (Lee, Ekanadham and Ng, "Sparse deep belief net model for visual area V2",
    2007; Hinton, "A practical guide to training RBMs", 2010, section 11). Not in the
    paper. With ``c`` held fixed, as in Algorithm 1,

        -dP/dW_ij = -(q_j - p) mean_b 2 c_ij z_j x_i^T / (1 + |z_j|^2)^2.

    Args:
        x: Children (primary capsules) ``(B, N, D_in)``.
        z: Parents' total input ``(B, M, D_out)`` for ``x`` and ``c``.
        c: Routing coefficients ``(B, N, M)``.
        target: ``p``, the wanted mean on-probability, in ``(0, 1)``.

    Returns:
        ``-dP/dW`` in the layer's weight layout.
    """
    n2 = z.pow(2).sum(-1, keepdim=True)
    q = (n2 / (1.0 + n2)).mean(0)  # (M, 1)
    return -_outer(c, (q - target) * 2.0 * z / (1.0 + n2).pow(2), x)


def encoder_cd_terms(layer: RoutedCaps, x: Tensor) -> tuple[Tensor, Tensor, CDChain]:
    """The data (positive) and model (negative) terms of Algorithm 1's update, and the chain.

    ``positive = mean_b c_ij z_j x_i^T / (1 + |z_j|^2)``, ``negative`` the same at the
    one-step reconstruction ``(z~_j, x~_i)``; Algorithm 1's update is
    ``2 (positive - negative)``. Both in ``layer.weight``'s layout.
    """
    ch = cd_chain(layer, x)
    positive = _outer(ch.c, _expert_statistic(ch.z), x)
    negative = _outer(ch.c, _expert_statistic(ch.z_rec), ch.x_rec)
    return positive, negative, ch


def encoder_cd_update(
    layer: RoutedCaps, x: Tensor, sparsity: float = 0.0, target: float = 0.1
) -> tuple[Tensor, dict[str, Tensor]]:
    """One contrastive-divergence update of the capsule encoder (Algorithm 1).

    Args:
        layer: The encoder ``W``.
        x: Primary capsules of the data ``(B, N, D_in)``.
        sparsity: Weight ``lambda`` of :func:`sparsity_term` (0: the paper's update).
        target: Its target on-probability ``p``.

    Returns:
        ``(dW, stats)``: the ascent direction of the log-likelihood (minus ``lambda P``)
        and batch means of ``free_energy_data``, ``free_energy_recon``,
        ``free_energy_gap`` (data minus reconstruction; CD makes it negative),
        ``recon_caps_mse`` (``x`` vs ``x~``) and ``caps_on`` (the capsules' mean length:
        how often they are on).
    """
    positive, negative, ch = encoder_cd_terms(layer, x)
    update = 2.0 * (positive - negative)
    if sparsity:
        update = update + sparsity * sparsity_term(x, ch.z, ch.c, target)
    stats = free_energies(ch)
    stats["recon_caps_mse"] = (x - ch.x_rec).pow(2).mean()
    stats["caps_on"] = ch.y.norm(dim=-1).mean()
    return update, stats


def decoder_cd_update(
    layer: RoutedCaps, y: Tensor, z_data: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""The paper's update of the capsule decoder ``U`` (section 4.1), batch mean.

    Section 4.1, after "After the W_ij's are trained": with the data's capsules ``x_j``
    (``y`` here, through the frozen ``W``) and the data's primary-capsule total inputs
    ``z_i`` (``z_data``), route ``y`` through ``U`` for the coefficients ``e_ji`` and form
    the model's ``z~_i = sum_j e_ji U_ji x_j`` and ``x~_j = squash(sum_i e_ji U_ji^T z~_i)``
    (no squash of ``z~_i`` in between, as written); then

        dU_ji = 2 e_ji ( z_i x_j^T / (1 + |z_i|^2) - z~_i x~_j^T / (1 + |z~_i|^2) ).

    Which way a step goes (derived, not assumed). Write ``s(z) = z / (1 + |z|^2)`` and
    ``g_i(U; v) = sum_j e_ji U_ji v_j`` (linear in ``U``). With ``e`` and both statistics
    ``s(z_i)``, ``s(z~_i)`` held fixed, as Algorithm 1 holds ``c`` fixed,

        D(U) = 2 sum_i [ s(z_i) . g_i(U; x) - s(z~_i) . g_i(U; x~) ]

    has ``dD/dU_ji = 2 e_ji (s(z_i) x_j^T - s(z~_i) x~_j^T) = dU_ji`` exactly. ``D`` is
    the RBM contrast ``<v h>_data - <v h>_model`` of the bilinear energy
    ``E(h, v) = -2 sum_i h_i . g_i(U; v)`` with mean-field hidden units ``h = s(z)``
    (the 576 primary capsules) and visible units ``v`` (the 20 capsules): data pair
    ``(s(z), x)``, model pair ``(s(z~), x~)``. A step ``U <- U + lr dU`` (SGD with
    ``grad = -dU``) raises ``D`` by ``lr |dU|^2`` (``D`` is linear in ``U``): the data
    pair's energy falls relative to the model pair's. It is not the gradient of a free
    energy of a single configuration (``z~_i`` is computed at ``x``, the negative statistic
    is paired with ``x~``), so "lowers the free energy of the data relative to the
    reconstruction" is not a statement the rule guarantees. The update vanishes when the
    model reproduces the data, ``z~ = z`` and ``x~ = x``; with ``z_data`` the data's
    pre-squash primary capsules (``target="code"`` in :meth:`PoE.compute_loss`), that is
    ``U``'s routed output matching the code that generation unsquashes and decodes.

    Args:
        layer: The decoder ``U`` (children: the 20 capsules; parents: primary capsules).
        y: The data's capsules through the frozen encoder, ``(B, M_caps, D)``.
        z_data: The data's primary-capsule total inputs ``(B, N_primary, D_primary)``.

    Returns:
        ``(dU, stats)`` with ``recon_caps_mse``: ``squash(z)`` vs ``squash(z~)`` (the
        primary capsules of the data and of ``U``'s routed output, as in
        :func:`decoder_reconstruction_update`) and ``caps_recon_mse``: ``x`` vs ``x~``.
    """
    z_model, _, e = layer.route(y)
    x_model = squash(layer.transpose(z_model, e))
    positive = _outer(e, _expert_statistic(z_data), y)
    negative = _outer(e, _expert_statistic(z_model), x_model)
    stats = {
        "recon_caps_mse": (squash(z_data) - squash(z_model)).pow(2).mean(),
        "caps_recon_mse": (y - x_model).pow(2).mean(),
    }
    return 2.0 * (positive - negative), stats


def decoder_reconstruction_update(
    layer: RoutedCaps, y: Tensor, x: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """Our update of ``U`` (``cd.decoder_rule=reconstruction``): ``2 e_ji (x_i - x^_i) y_j^T``.

    Not the paper's rule (:func:`decoder_cd_update` is). The data's capsules ``y_j`` are
    routed top-down through ``U`` to ``x^_i = squash(sum_j e_ji U_ji y_j)``; the update is
    CD on the bilinear energy ``-sum e_ji x_i^T U_ji y_j`` with the capsules clamped to the
    encoder's code in both phases, the positive phase clamped to the data's primary capsules
    ``x_i`` and the negative phase the top-down reconstruction; its fixed point is
    ``x^ = x``. Kept because it is what the ``center_parents_sparse`` preset was measured with: it
    trains ``U`` directly on the squashed primary capsules that generation decodes.

    Args:
        layer: The decoder ``U`` (children: the capsules ``y``; parents: primary capsules).
        y: Capsules of the data through the frozen encoder ``(B, M_caps, D)``.
        x: The data's primary capsules ``(B, N_primary, D_primary)``.

    Returns:
        ``(dU, {"recon_caps_mse": ...})``.
    """
    _, x_hat, e = layer.route(y)
    return 2.0 * _outer(e, x - x_hat, y), {"recon_caps_mse": (x - x_hat).pow(2).mean()}


# ------------------------------------------------------- the collapse, measured
#: Training images (spread over the training split) on which stage 2's collapse is measured.
COLLAPSE_IMAGES = 256


def second_moment_spectrum(x: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues and top eigenvector of the primaries' uncentred second moment ``E[x x^T]``.

    ``S = mean_b x_b x_b^T`` over the flattened primary capsules ``x`` ``(B, N, D)``, an
    ``N D``-square matrix (4,608 for the paper's network), through the ``B x B`` Gram matrix
    ``x x^T / B``: it has the same non-zero eigenvalues, and if ``u`` is its top eigenvector,
    ``x^T u`` (normalised) is ``S``'s. In float64.

    Args:
        x: Primary capsules ``(B, N, D)``.

    Returns:
        ``(eigenvalues (B,) in descending order, top eigenvector (N D,) of unit length)``;
        the eigenvector's sign is arbitrary.
    """
    flat = x.flatten(1).double()
    evals, evecs = torch.linalg.eigh(flat @ flat.T / flat.shape[0])
    v = flat.T @ evecs[:, -1]
    return evals.flip(0).clamp_min(0.0), v / v.norm()


def capsule_rows(layer: RoutedCaps) -> Tensor:
    """Each parent's map from all children at once: ``W_j`` as ``(M, D_out, N D_in)``.

    Column ``i D_in + d`` of ``W_j`` multiplies component ``d`` of child ``i``, the order of
    ``x.flatten(1)`` for children ``x`` ``(B, N, D_in)``, so ``z_j = W_j x`` when every
    ``c_ij`` is 1.
    """
    m = layer.matrices  # (N, M, D_out, D_in)
    return m.permute(1, 2, 0, 3).reshape(layer.out_caps, layer.out_dim, -1)


def top_direction_share(layer: RoutedCaps, v: Tensor) -> Tensor:
    """Share of ``W``'s squared norm along the unit direction ``v`` of the flattened children.

    ``sum_j |W_j v|^2 / sum_j |W_j|_F^2`` (:func:`capsule_rows`): ``1 / (N D_in)`` on average
    for random ``W`` (2e-4 for the paper's network) and 1 when every row of every ``W_j`` is a
    multiple of ``v``. With ``v`` the top eigenvector of the primaries' second moment
    (:func:`second_moment_spectrum`) it measures stage 2's collapse: while every capsule is
    off, Algorithm 1's model term vanishes and its data term is ``W_j E[c^2 x x^T]`` (about),
    a power iteration that turns every ``W_j`` towards ``v``.
    """
    w = capsule_rows(layer).detach().double()
    return (w @ v.to(w)).pow(2).sum() / w.pow(2).sum()


def capsule_pair_similarity(layer: RoutedCaps) -> Tensor:
    """Mean over capsule pairs ``j < k`` of the similarity of what the two capsules read.

    The cosine of the Gram matrices ``W_j^T W_j`` and ``W_k^T W_k`` (``N D_in``-square;
    :func:`capsule_rows`) under the Frobenius inner product, computed without forming them:
    ``<W_j^T W_j, W_k^T W_k> = |W_j W_k^T|_F^2``. It lies in ``[0, 1]``, ignores how each
    capsule orients its output, is about ``D_out / (N D_in + D_out)`` for random ``W`` (0.0035
    for the paper's network) and 1 when every capsule reads one and the same direction.
    """
    w = capsule_rows(layer).detach().double()
    m, o = w.shape[0], w.shape[1]
    gram = w.reshape(m * o, -1) @ w.reshape(m * o, -1).T  # (M o, M o): blocks W_j W_k^T
    cross = gram.view(m, o, m, o).pow(2).sum((1, 3))  # (M, M): |W_j W_k^T|_F^2
    norm = cross.diagonal().sqrt()
    cos = cross / (norm[:, None] * norm[None, :]).clamp_min(1e-300)
    j, k = torch.triu_indices(m, m, 1)
    return cos[j, k].mean()


def spread_images(dataset: Any, n: int) -> Tensor:
    """``min(n, len(dataset))`` images spread evenly over a raw split, as the model sees them."""
    data = TransformDataset(dataset, EvalTransform())
    picks = torch.linspace(0, len(data) - 1, min(n, len(data))).long()
    return torch.stack([data[int(i)][0] for i in picks])


@torch.no_grad()
def collapse_stats(net: PoECapsNet, images: Tensor) -> dict[str, Tensor]:
    """Stage 2's collapse on fixed training images: ``W``'s alignment and the data's spectrum.

    Keys: ``w_top_share`` (:func:`top_direction_share` on the top eigenvector of the
    images' primaries' second moment), ``w_pair_similarity``
    (:func:`capsule_pair_similarity`), ``primaries_top_eig_share`` (the top eigenvalue's
    share of the trace) and ``primaries_eig_ratio`` (second eigenvalue over the first).
    """
    evals, v = second_moment_spectrum(net.primary_capsules(images))
    return {
        "w_top_share": top_direction_share(net.encoder, v),
        "w_pair_similarity": capsule_pair_similarity(net.encoder),
        "primaries_top_eig_share": evals[0] / evals.sum(),
        "primaries_eig_ratio": evals[1] / evals[0] if len(evals) > 1 else evals.new_zeros(()),
    }


def stage_of(epoch: int, stage_epochs: list[int] | tuple[int, ...]) -> int:
    """Training stage (1, 2, 3) of a 0-based epoch; epochs past the schedule stay in stage 3.

    Examples:
        >>> [stage_of(e, [2, 1, 1]) for e in range(6)]
        [1, 1, 2, 3, 3, 3]
    """
    a, b = int(stage_epochs[0]), int(stage_epochs[1])
    return 1 if epoch < a else 2 if epoch < a + b else 3


def stages_completed(epochs_done: int, stage_epochs: list[int] | tuple[int, ...]) -> int:
    """How many of the three stages ran all their epochs after ``epochs_done`` full epochs.

    Examples:
        >>> [stages_completed(e, [2, 1, 1]) for e in (0, 1, 2, 3, 4)]
        [0, 0, 1, 2, 3]
        >>> stages_completed(0, [0, 0, 1])
        2
    """
    ends = torch.tensor([int(s) for s in stage_epochs]).cumsum(0)
    return int((ends <= int(epochs_done)).sum())


def class_purity(predictions: Tensor) -> tuple[float, int]:
    """Share (percent) of the most frequent class among ``predictions`` and that class.

    Examples:
        >>> class_purity(torch.tensor([3, 3, 1, 3]))
        (75.0, 3)
    """
    cls, count = Counter(predictions.tolist()).most_common(1)[0]
    return 100.0 * count / len(predictions), int(cls)


def _judge_network(in_chans: int, image_size: int, num_classes: int) -> nn.Module:
    """A small CNN that judges the class of generated images."""
    side = image_size // 4
    return nn.Sequential(
        nn.Conv2d(in_chans, 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * side * side, num_classes),
    )


# ------------------------------------------------------------------------ the method
class PoE(CapsuleMethod):
    """Products of expert capsules (see the module docstring).

    Args:
        cfg: Run configuration (``model``, ``cd``, ``samples``, ``judge`` sections as in
            ``configs/poe_*.yaml``).
    """

    name: ClassVar[str] = "poe"
    monitor_feature: ClassVar[str] = "capsules"
    monitor_metric: ClassVar[tuple[str, str]] = ("val_select", "min")
    knn_monitor: ClassVar[bool] = False

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.automatic_optimization = False
        self._hemisphere_sum: Tensor | None = None
        self._collapse_images: Tensor | None = None
        #: Epochs whose every batch was trained (a budget can stop one midway, which
        #: Lightning still counts in ``current_epoch``); checkpointed, for ``stages_completed``.
        self.register_buffer("epochs_finished", torch.zeros((), dtype=torch.long))
        #: The same count for the training of this process (and the checkpoint it resumed
        #: from): unlike the buffer, loading ``best.ckpt``'s weights for evaluation, which
        #: may be from an earlier epoch, does not lower it.
        self._epochs_run = 0

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the epoch as finished at its last batch."""
        if batch_idx + 1 >= self.trainer.num_training_batches:
            self.epochs_finished.fill_(self.current_epoch + 1)
            self._epochs_run = self.current_epoch + 1

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Also the running sum of stage 3's capsule poses (a budget can stop an epoch midway)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["selfcaps"]["hemisphere_sum"] = self._hemisphere_sum

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Also take the resumed checkpoint's finished epochs as this training's."""
        super().on_load_checkpoint(checkpoint)
        self._hemisphere_sum = checkpoint.get("selfcaps", {}).get("hemisphere_sum")
        finished = checkpoint.get("state_dict", {}).get("epochs_finished")
        if finished is not None:
            self._epochs_run = max(self._epochs_run, int(finished))

    def stages_trained(self) -> int:
        """How many of the three stages training completed (:func:`stages_completed`).

        Counted from the training, not from the evaluated weights: ``best.ckpt`` may be an
        earlier epoch of stage 3 than the last, and all three stages still ran.
        """
        epochs = max(int(self.epochs_finished), self._epochs_run)
        return stages_completed(epochs, self.cfg.model.stage_epochs)

    # ------------------------------------------------------------------ setup
    @property
    def poe(self) -> PoECapsNet:
        """The network, typed."""
        return self.network  # type: ignore[return-value]

    def build_network(self) -> nn.Module:
        """The PoE capsule network for this dataset's channels and image size."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs (without the stage schedule), with channels and image size."""
        cfg = super().model_config()
        cfg["model_kwargs"].pop("stage_epochs", None)
        cfg["model_kwargs"]["in_chans"] = self.info.channels
        cfg["model_kwargs"]["image_size"] = self.info.image_size[0]
        return cfg

    def build_transforms(self) -> tuple[Any, Any]:
        """Pixels in ``[0, 1]`` (the sigmoid decoder's range), no augmentation."""
        return EvalTransform(), EvalTransform()

    @classmethod
    def validate_config(cls, cfg: Any) -> None:
        """Check the PoE keys; every error names its key (:mod:`selfcaps.config_checks.poe`)."""
        check_poe_config(cfg)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        """``optim`` for the autoencoder (Adam in presets); SGD with momentum and L2 for W, U."""
        o, cd, net = self.cfg.optim, self.cfg.cd, self.poe
        sgd = {"momentum": cd.momentum, "weight_decay": cd.weight_decay}
        return [
            build_optimizer(net.ae.parameters(), o),
            torch.optim.SGD(net.encoder.parameters(), lr=cd.lr_encoder, **sgd),
            torch.optim.SGD(net.decoder.parameters(), lr=cd.lr_decoder, **sgd),
        ]

    # ------------------------------------------------------------------ training
    @property
    def stage(self) -> int:
        """The current training stage (1: autoencoder, 2: encoder W, 3: decoder U)."""
        return stage_of(self.current_epoch, self.cfg.model.stage_epochs)

    def on_train_epoch_start(self) -> None:
        """Reseed; set this epoch's CD learning rate; start measuring the capsules' mean poses."""
        super().on_train_epoch_start()
        stage, cd = self.stage, self.cfg.cd
        if stage > 1:
            a, b, _ = (int(s) for s in self.cfg.model.stage_epochs)
            into = self.current_epoch - (a if stage == 2 else a + b)
            base_lr = cd.lr_encoder if stage == 2 else cd.lr_decoder
            for group in self._optimizer(stage).param_groups:
                group["lr"] = base_lr * cd.lr_decay**into
        if stage == 3:
            self._hemisphere_sum = torch.zeros_like(self.poe.hemisphere, dtype=torch.float64)
        self.log("stage", float(stage), on_step=False, on_epoch=True)

    def _optimizer(self, stage: int) -> Any:
        opts = self.optimizers()
        return opts[stage - 1] if isinstance(opts, list) else opts

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """This stage's update, left in the parameters' ``.grad``; returns a monitor loss.

        Stage 1: the autoencoder's BCE (backpropagated only if finite). Stages 2 and 3:
        ``grad = -update`` (averaged over processes under DDP) and, as the loss, the
        batch's free-energy gap (stage 2) or capsule reconstruction MSE (stage 3).
        """
        x = batch[0]
        net, stage, cd = self.poe, self.stage, self.cfg.cd
        if stage == 1:
            net.ae.train()
            recon = self.compiled(net.ae)(x)
            loss = F.binary_cross_entropy(recon, x)
            if torch.isfinite(loss):
                self.manual_backward(loss)
            return loss, {"train_ae_mse": (recon - x).pow(2).mean().detach()}
        net.ae.eval()
        with torch.no_grad():
            code = self.compiled(net.ae.encode)(x)
            if net.center and self.current_epoch == int(self.cfg.model.stage_epochs[0]):
                self._observe_codes(code)
            caps = self.compiled(net.code_to_capsules)(code)
            if stage == 2:
                update, stats = self.compiled(encoder_cd_update)(
                    net.encoder, caps, float(cd.sparsity), float(cd.sparsity_target)
                )
                param, loss = net.encoder.weight, stats["free_energy_gap"]
            else:
                _, y, c = self.compiled(net.encoder.route)(caps)
                if cd.decoder_rule == "reconstruction":
                    update, stats = self.compiled(decoder_reconstruction_update)(
                        net.decoder, y, caps
                    )
                else:
                    z_data = unsquash(caps) if cd.decoder_target == "code" else None
                    if z_data is None:  # "transpose": Algorithm 1's sum_j c_ij W_ij^T x_j
                        z_data = self.compiled(net.encoder.transpose)(y, c)
                    update, stats = self.compiled(decoder_cd_update)(net.decoder, y, z_data)
                param, loss = net.decoder.weight, stats["recon_caps_mse"]
                if self._hemisphere_sum is not None:
                    self._hemisphere_sum += y.sum(0).double()
            if self.trainer.world_size > 1:
                update = self.trainer.strategy.reduce(update, reduce_op="mean")
            param.grad = -update
        return loss, {f"train_{k}": v for k, v in stats.items()}

    def _observe_codes(self, code: Tensor) -> None:
        """Fold this batch's codes (of every process) into the mean code (``model.center``)."""
        total, count = code.sum(0), torch.tensor(float(code.shape[0]), device=code.device)
        if self.trainer.world_size > 1:
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
            count = self.trainer.strategy.reduce(count, reduce_op="sum")
        self.poe.observe_codes(total, int(count.item()))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """Base guard (finite loss, logging), finite-update check, then this stage's step."""
        opt = self._optimizer(self.stage)
        opt.zero_grad(set_to_none=True)
        loss = super().training_step(batch, batch_idx)
        if loss is None:  # non-finite loss, skipped (trainer.skip_nonfinite)
            opt.zero_grad(set_to_none=True)
        elif self.stage > 1:  # stage 1's manual_backward already ran the check
            self.on_after_backward()
        opt.step()
        return loss

    def _store_hemisphere(self) -> None:
        """Copy this stage-3 epoch's summed capsule poses (all processes) into the network."""
        if self.stage != 3 or self._hemisphere_sum is None:
            return
        total = self._hemisphere_sum
        if self.trainer.world_size > 1:
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
        self.poe.hemisphere.copy_(total.to(self.poe.hemisphere.dtype))

    def on_train_epoch_end(self) -> None:
        """Store the mean capsule poses before ``last.ckpt`` is written; stage 2: the collapse.

        After every stage-2 epoch, :func:`collapse_stats` on :data:`COLLAPSE_IMAGES` fixed
        training images goes to ``metrics.csv`` (and so to ``figures/curves.png``).
        """
        self._store_hemisphere()
        if self.stage == 2:
            images = self._fixed_training_images()
            if images is not None:
                for k, v in collapse_stats(self.poe, images).items():
                    self.log(k, float(v), on_step=False, on_epoch=True)

    def _fixed_training_images(self) -> Tensor | None:
        """:data:`COLLAPSE_IMAGES` training images spread evenly over the split (cached)."""
        if self._collapse_images is None:
            dm = getattr(self.trainer, "datamodule", None)
            if dm is None:
                return None
            self._collapse_images = spread_images(dm.split("train"), COLLAPSE_IMAGES)
        return self._collapse_images.to(self.device)

    # --------------------------------------------------------------- validation
    def on_validation_epoch_start(self) -> None:
        """Store the mean capsule poses before ``best.ckpt`` may be written."""
        self._store_hemisphere()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Reconstruction errors and the free-energy gap of the validation split."""
        x = _first_images(batch[0], batch_idx * int(self.cfg.data.eval_batch_size), self.cfg)
        if x is None:
            return
        stats = reconstruction_stats(self.poe, x)
        stats["select"] = stats["recon_caps_mse"] + float(3 - self.stage)
        for k, v in stats.items():
            self.log(
                f"val_{k}",
                v,
                on_epoch=True,
                batch_size=x.shape[0],
                sync_dist=True,
                add_dataloader_idx=False,
                prog_bar=k in ("recon_caps_mse", "select"),
            )

    def on_validation_epoch_end(self) -> None:
        """Nothing to aggregate: Lightning averages the logged means."""

    # ------------------------------------------------------------- evaluation
    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Capsule poses (320-D) and the autoencoder's code (4608-D)."""
        net = self.poe
        code = net.ae.encode(x)
        _, y, _ = net.encoder.route(net.code_to_capsules(code))
        return {"capsules": y.flatten(1), "code": code.flatten(1)}

    def untrained_network(self) -> PoECapsNet:
        """This network with the trained autoencoder and freshly initialised W and U."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mix_seed(self.cfg.seed, 0x9E0))
            cfg = self.model_config()
            net = create_model(cfg["model"], **cfg["model_kwargs"])
        net.ae.load_state_dict(self.poe.ae.state_dict())
        net.code_mean.copy_(self.poe.code_mean)  # the same primary capsules (model.center)
        net.code_count.copy_(self.poe.code_count)
        return net.to(self.device).eval()  # type: ignore[return-value]

    @torch.no_grad()
    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """Test-split reconstructions and free energies; per-capsule purity of samples."""
        self.eval()
        done = self.stages_trained()
        if done < 3:
            warnings.warn(
                f"poe: training stopped (trainer.max_time / max_steps) after {done} of 3 stages "
                f"(model.stage_epochs={list(self.cfg.model.stage_epochs)}); the later stages' "
                "layers are untrained and their metrics describe an initialisation",
                stacklevel=2,
            )
        metrics: dict[str, float | int | str] = {"stages_completed": done}
        untrained = self.untrained_network() if self.cfg.eval.baselines else None
        test = dm.eval_loader("test")
        metrics.update(_mean_stats(self.poe, test, self.cfg))
        if untrained is not None:
            base = _mean_stats(untrained, test, self.cfg)
            metrics["free_energy_gap_untrained"] = base["free_energy_gap"]
            metrics["recon_caps_mse_untrained"] = base["recon_caps_mse"]
            metrics["recon_caps_spread_untrained"] = base["recon_caps_spread"]
        judge, judge_acc = self.train_judge(dm)
        metrics["judge_test_top1"] = judge_acc
        metrics.update(self.purity_metrics(self.poe, judge, ""))
        if bool((self.poe.hemisphere != 0).any()):
            metrics.update(self.purity_metrics(self.poe, judge, "_restricted", restricted=True))
        if untrained is not None:
            metrics.update(self.purity_metrics(untrained, judge, "_untrained"))
        metrics["purity_samples_per_capsule"] = int(self.cfg.samples.per_capsule)
        metrics["recon_test_images"] = min(
            len(dm.split("test")), int(self.cfg.eval.max_images or len(dm.split("test")))
        )
        return metrics

    def train_judge(self, dm: Any) -> tuple[nn.Module, float]:
        """Train the judging CNN on the training split; return it and its test top-1 (%)."""
        j = self.cfg.judge
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mix_seed(self.cfg.seed, 0x70D6E))
            judge = _judge_network(
                self.info.channels, self.info.image_size[0], self.info.num_classes
            ).to(self.device)
            opt = torch.optim.Adam(judge.parameters(), lr=j.lr)
            data = TransformDataset(dm.split("train"), EvalTransform())
            g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, 0x70D6F))
            loader = DataLoader(data, batch_size=int(j.batch_size), shuffle=True, generator=g)
            judge.train()
            with torch.enable_grad():
                for _ in progress(range(int(j.epochs)), "training the judging CNN (epochs)"):
                    for x, y in loader:
                        loss = F.cross_entropy(judge(x.to(self.device)), y.to(self.device))
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        opt.step()
        judge.eval()
        correct = total = 0
        for x, y in dm.eval_loader("test"):
            correct += int((judge(x.to(self.device)).argmax(1).cpu() == y).sum())
            total += len(y)
        return judge, 100.0 * correct / max(total, 1)

    def purity_metrics(
        self, net: PoECapsNet, judge: nn.Module, suffix: str, restricted: bool = False
    ) -> dict[str, float | int | str]:
        """Per-capsule class purity of ``samples.per_capsule`` generated images (percent)."""
        n, seed = int(self.cfg.samples.per_capsule), int(self.cfg.samples.seed)
        draws = net.draws(n, torch.Generator().manual_seed(mix_seed(seed, 0xD4A)), restricted)
        purities, classes = [], []
        for j in progress(range(net.num_caps), f"judging {n} samples per capsule{suffix}"):
            preds = torch.cat(
                [
                    judge(net.generate(j, chunk.to(self.device))).argmax(1).cpu()
                    for chunk in draws[:, j].split(128)
                ]
            )
            p, cls = class_purity(preds)
            purities.append(p)
            classes.append(cls)
        out: dict[str, float | int | str] = {
            f"purity_capsule_{j:02d}{suffix}": p for j, p in enumerate(purities)
        }
        out[f"purity_mean{suffix}"] = sum(purities) / len(purities)
        out[f"purity_classes_covered{suffix}"] = len(set(classes))
        out[f"purity_majority_classes{suffix}"] = ",".join(map(str, classes))
        return out

    # ---------------------------------------------------------------- figures
    @torch.no_grad()
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Samples per capsule (Fig. 2), restricted-domain samples, reconstructions."""
        net, s = self.poe, self.cfg.samples
        figs: dict[str, Figure] = {
            "samples": capsule_columns(
                net.sample_grid(int(s.rows), int(s.seed)), net.num_caps, "samples"
            )
        }
        if bool((net.hemisphere != 0).any()):
            grid = net.sample_grid(int(s.rows), int(s.seed), restricted=True)
            figs["samples_restricted"] = capsule_columns(
                grid, net.num_caps, "restricted-domain samples"
            )
        test = dm.eval_loader("test").dataset  # 10 images spread over the (maybe sorted) split
        picks = torch.linspace(0, len(test) - 1, min(10, len(test))).long().tolist()
        x = torch.stack([test[i][0] for i in picks]).to(self.device)
        rows = [x, *reconstructions(net, x)[0]]
        figs["reconstructions"] = ImageGrid(
            torch.cat(rows).cpu(),
            nrow=x.shape[0],
            title="test images | autoencoder | through W and W^T | through W and U",
            row_labels=["data", "AE", "W, W^T", "W, U"],
        )
        return figs


@torch.no_grad()
def reconstruction_stats(net: PoECapsNet, x: Tensor) -> dict[str, Tensor]:
    """Batch means: pixel MSEs of the three reconstructions, free energies and their gap.

    Keys: ``recon_ae_mse``, ``recon_encoder_mse`` (through W and its transpose with the
    data's ``c``), ``recon_caps_mse`` (through W and U: the generative path),
    ``free_energy_data``, ``free_energy_recon`` and ``free_energy_gap`` (Algorithm 1's
    one-step reconstruction), and ``recon_caps_spread``: how much the reconstructions
    through W and U vary across the batch's images, relative to the images themselves
    (per-pixel standard deviation over the batch, averaged over pixels, as a ratio). 0
    means every input gets the same reconstruction: the capsules carry nothing of the
    input, whatever ``recon_caps_mse`` says. ``caps_length``: the mean length of the 20
    capsules (the probability that a capsule is on); ``caps_length_spread``: the standard
    deviation of each capsule's length over the batch's images, averaged over capsules
    (0: every capsule is as much on for every input, so none can stand for one object).
    """
    images, chain = reconstructions(net, x)
    data_spread = x.std(0, unbiased=False).mean()  # 0 for one image (no NaN: unbiased=False)
    lengths = chain.y.norm(dim=-1)  # (B, M)
    return {
        "recon_ae_mse": (images[0] - x).pow(2).mean(),
        "recon_encoder_mse": (images[1] - x).pow(2).mean(),
        "recon_caps_mse": (images[2] - x).pow(2).mean(),
        "recon_caps_spread": images[2].std(0, unbiased=False).mean() / data_spread.clamp_min(1e-12),
        "caps_length": lengths.mean(),
        "caps_length_spread": lengths.std(0, unbiased=False).mean(),
        **free_energies(chain),
    }


def reconstructions(net: PoECapsNet, x: Tensor) -> tuple[tuple[Tensor, Tensor, Tensor], CDChain]:
    """Images by the autoencoder, through ``W`` and ``W^T``, through ``W`` and ``U``; the chain."""
    code = net.ae.encode(x)
    chain = cd_chain(net.encoder, net.code_to_capsules(code))
    images = (
        net.ae.decode(code),
        net.ae.decode(net.capsules_to_code(chain.x_rec)),
        net.decode_capsules(chain.y),
    )
    return images, chain


def _first_images(x: Tensor, start: int, cfg: Any) -> Tensor | None:
    """The part of a batch starting at image ``start`` that lies within ``eval.max_images``."""
    limit = cfg.eval.max_images
    if limit is None:
        return x
    keep = int(limit) - start
    return x[:keep] if keep > 0 else None


def _mean_stats(net: PoECapsNet, loader: Any, cfg: Any) -> dict[str, float]:
    """:func:`reconstruction_stats` averaged over a loader's first ``eval.max_images`` images."""
    device = next(net.parameters()).device
    sums: dict[str, float] = {}
    n = 0
    for batch, _ in loader:
        x = _first_images(batch, n, cfg)
        if x is None:
            break
        stats = reconstruction_stats(net, x.to(device))
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + float(v) * x.shape[0]
        n += x.shape[0]
    return {k: v / max(n, 1) for k, v in sums.items()}
