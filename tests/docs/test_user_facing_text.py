"""What users read names no project issue, no development machine and no working session.

Issue numbers mean nothing outside the project's tracker, and a path such as ``/work/...``
or ``/tmp/...`` exists only on the machine a page was written on; "this session" is a
developer's diary. The scan covers README.md, the manual (``docs/``), the measurement notes
and ``results/README.md`` for all three, and the code, presets, experiments and benchmarks
for issue numbers (their docstrings and comments are read as documentation too).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from selfcaps.cli.report import doc_files

ROOT = Path(__file__).resolve().parents[2]

ISSUE = re.compile(r"\bissues?\s*#?\s*\d+\b", re.IGNORECASE)
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp)/")
SESSION = re.compile(r"\bthis session\b", re.IGNORECASE)


def _pages() -> list[Path]:
    return [*doc_files(ROOT), ROOT / "results" / "README.md"]


def _code() -> list[Path]:
    files: list[Path] = []
    for folder, patterns in (
        ("src", ("*.py", "*.yaml")),
        ("experiments", ("*.py", "*.sh")),
        ("benchmarks", ("*.py",)),
        ("tools", ("*.py", "*.sh")),
    ):
        for pattern in patterns:
            files += sorted((ROOT / folder).rglob(pattern))
    return files


def _hits(path: Path, pattern: re.Pattern[str]) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()[:120]}"
        for i, line in enumerate(lines, 1)
        if pattern.search(line)
    ]


@pytest.mark.parametrize(
    ("pattern", "files"),
    [
        pytest.param(ISSUE, _pages, id="issue-numbers-in-pages"),
        pytest.param(MACHINE_PATH, _pages, id="machine-paths-in-pages"),
        pytest.param(SESSION, _pages, id="session-diary-in-pages"),
        pytest.param(ISSUE, _code, id="issue-numbers-in-code"),
    ],
)
def test_user_facing_text_is_free_of(pattern, files):
    found = [hit for path in files() for hit in _hits(path, pattern)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("as issue 43 asks", ISSUE),
        ("see Issue #7", ISSUE),
        ("the issues 12", ISSUE),
        ("runs in /work/runs/x", MACHINE_PATH),
        ("wrote /tmp/out.png", MACHINE_PATH),
        ("in this session we", SESSION),
    ],
)
def test_the_patterns_catch_what_they_name(text, pattern):
    assert pattern.search(text)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("https://github.com/owner/repo/issues/2", ISSUE),
        ("an issue with 3 seeds", ISSUE),
        ("DIR/work/x and ./tmp/y", MACHINE_PATH),
        ("the session's cache", SESSION),
    ],
)
def test_the_patterns_spare_ordinary_text(text, pattern):
    assert not pattern.search(text)
