"""experiments/poe_ablation.py: its arms against the presets, its report on hand-made runs."""

import json
from pathlib import Path

from tests.scripts import fake_run, load_script

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "poe_ablation.py"


def _poe_ablation():
    return load_script("poe_ablation")


def test_poe_ablation_arms_each_put_one_change_back_to_the_paper():
    from selfcaps.config.loading import load_config, parse_overrides

    module = _poe_ablation()
    full = load_config("poe", module.PRESET)
    quick = load_config("poe", "quick")  # the paper's settings at the same scale
    changed = {
        "no_center": {"model.center"},
        "w_over_children": {"model.normalize", "cd.lr_encoder"},
        "no_sparsity": {"cd.sparsity"},
        "paper_stage3_rule": {"cd.decoder_rule", "cd.lr_decoder"},
        "paper_generation": {"model.generation"},
    }
    assert set(module.ARMS) == {"full", *changed}
    for arm, keys in changed.items():
        cfg = load_config("poe", module.PRESET, parse_overrides(list(module.ARMS[arm])))
        for key in keys:
            section, name = key.split(".")
            assert cfg[section][name] != full[section][name], (arm, key)
            assert cfg[section][name] == quick[section][name], (arm, key)
    cmd = module.run_args(Path("/o"), "no_sparsity", 2, ["--data", "mnist"])
    assert cmd[:4] == ["run", "poe", "--preset", module.PRESET]
    assert cmd[-4:] == ["--no-progress", "cd.sparsity=0", "--data", "mnist"]
    assert "/o/no_sparsity_s2" in cmd and cmd[cmd.index("--seed") :][:2] == ["--seed", "2"]


def test_poe_ablation_report_by_arm_and_seed(tmp_path):
    module = _poe_ablation()
    runs = {
        "full_s0": (8, 80.0),
        "full_s1": (6, 70.0),
        "no_sparsity_s0": (1, 99.0),
        "stray_s0": (3, 10.0),  # not an arm: ignored
    }
    for name, (classes, purity) in runs.items():
        (tmp_path / name).mkdir()
        m = {"purity_classes_covered_restricted": classes, "purity_mean_restricted": purity}
        (tmp_path / name / "metrics.json").write_text(json.dumps(m))
    (tmp_path / "no_center_s0").mkdir()  # unfinished: no metrics.json
    rows = module.arm_table(tmp_path)
    assert len(rows) == 4
    full = rows[2].split(" | ")
    assert full[0] == "| full" and full[2] == "2"
    assert full[3] == "7.0 +- 1.4 (8, 6)" and full[4] == "75.0 +- 7.1 (80, 70)"
    assert full[5] == "-"  # the complete domain's keys are absent from these runs
    assert rows[3].startswith("| no_sparsity | cd.sparsity=0 | 1 | 1.0 (1) | 99.0 (99) |")


def test_poe_ablation_resumes_a_stopped_run_and_reports_only_finished_ones(tmp_path, monkeypatch):
    module = _poe_ablation()
    fake_run(tmp_path / "full_s0", {"purity_classes_covered": 9})  # finished
    stopped = fake_run(tmp_path / "full_s1", {"stopped_by": "signal"})
    calls = []
    monkeypatch.setattr(module.subprocess, "run", lambda cmd, check: calls.append(cmd[1:]))
    argv = ["poe_ablation.py", "run", str(tmp_path), "--arms", "full"]
    monkeypatch.setattr(module.sys, "argv", argv)
    module.main()
    resume = ["-m", "selfcaps", "run", "poe", "--out", str(stopped), "--resume", "--no-progress"]
    assert calls[0] == resume
    assert calls[1][:4] == ["-m", "selfcaps", "run", "poe"]
    assert str(tmp_path / "full_s2") in calls[1]
    assert len(calls) == 2  # seed 0 is finished: not run again
    rows = module.arm_table(tmp_path)
    assert rows[2].startswith("| full | (the preset) | 1 |")  # the stopped seed is left out
