"""A griffe extension that turns the reStructuredText markup of our docstrings into Markdown.

The docstrings are Google style, with Sphinx roles (``:math:`x```, ``:func:`name```) and
``.. math::`` blocks that Sphinx users and ``help()`` readers already know. MkDocs renders
Markdown, where ``_`` and ``*`` inside an equation become emphasis. This extension rewrites
them before mkdocstrings parses the docstring, so the docstrings stay as they are:

- ``.. math::`` blocks become fenced ``latex`` code blocks;
- ``:math:`x``` becomes inline code ``x`` (whitespace collapsed when it spans lines);
- ``:func:`a.b```, ``:class:`~a.b``` and the other Python roles become inline code of the name
  (the last component when the target starts with ``~``);
- a paragraph ending in ``text::`` (a literal block follows, indented: Markdown's code block)
  ends in ``text:``, as Sphinx shows it.

Loaded by mkdocs.yml (``extensions: [tools/griffe_rst.py:RstMarkup]``); nothing imports it at
run time.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_MATH_DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*$")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_LITERAL_MARKER = re.compile(r"^(?!\s*\.\. )(.*\S)::$", re.MULTILINE)
_PY_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|obj|exc|const):`(~?)!?([^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _math_blocks(text: str) -> str:
    """Replace every ``.. math::`` block by a fenced ``latex`` block at the same indentation."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _MATH_DIRECTIVE.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        pad = match.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(pad)):
            body.append(lines[i])
            i += 1
        trailing = 0
        while body and not body[-1].strip():
            body.pop()
            trailing += 1
        equation = textwrap.dedent("\n".join(body)).strip("\n").split("\n")
        out += [f"{pad}```latex", *(f"{pad}{line}".rstrip() for line in equation), f"{pad}```"]
        out += [""] * trailing
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """Return ``text`` with its reStructuredText math and Python roles in Markdown.

    Args:
        text: a docstring (already dedented, as griffe stores it).

    Returns:
        The docstring with ``.. math::`` blocks fenced, ``:math:`` as inline code, Python
        roles as inline code of their target and ``text::`` as ``text:``.

    Examples:
        >>> rst_to_markdown("See :func:`~selfcaps.data.get_dataset` and :math:`b_{ij} = 0`.")
        'See `get_dataset` and `b_{ij} = 0`.'
    """
    text = _LITERAL_MARKER.sub(r"\1:", _math_blocks(text))
    text = _MATH_ROLE.sub(lambda m: "`" + " ".join(m.group(1).split()) + "`", text)

    def role(m: re.Match[str]) -> str:
        target = m.group(2).strip()
        return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"

    return _PY_ROLE.sub(role, text)


class RstMarkup(griffe.Extension):
    """Rewrite each docstring's reStructuredText markup as Markdown when griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Convert ``obj``'s docstring in place (before mkdocstrings parses it)."""
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
