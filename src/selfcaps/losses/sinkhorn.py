r"""Sinkhorn divergence between two mini-batches, in the log domain, and a KL alternative.

EncapNet's feedback agreement (Li et al., ECCV 2018, section 3.2) compares
the ``B`` samples of one batch, ``x`` (regenerated lower capsules) and ``y``
(the lower capsules), as two uniform empirical measures, by entropic optimal
transport (Cuturi 2013; Genevay et al. 2018):

* ground cost ``Q`` (``B x B``) between the samples: ``cosine`` (``1 - cos``,
  default), ``sqeuclidean`` (``|x - y|^2``) or ``euclidean`` (``|x - y|``, the
  reference code's ``l2``);
* Sinkhorn iterates (eq. 9), ``L`` times from ``v = 1/B``::

      u <- a / (K v),   v <- b / (K^T u),   K = exp(-Q / epsilon)

  computed here on ``log u``, ``log v`` with ``logsumexp``, so that ``K`` never
  underflows however small ``epsilon`` is (the plain iteration divides 0 by 0
  below ``epsilon ~ max Q / 87`` in float32);
* transport plan ``P = diag(u) K diag(v)`` (eq. 10) and loss
  ``W(x, y) = <Q, P>``, or with ``objective="entropic"`` the regularised cost
  ``<Q, P> + epsilon * KL(P | a b^T)``;
* debiased divergence (eq. 11) ``2 W(x, y) - W(x, x) - W(y, y)``; ``debias=False``
  returns ``W(x, y)``.

geomloss' ``SamplesLoss("sinkhorn", debias=True)`` computes
``OT_eps(x, y) - OT_eps(x, x) / 2 - OT_eps(y, y) / 2`` with the regularised
cost: half of eq. 11 with ``objective="entropic"``, once the iterations have
converged (tested in ``tests/losses/test_sinkhorn.py``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.caps.chunking import cpu_path
from selfcaps.caps.functional import safe_norm, unit_vector

__all__ = [
    "GroundCost",
    "KLDivergence",
    "SinkhornDivergence",
    "cosine_cost_triples",
    "ground_cost",
    "sinkhorn_cost",
    "sinkhorn_log_plan",
]

GroundCost = Literal["cosine", "sqeuclidean", "euclidean"]
Objective = Literal["transport", "entropic"]
_COSTS = ("cosine", "sqeuclidean", "euclidean")
_OBJECTIVES = ("transport", "entropic")


def ground_cost(x: Tensor, y: Tensor, cost: GroundCost = "cosine") -> Tensor:
    """Pairwise cost ``Q[i, j]`` between the rows of ``x`` ``(N, d)`` and ``y`` ``(M, d)``.

    Args:
        x: First samples.
        y: Second samples.
        cost: ``"cosine"`` (``1 - cos``; a zero row counts as orthogonal to all),
            ``"sqeuclidean"`` or ``"euclidean"`` (safe norm: finite gradient at 0).

    Returns:
        ``(N, M)`` costs.

    Examples:
        >>> ground_cost(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0], [3.0, 0.0]]))
        tensor([[1., 0.]])
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"expected (N, d) and (M, d) samples, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if cost == "cosine":
        return 1.0 - unit_vector(x) @ unit_vector(y).t()
    diff = x.unsqueeze(1) - y.unsqueeze(0)
    if cost == "sqeuclidean":
        return diff.pow(2).sum(-1)
    if cost == "euclidean":
        return safe_norm(diff, dim=-1)
    raise ValueError(f"cost must be one of {_COSTS}, got {cost!r}")


def cosine_cost_triples(pairs: list[tuple[Tensor, Tensor]]) -> Tensor:
    """The cosine costs of eq. 11's three problems ``(x, y)``, ``(x, x)``, ``(y, y)`` of every pair.

    Equal to ``torch.stack([ground_cost(a, b) for x, y in pairs for a, b in ((x, y), (x, x),
    (y, y))])`` up to float rounding, in a few ops for all pairs (an accelerator's path)
    instead of about 25 per problem: every sample set narrower than the widest is
    zero-padded to its width (one op each; zeros change neither a norm nor a dot product),
    all are normalised by one :func:`~selfcaps.caps.functional.unit_vector`, and each
    pair's Gram matrix ``[x; y] [x; y]^T`` (one batched product) holds its three cosine blocks.

    Args:
        pairs: ``(x, y)`` samples ``(B, d_i)``; one ``B`` for all, ``d_i`` may differ.

    Returns:
        ``(3 * len(pairs), B, B)`` costs ``1 - cos``, pair by pair in the order above.

    Examples:
        >>> x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])
        >>> cosine_cost_triples([(x, y)]).flatten()
        tensor([1., 0., 0.])
    """
    n = pairs[0][0].shape[0]
    width = max(t.shape[1] for pair in pairs for t in pair)
    rows = [
        F.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t for p in pairs for t in p
    ]
    u = unit_vector(torch.stack(rows)).view(len(pairs), 2 * n, width)  # per pair: [x; y]
    gram = torch.bmm(u, u.transpose(1, 2))
    blocks = (gram[:, :n, n:], gram[:, :n, :n], gram[:, n:, n:])  # (x, y), (x, x), (y, y)
    return (1.0 - torch.stack(blocks, dim=1)).view(3 * len(pairs), n, n)


def sinkhorn_log_plan(cost: Tensor, epsilon: float, iters: int) -> Tensor:
    """Log of the entropic transport plan between uniform weights (eqs. 9-10, log domain).

    Starting from ``v = 1/M`` (as the reference code), ``iters`` updates of
    ``log u = log a - LSE_j(log K_ij + log v_j)`` then
    ``log v = log b - LSE_i(log K_ij + log u_i)`` with ``log K = -cost / epsilon``
    and uniform ``a = 1/N``, ``b = 1/M``. After the last update the columns of
    the plan sum exactly to ``b``; the rows approach ``a`` as ``iters`` grows.

    Args:
        cost: ``(N, M)`` ground cost, or ``(..., N, M)``: independent problems solved together.
        epsilon: Entropic regularisation (> 0).
        iters: Sinkhorn iterations ``L`` (>= 1).

    Returns:
        ``log P`` of the shape of ``cost``.

    Examples:
        >>> P = sinkhorn_log_plan(torch.zeros(2, 2), epsilon=1.0, iters=1).exp()
        >>> P
        tensor([[0.2500, 0.2500],
                [0.2500, 0.2500]])
    """
    if epsilon <= 0 or iters < 1:
        raise ValueError(f"need epsilon > 0 and iters >= 1, got {epsilon}, {iters}")
    *lead, N, M = cost.shape
    if N == M and not cpu_path(cost):
        return _square_log_plan(cost, epsilon, iters)
    log_k = -cost / epsilon
    log_a, log_b = -math.log(N), -math.log(M)
    log_v = cost.new_full((*lead, M), log_b)
    for _ in range(iters):
        log_u = log_a - torch.logsumexp(log_k + log_v.unsqueeze(-2), dim=-1)
        log_v = log_b - torch.logsumexp(log_k + log_u.unsqueeze(-1), dim=-2)
    return log_u.unsqueeze(-1) + log_k + log_v.unsqueeze(-2)


def _square_log_plan(cost: Tensor, epsilon: float, iters: int) -> Tensor:
    """:func:`sinkhorn_log_plan` for ``N = M`` in 4 ops an iteration instead of 6 (accelerator).

    With ``a = b = 1/N`` the weights drop out of the iteration: on the potentials
    ``F = log a - log u`` and ``G = log b - log v`` it reads ``F = LSE_j(log K_ij - G_j)``,
    ``G = LSE_i(log K_ij - F_i)`` from ``G = log N`` (``v = 1/N``), and
    ``log P = log K - F - G - log N``: the same iterates, up to float rounding.
    """
    log_n = math.log(cost.shape[-1])
    log_k = cost * (-1.0 / epsilon)
    g = cost.new_full(cost.shape[:-1], log_n)
    for _ in range(iters):
        f = torch.logsumexp(log_k - g.unsqueeze(-2), dim=-1)
        g = torch.logsumexp(log_k - f.unsqueeze(-1), dim=-2)
    return (log_k - log_n) - f.unsqueeze(-1) - g.unsqueeze(-2)


def sinkhorn_cost(
    x: Tensor,
    y: Tensor,
    epsilon: float = 1.0,
    iters: int = 10,
    cost: GroundCost = "cosine",
    objective: Objective = "transport",
    detach_plan: bool = False,
) -> Tensor:
    """``W(x, y)``: the Sinkhorn transport cost between two sample sets (eq. 10).

    Args:
        x: ``(N, d)`` samples (uniform weights).
        y: ``(M, d)`` samples (uniform weights).
        epsilon: Entropic regularisation.
        iters: Sinkhorn iterations ``L``.
        cost: Ground cost (:func:`ground_cost`).
        objective: ``"transport"``: ``<Q, P>`` (paper, reference code);
            ``"entropic"``: ``<Q, P> + epsilon * KL(P | a b^T)`` (geomloss' value).
        detach_plan: Stop gradients through ``P`` (they then flow through ``Q`` only).

    Returns:
        Scalar.
    """
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be one of {_OBJECTIVES}, got {objective!r}")
    return _plan_cost(ground_cost(x, y, cost), epsilon, iters, objective, detach_plan)


def _plan_cost(
    q: Tensor, epsilon: float, iters: int, objective: Objective, detach_plan: bool
) -> Tensor:
    """``<Q, P>`` (+ the entropic term) of each problem in ``q`` ``(..., N, M)``."""
    log_p = sinkhorn_log_plan(q, epsilon, iters)
    if detach_plan:
        log_p = log_p.detach()
    p = log_p.exp()
    w = (p * q).sum((-2, -1))
    if objective == "entropic":
        log_ab = -math.log(q.shape[-2]) - math.log(q.shape[-1])
        w = w + epsilon * ((p * (log_p - log_ab)).sum((-2, -1)) - p.sum((-2, -1)) + 1.0)
    return w


class SinkhornDivergence(nn.Module):
    """Sinkhorn divergence between two batches of features (eqs. 9-11), log domain.

    Args:
        epsilon: Entropic regularisation (reference code: 1).
        iters: Sinkhorn iterations ``L`` (reference code: 10).
        cost: Ground cost: ``"cosine"`` (default), ``"sqeuclidean"``, ``"euclidean"``.
        debias: ``2 W(x, y) - W(x, x) - W(y, y)`` (eq. 11); else ``W(x, y)``.
        detach_plan: Stop gradients through the transport plans (the paper found this
            slightly better).
        objective: ``"transport"`` (``<Q, P>``) or ``"entropic"`` (see :func:`sinkhorn_cost`).

    Examples:
        >>> div = SinkhornDivergence(epsilon=0.1)
        >>> x = torch.randn(8, 4)
        >>> float(div(x, x))
        0.0
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        iters: int = 10,
        cost: GroundCost = "cosine",
        debias: bool = True,
        detach_plan: bool = False,
        objective: Objective = "transport",
    ) -> None:
        super().__init__()
        if epsilon <= 0 or iters < 1:
            raise ValueError(f"need epsilon > 0 and iters >= 1, got {epsilon}, {iters}")
        if cost not in _COSTS:
            raise ValueError(f"cost must be one of {_COSTS}, got {cost!r}")
        if objective not in _OBJECTIVES:
            raise ValueError(f"objective must be one of {_OBJECTIVES}, got {objective!r}")
        self.epsilon, self.iters, self.cost = epsilon, iters, cost
        self.debias, self.detach_plan, self.objective = debias, detach_plan, objective

    def many(self, pairs: list[tuple[Tensor, Tensor]]) -> Tensor:
        """The divergence of each ``(x, y)`` pair, ``(len(pairs),)``, in one batched loop.

        Every pair's three problems (eq. 11) share one Sinkhorn loop, so that several
        feedback units cost the launches of one. The pairs may differ in feature size but
        not in batch size. Equal to ``torch.stack([self(x, y) for x, y in pairs])`` (up to
        float rounding: off the CPU path the cosine costs come from
        :func:`cosine_cost_triples`).
        """
        flat = [(x.flatten(1), y.flatten(1)) for x, y in pairs]
        sizes = {x.shape[0] for pair in flat for x in pair}
        if not self.debias or len(sizes) != 1:
            return torch.stack([self(x, y) for x, y in pairs])
        if self.cost == "cosine" and not cpu_path(flat[0][0]):
            q = cosine_cost_triples(flat)
        else:
            q = torch.stack(
                [ground_cost(a, b, self.cost) for x, y in flat for a, b in ((x, y), (x, x), (y, y))]
            )
        w = _plan_cost(q, self.epsilon, self.iters, self.objective, self.detach_plan).view(-1, 3)
        return 2.0 * w[:, 0] - w[:, 1] - w[:, 2]

    def _w(self, x: Tensor, y: Tensor) -> Tensor:
        return sinkhorn_cost(
            x, y, self.epsilon, self.iters, self.cost, self.objective, self.detach_plan
        )

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Divergence between samples ``x`` ``(N, ...)`` and ``y`` ``(M, ...)`` (flattened)."""
        x, y = x.flatten(1), y.flatten(1)
        if self.debias and x.shape[0] == y.shape[0] and not cpu_path(x):
            return self.many([(x, y)])[0]  # an accelerator: eq. 11's three problems, one loop
        w_xy = self._w(x, y)
        if not self.debias:
            return w_xy
        return 2.0 * w_xy - self._w(x, x) - self._w(y, y)

    def extra_repr(self) -> str:
        """Settings, shown by ``print(model)``."""
        return (
            f"epsilon={self.epsilon}, iters={self.iters}, cost={self.cost}, debias={self.debias}, "
            f"detach_plan={self.detach_plan}, objective={self.objective}"
        )


class KLDivergence(nn.Module):
    r"""The KL alternative to the Sinkhorn divergence (paper Table 3, case b).

    Each sample's feature vector becomes a distribution by a softmax over its
    entries; the loss is the batch mean of :math:`KL(p_y \,\|\, p_x)`, the target
    ``y`` (lower capsules) against the regenerated ``x``. Unlike optimal
    transport it compares sample ``i`` only with sample ``i``.

    Examples:
        >>> x = torch.randn(4, 6)
        >>> float(KLDivergence()(x, x))
        0.0
    """

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """``mean_i KL(softmax(y_i) | softmax(x_i))`` for ``(B, ...)`` features."""
        log_px = F.log_softmax(x.flatten(1), dim=1)
        log_py = F.log_softmax(y.flatten(1), dim=1)
        return (log_py.exp() * (log_py - log_px)).sum(1).mean()
