"""Run configuration: YAML presets, ``key=value`` overrides, validation with clear errors.

A run's configuration is ``configs/base.yaml`` merged with the method's preset
``configs/<method>_<preset>.yaml``, then the command line's overrides. Only keys
present in that merge are accepted; values must have the type of the value they
replace. YAML is parsed with ``yaml.safe_load`` (no object construction).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from selfcaps._names import closest_names
from selfcaps.config.presets import config_text, default_preset, list_presets, preset_source

__all__ = [
    "ConfigError",
    "apply_overrides",
    "default_preset",
    "flat_keys",
    "list_presets",
    "load_config",
    "load_yaml",
    "parse_overrides",
    "read_yaml",
]


class ConfigError(ValueError):
    """A configuration key or value that cannot be used; the message names the key."""


def read_yaml(
    path: Path | str,
    expected: type = dict,
    error: type[Exception] = ConfigError,
    text: str | None = None,
    allow_empty: bool = False,
) -> Any:
    """Parse a YAML file safely (``yaml.safe_load``: no Python object construction).

    Args:
        path: File to read (also named in error messages).
        expected: The type the top level must have (``dict``: a mapping, ``list``: a list).
        error: The exception class raised for bad YAML or a wrong top-level type.
        text: The file's text, if already read.
        allow_empty: An empty file reads as an empty ``expected`` (else it is an error).

    Returns:
        The parsed value.

    Raises:
        error: The file is not valid YAML, is empty (unless ``allow_empty``), or its top
            level is not ``expected``; the message names the file.
    """
    try:
        data = yaml.safe_load(Path(path).read_text() if text is None else text)
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML ({e})") from None
    kind = {dict: "mapping", list: "list"}.get(expected, expected.__name__)
    if data is None:
        if allow_empty:
            return expected()
        raise error(f"{path}: expected a YAML {kind}, got an empty file")
    if not isinstance(data, expected):
        raise error(f"{path}: expected a YAML {kind}, got {type(data).__name__}")
    return data


def load_yaml(path: Path | str, text: str | None = None) -> dict[str, Any]:
    """Parse a YAML mapping safely (:func:`read_yaml`); an empty file is an empty mapping.

    Raises:
        ConfigError: The file is not valid YAML or not a mapping.
    """
    return read_yaml(path, dict, ConfigError, text, allow_empty=True)


def flat_keys(cfg: DictConfig | dict, prefix: str = "") -> list[str]:
    """Dotted paths of every leaf of a configuration."""
    keys: list[str] = []
    items = cfg.items() if isinstance(cfg, dict) else cfg.items_ex(resolve=False)
    for k, v in items:
        path = f"{prefix}{k}"
        if isinstance(v, dict | DictConfig):
            keys += flat_keys(v, path + ".")
        else:
            keys.append(path)
    return keys


def _closest(name: str, choices: Iterable[str]) -> str:
    close = closest_names(name, list(choices), n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""


def nearest_keys(key: str, valid: Sequence[str], n: int = 5) -> list[str]:
    """The configuration keys a mistyped ``key`` most likely meant, best first.

    Keys whose last part is ``key``'s last part come first (``lr`` finds ``optim.lr``),
    then the closest spellings of the whole key and of its last part.

    Examples:
        >>> nearest_keys("lr", ["optim.lr", "optim.name", "eval.finetune_lr", "seed"])
        ['optim.lr', 'eval.finetune_lr']
        >>> nearest_keys("optim.lrr", ["optim.lr", "optim.name", "seed"])[0]
        'optim.lr'
    """
    leaf = key.rsplit(".", 1)[-1].lower()
    leaves: dict[str, list[str]] = {}
    for k in valid:
        leaves.setdefault(k.rsplit(".", 1)[-1].lower(), []).append(k)
    found = list(leaves.get(leaf, []))
    found += closest_names(key, list(valid), n=n, cutoff=0.6)
    for close in difflib.get_close_matches(leaf, list(leaves), n=n, cutoff=0.6):
        found += leaves[close]
    found += [k for k in valid if leaf in k.rsplit(".", 1)[-1].lower().split("_")]
    return list(dict.fromkeys(found))[:n]


def unknown_key_message(key: str, valid: Sequence[str], method: str = "METHOD") -> str:
    """The error for an unknown configuration key: the nearest keys, or the sections.

    Examples:
        >>> unknown_key_message("lr", ["optim.lr", "optim.name", "seed"]).split("?")[0]
        "unknown config key 'lr'. Did you mean 'optim.lr'"
    """
    near = nearest_keys(key, valid)
    sections = sorted({k.split(".", 1)[0] for k in valid if "." in k})
    hint = f" Did you mean {' or '.join(map(repr, near[:3]))}?" if near else ""
    return (
        f"unknown config key {key!r}.{hint} Keys are SECTION.NAME, with sections "
        f"{', '.join(sections)}; `selfcaps run {method} --show-config` prints every key "
        "with its value."
    )


def parse_overrides(items: Sequence[str]) -> list[tuple[str, Any]]:
    """Parse ``key=value`` strings; values are YAML scalars or lists (``lr=1e-3``, ``m=[1,2]``).

    Args:
        items: The strings.

    Returns:
        ``(key, value)`` pairs in order.

    Raises:
        ConfigError: An item without ``=`` or with an unparsable value.

    Examples:
        >>> parse_overrides(["optim.lr=1e-3", "data.name=cifar10", "trainer.max_time=null"])
        [('optim.lr', 0.001), ('data.name', 'cifar10'), ('trainer.max_time', None)]
    """
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {key}: cannot parse value {raw!r} ({e})") from None
        if isinstance(value, str):
            # YAML 1.1 reads "1e-3" as a string; accept float literals without a dot.
            with contextlib.suppress(ValueError):
                value = float(value) if any(c in value.lower() for c in "e.") else value
        out.append((key, value))
    return out


def _coerce(key: str, old: Any, new: Any) -> Any:
    """Check ``new`` against the type of the value it replaces; ints widen to floats."""
    if old is None or new is None:
        return new
    if isinstance(old, bool) or isinstance(new, bool):
        if isinstance(old, bool) and isinstance(new, bool):
            return new
        raise ConfigError(f"{key}: expected {type(old).__name__}, got {new!r}")
    if isinstance(old, float) and isinstance(new, int):
        return float(new)
    if isinstance(old, int) and isinstance(new, float) and new.is_integer():
        return int(new)
    if isinstance(old, list | ListConfig) and isinstance(new, list):
        return new
    if type(old) is not type(new):
        raise ConfigError(
            f"{key}: expected {type(old).__name__} (like {old!r}), got {type(new).__name__} {new!r}"
        )
    return new


def apply_overrides(cfg: DictConfig, overrides: Sequence[tuple[str, Any]]) -> None:
    """Set ``key=value`` overrides on ``cfg`` in place; unknown keys raise with the closest match.

    Args:
        cfg: The configuration.
        overrides: ``(dotted key, value)`` pairs.
    """
    valid = flat_keys(cfg)
    for key, value in overrides:
        if key not in valid:
            raise ConfigError(unknown_key_message(key, valid, str(cfg.get("method", "METHOD"))))
        old = OmegaConf.select(cfg, key)
        OmegaConf.update(cfg, key, _coerce(key, old, value), merge=False, force_add=False)


def load_config(
    method: str,
    preset: str = "quick",
    overrides: Sequence[tuple[str, Any]] = (),
    methods: Sequence[str] | None = None,
) -> DictConfig:
    """Build a run configuration: base, then the preset, then overrides.

    A preset file with a top-level ``extends: OTHER`` is applied over the preset
    ``OTHER`` of the same method (which may extend another in turn).

    Args:
        method: Method name (``coca``, ...).
        preset: Preset name (``quick``, ``paper``, ...).
        overrides: ``(key, value)`` pairs, e.g. from :func:`parse_overrides`.
        methods: Valid method names (for the error message).

    Returns:
        The configuration (struct mode: no new keys can be added).

    Raises:
        ConfigError: Unknown method, preset or key, or a value of the wrong type.
    """
    presets = list_presets()
    if method not in presets:
        choices = list(methods or presets)
        raise ConfigError(
            f"unknown method {method!r}.{_closest(method, choices)} "
            f"Valid methods: {', '.join(sorted(choices))}"
        )
    if preset not in presets[method]:
        raise ConfigError(
            f"unknown preset {preset!r} for {method}.{_closest(preset, presets[method])} "
            f"Valid presets: {', '.join(presets[method])}"
        )
    layers = [load_yaml("configs/base.yaml", config_text("base.yaml"))]
    chain = [preset]
    while True:  # a preset may build on another of the same method: `extends: quick`
        name, text = preset_source(method, chain[-1])
        layer = load_yaml(name, text)
        parent = layer.pop("extends", None)
        layer.pop("description", None)  # what `selfcaps list methods` shows, not a setting
        layers.insert(1, layer)
        if parent is None:
            break
        if parent not in presets[method] or parent in chain:
            raise ConfigError(
                f"{name}: extends {parent!r}, which is not another preset of {method} "
                f"(valid: {', '.join(p for p in presets[method] if p not in chain)})"
            )
        chain.append(parent)
    cfg = OmegaConf.merge(*(OmegaConf.create(x) for x in layers))
    assert isinstance(cfg, DictConfig)
    cfg.method, cfg.preset = method, preset
    OmegaConf.set_struct(cfg, True)
    apply_overrides(cfg, overrides)
    return cfg
