"""The public import paths keep working: the package's shortcuts, the layers, the plugin API,
``python -m selfcaps``, and every module path the restructuring moved (with a warning)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import selfcaps
from selfcaps._moved import MOVED, new_path


def test_package_shortcuts_and_version():
    from selfcaps.models import create_model, list_models
    from selfcaps.run.trained import load_run

    assert selfcaps.create_model is create_model
    assert selfcaps.list_models is list_models
    assert selfcaps.load_run is load_run
    assert selfcaps.__version__.count(".") == 2
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        selfcaps.nope  # noqa: B018


@pytest.mark.parametrize(
    "module, names",
    [
        ("selfcaps.caps", ["squash", "dynamic_routing", "DenseCaps"]),
        ("selfcaps.losses", ["NTXentLoss", "MarginLoss", "SinkhornDivergence"]),
        ("selfcaps.data", ["get_dataset", "list_datasets", "DatasetNotFoundError"]),
        ("selfcaps.models", ["create_model", "list_models", "register_model"]),
        ("selfcaps.eval", ["knn_evaluate", "linear_probe", "svm_probe", "finetune"]),
        ("selfcaps.records", ["MethodRecord", "CliFlag", "get_record", "list_records"]),
        ("selfcaps.methods", ["CapsuleMethod", "get_method", "list_methods"]),
        ("selfcaps.config", ["ConfigError", "load_config", "check_config"]),
        ("selfcaps.eval.protocols", ["run_protocol", "LabelSubset", "TrainedMethod"]),
        ("selfcaps.run.train", ["RunSpec", "train_run", "prepare_run"]),
        ("selfcaps.run.evaluate", ["load_run_dir", "resolved_run_config"]),
        ("selfcaps.run.trained", ["load_run", "load_method"]),
        ("selfcaps.results.registry", ["load_registry", "check_hashes"]),
    ],
)
def test_public_names(module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert missing == [], f"{module} lacks {missing}"


def test_methods_entry_points_give_the_shipped_classes():
    from selfcaps.methods import CapsuleMethod, get_method, list_methods

    for name in list_methods():
        cls = get_method(name)
        assert issubclass(cls, CapsuleMethod) and cls.name == name


@pytest.mark.parametrize("package, cls", [("poe", "PoE"), ("sparsecaps", "SparseCaps"),
                                          ("mcae", "MCAE")])  # fmt: skip
def test_method_packages_re_export_their_class(package, cls):
    pkg = importlib.import_module(f"selfcaps.methods.{package}")
    impl = importlib.import_module(f"selfcaps.methods.{package}.method")
    assert getattr(pkg, cls) is getattr(impl, cls)


def test_every_moved_path_points_at_a_module_that_exists_and_is_not_itself_moved():
    for old, new in MOVED.items():
        assert old != new and new not in MOVED, (old, new)
        assert importlib.util.find_spec(new) is not None, new


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_paths_warn_and_give_the_new_module(old):
    new = new_path(old)
    # Only the old name is forgotten: re-running the new module would make second copies of
    # its classes, and later tests in this process would see two ConfigErrors.
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    assert mod.__name__ == new and mod.__spec__.name == new
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert any(f"{old} moved to {new}" in m for m in messages), messages


def test_from_import_of_an_old_path_gives_the_same_objects():
    from selfcaps.engine.checkpoints import save_weights as new

    sys.modules.pop("selfcaps.methods.io", None)
    with pytest.warns(FutureWarning, match="selfcaps.methods.io moved to selfcaps.engine"):
        from selfcaps.methods.io import save_weights as old
    assert old is new


def test_paths_that_did_not_move_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("selfcaps.methods.coca")
        importlib.import_module("selfcaps.eval.knn")
    assert new_path("selfcaps.methods.coca") is None


def test_python_dash_m_selfcaps():
    out = subprocess.run(
        [sys.executable, "-m", "selfcaps", "--version"], capture_output=True, text=True, check=True
    )
    assert selfcaps.__version__ in out.stdout
