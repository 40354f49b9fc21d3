"""The YAML presets by method, found without parsing them (no omegaconf, no torch).

A method's presets are the files ``<method>_<preset>.yaml`` of the package its record
names (``MethodRecord.presets``: ``selfcaps.configs`` for the shipped methods).
"""

from __future__ import annotations

import re
from importlib import resources

from selfcaps.records import get_record, list_records

__all__ = [
    "config_text",
    "default_preset",
    "list_presets",
    "paper_preset",
    "preset_description",
    "preset_source",
]

_CONFIG_PACKAGE = "selfcaps.configs"


def config_text(name: str) -> str:
    """The text of a shipped configuration file (``base.yaml``, ``coca_quick.yaml``, ...)."""
    return resources.files(_CONFIG_PACKAGE).joinpath(name).read_text()


def list_presets(method: str | None = None) -> dict[str, list[str]]:
    """Presets by method: ``{"coca": ["paper", "quick", ...], ...}``.

    Args:
        method: Restrict to one method (an unknown name: an empty dict).
    """
    out: dict[str, list[str]] = {}
    for record in list_records():
        if method is not None and record.name != method:
            continue
        prefix = f"{record.name}_"
        out[record.name] = sorted(
            entry.name[len(prefix) : -len(".yaml")]
            for entry in resources.files(record.presets).iterdir()
            if entry.name.startswith(prefix) and entry.name.endswith(".yaml")
        )
    return out


def preset_source(method: str, preset: str) -> tuple[str, str]:
    """Where the preset file of ``method`` is (for messages) and its text.

    Examples:
        >>> preset_source("coca", "quick")[0]
        'configs/coca_quick.yaml'
    """
    package = get_record(method).presets
    name = f"{method}_{preset}.yaml"
    label = f"configs/{name}" if package == _CONFIG_PACKAGE else f"{package}/{name}"
    return label, resources.files(package).joinpath(name).read_text()


def default_preset(method: str, dataset: str | None) -> str:
    """``quick_<dataset>`` if the method ships that preset (``coca_quick_cifar10``), else ``quick``.

    Examples:
        >>> default_preset("coca", "cifar10"), default_preset("coca", "svhn")
        ('quick_cifar10', 'quick')
    """
    return _for_dataset(method, "quick", dataset)


def paper_preset(method: str, dataset: str | None) -> str:
    """``paper_<dataset>`` if the method ships that preset (``mcae_paper_mnist``), else ``paper``.

    Examples:
        >>> paper_preset("mcae", "fashion_mnist"), paper_preset("mcae", "cifar10")
        ('paper_fashion_mnist', 'paper')
    """
    return _for_dataset(method, "paper", dataset)


def _for_dataset(method: str, base: str, dataset: str | None) -> str:
    """``<base>_<dataset>`` if the method ships that preset, else ``base``."""
    special = f"{base}_{dataset}"
    return special if dataset and special in list_presets(method).get(method, []) else base


#: The longest one-line description :func:`preset_description` gives.
DESCRIPTION_WIDTH = 78


def preset_description(method: str, preset: str) -> str:
    """One line saying what a preset is: its ``description:`` key, else its first comment.

    Without a ``description:`` key, the first clause of the comment that opens the file
    is taken (up to its first ``:``, ``(``, ``;`` or full stop), shortened to
    :data:`DESCRIPTION_WIDTH` characters; a file without either gives ``""``.

    Examples:
        >>> preset_description("coca", "quick")
        'CoCa scaled down to finish in about 4 minutes'
    """
    text = preset_source(method, preset)[1]
    key = re.search(r"^description:\s*(.+?)\s*$", text, flags=re.MULTILINE)
    if key:
        line = key.group(1).strip("\"'")
    else:
        comment = []
        for raw in text.splitlines():
            if not raw.startswith("#"):
                break
            comment.append(raw.lstrip("#").strip())
        line = re.split(r":\s| \(|;\s|\.\s|\.$", " ".join(comment), maxsplit=1)[0].strip()
    if len(line) > DESCRIPTION_WIDTH:
        line = line[: DESCRIPTION_WIDTH - 3].rsplit(" ", 1)[0] + "..."
    return line
