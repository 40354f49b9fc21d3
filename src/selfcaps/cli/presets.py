"""The shipped YAML presets by method, found without parsing them (no omegaconf, no torch)."""

from __future__ import annotations

from importlib import resources

__all__ = ["config_text", "default_preset", "list_presets", "paper_preset"]

_CONFIG_PACKAGE = "selfcaps.configs"


def config_text(name: str) -> str:
    """The text of a shipped configuration file (``base.yaml``, ``coca_quick.yaml``, ...)."""
    return resources.files(_CONFIG_PACKAGE).joinpath(name).read_text()


def list_presets(method: str | None = None) -> dict[str, list[str]]:
    """Shipped presets by method: ``{"coca": ["paper", "quick", ...], ...}``.

    Args:
        method: Restrict to one method.
    """
    out: dict[str, list[str]] = {}
    for entry in resources.files(_CONFIG_PACKAGE).iterdir():
        name = entry.name
        if not name.endswith(".yaml") or name == "base.yaml" or "_" not in name:
            continue
        m, preset = name[: -len(".yaml")].split("_", 1)
        if method is None or m == method:
            out.setdefault(m, []).append(preset)
    return {k: sorted(v) for k, v in sorted(out.items())}


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
