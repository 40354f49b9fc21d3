import time

import pytest
import torch
from torchvision.transforms import v2

from selfcaps.data import (
    EvalTransform,
    MultiViewTransform,
    SimCLRTransform,
    dataset_info,
    default_transforms,
    list_datasets,
)


def _image(c=3, size=32, seed=0):
    return torch.randint(
        0, 256, (c, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def test_simclr_two_different_views():
    torch.manual_seed(0)
    views = SimCLRTransform(input_size=32, normalize=((0.5,) * 3, (0.25,) * 3))(_image())
    assert isinstance(views, list) and len(views) == 2
    a, b = views
    assert a.shape == b.shape == (3, 32, 32) and a.dtype == b.dtype == torch.float32
    assert not torch.equal(a, b)
    assert torch.isfinite(a).all()


def test_simclr_resizes_to_input_size_and_n_views():
    views = SimCLRTransform(input_size=24, n_views=3, blur_prob=1.0)(_image(size=40))
    assert len(views) == 3 and all(v.shape == (3, 24, 24) for v in views)
    assert all(float(v.min()) >= 0.0 and float(v.max()) <= 1.0 for v in views)  # no normalize


def test_single_channel_recipe():
    t = SimCLRTransform(input_size=28, channels=1)
    views = t(_image(c=1, size=28))
    assert [v.shape for v in views] == [(1, 28, 28)] * 2
    steps = t.transforms[0].transforms
    names = [type(s).__name__ for s in steps]
    assert "RandomHorizontalFlip" not in names and "RandomGrayscale" not in names
    crop = steps[0]
    assert crop.scale == (0.5, 1.0)
    jitter = steps[names.index("RandomApply")].transforms[0]
    assert jitter.saturation is None and jitter.hue is None and jitter.brightness == (0.6, 1.4)


def test_colour_recipe_defaults():
    steps = SimCLRTransform().transforms[0].transforms
    by_name = {type(s).__name__: s for s in steps}
    assert by_name["RandomResizedCrop"].scale == (0.08, 1.0)
    assert by_name["RandomHorizontalFlip"].p == 0.5 and by_name["RandomGrayscale"].p == 0.2
    jitter = by_name["RandomApply"].transforms[0]
    assert by_name["RandomApply"].p == 0.8
    assert jitter.brightness == pytest.approx((0.6, 1.4)) and jitter.hue == pytest.approx(
        (-0.1, 0.1)
    )
    assert "GaussianBlur" not in str(steps)


def test_invalid_channels():
    with pytest.raises(ValueError, match="channels"):
        SimCLRTransform(channels=2)


def test_eval_transform_is_deterministic_and_normalises():
    t = EvalTransform((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    img = _image()
    out = t(img)
    assert torch.equal(out, t(img)) and out.dtype == torch.float32
    assert torch.allclose(out, img.float() / 255 * 2 - 1, atol=1e-6)
    assert EvalTransform(size=16)(_image(size=40)).shape == (3, 16, 16)
    with pytest.raises(ValueError, match="both"):
        EvalTransform(mean=(0.5,))


def test_multiview_applies_each_transform():
    t = MultiViewTransform([v2.ToDtype(torch.float32, scale=True), v2.RandomHorizontalFlip(1.0)])
    a, b = t(_image())
    assert torch.allclose(a, _image().float() / 255, atol=1e-6) and torch.equal(
        b, _image().flip(-1)
    )


@pytest.mark.parametrize("name", [n for n in list_datasets() if not n.startswith("imagefolder")])
def test_default_transforms_for_every_dataset(name):
    info = dataset_info(name)
    train, evaluate = default_transforms(name)
    img = _image(info.channels, info.image_size[0])
    views = train(img)
    assert len(views) == 2 and views[0].shape == img.shape
    assert evaluate(img).shape == img.shape
    assert default_transforms(name, input_size=24).eval(img).shape == (info.channels, 24, 24)


def test_default_transforms_imagefolder_needs_size(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="input_size"):
        default_transforms(f"imagefolder:{tmp_path}")
    assert default_transforms(f"imagefolder:{tmp_path}", input_size=64).train.transforms


def test_simclr_speed_is_reasonable():
    # a loose bound (shared 2-core machines); the README reports measured numbers
    t = SimCLRTransform(input_size=32)
    img = _image()
    t(img)
    start = time.process_time()  # CPU time: a busy machine does not stretch it
    for _ in range(50):
        t(img)
    assert (time.process_time() - start) / 50 < 0.05
