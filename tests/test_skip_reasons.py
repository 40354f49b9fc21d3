"""Skip reasons name paths relative to the repository, as a reader of any checkout sees them."""

from __future__ import annotations

import pytest

from tests.data import test_shared_data
from tests.repo_paths import REPO, from_repo
from tests.test_encapnet_table3 import test_every_quote_is_the_papers_text


def test_paths_are_named_from_the_repository_root():
    assert from_repo(REPO / "tests" / "conftest.py") == "tests/conftest.py"
    assert from_repo(REPO.parent / "shared" / "papers" / "003.txt") == "../shared/papers/003.txt"
    assert from_repo(REPO / ".." / "shared" / "data") == "../shared/data"


def test_the_papers_skip_reason():
    (mark,) = [m for m in test_every_quote_is_the_papers_text.pytestmark if m.name == "skipif"]
    expected = "the paper's text is not at ../shared/papers/003_d7e0021b52167ec4.txt"
    assert mark.kwargs["reason"] == expected


def test_the_shared_data_skip_reason(monkeypatch):
    monkeypatch.setattr(test_shared_data, "DATA", REPO.parent / "shared" / "no-such-data")
    with pytest.raises(pytest.skip.Exception) as skip:
        test_shared_data._need("MNIST", "raw")
    assert str(skip.value) == "real data not available: ../shared/no-such-data/MNIST/raw is missing"
