"""One torch-free record per method: everything about a method that is not how it learns.

A :class:`MethodRecord` names the method's LightningModule and the module that registers
its networks (as ``"module:attribute"`` strings, imported only when needed), its presets,
its ``selfcaps run`` flags, the check of its configuration keys, what ``selfcaps bench``
reports for it and the paper's central claim. ``selfcaps list``, the command line's flags
and configuration checks, :func:`selfcaps.methods.get_method`, :func:`selfcaps.list_models`,
the bench and the claims suite all read the records, so a method is added by writing its
own files only (``docs/adding_a_method.md``).

Records are found, not listed: every module of this package with a ``RECORD`` (the
methods shipped with selfcaps), and every ``selfcaps.methods`` entry point of an installed
package (a plugin), e.g. in its ``pyproject.toml``::

    [project.entry-points."selfcaps.methods"]
    toymethod = "toypkg.record:RECORD"

Nothing here imports torch, so the command line answers ``--help`` and refuses a bad
configuration before it imports torch.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from selfcaps._names import unknown_name_error
from selfcaps.records.claims import Arm, Claim, Comparison, Rung
from selfcaps.records.flags import CliFlag, on_off

__all__ = [
    "ENTRY_POINT_GROUP",
    "Arm",
    "Claim",
    "CliFlag",
    "Comparison",
    "MethodRecord",
    "Rung",
    "get_record",
    "list_records",
    "load_object",
    "on_off",
    "refresh",
]

#: The entry-point group through which an installed package adds methods.
ENTRY_POINT_GROUP = "selfcaps.methods"

#: What ``selfcaps bench`` reads from a kNN-evaluated method's ``metrics.json``.
KNN_BENCH_KEYS: dict[str, str | None] = {
    "top1": "knn_top1_backbone",
    "top5": "knn_top5_backbone",
    "pixels": "knn_top1_pixels",
    "random_init": "knn_top1_random_init",
    "pixels_top5": "knn_top5_pixels",
    "random_init_top5": "knn_top5_random_init",
}


@dataclass(frozen=True)
class MethodRecord:
    """Everything selfcaps needs to know about a method without importing it.

    Attributes:
        name: The command-line name (``selfcaps run NAME``): lower case, no underscore
            (preset files are ``<name>_<preset>.yaml``).
        method: The method's ``CapsuleMethod`` subclass, as ``"module:Class"``; its
            ``name`` must equal :attr:`name`.
        model_module: The module whose import registers the method's networks
            (``@register_model``).
        models: The names that module registers (listed without importing it).
        presets: The package holding the presets ``<name>_<preset>.yaml`` (at least
            ``quick``); they are merged over selfcaps' ``configs/base.yaml``.
        flags: The method's own ``selfcaps run`` flags (``{"--variant": CliFlag(...)}``).
        no_training: What ``--epochs 0`` also sets, for a method whose evaluation trains
            (``{"eval.finetune_epochs": 0}``), so that ``--epochs 0`` means no training.
        config_check: ``"module:function"`` checking the values of the method's own keys
            without torch (``check(cfg)`` raising ``ValueError``); None: shared keys only.
        bench_protocol: The final evaluation's name, as ``selfcaps bench`` reports it.
        bench_keys: The ``metrics.json`` keys of ``top1``, ``top5``, ``pixels`` and
            ``random_init`` (None: not applicable), and of the baselines' top-5
            (``pixels_top5``, ``random_init_top5``) where there are.
        bench_notes: Further ``metrics.json`` values for the bench's notes column, as
            ``{label: key}``: what a reader needs to judge the top-1.
        bench_datasets: The datasets ``selfcaps bench`` runs the method on.
        embedded_data: A dataset that ships with selfcaps (no files to fetch) the method
            trains on, suggested when the data of a run is missing; None: none fits its network.
        paper_results: The paper's headline top-1 per dataset, for the bench report.
        claim: The paper's central claim as a paired comparison (``selfcaps bench
            --suite claims``); None: the method has none.
        summary_protocol: The headline's name in the console summary of ``selfcaps run``
            (None: :attr:`bench_protocol`).
        summary_keys: The summary's headline keys, as :attr:`bench_keys` (None: those):
            for a method whose bench number an untrained network can max out.
        summary_notes: The summary's further lines, as :attr:`bench_notes` (None: those).
        headline_is_accuracy: Whether the headline is a classification accuracy in
            percent, so that chance (100 / classes) is its baseline where it has no other.
    """

    name: str
    method: str
    model_module: str
    models: tuple[str, ...]
    presets: str = "selfcaps.configs"
    flags: Mapping[str, CliFlag] = field(default_factory=dict)
    no_training: Mapping[str, int] = field(default_factory=dict)
    config_check: str | None = None
    bench_protocol: str = "kNN"
    bench_keys: Mapping[str, str | None] = field(default_factory=lambda: dict(KNN_BENCH_KEYS))
    bench_notes: Mapping[str, str] = field(
        default_factory=lambda: {"capsule kNN": "knn_top1_capsule"}
    )
    bench_datasets: tuple[str, ...] = ("mnist5k", "mnist", "cifar10")
    embedded_data: str | None = "mnist5k"
    paper_results: Mapping[str, float] = field(default_factory=dict)
    claim: Claim | None = None
    summary_protocol: str | None = None
    summary_keys: Mapping[str, str | None] | None = None
    summary_notes: Mapping[str, str] | None = None
    headline_is_accuracy: bool = True

    def headline(self) -> tuple[str, Mapping[str, str | None], Mapping[str, str]]:
        """The console summary's protocol name, headline keys and notes (module docstring)."""
        return (
            self.summary_protocol or self.bench_protocol,
            self.bench_keys if self.summary_keys is None else self.summary_keys,
            self.bench_notes if self.summary_notes is None else self.summary_notes,
        )

    def __post_init__(self) -> None:
        if not self.name or "_" in self.name or self.name != self.name.lower():
            raise ValueError(
                f"method record name: expected a lower-case name without '_', got {self.name!r}"
            )
        for what, spec in (("method", self.method), ("config_check", self.config_check)):
            if spec is not None and spec.count(":") != 1:
                raise ValueError(
                    f"method record {self.name!r}: {what}: expected 'module:attribute', "
                    f"got {spec!r}"
                )


def load_object(spec: str) -> Any:
    """The object a ``"module:attribute"`` string names (imports the module).

    Examples:
        >>> load_object("selfcaps.records:MethodRecord").__name__
        'MethodRecord'
    """
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def _add(found: dict[str, tuple[MethodRecord, str]], record: Any, source: str) -> None:
    if not isinstance(record, MethodRecord):
        raise TypeError(f"{source}: expected a selfcaps.records.MethodRecord, got {record!r}")
    if record.name in found and found[record.name][0] is not record:
        raise ValueError(
            f"method {record.name!r} is defined twice: by {found[record.name][1]} and by {source}"
        )
    found[record.name] = (record, source)


@functools.cache
def _records() -> dict[str, MethodRecord]:
    found: dict[str, tuple[MethodRecord, str]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "RECORD"):
            _add(found, module.RECORD, f"{module.__name__}.RECORD")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP})"
        try:
            record = ep.load()
        except Exception as e:  # a broken plugin: say which one
            raise ImportError(f"{source} cannot be loaded: {type(e).__name__}: {e}") from e
        _add(found, record, source)
        if record.name != ep.name:
            raise ValueError(f"{source}: the record is named {record.name!r}, not {ep.name!r}")
    return {name: found[name][0] for name in sorted(found)}


def refresh() -> None:
    """Find the records again (after a package was installed or put on ``sys.path``)."""
    importlib.invalidate_caches()
    _records.cache_clear()


def list_records() -> list[MethodRecord]:
    """Every method's record, sorted by name (shipped methods and plugins).

    Examples:
        >>> [r.name for r in list_records()][:2]
        ['coca', 'encapnet']
    """
    return list(_records().values())


def get_record(name: str) -> MethodRecord:
    """The record of the method ``name``.

    Raises:
        ValueError: Unknown name (the message lists the valid ones and the closest match).

    Examples:
        >>> get_record("sparsecaps").flags["--variant"].key
        'model.variant'
    """
    records = _records()
    if name not in records:
        raise unknown_name_error("method", name, list(records))
    return records[name]
