"""Reading trained weights without Lightning: formats, prefixes, and errors that name the key."""

import json

import pytest
import torch
from safetensors.torch import save_file

from selfcaps.models import create_model
from selfcaps.models.weights import CheckpointError, network_state, read_weights

KWARGS = {"in_chans": 1, "planes": 4, "num_caps": 4, "caps_dim": 4}


def _saved(tmp_path, net, kwargs=KWARGS, model="coca"):
    """``net`` written as a run's ``model.safetensors`` + ``config.json``."""
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, path)
    cfg = {"model": model, "model_kwargs": kwargs, "method": "coca"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return path


def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_safetensors_with_config_rebuilds_the_network(tmp_path):
    torch.manual_seed(1)
    net = create_model("coca", **KWARGS)
    path = _saved(tmp_path, net)
    torch.manual_seed(2)
    loaded = create_model("coca", checkpoint_path=path)  # kwargs from config.json
    assert _same(loaded, net)
    assert not _same(create_model("coca", **KWARGS), net)  # a fresh one differs


def test_lightning_checkpoint_of_a_compiled_method(tmp_path):
    net = create_model("coca", **KWARGS)
    sd = {f"net._orig_mod.{k}": v for k, v in net.state_dict().items()}
    sd["criterion.temperature"] = torch.tensor(0.5)  # a method's own state is left out
    (tmp_path / "checkpoints").mkdir()
    torch.save({"state_dict": sd, "epoch": 0}, tmp_path / "checkpoints" / "last.ckpt")
    loaded = create_model("coca", checkpoint_path=tmp_path / "checkpoints" / "last.ckpt", **KWARGS)
    assert _same(loaded, net)
    assert read_weights(tmp_path, "last").path.name == "last.ckpt"


def test_network_state_prefers_net_then_backbone():
    t = torch.zeros(1)
    assert list(network_state({"backbone.a": t, "head.b": t})) == ["a"]
    assert list(network_state({"a": t})) == ["a"]


def test_shape_mismatch_names_the_key_and_both_shapes(tmp_path):
    path = _saved(tmp_path, create_model("coca", **KWARGS))
    with pytest.raises(CheckpointError) as e:
        create_model("coca", checkpoint_path=path, in_chans=3)
    msg = str(e.value)
    assert str(path) in msg and "'backbone.0.weight'" in msg
    assert "has shape (4, 1, 3, 3), the network expects (4, 3, 3, 3)" in msg


def test_missing_and_unexpected_keys_are_named(tmp_path):
    net = create_model("coca", **KWARGS)
    sd = net.state_dict()
    first = next(iter(sd))
    save_file({k: v for k, v in sd.items() if k != first}, tmp_path / "a.safetensors")
    with pytest.raises(CheckpointError, match=f"1 keys of the network are not in it .*{first!r}"):
        create_model("coca", checkpoint_path=tmp_path / "a.safetensors", **KWARGS)
    save_file({**sd, "extra.w": torch.zeros(1)}, tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError, match=r"1 keys are not in the network .*'extra\.w'"):
        create_model("coca", checkpoint_path=tmp_path / "b.safetensors", **KWARGS)


def test_weights_of_another_model_are_refused(tmp_path):
    path = _saved(tmp_path, create_model("coca", **KWARGS))
    with pytest.raises(
        CheckpointError, match=r"holds the weights of model 'coca' .*asked for 'poe'"
    ):
        create_model("poe", checkpoint_path=path)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.safetensors", "weights file .*missing.safetensors does not exist"),
        ("weights.pt", "expected a run directory, a .safetensors or a .ckpt file, got a .pt"),
        ("bad.safetensors", "cannot read weights .*bad.safetensors"),
    ],
)
def test_unreadable_sources_are_named(tmp_path, name, message):
    if name != "missing.safetensors":
        (tmp_path / name).write_bytes(b"not weights")
    with pytest.raises(CheckpointError, match=message):
        create_model("coca", checkpoint_path=tmp_path / name)


def test_pretrained_without_a_checkpoint_says_what_to_pass():
    with pytest.raises(ValueError, match="publishes no weights to download; pass checkpoint_path"):
        create_model("coca", pretrained=True)
