"""The cache of decoded data: tests never touch the user's, runs say where it is, the command."""

import os
from pathlib import Path

import numpy as np

import selfcaps.data.cache as cache
from selfcaps.cli import main
from selfcaps.data.cache import cache_path, cached_arrays


def test_the_test_session_uses_a_temporary_cache():
    """tests/conftest.py sets $SELFCAPS_CACHE for the session, subprocesses included."""
    value = os.environ.get("SELFCAPS_CACHE")
    assert value, "SELFCAPS_CACHE is not set for the tests"
    home_cache = Path.home() / ".cache" / "selfcaps"
    assert not Path(value).resolve().is_relative_to(home_cache.resolve())


def test_a_written_entry_is_reported_then_listed_and_cleared(tmp_path, monkeypatch, capsys):
    directory = tmp_path / "c"
    monkeypatch.setenv("SELFCAPS_CACHE", str(directory))
    monkeypatch.setattr(cache, "_reported", False)
    arrays = {"x": np.zeros((1000, 100), dtype=np.uint8)}  # 100,000 bytes
    cached_arrays("imagefolder", {"k": 1}, lambda: arrays)
    cached_arrays("imagefolder", {"k": 2}, lambda: arrays)
    cached_arrays("imagefolder", {"k": 1}, lambda: arrays)  # read back: nothing to report
    first, second = capsys.readouterr().err.strip().splitlines()
    entry = cache_path("imagefolder", {"k": 1})
    assert first.startswith(f"selfcaps: cached 0.1 MB of decoded data in {entry}")
    assert f"the cache {directory} now holds 0.1 MB" in first
    assert "selfcaps cache --list" in first and "selfcaps cache --clear" in first
    assert second.startswith("selfcaps: cached 0.1 MB") and "--clear" not in second
    (directory / "notes.txt").write_text("not ours")
    assert main(["cache", "--list"]) == 0
    listing = capsys.readouterr().out
    assert f"cache directory: {directory}" in listing and entry.name in listing
    assert "2 files, 0.2 MB in all" in listing and "notes.txt" not in listing
    assert main(["cache", "--clear"]) == 0
    assert "deleted 2 cached files" in capsys.readouterr().out
    assert sorted(p.name for p in directory.iterdir()) == ["notes.txt"]
    assert main(["cache"]) == 0
    assert "0 files, 0.0 MB in all" in capsys.readouterr().out
