"""An evaluation starts in ``eval/``, never enters ``cli/``, and goes up the layers rarely.

The protocols of :mod:`selfcaps.eval.protocols` need a trained method only through what
:class:`~selfcaps.eval.protocols.TrainedMethod` names; the calls they make into a higher
layer are callbacks into the method object they were given. This test traces every Python
call while :func:`~selfcaps.eval.protocols.run_protocol` runs on a small CoCa (untrained:
the weights do not matter to the path) and counts, between ``selfcaps`` modules, the calls
from a lower layer into a higher one ("returns up the layers"), by pair of modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from selfcaps.config.loading import load_config
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.eval.protocols import run_protocol
from selfcaps.methods import get_method, list_methods

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_import_layers import _group, _rank


def _module_of(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name == "selfcaps" or name.startswith("selfcaps.") else None


def _trace(fn):
    """Run ``fn``; the selfcaps modules entered and the upward (caller, callee) module pairs."""
    entered: set[str] = set()
    upward: dict[tuple[str, str], int] = {}

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _module_of(frame)
        if callee is None:
            return
        entered.add(callee)
        caller_frame = frame.f_back
        while caller_frame is not None and _module_of(caller_frame) is None:
            caller_frame = caller_frame.f_back  # through torch, Lightning, the standard library
        if caller_frame is None:
            return
        caller = _module_of(caller_frame)
        g_caller, g_callee = _group(caller), _group(callee)
        if "entry" in (g_caller, g_callee) or caller == callee:
            return
        if _rank(g_callee) > _rank(g_caller):
            upward[(caller, callee)] = upward.get((caller, callee), 0) + 1

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, entered, upward


@pytest.fixture(scope="module")
def coca_and_data():
    cfg = load_config(
        "coca",
        "quick",
        [
            ("data.name", "mnist5k"),
            ("data.train_subset", 256),
            ("data.eval_batch_size", 256),
            ("eval.knn_k", 10),
            ("eval.linear_epochs", 1),
            ("eval.finetune_epochs", 1),
            ("eval.svm_max_train", 256),
            ("trainer.threads", 1),
        ],
        methods=list_methods(),
    )
    method = get_method("coca")(cfg).eval()
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    return method, dm


@pytest.mark.parametrize("protocol", ["knn", "linear", "svm", "finetune"])
def test_an_evaluation_never_enters_cli_and_goes_up_at_most_three_times(coca_and_data, protocol):
    method, dm = coca_and_data
    metrics, entered, upward = _trace(
        lambda: run_protocol(method, dm, protocol, method.monitor_feature)
    )
    assert any(k.startswith(f"{protocol}_top1") for k in metrics), metrics
    assert not [m for m in entered if m.startswith("selfcaps.cli")], sorted(entered)
    assert "selfcaps.eval.protocols" in entered
    pairs = "\n".join(f"{a} -> {b} ({n} calls)" for (a, b), n in sorted(upward.items()))
    assert len(upward) <= 3, f"calls up the layers:\n{pairs}"
    # The callbacks up are into the method object the protocol was given (its features).
    assert all(b.startswith("selfcaps.methods") for _, b in upward), pairs


def test_the_tracer_sees_a_call_up_the_layers():
    """The count is not vacuous: a call from eval into a function of the methods layer counts."""
    import torch
    from torch.utils.data import TensorDataset

    from selfcaps.eval.features import extract_named_features

    calls: list[int] = []
    probe: dict = {"__name__": "selfcaps.methods._probe", "calls": calls}
    exec("def features(x):\n    calls.append(1)\n    return {'f': x}\n", probe)
    data = TensorDataset(torch.zeros(4, 2), torch.zeros(4))
    _, _, upward = _trace(lambda: extract_named_features(probe["features"], data, ["f"], module=()))
    assert calls and ("selfcaps.eval.features", "selfcaps.methods._probe") in upward
