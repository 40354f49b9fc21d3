import os
import pickle

import numpy as np
import pytest
import torch

from selfcaps.data import (
    CIFAR10,
    CIFAR100,
    CorruptDatasetError,
    DatasetNotFoundError,
    UnsafePickleError,
    get_dataset,
    load_dataset_pickle,
)
from selfcaps.data.cache import cache_path
from selfcaps.data.cifar import CIFAR10_CLASSES
from tests.data.formats import write_cifar_pickles, write_png_tree


@pytest.mark.parametrize("cls", [CIFAR10, CIFAR100])
def test_pickles_decode_exactly(tmp_path, cls):
    written = write_cifar_pickles(tmp_path, hundred=cls is CIFAR100)
    for train, split in ((True, "train"), (False, "test")):
        ds = cls(tmp_path, train=train)
        data, labels = written[split]
        assert ds.data.shape == (len(data), 3, 32, 32) and ds.data.dtype == torch.uint8
        # a CIFAR row is the R plane, then G, then B, each 32x32 row-major
        assert torch.equal(ds.data[:, 1, 2, 5], torch.from_numpy(data[:, 1024 + 2 * 32 + 5]))
        assert torch.equal(ds.data.reshape(len(data), -1), torch.from_numpy(data))
        assert ds.targets.tolist() == labels.tolist()
        assert ds.classes == written["classes"]


def test_pickle_with_str_keys_and_protocol_5(tmp_path):
    write_cifar_pickles(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    (folder / "test_batch").write_bytes(pickle.dumps({"data": data, "labels": [3, 9]}, protocol=5))
    ds = CIFAR10(tmp_path, train=False)
    assert ds.targets.tolist() == [3, 9] and torch.equal(
        ds.data.reshape(2, -1), torch.from_numpy(data)
    )


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > exploited.txt",))


def test_malicious_pickle_is_refused_without_running_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_cifar_pickles(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(pickle.dumps({b"data": _Exploit(), b"labels": []}, protocol=2))
    with pytest.raises(
        UnsafePickleError, match=r"data_batch_3: refusing to unpickle posix\.system"
    ):
        CIFAR10(tmp_path)
    assert not (tmp_path / "exploited.txt").exists()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(pickle.loads, protocol=2),  # a global function
        b"cbuiltins\neval\n(S'1+1'\ntR.",  # protocol 0 GLOBAL + REDUCE
        pickle.dumps(np.array([1], dtype=object), protocol=2),  # object array: still allowed types
    ],
)
def test_unsafe_globals_refused(tmp_path, payload):
    path = tmp_path / "batch"
    path.write_bytes(payload)
    try:
        out = load_dataset_pickle(path)
    except UnsafePickleError as err:
        assert str(path) in str(err)
    else:  # only numpy arrays of plain values may come back
        assert isinstance(out, np.ndarray) and out.tolist() == [1]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[: len(b) // 2], "cannot unpickle"),
        (lambda b: b"not a pickle", "cannot unpickle"),
        (lambda b: pickle.dumps([1, 2], protocol=2), "expected a pickled dict, got list"),
        (lambda b: pickle.dumps({b"labels": [1]}, protocol=2), "missing key b'data'"),
        (
            lambda b: pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}),
            "uint8 array",
        ),
        (
            lambda b: pickle.dumps({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}),
            "3072",
        ),
        (
            lambda b: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}),
            "2 images but 1",
        ),
        (lambda b: pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}), "0..9"),
    ],
)
def test_corrupt_batch_names_file(tmp_path, mutate, message):
    write_cifar_pickles(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(mutate(batch.read_bytes()))
    with pytest.raises(CorruptDatasetError, match="data_batch_2") as err:
        CIFAR10(tmp_path)
    assert message in str(err.value)


def test_missing_batch_is_named(tmp_path):
    write_cifar_pickles(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DatasetNotFoundError, match="data_batch_4"):
        CIFAR10(tmp_path)


def test_missing_cifar_lists_both_layouts(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        CIFAR100(tmp_path, train=False)
    msg = str(err.value)
    assert str(tmp_path / "cifar-100-python" / "test") in msg
    assert str(tmp_path / "cifar100" / "test") in msg


def _png_cifar(tmp_path, split="test", per_class=2):
    return write_png_tree(tmp_path / "cifar10" / split, list(CIFAR10_CLASSES), per_class=per_class)


def test_png_layout_decodes_exactly_and_is_cached(tmp_path, monkeypatch):
    images, labels = _png_cifar(tmp_path)
    ds = CIFAR10(tmp_path, train=False)
    assert torch.equal(ds.data, torch.from_numpy(images)) and ds.targets.tolist() == labels.tolist()
    assert ds.classes == list(CIFAR10_CLASSES)
    assert len(list((tmp_path / "cache").glob("imagefolder-*.npz"))) == 1
    # the second load decodes nothing
    monkeypatch.setattr("selfcaps.data.imagefolder.decode_image", _no_decoding)
    again = CIFAR10(tmp_path, train=False)
    assert torch.equal(again.data, ds.data) and torch.equal(again.targets, ds.targets)
    monkeypatch.setenv("SELFCAPS_CACHE", str(tmp_path / "other"))
    with pytest.raises(AssertionError, match="decoded"):
        CIFAR10(tmp_path, train=False)


def _no_decoding(*args):
    raise AssertionError("decoded although cached")


def test_png_cache_key_tracks_changes(tmp_path):
    _png_cifar(tmp_path)
    CIFAR10(tmp_path, train=False)
    extra = tmp_path / "cifar10" / "test" / "cat" / "999.png"
    write_png_tree(tmp_path / "tmp", ["x"], per_class=1)
    (tmp_path / "tmp" / "x" / "000.png").rename(extra)
    ds = CIFAR10(tmp_path, train=False)
    assert len(ds) == 21 and len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_corrupt_cache_is_rebuilt_with_warning(tmp_path):
    images, _ = _png_cifar(tmp_path)
    CIFAR10(tmp_path, train=False)
    (cached,) = (tmp_path / "cache").glob("*.npz")
    cached.write_bytes(cached.read_bytes()[:100])
    with pytest.warns(UserWarning, match="discarding unreadable cache file"):
        ds = CIFAR10(tmp_path, train=False)
    assert torch.equal(ds.data, torch.from_numpy(images))
    np.load(cached)  # rewritten, valid


def test_unwritable_cache_only_warns(tmp_path, monkeypatch):
    images, _ = _png_cifar(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SELFCAPS_CACHE", str(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write cache"):
        ds = CIFAR10(tmp_path, train=False)
    assert torch.equal(ds.data, torch.from_numpy(images))


def test_corrupt_png_names_file(tmp_path):
    _png_cifar(tmp_path)
    bad = tmp_path / "cifar10" / "test" / "dog" / "001.png"
    bad.write_bytes(bad.read_bytes()[:60])
    with pytest.raises(CorruptDatasetError, match=r"dog/001\.png: cannot decode image"):
        CIFAR10(tmp_path, train=False)


def test_png_layout_checks_classes_and_size(tmp_path):
    write_png_tree(tmp_path / "cifar10" / "test", ["a", "b"])
    with pytest.raises(CorruptDatasetError, match="expected the 10 CIFAR class folders"):
        CIFAR10(tmp_path, train=False)
    write_png_tree(
        tmp_path / "x" / "cifar10" / "test", list(CIFAR10_CLASSES), per_class=1, size=(8, 8)
    )
    with pytest.raises(CorruptDatasetError, match="expected 32x32"):
        CIFAR10(tmp_path / "x", train=False)


def test_cache_path_depends_on_key():
    assert cache_path("k", {"a": 1}) != cache_path("k", {"a": 2})
    assert cache_path("k", {"a": 1, "b": 2}) == cache_path("k", {"b": 2, "a": 1})


def test_registry_carves_val_from_pickles(tmp_path):
    write_cifar_pickles(tmp_path, per_batch=20)
    train = get_dataset("cifar10", tmp_path, split="train", val_fraction=0.5)
    val = get_dataset("cifar10", tmp_path, split="val", val_fraction=0.5)
    assert len(train) + len(val) == 100
    assert not set(train.indices.tolist()) & set(val.indices.tolist())
