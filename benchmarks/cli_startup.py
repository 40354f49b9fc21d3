"""Start-up time of the ``selfcaps`` command against an empty Python start.

Runs ``python -m selfcaps ARGS`` and ``python -c pass`` alternately in fresh
processes (so machine noise hits both) and prints the median of each and the
median of the per-round ratios. That ``--version``, ``--help``, ``list`` and
configuration errors load no heavy package (torch, Lightning) is asserted by
tests/cli/test_startup.py.

    python benchmarks/cli_startup.py [--rounds 9] [--src OTHER/src] [-- ARGS...]
    (default ARGS: --version)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from _common import interleaved_ratio, load_average

SRC = Path(__file__).resolve().parents[1] / "src"


def _runner(argv: list[str], src: Path):
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def run() -> None:
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--src", type=Path, default=SRC, help="the src/ of another checkout to time")
    p.add_argument("args", nargs="*", default=["--version"], help="selfcaps arguments")
    a = p.parse_args()
    cli = _runner([sys.executable, "-m", "selfcaps", *a.args], a.src)
    empty = _runner([sys.executable, "-c", "pass"], a.src)
    t_cli, t_empty, ratio = interleaved_ratio(cli, empty, rounds=a.rounds)
    print(f"selfcaps {' '.join(a.args)}: {t_cli:.3f} s   python -c pass: {t_empty:.3f} s")
    print(f"ratio (median of {a.rounds} interleaved rounds): {ratio:.2f}x")
    print(f"load average {load_average():.1f}")


if __name__ == "__main__":
    main()
