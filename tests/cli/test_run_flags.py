"""Method flags of ``selfcaps run``: a flag two methods share takes each method's own choices."""

import pytest

from selfcaps.cli.main import build_parser
from selfcaps.cli.run import _overrides_from_args
from selfcaps.config.loading import ConfigError


def _overrides(*argv: str) -> list:
    args = build_parser().parse_args(["run", *argv])
    return _overrides_from_args(args, args.method)


@pytest.mark.parametrize(
    ("method", "value"),
    [("sparsecaps", "dense"), ("sparsecaps", "supervised"), ("encapnet", "master")],
)
def test_shared_variant_flag_accepts_each_methods_choices(method, value):
    assert ("model.variant", value) in _overrides(method, "--variant", value)


def test_shared_variant_flag_rejects_another_methods_choice_by_name():
    with pytest.raises(
        ConfigError,
        match=r"--variant of encapnet: expected one of master, master_aide, got 'dense'",
    ):
        _overrides("encapnet", "--variant", "dense")


def test_a_flag_of_another_method_is_named():
    with pytest.raises(ConfigError, match="--pretrain-epochs is an option of mcae, not of coca"):
        _overrides("coca", "--pretrain-epochs", "0")


def test_single_method_flags_are_typed():
    assert ("trainer.epochs", 0) in _overrides("mcae", "--pretrain-epochs", "0")


def _resolved(*argv: str) -> dict:
    """The configuration keys the overrides set, last one winning (as load_config applies them)."""
    return dict(_overrides(*argv))


def test_epochs_0_means_no_training_for_mcae_too():
    """`--epochs 0` skips MCAE's finetuning as well; `--pretrain-epochs 0` (the baseline) not."""
    assert _resolved("mcae", "--epochs", "0")["eval.finetune_epochs"] == 0
    assert "eval.finetune_epochs" not in _resolved("mcae", "--pretrain-epochs", "0")
    assert "eval.finetune_epochs" not in _resolved("mcae", "--epochs", "3")
    explicit = _resolved("mcae", "--epochs", "0", "--finetune-epochs", "2")
    assert explicit["eval.finetune_epochs"] == 2
