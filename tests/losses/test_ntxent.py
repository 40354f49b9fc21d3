import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from selfcaps.losses import NTXentLoss


def ntxent_loop(z0, z1, t):
    """Direct loop over the 2N anchors: -log(exp(s_pos/t) / sum_{k != i} exp(s_ik/t))."""
    z = F.normalize(torch.cat([z0, z1]), dim=1)
    n = z0.shape[0]
    total = 0.0
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        denom = 0.0
        for k in range(2 * n):
            if k != i:
                denom += math.exp(float(z[i] @ z[k]) / t)
        total += -(float(z[i] @ z[pos]) / t - math.log(denom))
    return total / (2 * n)


@pytest.mark.parametrize("t", [0.2, 0.5, 1.0])
def test_ntxent_matches_loop(t):
    torch.manual_seed(0)
    z0, z1 = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    assert NTXentLoss(temperature=t)(z0, z1).item() == pytest.approx(
        ntxent_loop(z0, z1, t), rel=1e-10
    )


def test_ntxent_hand_computed_two_pairs():
    # Orthogonal unit embeddings: identical views. With t = 1, each anchor has one positive
    # (similarity 1) and two negatives (similarity 0): loss = -log(e / (e + 2)).
    z0 = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    loss = NTXentLoss(temperature=1.0)(z0, z0.clone())
    assert loss.item() == pytest.approx(-math.log(math.e / (math.e + 2)))


def test_ntxent_gradcheck():
    z0 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    z1 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(NTXentLoss(0.3), (z0, z1))


def test_ntxent_rejects_bad_input():
    with pytest.raises(ValueError, match="temperature"):
        NTXentLoss(temperature=0.0)
    with pytest.raises(ValueError, match="equal shape"):
        NTXentLoss()(torch.randn(4, 3), torch.randn(5, 3))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, z0_all, z1_all, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        n = z0_all.shape[0] // world
        z0 = z0_all[rank * n : (rank + 1) * n].clone().requires_grad_(True)
        z1 = z1_all[rank * n : (rank + 1) * n].clone().requires_grad_(True)
        loss = NTXentLoss(temperature=0.2, gather_distributed=True)(z0, z1)
        loss.backward()
        # DDP averages gradients over ranks: emulate it on the embeddings' gradients.
        g0, g1 = z0.grad / world, z1.grad / world
        out[rank] = (loss.detach(), g0, g1)
    finally:
        dist.destroy_process_group()


def test_gathered_loss_and_gradients_equal_single_process():
    torch.manual_seed(0)
    world, n = 2, 5
    z0_all = torch.randn(world * n, 8, dtype=torch.float64)
    z1_all = torch.randn(world * n, 8, dtype=torch.float64)
    manager = mp.get_context("spawn").Manager()
    out = manager.dict()
    mp.spawn(_ddp_worker, args=(world, _free_port(), z0_all, z1_all, out), nprocs=world, join=True)
    a0, a1 = z0_all.clone().requires_grad_(True), z1_all.clone().requires_grad_(True)
    ref = NTXentLoss(temperature=0.2)(a0, a1)
    ref.backward()
    mean_loss = sum(out[r][0] for r in range(world)) / world
    assert mean_loss.item() == pytest.approx(ref.item(), rel=1e-12)
    for r in range(world):
        torch.testing.assert_close(out[r][1], a0.grad[r * n : (r + 1) * n])
        torch.testing.assert_close(out[r][2], a1.grad[r * n : (r + 1) * n])
