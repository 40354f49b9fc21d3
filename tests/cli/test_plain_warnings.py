"""selfcaps' warnings reach the console as one plain line each, once."""

import warnings

import pytest

from selfcaps.cli import plain_warnings


@pytest.fixture
def before(monkeypatch):
    """Install over a stand-in for Python's printer; returns what that printer was given."""
    given = []
    monkeypatch.setattr(warnings, "showwarning", lambda *a, **k: given.append(str(a[0])))
    monkeypatch.setattr(plain_warnings, "_recording", lambda: False)  # pytest records them
    plain_warnings.install()
    return given


def test_our_warning_is_one_plain_line_once(before, capsys):
    ours = str(plain_warnings._PACKAGE / "data" / "affnist.py")
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as when two call sites raise the same text
        for lineno in (10, 20, 10):
            warnings.warn_explicit("affNIST files not found", UserWarning, ours, lineno)
        warnings.warn_explicit("another", UserWarning, ours, 30)
    err = capsys.readouterr().err
    assert err == "selfcaps: warning: affNIST files not found\nselfcaps: warning: another\n"
    assert before == []


def test_other_packages_keep_pythons_format(before, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn_explicit("deprecated thing", DeprecationWarning, "/elsewhere/pkg.py", 7)
    assert before == ["deprecated thing"] and capsys.readouterr().err == ""


def test_a_recorder_still_gets_them_and_the_command_restores_pythons_printer():
    ours = str(plain_warnings._PACKAGE / "data" / "affnist.py")
    python_printer = warnings.showwarning
    with plain_warnings.installed(), pytest.warns(UserWarning, match="affNIST files not found"):
        warnings.warn_explicit("affNIST files not found", UserWarning, ours, 10)
    assert warnings.showwarning is python_printer
