"""EncapNet's Table 3 experiment: every arm is a valid run, quotes are the paper's, the report."""

import json
import re
from pathlib import Path

import pytest

from selfcaps.cli.main import build_parser
from selfcaps.config.loading import load_config
from selfcaps.methods.encapnet import EncapNetMethod
from tests.repo_paths import from_repo
from tests.scripts import load_script

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
PAPER = Path(__file__).resolve().parents[2] / "shared" / "papers" / "003_d7e0021b52167ec4.txt"


def _load(name):
    return load_script(name)


table3 = _load("encapnet_table3")
report = _load("encapnet_table3_report")


def _config(arm, steps=200):
    """The resolved configuration of one run, as `selfcaps run` builds it (no data read)."""
    from selfcaps.cli.run import spec_from_args
    from selfcaps.run import train as run

    argv = table3.run_args(Path("/nonexistent/out"), arm, 0, steps, "/nonexistent/data")
    args, extra = build_parser(argv).parse_known_args(argv)
    args.overrides = list(args.overrides) + extra
    old = run.check_run_data
    run.check_run_data = lambda *a: None
    try:
        cfg = run.prepare_run(spec_from_args(args))[0]
    finally:
        run.check_run_data = old
    return cfg


def test_budget_gives_the_requested_steps():
    assert table3.budget_args(200) == ["--epochs", "1", "data.train_subset=25600"]
    # 1,053 steps = the quick preset's 3 epochs of 351 steps over all 45,000 images
    assert table3.budget_args(1053) == [
        *("--epochs", "3", "data.train_subset=null", "trainer.max_steps=1053"),
    ]
    assert table3.budget_args(400)[:2] == ["--epochs", "2"]  # 400 * 128 > 45,000
    with pytest.raises(ValueError, match="--steps"):
        table3.budget_args(0)


@pytest.mark.parametrize("arm", list(table3.ARMS))
def test_every_arm_builds(arm):
    cfg = _config(arm)
    method = EncapNetMethod(cfg)
    expected_units = {"on": 3, "twoots": 5, "reference": 2, "resnet_on": 3, "kl": 3}
    if arm in expected_units:
        assert len(method.feedback) == expected_units[arm]
    if arm.endswith("_noskip") or arm == "v3_skip":
        assert not cfg.loss.ot and cfg.model.skip == ("module" if arm == "v3_skip" else "none")
    if arm.startswith("resnet"):
        assert type(method.network).__name__ == "EncapResNet"


def test_reference_arm_has_the_reference_presets_unit_settings():
    ref, arm = load_config("encapnet", "reference"), _config("reference")
    for key in ("ot_weight", "cost", "encapsulated_generator", "detach_plan", "debias"):
        assert arm.loss[key] == ref.loss[key], key
    # the reference code's option defaults (option/option.py): --ot_loss_fac 1, C_form l2,
    # no --encapsulate_G, no --no_bp_P_L, no --remove_bias
    assert (ref.loss.ot_weight, ref.loss.cost) == (1.0, "euclidean")
    assert (ref.loss.encapsulated_generator, ref.loss.detach_plan, ref.loss.debias) == (
        False,
        False,
        True,
    )
    assert _config("reference", 1053).trainer.max_steps == 1053


def test_cases_compare_arms_that_differ_in_one_thing():
    on, off = _config("on"), _config("off")
    assert on.loss.ot and not off.loss.ot and on.model == off.model
    for arm, key, value in [
        ("nodebias", "debias", False),
        ("plangrad", "detach_plan", False),
        ("noextractor", "extractor", False),
        ("plaingen", "encapsulated_generator", False),
        ("euclid", "cost", "euclidean"),
        ("kl", "divergence", "kl"),
    ]:
        cfg = _config(arm)
        changed = [k for k in on.loss if cfg.loss[k] != on.loss[k]]
        assert changed == [key] and cfg.loss[key] == value, arm


@pytest.mark.skipif(not PAPER.exists(), reason=f"the paper's text is not at {from_repo(PAPER)}")
def test_every_quote_is_the_papers_text():
    def norm(s):  # one space for any whitespace; hyphens dropped (the text breaks "co-\nefficient")
        return re.sub(r"\s+", " ", re.sub(r"-\s*", "", s)).strip()

    text = norm(PAPER.read_text())
    for case in table3.CASES:
        if case.paper_case == "-":
            continue
        for part in case.quote.split("[...]"):
            assert norm(part) in text, case.name


def _write(root, arm, seed, top1):
    run = root / f"{arm}_s{seed}"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"test_top1": top1, "steps": 200}))


def test_report_pairs_by_seed_and_words_the_verdict(tmp_path):
    for seed, (on, off) in enumerate([(40.0, 43.0), (41.0, 45.0), (39.0, 44.0)]):
        _write(tmp_path, "on", seed, on)
        _write(tmp_path, "off", seed, off)
    _write(tmp_path, "kl", 0, 42.0)  # two seeds: differences -1, +1
    _write(tmp_path, "kl", 1, 46.0)
    (tmp_path / "kl_s2").mkdir()  # stopped by SIGTERM: no test_top1, not a result
    (tmp_path / "kl_s2" / "metrics.json").write_text('{"steps": 90, "stopped_by": "signal"}')
    for seed, (a, b) in enumerate([(50.0, 49.0), (51.0, 50.0), (50.5, 49.0)]):
        _write(tmp_path, "resnet_on", seed, a)
        _write(tmp_path, "resnet_kl", seed, b)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in report.table(tmp_path)}
    # differences -3, -4, -5: mean -4, sd 1, t(0.975, 2) = 4.303 -> +-4.303 / sqrt(3) = 2.48
    assert "| -4.00 [-6.48, -1.52] (-3.00, -4.00, -5.00) | reversed |" in rows["ot"]
    assert "on 40.00 +- 1.00 (n = 3)" in rows["ot"]
    # two shared seeds: no interval, no verdict
    assert rows["kl"].endswith("| +0.00 (per seed: -1.00, +1.00) | not resolved (too few seeds) |")
    # "barely matter": +1, +1, +1.5: mean 1.1667, sd 0.2887 -> +-0.717: excludes 0
    assert "| +1.17 [+0.45, +1.88]" in rows["sinkhorn_vs_kl_resnet"]
    assert rows["sinkhorn_vs_kl_resnet"].endswith("| reversed |")
    assert "| resnet_on ahead |" not in rows["sinkhorn_vs_kl_resnet"]
    assert "aide" in report.table(tmp_path)[-1]  # cases without runs are listed


def test_finished_runs_are_skipped_and_other_budgets_refused(tmp_path, capsys):
    _write(tmp_path, "off", 0, 41.0)  # a 200-step run
    table3.main([str(tmp_path), "--case", "ot", "--seeds", "0", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# done: ") and "off_s0" in lines[0]
    assert not lines[1].startswith("#") and "on_s0" in lines[1]
    with pytest.raises(SystemExit, match="200 steps, not --steps 1053"):
        table3.main([str(tmp_path), "--case", "ot", "--seeds", "0", "--steps", "1053", "--dry-run"])


def test_interrupted_runs_are_resumed_not_refused(tmp_path, capsys):
    run = tmp_path / "off_s0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    # what a run stopped by SIGTERM after 125 of its 200 steps leaves
    (run / "metrics.json").write_text(json.dumps({"steps": 125, "stopped_by": "signal"}))
    table3.main([str(tmp_path), "--case", "ot", "--seeds", "0", "--dry-run"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"-m selfcaps run encapnet --out {run} --resume --no-progress"
