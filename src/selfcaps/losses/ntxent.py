"""NT-Xent, the normalised temperature-scaled cross-entropy of SimCLR (Chen et al. 2020, eq. 1)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NTXentLoss", "gather_with_grad"]


def gather_with_grad(x: Tensor) -> tuple[Tensor, int]:
    """All-gather ``x`` across processes, keeping the gradient path to every rank's input.

    Uses ``torch.distributed.nn.functional.all_gather``, whose backward sums the
    gradients of all ranks into each rank's slice. Outside a process group this
    is the identity.

    Args:
        x: Local tensor ``(B, ...)``; every rank must pass the same shape.

    Returns:
        ``(gathered, rank)``: the concatenation over ranks ``(world * B, ...)`` and
        this process's rank (0 without distribution).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0), dist.get_rank()


class NTXentLoss(nn.Module):
    r"""NT-Xent loss over two views (SimCLR eq. 1; lightly's ``NTXentLoss`` arguments).

    For the :math:`2N` embeddings of :math:`N` positive pairs, each embedding
    :math:`z_i` is classified against the other :math:`2N - 1`:

    .. math::
        \ell_{i} = -\log \frac{\exp(\mathrm{sim}(z_i, z_{p(i)}) / \tau)}
                              {\sum_{k \ne i} \exp(\mathrm{sim}(z_i, z_k) / \tau)}

    with cosine similarity; the loss is the mean over all :math:`2N` anchors.
    With ``gather_distributed=True`` the negatives come from every process:
    each rank's anchors are compared with the embeddings of all ranks, so the
    mean of the per-rank losses equals the single-process loss on the
    concatenated batch, and (through :func:`gather_with_grad` and DDP's
    gradient averaging) so do the gradients.

    Args:
        temperature: :math:`\tau` (CoCa uses 0.2).
        gather_distributed: Gather negatives across processes.

    Examples:
        >>> loss_fn = NTXentLoss(temperature=0.2)
        >>> z0, z1 = torch.randn(8, 16), torch.randn(8, 16)
        >>> loss = loss_fn(z0, z1)
        >>> loss.shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.5, gather_distributed: bool = False) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.gather_distributed = gather_distributed

    def forward(self, out0: Tensor, out1: Tensor) -> Tensor:
        """Loss for ``(N, D)`` embeddings ``out0`` and ``out1``; row ``i`` of each is a pair.

        Args:
            out0: First views' embeddings.
            out1: Second views' embeddings.
        """
        if out0.shape != out1.shape or out0.dim() != 2:
            raise ValueError(
                f"expected two (N, D) embeddings of equal shape, got {tuple(out0.shape)} "
                f"and {tuple(out1.shape)}"
            )
        n = out0.shape[0]
        z = F.normalize(torch.cat([out0, out1]), dim=1)  # local anchors (2n, D)
        if self.gather_distributed:
            z0_all, rank = gather_with_grad(z[:n])
            z1_all, _ = gather_with_grad(z[n:])
        else:
            z0_all, z1_all, rank = z[:n], z[n:], 0
        bank = torch.cat([z0_all, z1_all])  # (2 * world * n, D), views-major
        total = z0_all.shape[0]
        logits = z @ bank.t() / self.temperature  # (2n, 2 * world * n)
        local = torch.arange(n, device=z.device) + rank * n
        self_idx = torch.cat([local, local + total])
        pos_idx = torch.cat([local + total, local])
        rows = torch.arange(2 * n, device=z.device)
        logits = logits.index_put((rows, self_idx), logits.new_tensor(float("-inf")))
        return F.cross_entropy(logits, pos_idx)
