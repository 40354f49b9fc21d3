"""The manual builds: ``mkdocs build --strict`` on mkdocs.yml, offline, in a subprocess.

Strict mode turns every warning into a failure: a page missing from the nav, a link to a file
or anchor that does not exist, a docstring mkdocstrings cannot parse. The test skips only when
mkdocs itself is not installed (``pip install -e ".[docs]"`` or ``".[dev]"`` installs it).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Objects whose API entries must appear in the built pages (a misconfigured mkdocstrings
#: handler can build "successfully" and render nothing).
API_OBJECTS = {
    "caps": ("selfcaps.caps.dynamic_routing", "selfcaps.caps.DenseCaps", "selfcaps.caps.squash"),
    "losses": ("selfcaps.losses.NTXentLoss", "selfcaps.losses.SinkhornDivergence"),
    "eval": (
        "selfcaps.eval.knn_predict",
        "selfcaps.eval.finetune.finetune",
        "selfcaps.eval.protocols.run_protocol",
    ),
    "data": ("selfcaps.data.get_dataset", "selfcaps.data.SimCLRTransform"),
    "models": ("selfcaps.models.create_model", "selfcaps.models.weights.read_weights"),
    "methods": ("selfcaps.methods.base.CapsuleMethod", "selfcaps.methods.get_method"),
    "run": ("selfcaps.run.train.train_run", "selfcaps.run.trained.load_run"),
    "config": ("selfcaps.config.loading.load_config", "selfcaps.config.ConfigError"),
}


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason='mkdocs is not installed (pip install -e ".[docs]")',
)
def test_manual_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    for page, objects in API_OBJECTS.items():
        html = (site / "api" / page / "index.html").read_text(encoding="utf-8")
        missing = [name for name in objects if f'id="{name}"' not in html]
        assert not missing, f"api/{page}.md rendered without {missing}"


def test_rst_markup_becomes_markdown() -> None:
    pytest.importorskip("griffe", reason='griffe is not installed (pip install -e ".[docs]")')
    from tools.griffe_rst import rst_to_markdown

    docstring = (
        "Intro with :math:`a_i\n  + b` and :class:`~selfcaps.caps.DenseCaps`.\n"
        "\n"
        "    .. math::\n"
        "        x_j = 1\n"
        "\n"
        "        y = 2\n"
        "\n"
        "    after :func:`selfcaps.data.get_dataset`::\n"
        "\n"
        "        code()"
    )
    expected = (
        "Intro with `a_i + b` and `DenseCaps`.\n"
        "\n"
        "    ```latex\n"
        "    x_j = 1\n"
        "\n"
        "    y = 2\n"
        "    ```\n"
        "\n"
        "    after `selfcaps.data.get_dataset`:\n"
        "\n"
        "        code()"
    )
    assert rst_to_markdown(docstring) == expected
    assert rst_to_markdown("no markup: b_{ij}") == "no markup: b_{ij}"
