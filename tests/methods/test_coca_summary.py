"""CoCa's console summary sentence, its presets' budgets and augmentation options."""

import pytest

from selfcaps.config.loading import load_config
from selfcaps.methods import get_method

METRICS = {"knn_top1_backbone": 94.5, "knn_top1_random_init": 89.0, "knn_top1_pixels": 91.52}


@pytest.fixture(scope="module")
def coca():
    return get_method("coca")(load_config("coca", "quick", [("data.train_subset", 64)]))


def test_summary_sentence_names_trained_untrained_and_pixels(coca):
    assert coca.summary_line(METRICS) == (
        "kNN top-1 on the test split (backbone feature): "
        "trained 94.50 vs untrained 89.00 vs pixels 91.52."
    )


def test_no_summary_sentence_without_baselines(coca):
    assert coca.summary_line({"knn_top1_backbone": 94.5}) is None


@pytest.mark.parametrize("preset", ["quick", "quick_cifar10"])
def test_budgeted_presets_train_for_epochs_not_minutes(preset):
    cfg = load_config("coca", preset)
    assert cfg.trainer.max_time is None
    assert 0 < cfg.trainer.epochs <= 20


def test_time_named_preset_stops_on_the_clock():
    cfg = load_config("coca", "cifar10_1h")
    assert cfg.trainer.max_time == 60 and cfg.data.name == "cifar10"


@pytest.mark.parametrize("batched", [True, False])
def test_rotation_option_reaches_both_augmentation_paths(batched):
    overrides = [("augment.degrees", 15.0), ("augment.batched", batched)]
    train, _ = get_method("coca")(load_config("coca", "quick", overrides)).build_transforms()
    steps = [s for s in train.transforms[0].transforms if type(s).__name__ == "RandomRotation"]
    assert [tuple(s.degrees) for s in steps] == [(-15.0, 15.0)]
    if batched:
        assert train.recipe.degrees == 15.0


def test_only_the_digit_preset_rotates():
    assert load_config("coca", "quick").augment.degrees == 15.0
    for preset in ("quick_cifar10", "paper", "cifar10_1h"):
        assert load_config("coca", preset).augment.degrees == 0.0
