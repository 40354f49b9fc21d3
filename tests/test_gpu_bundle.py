"""``benchmarks/gpu_bundle.py``: what a GPU check carries, read back by the loaders."""

import gzip
import importlib.metadata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from selfcaps.data.cifar import CIFAR10, CIFAR10_CLASSES

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bundle(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("SELFCAPS_CACHE", str(tmp_path / "cache"))
    import gpu_bundle

    return gpu_bundle


def _data_root(root: Path, train: int = 3, test: int = 2) -> Path:
    """MNIST's four files (two plain, two gzipped) and a CIFAR-10 PNG tree, class k's pixels k."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for i, name in enumerate(("train-images-idx3-ubyte", "train-labels-idx1-ubyte")):
        (raw / name).write_bytes(bytes([i]) * 100)
    for i, name in enumerate(("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")):
        with gzip.open(raw / f"{name}.gz", "wb") as f:
            f.write(bytes([7 + i]) * 50)
    for split, n in (("train", train), ("test", test)):
        for k, name in enumerate(CIFAR10_CLASSES):
            folder = root / "cifar10" / split / name
            folder.mkdir(parents=True)
            for j in range(n):
                pixels = np.full((32, 32, 3), 10 * k + j, dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"img_{j}.png")
    return root


def test_mnist_files_are_gzipped_byte_for_byte(bundle, tmp_path):
    root = _data_root(tmp_path / "src")
    written = bundle.mnist_gz(root, tmp_path / "out")
    assert [p.name for p in written] == [f"{n}.gz" for n in bundle.MNIST_FILES]
    for p in written:
        plain = root / "MNIST" / "raw" / p.name.removesuffix(".gz")
        original = plain.read_bytes() if plain.exists() else gzip.decompress(p.read_bytes())
        if not plain.exists():  # copied as shipped
            assert p.read_bytes() == Path(f"{plain}.gz").read_bytes()
        assert gzip.decompress(p.read_bytes()) == original


def test_the_cifar_subset_is_the_first_files_of_each_class_and_loads(bundle, tmp_path):
    root = _data_root(tmp_path / "src")
    out = tmp_path / "out"
    written = bundle.cifar_subset(root, out, {"train": 2, "test": 1})
    assert len(written) == 10 * 3
    assert sorted(p.name for p in (out / "cifar10" / "train" / "cat").iterdir()) == [
        "img_0.png",
        "img_1.png",
    ]
    train = CIFAR10(out, train=True)
    assert len(train) == 20 and len(CIFAR10(out, train=False)) == 10
    for i in range(len(train)):  # class k holds pixels 10 k and 10 k + 1: labels intact
        image, label = train[i]
        assert int(image.flatten()[0]) // 10 == int(label)


def test_missing_data_is_named(bundle, tmp_path):
    root = _data_root(tmp_path / "src", train=1)
    with pytest.raises(FileNotFoundError, match=r"cifar10/train/airplane: expected at least 2"):
        bundle.cifar_subset(root, tmp_path / "out", {"train": 2})
    with pytest.raises(FileNotFoundError, match=r"is .* a data root with MNIST"):
        bundle.mnist_gz(tmp_path / "nothing", tmp_path / "out")


def test_wheels_are_pinned_to_the_versions_here_for_the_gpu_python(bundle, tmp_path):
    (req,) = bundle.pinned(["omegaconf"])
    assert req == f"omegaconf=={importlib.metadata.version('omegaconf')}"
    argv = bundle.download_argv(req, tmp_path, "3.12")
    assert argv[-1] == req and argv[argv.index("--python-version") + 1] == "3.12"
    assert {"--no-deps", "--only-binary=:all:"} <= set(argv)
    assert "manylinux2014_x86_64" in argv


def test_a_data_only_bundle_prints_its_size_and_the_command(bundle, tmp_path, capsys):
    root = _data_root(tmp_path / "src")
    out = tmp_path / "gpu"
    argv = ["--data-root", str(root), "--out", str(out), "--no-wheels", "--cifar-train", "2"]
    assert bundle.main([*argv, "--cifar-test", "1"]) == 0
    text = capsys.readouterr().out
    assert "MNIST: 4 files" in text and "CIFAR-10: 30 files" in text
    assert "pip install" not in text
    assert f"gpu_check.py --data-root {out}/data" in text
    assert bundle.main([*argv, "--cifar-test", "1", "--limit-mib", "0"]) == 1
    assert "over --limit-mib 0" in capsys.readouterr().err


def test_the_device_command_installs_the_wheels_then_runs_both_checks(bundle):
    command = bundle.device_command(Path(".gpu"), with_wheels=True)
    assert command.startswith("set -o pipefail; python3 -m pip install -q --no-index --no-deps")
    assert ".gpu/wheels/*.whl && export PYTHONPATH=/tmp/site:$PWD/src" in command
    assert "PYTHONUNBUFFERED=1 || exit 1; " in command  # no check without its packages
    eager, compiled = command.split(" || exit 1; ")[1].split("; ")
    assert "--budget-s 420 2>&1 | tee $OUT/log" in eager and "--compile" not in eager
    assert "--compile --warmup 5 --methods coca --precisions 32-true" in compiled
    assert compiled.endswith("--budget-s 140 2>&1 | tee -a $OUT/log")
    assert len(command) < 2000  # the device tool's limit on a command
    only = bundle.device_command(Path(".gpu"), with_wheels=False, eager_s=500, compile_s=0)
    assert "pip install" not in only and "--compile" not in only and "--budget-s 500" in only
    assert "--commit" not in command + only  # none given
    dirty = bundle.device_command(Path(".gpu"), with_wheels=True, commit="0123456789ab+dirty")
    assert dirty.count("gpu_check.py") == dirty.count("--commit 0123456789ab+dirty ") == 2
    assert len(dirty) < 2000
    odd = bundle.device_command(Path(".gpu"), with_wheels=False, commit="a b")
    assert "--commit 'a b' " in odd  # quoted for the shell


def test_compiled_rows_are_named_checked_and_must_fit_one_call(bundle):
    pairs = ["encapnet:32-true", "encapnet:bf16-mixed", "coca:bf16-mixed"]
    command = bundle.device_command(
        Path(".gpu"), with_wheels=True, eager_s=0, compile_s=180, compiled=pairs
    )
    checks = command.split(" || exit 1; ")[1].split("; ")
    assert len(checks) == 3 and all("--compile --warmup 5" in c for c in checks)  # no eager check
    assert "--methods encapnet --precisions bf16-mixed --method-cap-s 180" in checks[1]
    assert all(c.endswith("--budget-s 180 2>&1 | tee -a $OUT/log") for c in checks)
    assert len(command) < 2000
    # 420 + 2 x 140 + 25 s of start-up is over one 600 s call: refused, with the arithmetic
    with pytest.raises(ValueError, match=r"up to 725 s \(420 eager \+ 2 x 140 compiled \+ 25\)"):
        bundle.device_command(Path(".gpu"), False, compiled=["coca:32-true", "encapnet:32-true"])
    with pytest.raises(ValueError, match=r"'coca:fp8'.*PRECISION one of bf16-mixed, 32-true"):
        bundle.device_command(Path(".gpu"), False, compiled=["coca:fp8"])
    with pytest.raises(ValueError, match=r"'resnet:32-true'.*METHOD one of coca"):
        bundle.device_command(Path(".gpu"), False, compiled=["resnet:32-true"])
    with pytest.raises(ValueError, match=r"'coca:fp8'"):  # named even when not run
        bundle.device_command(Path(".gpu"), False, compile_s=0, compiled=["coca:fp8"])
    with pytest.raises(ValueError, match="nothing to run"):
        bundle.device_command(Path(".gpu"), False, eager_s=0, compile_s=0)


def test_a_command_that_cannot_run_copies_nothing(bundle, tmp_path, capsys):
    out = tmp_path / "gpu"
    argv = ["--data-root", str(tmp_path / "absent"), "--out", str(out), "--no-wheels"]
    assert bundle.main([*argv, "--compiled", "coca:32-true", "mcae:32-true"]) == 2
    assert "over the 600 s of one device call" in capsys.readouterr().err
    assert not out.exists()
