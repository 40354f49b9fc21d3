"""``selfcaps list [methods|datasets|models]``: what can be run, on what, with which network.

``selfcaps list methods`` adds a line per preset saying what it is
(:func:`~selfcaps.config.presets.preset_description`), marking the default one.

Answers without importing torch: method and preset names come from the shipped
YAML files, dataset and model names from :mod:`selfcaps.data.catalog`.
"""

from __future__ import annotations

import argparse
import textwrap

from selfcaps.config.presets import default_preset, list_presets, preset_description
from selfcaps.data.catalog import DATASETS, list_models
from selfcaps.methods import list_methods

__all__ = ["LIST_CHOICES", "add_list_arguments", "cmd_list", "format_listing"]

LIST_CHOICES = ("all", "methods", "datasets", "models")


def _methods(describe: bool = False) -> list[str]:
    """A line per method with its presets; with ``describe``, then a line per preset."""
    presets = list_presets()
    lines = []
    for m in list_methods():
        lines.append(f"{m:<12} presets: {', '.join(presets.get(m, []))}")
        if describe:
            default = default_preset(m, None)
            width = max((len(p) for p in presets.get(m, [])), default=0)
            for p in presets.get(m, []):
                text = ("(default) " if p == default else "") + preset_description(m, p)
                lines.append(f"  {p:<{width}}  {text}".rstrip())
    return lines


def _wrapped(names: list[str]) -> list[str]:
    return textwrap.wrap(", ".join(names), width=88, break_on_hyphens=False)


def format_listing(what: str = "all", pattern: str = "*") -> str:
    """The text ``selfcaps list WHAT`` prints.

    Args:
        what: ``all`` (grouped: methods with presets, datasets, models) or one group.
        pattern: Shell-style filter of the model names.

    Examples:
        >>> for line in format_listing("methods").splitlines()[:2]: print(line)
        coca         presets: cifar10_1h, paper, quick, quick_bf16, quick_cifar10
          cifar10_1h     CoCa on CIFAR-10 for 60 minutes of training
    """
    datasets = list(DATASETS)
    if what == "methods":  # each preset with what it is
        return "\n".join(_methods(describe=True))
    if what == "datasets":
        return "\n".join(datasets)
    if what == "models":
        return "\n".join(list_models(pattern))
    indent = "  "
    return "\n".join(
        [
            "methods (selfcaps run METHOD [--preset PRESET]):",
            *(indent + line for line in _methods()),
            "",
            "datasets (--data NAME):",
            *(indent + line for line in _wrapped(datasets)),
            "",
            "models (selfcaps.create_model(NAME)):",
            *(indent + line for line in _wrapped(list_models(pattern))),
        ]
    )


def add_list_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``selfcaps list``."""
    p.add_argument("what", nargs="?", default="all", choices=LIST_CHOICES)
    p.add_argument("--pattern", default="*", help="shell-style filter for models, e.g. 'coca*'")


def cmd_list(args: argparse.Namespace) -> int:
    """``selfcaps list``."""
    print(format_listing(args.what, args.pattern))
    return 0
