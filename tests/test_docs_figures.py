"""experiments/docs_figures.py: figures for the manual are small and say where they came from."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
import pytest
from experiments import docs_figures
from PIL import Image

from tests.scripts import fake_run


def _noise_png(path: Path, width: int, height: int) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(height, width, 4), dtype=np.uint8)
    pixels[..., 3] = 255
    Image.fromarray(pixels, "RGBA").save(path)


def test_shrink_png_caps_the_longest_side(tmp_path: Path) -> None:
    src = tmp_path / "plain.png"
    Image.new("RGB", (1600, 1200), "white").save(src)  # a few kB: only the side limit acts
    image = Image.open(io.BytesIO(docs_figures.shrink_png(src, max_side=720, max_kb=150)))
    assert image.size == (720, 540)


def test_shrink_png_meets_the_size_limit(tmp_path: Path) -> None:
    src = tmp_path / "big.png"
    _noise_png(src, 1600, 1200)  # random pixels do not compress: about 7 MB
    assert src.stat().st_size > 1024 * 1024
    data = docs_figures.shrink_png(src, max_side=720, max_kb=150)
    image = Image.open(io.BytesIO(data))
    assert len(data) <= 150 * 1024
    assert max(image.size) <= 720
    assert image.size[0] / image.size[1] == pytest.approx(1600 / 1200, rel=0.02)


def test_collect_writes_figures_and_provenance(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    (run / "config.yaml").write_text("method: coca\nseed: 3\ntrainer:\n  threads: 1\n")
    metrics = {"method": "coca", "preset": "quick", "dataset": "mnist5k", "knn_top1_backbone": 91.4}
    (run / "metrics.json").write_text(json.dumps({**metrics, "params": 7}))
    _noise_png(run / "figures" / "retrieval.png", 300, 200)
    monkeypatch.setattr(docs_figures, "DOCS_FIGURES", tmp_path / "docs_figures")

    out = docs_figures.collect(run, max_side=720, max_kb=150, command="selfcaps run coca")

    assert out == tmp_path / "docs_figures" / "coca"
    assert Image.open(out / "retrieval.png").size == (300, 200)
    record = json.loads((out / "figures.json").read_text())
    assert record["command"] == "selfcaps run coca"
    assert (record["preset"], record["dataset"], record["seed"], record["threads"]) == (
        "quick",
        "mnist5k",
        3,
        1,
    )
    assert record["metrics"] == {"knn_top1_backbone": 91.4}
    assert [f["file"] for f in record["figures"]] == ["retrieval.png"]
    assert record["git_commit"] != "1234567"  # the checkout's: the run recorded none
    assert record["cpu"] is None  # an older run: the machine was not recorded

    machine = {"cpu": "Some CPU", "cpu_features": "avx2 avx512f"}
    (run / "metrics.json").write_text(
        json.dumps({**metrics, **machine, "git_commit": "1234567abcdef+dirty"})
    )
    record = json.loads(
        (
            docs_figures.collect(run, max_side=720, max_kb=150, command=None) / "figures.json"
        ).read_text()
    )
    assert record["git_commit"] == "1234567+dirty"  # the run's, not the collecting checkout's
    assert (record["cpu"], record["cpu_features"]) == ("Some CPU", "avx2 avx512f")


def test_collect_into_a_named_directory_keeps_the_method_s_figures(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(docs_figures, "DOCS_FIGURES", tmp_path / "docs_figures")
    runs = {}
    for name, side in (("a", 100), ("b", 60)):
        run = runs[name] = tmp_path / name
        (run / "figures").mkdir(parents=True)
        (run / "config.yaml").write_text("method: poe\nseed: 0\n")
        (run / "metrics.json").write_text(json.dumps({"method": "poe", "preset": name}))
        _noise_png(run / "figures" / "samples.png", side, side)
    docs_figures.collect(runs["a"], max_side=720, max_kb=150, command=None)
    out = docs_figures.collect(runs["b"], max_side=720, max_kb=150, command=None, dest="poe_b")
    assert out == tmp_path / "docs_figures" / "poe_b"
    assert Image.open(out / "samples.png").size == (60, 60)
    first = tmp_path / "docs_figures" / "poe"
    assert Image.open(first / "samples.png").size == (100, 100)  # not replaced
    assert json.loads((first / "figures.json").read_text())["preset"] == "a"
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="--dest"):
            docs_figures.collect(runs["b"], max_side=720, max_kb=150, command=None, dest=bad)


def test_collect_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("method: coca\n")
    with pytest.raises(FileNotFoundError, match=r"metrics\.json is missing"):
        docs_figures.collect(tmp_path, max_side=720, max_kb=150, command=None)


def test_run_continues_a_stopped_run_and_records_the_original_command(
    tmp_path: Path, monkeypatch
) -> None:
    """A run SIGTERM stopped (metrics.json with stopped_by: signal, no evaluation) is resumed,
    not collected as finished; figures.json keeps the command that made the run."""
    run = fake_run(tmp_path / "coca_quick_mnist5k", {"stopped_by": "signal"})
    calls, collected = [], []
    monkeypatch.setattr(docs_figures.subprocess, "run", lambda cmd, **kw: calls.append(cmd[1:]))
    monkeypatch.setattr(docs_figures, "collect", lambda d, **kw: collected.append(kw["command"]))
    run_options = dict(method="coca", preset="quick", data="mnist5k", threads=1, seed=0)
    args = argparse.Namespace(
        **run_options, runs_root=str(tmp_path), overrides=[], max_side=720, max_kb=150
    )
    docs_figures.run_and_collect(args)
    assert calls == [["-m", "selfcaps", "run", "coca", "--out", str(run), "--resume",
                      "--no-progress"]]  # fmt: skip
    assert collected[0].startswith("selfcaps run coca --preset quick --data mnist5k")
    (run / "metrics.json").write_text(json.dumps({"knn_top1_backbone": 90.0}))  # finished
    docs_figures.run_and_collect(args)
    assert len(calls) == 1 and collected[1] is None  # collected as it is, not trained again
