"""experiments/run_state.sh: the shell scripts tell a finished run from one a signal stopped."""

import re
import subprocess
from pathlib import Path

from tests.scripts import EXPERIMENTS, fake_run


def _finished(run_dir: Path) -> bool:
    script = f'source "{EXPERIMENTS / "run_state.sh"}"; finished "$1"'
    proc = subprocess.run(["bash", "-c", script, "bash", str(run_dir)], capture_output=True)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return proc.returncode == 0


def test_finished_is_false_for_a_stopped_a_missing_and_an_unreadable_run(tmp_path):
    assert _finished(fake_run(tmp_path / "done", {"finetune_top1": 61.0}))
    assert not _finished(fake_run(tmp_path / "stopped", {"stopped_by": "signal"}))
    assert not _finished(tmp_path / "never_started")
    broken = fake_run(tmp_path / "broken", {})
    (broken / "metrics.json").write_text("{not json")
    assert not _finished(broken)


def test_no_experiment_script_takes_a_metrics_json_for_a_finished_run():
    """``[ -f RUN/metrics.json ] || selfcaps run`` skips a run SIGTERM stopped; the scripts use
    ``finished RUN || selfcaps run ... --resume``, which continues it."""
    for script in sorted(EXPERIMENTS.glob("*.sh")):
        text = script.read_text()
        assert not re.search(r"\[ -[ef] [^]]*metrics\.json\" \] \|\|", text), script.name
        for line in re.findall(r"finished \"\$\w+\" \|\|.*", text):
            assert "--resume" in line, (script.name, line)
