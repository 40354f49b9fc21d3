"""``trainer.compile``: every parameter the loss uses runs inside a compiled callable, per method.

``torch.compile`` is replaced by a stand-in that compiles nothing but marks what it
wraps (a module keeps ``torch.compile``'s ``OptimizedModule`` behaviour: ``forward``
goes through the wrapper, any other attribute goes to the uncompiled module). A
``TorchFunctionMode`` records every torch operation that reads one of the method's
parameters, and whether it ran inside a wrapper. Before ``CapsuleMethod.compiled``,
MCAE's ``forward_pretrain``, EncapNet's ``forward_taps`` and feedback units, and all
of PoE's stages ran outside it. One test runs the real ``torch.compile`` (eager
backend) on CoCa's loss.
"""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from selfcaps.config.loading import load_config
from selfcaps.methods import get_method, list_methods
from tests.methods.test_encapnet import SMALL as ENCAPNET_SMALL

_depth = [0]  # how many stand-in compiled callables are running


class _Compiled(nn.Module):
    """Stands for ``torch.compile(module)``: ``forward`` wrapped, other attributes delegated."""

    def __init__(self, mod: nn.Module) -> None:
        super().__init__()
        self._orig_mod = mod

    def forward(self, *args, **kwargs):
        return _inside(self._orig_mod, *args, **kwargs)

    def __getattr__(self, name):
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._orig_mod, name)


def _inside(fn, *args, **kwargs):
    _depth[0] += 1
    try:
        return fn(*args, **kwargs)
    finally:
        _depth[0] -= 1


def _fake_compile(fn, **_):
    if isinstance(fn, nn.Module):
        return _Compiled(fn)
    return lambda *args, **kwargs: _inside(fn, *args, **kwargs)


class _ParameterUse(TorchFunctionMode):
    """Names of the parameters read by torch operations inside / outside compiled callables."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.names = {id(p): n for n, p in module.named_parameters()}
        self.inside: set[str] = set()
        self.outside: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not getattr(func, "__name__", "").endswith("__set__"):  # e.g. param.grad = ...
            for a in pytree.tree_leaves((args, kwargs)):
                if id(a) in self.names:
                    (self.inside if _depth[0] else self.outside).add(self.names[id(a)])
        return func(*args, **kwargs)


#: Small networks (a method not listed runs its ``quick`` preset as it is).
_OVERRIDES = {
    "coca": [("model.planes", 4)],
    "mcae": [("model.dim", 8), ("model.decoder_caps", 1)],
    "encapnet": ENCAPNET_SMALL,
}


def _method(name, monkeypatch, compile_fn=_fake_compile):
    monkeypatch.setattr(torch, "compile", compile_fn)
    cfg = load_config(name, "quick", [*_OVERRIDES.get(name, []), ("trainer.compile", True)])
    torch.manual_seed(0)
    method = get_method(name)(cfg)
    method._trainer = SimpleNamespace(world_size=1, current_epoch=0)  # what the losses read
    return method


def _batch(method, n=4):
    x = torch.rand(method.example_input(n).shape)
    y = torch.arange(n) % method.info.num_classes
    return ((x, x.flip(0)), y) if method.name == "coca" else (x, y)


@pytest.mark.parametrize(
    ("name", "stage"),
    [(m, None) for m in list_methods() if m != "poe"] + [("poe", s) for s in (1, 2, 3)],
)
def test_the_loss_runs_the_compiled_callables(name, stage, monkeypatch):
    torch.set_num_threads(1)
    method = _method(name, monkeypatch)
    if stage is not None:  # PoE: each stage's update
        monkeypatch.setattr(type(method), "stage", property(lambda self: stage))
        monkeypatch.setattr(method, "manual_backward", lambda loss: loss.backward())
        method._hemisphere_sum = None
    method.train()
    spy = _ParameterUse(method)
    with spy:
        loss, _ = method.compute_loss(_batch(method))
    assert torch.isfinite(loss)
    assert spy.inside, "the loss read no parameter inside a compiled callable"
    assert spy.outside == set(), f"read outside torch.compile: {sorted(spy.outside)[:5]}"


def test_without_compile_the_callables_are_the_network_own(monkeypatch):
    cfg = load_config("mcae", "quick", _OVERRIDES["mcae"])
    method = get_method("mcae")(cfg)
    fn = method.network.forward_pretrain
    assert method.compiled(fn) is fn and method.net is method.network


@pytest.mark.slow
def test_real_compile_traces_the_loss(monkeypatch):
    """``torch.compile`` (eager backend: tracing, no code generation) sees CoCa's parameters."""
    torch.set_num_threads(1)
    graphs: list[set[int]] = []

    def backend(gm, example_inputs):
        graphs.append({t.data_ptr() for t in example_inputs if isinstance(t, torch.Tensor)})
        return gm.forward

    real = torch.compile
    method = _method("coca", monkeypatch, lambda fn, **_: real(fn, backend=backend))
    torch._dynamo.reset()
    loss, _ = method.compute_loss(_batch(method, 2))
    params = {p.data_ptr() for p in method.network.parameters()}
    assert torch.isfinite(loss) and params <= set().union(*graphs)


def test_compile_mode_by_device_and_by_key(monkeypatch):
    """``trainer.compile_mode``: null gives torch's default on a CPU and reduce-overhead
    (CUDA graphs) on a CUDA GPU; a value is used as given; anything else is refused."""
    from selfcaps.config.checks import check_config

    cls = get_method("coca")
    cfg = load_config("coca", "quick")
    assert cls(cfg).compile_mode is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg.trainer.accelerator = "gpu"
    method = cls.__new__(cls)
    method.cfg = cfg  # the property reads only the configuration
    assert method.compile_mode == "reduce-overhead"
    cfg.trainer.compile_mode = "max-autotune"
    assert method.compile_mode == "max-autotune"
    cfg.trainer.compile_mode = "fast"
    with pytest.raises(ValueError, match=r"trainer\.compile_mode"):
        check_config("coca", cfg)
