"""The op and host-sync counter: hand-counted snippets."""

import torch

from selfcaps.eval.dispatch import DispatchTally


def test_counts_ops_but_not_views():
    x = torch.randn(4, 3)
    with DispatchTally() as t:
        x.view(3, 4)
        x.t()
        x[1:]
        x.unsqueeze(0)
    assert t.ops == 0
    with DispatchTally() as t:
        y = x * 2  # mul
        y = y + 1  # add
        y.sum()  # sum
    assert (t.ops, t.syncs) == (3, 0)


def test_every_kind_of_host_read_is_a_sync_with_its_line():
    x = torch.randn(5)
    mask = x > 0
    with DispatchTally() as t:
        x.sum().item()  # _local_scalar_dense
        bool(x.sum() > 0)  # is_nonzero -> _local_scalar_dense
        x[mask]  # boolean-mask index
        torch.nonzero(x)  # nonzero
        x.tolist()  # no operator on a CPU: wrapped
    assert t.syncs == 5
    sites = [site for (_, site), _ in t.sync_sites.items()]
    assert all("tests/eval/test_dispatch.py" in s or "test_dispatch.py" in s for s in sites), sites
    assert torch.Tensor.tolist.__name__ == "tolist"  # restored on exit


def test_phases_and_reset():
    x = torch.randn(3)
    with DispatchTally("a") as t:
        x + 1
        with t.phase("b"):
            x * 2
            x.max().item()
        x - 1
    assert t.ops_by_phase == {"a": 2, "b": 3}  # b: mul, max, _local_scalar_dense
    assert t.syncs_by_phase == {"b": 1}
    assert t.per_step(2) == {"a": 1.0, "b": 1.5, "total": 2.5}
    t.reset()
    assert t.ops == 0 and t.syncs == 0


def test_backward_ops_are_counted():
    w = torch.randn(3, requires_grad=True)
    with DispatchTally() as t:
        (w * w).sum().backward()
    assert t.ops >= 4 and t.syncs == 0  # mul, sum; backward: expand/mul(s), accumulate
