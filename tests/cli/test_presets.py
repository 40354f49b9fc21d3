"""Shipped presets: every one loads; ``extends`` layers one preset over another."""

import re

import pytest
from omegaconf import OmegaConf

from selfcaps.config import loading as config
from selfcaps.config.loading import ConfigError, flat_keys, list_presets, load_config


@pytest.mark.parametrize(
    ("method", "preset"), [(m, p) for m, ps in list_presets().items() for p in ps]
)
def test_every_shipped_preset_loads(method, preset):
    cfg = load_config(method, preset)
    assert cfg.method == method and cfg.preset == preset
    assert "extends" not in cfg


@pytest.mark.parametrize(
    ("method", "preset", "parent", "changed"),
    [
        ("sparsecaps", "quick_mnist5k", "quick", {"data.name", "trainer.epochs"}),
        ("sparsecaps", "quick_long", "quick", {"trainer.epochs"}),
        # the settings docs/methods/mcae.md measured: quick + these overrides, nothing else
        ("mcae", "cifar10_full", "quick", {"data.train_subset", "trainer.epochs"}),
        (
            "mcae",
            "cifar10_lf10",
            "quick",
            {"data.train_subset", "trainer.epochs", "eval.label_fraction", "eval.finetune_epochs"},
        ),
        # the paper's other datasets: their data and the width of their Table 2 cost
        ("mcae", "paper_mnist", "paper", {"data.name", "model.dim"}),
        ("mcae", "paper_fashion_mnist", "paper_mnist", {"data.name"}),
        ("mcae", "paper_smallnorb", "paper", {"data.name", "model.dim"}),
        (
            "mcae",
            "paper_imagenette",
            "paper",
            {"data.name", "data.image_size", "model.patch_size", "model.dim"},
        ),
        ("mcae", "paper_imagewoof", "paper_imagenette", {"data.name"}),
        # docs/methods/coca.md's 60-minute run: quick_cifar10 (batch 64) on the clock
        ("coca", "cifar10_1h", "quick_cifar10", {"trainer.epochs", "trainer.max_time"}),
        # bfloat16 for CPUs with native bfloat16 (docs/benchmarks.md)
        ("coca", "quick_bf16", "quick", {"trainer.precision", "trainer.routing_precision"}),
    ],
)
def test_extends_changes_only_what_the_child_sets(method, preset, parent, changed):
    base = OmegaConf.to_container(load_config(method, parent))
    child = OmegaConf.to_container(load_config(method, preset))
    diff = {
        f"{section}.{key}"
        for section, values in child.items()
        if isinstance(values, dict)
        for key in values
        if values[key] != base[section][key]
    }
    assert diff == changed
    assert child["preset"] == preset


def test_mcae_protocol_presets_hold_the_measured_settings():
    """docs/methods/mcae.md: 20 pretraining epochs on all 45,000 images; 10% of the labels x 80."""
    full, lf10 = load_config("mcae", "cifar10_full"), load_config("mcae", "cifar10_lf10")
    for cfg in (full, lf10):
        assert cfg.data.train_subset is None and cfg.trainer.epochs == 20
    assert full.eval.label_fraction is None and full.eval.finetune_epochs == 8
    assert lf10.eval.label_fraction == 0.1 and lf10.eval.finetune_epochs == 80


def test_coca_cifar10_presets_hold_the_measured_settings():
    """docs/methods/coca.md: 6 epochs at batch 64 (10 minutes on 2 cores); 60 minutes at 64."""
    quick, hour = load_config("coca", "quick_cifar10"), load_config("coca", "cifar10_1h")
    assert (quick.data.batch_size, quick.trainer.epochs, quick.trainer.max_time) == (64, 6, None)
    assert (hour.data.batch_size, hour.trainer.max_time) == (64, 60)
    for cfg in (quick, hour):  # the paper's optimiser and temperature, SimCLR's crops
        assert (cfg.optim.name, cfg.optim.lr, cfg.optim.weight_decay) == ("adam", 1e-3, 1e-6)
        assert cfg.loss.temperature == 0.2 and cfg.augment.min_scale == 0.08


def test_a_cycle_or_unknown_parent_is_named(monkeypatch):
    files = {"base.yaml": "", "m_a.yaml": "extends: b\n", "m_b.yaml": "extends: a\n"}
    files["m_c.yaml"] = "extends: nope\n"
    monkeypatch.setattr(config, "config_text", files.__getitem__)
    source = lambda m, p: (f"configs/{m}_{p}.yaml", files[f"{m}_{p}.yaml"])  # noqa: E731
    monkeypatch.setattr(config, "preset_source", source)
    monkeypatch.setattr(config, "list_presets", lambda method=None: {"m": ["a", "b", "c"]})
    with pytest.raises(ConfigError, match=r"configs/m_b.yaml: extends 'a'"):
        load_config("m", "a")
    with pytest.raises(ConfigError, match=r"configs/m_c.yaml: extends 'nope'.*valid: a, b"):
        load_config("m", "c")


#: A preset named for its time budget (DESIGN.md: e.g. ``cifar10_1h``) may stop on the clock.
_TIME_NAMED = r"_\d+(min|h)$"


@pytest.mark.parametrize(
    ("method", "preset"), [(m, p) for m, ps in list_presets().items() for p in ps]
)
def test_presets_budget_in_epochs_or_steps(method, preset):
    """The same command gives the same result on a busy machine: no wall-clock budget."""
    cfg = load_config(method, preset)
    assert cfg.trainer.max_time is None or re.search(_TIME_NAMED, preset), (
        f"{method}_{preset}.yaml: trainer.max_time={cfg.trainer.max_time}; budget in epochs "
        "or steps (a time budget is the user's --max-time or selfcaps bench --budget)"
    )


def test_flat_keys_by_hand():
    assert flat_keys({"a": 1, "b": {"c": 2, "d": {"e": None}}}) == ["a", "b.c", "b.d.e"]


@pytest.mark.parametrize("method", sorted(list_presets()))
def test_every_preset_of_a_method_has_the_same_keys(method):
    """docs/adding_a_method.md: a key set on the command line exists under every preset."""
    presets = list_presets()[method]
    keys = {p: set(flat_keys(load_config(method, p))) for p in presets}
    first = presets[0]
    for preset, found in keys.items():
        assert found == keys[first], (
            f"{method}: preset {preset} differs from {first}: only in {preset}: "
            f"{sorted(found - keys[first])}, only in {first}: {sorted(keys[first] - found)}"
        )
