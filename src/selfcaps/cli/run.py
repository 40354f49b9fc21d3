"""``selfcaps run`` / ``pretrain``: configure, train, evaluate and write a run directory.

A run directory (DESIGN.md)::

    <out>/config.yaml              the fully resolved configuration
    <out>/metrics.json             final metrics (flat: floats in percent, ints, strings)
    <out>/metrics.csv              per-epoch metrics (Lightning CSV logger)
    <out>/checkpoints/last.ckpt    and best.ckpt (chosen on the validation split)
    <out>/model.safetensors        weights loadable without Lightning, config.json beside it
    <out>/figures/*.png
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from selfcaps import __version__
from selfcaps._names import unknown_name_error
from selfcaps.cli.catalog import check_dataset_name
from selfcaps.cli.config import (
    ConfigError,
    apply_overrides,
    default_preset,
    list_presets,
    load_config,
    load_yaml,
    parse_overrides,
)
from selfcaps.cli.data_get import check_run_data
from selfcaps.cli.provenance import git_commit, machine
from selfcaps.cli.rundir import can_create, make_run_dir, remove_if_empty, resume_argv
from selfcaps.config_checks import check_config
from selfcaps.data.layouts import check_files_present
from selfcaps.methods import get_method, list_methods
from selfcaps.records import CliFlag, get_record, list_records

if TYPE_CHECKING:  # imported when a run starts (they import torch and Lightning)
    from selfcaps.methods import CapsuleMethod
    from selfcaps.methods.datamodule import SelfcapsDataModule
    from selfcaps.methods.stopping import StopSignals

__all__ = ["add_run_arguments", "cmd_pretrain", "cmd_run", "prepare_run", "resolve_data_root"]

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


def resolve_data_root(cli_value: str | None, cfg_value: str | None) -> tuple[str, str]:
    """The dataset root and where it came from (for error messages)."""
    if cli_value:
        return cli_value, "--data-root"
    if os.environ.get("SELFCAPS_DATA"):
        return os.environ["SELFCAPS_DATA"], "$SELFCAPS_DATA"
    if cfg_value:
        return cfg_value, "data.root"
    return "./data", "default (./data)"


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


def _default_out(cfg: DictConfig) -> Path:
    # Processes that Lightning's DDP launcher starts re-run this command: they must use
    # the directory rank 0 chose, not a new timestamp.
    if os.environ.get("SELFCAPS_OUT") and os.environ.get("LOCAL_RANK", "0") != "0":
        return Path(os.environ["SELFCAPS_OUT"])
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (
        Path("runs") / cfg.method / str(cfg.data.name).replace(":", "_").replace("/", "_") / stamp
    )


def prepare_run(args: argparse.Namespace) -> tuple[DictConfig, Path, Path | None, str]:
    """Resolve the configuration, run directory, checkpoint to resume from and data-root source.

    Everything that can be checked without torch (method, preset, keys, the values of the
    shared and the method's keys, dataset name and files, output location) is checked first,
    in well under a second; then the checks that need the network or the data registry
    (e.g. MCAE's patch size against the images) import torch. Nothing is written.
    """
    name = args.method
    if name not in list_methods():
        raise unknown_name_error("method", name, list_methods())
    if args.resume:
        if args.out is None:
            raise ConfigError("--resume needs --out RUN_DIR (the run to continue)")
        resumed = _resumable(args, name)
        if resumed is not None:
            return resumed
    preset = args.preset or default_preset(name, args.data)
    cfg = load_config(name, preset, _overrides_from_args(args, name), methods=list_methods())
    cfg.data.root, source = resolve_data_root(args.data_root, cfg.data.root)
    try:
        check_config(name, cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    check_dataset_name(str(cfg.data.name))
    check_run_data(name, str(cfg.data.name), cfg.data.root, source)  # the loader's error, no torch
    out = args.out or _default_out(cfg)
    torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not os.environ.get("SELFCAPS_OUT")
    if args.out is None and torchrun:
        raise ConfigError(
            "under torchrun every process must write the same run directory: pass --out DIR"
        )
    if (out / "checkpoints" / "last.ckpt").exists():
        raise ConfigError(
            f"{out} already holds a run; use --resume to continue it or another --out"
        )
    can_create(out)
    get_method(name).validate_config(cfg)  # imports the method (torch, Lightning)
    return cfg, out, None, source


#: Files that show a run trained (or finished) in a directory without ``last.ckpt``.
_PROGRESS_FILES = ("metrics.json", "metrics.csv", "model.safetensors", "checkpoints/best.ckpt")


def _resumable(
    args: argparse.Namespace, name: str
) -> tuple[DictConfig, Path, Path | None, str] | None:
    """What ``--resume`` continues: the saved configuration and ``last.ckpt`` of ``args.out``.

    Returns None (start a fresh run from the command line) when ``args.out`` holds
    nothing of a run; a run directory without ``last.ckpt`` starts afresh from its
    saved configuration if it holds no progress (only ``config.yaml``: stopped before
    its first checkpoint and its first logged step), and is an error otherwise.
    """
    out: Path = args.out
    saved, last = out / "config.yaml", out / "checkpoints" / "last.ckpt"
    progress = [str(out / f) for f in _PROGRESS_FILES if (out / f).is_file()]
    if not last.is_file():
        if progress:
            raise ConfigError(
                f"--resume: no checkpoint {last} to continue from, but {out} holds a run that "
                f"trained ({', '.join(progress)}); start it again with another --out"
            )
        if not saved.is_file():
            print(f"--resume: {out} holds no run yet ({last} does not exist): starting a fresh run")
            return None
        print(
            f"--resume: {out} holds no checkpoint and no progress yet ({last} does not exist): "
            "starting a fresh run from its config.yaml"
        )
    elif not saved.is_file():
        raise ConfigError(f"--resume: {saved} does not exist (the configuration of {last})")
    cfg = OmegaConf.create(load_yaml(saved))
    if cfg.method != name:
        raise ConfigError(f"--resume: {out} is a {cfg.method} run, not {name}")
    source = f"{saved} (data.root)"
    changes = resume_changes(args, name, cfg)
    if args.data_root:
        source = "--data-root"
    if changes and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        print(f"--resume: applying settings that differ from {saved}: {', '.join(changes)}")
    check_files_present(str(cfg.data.name), cfg.data.root, source)
    return cfg, out, (last if last.is_file() else None), source


#: Keys a resumed run may change: how long it trains, how it shows progress, whether it draws
#: figures, how it uses the machine; none of them changes what a training step computes.
RESUME_CHANGEABLE = (
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.progress_bar",
    "trainer.threads",
    "eval.figures",
    "trainer.checkpoint_every_n_minutes",
    "trainer.checkpoint_every_n_steps",
    "data.root",
)


def resume_changes(args: argparse.Namespace, name: str, cfg: DictConfig) -> list[str]:
    """Apply to a resumed run's saved ``cfg`` the command line's settings that may change.

    Settings equal to the saved ones are accepted silently; those in
    :data:`RESUME_CHANGEABLE` are applied; any other difference (``--preset``, the model,
    data, optimiser, seed, ...) would make the continued run a different one, and is refused.

    Returns:
        ``key old -> new`` for each setting applied (empty: nothing changed).

    Raises:
        ConfigError: Settings that differ from the saved run and may not change, named.
    """
    refused = []
    if args.preset is not None and args.preset != cfg.get("preset"):
        refused.append(f"--preset {args.preset} (saved: {cfg.get('preset')})")
    requested = _overrides_from_args(args, name)
    if args.data_root:
        requested.append(("data.root", args.data_root))
    probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    OmegaConf.set_struct(probe, True)
    apply_overrides(probe, requested)  # unknown keys and wrong types: as for a fresh run
    applied = []
    for key in dict.fromkeys(k for k, _ in requested):
        old, new = OmegaConf.select(cfg, key), OmegaConf.select(probe, key)
        if old == new:
            continue
        if key in RESUME_CHANGEABLE:
            OmegaConf.update(cfg, key, new, merge=False)
            applied.append(f"{key} {_yaml_value(old)} -> {_yaml_value(new)}")
        else:
            refused.append(f"{key}={_yaml_value(new)} (saved: {_yaml_value(old)})")
    if refused:
        raise ConfigError(
            f"--resume continues the run in {args.out} with its saved configuration; these "
            f"settings differ from it: {'; '.join(refused)}. A resumed run may change only "
            f"{', '.join(RESUME_CHANGEABLE)}; drop the others to continue it, or start a new "
            "run with another --out"
        )
    return applied


def _yaml_value(value: Any) -> str:
    """A configuration value as it is written on the command line (``true``, ``null``, ``3``).

    Examples:
        >>> _yaml_value(True), _yaml_value(None), _yaml_value(0.003)
        ('true', 'null', '0.003')
    """
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def resume_message(ckpt: Path, saved: dict[str, Any], planned: int) -> str:
    """The line a resumed run prints: the epoch and batch it continues from (1-based).

    Args:
        ckpt: The checkpoint resumed.
        saved: Its contents (``resume_at``: epoch and batches of it trained, 0-based).
        planned: ``trainer.epochs``.

    Examples:
        >>> resume_message(Path("r/last.ckpt"), {"resume_at": [1, 4], "global_step": 12}, 3)
        'resuming from r/last.ckpt at epoch 2 of 3, batch 5 (12 steps trained)'
    """
    epoch, batches = saved["resume_at"] if "resume_at" in saved else (int(saved["epoch"]) + 1, 0)
    steps = int(saved.get("global_step", 0))
    if epoch >= planned:
        return (
            f"resuming from {ckpt}: the {planned} planned epochs are trained ({steps} steps); "
            "no further training"
        )
    return (
        f"resuming from {ckpt} at epoch {epoch + 1} of {planned}, batch {batches + 1} "
        f"({steps} steps trained)"
    )


def _check_inputs(method: CapsuleMethod, dm: SelfcapsDataModule) -> None:
    """Push two evaluation images through the network before training.

    A model that cannot take the data's image size or channels fails now, with
    expected vs got, not after the data has been loaded and an epoch has run.
    """
    import torch

    _, eval_tf = method.build_transforms()
    ds = dm.split("val")
    x = torch.stack([eval_tf(ds[i][0]) for i in range(min(2, len(ds)))])
    was = method.training
    method.eval()
    try:
        with torch.no_grad():
            method.features(x)
    except (ValueError, RuntimeError) as e:
        raise ConfigError(
            f"the {method.name} network cannot take {method.cfg.data.name} images of shape "
            f"{tuple(x.shape[1:])}: {e}"
        ) from None
    finally:
        method.train(was)


def _print_summary(metrics: dict[str, Any], out: Path, classes: int) -> None:
    """The end-of-run summary: the method's headline numbers and where the files are."""
    from selfcaps.cli.summary import format_summary

    r = get_record(str(metrics["method"]))
    protocol, keys, notes = r.headline()
    chance = 100.0 / classes if r.headline_is_accuracy and classes > 0 else None
    print(format_summary(metrics, out, protocol, keys, notes, chance))


def train(args: argparse.Namespace, evaluate: bool, made: list[Path] | None = None) -> int:
    """Shared body of ``run`` (evaluate=True) and ``pretrain`` (evaluate=False).

    The run directory is created only once the data is loaded and the network takes
    it; the directories created are appended to ``made`` (for :func:`remove_if_empty`).
    SIGTERM and SIGINT are handled while it runs (:mod:`selfcaps.methods.stopping`).

    Returns:
        0, or ``128 + signal number`` when a stop signal ended training.
    """
    cfg, out, ckpt, root_source = prepare_run(args)
    from selfcaps.methods.stopping import StopSignals

    stop = StopSignals()
    stop.hint = f"{resume_command(args, out)} continues it"
    stop.install()
    try:
        return _train(args, evaluate, made, stop, cfg, out, ckpt, root_source)
    finally:
        stop.restore()


def resume_command(args: argparse.Namespace, out: Path) -> str:
    """The command that continues the run in ``out`` (``selfcaps run coca --out DIR --resume``)."""
    command = getattr(args, "command", None) or "run"
    return shlex.join(["selfcaps", *resume_argv(args.method, out, command=command)])


def _train(
    args: argparse.Namespace,
    evaluate: bool,
    made: list[Path] | None,
    stop: StopSignals,
    cfg: DictConfig,
    out: Path,
    ckpt: Path | None,
    root_source: str,
) -> int:
    """:func:`train` once the configuration is resolved, with the stop signals watched."""
    commit = git_commit()  # the code this process runs, not whatever is checked out at the end
    import lightning as L
    import torch

    from selfcaps.cli.threads import apply_threads
    from selfcaps.eval.progress import note, set_progress
    from selfcaps.methods.datamodule import SelfcapsDataModule
    from selfcaps.methods.engine import build_trainer
    from selfcaps.methods.io import (
        atomic_write_json,
        atomic_write_yaml,
        load_checkpoint,
        save_weights,
    )

    threads = apply_threads(cfg.trainer)  # trainer.threads, else every core (cli/threads.py)
    os.environ["SELFCAPS_OUT"] = str(out)  # inherited by DDP processes started by Lightning
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    method_cls = get_method(cfg.method)
    method = method_cls(cfg)
    method.run_dir = out
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source=root_source)
    _check_split_sizes(method.cfg, dm)
    _check_inputs(method, dm)
    created = make_run_dir(out)  # only now: everything above can fail without a trace
    if made is not None:
        made.extend(created)
    resume_epoch, batches = None, 0
    if ckpt is not None:
        saved = load_checkpoint(ckpt)  # an older checkpoint without "resume_at": an epoch end
        resume_epoch, batches = saved.get("resume_at", (int(saved["epoch"]) + 1, 0))
        dm.resume_at(resume_epoch, batches)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            print(resume_message(ckpt, saved, int(method.cfg.trainer.epochs)))
    metric, mode = method.monitor_metric
    trainer = build_trainer(
        method.cfg,
        out,
        metric,
        mode,
        resume_epoch=resume_epoch,
        resume_mid_epoch=batches > 0,
        stop=stop,
    )
    stop.on_second = lambda signum: _stop_launched_processes(trainer)
    if trainer.is_global_zero:  # a resumed run may have a new budget
        atomic_write_yaml(out / "config.yaml", OmegaConf.to_container(method.cfg, resolve=True))
    t0 = time.perf_counter()
    last = out / "checkpoints" / "last.ckpt"
    if int(method.cfg.trainer.epochs) > 0:
        stop.training = True
        from selfcaps.caps.layers import route_in_autocast_dtype  # (imports torch)

        low_routing = method.cfg.trainer.get("routing_precision", "float32") == "autocast"
        try:
            with route_in_autocast_dtype(low_routing):  # only matters under autocast
                trainer.fit(method, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
        finally:
            stop.training = False
    else:  # no training phase (e.g. MCAE's no-pretraining baseline): keep the initial weights
        _save_initial_checkpoint(method, last)
    stop.where = "after training"
    train_time = time.perf_counter() - t0 + _seconds_before_resume(trainer)
    world = trainer.world_size
    images = trainer.global_step * int(method.cfg.data.batch_size) * world
    metrics: dict[str, Any] = {
        "method": method.name,
        "dataset": str(method.cfg.data.name),
        "preset": str(method.cfg.preset),
        **_budget_metrics(trainer, method.cfg),
        "steps": int(trainer.global_step),
        "train_time_s": round(train_time, 1),
        "train_images_per_s": round(images / max(train_time, 1e-9), 1),
    }
    provenance = {
        "selfcaps_version": __version__,
        "git_commit": commit,
        "torch_version": torch.__version__,
        "device": str(method.device),
        "world_size": int(world),
        "threads": threads,
        **machine(),
    }
    if stop.signum is not None:  # training stopped by a signal: no evaluation
        if trainer.is_global_zero:
            _write_stopped(args, out, {**metrics, **provenance}, stop.signum)
        return 128 + stop.signum
    if not trainer.is_global_zero:
        return 0
    stop.where = "during the final evaluation" if evaluate else "while writing the weights"
    selected, best_epoch = _select_checkpoint(method, trainer, out, metric, mode)
    method.to("cpu" if method.cfg.trainer.accelerator == "cpu" else method.device)
    metrics.update({
        "best_checkpoint": selected,
        "best_epoch": best_epoch,
        "nonfinite_skipped": int(method.nonfinite_skipped),
        "params": int(sum(p.numel() for p in method.network.parameters())),
        "flops_per_image": _flops_per_image(method),
        **provenance,
    })  # fmt: skip
    for cb in trainer.checkpoint_callbacks:  # restored from last.ckpt when resuming
        if getattr(cb, "monitor", None) == metric and cb.best_model_score is not None:
            metrics[f"best_{metric}"] = float(cb.best_model_score)
    method.eval()
    set_progress(bool(method.cfg.trainer.progress_bar))
    if evaluate:
        protocol = method.record().bench_protocol
        note(f"final evaluation of {method.name} on the test split ({protocol})")
        metrics.update(method.evaluate(dm))
        note("evaluation done; writing weights, metrics and figures")
    save_weights(
        out / "model.safetensors",
        method.network.state_dict(),
        {**method.model_config(), "method": method.name, "selfcaps_version": __version__},
    )
    atomic_write_json(out / "metrics.json", metrics)
    if method.cfg.eval.get("figures", True):
        _write_figures(method, dm, out)
    _print_summary(metrics, out, int(method.info.num_classes))
    if metrics["stopped_by"] != "epochs":
        print(budget_message(metrics))
    if (line := method.summary_line(metrics)) is not None:
        print(line)
    return 0


def _select_checkpoint(
    method: CapsuleMethod, trainer: Any, out: Path, metric: str, mode: str
) -> tuple[str, int]:
    """Load the weights to evaluate into ``method``; say which they are and their epoch (1-based).

    ``best.ckpt`` when the validation monitor chose it: a validation ran, in this process
    or in one this run resumed (its score is restored from ``last.ckpt``). Otherwise the
    weights trained last, which ``best.ckpt`` becomes: a ``best.ckpt`` that an earlier
    process of a run without validation left is a copy of its last weights, no choice. So
    a resumed run evaluates what the same run uninterrupted would have.

    Returns:
        The ``best_checkpoint`` text of ``metrics.json`` and ``best_epoch``.
    """
    from selfcaps.methods.io import load_checkpoint

    best, last = out / "checkpoints" / "best.ckpt", out / "checkpoints" / "last.ckpt"
    validated = any(
        getattr(c, "monitor", None) == metric and c.best_model_score is not None
        for c in trainer.checkpoint_callbacks
    )
    if validated and best.is_file():
        state = load_checkpoint(best)
        method.load_state_dict(state["state_dict"])
        return f"{mode} {metric} (epoch {int(state['epoch']) + 1})", int(state["epoch"]) + 1
    partial = best.with_name(best.name + ".partial")
    shutil.copyfile(last, partial)
    partial.replace(best)  # atomic: never a half-copied best.ckpt
    return "last (no validation ran)", int(trainer.current_epoch)


def _write_stopped(
    args: argparse.Namespace, out: Path, metrics: dict[str, Any], signum: int
) -> None:
    """``metrics.json`` of a run a signal stopped (no evaluation) and the console lines."""
    from selfcaps.methods.io import atomic_write_json
    from selfcaps.methods.stopping import signal_name

    name = signal_name(signum)
    metrics = {**metrics, "signal": name}
    atomic_write_json(out / "metrics.json", metrics)
    part = metrics.get("batches_into_next_epoch", 0)
    trained = f"{metrics['epochs_trained']} epochs" + (f" and {part} batches" if part else "")
    print(
        f"Training stopped by {name}: {trained} trained of {metrics['epochs_planned']} planned "
        f"({metrics['steps']} steps), saved in {out / 'checkpoints' / 'last.ckpt'}; no final "
        f"evaluation. Continue exactly where it stopped with:\n  {resume_command(args, out)}",
        flush=True,
    )


def _stop_launched_processes(trainer: Any) -> None:
    """Kill the processes a DDP launcher started (before a second signal ends this one)."""
    import signal

    launcher = getattr(trainer.strategy, "launcher", None)
    if launcher is not None and hasattr(launcher, "kill"):
        launcher.kill(signal.SIGKILL)


def _seconds_before_resume(trainer: Any) -> float:
    """Training seconds of the processes before a resumed one, from ``last.ckpt`` (0: fresh).

    ``train_time_s`` (and ``train_images_per_s``, whose step count covers every process)
    then measure the whole run, not its last leg. Time between the checkpoint and a crash
    is not counted: those steps are trained again.
    """
    from selfcaps.methods.engine import LastCheckpoint

    cb = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    return 0.0 if cb is None else float(cb.seconds_before)


def _budget_metrics(trainer: Any, cfg: DictConfig) -> dict[str, Any]:
    """``stopped_by``, ``epochs_planned`` and ``epochs_trained`` (whole epochs) of a training."""
    from selfcaps.methods.engine import LastCheckpoint

    planned = int(cfg.trainer.epochs)
    cb = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    if cb is None or planned == 0:  # no training phase
        return {"stopped_by": "epochs", "epochs_planned": planned, "epochs_trained": 0}
    epoch, batches = cb.position
    return {
        "stopped_by": cb.stopped_by or "epochs",
        "epochs_planned": planned,
        "epochs_trained": int(epoch),
        "batches_into_next_epoch": int(batches),
    }


def budget_message(metrics: dict[str, Any]) -> str:
    """The console line saying that a budget ended training before its planned epochs."""
    flag = {"max_steps": "--max-steps", "max_time": "--max-time"}.get(
        str(metrics["stopped_by"]), str(metrics["stopped_by"])
    )
    part = metrics.get("batches_into_next_epoch", 0)
    trained = f"{metrics['epochs_trained']} epochs" + (f" and {part} batches" if part else "")
    return (
        f"Training stopped early by {flag} (trainer.{metrics['stopped_by']}): {trained} trained "
        f"of {metrics['epochs_planned']} planned ({metrics['steps']} steps); "
        "`--resume` with a larger budget continues exactly where it stopped."
    )


def _flops_per_image(method: CapsuleMethod) -> int:
    """Forward FLOPs of the network on one image (matrix products and convolutions)."""
    from selfcaps.eval import profile_model

    was = method.network.training
    try:
        shape = tuple(method.example_input().shape)
        return int(profile_model(method.network.eval(), shape)["flops_per_image"])
    finally:
        method.network.train(was)


def _save_initial_checkpoint(method: CapsuleMethod, path: Path) -> None:
    """A checkpoint of the untrained module, for runs with ``trainer.epochs=0``."""
    from selfcaps.methods.io import AtomicCheckpointIO

    ckpt = {
        "epoch": 0,
        "global_step": 0,
        "state_dict": method.state_dict(),
        "hyper_parameters": dict(method.hparams),
    }
    method.on_save_checkpoint(ckpt)
    AtomicCheckpointIO().save_checkpoint(ckpt, path)


def _check_split_sizes(cfg: DictConfig, dm: SelfcapsDataModule) -> None:
    n_train = len(dm.split("train"))
    world = (
        int(cfg.trainer.devices) * int(cfg.trainer.num_nodes)
        if cfg.trainer.strategy == "ddp"
        else 1
    )
    if int(cfg.data.batch_size) > n_train // world:
        raise ConfigError(
            f"data.batch_size: {cfg.data.batch_size} is larger than the {n_train // world} "
            f"training images per process of {cfg.data.name}"
        )
    for key in ("monitor.knn_k", "eval.knn_k"):
        k = int(OmegaConf.select(cfg, key))
        bank = (
            n_train
            if key == "eval.knn_k" or cfg.monitor.bank_size is None
            else min(n_train, int(cfg.monitor.bank_size))
        )
        if k > bank:
            raise ConfigError(f"{key}: k={k} is larger than the kNN bank ({bank} training images)")


def _write_figures(method: CapsuleMethod, dm: SelfcapsDataModule, out: Path) -> None:
    from selfcaps.viz import plot_against_minutes, plot_training_curves, render_figure

    figs = out / "figures"
    title = f"{method.name} on {method.cfg.data.name}"
    plot_training_curves(out / "metrics.csv", figs / "curves.png", title=title)
    plot_against_minutes(out / "metrics.csv", figs / "time_to_accuracy.png", title=title)
    for stem, spec in method.figures(dm).items():
        render_figure(spec, figs / f"{stem}.png")


def _train_or_clean_up(args: argparse.Namespace, evaluate: bool) -> int:
    """:func:`train`; a failed run removes the directories it created if it left them empty."""
    made: list[Path] = []
    try:
        return train(args, evaluate, made)
    except BaseException:
        remove_if_empty(made)
        raise


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
    return _train_or_clean_up(args, evaluate=True)


def cmd_pretrain(args: argparse.Namespace) -> int:
    """``selfcaps pretrain``: train and write checkpoints and weights, no final evaluation."""
    if getattr(args, "show_config", False):
        return show_config(args)
    return _train_or_clean_up(args, evaluate=False)
