"""Torch-free checks of the shared and the methods' keys: presets pass, a bad key is named."""

import re

import pytest
from omegaconf import OmegaConf

from selfcaps.config.checks import check_config, check_method_config
from selfcaps.config.checks._expect import expect
from selfcaps.config.loading import list_presets, load_config

PRESETS = [(m, p) for m, names in sorted(list_presets().items()) for p in sorted(names)]


@pytest.mark.parametrize(("method", "preset"), PRESETS)
def test_every_preset_passes(method, preset):
    check_config(method, load_config(method, preset))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("optim.lr", 0.0),
        ("optim.name", "lbfgs"),
        ("optim.warmup", -1),
        ("optim.betas", [0.9, 1.0]),
        ("data.val_fraction", 1.0),
        ("eval.knn_k", 0),
        ("trainer.checkpoint_every_n_minutes", 0.0),
        ("trainer.checkpoint_every_n_steps", 0),
        ("trainer.checkpoint_every_n_steps", 2.5),
    ],
)
def test_a_bad_shared_value_is_refused_for_every_method(key, value):
    for method in sorted(list_presets()):
        cfg = load_config(method, "quick")
        OmegaConf.update(cfg, key, value, merge=False)
        with pytest.raises(ValueError, match=rf"^{re.escape(key)}: expected "):
            check_config(method, cfg)


@pytest.mark.parametrize(
    ("method", "key", "value"),
    [
        ("mcae", "model.mask_ratio", 0.0),
        ("mcae", "model.backbone", "resnet"),
        ("mcae", "eval.finetune_epochs", -1),
        ("mcae", "optim.scheduler", "step"),
        ("mcae", "eval.label_fraction", 0.0),
        ("sparsecaps", "model.variant", "desne"),
        ("sparsecaps", "model.mask_threshold", 1.0),
        ("sparsecaps", "eval.affnist", "official"),
        ("sparsecaps", "augment.canvas", 28),
        ("encapnet", "loss.epsilon", 0.0),
        ("encapnet", "model.name", "resnet18"),
        ("encapnet", "loss.units", [[9, 0, 1]]),
        ("poe", "model.generation", "together"),
        ("poe", "cd.sparsity_target", 1.0),
        ("poe", "samples.rows", 0),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(method, key, value):
    cfg = load_config(method, "quick")
    if key == "loss.units":
        cfg.loss.ot = True
    OmegaConf.update(cfg, key, value, merge=False)
    with pytest.raises(ValueError, match=key.split(".")[0]):
        check_method_config(method, cfg)


def test_poe_epochs_must_equal_its_stages():
    cfg = load_config("poe", "quick")
    cfg.trainer.epochs = sum(cfg.model.stage_epochs) + 1
    with pytest.raises(ValueError, match=r"model\.stage_epochs"):
        check_method_config("poe", cfg)


def test_coca_has_only_the_shared_keys():
    check_method_config("coca", OmegaConf.create({}))  # nothing of its own to check


def test_expect_quotes_the_value():
    with pytest.raises(ValueError, match=r"^model\.x: expected a or b, got 'c'$"):
        expect(False, "model.x", "a or b", "c")
    expect(True, "model.x", "a or b", "a")
