"""Every method trains and evaluates under ``--precision bf16-mixed``, on a tiny budget.

SparseCaps on the embedded mnist5k (its affNIST-like test set then distorts those digits).
PoE's own bf16 test is in ``test_poe_e2e.py`` (its stage 2 once crashed under autocast, hidden
because the precision benchmark times only stage 1). The numbers are not compared with
float32 here: docs/benchmarks.md measures that over seeds.
"""

import json
import math

import pytest
import yaml

from selfcaps.cli import main
from tests.methods import test_coca_e2e, test_encapnet_e2e, test_mcae_e2e, test_sparsecaps_e2e

RUNS = {
    "coca": ["--epochs", "1", *test_coca_e2e.TINY],
    "sparsecaps": [
        "--epochs",
        "1",
        *test_sparsecaps_e2e.TINY_MODEL,
        *test_sparsecaps_e2e.TINY,
    ],
    "mcae": ["--pretrain-epochs", "1", "--finetune-epochs", "1", *test_mcae_e2e.TINY],
    "encapnet": [
        "--epochs",
        "1",
        "--data",
        "mnist5k",
        *test_encapnet_e2e.SMALL,
        "data.train_subset=128",
    ],
}


@pytest.mark.parametrize("method", sorted(RUNS))
def test_bf16_mixed_run_finishes_with_finite_metrics(method, tmp_path):
    out = tmp_path / "run"
    assert main(["run", method, "--out", str(out), "--precision", "bf16-mixed", *RUNS[method]]) == 0
    m = json.loads((out / "metrics.json").read_text())
    numbers = {k: v for k, v in m.items() if isinstance(v, float)}
    assert numbers and all(math.isfinite(v) for v in numbers.values()), numbers
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["trainer"]["precision"] == "bf16-mixed"
