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


def test_allocations_and_profiler_markers_launch_nothing():
    x = torch.randn(4, 3)
    with DispatchTally() as t:
        torch.empty(3)
        torch.empty_like(x)
        x.new_empty(2)
        torch.empty_strided((2, 2), (1, 2))
        with torch.profiler.record_function("section"):
            pass
    assert t.ops == 0, t.op_names
    with DispatchTally() as t:
        torch.zeros(3)  # an allocation and a fill: one kernel
        torch.ones_like(x)
    assert t.ops == 2, t.op_names


def test_a_training_batch_norm_is_one_op_each_way():
    bn = torch.nn.BatchNorm2d(3)
    x = torch.randn(4, 3, 2, 2, requires_grad=True)
    with DispatchTally() as t:
        y = bn(x)
    assert t.op_names.get("aten.empty", 0) == 0
    assert t.op_names["aten.native_batch_norm"] == 1
    with DispatchTally() as t:
        y.backward(torch.ones_like(y))
    assert t.op_names["aten.native_batch_norm_backward"] == 1
