"""MCAE's crops per batch on the device (:mod:`selfcaps.data.batch_crops`) against per-image ones.

The per-image path is torchvision's own pipeline (``v2.RandomResizedCrop`` / ``RandomCrop``,
``ToDtype``, ``Normalize``) run under :class:`SeededTransformDataset`'s seeded generator; the
boxes it draws are recorded by a spy on the crop step's ``make_params``, so the comparison is
with what torchvision did, not with this module's own code.

Images: torchvision resizes uint8 crops with torch's native uint8 kernel on CPUs with AVX2,
AVX-512 or ARM64 (int16 fixed-point weights, two passes, each rounded to uint8); the batch path
reproduces that arithmetic, so there the images must be equal bit for bit. On other CPUs
torchvision resizes in float and rounds once (half to even), so a pixel may be one grey
level apart (``1 / 255`` before normalisation): that is the tolerance there.
"""

import pickle
import platform
from types import SimpleNamespace

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import v2

from selfcaps.caps.chunking import sized_for
from selfcaps.data.batch_crops import BatchCropTransform, on_device_crops, uint8_resized_crop
from selfcaps.data.datamodule import (
    SeededParamsDataset,
    SeededTransformDataset,
    SelfcapsDataModule,
)
from selfcaps.data.transforms import PerImageStandardize
from selfcaps.eval.dispatch import DispatchTally
from tests.data.test_batch_transforms import one_thread  # noqa: F401 (autouse fixture)

NATIVE_UINT8 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or (
    platform.machine() in ("aarch64", "arm64")
)
#: Grey levels a resampled pixel may differ by (module docstring).
GREY_LEVELS = 0 if NATIVE_UINT8 else 1
CIFAR_NORM = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])
TO_FLOAT = v2.ToDtype(torch.float32, scale=True)


class Images(torch.utils.data.Dataset):
    """Random uint8 images with a target, as selfcaps datasets return them."""

    def __init__(self, n, channels, size, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i % 10


def _resized(size, min_scale, norm=CIFAR_NORM):
    crop = v2.RandomResizedCrop(size, scale=(min_scale, 1.0), antialias=True)
    return v2.Compose([crop, TO_FLOAT, v2.Normalize(*norm)])


# (channels, image side, pipeline): MCAE's CIFAR-10 and (Fashion-)MNIST recipes (crops no
# larger than the output: upscaling), a downscaling crop (an image folder without jitter),
# and smallNORB's random crop with per-image standardisation.
CASES = {
    "cifar10": (3, 32, lambda: _resized(32, 0.8)),
    "mnist": (1, 28, lambda: _resized(28, 0.8, ([0.1307], [0.3081]))),
    "downscale": (3, 80, lambda: _resized(64, 0.08)),
    "smallnorb": (1, 48, lambda: v2.Compose([v2.RandomCrop(32), TO_FLOAT, PerImageStandardize()])),
}


def _per_image(pipeline, data, seed, epoch):
    """Every item through ``SeededTransformDataset`` (the CPU path) and the boxes it drew."""
    crop, boxes = pipeline.transforms[0], []
    draw = crop.make_params

    def spy(flat):
        p = draw(flat)
        boxes.append([p["top"], p["left"], p["height"], p["width"]])
        return p

    crop.make_params = spy
    try:
        ds = SeededTransformDataset(data, pipeline, seed)
        images = torch.stack([ds[(epoch, i)][0] for i in range(len(data))])
    finally:
        del crop.make_params
    return images, torch.tensor(boxes)


def _batch(t, data, seed, epoch):
    """The batch path: per-image parameters from ``SeededParamsDataset``, applied at once."""
    ds = SeededParamsDataset(data, t, seed)
    items = [ds[(epoch, i)][0] for i in range(len(data))]
    images = torch.stack([x for x, _ in items])
    params = torch.stack([p for _, p in items])
    return params, t([images, params])


@pytest.mark.parametrize("case", CASES)
def test_parameters_equal_the_per_image_draws(case):
    channels, side, make = CASES[case]
    data = Images(48, channels, side)
    for seed, epoch in [(0, 0), (7, 3)]:
        t = BatchCropTransform(make())
        _, boxes = _per_image(t.pipeline, data, seed, epoch)
        params, _ = _batch(t, data, seed, epoch)
        assert params.dtype == torch.int64
        assert torch.equal(params, boxes)
    assert len({tuple(b) for b in boxes.tolist()}) > 1  # the boxes do vary


@pytest.mark.parametrize("case", CASES)
def test_images_equal_the_per_image_pipeline(case):
    channels, side, make = CASES[case]
    data = Images(48, channels, side)
    t = BatchCropTransform(make())
    expected, _ = _per_image(t.pipeline, data, 3, 1)
    _, got = _batch(t, data, 3, 1)
    assert got.shape == expected.shape and got.dtype == torch.float32
    if case == "smallnorb":  # a gather, then a per-image reduction in another order
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        return
    std = torch.tensor(CIFAR_NORM[1] if channels == 3 else [0.3081]).view(1, -1, 1, 1)
    grey = ((got - expected).abs() * std * 255).max()
    assert grey <= GREY_LEVELS + 1e-3, float(grey)
    if NATIVE_UINT8:
        assert torch.equal(got, expected)


def test_uint8_resampling_matches_torchvision_on_every_box_shape():
    """Crops of every height and width of a 12x12 image, to a larger and a smaller output."""
    g = torch.Generator().manual_seed(1)
    img = torch.randint(0, 256, (2, 12, 12), dtype=torch.uint8, generator=g)
    for out in [(16, 16), (5, 7)]:
        boxes = [(t, lf, h, w) for h in range(1, 13) for w in range(1, 13) for t, lf in [(0, 0)]]
        boxes += [(12 - h, 12 - w, h, w) for h in (3, 8) for w in (2, 11)]
        tv = torch.stack([TF.resized_crop(img, *b, list(out), antialias=True) for b in boxes])
        top, left, h, w = torch.tensor(boxes).unbind(1)
        ours = uint8_resized_crop(img.expand(len(boxes), -1, -1, -1), top, left, h, w, out)
        assert (ours - tv.double()).abs().max() <= GREY_LEVELS


def test_no_host_sync_and_ops_independent_of_the_batch():
    t = BatchCropTransform(_resized(32, 0.8))
    counts = []
    for b in (8, 32):
        data = Images(b, 3, 32)
        ds = SeededParamsDataset(data, t, 0)
        items = [ds[(0, i)][0] for i in range(b)]
        batch = [torch.stack([x for x, _ in items]), torch.stack([p for _, p in items])]
        with sized_for("accelerator"), DispatchTally("augment") as tally:
            t(batch)
        assert sum(tally.syncs_by_phase.values()) == 0, tally.sync_sites
        counts.append(tally.ops_by_phase["augment"])
    assert counts[0] == counts[1] > 0


def test_only_crop_pipelines_are_batched_and_they_pickle():
    jitter = v2.Compose([v2.RandomResizedCrop(8), v2.ColorJitter(0.4), TO_FLOAT])
    assert on_device_crops(jitter) is jitter
    nearest = v2.RandomResizedCrop(8, interpolation=v2.InterpolationMode.NEAREST)
    assert isinstance(on_device_crops(v2.Compose([nearest, TO_FLOAT])), v2.Compose)
    t = on_device_crops(_resized(8, 0.8))
    assert isinstance(t, BatchCropTransform)
    img = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8)
    torch.manual_seed(0)
    a = t(img)
    torch.manual_seed(0)
    assert torch.equal(pickle.loads(pickle.dumps(t))(img), a)  # loader workers get copies


def _datamodule(transform):
    cfg = SimpleNamespace(seed=0)
    return SelfcapsDataModule(cfg, transform, None)


def _trainer(device, training=True):
    return SimpleNamespace(training=training, strategy=SimpleNamespace(root_device=device))


def test_the_batch_path_is_taken_only_while_fitting_on_an_accelerator():
    dm = _datamodule(BatchCropTransform(_resized(8, 0.8)))
    cpu = torch.device("cpu")
    assert not dm.batched_train_transform  # no trainer: MCAE's finetuning, selfcaps eval
    dm.trainer = _trainer(cpu)
    assert not dm.batched_train_transform  # a CPU run: the per-image path, as before
    with sized_for("accelerator"):
        assert dm.batched_train_transform  # what gpu_readiness measures
        dm.trainer = _trainer(cpu, training=False)
        assert not dm.batched_train_transform  # after the fit
    dm.trainer = _trainer(torch.device("cuda"))
    assert dm.batched_train_transform
    with sized_for("cpu"):
        assert not dm.batched_train_transform
    dm.train_transform = _resized(8, 0.8)  # a plain pipeline never is
    assert not dm.batched_train_transform
