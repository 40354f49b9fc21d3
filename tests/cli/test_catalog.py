"""The torch-free name tables of the command line equal the registries they stand for."""

import selfcaps
from selfcaps.cli import catalog
from selfcaps.cli.listing import format_listing
from selfcaps.config_checks.sparsecaps import VARIANTS
from selfcaps.data import list_datasets
from selfcaps.methods import get_method, list_methods
from selfcaps.methods.flags import METHOD_FLAGS


def test_dataset_and_model_names_match_the_registries():
    assert list(catalog.DATASETS) == list_datasets()
    assert catalog.list_models() == selfcaps.list_models()


def test_every_method_is_registered_under_its_name_with_a_flag_table():
    assert sorted(METHOD_FLAGS) == list_methods()
    for name in list_methods():
        assert get_method(name).name == name
    assert METHOD_FLAGS["sparsecaps"]["--variant"].choices == VARIANTS


def test_plain_list_groups_methods_first():
    text = format_listing()
    assert text.index("methods") < text.index("datasets") < text.index("models")
    poe_presets = (
        "center_parents_sparse, competitive, paper, paper_mnist54k, paper_mnist6k, quick, "
        "quick_mnist"
    )
    assert f"poe          presets: {poe_presets}" in text
    assert "imagefolder:<path>" in text and "table1_cnn" in text
