"""The torch-free names of the command line (the records') equal the registries they stand for."""

import selfcaps
from selfcaps.cli.listing import format_listing
from selfcaps.config.checks.sparsecaps import VARIANTS
from selfcaps.config.loading import list_presets, load_config
from selfcaps.data import catalog, list_datasets
from selfcaps.methods import get_method, list_methods
from selfcaps.records import get_record, list_records


def test_dataset_and_model_names_match_the_registries():
    assert list(catalog.DATASETS) == list_datasets()
    assert catalog.list_models() == selfcaps.list_models()


def test_every_record_names_its_method_class_and_networks():
    assert [r.name for r in list_records()] == list_methods()
    for record in list_records():
        assert get_method(record.name).name == record.name
        assert set(record.models) <= set(selfcaps.list_models()), record.name
    assert get_record("sparsecaps").flags["--variant"].choices == VARIANTS


def test_plain_list_groups_methods_first():
    text = format_listing()
    assert text.index("methods") < text.index("datasets") < text.index("models")
    poe_presets = (
        "center_parents_sparse, competitive, paper, paper_mnist54k, paper_mnist6k, quick, "
        "quick_mnist"
    )
    assert f"poe          presets: {poe_presets}" in text
    assert "imagefolder:<path>" in text and "table1_cnn" in text


def test_list_methods_says_what_each_preset_is():
    text = format_listing("methods")
    for method, presets in list_presets().items():
        block = text.split(f"{method:<12} presets:", 1)[1].split("\n")
        width = max(map(len, presets))
        described = {
            line.split()[0]: line[2 + width :].strip() for line in block[1 : 1 + len(presets)]
        }
        assert list(described) == presets, block
        for preset, what in described.items():
            assert len(what) > 10 and len(what) <= 90, (method, preset, what)
        assert described["quick"].startswith("(default) "), described
    assert "  quick          (default) CoCa scaled down to finish in about 4 minutes" in text
    assert "paper_mnist6k          the paper's method on 6,000 MNIST training images" in text
    assert "description" not in load_config("mcae", "quick")  # a description is no setting
