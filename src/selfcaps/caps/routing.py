"""Routing algorithms, one function each, vectorised over batch, children and parents.

Shapes used throughout (B = batch, N = children, M = parents, D = pose size):

* votes / predictions ``u_hat``: ``(B, N, M, D)``, the prediction of child ``i``
  for parent ``j`` (``u_hat_{j|i}`` in Sabour et al.);
* coupling coefficients ``c``: ``(B, N, M)``;
* parent poses: ``(B, M, D)``.

The only Python loops are over routing iterations.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from selfcaps.caps.functional import squash, unit_vector

__all__ = ["dynamic_routing", "em_routing", "self_routing"]

Agreement = Literal["dot", "cosine"]
Normalize = Literal["parents", "children"]


def _check_rank(name: str, x: Tensor, rank: int, layout: str) -> None:
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape {layout} ({rank} dims), got {tuple(x.shape)}")


def dynamic_routing(
    u_hat: Tensor,
    iters: int = 3,
    agreement: Agreement = "dot",
    detach_intermediate: bool = False,
    normalize: Normalize = "parents",
    eps: float = 1e-12,
) -> tuple[Tensor, Tensor]:
    r"""Routing-by-agreement of Sabour et al. 2017 (Procedure 1, eqs. 2-3).

    Starting from logits :math:`b_{ij} = 0`, each iteration computes

    .. math::
        c_{ij} = \operatorname{softmax}_j(b_{ij}) \quad (\text{eq. 3}),\qquad
        s_j = \sum_i c_{ij} \hat u_{j|i} \quad (\text{eq. 2}),\qquad
        v_j = \operatorname{squash}(s_j) \quad (\text{eq. 1})

    and, except after the last iteration, the agreement update
    :math:`b_{ij} \mathrel{+}= \hat u_{j|i} \cdot v_j` (``agreement="dot"``) or the
    cosine of the angle between them (``agreement="cosine"``, as in Hauser's
    products of expert capsules, section 3).

    ``normalize="children"`` normalises the coefficients over the children
    instead, :math:`\sum_i c_{ij} = 1` (the normalisation of Hauser's
    Algorithm 1); the default is Sabour's softmax over parents,
    :math:`\sum_j c_{ij} = 1`.

    Args:
        u_hat: Predictions, ``(B, N, M, D)``.
        iters: Number of routing iterations (>= 1).
        agreement: ``"dot"`` or ``"cosine"``.
        detach_intermediate: Stop gradients through the predictions in every
            iteration but the last (the logits then carry no gradient).
        normalize: ``"parents"`` (softmax over parents) or ``"children"``.
        eps: Safe-norm epsilon of the cosine's norms, ``sqrt(|x|^2 + eps)``.

    Returns:
        ``(v, c)``: parent poses ``(B, M, D)`` and the coupling coefficients
        ``(B, N, M)`` used to form them in the final iteration.

    Examples:
        >>> u_hat = torch.randn(2, 6, 3, 4)
        >>> v, c = dynamic_routing(u_hat, iters=3)
        >>> v.shape, c.shape
        (torch.Size([2, 3, 4]), torch.Size([2, 6, 3]))
    """
    _check_rank("u_hat", u_hat, 4, "(B, N, M, D)")
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if agreement not in ("dot", "cosine"):
        raise ValueError(f"agreement must be 'dot' or 'cosine', got {agreement!r}")
    if normalize not in ("parents", "children"):
        raise ValueError(f"normalize must be 'parents' or 'children', got {normalize!r}")
    softmax_dim = 2 if normalize == "parents" else 1
    B, N, M, _ = u_hat.shape
    u_detached = u_hat.detach() if detach_intermediate else u_hat
    if agreement == "cosine":
        u_unit = unit_vector(u_hat, eps=eps)
        u_unit_detached = u_unit.detach() if detach_intermediate else u_unit
    b = u_hat.new_zeros(B, N, M)
    for it in range(iters):
        last = it == iters - 1
        c = torch.softmax(b, dim=softmax_dim)
        u = u_hat if last else u_detached
        # s_j = sum_i c_ij u_hat_{j|i}: one batched contraction over children.
        s = torch.einsum("bnm,bnmd->bmd", c, u)
        v = squash(s)
        if last:
            return v, c
        if agreement == "dot":
            b = b + torch.einsum("bnmd,bmd->bnm", u, v)
        else:
            b = b + torch.einsum("bnmd,bmd->bnm", u_unit_detached, unit_vector(v, eps=eps))
    raise AssertionError("unreachable")  # pragma: no cover


def self_routing(
    u_hat: Tensor,
    a: Tensor,
    logits: Tensor,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Self-routing of Hahn et al. 2019 (MCAE paper, eqs. 1-3).

    Each child routes by itself, with no agreement iterations: its routing
    logits come from its own pose through a learned matrix
    :math:`W^{route}_i` (computed by the caller and passed as ``logits``).

    .. math::
        c_{ij} = \operatorname{softmax}_j(W^{route}_i u_i)_j \quad (\text{eq. 1})

        a_j = \frac{\sum_i c_{ij} a_i}{\sum_i a_i} \quad (\text{eq. 2})

        v_j = \frac{\sum_i c_{ij} a_i \hat u_{j|i}}{\sum_i c_{ij} a_i} \quad (\text{eq. 3})

    ``eps`` is added to both denominators, so children with zero activation
    (padding, masked positions) contribute nothing and never divide by zero.

    Args:
        u_hat: Pose votes :math:`\hat u_{j|i} = W^{pose}_{ij} u_i`, ``(B, N, M, D)``.
        a: Child activations in ``[0, 1]``, ``(B, N)``.
        logits: Routing logits :math:`W^{route}_i u_i`, ``(B, N, M)``.
        eps: Epsilon of the divisions.

    Returns:
        ``(v, a_out, c)``: parent poses ``(B, M, D)``, parent activations
        ``(B, M)`` and coupling coefficients ``(B, N, M)``.

    Examples:
        >>> u_hat, a, logits = torch.randn(2, 5, 3, 4), torch.rand(2, 5), torch.zeros(2, 5, 3)
        >>> v, a_out, c = self_routing(u_hat, a, logits)
        >>> v.shape, a_out.shape, c.shape
        (torch.Size([2, 3, 4]), torch.Size([2, 3]), torch.Size([2, 5, 3]))
    """
    _check_rank("u_hat", u_hat, 4, "(B, N, M, D)")
    _check_rank("a", a, 2, "(B, N)")
    _check_rank("logits", logits, 3, "(B, N, M)")
    if a.shape != u_hat.shape[:2] or logits.shape != u_hat.shape[:3]:
        raise ValueError(
            f"shape mismatch: u_hat {tuple(u_hat.shape)}, a {tuple(a.shape)} "
            f"(expected {tuple(u_hat.shape[:2])}), logits {tuple(logits.shape)} "
            f"(expected {tuple(u_hat.shape[:3])})"
        )
    c = torch.softmax(logits, dim=-1)
    ca = c * a.unsqueeze(-1)  # (B, N, M)
    ca_sum = ca.sum(dim=1)  # (B, M)
    a_out = ca_sum / (a.sum(dim=1, keepdim=True) + eps)
    v = torch.einsum("bnm,bnmd->bmd", ca, u_hat) / (ca_sum.unsqueeze(-1) + eps)
    return v, a_out, c


def em_routing(
    votes: Tensor,
    a_in: Tensor,
    beta_u: Tensor,
    beta_a: Tensor,
    iters: int = 3,
    inverse_temperature: float | tuple[float, float] = (1.0, 0.01),
    eps: float = 1e-6,
    centre_costs: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""EM routing of Hinton, Sabour & Frosst 2018 (Procedure 1), in the log domain.

    Two variants. ``centre_costs=False, inverse_temperature=1.0`` is Procedure 1
    as printed (a fixed :math:`\lambda`, the raw cost in the logistic; tested
    against a literal loop transcription in float64). The default,
    ``centre_costs=True`` with :math:`\lambda` annealed from 0.01 to 1, is ours
    (EncapNet's Table 1 row b): the summed cost grows with
    :math:`\sum_i R'_{ij}`, i.e. with the number of children, so public
    implementations rescale it before the logistic (the EncapNet reference code
    min-max rescales it over the parents to ``[-5, 5]`` and uses
    :math:`\lambda = 1, 2, 3` over the iterations); centring is our rescaling.

    M-step (for each parent ``j`` and pose element ``h``):

    .. math::
        R'_{ij} = R_{ij} a_i,\quad
        \mu_j^h = \frac{\sum_i R'_{ij} V_{ij}^h}{\sum_i R'_{ij}},\quad
        (\sigma_j^h)^2 = \frac{\sum_i R'_{ij} (V_{ij}^h - \mu_j^h)^2}{\sum_i R'_{ij}}

        \text{cost}^h_j = \big(\beta_u + \log \sigma_j^h\big) \sum_i R'_{ij},\quad
        a_j = \operatorname{sigmoid}\big(\lambda (\beta_a - \sum_h \text{cost}^h_j)\big)

    E-step: :math:`\log p_{ij} = -\sum_h \big[\frac{(V^h_{ij} - \mu^h_j)^2}{2 (\sigma^h_j)^2}
    + \log \sigma^h_j + \tfrac12 \log 2\pi\big]` and
    :math:`R_{ij} = \operatorname{softmax}_j(\log a_j + \log p_{ij})`, computed with
    ``log_softmax`` and ``logsigmoid`` so that no probability underflows to zero
    and no ``log(0)`` appears, whatever the number of iterations.

    With ``centre_costs`` the summed cost is centred over the parents before the
    sigmoid (:math:`\text{cost}_j - \frac1M \sum_k \text{cost}_k`; not in
    Procedure 1). The inverse temperature :math:`\lambda` follows a schedule: a
    float is used at every iteration (Procedure 1); a pair ``(final, start)``
    anneals linearly from ``start`` to ``final`` (default ``(1.0, 0.01)``; not in
    Procedure 1).

    Args:
        votes: ``(B, N, M, D)``; ``D`` is the flattened pose matrix (16 for 4x4).
        a_in: Child activations ``(B, N)`` in ``[0, 1]``.
        beta_u: Per-parent cost offset, broadcastable to ``(M,)``.
        beta_a: Per-parent activation offset, broadcastable to ``(M,)``.
        iters: EM iterations (>= 1).
        inverse_temperature: Schedule of :math:`\lambda` (see above).
        eps: Variance floor and denominator epsilon.
        centre_costs: Centre the costs over the parents (default; ``False``: Procedure 1).

    The variances square the votes, so in float32 the votes must stay below
    about 1e18 in magnitude (EM routing is not scale-invariant, so they cannot be
    rescaled internally); votes that large mean training has already diverged.

    Returns:
        ``(mu, a_out, R)``: parent poses ``(B, M, D)``, activations ``(B, M)``
        and the final assignment probabilities ``(B, N, M)``.

    Examples:
        >>> mu, a, R = em_routing(torch.randn(2, 8, 3, 16), torch.rand(2, 8),
        ...                       torch.zeros(3), torch.zeros(3))
        >>> mu.shape, a.shape, R.shape
        (torch.Size([2, 3, 16]), torch.Size([2, 3]), torch.Size([2, 8, 3]))
    """
    _check_rank("votes", votes, 4, "(B, N, M, D)")
    _check_rank("a_in", a_in, 2, "(B, N)")
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    B, N, M, _ = votes.shape
    if isinstance(inverse_temperature, tuple):
        final, start = inverse_temperature
        lambdas = [start + (final - start) * (i / max(iters - 1, 1)) for i in range(iters)]
        if iters == 1:
            lambdas = [final]
    else:
        lambdas = [float(inverse_temperature)] * iters
    log_R = votes.new_full((B, N, M), -math.log(M))
    a = a_in.unsqueeze(-1)  # (B, N, 1)
    half_log_2pi = 0.5 * math.log(2.0 * math.pi)
    for it in range(iters):
        # M-step.
        R_a = torch.exp(log_R) * a  # (B, N, M)
        R_sum = R_a.sum(dim=1) + eps  # (B, M)
        w = (R_a / R_sum.unsqueeze(1)).unsqueeze(-1)  # (B, N, M, 1)
        mu = (w * votes).sum(dim=1)  # (B, M, D)
        diff2 = (votes - mu.unsqueeze(1)).pow(2)  # (B, N, M, D)
        var = (w * diff2).sum(dim=1) + eps  # (B, M, D)
        log_sigma = 0.5 * torch.log(var)
        cost = ((beta_u.reshape(1, -1, 1) + log_sigma) * R_sum.unsqueeze(-1)).sum(-1)  # (B, M)
        if centre_costs:
            cost = cost - cost.mean(dim=-1, keepdim=True)
        logit_a = lambdas[it] * (beta_a.reshape(1, -1) - cost)
        a_out = torch.sigmoid(logit_a)
        if it == iters - 1:
            return mu, a_out, torch.exp(log_R)
        # E-step in the log domain.
        log_p = -(diff2 / (2.0 * var.unsqueeze(1)) + log_sigma.unsqueeze(1) + half_log_2pi).sum(
            -1
        )  # (B, N, M)
        log_R = torch.log_softmax(F.logsigmoid(logit_a).unsqueeze(1) + log_p, dim=-1)
    raise AssertionError("unreachable")  # pragma: no cover
