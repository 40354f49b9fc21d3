"""Hot loops sized by device: equal results on both paths, and ops that do not grow with the batch.

On an accelerator (``sized_for("accelerator")`` on this CPU) a fused routing call is one chunk
whatever the batch, so its op count is the same at batch 2 and 64; on a CPU it is cut into
cache-sized chunks. Both paths give the readable path's values and gradients, and float64
``gradcheck`` passes on the accelerator path too.
"""

import pytest
import torch

import selfcaps.caps.fused_self_routing as fsr
from selfcaps.caps.chunking import batch_chunk, cpu_path, sized_for, sizing
from selfcaps.caps.fused_routing import fused_dense_routing
from selfcaps.eval.dispatch import DispatchTally


def test_batch_chunk_by_device_and_by_override():
    cpu = torch.device("cpu")
    assert batch_chunk(cpu, per_sample=1000, batch=64, budget=4000) == 4
    assert batch_chunk(cpu, per_sample=10**9, batch=64, budget=4000) == 1  # never below one
    assert batch_chunk(torch.device("meta"), per_sample=1000, batch=64, budget=4000) == 64
    with sized_for("accelerator"):
        assert sizing() == "accelerator"
        assert batch_chunk(cpu, per_sample=1000, batch=64, budget=4000) == 64
        assert not cpu_path(torch.zeros(1))
        with sized_for("cpu"):
            assert batch_chunk(torch.device("meta"), 1000, 64, 4000) == 4
    assert sizing() == "device" and cpu_path(torch.zeros(1))
    with pytest.raises(ValueError, match="sizing must be"), sized_for("gpu"):  # type: ignore[arg-type]
        pass


def test_torch_compile_traces_the_sizing_and_recompiles_when_it_changes():
    """A compiled step reads the sizing without a graph break (``fullgraph=True`` raises on
    one; torch 2.11's Dynamo could not trace the ``ContextVar`` this once was), and guards on
    it: the same compiled function takes the other path under another sizing."""
    import torch._dynamo as dynamo

    def step(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if cpu_path(x) else x * 3

    dynamo.reset()
    compiled = torch.compile(step, backend="eager", fullgraph=True)
    x = torch.ones(2)
    assert torch.equal(compiled(x), x * 2)
    with sized_for("accelerator"):
        assert torch.equal(compiled(x), x * 3)
    assert torch.equal(compiled(x), x * 2)
    dynamo.reset()


def _routing_ops(batch: int, kind: str) -> int:
    x = torch.randn(batch, 32, 8, requires_grad=True)
    w = torch.randn(32, 8, 10 * 16, requires_grad=True)
    with sized_for(kind), DispatchTally() as t:  # type: ignore[arg-type]
        v, _ = fused_dense_routing(x, w, 10)
        v.sum().backward()
    return t.ops


def test_fused_routing_ops_do_not_grow_with_the_batch_on_an_accelerator():
    small, large = _routing_ops(2, "accelerator"), _routing_ops(64, "accelerator")
    assert small == large
    # The CPU path chunks for the cache (32*10*16 votes a sample: 204 samples fill 4 MB; at
    # this size one chunk), so it grows only past a chunk: 512 samples are 3 chunks.
    assert _routing_ops(512, "cpu") > _routing_ops(512, "accelerator")


@pytest.mark.parametrize("agreement", ["dot", "cosine"])
def test_fused_routing_whole_batch_equals_cpu_chunks(monkeypatch, agreement):
    import selfcaps.caps.fused_routing as fr

    monkeypatch.setattr(fr, "_CHUNK_ELEMENTS", 8 * 3 * 5 * 2)  # CPU path: chunks of 2 samples
    x = torch.randn(9, 8, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, 4, 3 * 5, dtype=torch.float64, requires_grad=True)
    outs = []
    for kind in ("cpu", "accelerator"):
        with sized_for(kind):  # type: ignore[arg-type]
            v, c = fused_dense_routing(x, w, 3, agreement=agreement)
            outs.append((v, c, *torch.autograd.grad((v * v.detach()).sum(), (x, w))))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b)
    with sized_for("accelerator"):
        fn = lambda a, b: fused_dense_routing(a, b, 3, agreement=agreement)[0]  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x[:3].detach().requires_grad_(), w))


def _self_routing_inputs(batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    N, C, M, D = 6, 4, 5, 3
    return [
        torch.randn(batch, N, C, generator=g, dtype=torch.float64).requires_grad_(),
        torch.rand(batch, N, generator=g, dtype=torch.float64).requires_grad_(),
        torch.randn(N, C, M * D, generator=g, dtype=torch.float64).requires_grad_(),
        torch.randn(N, C, M, generator=g, dtype=torch.float64).requires_grad_(),
        torch.randn(N, M, generator=g, dtype=torch.float64).requires_grad_(),
    ]


def test_self_routing_batched_parents_equal_the_parent_loop(monkeypatch):
    monkeypatch.setattr(fsr, "_CHUNK_ELEMENTS", 40)  # CPU path: several batch chunks
    args = _self_routing_inputs(7)
    outs = []
    for kind in ("cpu", "accelerator"):
        with sized_for(kind):  # type: ignore[arg-type]
            v, a = fsr.fused_self_routing(*args)
            weights = torch.linspace(-1, 1, v.numel(), dtype=v.dtype).view_as(v)
            outs.append((v, a, *torch.autograd.grad((v * weights).sum() + a.pow(2).sum(), args)))
    for x, y in zip(*outs, strict=True):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("group_elements", [1 << 28, 6 * 4 * 3 * 2])  # one group; 2 parents
def test_self_routing_batched_gradcheck(monkeypatch, group_elements):
    monkeypatch.setattr(fsr, "ACCELERATOR_ELEMENTS", group_elements)
    with sized_for("accelerator"):
        assert torch.autograd.gradcheck(fsr.fused_self_routing, _self_routing_inputs(3, seed=1))


def test_self_routing_ops_do_not_grow_with_the_batch_or_parents_on_an_accelerator():
    def ops(batch: int) -> int:
        args = _self_routing_inputs(batch)
        with sized_for("accelerator"), DispatchTally() as t:
            v, a = fsr.fused_self_routing(*args)
            (v.sum() + a.sum()).backward()
        return t.ops

    assert ops(2) == ops(50)


def test_routing_in_inference_mode_then_training_in_the_same_thread():
    """Scratch buffers made in inference mode are fresh (never cached): a cached one would be
    an inference tensor that the next training call may not write to. A new thread starts
    with an empty cache, as a process does."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            x, w = torch.randn(4, 32, 8), torch.randn(32, 8, 10 * 16, requires_grad=True)
            with torch.inference_mode():
                fused_dense_routing(x, w, 10)
            v, _ = fused_dense_routing(x, w, 10)
            v.sum().backward()
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert errors == []
