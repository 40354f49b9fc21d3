import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Run the tiny tensors of these tests on one thread (restored afterwards).

    On a shared 2-core machine, OpenMP's thread hand-off costs ~1 ms per op, which
    is most of the time of a 200 x 20 matmul; one thread keeps the suite fast.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
