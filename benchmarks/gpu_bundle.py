"""What ``gpu_check.py`` needs on an offline GPU machine, in one folder that travels with the code.

A GPU machine without internet access and without the data, with PyTorch, Lightning, timm and
scikit-learn installed but not selfcaps' other dependencies, can run ``gpu_check.py`` from a
copy of this checkout plus one folder (``--out``, default ``.gpu/``; keep it out of git, e.g.
``echo /.gpu/ >> .git/info/exclude``) holding:

* ``data/MNIST/raw/*.gz``: the four MNIST IDX files gzipped (about 11 MB; the loaders read
  ``.gz`` as the official release ships it);
* ``data/cifar10/{train,test}/<class>/*.png``: the first ``--cifar-train`` and ``--cifar-test``
  images of each class by file name (500 and 100 by default: 6,000 PNGs, about 15 MB), in
  the ImageFolder layout the CIFAR-10 loader reads;
* ``wheels/``: wheels of the packages named by ``--packages`` at the versions installed here
  (the ones the tests ran with), built for ``--python-version`` on x86-64 Linux, each with
  ``pip download --no-deps`` (pure-Python ones build here with ``pip wheel`` if the index has
  no wheel).

It prints the size of each part, refuses a bundle over ``--limit-mib`` (a transfer limit), and
prints the command that installs the wheels there and runs the check: every method in both
precisions (``--eager-s``, 420 s), then each compiled row of ``--compiled`` (``METHOD:PRECISION``,
default CoCa's float32 row) within ``--compile-s`` (140 s) each, one call of under 10 minutes
(the checks' start-ups, their GEMM peaks and the wheels' installation take about 25 s more;
a command that would not fit is refused). A row that starts late gets only the budget left, so
the first check ends near its budget; at ``gpu_check.py``'s estimate of 35-45 s a row its ten
rows fit in 420 s, and a slower GPU loses the last ones (PoE), not the compiled row.

EncapNet's compiled steps are, by the CPU's projection (docs/benchmarks.md), its only route to
10x; how long inductor takes to compile them for a GPU is not known. ``--eager-s 0`` leaves the
eager check out, for a second call of compiled rows only::

    python benchmarks/gpu_bundle.py --data-root DIR [--out .gpu] [--no-wheels]
    python benchmarks/gpu_bundle.py --data-root DIR --eager-s 0 --compile-s 180 \\
        --compiled encapnet:32-true encapnet:bf16-mixed coca:bf16-mixed
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from _method_steps import METHODS
from gpu_check import PRECISIONS
from selfcaps.data.cifar import CIFAR10_CLASSES
from selfcaps.run.provenance import NOT_A_CHECKOUT, git_commit

#: selfcaps' dependencies that a GPU image with torch, Lightning, timm and scikit-learn lacks.
PACKAGES = ("mlxtend", "omegaconf", "antlr4-python3-runtime", "geomloss")
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def mnist_gz(root: Path, out: Path) -> list[Path]:
    """Gzip the four MNIST IDX files of ``root/MNIST/raw`` (plain or ``.gz``) into ``out``."""
    src, dst = root / "MNIST" / "raw", out / "MNIST" / "raw"
    dst.mkdir(parents=True, exist_ok=True)
    written = []
    for name in MNIST_FILES:
        plain, packed = src / name, src / f"{name}.gz"
        target = dst / f"{name}.gz"
        if packed.is_file():
            shutil.copyfile(packed, target)
        elif plain.is_file():
            with plain.open("rb") as f, gzip.open(target, "wb", compresslevel=9) as g:
                shutil.copyfileobj(f, g)
        else:
            raise FileNotFoundError(f"{plain}(.gz) not found: is {root} a data root with MNIST?")
        written.append(target)
    return written


def cifar_subset(root: Path, out: Path, per_class: dict[str, int]) -> list[Path]:
    """Copy the first ``per_class[split]`` PNGs of each class (by file name) of
    ``root/cifar10/<split>/<class>/`` into the same layout under ``out``."""
    written = []
    for split, n in per_class.items():
        for name in CIFAR10_CLASSES:
            src = root / "cifar10" / split / name
            files = sorted(src.glob("*.png"))[:n]
            if len(files) < n:
                raise FileNotFoundError(f"{src}: expected at least {n} PNGs, found {len(files)}")
            dst = out / "cifar10" / split / name
            dst.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copyfile(f, dst / f.name)
                written.append(dst / f.name)
    return written


def pinned(packages: Sequence[str]) -> list[str]:
    """``name==version`` of each package as installed here."""
    return [f"{p}=={importlib.metadata.version(p)}" for p in packages]


def download_argv(requirement: str, dest: Path, python_version: str) -> list[str]:
    """``pip download`` of one wheel for ``python_version`` on x86-64 Linux, no dependencies."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    return [*argv, "-d", str(dest), requirement]


def wheels(packages: Sequence[str], dest: Path, python_version: str) -> list[Path]:
    """Wheels of ``packages`` (pinned to the versions here) in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for req in pinned(packages):
        got = subprocess.run(download_argv(req, dest, python_version), capture_output=True)
        if got.returncode:  # no wheel on the index: build one (pure Python) here
            build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), req]
            subprocess.run(build, check=True, capture_output=True)
    return sorted(dest.glob("*.whl"))


def mib(paths: Sequence[Path]) -> float:
    """Total size of ``paths`` in MiB."""
    return sum(p.stat().st_size for p in paths) / 2**20


#: The device tool's limit on one call, and what the command spends outside the checks' budgets.
CALL_LIMIT_S = 600.0
OVERHEAD_S = 25.0
#: Compiled rows of the printed command by default: CoCa's float32 step.
COMPILED = ("coca:32-true",)


def compiled_rows(pairs: Sequence[str]) -> list[tuple[str, str]]:
    """``METHOD:PRECISION`` strings as pairs, each checked against ``gpu_check.py``'s choices."""
    out = []
    for pair in pairs:
        method, _, precision = pair.partition(":")
        if method not in METHODS or precision not in PRECISIONS:
            raise ValueError(
                f"--compiled {pair!r}: expected METHOD:PRECISION with METHOD one of "
                f"{', '.join(METHODS)} and PRECISION one of {', '.join(PRECISIONS)}"
            )
        out.append((method, precision))
    return out


def device_command(
    out: Path,
    with_wheels: bool,
    eager_s: float = 420.0,
    compile_s: float = 140.0,
    commit: str | None = None,
    compiled: Sequence[str] = COMPILED,
) -> str:
    """The shell command that runs the check on the GPU machine from this checkout's root.

    Every method in both precisions within ``eager_s`` seconds (0: none), then (``compile_s`` > 0)
    each compiled ``METHOD:PRECISION`` row of ``compiled`` within ``compile_s``: one call of
    under 10 minutes. All append to ``$OUT/rows.jsonl`` and ``$OUT/log``; each check runs
    whatever the previous one's exit. ``commit`` (this checkout's, where the bundle is made)
    goes into every row: the device machine gets a copy of the tree without ``.git``.

    Raises:
        ValueError: A pair of ``compiled`` is not a method and precision of ``gpu_check.py``,
            the budgets with :data:`OVERHEAD_S` pass :data:`CALL_LIMIT_S`, or nothing runs.
    """
    pairs = compiled_rows(compiled)  # checked even when --compile-s 0 leaves them out
    rows = pairs if compile_s > 0 else []
    total = eager_s + compile_s * len(rows) + OVERHEAD_S
    if total > CALL_LIMIT_S:
        raise ValueError(
            f"the command would take up to {total:g} s ({eager_s:g} eager + {len(rows)} x "
            f"{compile_s:g} compiled + {OVERHEAD_S:g}), over the {CALL_LIMIT_S:g} s of one "
            "device call: lower --eager-s or --compile-s, or name fewer --compiled rows"
        )
    install = ""
    if with_wheels:
        install = (
            "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "
            f"--upgrade --target /tmp/site {out}/wheels/*.whl && "
        )
    check = f"python3 benchmarks/gpu_check.py --data-root {out}/data --jsonl $OUT/rows.jsonl"
    if commit:
        check += f" --commit {shlex.quote(commit)}"
    checks = [f"{check} --budget-s {eager_s:g} 2>&1 | tee $OUT/log"] if eager_s > 0 else []
    checks += [
        f"{check} --compile --warmup 5 --methods {method} --precisions {precision} "
        f"--method-cap-s {compile_s:g} --budget-s {compile_s:g} 2>&1 | tee -a $OUT/log"
        for method, precision in rows
    ]
    if not checks:
        raise ValueError("nothing to run: --eager-s 0 and no compiled row")
    setup = f"set -o pipefail; {install}export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1"
    return f"{setup} || exit 1; " + "; ".join(checks)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``None``: ``sys.argv``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--data-root", type=Path, required=True, help="holds MNIST/raw and cifar10/")
    p.add_argument("--out", type=Path, default=Path(".gpu"))
    p.add_argument("--cifar-train", type=int, default=500, help="training PNGs per class")
    p.add_argument("--cifar-test", type=int, default=100, help="test PNGs per class")
    p.add_argument("--packages", nargs="*", default=list(PACKAGES))
    p.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    p.add_argument("--no-wheels", action="store_true", help="data only")
    p.add_argument("--limit-mib", type=float, default=60.0, help="refuse a larger bundle")
    p.add_argument(
        "--eager-s", type=float, default=420.0, help="the eager check's budget (0: no eager check)"
    )
    p.add_argument(
        "--compile-s", type=float, default=140.0, help="each compiled row's budget (0: none)"
    )
    p.add_argument(
        "--compiled",
        nargs="+",
        default=list(COMPILED),
        metavar="METHOD:PRECISION",
        help="compiled rows after the eager check (default: coca:32-true)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    head = git_commit()
    commit = None if head == NOT_A_CHECKOUT else head
    try:  # refuse a command that cannot run before copying anything
        command = device_command(
            args.out, not args.no_wheels, args.eager_s, args.compile_s, commit, args.compiled
        )
    except ValueError as err:
        print(f"gpu_bundle: {err}", file=sys.stderr)
        return 2
    data = args.out / "data"
    parts = {"MNIST": mnist_gz(args.data_root, data)}
    split_sizes = {"train": args.cifar_train, "test": args.cifar_test}
    parts["CIFAR-10"] = cifar_subset(args.data_root, data, split_sizes)
    if not args.no_wheels:
        parts["wheels"] = wheels(args.packages, args.out / "wheels", args.python_version)
    for name, files in parts.items():
        print(f"{name}: {len(files)} files, {mib(files):.1f} MiB")
    total = sum(mib(f) for f in parts.values())
    print(f"{args.out}: {total:.1f} MiB")
    if total > args.limit_mib:
        over = f"gpu_bundle: {total:.1f} MiB is over --limit-mib {args.limit_mib:g}"
        print(over, file=sys.stderr)
        return 1
    print("on the GPU machine, from the checkout's root:")
    print(command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
