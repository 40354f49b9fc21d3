"""Configuration: YAML presets, ``key=value`` overrides and the checks of their values.

Torch-free, so that the command line loads and checks a configuration in milliseconds
before it imports torch and Lightning.

- :mod:`~selfcaps.config.presets`: the shipped presets (``selfcaps/configs/*.yaml``), their
  sources and one-line descriptions.
- :mod:`~selfcaps.config.loading`: :func:`load_config` (preset + overrides, with the nearest
  valid key on a typo) and :class:`ConfigError`.
- :mod:`~selfcaps.config.checks`: value checks of every key, per method.
"""

from __future__ import annotations

from selfcaps.config.checks import check_config, check_method_config
from selfcaps.config.loading import ConfigError, apply_overrides, load_config, parse_overrides
from selfcaps.config.presets import list_presets

__all__ = [
    "ConfigError",
    "apply_overrides",
    "check_config",
    "check_method_config",
    "list_presets",
    "load_config",
    "parse_overrides",
]
