"""A method file holds how a method learns; objectives, protocols and figures live elsewhere."""

from pathlib import Path

METHODS = Path(__file__).resolve().parents[2] / "src" / "selfcaps" / "methods"
#: Longest a file of ``selfcaps.methods`` may be, in lines.
MAX_LINES = 450


def test_no_method_file_is_longer_than_450_lines():
    long = {
        p.name: n
        for p in sorted(METHODS.glob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these files along what they hold: {long}"
