"""The package needs only its declared dependencies; the dev extra is for tests alone."""

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Distribution name -> the module it installs, where they differ.
MODULE_OF = {"scikit-learn": "sklearn", "pillow": "PIL", "pyyaml": "yaml"}


def _declared(names):
    dists = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in names]
    return {MODULE_OF.get(d, d.replace("-", "_")) for d in dists}


def _imported_by_src():
    mods = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods - set(sys.stdlib_module_names) - {"selfcaps"}


def test_src_imports_only_declared_dependencies_and_no_dev_tool():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _declared(project["dependencies"])
    imported = _imported_by_src()
    assert imported <= runtime, f"imported but not declared: {sorted(imported - runtime)}"
    dev = _declared(project["optional-dependencies"]["dev"]) - runtime
    assert {"pytest", "hypothesis", "ruff"} <= dev
    assert not imported & dev, f"the package imports dev tools: {sorted(imported & dev)}"
