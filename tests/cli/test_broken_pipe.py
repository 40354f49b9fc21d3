"""A closed stdout (``selfcaps list | head``) ends the command quietly, not as a user error."""

from __future__ import annotations

import importlib
import io
import subprocess
import sys

#: The module (``selfcaps.cli.main`` the attribute is the function it defines).
cli_main = importlib.import_module("selfcaps.cli.main")


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone away: every write raises, as a closed pipe does."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_broken_pipe_in_process_returns_sigpipe_code_and_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    code = cli_main.main(["list"])
    monkeypatch.undo()
    assert code == cli_main.STDOUT_CLOSED == 141
    assert capsys.readouterr().err == ""


def test_reader_gone_before_the_first_line(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "selfcaps", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    proc.stdout.close()  # the reader leaves before anything is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Broken pipe" not in err and b"error" not in err.lower(), err.decode()
