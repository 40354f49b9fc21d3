"""Old import paths of modules that moved, kept working for one release with a warning.

The restructuring of release 0.2 moved run machinery out of ``selfcaps.methods`` and
library code out of ``selfcaps.cli`` (see the layer picture in the manual's development
page). :data:`MOVED` maps each old dotted path to the module that now holds its code;
:func:`install` (called by ``import selfcaps``) puts a finder on ``sys.meta_path`` so that
``import selfcaps.methods.io`` or ``from selfcaps.methods.io import save_weights`` still
works, warns with a :class:`FutureWarning` naming the new path, and gives the new
module's very objects (``isinstance`` checks and pickles keep working). Nothing here
imports a layer: the new module is imported only when an old path is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install", "new_path"]

#: Old dotted module path -> new one. Removed in the release after 0.2.
MOVED: dict[str, str] = {
    "selfcaps.config_checks._expect": "selfcaps.config.checks._expect",
    "selfcaps.config_checks.encapnet": "selfcaps.config.checks.encapnet",
    "selfcaps.config_checks.labels": "selfcaps.config.checks.labels",
    "selfcaps.config_checks.mcae": "selfcaps.config.checks.mcae",
    "selfcaps.config_checks.poe": "selfcaps.config.checks.poe",
    "selfcaps.config_checks.shared": "selfcaps.config.checks.shared",
    "selfcaps.config_checks.sparsecaps": "selfcaps.config.checks.sparsecaps",
    "selfcaps.config_checks": "selfcaps.config.checks",
    "selfcaps.cli.config": "selfcaps.config.loading",
    "selfcaps.cli.presets": "selfcaps.config.presets",
    "selfcaps.cli.catalog": "selfcaps.data.catalog",
    "selfcaps.methods.datamodule": "selfcaps.data.datamodule",
    "selfcaps.methods.engine": "selfcaps.engine.trainer",
    "selfcaps.methods.stopping": "selfcaps.engine.stopping",
    "selfcaps.methods.clock": "selfcaps.engine.clock",
    "selfcaps.methods.csv_logs": "selfcaps.engine.csv_logs",
    "selfcaps.methods.io": "selfcaps.engine.checkpoints",
    "selfcaps.methods.atomic": "selfcaps.engine.atomic",
    "selfcaps.methods.metric_names": "selfcaps.engine.metric_names",
    "selfcaps.cli.threads": "selfcaps.engine.threads",
    "selfcaps.eval.progress": "selfcaps.engine.progress",
    "selfcaps.methods.figures": "selfcaps.viz.figures",
    "selfcaps.methods.evaluation": "selfcaps.eval.method_metrics",
    "selfcaps.cli.protocols": "selfcaps.eval.protocols",
    "selfcaps.eval.paired": "selfcaps.results.paired",
    "selfcaps.methods.trained": "selfcaps.run.trained",
    "selfcaps.cli.rundir": "selfcaps.run.rundir",
    "selfcaps.cli.provenance": "selfcaps.run.provenance",
    "selfcaps.cli.summary": "selfcaps.run.summary",
    "selfcaps.cli.registry": "selfcaps.results.registry",
    "selfcaps.cli.suite_runs": "selfcaps.results.suite_runs",
    "selfcaps.cli.claims": "selfcaps.results.claims",
    "selfcaps.methods.poe_collapse": "selfcaps.methods.poe.collapse",
    "selfcaps.methods.poe_evaluation": "selfcaps.methods.poe.evaluation",
    "selfcaps.methods.poe_figures": "selfcaps.methods.poe.figures",
    "selfcaps.methods.poe_geometry": "selfcaps.methods.poe.geometry",
    "selfcaps.methods.poe_judge": "selfcaps.methods.poe.judge",
    "selfcaps.methods.poe_reconstruction": "selfcaps.methods.poe.reconstruction",
    "selfcaps.methods.poe_selectivity": "selfcaps.methods.poe.selectivity",
    "selfcaps.methods.sparsecaps_figures": "selfcaps.methods.sparsecaps.figures",
    "selfcaps.methods.sparsecaps_svm": "selfcaps.methods.sparsecaps.svm",
    "selfcaps.methods.affnist_halves": "selfcaps.methods.sparsecaps.affnist_halves",
    "selfcaps.methods.mcae_figures": "selfcaps.methods.mcae.figures",
}


def new_path(old: str) -> str | None:
    """The module that now holds the code of the old path ``old`` (``None``: it did not move).

    Examples:
        >>> new_path("selfcaps.methods.io")
        'selfcaps.engine.checkpoints'
        >>> new_path("selfcaps.models") is None
        True
    """
    return MOVED.get(old)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the new module itself, after a warning."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} moved to {self.new}; import it from there (the old path goes in the "
            "next release)",
            FutureWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The new module ran when it was imported; the import system has bound the old name
        # to it and set __spec__ to the old path's spec: give the new module its own back.
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and only those)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder of old paths first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
