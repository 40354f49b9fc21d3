"""A mistyped command line gets the nearest right spelling, not a dump of every choice."""

import pytest

from selfcaps.cli import main


@pytest.mark.parametrize(
    ("argv", "expected", "absent"),
    [
        (["run", "CoCa"], ["unknown method 'CoCa'", "Did you mean 'coca'"], []),
        # the nearest keys, not all of them
        (["run", "coca", "lr=0.1"], ["unknown config key 'lr'", "'optim.lr'", "--show-config"],
         ["augment.blur_prob"]),
        (["run", "coca", "optim.lr", "0.1"], ["key=value: optim.lr=0.1"], []),
        # long options are never abbreviated: --max-step is not --max-steps
        (["run", "coca", "--max-step", "20"], ["unrecognized arguments: --max-step 20",
                                              "did you mean --max-steps?"], []),
        (["list", "models", "--pat", "x*"], ["unrecognized arguments: --pat", "--pattern?"], []),
    ],
)  # fmt: skip
def test_mistakes_get_a_suggestion(argv, expected, absent, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, err
    for text in absent:
        assert text not in err, err


def test_show_config_prints_every_key_with_its_value(capsys):
    assert main(["run", "coca", "--show-config", "optim.lr=0.1"]) == 0
    out = capsys.readouterr().out
    assert "  lr: 0.1\n" in out and "method: coca\n" in out and "preset: quick\n" in out
