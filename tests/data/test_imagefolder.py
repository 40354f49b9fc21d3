import numpy as np
import pytest
import torch
from PIL import Image

from selfcaps.data import (
    CorruptDatasetError,
    DatasetNotFoundError,
    ImageFolderDataset,
    dataset_info,
    decode_image_folder,
    get_dataset,
)
from tests.data.formats import write_png_tree


def test_train_and_val_layout(tmp_path):
    tr_images, tr_labels = write_png_tree(tmp_path / "nette" / "train", ["fish", "dog", "cat"], 3)
    va_images, _ = write_png_tree(tmp_path / "nette" / "val", ["cat", "dog", "fish"], 1, seed=1)
    train = ImageFolderDataset(tmp_path / "nette")
    # classes are sorted folder names: cat, dog, fish
    assert train.classes == ["cat", "dog", "fish"]
    order = np.argsort(["fish", "dog", "cat"], kind="stable")  # written fish, dog, cat
    expected = np.concatenate([tr_images[tr_labels == c] for c in order])
    assert torch.equal(train.data, torch.from_numpy(expected))
    assert train.targets.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    test = ImageFolderDataset(tmp_path / "nette", split="test")  # no test/: val/ is the test split
    assert torch.equal(test.data, torch.from_numpy(va_images)) and test.targets.tolist() == [
        0,
        1,
        2,
    ]
    with pytest.raises(ValueError, match="no official validation split"):
        ImageFolderDataset(tmp_path / "nette", split="val")
    info = dataset_info(f"imagefolder:{tmp_path / 'nette'}")
    assert info.num_classes == 3 and info.channels == 3 and not info.has_official_val


def test_registry_relative_path_and_official_val(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFCAPS_DATA", str(tmp_path))
    for split, seed in (("train", 0), ("val", 1), ("test", 2)):
        write_png_tree(tmp_path / "woof" / split, ["a", "b"], 2, size=(8, 8), seed=seed)
    assert dataset_info("imagefolder:woof").has_official_val
    sizes = {
        s: len(get_dataset("imagefolder:woof", split=s))
        for s in ("train", "val", "test", "train_full")
    }
    assert sizes == {"train": 4, "val": 4, "test": 4, "train_full": 4}


def test_registry_carves_val_without_official_val(tmp_path):
    write_png_tree(tmp_path / "t" / "train", ["a", "b"], 10, size=(8, 8))
    write_png_tree(tmp_path / "t" / "test", ["a", "b"], 1, size=(8, 8))
    val = get_dataset(f"imagefolder:{tmp_path / 't'}", split="val", val_fraction=0.2)
    assert len(val) == 4 and val.targets.tolist() == [0, 0, 1, 1]


def test_mixed_sizes_need_image_size(tmp_path):
    write_png_tree(tmp_path / "d" / "train", ["a"], 1, size=(20, 30))
    write_png_tree(tmp_path / "d2", ["b"], 1, size=(40, 24))
    (tmp_path / "d2" / "b" / "000.png").rename(tmp_path / "d" / "train" / "a" / "001.png")
    with pytest.raises(ValueError, match=r"30x20.*24x40.*image_size="):
        decode_image_folder(tmp_path / "d" / "train")
    data, _, _ = decode_image_folder(tmp_path / "d" / "train", image_size=16)
    assert data.shape == (2, 3, 16, 16)
    data, _, _ = decode_image_folder(tmp_path / "d" / "train", image_size=(10, 12))
    assert data.shape == (2, 3, 10, 12)


def test_resize_keeps_aspect_and_centre_crops(tmp_path):
    img = np.zeros((20, 40, 3), dtype=np.uint8)
    img[:, 8:32] = 255  # a white band a bit wider than the centre square
    (tmp_path / "t" / "a").mkdir(parents=True)
    Image.fromarray(img).save(tmp_path / "t" / "a" / "x.png")
    data, _, _ = decode_image_folder(tmp_path / "t", image_size=10)
    assert data.shape == (1, 3, 10, 10) and int(data.min()) >= 250  # squashing would show black


def test_grayscale_and_jpeg_become_rgb(tmp_path):
    (tmp_path / "t" / "a").mkdir(parents=True)
    Image.fromarray(np.full((6, 6), 77, dtype=np.uint8)).save(tmp_path / "t" / "a" / "g.png")
    Image.fromarray(np.full((6, 6, 3), 200, dtype=np.uint8)).save(tmp_path / "t" / "a" / "c.JPG")
    (tmp_path / "t" / "a" / "notes.txt").write_text("ignored")
    (tmp_path / "t" / "a" / ".hidden.png").write_bytes(b"ignored")
    data, _, classes = decode_image_folder(tmp_path / "t")
    assert data.shape == (2, 3, 6, 6) and classes == ["a"]
    assert abs(int(data[0].float().mean()) - 200) <= 2 and int(data[1, :, 0, 0].unique()) == 77


def test_non_image_and_empty_folders(tmp_path):
    (tmp_path / "t" / "a").mkdir(parents=True)
    (tmp_path / "t" / "a" / "x.png").write_bytes(b"GIF89a not really")
    with pytest.raises(CorruptDatasetError, match=r"x\.png: cannot decode image"):
        decode_image_folder(tmp_path / "t")
    (tmp_path / "u" / "empty").mkdir(parents=True)
    with pytest.raises(CorruptDatasetError, match="class folder has no"):
        decode_image_folder(tmp_path / "u")
    (tmp_path / "v").mkdir()
    with pytest.raises(CorruptDatasetError, match="no class subfolders"):
        decode_image_folder(tmp_path / "v")


def test_test_split_with_unknown_class(tmp_path):
    write_png_tree(tmp_path / "t" / "train", ["a"], 1, size=(8, 8))
    write_png_tree(tmp_path / "t" / "test", ["a", "zebra"], 1, size=(8, 8))
    with pytest.raises(CorruptDatasetError, match="zebra"):
        ImageFolderDataset(tmp_path / "t", split="test")


def test_missing_imagefolder(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        get_dataset(f"imagefolder:{tmp_path / 'nope'}", split="test")
    msg = str(err.value)
    for sub in ("train", "test", "val"):
        assert str(tmp_path / "nope" / sub) in msg
