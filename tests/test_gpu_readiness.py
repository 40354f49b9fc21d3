"""``benchmarks/gpu_readiness.py`` on tiny copies of every method's ``paper`` preset.

What it measures is what these tests hold the training step to: at most one host sync per
step for every method (the finiteness read), and ops per step that do not grow with the
batch size when the hot loops are sized for an accelerator.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
METHODS = ["coca", "sparsecaps", "mcae", "encapnet", "poe"]


@pytest.fixture(scope="module")
def readiness():
    sys.path.insert(0, str(BENCHMARKS))
    before = torch.get_num_threads()
    import gpu_readiness

    yield gpu_readiness
    torch.set_num_threads(before)
    sys.path.remove(str(BENCHMARKS))
    sys.modules.pop("gpu_readiness", None)


@pytest.fixture(scope="module")
def rows(readiness, tmp_path_factory):
    """Batch 8 and batch 16, every method, no compile check (tested below on one method)."""
    out = {}
    for batch in (8, 16):
        path = tmp_path_factory.mktemp("ready") / f"b{batch}.json"
        argv = ["--tiny", "--no-compile-check", "--batch-size", str(batch), "--json", str(path)]
        assert readiness.main(argv) == 0
        out[batch] = json.loads(path.read_text())
    return out


@pytest.mark.parametrize("method", METHODS)
def test_at_most_one_host_sync_per_step(rows, method):
    r = rows[8][method]
    assert r["syncs_per_step"] <= 1, r["sync_sites"]
    assert {"ops_per_step", "data_ms_per_batch", "flops_per_image", "graph_breaks"} <= set(r)
    assert r["flops_per_image"] > 0 and r["projected_images_per_s"] > 0


@pytest.mark.parametrize("method", METHODS)
def test_ops_per_step_do_not_grow_with_the_batch(rows, method):
    small, large = rows[8][method]["ops_per_step"], rows[16][method]["ops_per_step"]
    assert large <= small, (small, large)


def test_bf16_mixed_counts_the_autocast_casts(readiness, rows, tmp_path):
    """``--precision bf16-mixed`` counts the steps under autocast: the same FLOPs, and more
    ops than in float32 (the casts of weights and inputs to bfloat16, and their backward),
    which a launch-bound step pays for on a GPU."""
    path = tmp_path / "bf16.json"
    argv = ["--tiny", "--no-compile-check", "--batch-size", "8", "--methods", "poe"]
    assert readiness.main([*argv, "--precision", "bf16-mixed", "--json", str(path)]) == 0
    bf16, fp32 = json.loads(path.read_text())["poe"], rows[8]["poe"]
    assert (bf16["precision"], fp32["precision"]) == ("bf16-mixed", "32-true")
    assert bf16["flops_per_image"] == fp32["flops_per_image"]
    assert bf16["ops_per_step"] > fp32["ops_per_step"], (bf16["ops_per_step"], fp32["ops_per_step"])
    assert bf16["syncs_per_step"] <= 1


def test_grouped_convolution_flops_are_counted_per_group():
    """FLOPs as the readiness table counts them (``flop_counter``) for a grouped
    convolution: 2 x B x C_out x (C_in / groups) x k^2 x H_out x W_out, by hand; its
    backward counts the input and the weight gradients, each the same again (torch's own
    formula counts the input gradient ``groups`` times too high)."""
    from selfcaps.eval.profile import flop_counter

    conv = torch.nn.Conv2d(8, 16, 3, groups=4, padding=1)
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    forward = 2 * 2 * 16 * (8 // 4) * 3 * 3 * 5 * 5
    with flop_counter() as fc:
        conv(x).sum().backward()
    assert fc.get_total_flops() == 3 * forward


def test_table_and_projection_arithmetic(readiness):
    args = readiness.parse_args(["--launch-us", "10", "--sync-us", "100", "--peak-tflops", "1"])
    row = {
        "method": "x",
        "batch_size": 4,
        "ops_per_step": 100.0,
        "syncs_per_step": 1.0,
        "ops_by_phase": {"forward": 100.0},
        "sync_sites": [],
        "data_ms_per_batch": 0.5,
        "flops_per_image": 1e6,
        "graph_breaks": 0,
        "projected_images_per_s": 0.0,
        "bound_by": "launches",
    }
    # 100 ops x 10 us + 1 sync x 100 us = 1.1 ms; compute 4e6 / 1e12 s; data 0.5 ms
    assert readiness.projection(row, args) == (pytest.approx(4 / 1.1e-3), "launches")
    assert "x" in readiness.table([row], args)
    # matrix work: 3e9 conv + 1e9 other FLOPs an image; 4 images at 1 and 10 TFLOP/s
    row |= {"flops_per_image": 4e9, "conv_flops_per_image": 3e9}
    assert readiness.projection(row, args) == (pytest.approx(4 / 16e-3), "compute")
    args = readiness.parse_args(["--peak-tflops", "1", "--conv-peak-tflops", "10"])
    assert readiness.projection(row, args) == (pytest.approx(4 / 5.2e-3), "compute")
    assert "convolutions 10 TFLOP/s" in readiness.table([row], args)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["coca", "sparsecaps", "mcae"])
def test_no_graph_breaks_in_the_loss_on_an_accelerator(readiness, method):
    """``torch._dynamo.explain`` of the method's ``compute_loss`` on one augmented batch, with
    the hot loops sized as on a GPU: one graph (custom autograd Functions traced whole)."""
    from _method_steps import build_method
    from selfcaps.caps.chunking import sized_for

    args = readiness.parse_args(["--tiny"])
    m, dm = build_method(method, "paper", readiness.overrides(method, args))
    with sized_for("accelerator"):
        assert readiness.graph_breaks(m, dm) == 0


def test_cpu_digest_repeats_and_tells_seeds_apart(monkeypatch):
    """``benchmarks/cpu_digest.py``: the same training gives the same digest, another seed
    or the accelerator's code path another one (so equal digests at two commits mean
    something)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cpu_digest

    monkeypatch.setitem(cpu_digest.CASES, "coca", ([("data.train_subset", 64)], 2))
    tiny = [("data.batch_size", 16), ("model.planes", 4), ("model.num_caps", 4)]
    a = cpu_digest.trained_digest("coca", None, 0, tiny)
    assert a == cpu_digest.trained_digest("coca", None, 0, tiny)
    assert a != cpu_digest.trained_digest("coca", None, 1, tiny)
    # --sizing accelerator: the GPU's code path (another rounding), itself repeatable
    b = cpu_digest.trained_digest("coca", None, 0, tiny, sizing="accelerator")
    assert b == cpu_digest.trained_digest("coca", None, 0, tiny, sizing="accelerator")
    assert b != a


#: The shape of inductor's output code (torch 2.14, CPU), trimmed: a forward ``call``.
INDUCTOR_CPU_CALL = '''
cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], """...""")


class Runner:
    def call(self, args):
        primals_1, primals_2 = args
        args.clear()
        assert_size_stride(primals_1, (4, 4), (4, 1), 'input')
        buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
        extern_kernels.mm(primals_1, primals_2, out=buf0)
        del primals_2
        cpp_fused_relu_0(buf0, buf1)
        buf3 = extern_kernels.convolution(reinterpret_tensor(buf1, (1, 1, 4, 4)), buf2)
        buf4 = torch.ops.aten.convolution_backward.default(buf3, buf1, buf2, [0])
        buf5 = buf4[0]
        buf6 = buf5; del buf5  # reuse
        cpp_fused_sum_1(buf3, buf6)
        return (buf6, buf0, )

runner = Runner(partitions=[])
call = runner.call


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
    cpp_fused_relu_0(fake)
'''

TRITON_CALL = """
def call(args):
    with torch.cuda._DeviceGuard(0):
        buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
        extern_kernels.bmm(a, b, out=buf0)
        stream0 = get_raw_stream(0)
        triton_poi_fused_add_relu_0.run(buf0, 16, stream=stream0)
        triton_red_fused_sum_1.run(buf0, buf1, 4, 4, stream=stream0)
        return (buf1, )
"""


def test_kernel_count_of_inductor_code_by_hand(readiness):
    # CPU: fused cpp_fused_relu_0, cpp_fused_sum_1; library mm, convolution, convolution_backward
    assert readiness.count_kernels(INDUCTOR_CPU_CALL) == (2, 3)
    assert readiness.count_kernels(TRITON_CALL) == (2, 1)  # two Triton kernels, one bmm
    assert readiness.count_kernels("no generated function here") == (0, 0)


@pytest.mark.slow
def test_compiled_kernels_of_a_small_step(readiness, monkeypatch):
    """A real compile (inductor, CPU): a linear layer, ReLU and a sum, forward and backward."""

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def compute_loss(self, batch):
            return self.lin(batch[0]).relu().sum(), {}

    class Data:
        def train_dataloader(self):
            return [(torch.randn(5, 4), torch.zeros(5))]

    module = Tiny()
    k = readiness.compiled_kernels(module, Data())
    assert k is not None and k["graphs"] == 2  # forward and backward
    assert k["library"] >= 2  # the forward and the weight-gradient matrix products
    assert 1 <= k["fused"] <= 4
    assert all(p.grad is None for p in module.parameters())  # the step leaves no gradients

    # bf16-mixed: the loss compiled under autocast, so the generated code computes in bfloat16
    codes = []
    count = readiness.count_kernels

    def spy(code):
        codes.append(code)
        return count(code)

    monkeypatch.setattr(readiness, "count_kernels", spy)
    assert readiness.compiled_kernels(module, Data(), "bf16-mixed")["library"] >= 2
    assert any("bfloat16" in c for c in codes)
    codes.clear()
    readiness.compiled_kernels(module, Data(), "32-true")
    assert codes and not any("bfloat16" in c for c in codes)


def test_compiled_kernels_skip_a_method_that_optimises_by_hand(readiness):
    class Manual(torch.nn.Module):
        automatic_optimization = False

        def compute_loss(self, batch):
            raise AssertionError("not to be called")

    assert readiness.compiled_kernels(Manual(), None) is None
