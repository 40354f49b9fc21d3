"""metrics.json merges: concurrent writers keep every key, bad files are named."""

import json
import multiprocessing

import pytest

from selfcaps.engine.atomic import update_json

WRITERS = 4
KEYS_EACH = 40


def _write_keys(path: str, writer: int) -> None:
    for k in range(KEYS_EACH):  # one read-modify-write per key: many chances to interleave
        update_json(path, {f"w{writer}_k{k}": k})


def test_concurrent_updates_lose_no_key(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"top1": 50.0}))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_keys, args=(str(path), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    merged = json.loads(path.read_text())
    expected = {f"w{w}_k{k}" for w in range(WRITERS) for k in range(KEYS_EACH)} | {"top1"}
    assert set(merged) == expected
    assert merged["top1"] == 50.0 and merged["w3_k39"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no lock or temp file left


def test_update_creates_the_file_and_returns_the_merge(tmp_path):
    path = tmp_path / "metrics.json"
    assert update_json(path, {"a": 1}) == {"a": 1}
    assert update_json(path, {"b": 2.5}) == {"a": 1, "b": 2.5}
    assert json.loads(path.read_text()) == {"a": 1, "b": 2.5}


def test_update_refuses_a_file_that_is_not_an_object(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"metrics\.json: expected a JSON object, got list"):
        update_json(path, {"a": 1})
    assert path.read_text() == "[1, 2]\n"  # untouched
