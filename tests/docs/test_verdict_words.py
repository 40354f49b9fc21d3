"""Docs never word an interval that contains 0 as an ordering.

A 95% interval written ``[a, b]`` (signed numbers, optional ``%``) with ``a < 0 < b`` means the
data do not order the two arms: the only verdict is *not resolved*. This test scans README.md,
every ``docs/**/*.md`` page and the measurement notes (``results/notes/*.md``), and fails on any
sentence (a table row, heading or list item counts as one; clauses joined by ";" are judged
apart) that holds such an interval and a word claiming an
ordering ("ahead", "better", "costs", "holds", "reversed", ...). Code (fenced blocks and inline
spans) is not scanned. A line carrying the marker ``<!-- verdict-ok -->`` is exempt (for quoted
paper text), and so is a table column headed ``claim`` (the paper's claim under test). Negated
words ("not better", "no better") and "costs nothing" / "leads to" are not claims of an ordering.

"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from selfcaps.cli.report import doc_files

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- verdict-ok -->"

_NUM = r"[+\-\u2212]?\d[\d,]*(?:\.\d+)?"
INTERVAL = re.compile(rf"\[\s*({_NUM})\s*%?\s*,\s*({_NUM})\s*%?\s*\]")
_NEG = r"(?<!\bnot )(?<!\bno )(?<!\bnor )(?<!\bnever )"
#: Words that claim one arm is above or below the other.
DIRECTION_WORDS = [
    r"ahead",
    r"behind",
    r"beats?",
    r"better",
    r"worse",
    r"learns? more",
    r"gains?",
    r"costs(?! nothing)",
    r"cost(?= (?:\d|accuracy|points?\b))",  # the verb; "ground cost", "cost centred" are nouns
    r"helps?",
    r"hurts?",
    r"improves?",
    r"wins?",
    r"loses",
    r"lose",
    r"outperforms?",
    r"leads?(?! to\b)",
    r"trails?",
    r"holds",
    r"reversed",
]
DIRECTION = re.compile(_NEG + r"\b(" + "|".join(DIRECTION_WORDS) + r")\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*_\[])")
_BLOCK_START = re.compile(r"^\s*(?:#+\s|[-*+]\s|\d+[.)]\s|\|)")


def _number(text: str) -> float:
    return float(text.replace("\u2212", "-").replace(",", ""))


def crossing_intervals(sentence: str) -> list[str]:
    """The ``[a, b]`` intervals of a sentence with ``a < 0 < b``."""
    return [
        m.group(0)
        for m in INTERVAL.finditer(sentence)
        if _number(m.group(1)) < 0 < _number(m.group(2))
    ]


def _strip_code(line: str) -> str:
    line = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
    return re.sub(r"<!--.*?-->", "", line)


def _blank_claim_columns(lines: list[str]) -> list[str]:
    """Table cells under a header ``claim`` blanked: they state the paper's claim, not ours."""
    out, claim_cols = list(lines), set()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            claim_cols = set()
            continue
        cells = line.strip().strip("|").split("|")
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", nxt):  # the header row
            claim_cols = {j for j, c in enumerate(cells) if c.strip().lower() == "claim"}
        elif claim_cols:
            cells = [" " * len(c) if j in claim_cols else c for j, c in enumerate(cells)]
            out[i] = "|" + "|".join(cells) + "|"
    return out


def sentences(text: str) -> list[tuple[int, str, bool]]:
    """``(line number, sentence, exempt)`` of a Markdown page, code left out.

    Table rows, headings and list items start their own unit; other lines join their paragraph,
    which is split after ``.``, ``!`` or ``?`` followed by a capital or a bracket. ``exempt``:
    one of the sentence's lines carries :data:`MARKER`.
    """
    units: list[list[tuple[int, str]]] = []
    fenced = False
    for no, raw in enumerate(_blank_claim_columns(text.splitlines()), 1):
        if raw.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            units.append([])
            continue
        if fenced or not raw.strip():
            units.append([])
            continue
        line = raw.lstrip("> ") if raw.lstrip().startswith(">") else raw
        if _BLOCK_START.match(line) or not units or line.lstrip().startswith("|"):
            units.append([])
        units[-1].append((no, line))
        if line.lstrip().startswith(("|", "#")):
            units.append([])
    out = []
    for unit in units:
        if not unit:
            continue
        joined, starts = "", []  # starts: (offset in joined, line number, carries MARKER)
        for no, line in unit:
            starts.append((len(joined), no, MARKER in line))
            joined += _strip_code(line).strip() + " "
        ends = [s for s, _, _ in starts[1:]] + [len(joined)]
        pos = 0
        for part in _SENTENCE_END.split(joined):
            begin = joined.index(part, pos)
            pos = end = begin + len(part)
            lines = [
                (n, m)
                for (s, n, m), e in zip(starts, ends)
                if s < max(end, begin + 1) and e > begin
            ]
            out.append((lines[0][0], part.strip(), any(m for _, m in lines)))
    return out


def violations(text: str) -> list[tuple[int, str]]:
    """``(line, sentence)`` where an interval containing 0 meets a direction word."""
    found = []
    for no, sentence, exempt in sentences(text):
        # clauses joined by ";" each carry their own comparison ("a [..], reversed; b [..], not
        # resolved"); a table row is one clause
        clauses = [sentence] if sentence.startswith("|") else sentence.split(";")
        if not exempt and any(crossing_intervals(c) and DIRECTION.search(c) for c in clauses):
            found.append((no, sentence))
    return found


def pages() -> list[str]:
    """The files `selfcaps report` fills (README.md, docs/, results/notes/), as repository paths."""
    return [p.relative_to(ROOT).as_posix() for p in doc_files(ROOT)]


@pytest.mark.parametrize("page", pages())
def test_no_ordering_words_on_unresolved_intervals(page: str) -> None:
    bad = violations((ROOT / page).read_text(encoding="utf-8"))
    words = [
        f"{page}:{no}: {DIRECTION.search(s).group(0)!r} with {crossing_intervals(s)}: {s[:160]}"
        for no, s in bad
    ]
    assert not bad, "\n".join(words)


# ------------------------------------------------------------------ the scanner itself
def test_scanner_flags_ordering_words_on_intervals_containing_zero():
    text = (
        "Master/aide is ahead of master, +2.44 [-2.12, +6.99], on every seed.\n"
        "\n"
        "| arm | diff | verdict |\n"
        "|---|---|---|\n"
        "| on | -1.2 [-3.0%, +0.6%] | reversed |\n"
        "| off | +0.3 [-4.06, +4.66] | not resolved |\n"
        "\n"
        "The unit costs 10.67 points, -10.67 [-12.84, -8.50]. It wins\n"
        "by +1.0 [\u22120.5, 2.5] here. It costs nothing measurable, +0.30 [-4.06, +4.66].\n"
        "It is not better: +0.1 [-1.0, 1.2].\n"
        "Quoted: the paper's unit helps [-1, 2] <!-- verdict-ok -->\n"
        "\n"
        "```\n"
        "better [-1, 1]\n"
        "```\n"
        "- EM costs are rescaled to `[-5, 5]`, which helps.\n"
        "\n"
        "| method | claim | difference | verdict |\n"
        "|---|---|---|---|\n"
        "| MCAE | pretraining improves the classifier | -4.68 [-10.68, 1.31] | not resolved |\n"
        "| X | it helps | +1.0 [-1.0, 3.0] | holds |\n"
        "\n"
        "The summed cost is rescaled to [-5, 5]; the ground cost [-1, 1] is cosine.\n"
    )
    found = violations(text)
    assert [no for no, _ in found] == [1, 5, 8, 21]
    assert found[2][1].startswith("It wins by +1.0")


def test_interval_reading():
    assert crossing_intervals("a [-1.5%, +2%] b [1, 2] c [-3, -1] d [-0.2, 0.0]") == [
        "[-1.5%, +2%]"
    ]
    assert crossing_intervals("units [[2, 1, -1], [3, 0, 2]]") == []
