"""A new user's first hour, scripted: every method starts on a machine with no data root.

Each of the five ``selfcaps run METHOD --max-steps 5`` either trains on the dataset that
ships with selfcaps or exits 2 with one message naming both ways forward: the command that
fetches the real files and, where the method's network takes its images, the embedded
dataset (and following that suggestion trains). Then ``selfcaps data get mnist``, against
a local server, writes files the MNIST loader reads and a run accepts.

The runs are tiny (small networks, 64 training images, 5 steps): the walk checks that
things start, not what they learn.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.datasets as tvd

from selfcaps.cli import main
from selfcaps.config.loading import load_yaml
from selfcaps.data import get_dataset
from selfcaps.data.layouts import check_run_data
from selfcaps.records import get_record
from tests.data.formats import write_mnist
from tests.e2e.local_server import point_mnist_at, serve
from tests.methods.test_mcae_e2e import TINY as MCAE_TINY
from tests.methods.test_poe_e2e import TINY as POE_TINY
from tests.methods.test_sparsecaps_e2e import TINY as SPARSECAPS_TINY
from tests.runs import FAST
from tests.runs import TINY as COCA_TINY


def _overrides(args: list[str]) -> list[str]:
    """The ``key=value`` arguments of a method's tiny end-to-end run (not its flags or data)."""
    return [a for a in args if "=" in a and not a.startswith("-")]


#: ``key=value`` overrides that make each method's run a few seconds on one thread (small
#: networks, few training images, small evaluations), from the methods' end-to-end tests;
#: none of them names a dataset.
SMALL = {
    "coca": _overrides(COCA_TINY),
    "sparsecaps": _overrides(SPARSECAPS_TINY),
    "mcae": [*_overrides(MCAE_TINY), "eval.finetune_epochs=1"],
    "encapnet": [],  # refused before its network is built
    "poe": [*_overrides(POE_TINY), "trainer.epochs=3"],  # the sum of its stage_epochs
}

#: What ``selfcaps run METHOD`` does today with no data root: the README's first section
#: says which methods run with no data; this keeps it true.
TRAINS_WITH_NO_DATA = {"coca": True, "poe": True, "sparsecaps": False, "mcae": False,
                       "encapnet": False}  # fmt: skip
DEFAULT_DATA = {"sparsecaps": "mnist", "mcae": "cifar10", "encapnet": "cifar10"}


@pytest.fixture
def fresh_machine(tmp_path, monkeypatch):
    """No data anywhere: ``$SELFCAPS_DATA`` an empty folder, and no ``./data`` either."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("SELFCAPS_DATA", str(empty))
    monkeypatch.chdir(tmp_path)
    return empty


def _run(method: str, out, *extra: str) -> int:
    args = ["run", method, "--max-steps", "5", "--out", str(out), *FAST, *SMALL[method]]
    return main([*args, *extra])


@pytest.mark.slow
@pytest.mark.parametrize("method", list(SMALL))
def test_every_method_starts_with_no_data(method, fresh_machine, tmp_path, capsys):
    code = _run(method, tmp_path / "run")
    err = capsys.readouterr().err
    if TRAINS_WITH_NO_DATA[method]:
        assert code == 0, err[-2000:]
        assert load_yaml(tmp_path / "run" / "config.yaml")["data"]["name"] == "mnist5k"
        assert (tmp_path / "run" / "model.safetensors").is_file()
        return
    assert code == 2, err[-2000:]
    dataset = DEFAULT_DATA[method]
    message = err.strip().splitlines()
    assert message[0].startswith(f"selfcaps: error: dataset {dataset!r} not found")
    assert sum(line.startswith("selfcaps: error:") for line in message) == 1  # one message
    fetch = f"`selfcaps data get {dataset} --root DIR`, then pass --data-root DIR"
    assert fetch in err
    embedded = get_record(method).embedded_data
    suggestion = f"`selfcaps run {method} --data mnist5k`"
    if embedded is None:
        assert "--data mnist5k" not in err
        return
    assert suggestion in message[-1]
    assert not (tmp_path / "run").exists()  # nothing written by the refused run
    # following the suggestion trains
    assert _run(method, tmp_path / "run", "--data", embedded) == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_data_get_mnist_writes_what_the_loader_reads(fresh_machine, tmp_path, monkeypatch, capsys):
    served = tmp_path / "served"
    made = write_mnist(tmp_path / "made", n_train=20, n_test=10, gz=True, seed=7)
    (tmp_path / "made" / "MNIST" / "raw").rename(served)
    root = tmp_path / "mnist-root"
    with serve(served, monkeypatch) as url:
        point_mnist_at(monkeypatch, tvd.MNIST, url, served)
        assert main(["data", "get", "mnist", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "100%" in err and "\r" not in out  # torchvision's progress bar, on stderr only
    assert f"--data mnist --data-root {root}" in out
    for split, (images, labels) in made.items():
        ds = get_dataset("mnist", root=root, split="train_full" if split == "train" else split)
        assert ds.data.shape == (len(labels), 1, 28, 28) and ds.data.dtype == torch.uint8
        assert torch.equal(ds.data, torch.from_numpy(images).unsqueeze(1))
        assert ds.targets.tolist() == labels.tolist()
    check_run_data("sparsecaps", "mnist", str(root), "--data-root")  # a run accepts the root
