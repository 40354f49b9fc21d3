"""The EncapNet ablation report's per-arm table, on hand-made rows with hand-computed numbers."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "encapnet_feedback_report.py"


def load_report():
    spec = importlib.util.spec_from_file_location("encapnet_feedback_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arm_table_pairs_each_arm_with_off_by_seed():
    rows = [
        {"run": "off_s0", "test top-1": "40.00"},
        {"run": "off_s1", "test top-1": "44.00"},
        {"run": "lambda1_s0", "test top-1": "39.00"},
        {"run": "lambda1_s1", "test top-1": "42.00"},
        {"run": "eps01_s1", "test top-1": "41.00"},  # one seed: paired with off's seed 1 only
        {"run": "off_beta99_s0", "test top-1": "45.00"},
        {"run": "lambda1_beta99_s0", "test top-1": "44.50"},  # paired with off_beta99
    ]
    table = load_report().arm_table(rows)
    by_arm = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert "42.00 +- 2.83" in by_arm["off"]  # sd of 40, 44 = sqrt(8)
    # differences -1 and -2: mean -1.5, sd sqrt(0.5), t(0.975, 1) = 12.706 -> +-6.35
    assert "-1.50 (-1.00, -2.00) [-7.85, +4.85], not resolved at this budget" in by_arm["lambda1"]
    assert by_arm["eps01"].endswith("| 41.00 | -3.00 (-3.00) |")
    assert by_arm["lambda1_beta99"].endswith("| 44.50 | -0.50 (-0.50) vs off_beta99 |")
    assert by_arm["off_beta99"].endswith("| 45.00 | - |")
