"""docs/library.md runs as written: its code blocks, in order, in an empty directory.

```python blocks are executed in one namespace; each line of a ```bash block is a
``selfcaps`` command, run in-process (``selfcaps.cli.main``) and required to succeed.
The ``print(...)  # value`` comments of the page are checked against what is printed.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import torch

from selfcaps.cli import main

PAGE = Path(__file__).resolve().parents[1] / "docs" / "library.md"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(text: str) -> list[tuple[str, str, int]]:
    """``(language, code, line)`` of the fenced blocks of a Markdown page, in order."""
    return [
        (m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2) for m in _FENCE.finditer(text)
    ]


def _printed_comments(code: str) -> list[str]:
    """The ``# expected`` comments after ``print(...)`` lines, without any ``...`` elision."""
    return [
        line.split("  # ", 1)[1]
        for line in code.splitlines()
        if line.lstrip().startswith("print(") and "  # " in line and "..." not in line
    ]


def test_library_page_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SELFCAPS_OUT", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    namespace: dict = {"__name__": "docs_library"}
    ran = {"python": 0, "bash": 0}
    try:
        for language, code, line in blocks(PAGE.read_text()):
            if language == "bash":
                for command in filter(None, (c.strip() for c in code.splitlines())):
                    argv = shlex.split(command)
                    assert argv[0] == "selfcaps", f"line {line}: not a selfcaps command"
                    assert main(argv[1:]) == 0, f"docs/library.md:{line}: {command}"
            elif language == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(code, f"docs/library.md:{line}", "exec"), namespace)
                printed = out.getvalue()
                for expected in _printed_comments(code):
                    assert expected in printed, f"docs/library.md:{line}: {expected!r} not printed"
            else:
                continue
            ran[language] += 1
    finally:
        torch.set_num_threads(threads)
    assert ran["python"] >= 4 and ran["bash"] >= 2


def test_blocks_are_found_with_their_lines():
    text = "intro\n```python\nx = 1\n```\ntext\n```bash\nselfcaps list\n```\n"
    assert blocks(text) == [("python", "x = 1\n", 3), ("bash", "selfcaps list\n", 7)]
