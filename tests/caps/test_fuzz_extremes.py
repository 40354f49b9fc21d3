"""Hypothesis fuzzing of the capsule functions with extreme values: finite in, finite out."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from selfcaps.caps import (
    DenseCaps,
    dynamic_routing,
    em_routing,
    safe_norm,
    self_routing,
    squash,
    unit_vector,
    unsquash,
)

finite = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_infinity=False).map(
    lambda v: float(torch.tensor(v, dtype=torch.float32))
)
tensors = arrays(
    "float32",
    st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)),
    elements=finite,
)


def _finite(*ts):
    return all(torch.isfinite(t).all() for t in ts)


@settings(max_examples=60, deadline=None)
@given(tensors)
def test_elementwise_maps_stay_finite(a):
    s = torch.from_numpy(a).requires_grad_(True)
    outs = [squash(s), unit_vector(s), safe_norm(s), unsquash(squash(s))]
    assert _finite(*outs)
    sum(o.sum() for o in outs).backward()
    assert _finite(s.grad)
    assert (squash(s).norm(dim=-1) <= 1.0 + 1e-6).all()


@settings(max_examples=40, deadline=None)
@given(tensors, st.sampled_from(["dot", "cosine"]), st.sampled_from(["parents", "children"]))
def test_dynamic_routing_stays_finite(a, agreement, normalize):
    u = torch.from_numpy(a)
    v, c = dynamic_routing(u, 3, agreement, normalize=normalize)
    assert _finite(v, c)


@settings(max_examples=40, deadline=None)
@given(tensors, st.floats(0, 1))
def test_self_and_em_routing_stay_finite(a, act):
    u = torch.from_numpy(a)
    B, N, M, _ = u.shape
    a_in = torch.full((B, N), act)
    v, a_out, c = self_routing(u, a_in, torch.zeros(B, N, M))
    assert _finite(v, a_out, c)
    # EM's variances square the votes: the documented float32 domain is |votes| < 1e18.
    mu, act_out, R = em_routing(u.clamp(-1e15, 1e15), a_in, torch.zeros(M), torch.zeros(M), iters=3)
    assert _finite(mu, act_out, R)


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0, max_value=1e6, width=32), st.integers(1, 3))
def test_dense_caps_forward_backward_finite(scale, batch):
    layer = DenseCaps(6, 4, 3, 5)
    x = (torch.randn(batch, 6, 4) * scale).requires_grad_(True)
    layer(x).sum().backward()
    assert _finite(x.grad, layer.weight.grad)
