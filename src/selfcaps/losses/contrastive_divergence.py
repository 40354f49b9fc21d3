"""Contrastive-divergence updates of products of expert capsules (Hauser 2019).

Hauser, "Training products of expert capsules with mixing by dynamic routing"
(2019, arXiv:1907.11643). The capsule layers are not trained by backpropagation:
each update below is an ascent direction in a weight's layout, which
:class:`selfcaps.methods.poe.PoE` applies as ``p.grad = -update`` of SGD.

**Capsule encoder W**, Algorithm 1: route the primary capsules ``x_i`` to get
``c_ij``, ``z_j = sum_i c_ij W_ij x_i``, ``x_j = squash(z_j)``; reconstruct with the
same ``c``: ``x~_i = squash(sum_j c_ij W_ij^T x_j)``; forward again
``z~_j = sum_i c_ij W_ij x~_i`` (:func:`cd_chain`); update (batch mean,
:func:`encoder_cd_update`)

    dW_ij = 2 c_ij ( z_j x_i^T / (1 + |z_j|^2) - z~_j x~_i^T / (1 + |z~_j|^2) ).

The first term (the positive phase, :func:`data_term`) is the gradient of the log
unnormalised marginal ``sum_j log(1 + |z_j|^2)`` (eq. 10, :func:`log_marginal`) at
fixed ``c``, the second (the negative phase) the same at the reconstruction: one
step of contrastive divergence lowering the free energy ``F(x) = -sum_j log(1 + |z_j|^2)``
(:func:`free_energies`) of the data relative to its one-step reconstruction.

**Capsule decoder U**, section 4.1 (:func:`decoder_cd_update`): with the data's capsules
``x_j`` (through the frozen W) and the data's ``z_i``, route ``x_j`` through ``U``
(children: the capsules, parents: the primary capsules, coefficients ``e_ji``),
``z~_i = sum_j e_ji U_ji x_j``, ``x~_j = squash(sum_i e_ji U_ji^T z~_i)``, and

    dU_ji = 2 e_ji ( z_i x_j^T / (1 + |z_i|^2) - z~_i x~_j^T / (1 + |z~_i|^2) ).

:func:`decoder_reconstruction_update` is our alternative rule for ``U`` and
:func:`sparsity_term` our sparsity penalty (sparse RBMs'), neither in the paper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from selfcaps.caps import squash

if TYPE_CHECKING:
    from selfcaps.models.poe import RoutedCaps

__all__ = [
    "CDChain",
    "cd_chain",
    "data_term",
    "decoder_cd_update",
    "decoder_reconstruction_update",
    "encoder_cd_terms",
    "encoder_cd_update",
    "free_energies",
    "log_marginal",
    "sparsity_term",
]


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
