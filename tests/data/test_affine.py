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
from selfcaps.data.affine import (
    AFFNIST_VERSIONS,
    affine_matrices,
    draw_affnist,
    ink_box,
    warp_digits,
)
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


def _hand_matrix(rotation_deg, shear, scale_x, scale_y):
    """R(rotation) @ [[1, shear], [0, 1]] @ diag(scale_x, scale_y), multiplied out by loops."""
    c, s = math.cos(math.radians(rotation_deg)), math.sin(math.radians(rotation_deg))
    factors = ([[c, s], [-s, c]], [[1.0, shear], [0.0, 1.0]], [[scale_x, 0.0], [0.0, scale_y]])
    out = [[1.0, 0.0], [0.0, 1.0]]
    for f in factors:
        out = [[sum(out[i][k] * f[k][j] for k in range(2)) for j in range(2)] for i in range(2)]
    return out


def test_affine_matrices_match_hand_computed_products():
    # 30 degrees, shear 0.1, scales 0.9 / 1.1: c = 0.8660254, s = 0.5
    # R @ Sh = [[c, c * 0.1 + s], [-s, -s * 0.1 + c]] = [[0.8660254, 0.5866025], [-0.5, 0.8160254]]
    # @ diag(0.9, 1.1) = [[0.7794229, 0.6452628], [-0.45, 0.8976279]]
    got = affine_matrices(torch.tensor([[30.0, 0.1, 0.9, 1.1]], dtype=torch.float64))[0]
    expected = torch.tensor([[0.7794229, 0.6452628], [-0.45, 0.8976279]], dtype=torch.float64)
    torch.testing.assert_close(got, expected, atol=1e-7, rtol=0)
    g = torch.Generator().manual_seed(3)
    params = torch.rand(50, 4, generator=g, dtype=torch.float64) * 2 - 0.5
    by_hand = torch.tensor([_hand_matrix(*row) for row in params.tolist()], dtype=torch.float64)
    torch.testing.assert_close(affine_matrices(params), by_hand)


def test_warp_puts_a_source_point_at_a_p_plus_offset():
    """One bright source pixel lands where the hand-computed A p + offset says."""
    src = torch.zeros(1, 1, 28, 28)
    src[0, 0, 9, 20] = 1.0  # p = (20 - 13.5, 9 - 13.5) = (6.5, -4.5) from the centre
    a = _hand_matrix(-15.0, 0.2, 1.2, 0.8)
    offset = (3.0, -2.0)
    out = warp_digits(
        src, torch.tensor([a], dtype=torch.float64), torch.tensor([offset], dtype=torch.float64)
    )[0, 0]
    rows, cols = torch.meshgrid(torch.arange(40.0), torch.arange(40.0), indexing="ij")
    centroid = ((out * cols).sum() / out.sum() - 19.5, (out * rows).sum() / out.sum() - 19.5)
    target = [a[i][0] * 6.5 + a[i][1] * -4.5 + offset[i] for i in range(2)]
    assert centroid[0].item() == pytest.approx(target[0], abs=0.3)
    assert centroid[1].item() == pytest.approx(target[1], abs=0.3)


def test_affnist_like_holds_32_versions_of_every_digit(tmp_path):
    written = write_mnist(tmp_path, n_test=30)
    ds = AffNISTLikeDataset(tmp_path)  # default: the test split
    n = 30
    assert ds.source == "mnist-test" and len(ds) == 32 * n and ds.versions == AFFNIST_VERSIONS
    # transformation-major: image i is version i // 30 of digit i % 30
    assert ds.targets.tolist() == written["test"][1].tolist() * 32
    index = torch.arange(len(ds))
    assert torch.equal(ds.draws.digit(index), index % n)
    assert torch.equal(ds.draws.version(index), index // n)
    # 32 different transformations of each digit
    per_digit = ds.draws.params.reshape(32, n, 4)
    assert all(len({tuple(v) for v in per_digit[:, j].tolist()}) == 32 for j in range(n))
    # every image is its digit warped by its own hand-computed matrix and offset
    digits = torch.from_numpy(written["test"][0]).unsqueeze(1)
    for i in (0, 29, 30, 517, len(ds) - 1):
        a = _hand_matrix(*ds.draws.params[i].tolist())
        torch.testing.assert_close(ds.draws.matrices[i], torch.tensor(a, dtype=torch.float64))
        by_hand = warp_digits(
            digits[i % n : i % n + 1],
            torch.tensor([a], dtype=torch.float64),
            ds.draws.offsets[i : i + 1],
        )[0]
        assert torch.equal(ds[i][0], by_hand)
    picked = [5, 900, 31]
    chosen = ds.select(picked)
    assert torch.equal(chosen.data, ds.data[picked]) and chosen.targets.tolist() == [
        int(ds.targets[i]) for i in picked
    ]
    again = get_dataset("affnist_like", tmp_path, split="test")
    assert torch.equal(again.data, ds.data)  # deterministic under the seed
    assert not torch.equal(AffNISTLikeDataset(tmp_path, distortion_seed=1).data, ds.data)
    train = AffNISTLikeDataset(tmp_path, train=True)
    assert train.source == "mnist-train" and len(train) == 32 * 20  # write_mnist: 20 digits
    with pytest.raises(IndexError, match=r"indices must lie in \[0, 960\)"):
        ds.images(torch.tensor([960]))


def test_affnist_like_draws_cover_the_ranges_and_keep_digits_whole(digits):
    draws = draw_affnist(ink_box(digits), 32, torch.Generator().manual_seed(0))
    assert draws.params.shape == (32 * len(digits), 4)
    for column, (lo, hi) in enumerate(AFFNIST_RANGES.values()):
        values = draws.params[:, column]
        span = hi - lo  # uniform: within the range, both ends reached, the mean central
        assert lo <= values.min() and values.max() <= hi
        assert values.min() < lo + 0.01 * span and values.max() > hi - 0.01 * span
        assert abs(values.mean().item() - (lo + hi) / 2) < 0.02 * span
    # recovered from the matrices by hand: A = R Sh S gives a00 = c sx, a10 = -s sx, det = sx sy
    a = draws.matrices
    rotation = torch.rad2deg(torch.atan2(-a[:, 1, 0], a[:, 0, 0]))
    torch.testing.assert_close(rotation, draws.params[:, 0])
    torch.testing.assert_close(torch.hypot(a[:, 0, 0], a[:, 1, 0]), draws.params[:, 2])
    det = a[:, 0, 0] * a[:, 1, 1] - a[:, 0, 1] * a[:, 1, 0]
    torch.testing.assert_close(det, draws.params[:, 2] * draws.params[:, 3])
    assert det.min() >= 0.64 and det.max() <= 1.44
    # every version is placed whole: the 40x40 image is the middle of a wider canvas
    pick = torch.arange(0, len(draws.params), 7)
    src = digits[draws.digit(pick)]
    inside = warp_digits(src, draws.matrices[pick], draws.offsets[pick], 40)
    wide = warp_digits(src, draws.matrices[pick], draws.offsets[pick], 120)
    assert torch.equal(wide[:, :, 40:80, 40:80], inside)
    assert int(wide.sum()) == int(inside.sum())
    assert draws.offsets.abs().max() < 20 and draws.offsets.std(dim=0).min() > 1.0


def test_affnist_like_falls_back_to_mnist5k(tmp_path):
    with pytest.warns(UserWarning, match="distorting the 1000 mnist5k-test digits"):
        ds = AffNISTLikeDataset(tmp_path / "empty")
    assert ds.source == "mnist5k-test" and len(ds) == 32 * 1000
    assert torch.equal(ds.targets[:1000], MNIST5k(train=False).targets)


def test_place_in_canvases_equals_a_loop_of_place_in_canvas():
    """Every shift, pixels cut at each border, images wholly off the canvas, an image larger
    than its canvas, odd margins: equal to the per-image function image by image."""
    from selfcaps.data.affine import place_in_canvas, place_in_canvases

    g = torch.Generator().manual_seed(0)
    for channels, side, size in [(1, 28, 40), (3, 5, 8), (1, 6, 5), (2, 4, 7)]:
        shifts = torch.arange(-size - side - 2, size + side + 3)
        n = len(shifts)
        images = torch.randint(1, 256, (n, channels, side, side), dtype=torch.uint8, generator=g)
        dx = shifts[torch.randperm(n, generator=g)]
        dy = shifts
        got = place_in_canvases(images, size, dx, dy)
        want = torch.stack(
            [place_in_canvas(images[i], size, int(dx[i]), int(dy[i])) for i in range(n)]
        )
        assert got.dtype == torch.uint8 and torch.equal(got, want)
        # a plain layout (a one-channel batch too), so the first convolution sees what it did
        assert got.stride() == (channels * size * size, size * size, size, 1)
        assert (want.flatten(1).amax(1) == 0).any() and (want.flatten(1).amax(1) > 0).any()
