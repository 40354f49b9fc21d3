"""SIGTERM and SIGINT: stop at the end of the current batch, with a checkpoint to resume from.

Cluster schedulers (SLURM, Kubernetes) stop a job with SIGTERM and a grace period
before SIGKILL; Ctrl+C sends SIGINT. While a run trains, the first of either signal
only sets a flag: :class:`~selfcaps.engine.trainer.LastCheckpoint` reads it at the end
of the batch in progress, writes ``checkpoints/last.ckpt`` there (the same bit-exact
mid-epoch checkpoint a ``--max-time`` budget writes) and ends training; the run then
writes ``metrics.json`` with ``stopped_by: signal``, prints the ``--resume`` command
and exits with ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), the code a
shell reports for a process ended by that signal. Outside training (loading data, the
final evaluation) there is no batch to finish: the first signal stops at once with
the same exit code (:class:`Interrupted`). A second signal always stops at once: the
process ends by that signal, as if no handler had been installed.

Under DDP every process takes part in :func:`agree` at each batch end, so all stop
after the same batch even when only one of them received the signal.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SIGNALS", "Interrupted", "StopSignals", "agree", "signal_name"]

#: The signals that ask a run to stop.
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, etc.

    Examples:
        >>> signal_name(15), signal_name(2)
        ('SIGTERM', 'SIGINT')
    """
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(BaseException):
    """A stop signal outside training: the run ends at once with ``128 + signum``.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that no ``except Exception``
    on the way turns the stop into an error message.

    Args:
        signum: The signal received.
        where: What was interrupted (for the message).
        hint: What the user can do next (for the message).
    """

    def __init__(self, signum: int, where: str = "", hint: str = "") -> None:
        self.signum = int(signum)
        self.where = where
        text = f"stopped by {signal_name(signum)}{' ' + where if where else ''}"
        super().__init__(f"{text}; {hint}" if hint else text)

    @property
    def exit_code(self) -> int:
        """``128 + signum``."""
        return 128 + self.signum


class StopSignals:
    """Handlers of :data:`SIGNALS` for one run (module docstring).

    Attributes:
        signum: The first signal received (None: none yet).
        training: Whether training is running (a signal then waits for the batch end).
        where: What runs when not training (for the message of :class:`Interrupted`).
        hint: What the user can do after a stop (for the same message).
        on_second: Called before a second signal ends the process (e.g. to stop the
            processes a DDP launcher started).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.training = False
        self.where = "before training"
        self.hint = ""
        self.on_second: Callable[[int], None] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop signal was received."""
        return self.signum is not None

    def install(self) -> None:
        """Install the handlers (main thread only; elsewhere signals keep their handlers).

        Installing again (Lightning replaces the SIGTERM handler when training starts)
        keeps the handlers found the first time for :meth:`restore`.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for s in SIGNALS:
            previous = signal.signal(s, self._handle)
            self._previous.setdefault(int(s), previous)

    def restore(self) -> None:
        """Put back the handlers found by the first :meth:`install`."""
        if threading.current_thread() is not threading.main_thread():
            return
        for s, previous in self._previous.items():
            signal.signal(s, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal_name(signum)
        if self.signum is not None:  # the second one: stop now
            print(f"\nselfcaps: {name} again: stopping at once", file=sys.stderr, flush=True)
            if self.on_second is not None:
                self.on_second(signum)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = int(signum)
        if not self.training:
            raise Interrupted(signum, self.where, self.hint)
        print(
            f"\nselfcaps: {name} received: finishing the current batch, then writing "
            f"checkpoints/last.ckpt and stopping ({name} again stops at once)",
            file=sys.stderr,
            flush=True,
        )


def agree(local: Sequence[float], reduce_max: Callable[[Any], Any]) -> list[float]:
    """Values every process shares: the largest over the processes, element by element.

    One all-reduce (max) of a small float tensor per call. Booleans are 0 / 1 (any
    process's ``True`` wins); a signal number (0: none) becomes the largest received.
    Decisions that only rank 0 may take (its clock) are passed as 0 by the other
    ranks, so the maximum is rank 0's value: a broadcast folded into the same collective.

    Args:
        local: This process's values (booleans or small integers).
        reduce_max: The element-wise maximum over processes (e.g.
            ``lambda t: strategy.reduce(t, reduce_op="max")``; the identity for one process).

    Returns:
        The agreed values, in order (floats).

    Examples:
        >>> agree([True, False, 15], lambda t: t)
        [1.0, 0.0, 15.0]
    """
    import torch

    values = torch.tensor([float(x) for x in local], dtype=torch.float64)
    return [float(v) for v in reduce_max(values).tolist()]
