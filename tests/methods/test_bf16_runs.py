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


def test_vote_precision_bf16_reaches_the_training_steps(tmp_path):
    """``trainer.vote_precision=bf16`` trains (finite) and changes the weights a seed gives.

    On the CPU the bf16 votes are a float32 product of bfloat16-rounded inputs: the same seed
    gives other weights than float32 votes, which shows the key reached the capsule layers.
    """
    from safetensors.torch import load_file

    weights = {}
    for precision in ("float32", "bf16"):
        out = tmp_path / precision
        args = [
            "run",
            "coca",
            "--out",
            str(out),
            *RUNS["coca"],
            f"trainer.vote_precision={precision}",
        ]
        assert main(args) == 0
        m = json.loads((out / "metrics.json").read_text())
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        weights[precision] = load_file(out / "model.safetensors")
    differ = [k for k in weights["bf16"] if not weights["bf16"][k].equal(weights["float32"][k])]
    assert differ, "bf16 votes trained the same weights as float32 votes"


def test_vote_precision_is_checked_before_torch(tmp_path, capsys):
    assert main(["run", "coca", "--out", str(tmp_path / "r"), "trainer.vote_precision=fp8"]) == 2
    assert "trainer.vote_precision" in capsys.readouterr().err
