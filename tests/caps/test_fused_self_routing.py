"""Fused self-routing (votes never stored) against the readable path, a loop and gradcheck."""

import pytest
import torch

from selfcaps.caps import fused_self_routing as fsr
from selfcaps.caps.layers import child_votes
from selfcaps.caps.routing import self_routing
from tests.models.test_mcae_model import one_thread  # noqa: F401  (autouse fixture)


def _inputs(B, N, C, M, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    args = (
        torch.randn(B, N, C, generator=g),
        torch.rand(B, N, generator=g),
        torch.randn(N, C, M * D, generator=g),
        torch.randn(N, C, M, generator=g),
        torch.randn(N, M, generator=g),
    )
    return [a.double().requires_grad_() for a in args]


def _readable(pose, act, wp, wr, br, eps=1e-8):
    logits = torch.bmm(pose.transpose(0, 1), wr).transpose(0, 1) + br
    v, a, _ = self_routing(child_votes(pose, wp, wr.shape[-1]), act, logits, eps=eps)
    return v, a


@pytest.mark.parametrize("chunk", [1 << 19, 40])  # one batch chunk; chunks of one sample
def test_values_and_gradients_equal_the_readable_path(monkeypatch, chunk):
    monkeypatch.setattr(fsr, "_CHUNK_ELEMENTS", chunk)
    args = _inputs(5, 7, 4, 3, 2)
    with torch.no_grad():
        args[1][0, :3] = 0.0  # children with zero activation (masked / padded) contribute nothing
    outs = []
    for fn in (fsr.fused_self_routing, _readable):
        v, a = fn(*args)
        weights = torch.linspace(-1, 1, v.numel(), dtype=v.dtype).view_as(v)
        grads = torch.autograd.grad((v * weights).sum() + (a * a).sum(), args)
        outs.append((v, a, grads))
    (v1, a1, g1), (v2, a2, g2) = outs
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(a1, a2)
    for x, y in zip(g1, g2, strict=True):
        torch.testing.assert_close(x, y)


def test_gradcheck_float64_with_batch_chunks(monkeypatch):
    monkeypatch.setattr(fsr, "_CHUNK_ELEMENTS", 30)  # several batch chunks
    args = _inputs(4, 5, 3, 3, 2, seed=1)
    assert torch.autograd.gradcheck(fsr.fused_self_routing, args)


def test_weighted_vote_sum_against_a_loop():
    """``P[j, :, b] = sum_i ca[i, j, b] W_ij^T u[i, :, b]`` written out."""
    g = torch.Generator().manual_seed(2)
    N, C, B, M, D = 4, 3, 2, 3, 2
    u, w, ca = (
        torch.randn(N, C, B, generator=g),
        torch.randn(N, C, M * D, generator=g),
        (torch.rand(N, M, B, generator=g)),
    )
    out = fsr.weighted_vote_sum(u, w, ca)
    W = w.view(N, C, M, D)
    for j in range(M):
        for b in range(B):
            expected = sum(ca[i, j, b] * (u[i, :, b] @ W[i, :, j]) for i in range(N))
            torch.testing.assert_close(out[j, :, b], expected)
    with pytest.raises(ValueError, match="shape mismatch"):
        fsr.weighted_vote_sum(u, w, ca[:, :, :1].expand(N, M, 3))


def test_inference_mode_then_training_reuses_no_inference_buffer():
    """Validation runs in inference mode; the training step after it must still work."""
    args = _inputs(3, 4, 2, 2, 2)
    with torch.inference_mode():
        fsr.fused_self_routing(*[a.detach() for a in args])
    v, _ = fsr.fused_self_routing(*args)
    v.sum().backward()
    assert args[0].grad is not None


def test_bfloat16_autocast_runs_the_routing_in_float32():
    """Under ``bf16-mixed`` the poses arrive in bfloat16 and the weights in float32: the fused
    step must run (it wrote float32 products into a bfloat16 buffer and failed) and equal the
    readable float64 path on the same, bfloat16-rounded poses."""
    pose, act, wp, wr, br = (a.detach() for a in _inputs(3, 5, 4, 3, 2, seed=3))
    pose16 = pose.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v, a = fsr.fused_self_routing(pose16, act.float(), wp.float(), wr.float(), br.float())
    with torch.no_grad():
        v64, a64 = _readable(pose16.double(), act, wp, wr, br)
    assert v.dtype == torch.float32
    # the routing logits' matrix product runs in bfloat16 under autocast (8-bit mantissa:
    # relative error ~ 2^-8 per product); measured 0.006 on poses up to 3.4
    torch.testing.assert_close(v.double(), v64, rtol=0.01, atol=0.02)
    torch.testing.assert_close(a.double(), a64, rtol=0.01, atol=0.005)
