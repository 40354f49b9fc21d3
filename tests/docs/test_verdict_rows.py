"""Every verdict and every paired difference the pages state names the registry row it comes from.

A verdict word (*holds*, *reversed*, *not resolved*, *equivalent*) or a paired difference with
its interval (``+6.37 [-0.57, +13.30]``) in README.md, the manual (``docs/``) or the
measurement notes (``results/notes/``) must name its row of ``results/registry.yaml`` in the
same sentence (a table row, list item or heading counts as one): a row id in backticks
(`` `poe.target-075-vs-010.judge20.purity-mean-restricted` ``), or an inline value that
``selfcaps report`` fills from the row (``<!-- value:ROW:FIELD -->``). Then the sentence must
say no more than its rows do:

- a verdict word must be the verdict of one of the rows it names (computed from the per-seed
  values, as the generated tables compute it); a row with fewer than 3 seeds has none, so a
  *holds* or *reversed* on a one-seed row fails;
- a sentence that gives a verdict on a row marked ``stale`` must say "stale";
- each difference with interval must be the difference and 95% interval of a row it names (to
  the two decimals the pages print): an interval kept without per-seed values has no row and
  fails;
- each interval written as one ("95% interval [-2.96, +4.61]") must be a named row's;
- a row with fewer than 3 seeds may not carry a word that orders its arms ("ahead", "better",
  "costs", "worth 7.3 points", ...), and neither may a bold finding (``**...**``) that rests on
  one seed ("on seed 0", "one seed"), unless the sentence says "no verdict" or "too few seeds".

Pages this change did not own, and that still break the rule, are listed in :data:`PENDING`
with their count of failing sentences; the count must match exactly, so it can only go down.

Generated tables (between ``<!-- registry:NAME -->`` markers) are left out: ``selfcaps report``
writes them from the rows. Code is not scanned. Verdict words used as terms are not verdicts:
in italics (``*holds*``), in a rule ("holds if", "is reversed when") or a question ("whether
... holds"). A line carrying ``<!-- verdict-ok -->`` is exempt (quoted paper text).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import pytest

from selfcaps.results.registry import Row, load_registry
from tests.docs.test_verdict_words import _NEG, _NUM, DIRECTION_WORDS, _number, pages, sentences

ROOT = Path(__file__).resolve().parents[2]

#: Pages not owned by the change that added this test, with the number of sentences on them
#: that fail it; each count must fall to 0 (and the entry go) when the page is next edited.
PENDING: dict[str, int] = {}

_OBJECT = (
    r"(?:the|a|an|its|their|one|two|three|every|all|each|both|no|only|what|which|this|these|"
    r"those|them|it|up|per|anything|nothing|within|out|back|true|more|less|fewer)\b|\d|[:`\u27e8]"
)
#: A verdict word in use. "holds" followed by an object ("holds the seeds", "holds 10%") or a
#: colon ("`metrics.json` holds:") is the ordinary verb; "equivalent" before a noun or "to" is
#: the ordinary adjective.
VERDICT = re.compile(
    r"(?<![\w*-])(not resolved|reversed|"
    r"equivalent(?=\s*(?:$|[,.;:)|*]|(?:at|within|under|on|over)\b))|"
    rf"holds(?!\s*(?:{_OBJECT})))(?![\w-])",
    re.IGNORECASE,
)
#: Verdict words named rather than used: in italics, in a rule, in a question.
_TERM = re.compile(r"(?<!\*)\*(?:holds|reversed|equivalent|not resolved[^*]*)\*(?!\*)", re.I)
_RULE = re.compile(
    r"\b(?:holds|reversed|resolved|equivalent)\b[^.;:]{0,25}?\b(?:only\s+)?(?:if|when|unless)\b"
    r"|\bwhether\b",
    re.I,
)
#: A paired difference with its interval: ``+6.37 [-0.57, +13.30]`` (``%`` or "points" allowed).
DIFF = re.compile(
    rf"(?<![\w.])({_NUM})\s*%?\s*(?:points?\s*)?\[\s*({_NUM})\s*%?\s*,\s*({_NUM})\s*%?\s*\]"
)
#: An interval named as one without its difference in front: "95% interval [-2.96, +4.61]".
BARE = re.compile(rf"\binterval\s*\[\s*({_NUM})\s*%?\s*,\s*({_NUM})\s*%?\s*\]", re.I)
_ONE_SEED = re.compile(r"\b(?:on|at|for) seed \d+\b|\bone seed\b|\bsingle seed\b", re.I)
#: Words that order two arms (the verdict words aside: those are checked against the rows).
_ORDER = re.compile(
    _NEG
    + r"\b("
    + "|".join(w for w in DIRECTION_WORDS if w not in ("holds", "reversed"))
    + r"|higher|lower|worth \d[\d.]*)\b",
    re.IGNORECASE,
)
#: What a sentence about a one-seed comparison says instead of an order.
_NO_VERDICT = re.compile(r"no verdict|too few (?:seeds|independent units)", re.IGNORECASE)
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_GENERATED = re.compile(r"<!-- registry:([\w.-]+) -->.*?<!-- /registry:\1 -->", re.S)
_VALUE = re.compile(r"<!-- value:([\w.-]+):\w+ -->")
_CODE = re.compile(r"`([^`\n]*)`")
_NAMED = re.compile(r"\u27e6([\w.-]+)\u27e7")  # a row id, kept through the code stripping


@functools.cache
def registry() -> dict[str, Row]:
    """The registry's rows by id."""
    return {r.id: r for r in load_registry(ROOT / "results" / "registry.yaml")}


def _name_rows(text: str, rows: dict[str, Row]) -> str:
    """``text`` with generated tables blanked and each row reference turned into ``⟦id⟧``.

    Inline values and backticked row ids become ``⟦id⟧`` so that they survive the scanner's
    removal of code spans and comments; any other code span becomes ``⟨⟩`` (its words are not
    prose, but "holds `c` fixed" still reads as the verb); generated tables become blank lines
    (line numbers kept).
    """
    text = _GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = _VALUE.sub(lambda m: f"\u27e6{m.group(1)}\u27e7", text)

    def spans(line: str) -> str:
        if line.lstrip().startswith(("```", "~~~")):  # a fence, left for the scanner to see
            return line
        return _CODE.sub(
            lambda m: f"\u27e6{m.group(1)}\u27e7" if m.group(1) in rows else "\u27e8\u27e9", line
        )

    return "\n".join(spans(line) for line in text.split("\n"))


def _verdict(row: Row) -> str | None:
    paired = row.paired
    return None if paired is None else paired.verdict


def _matches(found: tuple[str, ...], row: Row) -> bool:
    """Whether ``(difference, low, high)`` or ``(low, high)`` are ``row``'s, to two decimals."""
    paired = row.paired
    if paired is None or math.isnan(paired.diff_low):
        return False
    values = (paired.diff_mean, paired.diff_low, paired.diff_high)[-len(found) :]
    return all(abs(_number(text) - value) <= 0.0051 for text, value in zip(found, values))


def _units(row: Row) -> int:
    """Independent units behind a row: its ``units`` where the registry has them, else seeds."""
    return getattr(row, "units", None) or len(row.seeds)


def _orders(text: str) -> bool:
    return bool(_ORDER.search(text)) and not _NO_VERDICT.search(text)


def problems(sentence: str, rows: dict[str, Row]) -> list[str]:
    """What is wrong with one sentence (already passed through :func:`_name_rows`)."""
    named = [rows[i] for i in _NAMED.findall(sentence) if i in rows]
    plain = _NAMED.sub(" ", sentence)
    used = "" if _RULE.search(plain) else _TERM.sub(" ", plain)
    words = [w.lower() for w in VERDICT.findall(used)]
    diffs = DIFF.findall(plain) + BARE.findall(plain)
    found: list[str] = []
    if (words or diffs) and not named:
        found.append(f"{'verdict ' + repr(words[0]) if words else 'interval'} names no row")
    if named:
        verdicts = [v for v in map(_verdict, named) if v]
        for word in dict.fromkeys(words):
            if not any(v.startswith(word) for v in verdicts):
                found.append(f"{word!r} is not the verdict of {[r.id for r in named]}: {verdicts}")
        stale = [r.id for r in named if r.stale]
        if words and stale and "stale" not in plain.lower():
            found.append(f"verdict on stale row(s) {stale} without saying stale")
        for diff in diffs:
            if not any(_matches(diff, r) for r in named):
                found.append(f"{' '.join(diff)} is no named row's interval")
        few = [r.id for r in named if r.kind == "paired" and _units(r) < 3]
        if few and _orders(plain):
            found.append(f"orders the arms of {few}, which have fewer than 3 seeds")
    for bold in _BOLD.findall(plain):
        if _ONE_SEED.search(bold) and _orders(bold):
            found.append(f"bold finding on one seed: {bold[:80]!r}")
    return found


def violations(text: str, rows: dict[str, Row] | None = None) -> list[tuple[int, str, str]]:
    """``(line, problem, sentence)`` for every sentence of a page that breaks the rule."""
    rows = registry() if rows is None else rows
    out = []
    for no, sentence, exempt in sentences(_name_rows(text, rows)):
        if not exempt:
            out += [(no, p, sentence) for p in problems(sentence, rows)]
    return out


@pytest.mark.parametrize("page", pages())
def test_every_verdict_names_its_row(page: str) -> None:
    bad = violations((ROOT / page).read_text(encoding="utf-8"))
    report = "\n".join(f"{page}:{no}: {p}: {s[:160]}" for no, p, s in bad)
    assert len({(no, s) for no, _, s in bad}) == PENDING.get(page, 0), report


def test_pending_pages_exist():
    assert set(PENDING) <= set(pages())


# ------------------------------------------------------------------ the rule itself, on examples
def _row(row_id: str, treatment, control, stale=None) -> Row:
    return Row(
        id=row_id, kind="paired", tables=(), method="m", what="w", rung="r", budget="b",
        dataset="d", metric="k", seeds=tuple(range(len(treatment))), config_hash="0",
        command="c", commit="0", date="2026-01-01", cores=2, threads=1, stale=stale,
        arms=(_arm(treatment), _arm(control)),
    )  # fmt: skip


def _arm(values):
    from selfcaps.results.registry import Arm

    return Arm(label="a", preset="p", overrides=(), values=tuple(values))


#: Hand-checked rows: ``a.up`` differs by +1, +2, +3 (mean +2.00, sd 1, t(0.975, 2) = 4.3027:
#: interval +2 -+ 2.48 = [-0.48, +4.48], not resolved); ``a.big`` by +10, +11, +12 ([+7.52,
#: +13.48], holds); ``a.one`` has one seed; ``a.old`` is ``a.big`` marked stale.
ROWS = {
    "a.up": _row("a.up", [11.0, 12.0, 13.0], [10.0, 10.0, 10.0]),
    "a.big": _row("a.big", [20.0, 21.0, 22.0], [10.0, 10.0, 10.0]),
    "a.one": _row("a.one", [58.67], [51.37]),
    "a.old": _row("a.old", [20.0, 21.0, 22.0], [10.0, 10.0, 10.0], stale="preset changed"),
}


def test_hand_checked_rows():
    assert ROWS["a.up"].paired.verdict.startswith("not resolved")
    assert round(ROWS["a.up"].paired.diff_low, 2) == -0.48
    assert ROWS["a.big"].paired.verdict == "holds"
    assert round(ROWS["a.big"].paired.diff_high, 2) == 13.48


@pytest.mark.parametrize(
    "text",
    [
        # a verdict, or an interval, naming no row
        "With three seeds the comparison holds at 200 steps.",
        "Crops of 20%: -0.61 [-1.80, +0.57], not resolved.",
        "- **Centred codes.** Without them the purity falls, +41.35 [+36.14, +46.56].",
        "| arm | +2.00 [-0.48, +4.48] | not resolved |",
        # a verdict the named row does not have
        "The unit helps, +2.00 [-0.48, +4.48], holds (`a.up`).",
        "The big change is reversed (`a.big`).",
        # a verdict on a one-seed row
        "On seed 0 the loop is ahead: holds (`a.one`).",
        # an ordering word on a one-seed row, with or without a verdict word
        "selfcaps is ahead of the reference-style loop at equal minutes (`a.one`).",
        # a bold finding resting on one seed
        "- **Batch 64 instead of 256 is worth 7.3 points in the hour on seed 0** (58.67 here).",
        "- **selfcaps is ahead of the loop at equal minutes, on seed 0** (the loop ran one seed).",
        # a verdict on a stale row that does not say so
        "selfcaps against the untrained network holds (`a.old`).",
        # an interval that is not the named row's (kept without its per-seed values)
        "Temperature 0.5 gave -1.68 [-2.68, -0.68] on the test split (`a.big`).",
        "It reads +11.00 [+8.52, +13.48] and +3.00 [+1.00, +5.00] (`a.big`).",
        "Three seeds, mean +0.82, 95% interval [-2.96, +4.61]: not resolved.",
        "Mean +2.00, interval [-1.00, +5.00] (`a.up`).",
        # an inline value names its row, and the verdict must still be that row's
        "It holds, <!-- value:a.up:result -->+2.00 [-0.48, +4.48]<!-- /value -->.",
    ],
)
def test_the_rule_catches(text):
    assert violations(text, ROWS), text


@pytest.mark.parametrize(
    "text",
    [
        # named rows, their own verdicts and intervals
        "The claim holds, +11.00 [+8.52, +13.48] (`a.big`).",
        "Not resolved at three seeds (`a.up`): +2.00 [-0.48, +4.48].",
        "Mean +2.00, 95% interval [-0.48, +4.48], not resolved (`a.up`).",
        "The change reads <!-- value:a.big:result -->+11.00 [+8.52, +13.48], holds<!-- /value -->.",
        "| big | +11.00 [+8.52, +13.48] | holds | `a.big` |",
        "a +11.00 [+8.52, +13.48], holds (`a.big`); b +2.00 [-0.48, +4.48], not resolved (`a.up`).",
        # a one-seed row stated as what it is
        "One seed, no verdict (`a.one`: not resolved, too few seeds): 58.67 against 51.37.",
        "- **Against the loop at equal minutes: one seed, no verdict** (`a.one`).",
        # a stale row said to be stale
        "When measured, the network held; the row is stale (`a.old`).",
        "selfcaps against the untrained network holds on a stale row (`a.old`).",
        # verdict words as terms, in a rule, in a question, and the ordinary verb
        "Verdicts: *holds* or *reversed* when the interval is on one side of 0, or *not resolved*.",
        "- **holds** if the whole interval lies on the side the paper predicts.",
        "A claim holds only if each of its comparisons holds, and is reversed if any is.",
        "- **equivalent within ±m** only if the interval lies inside (-m, m), else not resolved.",
        "Whether the claim holds on your hardware is what the suite measures.",
        "The registry holds 267 paired comparisons; the file holds the seeds.",
        "`val` holds 10% of every class.",
        "As Algorithm 1 holds `c` fixed, the step is a gradient.",
        "Our layer is equivalent to the reference's; the equivalent command is below.",
        # intervals that are not paired differences, and code
        "Costs are rescaled to [-5, 5] and angles drawn from [-degrees, degrees].",
        "Run `selfcaps report`, read `holds [-1, 2]` in its output, and [0.1, 0.2] here.",
        "Quoted: the paper's ablation holds <!-- verdict-ok -->",
        # fenced code is not prose
        "```bash\nselfcaps run poe  # holds +1.00 [-3.00, +5.00]\n```",
        # generated tables are the registry's own
        "<!-- registry:x -->\n| a | +1.00 [-3.00, +5.00] | holds |\n<!-- /registry:x -->",
    ],
)
def test_the_rule_spares(text):
    assert not violations(text, ROWS), violations(text, ROWS)
