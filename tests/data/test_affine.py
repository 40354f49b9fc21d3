import math

import pytest
import torch
from torchvision.transforms import v2

from selfcaps.data import (
    AFFNIST_RANGES,
    AffineParams,
    AffNISTLike,
    AffNISTLikeDataset,
    MNIST5k,
    RandomCanvasTranslate,
    affine_digit,
    affine_digits,
    get_dataset,
    pad_to_canvas,
    sample_affnist_params,
)
from selfcaps.data.affine import ink_box
from tests.data.formats import write_mnist


@pytest.fixture(scope="module")
def digits():
    return MNIST5k(train=False).data[:300]


def test_sampled_params_stay_in_published_ranges():
    g = torch.Generator().manual_seed(0)
    draws = [sample_affnist_params(g) for _ in range(5000)]
    for field, (lo, hi) in AFFNIST_RANGES.items():
        values = torch.tensor([getattr(p, field) for p in draws])
        assert lo <= values.min() and values.max() <= hi
        # uniform: both ends of the range are reached, the mean is central
        span = hi - lo
        assert values.min() < lo + 0.01 * span and values.max() > hi - 0.01 * span
        assert abs(values.mean().item() - (lo + hi) / 2) < 0.03 * span
    assert AFFNIST_RANGES == {
        "rotation_deg": (-20.0, 20.0),
        "shear": (-0.2, 0.2),
        "scale_x": (0.8, 1.2),
        "scale_y": (0.8, 1.2),
    }


def test_transform_is_deterministic_under_seed(digits):
    a = torch.stack([AffNISTLike(seed=3)(d) for d in digits[:5]])
    t = AffNISTLike(seed=3)
    b = torch.stack([t(d) for d in digits[:5]])
    c = torch.stack([AffNISTLike(seed=4)(d) for d in digits[:5]])
    assert a.shape == (5, 1, 40, 40) and a.dtype == torch.uint8
    assert torch.equal(a[0], b[0]) and not torch.equal(a, c)


def test_whole_digit_stays_inside_the_canvas(digits):
    t = AffNISTLike(seed=0)
    params = [t.draw(box) for box in ink_box(digits).tolist()]
    inside = affine_digits(digits, params, canvas=40)
    wide = affine_digits(digits, params, canvas=120)  # same placement, nothing can be cut off
    assert torch.equal(wide[:, :, 40:80, 40:80], inside)
    assert int(wide.sum()) == int(inside.sum())
    # offsets differ between images (random placement), within the canvas
    offsets = torch.tensor([p.offset for p in params])
    assert offsets.abs().max() < 20 and offsets.std(dim=0).min() > 1.0


def test_affine_digit_geometry():
    bar = torch.zeros(1, 28, 28, dtype=torch.uint8)
    bar[0, 13:15, 20:24] = 255  # a bar right of the centre
    assert torch.equal(affine_digit(bar, 0, 0, 1, 1, canvas=28), bar)  # identity
    up = affine_digit(bar, 90, 0, 1, 1, canvas=28)  # counter-clockwise: right -> up
    rows, cols = torch.nonzero(up[0], as_tuple=True)
    assert rows.max() < 13 and cols.min() >= 13 and cols.max() <= 14
    moved = affine_digit(bar, 0, 0, 1, 1, offset=(-3, 5))
    assert torch.equal(
        moved[0, 6 + 13 + 5 : 6 + 15 + 5, 6 + 20 - 3 : 6 + 24 - 3], bar[0, 13:15, 20:24]
    )
    centred = torch.zeros(1, 28, 28)
    centred[0, 12:16, 12:16] = 1.0
    wide = affine_digit(centred, 0, 0, 2.0, 0.5)  # area scales by scale_x * scale_y = 1
    assert wide.sum().item() == pytest.approx(16.0, rel=0.05)
    # 4 columns became 8: 6 full ones and a partial one on each side
    assert set(torch.nonzero(wide[0] > 0.99)[:, 1].tolist()) == set(range(17, 23))
    sheared = affine_digit(bar.float(), 0, 0.5, 1, 1, canvas=28)  # y=-0.5 row shifts by -0.25
    assert sheared.dtype == torch.float32 and math.isfinite(float(sheared.sum()))
    assert affine_digit(bar[0], 10, 0.1, 1, 1).shape == (40, 40)


def test_affine_params_matrix_composition():
    p = AffineParams(90.0, 0.5, 2.0, 3.0)
    (a, b), (c, d) = p.matrix()
    # R(90) = [[0, 1], [-1, 0]]; R @ [[1, .5], [0, 1]] @ diag(2, 3)
    assert [round(v, 12) for v in (a, b, c, d)] == [0.0, 3.0, -2.0, -1.5]


def test_pad_to_canvas_shifts_within_six_pixels():
    g = torch.Generator().manual_seed(0)
    img = torch.ones(1, 28, 28, dtype=torch.uint8)
    shifts = set()
    for _ in range(400):
        out = pad_to_canvas(img, 40, 6, g)
        assert out.shape == (1, 40, 40) and int(out.sum()) == 28 * 28  # whole digit kept
        rows, cols = torch.nonzero(out[0], as_tuple=True)
        shifts.add((int(cols.min()) - 6, int(rows.min()) - 6))
    assert {dx for dx, _ in shifts} == set(range(-6, 7)) == {dy for _, dy in shifts}


def test_canvas_translate_transform_in_v2_compose():
    t = v2.Compose([RandomCanvasTranslate(40, 6, seed=1), v2.ToDtype(torch.float32, scale=True)])
    out = t(torch.full((1, 28, 28), 255, dtype=torch.uint8))
    assert out.shape == (1, 40, 40) and float(out.sum()) == 28 * 28
    a = RandomCanvasTranslate(seed=5)
    b = RandomCanvasTranslate(seed=5)
    img = torch.rand(1, 28, 28)
    assert all(torch.equal(a(img), b(img)) for _ in range(5))


def test_affnist_like_from_mnist_files(tmp_path):
    written = write_mnist(tmp_path, n_test=30)
    ds = AffNISTLikeDataset(tmp_path)  # default: the test split
    assert ds.source == "mnist-test" and ds.data.shape == (30, 1, 40, 40)
    assert ds.targets.tolist() == written["test"][1].tolist()
    again = get_dataset("affnist_like", tmp_path, split="test")
    assert torch.equal(again.data, ds.data)
    assert (tmp_path / "cache").is_dir()  # generated once, cached
    other = AffNISTLikeDataset(tmp_path, distortion_seed=1, cache=False)
    assert not torch.equal(other.data, ds.data)
    assert AffNISTLikeDataset(tmp_path, train=True).source == "mnist-train"
    # the dataset equals the transform applied in index order
    t = AffNISTLike(seed=0)
    digits = torch.from_numpy(written["test"][0]).unsqueeze(1)
    assert torch.equal(torch.stack([t(d) for d in digits]), ds.data)


def test_affnist_like_falls_back_to_mnist5k(tmp_path):
    with pytest.warns(UserWarning, match="distorting the 1000 mnist5k-test digits"):
        ds = AffNISTLikeDataset(tmp_path / "empty")
    assert ds.source == "mnist5k-test" and len(ds) == 1000
    assert torch.equal(ds.targets, MNIST5k(train=False).targets)
