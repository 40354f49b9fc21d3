r"""Run ``selfcaps`` on the CPU with the code path a GPU takes: does that path train as well?

On an accelerator the hot loops take another path than on a CPU (``selfcaps.caps.chunking``:
whole batches instead of cache-sized chunks, EncapNet's fused ReLU-and-squash without the
overflow rescaling, the branch-free forms without host reads); the tests hold each piece to the
CPU path in float64. This runs a whole command inside ``sized_for("accelerator")``, on the CPU,
so that a claim's arm can be paired, seed for seed, with the same arm on the CPU path: the two
differ by float rounding, which training then amplifies, so the comparison is between seeds'
results, not bit for bit.

Every argument is passed to ``selfcaps`` (its CLI, as typed after ``selfcaps``)::

    python experiments/accelerator_path_on_cpu.py run encapnet --preset quick --data cifar10 \
        --epochs 1 --variant master_aide --ot on --seed 0 --threads 1 --data-root DIR --out OUT
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from selfcaps.caps.chunking import sized_for
from selfcaps.cli.main import main


def run(argv: Sequence[str]) -> int:
    """``selfcaps ARGV`` with the hot loops sized as on an accelerator; its exit code."""
    with sized_for("accelerator"):
        return main(list(argv))


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
