"""CoCa's console summary sentence and the training budgets of its presets."""

import pytest

from selfcaps.cli.config import load_config
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
