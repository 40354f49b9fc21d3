"""``selfcaps run`` / ``pretrain``: the flags, the run they ask for, and its summary.

What a run does, and what its directory holds, is :func:`selfcaps.run.train.train_run`;
this module turns the command line into its :class:`~selfcaps.run.train.RunSpec` and
prints the run's headline.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from selfcaps._names import unknown_name_error
from selfcaps.config.loading import (
    ConfigError,
    default_preset,
    list_presets,
    load_config,
    parse_overrides,
)
from selfcaps.methods import list_methods
from selfcaps.records import CliFlag, get_record, list_records
from selfcaps.run.rundir import remove_if_empty
from selfcaps.run.train import RunSpec, budget_message, train_run

__all__ = ["add_run_arguments", "cmd_pretrain", "cmd_run", "spec_from_args"]

#: Generic flags of ``run`` / ``pretrain`` and the configuration key each sets.
_FLAG_KEYS = {
    "data": "data.name",
    "data_root": "data.root",
    "max_time": "trainer.max_time",
    "epochs": "trainer.epochs",
    "max_steps": "trainer.max_steps",
    "seed": "seed",
    "batch_size": "data.batch_size",
    "devices": "trainer.devices",
    "num_nodes": "trainer.num_nodes",
    "strategy": "trainer.strategy",
    "precision": "trainer.precision",
    "accelerator": "trainer.accelerator",
    "threads": "trainer.threads",
    "num_workers": "data.num_workers",
}
_SWITCH_KEYS = {
    "deterministic": "trainer.deterministic",
    "compile": "trainer.compile",
    "skip_nonfinite": "trainer.skip_nonfinite",
    "no_progress": "trainer.progress_bar",
    "no_figures": "eval.figures",
}


def add_run_arguments(p: argparse.ArgumentParser, method: str | None = None) -> None:
    """Flags of ``run`` and ``pretrain``: the generic ones and ``method``'s own.

    Args:
        p: The subcommand's parser.
        method: The method named on the command line. Its flags are shown in ``--help``;
            other methods' flags are accepted but hidden, so that using one names its
            owner (``--pretrain-epochs is an option of mcae, not of coca``). Without a
            method, the help lists which method has which flags.
    """
    p.usage = f"selfcaps {p.prog.split()[-1]} METHOD [key=value ...] [options]"
    p.add_argument("method", metavar="METHOD", help=f"one of: {', '.join(list_methods())}")
    p.set_defaults(overrides=[])  # key=value pairs are collected by main(), anywhere on the line
    p.add_argument(
        "--preset",
        help="YAML preset (default: quick_<data> if the method has one for --data, else quick)",
    )
    p.add_argument("--out", type=Path, help="run directory (default runs/<method>/<data>/<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from last.ckpt")
    p.add_argument("--data", help="dataset name (default: the preset's; see `selfcaps list`)")
    p.add_argument("--data-root", help="dataset root (default: $SELFCAPS_DATA, else ./data)")
    p.add_argument("--max-time", type=float, metavar="MIN", help="training budget in minutes")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--batch-size", type=int, help="per device")
    p.add_argument("--seed", type=int)
    p.add_argument("--deterministic", action="store_true", help="reruns give identical metrics")
    p.add_argument("--devices", type=int)
    p.add_argument("--num-nodes", type=int)
    p.add_argument("--strategy", help="auto | ddp")
    p.add_argument("--precision", help="32-true | bf16-mixed | 16-mixed")
    p.add_argument("--accelerator", help="cpu | gpu | auto")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: every core)")
    p.add_argument("--num-workers", type=int, help="data loader workers")
    p.add_argument("--compile", action="store_true", help="torch.compile the network")
    p.add_argument(
        "--skip-nonfinite",
        action="store_true",
        help="skip steps with a non-finite loss or gradient instead of stopping",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-figures",
        action="store_true",
        help="write no figures at the end (they can take a while: SparseCaps encodes "
        "eval.figure_images images for them)",
    )
    p.add_argument(
        "--show-config",
        action="store_true",
        help="print the resolved configuration (every key with its value) and exit",
    )
    own = _all_flags().get(method or "", {})
    if own:
        group = p.add_argument_group(f"options of {method}")
        for flag, spec in own.items():
            choices = f" {{{','.join(spec.choices)}}}" if spec.choices else ""
            group.add_argument(flag, help=f"{spec.help}{choices} (sets {spec.key})")
    for flag in _method_flags():  # typed and range-checked per method after parsing
        if flag not in own:
            p.add_argument(flag, help=argparse.SUPPRESS)
    if method is None:
        p.epilog = "method options (see `selfcaps run METHOD --help`): " + "; ".join(
            f"{name}: {', '.join(flags) or 'none'}" for name, flags in _all_flags().items()
        )
    else:
        p.epilog = (
            f"presets of {method}: {', '.join(list_presets(method).get(method, []))}. "
            "Any configuration key can be set as key=value (e.g. optim.lr=3e-4); "
            "an unknown key is refused with the valid ones listed."
        )


def _all_flags() -> dict[str, Mapping[str, CliFlag]]:
    """``{method: {flag: spec}}`` from the methods' records (an empty dict: generic flags only)."""
    return {r.name: r.flags for r in list_records()}


def _method_flags() -> dict[str, list[tuple[str, CliFlag]]]:
    """Every method-specific flag with the (method name, spec) pairs that declare it."""
    by_flag: dict[str, list[tuple[str, CliFlag]]] = {}
    for name, flags in _all_flags().items():
        for flag, spec in flags.items():
            by_flag.setdefault(flag, []).append((name, spec))
    return by_flag


def _overrides_from_args(args: argparse.Namespace, method: str) -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = []
    for attr, key in _FLAG_KEYS.items():
        value = getattr(args, attr, None)
        if value is not None and attr != "data_root":
            pairs.append((key, value))
    if getattr(args, "epochs", None) == 0:  # no training at all (method flags may override)
        pairs += list(get_record(method).no_training.items())
    for attr, key in _SWITCH_KEYS.items():
        if getattr(args, attr, False):
            pairs.append((key, not attr.startswith("no_")))
    known = get_record(method).flags
    for flag, specs in _method_flags().items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is not None:
            if flag not in known:
                owners = " and ".join(name for name, _ in specs)
                raise ConfigError(f"{flag} is an option of {owners}, not of {method}")
            own = known[flag]
            if isinstance(value, str):  # a shared flag: argparse left the typing to us
                try:
                    value = own.type(value)
                except (ValueError, argparse.ArgumentTypeError) as e:
                    raise ConfigError(f"{flag} of {method}: {e}") from None
            if own.choices and value not in own.choices:
                raise ConfigError(
                    f"{flag} of {method}: expected one of {', '.join(map(str, own.choices))}, "
                    f"got {value!r}"
                )
            pairs.append((own.key, value))
    return pairs + parse_overrides(args.overrides)


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The request of ``selfcaps run`` / ``pretrain``: flags and ``key=value`` as overrides."""
    return RunSpec(
        method=args.method,
        preset=args.preset,
        overrides=_overrides_from_args(args, args.method),
        data=getattr(args, "data", None),
        data_root=getattr(args, "data_root", None),
        out=args.out,
        resume=bool(getattr(args, "resume", False)),
        command=getattr(args, "command", None) or "run",
    )


def _print_summary(metrics: dict[str, Any], out: Path, classes: int) -> None:
    """The end-of-run summary: the method's headline numbers and where the files are."""
    from selfcaps.run.summary import format_summary

    r = get_record(str(metrics["method"]))
    protocol, keys, notes = r.headline()
    chance = 100.0 / classes if r.headline_is_accuracy and classes > 0 else None
    print(format_summary(metrics, out, protocol, keys, notes, chance))


def _run(args: argparse.Namespace, command: str) -> int:
    """Train the run; a failed one removes the directories it created if it left them empty."""
    made: list[Path] = []
    try:
        result = train_run(dataclasses.replace(spec_from_args(args), command=command), made)
    except BaseException:
        remove_if_empty(made)
        raise
    metrics, method = result.metrics, result.method
    if result.exit_code != 0 or "best_checkpoint" not in metrics:
        return result.exit_code  # stopped by a signal (said so), or not rank 0: no evaluation
    _print_summary(metrics, result.out, int(method.info.num_classes))
    if metrics["stopped_by"] != "epochs":
        print(budget_message(metrics))
    if (line := method.summary_line(metrics)) is not None:
        print(line)
    return 0


def show_config(args: argparse.Namespace) -> int:
    """``--show-config``: the configuration the command line resolves to, as YAML; nothing runs."""
    import yaml

    if args.method not in list_methods():
        raise unknown_name_error("method", args.method, list_methods())
    preset = args.preset or default_preset(args.method, args.data)
    cfg = load_config(args.method, preset, _overrides_from_args(args, args.method))
    print(yaml.safe_dump(OmegaConf.to_container(cfg, resolve=True), sort_keys=False), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``selfcaps run``: pretrain, evaluate with the method's protocol, write the run directory."""
    if getattr(args, "show_config", False):
        return show_config(args)
    return _run(args, "run")


def cmd_pretrain(args: argparse.Namespace) -> int:
    """``selfcaps pretrain``: train and write checkpoints and weights, no final evaluation."""
    if getattr(args, "show_config", False):
        return show_config(args)
    return _run(args, "pretrain")
