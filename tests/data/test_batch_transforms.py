import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import v2

from selfcaps.data import BatchSimCLRTransform, SimCLRTransform
from selfcaps.data.batch_transforms import (
    JITTER_OPS,
    SimCLRParams,
    adjust_hue,
    gaussian_blur,
    resized_crop,
    rotate,
)

CIFAR_NORM = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
TV_JITTER = {
    "brightness": TF.adjust_brightness,
    "contrast": TF.adjust_contrast,
    "saturation": TF.adjust_saturation,
    "hue": TF.adjust_hue,
}


@pytest.fixture(autouse=True)
def one_thread():
    """Small batches on one thread (as tests/eval does): OpenMP hand-offs dominate on 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _images(b=8, c=3, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, size, size), dtype=torch.uint8, generator=g)


def _smooth_images(b=8, c=3, size=32, seed=0):
    """uint8 images with structure (saturated colours, flat areas), not just noise."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(b, c, 4, 4, generator=g)
    up = torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear")
    return (up * 255).round().to(torch.uint8)


def _params(t, b, size, seed=0, **force):
    (p, *_) = t.sample_params(b, size, size, torch.Generator().manual_seed(seed))
    return p._replace(**{k: _full(v, b) for k, v in force.items()})


def _full(value, b):
    if isinstance(value, torch.Tensor):
        return value
    dtype = torch.bool if isinstance(value, bool) else None
    if isinstance(value, int) and not isinstance(value, bool):
        dtype = torch.long
    return torch.full((b,), value, dtype=dtype)


def _reference_view(t, image, p, i):
    """One view of one image through torchvision's functional ops (float), under params ``p``."""
    r = t.recipe
    x = TF.to_dtype(image, torch.float32, scale=True)
    box = [int(v[i]) for v in (p.top, p.left, p.height, p.width)]
    x = TF.resized_crop(x, *box, size=list(r.size), antialias=True)
    if p.flip[i]:
        x = TF.horizontal_flip(x)
    if p.angle is not None:
        x = TF.rotate(x, float(p.angle[i]), interpolation=v2.InterpolationMode.BILINEAR, fill=0)
    if p.jitter[i]:
        factors = (p.brightness, p.contrast, p.saturation, p.hue)
        for k in p.order[i].tolist():
            if r.jitter[k] is not None:
                x = TV_JITTER[JITTER_OPS[k]](x, float(factors[k][i]))
    if p.gray[i] and x.shape[0] == 3:
        x = TF.rgb_to_grayscale(x, num_output_channels=3)
    if p.blur[i]:
        x = TF.gaussian_blur(x, list(r.kernel_size), [float(p.sigma[i])] * 2)
    if r.mean is not None:
        x = TF.normalize(x, list(r.mean), list(r.std))
    return x


def _reference(t, images, p):
    return torch.stack([_reference_view(t, images[i], p, i) for i in range(len(images))])


def _assert_close(a, b, atol):
    err = (a - b).abs().max().item()
    assert err <= atol, f"max abs error {err:.3g} > {atol}"


# --- exactness against torchvision -------------------------------------------------------


@pytest.mark.parametrize("c", [1, 3])
def test_identity_recipe_equals_to_dtype_and_normalize(c):
    norm = CIFAR_NORM if c == 3 else ((0.1307,), (0.3081,))
    t = BatchSimCLRTransform(
        input_size=32, min_scale=1.0, hf_prob=0.0, cj_prob=0.0, gray_prob=0.0,
        normalize=norm, channels=c,
    )  # fmt: skip
    x = _images(16, c)
    expected = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(*norm)])(x)
    for view in t(x, torch.Generator().manual_seed(0)):
        _assert_close(view, expected, 1e-6)


def test_forced_crop_and_flip_equal_torchvision():
    t = BatchSimCLRTransform(input_size=32, cj_prob=0.0, gray_prob=0.0)
    x = _smooth_images(6)
    boxes = [
        (0, 0, 32, 32),
        (3, 5, 20, 17),
        (10, 0, 7, 30),
        (0, 12, 32, 20),
        (25, 25, 7, 7),
        (1, 2, 3, 4),
    ]
    top, left, h, w = (torch.tensor(v) for v in zip(*boxes))
    flip = torch.tensor([False, True, False, True, True, False])
    p = _params(t, 6, 32, top=top, left=left, height=h, width=w, flip=flip)
    out = t.apply(x, p)
    for i, box in enumerate(boxes):
        ref = TF.resized_crop(
            TF.to_dtype(x[i], torch.float32, scale=True), *box, [32, 32], antialias=False
        )
        ref = TF.horizontal_flip(ref) if flip[i] else ref
        _assert_close(out[i], ref, 1e-4)


def test_downscaling_crops_are_antialiased_like_torchvision():
    """Output smaller than the image: the separable path matches antialias=True."""
    t = BatchSimCLRTransform(input_size=20, cj_prob=0.0, gray_prob=0.0)
    x = _images(6, size=48)
    p = _params(t, 6, 48, seed=3)
    assert bool((p.height > 20).any()) and bool((p.width < 20).any())  # both directions
    _assert_close(t.apply(x, p), _reference(t, x, p), 1e-5)


@pytest.mark.parametrize("op", JITTER_OPS)
def test_each_colour_op_equals_torchvision(op):
    strengths = {f"cj_{k}": 0.0 for k in ("bright", "contrast", "sat", "hue")}
    name = {"brightness": "bright", "saturation": "sat"}.get(op, op)
    strengths[f"cj_{name}"] = 0.4 if op == "hue" else 0.9
    t = BatchSimCLRTransform(
        input_size=32, cj_strength=1.0, gray_prob=0.0, hf_prob=0.0, **strengths
    )
    assert [j is not None for j in t.recipe.jitter] == [o == op for o in JITTER_OPS]
    x = _smooth_images(8) // 2 + 64  # mid-range: the factors clip some pixels, not all
    factors = {"hue": torch.linspace(-0.4, 0.4, 8)}.get(op, torch.linspace(0.1, 1.9, 8))
    p = _params(t, 8, 32, jitter=True, **{op: factors})
    out = t.apply(x, p)
    crop = t.apply(x, p._replace(jitter=_full(False, 8)))
    tv = TV_JITTER[op]
    for i in range(8):
        _assert_close(out[i], tv(crop[i], float(factors[i])), 2e-6)
    assert not torch.allclose(out, crop)


def test_grayscale_and_blur_equal_torchvision():
    t = BatchSimCLRTransform(input_size=32, cj_prob=0.0, blur_prob=0.5, sigmas=(0.3, 2.0))
    x = _smooth_images(8)
    sigma = torch.linspace(0.3, 2.0, 8)
    p = _params(t, 8, 32, gray=True, blur=True, sigma=sigma)
    plain = t.apply(x, p._replace(gray=_full(False, 8), blur=_full(False, 8)))
    gray = t.apply(x, p._replace(blur=_full(False, 8)))
    both = t.apply(x, p)
    for i in range(8):
        g = TF.rgb_to_grayscale(plain[i], num_output_channels=3)
        _assert_close(gray[i], g, 1e-6)
        _assert_close(
            both[i], TF.gaussian_blur(g, list(t.recipe.kernel_size), [float(sigma[i])] * 2), 1e-6
        )


def test_functional_building_blocks():
    x = TF.to_dtype(_smooth_images(4), torch.float32, scale=True)
    hue = torch.tensor([-0.5, -0.1, 0.25, 0.5])
    ref = torch.stack([TF.adjust_hue(x[i], float(hue[i])) for i in range(4)])
    _assert_close(adjust_hue(x, hue), ref, 2e-6)
    sigma = torch.tensor([0.5, 1.0, 1.5, 3.0])
    ref = torch.stack([TF.gaussian_blur(x[i], [5, 3], [float(s)] * 2) for i, s in enumerate(sigma)])
    _assert_close(gaussian_blur(x, (5, 3), sigma), ref, 1e-6)
    one = torch.ones(4, dtype=torch.long)
    out = resized_crop(x, one, 2 * one, 9 * one, 5 * one, (6, 4))
    _assert_close(out, TF.resized_crop(x, 1, 2, 9, 5, [6, 4], antialias=True), 1e-6)


@pytest.mark.parametrize("c", [1, 3])
def test_whole_pipeline_equals_per_image_torchvision_ops(c):
    """Random parameters (order, factors, crops, flips, gray, blur), small chunks."""
    norm = CIFAR_NORM if c == 3 else ((0.1307,), (0.3081,))
    t = BatchSimCLRTransform(input_size=32, channels=c, normalize=norm, blur_prob=0.5)
    t.chunk_size = 7
    x = _smooth_images(24, c, seed=1)
    views = t(x, torch.Generator().manual_seed(5))
    params = t.sample_params(24, 32, 32, torch.Generator().manual_seed(5))
    for view, p in zip(views, params):
        assert bool(p.jitter.any()) and bool(p.blur.any())
        _assert_close(view, _reference(t, x, p), 2e-5)


@pytest.mark.parametrize(("height", "width"), [(28, 28), (20, 36)])
def test_rotate_equals_torchvision_rotate(height, width):
    """Bilinear, black fill, about the centre; non-square images rotate rigidly."""
    x = TF.to_dtype(_smooth_images(6, 3, seed=3), torch.float32, scale=True)
    x = torch.nn.functional.interpolate(x, size=(height, width), mode="bilinear")
    angle = torch.tensor([-180.0, -37.5, -1.0, 0.0, 15.0, 90.0])
    bilinear = v2.InterpolationMode.BILINEAR
    ref = torch.stack([TF.rotate(x[i], float(a), bilinear, fill=0) for i, a in enumerate(angle)])
    _assert_close(rotate(x, angle), ref, 2e-5)
    _assert_close(rotate(x, torch.zeros(6)), x, 1e-5)  # no angle: the image, borders included


@pytest.mark.parametrize("c", [1, 3])
def test_pipeline_with_rotation_equals_per_image_torchvision_ops(c):
    t = BatchSimCLRTransform(input_size=28, channels=c, degrees=20.0)
    assert t.recipe.degrees == 20.0
    t.chunk_size = 5
    x = _smooth_images(12, c, size=28, seed=2)
    views = t(x, torch.Generator().manual_seed(3))
    params = t.sample_params(12, 28, 28, torch.Generator().manual_seed(3))
    for view, p in zip(views, params):
        assert p.angle is not None and float(p.angle.abs().min()) > 0
        _assert_close(view, _reference(t, x, p), 2e-5)


def test_rotation_angles_are_uniform_and_leave_the_other_draws_alone():
    n = 20000
    plain = BatchSimCLRTransform(input_size=32)
    turned = BatchSimCLRTransform(input_size=32, degrees=10.0)
    a = plain.sample_params(n, 32, 32, torch.Generator().manual_seed(4))
    b = turned.sample_params(n, 32, 32, torch.Generator().manual_seed(4))
    for pa, pb in zip(a, b):
        assert pa.angle is None
        for name in SimCLRParams._fields[:-1]:
            assert torch.equal(getattr(pa, name), getattr(pb, name)), name
        angle = pb.angle.double()
        assert float(angle.min()) >= -10.0 and float(angle.max()) <= 10.0
        assert abs(angle.mean().item()) < 0.15  # std of the mean: 10 / sqrt(3 n) = 0.04
        assert abs(angle.abs().mean().item() - 5.0) < 0.15
    assert not torch.equal(b[0].angle, b[1].angle)  # each view its own angle


def test_rotation_settings_it_cannot_vectorise_or_accept():
    for step in (v2.RandomRotation(10, expand=True), v2.RandomRotation(10, fill=None)):
        t = BatchSimCLRTransform()
        t.transforms[0].transforms.insert(2, step)
        with pytest.raises(TypeError, match="cannot vectorise"):
            t(_images(2))
    with pytest.raises(ValueError, match="degrees"):
        SimCLRTransform(degrees=-5.0)
    per_image = SimCLRTransform(input_size=28, channels=1, degrees=15.0)
    assert any(isinstance(s, v2.RandomRotation) for s in per_image.transforms[0].transforms)


# --- parameter distributions -------------------------------------------------------------


def test_parameter_distributions():
    n = 20000
    t = BatchSimCLRTransform(input_size=32, min_scale=0.2, blur_prob=0.3)
    (p, _) = t.sample_params(n, 32, 32, torch.Generator().manual_seed(0))
    area = (p.height * p.width).double() / (32 * 32)
    assert float(area.min()) >= 0.2 - 0.05 and float(area.max()) <= 1.0
    ratio = p.width.double() / p.height.double()
    assert float(ratio.min()) >= 3 / 4 - 0.1 and float(ratio.max()) <= 4 / 3 + 0.1
    assert bool((p.top >= 0).all() and (p.top + p.height <= 32).all())
    assert bool((p.left >= 0).all() and (p.left + p.width <= 32).all())
    for rate, prob in [(p.flip, 0.5), (p.jitter, 0.8), (p.gray, 0.2), (p.blur, 0.3)]:
        assert abs(rate.double().mean().item() - prob) < 0.02
    for k in range(4):  # every op equally likely at every position
        assert abs((p.order[:, 0] == k).double().mean().item() - 0.25) < 0.02
    assert bool((p.order.sort(dim=1).values == torch.arange(4)).all())
    for f, (lo, hi) in zip((p.brightness, p.contrast, p.saturation, p.hue), t.recipe.jitter):
        assert lo <= float(f.min()) and float(f.max()) <= hi
        assert abs(f.mean().item() - (lo + hi) / 2) < 0.02 * (hi - lo)
    assert float(p.sigma.min()) >= 0.1 and float(p.sigma.max()) <= 2.0


@pytest.mark.parametrize(("height", "width", "min_scale"), [(32, 32, 0.08), (8, 64, 0.5)])
def test_crop_boxes_follow_torchvision_random_resized_crop(height, width, min_scale):
    """Same distribution as v2.RandomResizedCrop (10 tries, then its central fallback)."""
    t = BatchSimCLRTransform(input_size=32, min_scale=min_scale)
    (p, _) = t.sample_params(8000, height, width, torch.Generator().manual_seed(1))
    ours = torch.stack([p.height, p.width], dim=1).double()
    rrc = v2.RandomResizedCrop(32, scale=(min_scale, 1.0))
    torch.manual_seed(2)
    image = torch.zeros(1, height, width)
    theirs = torch.tensor(
        [[(b := rrc.make_params([image]))["height"], b["width"]] for _ in range(2000)]
    ).double()
    for column in range(2):
        a, b = ours[:, column], theirs[:, column]
        se = math.sqrt(a.var() / len(a) + b.var() / len(b))
        assert abs(a.mean() - b.mean()) < 5 * se + 1e-9
    if width / height > 4 / 3:  # the fallback (full height, width 4/3 of it) is common here
        fallback = ((ours[:, 0] == height) & (ours[:, 1] == round(height * 4 / 3))).double().mean()
        theirs_fb = ((theirs[:, 0] == height) & (theirs[:, 1] == round(height * 4 / 3))).double()
        assert fallback > 0.02 and abs(fallback - theirs_fb.mean()) < 0.03


# --- determinism, shapes, recipes ----------------------------------------------------------


def test_determinism():
    t = BatchSimCLRTransform(input_size=32, normalize=CIFAR_NORM, blur_prob=0.5)
    x = _images(16)
    a1, b1 = t(x, torch.Generator().manual_seed(7))
    a2, b2 = t(x, torch.Generator().manual_seed(7))
    a3, _ = t(x, torch.Generator().manual_seed(8))
    assert torch.equal(a1, a2) and torch.equal(b1, b2)
    assert not torch.allclose(a1, a3)
    assert not torch.allclose(a1, b1)
    # a sample's views depend on its position, not on the batch size or the chunking
    t.chunk_size = 5
    a4, b4 = t(x[:6], torch.Generator().manual_seed(7))
    assert torch.equal(a4, a1[:6]) and torch.equal(b4, b1[:6])


def test_single_channel_recipe():
    t = BatchSimCLRTransform(input_size=28, channels=1, normalize=((0.1307,), (0.3081,)))
    r = t.recipe
    assert r.scale == (0.5, 1.0) and r.hf_prob == 0.0 and r.gray_prob == 0.0
    assert r.jitter[2] is None and r.jitter[3] is None and r.jitter[0] == pytest.approx((0.6, 1.4))
    x = _images(32, 1, 28)
    views = t(x, torch.Generator().manual_seed(0))
    assert [v.shape for v in views] == [(32, 1, 28, 28)] * 2
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in views)
    (p, _) = t.sample_params(32, 28, 28)
    assert not bool(p.flip.any())


def test_colour_defaults_match_simclr_transform():
    r = BatchSimCLRTransform().recipe
    assert (
        r.size == (32, 32) and r.scale == (0.08, 1.0) and r.ratio == pytest.approx((3 / 4, 4 / 3))
    )
    assert (r.hf_prob, r.cj_prob, r.gray_prob, r.blur_prob) == (0.5, 0.8, 0.2, 0.0)
    flat = [v for pair in r.jitter for v in pair]
    assert flat == pytest.approx([0.6, 1.4, 0.6, 1.4, 0.6, 1.4, -0.1, 0.1])
    assert isinstance(BatchSimCLRTransform(), SimCLRTransform)


def test_single_image_float_input_and_global_rng():
    t = BatchSimCLRTransform(input_size=24, n_views=3)
    img = _images(1, size=32)[0]
    torch.manual_seed(0)
    views = t(img)
    torch.manual_seed(0)
    again = t(img.float() / 255)
    assert len(views) == 3 and all(v.shape == (3, 24, 24) for v in views)
    for a, b in zip(views, again):
        _assert_close(a, b, 1e-6)


def test_rejects_steps_it_cannot_vectorise():
    t = BatchSimCLRTransform()
    t.transforms[0].transforms.append(v2.RandomVerticalFlip())
    with pytest.raises(TypeError, match="cannot vectorise"):
        t(_images(2))


def test_params_move_to_the_batch_device():
    t = BatchSimCLRTransform(input_size=8)
    (p, _) = t.sample_params(3, 8, 8)
    assert isinstance(p, SimCLRParams) and p.to("cpu").top.device.type == "cpu"
