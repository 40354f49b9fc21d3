"""The import graph of ``src/selfcaps`` follows the layers of DESIGN.md and has no cycle.

Every ``import`` / ``from ... import`` of a selfcaps module is read from the source
(``ast``, no module is imported), wherever it stands: at the top, inside a function,
or under ``TYPE_CHECKING``. The layers, each importing only from itself and the
ones before it::

    caps -> models -> losses -> data -> engine -> eval -> viz -> methods -> run -> results -> cli

Below every layer, in their own order, the torch-free foundation: ``selfcaps._names`` ->
``selfcaps._version`` -> ``selfcaps.records`` -> ``selfcaps.config`` (the command line lists
the methods and loads and checks a configuration without torch), and ``selfcaps.configs``
(YAML presets). The package itself (``selfcaps``: ``__version__`` and lazy shortcuts such as
``selfcaps.load_run``), the finder of moved module paths (``selfcaps._moved``) and
``selfcaps.__main__`` stand outside: no layer imports them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = (
    "caps",
    "models",
    "losses",
    "data",
    "engine",
    "eval",
    "viz",
    "methods",
    "run",
    "results",
    "cli",
)
#: Packages (and modules) below every layer, in their order: they import no layer.
FOUNDATION = ("_names", "_version", "records", "config", "configs")
#: The package's own ``__init__`` and ``__main__``, and the finder of moved paths: entry
#: points, may import any layer.
ENTRY = ("selfcaps", "selfcaps.__main__", "selfcaps._moved")
#: Third-party packages a foundation module must not import.
HEAVY = ("torch", "lightning", "torchvision", "timm", "numpy")


@dataclass(frozen=True)
class Import:
    """One import statement: who imports what, where."""

    source: str
    target: str
    line: int


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package ``__init__``)."""
    out = {}
    for path in sorted((SRC / "selfcaps").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The innermost module of ``selfcaps`` that ``name`` is or lies in."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str) -> tuple[list[Import], set[str]]:
    """The selfcaps modules ``module`` imports, and the top-level third-party names."""
    path, is_pkg = MODULES[module]
    found, external = [], set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                package = module if is_pkg else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            names = [f"{base}.{a.name}" for a in node.names] if base.startswith("selfcaps") else []
            if not base.startswith("selfcaps"):
                names = [base]
        for name in names:
            if name == "selfcaps" or name.startswith("selfcaps."):
                target = _resolve(name)
                if target != module:
                    found.append(Import(module, target, node.lineno))
            else:
                external.add(name.split(".")[0])
    return found, external


IMPORTS = {m: _imports(m) for m in MODULES}


def _group(module: str) -> str:
    """The layer or foundation package of a module (``entry`` for the entry points)."""
    if module in ENTRY:
        return "entry"
    top = module.split(".")[1]
    if top in LAYERS or top in FOUNDATION:
        return top
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS or FOUNDATION")


def _rank(group: str) -> int:
    """Position in the order foundation (its own order) then layers."""
    if group in FOUNDATION:
        return FOUNDATION.index(group)
    return len(FOUNDATION) + LAYERS.index(group)


def _allowed(source: str, target: str) -> bool:
    src, dst = _group(source), _group(target)
    if src == "entry":  # the package's shortcuts; no layer imports the package itself
        return True
    if dst == "entry":
        return False
    return _rank(dst) <= _rank(src)


def test_every_module_is_in_a_layer():
    for module in MODULES:
        _group(module)


def test_no_import_runs_up_the_layers():
    bad = [
        f"{MODULES[i.source][0].relative_to(SRC)}:{i.line}: {i.source} ({_group(i.source)}) "
        f"imports {i.target} ({_group(i.target)})"
        for found, _ in IMPORTS.values()
        for i in found
        if not _allowed(i.source, i.target)
    ]
    assert bad == [], "imports against the layer order:\n" + "\n".join(bad)


def test_foundation_modules_import_no_torch():
    bad = {
        m: sorted(ext & set(HEAVY))
        for m, (_, ext) in IMPORTS.items()
        if _group(m) in FOUNDATION and ext & set(HEAVY)
    }
    assert bad == {}


def _cycles() -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    graph = {m: sorted({i.target for i in found}) for m, (found, _) in IMPORTS.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(tuple(sorted(component)))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_at_all():
    assert _cycles() == []


def test_the_walker_sees_a_planted_upward_import_and_cycle(monkeypatch):
    """The checks are not vacuous: an upward import and a two-module cycle are reported."""
    up = Import("selfcaps.caps.functional", "selfcaps.cli.main", 1)
    assert not _allowed(up.source, up.target)
    assert not _allowed("selfcaps.config.checks.shared", "selfcaps.caps.functional")
    assert not _allowed("selfcaps.records.sparsecaps", "selfcaps.config.checks.sparsecaps")
    assert not _allowed("selfcaps.eval.protocols", "selfcaps.methods.base")
    planted = dict(IMPORTS)
    planted["selfcaps.caps.layers"] = (
        [Import("selfcaps.caps.layers", "selfcaps.caps.routing", 1)],
        set(),
    )
    planted["selfcaps.caps.routing"] = (
        [Import("selfcaps.caps.routing", "selfcaps.caps.layers", 1)],
        set(),
    )
    monkeypatch.setattr(f"{__name__}.IMPORTS", planted)
    assert ("selfcaps.caps.layers", "selfcaps.caps.routing") in _cycles()
