"""One run of ``selfcaps run`` / ``pretrain`` as a library call: :func:`train_run`.

From Python::

    from selfcaps.run.train import RunSpec, train_run

    result = train_run(RunSpec("coca", preset="quick", overrides=[("trainer.epochs", 2)]))
    print(result.out, result.metrics["knn_top1_backbone"])

A run directory (DESIGN.md)::

    <out>/config.yaml              the fully resolved configuration
    <out>/metrics.json             final metrics (flat: floats in percent, ints, strings)
    <out>/metrics.csv              per-epoch metrics (Lightning CSV logger)
    <out>/checkpoints/last.ckpt    and best.ckpt (chosen on the validation split)
    <out>/model.safetensors        weights loadable without Lightning, config.json beside it
    <out>/figures/*.png
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from selfcaps._names import unknown_name_error
from selfcaps._version import __version__
from selfcaps.config.checks import check_config
from selfcaps.config.loading import (
    ConfigError,
    apply_overrides,
    default_preset,
    load_config,
    load_yaml,
)
from selfcaps.data.catalog import check_dataset_name
from selfcaps.data.layouts import check_files_present, check_run_data
from selfcaps.data.paths import resolve_data_root
from selfcaps.methods import get_method, list_methods
from selfcaps.run.provenance import git_commit, machine
from selfcaps.run.rundir import can_create, make_run_dir, resume_argv

if TYPE_CHECKING:  # imported when a run starts (they import torch and Lightning)
    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.engine.stopping import StopSignals
    from selfcaps.methods import CapsuleMethod

__all__ = [
    "RESUME_CHANGEABLE",
    "RunResult",
    "RunSpec",
    "budget_message",
    "build",
    "finish",
    "fit",
    "prepare_run",
    "resume_changes",
    "resume_command",
    "resume_message",
    "resume_position",
    "run_provenance",
    "train_run",
]


@dataclass
class RunSpec:
    """What to run: the method, its preset and overrides, where the data and the run go.

    The command line builds one from ``selfcaps run`` / ``pretrain`` and their flags; from
    Python, give the overrides as ``(key, value)`` pairs (``("trainer.epochs", 2)``).

    Attributes:
        method: A method name (``selfcaps list``).
        preset: A preset of the method (default: ``quick_<data>`` if it has one, else
            ``quick``).
        overrides: ``(dotted key, value)`` pairs applied to the preset, in order.
        data: The dataset asked for (chooses the default preset; ``data.name`` is set by
            ``overrides``).
        data_root: The dataset root (before ``SELFCAPS_DATA`` and ``data.root``).
        out: The run directory (default: ``runs/<method>/<data>/<time stamp>``).
        resume: Continue the run in ``out`` from its ``last.ckpt``.
        command: ``run`` (train and evaluate) or ``pretrain`` (train only).
    """

    method: str
    preset: str | None = None
    overrides: list[tuple[str, Any]] = field(default_factory=list)
    data: str | None = None
    data_root: str | None = None
    out: Path | None = None
    resume: bool = False
    command: str = "run"

    @property
    def evaluate(self) -> bool:
        """Whether the run ends with the method's evaluation (``run``, not ``pretrain``)."""
        return self.command != "pretrain"


@dataclass
class RunResult:
    """What :func:`train_run` leaves: the run directory, its metrics and an exit code.

    Attributes:
        out: The run directory.
        metrics: What ``metrics.json`` holds (on processes other than rank 0: the training
            figures only).
        exit_code: 0, or ``128 + signal number`` when a stop signal ended training.
        method: The trained method (its evaluated weights loaded), in ``eval()`` mode.
    """

    out: Path
    metrics: dict[str, Any]
    exit_code: int
    method: Any = None


def _default_out(cfg: DictConfig) -> Path:
    # Processes that Lightning's DDP launcher starts re-run this command: they must use
    # the directory rank 0 chose, not a new timestamp.
    if os.environ.get("SELFCAPS_OUT") and os.environ.get("LOCAL_RANK", "0") != "0":
        return Path(os.environ["SELFCAPS_OUT"])
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (
        Path("runs") / cfg.method / str(cfg.data.name).replace(":", "_").replace("/", "_") / stamp
    )


def prepare_run(spec: RunSpec) -> tuple[DictConfig, Path, Path | None, str]:
    """Resolve the configuration, run directory, checkpoint to resume from and data-root source.

    Everything that can be checked without torch (method, preset, keys, the values of the
    shared and the method's keys, dataset name and files, output location) is checked first,
    in well under a second; then the checks that need the network or the data registry
    (e.g. MCAE's patch size against the images) import torch. Nothing is written.
    """
    name = spec.method
    if name not in list_methods():
        raise unknown_name_error("method", name, list_methods())
    if spec.resume:
        if spec.out is None:
            raise ConfigError("--resume needs --out RUN_DIR (the run to continue)")
        resumed = _resumable(spec)
        if resumed is not None:
            return resumed
    preset = spec.preset or default_preset(name, spec.data)
    cfg = load_config(name, preset, list(spec.overrides), methods=list_methods())
    cfg.data.root, source = resolve_data_root(spec.data_root, cfg.data.root)
    try:
        check_config(name, cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    check_dataset_name(str(cfg.data.name))
    check_run_data(name, str(cfg.data.name), cfg.data.root, source)  # the loader's error, no torch
    out = Path(spec.out) if spec.out is not None else _default_out(cfg)
    torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not os.environ.get("SELFCAPS_OUT")
    if spec.out is None and torchrun:
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


def _resumable(spec: RunSpec) -> tuple[DictConfig, Path, Path | None, str] | None:
    """What ``--resume`` continues: the saved configuration and ``last.ckpt`` of ``spec.out``.

    Returns None (start a fresh run from the command line) when ``spec.out`` holds
    nothing of a run; a run directory without ``last.ckpt`` starts afresh from its
    saved configuration if it holds no progress (only ``config.yaml``: stopped before
    its first checkpoint and its first logged step), and is an error otherwise.
    """
    out, name = Path(spec.out), spec.method
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
    changes = resume_changes(spec, cfg)
    if spec.data_root:
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


def resume_changes(spec: RunSpec, cfg: DictConfig) -> list[str]:
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
    if spec.preset is not None and spec.preset != cfg.get("preset"):
        refused.append(f"--preset {spec.preset} (saved: {cfg.get('preset')})")
    requested = list(spec.overrides)
    if spec.data_root:
        requested.append(("data.root", spec.data_root))
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
            f"--resume continues the run in {spec.out} with its saved configuration; these "
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


def train_run(spec: RunSpec, made: list[Path] | None = None) -> RunResult:
    """Train (and, for ``run``, evaluate) one run and write its directory.

    The steps, each a function of this module: :func:`prepare_run` (configuration and
    directory checked, nothing written), :func:`build` (seed, method, data, inputs checked),
    the run directory created, :func:`resume_position`, :func:`fit`, :func:`finish` (the
    weights chosen, evaluated and written with ``metrics.json`` and figures). The run
    directory is created only once the data is loaded and the network takes it; the
    directories created are appended to ``made`` (for
    :func:`~selfcaps.run.rundir.remove_if_empty`). SIGTERM and SIGINT are handled while it
    runs (:mod:`selfcaps.engine.stopping`), and ``trainer.tf32`` applies to all of it
    (:func:`~selfcaps.engine.tf32.tf32`).

    Returns:
        The run's directory and metrics; ``exit_code`` 0, or ``128 + signal number`` when a
        stop signal ended training.
    """
    cfg, out, ckpt, root_source = prepare_run(spec)
    from selfcaps.engine.stopping import StopSignals
    from selfcaps.engine.tf32 import tf32

    stop = StopSignals()
    stop.hint = f"{resume_command(spec.method, out, spec.command)} continues it"
    stop.install()
    try:
        with tf32(cfg.trainer.get("tf32")):  # the whole run, training and evaluation
            return _train(spec, made, stop, cfg, out, ckpt, root_source)
    finally:
        stop.restore()


def resume_command(method: str, out: Path, command: str = "run") -> str:
    """The command that continues the run in ``out`` (``selfcaps run coca --out DIR --resume``).

    Examples:
        >>> resume_command("coca", Path("runs/a"))
        'selfcaps run coca --out runs/a --resume'
    """
    return shlex.join(["selfcaps", *resume_argv(method, out, command=command)])


def build(cfg: DictConfig, out: Path, root_source: str) -> tuple[CapsuleMethod, SelfcapsDataModule]:
    """Seed everything, build the method and its data, and check that they fit together.

    Raises:
        ConfigError: A batch larger than the training split, a kNN ``k`` larger than its
            bank, or a network that cannot take the data's images.
    """
    import lightning as L

    from selfcaps.data.datamodule import SelfcapsDataModule

    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    method = get_method(cfg.method)(cfg)
    method.run_dir = out
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source=root_source)
    _check_split_sizes(method.cfg, dm)
    _check_inputs(method, dm)
    return method, dm


def resume_position(
    ckpt: Path | None, method: CapsuleMethod, dm: SelfcapsDataModule
) -> tuple[int | None, int]:
    """The epoch and batch a resumed run continues from (``(None, 0)``: a fresh run).

    The data module is told, so that the epoch's remaining batches are the ones the
    uninterrupted run would have drawn; rank 0 prints :func:`resume_message`.
    """
    from selfcaps.engine.checkpoints import load_checkpoint

    if ckpt is None:
        return None, 0
    saved = load_checkpoint(ckpt)  # an older checkpoint without "resume_at": an epoch end
    epoch, batches = saved.get("resume_at", (int(saved["epoch"]) + 1, 0))
    dm.resume_at(epoch, batches)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        print(resume_message(ckpt, saved, int(method.cfg.trainer.epochs)))
    return epoch, batches


def fit(
    method: CapsuleMethod,
    dm: SelfcapsDataModule,
    trainer: Any,
    ckpt: Path | None,
    stop: StopSignals,
    last: Path,
) -> float:
    """Train (``trainer.fit``, resuming from ``ckpt``); the training seconds of the whole run.

    ``trainer.routing_precision`` and ``trainer.vote_precision`` apply to the training steps
    (:func:`~selfcaps.caps.layers.route_in_autocast_dtype`,
    :func:`~selfcaps.caps.layers.votes_in_bf16`), not to the evaluation after them.
    A run of ``trainer.epochs=0`` (e.g. MCAE's no-pretraining baseline) trains nothing and
    checkpoints its initial weights as ``last``. The seconds include those of the processes
    before a resumed one.
    """
    t0 = time.perf_counter()
    if int(method.cfg.trainer.epochs) > 0:
        stop.training = True
        from selfcaps.caps.layers import route_in_autocast_dtype, votes_in_bf16  # (torch)

        t = method.cfg.trainer
        low_routing = t.get("routing_precision", "float32") == "autocast"
        bf16_votes = t.get("vote_precision", "float32") == "bf16"
        try:
            # routing_precision only matters under autocast; vote_precision in any precision
            with route_in_autocast_dtype(low_routing), votes_in_bf16(bf16_votes):
                trainer.fit(method, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
        finally:
            stop.training = False
    else:
        _save_initial_checkpoint(method, last)
    return time.perf_counter() - t0 + _seconds_before_resume(trainer)


def run_provenance(commit: str, method: CapsuleMethod, world: int, threads: Any) -> dict[str, Any]:
    """What ran the run: versions, git commit, device, processes, threads and the machine.

    On a CUDA device also the GPU's name (``gpu``) and whether its float32 convolutions and
    matrix products could use TF32 (``tf32_conv``, ``tf32_matmul``:
    :func:`~selfcaps.engine.tf32.tf32_state`, ``"unknown"`` where PyTorch cannot tell);
    ``metrics.json`` stays flat, so a CPU run has none of the three.
    """
    import torch

    from selfcaps.engine.tf32 import tf32_state

    gpu: dict[str, Any] = {}
    if method.device.type == "cuda":
        gpu["gpu"] = torch.cuda.get_device_name(method.device)
        for kind, allowed in tf32_state().items():
            gpu[f"tf32_{kind}"] = "unknown" if allowed is None else allowed
    return {
        "selfcaps_version": __version__,
        "git_commit": commit,
        "torch_version": torch.__version__,
        "device": str(method.device),
        **gpu,
        "world_size": int(world),
        "threads": threads,
        **machine(),
    }


def finish(
    method: CapsuleMethod,
    dm: SelfcapsDataModule,
    trainer: Any,
    out: Path,
    metrics: dict[str, Any],
    evaluate: bool,
) -> dict[str, Any]:
    """After training (rank 0): choose the weights, evaluate them, write weights and metrics.

    Loads ``best.ckpt`` when a validation chose it (:func:`_select_checkpoint`), runs the
    method's own evaluation on the test split when ``evaluate``, writes
    ``model.safetensors`` and ``metrics.json`` (atomically) and the figures.

    Returns:
        ``metrics`` completed: the checkpoint evaluated, parameters, FLOPs and the evaluation.
    """
    from selfcaps.engine.checkpoints import atomic_write_json, save_weights
    from selfcaps.engine.progress import note, set_progress

    metric, mode = method.monitor_metric
    selected, best_epoch = _select_checkpoint(method, trainer, out, metric, mode)
    method.to("cpu" if method.cfg.trainer.accelerator == "cpu" else method.device)
    metrics = {
        **metrics,
        "best_checkpoint": selected,
        "best_epoch": best_epoch,
        "nonfinite_skipped": int(method.nonfinite_skipped),
        "params": int(sum(p.numel() for p in method.network.parameters())),
        "flops_per_image": _flops_per_image(method),
    }
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
    return metrics


def _train(
    spec: RunSpec,
    made: list[Path] | None,
    stop: StopSignals,
    cfg: DictConfig,
    out: Path,
    ckpt: Path | None,
    root_source: str,
) -> RunResult:
    """:func:`train_run` once the configuration is resolved, with the stop signals watched."""
    commit = git_commit()  # the code this process runs, not whatever is checked out at the end
    from selfcaps.engine.checkpoints import atomic_write_yaml
    from selfcaps.engine.threads import apply_threads
    from selfcaps.engine.trainer import build_trainer

    threads = apply_threads(cfg.trainer)  # trainer.threads, else every core (engine/threads.py)
    os.environ["SELFCAPS_OUT"] = str(out)  # inherited by DDP processes started by Lightning
    method, dm = build(cfg, out, root_source)
    created = make_run_dir(out)  # only now: everything above can fail without a trace
    if made is not None:
        made.extend(created)
    resume_epoch, batches = resume_position(ckpt, method, dm)
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
    train_time = fit(method, dm, trainer, ckpt, stop, out / "checkpoints" / "last.ckpt")
    stop.where = "after training"
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
    ran_on = run_provenance(commit, method, world, threads)
    if stop.signum is not None:  # training stopped by a signal: no evaluation
        if trainer.is_global_zero:
            _write_stopped(spec, out, {**metrics, **ran_on}, stop.signum)
        return RunResult(out, {**metrics, **ran_on}, 128 + stop.signum, method)
    if not trainer.is_global_zero:
        return RunResult(out, metrics, 0, method)
    stop.where = "during the final evaluation" if spec.evaluate else "while writing the weights"
    metrics = finish(method, dm, trainer, out, {**metrics, **ran_on}, spec.evaluate)
    return RunResult(out, metrics, 0, method)


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
    from selfcaps.engine.checkpoints import load_checkpoint

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


def _write_stopped(spec: RunSpec, out: Path, metrics: dict[str, Any], signum: int) -> None:
    """``metrics.json`` of a run a signal stopped (no evaluation) and the console lines."""
    from selfcaps.engine.checkpoints import atomic_write_json
    from selfcaps.engine.stopping import signal_name

    name = signal_name(signum)
    metrics = {**metrics, "signal": name}
    atomic_write_json(out / "metrics.json", metrics)
    part = metrics.get("batches_into_next_epoch", 0)
    trained = f"{metrics['epochs_trained']} epochs" + (f" and {part} batches" if part else "")
    again = resume_command(spec.method, out, spec.command)
    print(
        f"Training stopped by {name}: {trained} trained of {metrics['epochs_planned']} planned "
        f"({metrics['steps']} steps), saved in {out / 'checkpoints' / 'last.ckpt'}; no final "
        f"evaluation. Continue exactly where it stopped with:\n  {again}",
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
    from selfcaps.engine.trainer import LastCheckpoint

    cb = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    return 0.0 if cb is None else float(cb.seconds_before)


def _budget_metrics(trainer: Any, cfg: DictConfig) -> dict[str, Any]:
    """``stopped_by``, ``epochs_planned`` and ``epochs_trained`` (whole epochs) of a training."""
    from selfcaps.engine.trainer import LastCheckpoint

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
    from selfcaps.engine.checkpoints import AtomicCheckpointIO

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
