"""Per-image seeding of the training transforms: torch.manual_seed's draws, CPU only."""

import pytest
import torch
from torch.utils.data import TensorDataset

from selfcaps.data.datamodule import SeededTransformDataset, mix_seed


def noisy(img: torch.Tensor) -> torch.Tensor:
    """A random transform drawing from the global CPU generator, as torchvision's do."""
    return img + torch.randn_like(img) + torch.rand(()) * torch.randint(0, 9, ())


@pytest.fixture
def data():
    images = torch.arange(5 * 3 * 4 * 4, dtype=torch.float32).reshape(5, 3, 4, 4)
    return SeededTransformDataset(TensorDataset(images, torch.arange(5)), noisy, seed=11)


def test_items_draw_what_torch_manual_seed_draws(data):
    """The seed of item ``(epoch, index)`` is ``mix_seed(seed, epoch, index)``, and the draws
    are those of ``torch.manual_seed`` with that seed (the behaviour before the change)."""
    for epoch, index in ((0, 0), (0, 4), (3, 2)):
        torch.manual_seed(mix_seed(11, epoch, index))
        expected = noisy(data.base[index][0])
        got, target = data[(epoch, index)]
        assert torch.equal(got, expected) and target == index
    assert not torch.equal(data[(0, 1)][0], data[(1, 1)][0])  # another epoch, other draws


def test_items_leave_the_global_generator_as_they_found_it(data):
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    data[(2, 3)]
    assert torch.equal(torch.random.get_rng_state(), before)


def test_items_do_not_seed_accelerators(data, monkeypatch):
    """Seeding CUDA per image formats the Python stack for its lazy initialisation (about 1 ms
    a call): an item must not do it."""

    def forbidden(seed: int) -> None:
        raise AssertionError("an item seeded the accelerators")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", forbidden)
    assert data[(0, 2)][1] == 2
