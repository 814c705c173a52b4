"""Ctrl-C and ``kill``: stop a run as KILLED with a resumable checkpoint, not as a crash."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []
"""The signals received inside :func:`stop_on_signals`, for :func:`raise_if_stopped`."""


class RunInterrupted(BaseException):
    """The run was stopped by SIGINT or SIGTERM.

    A ``BaseException`` like ``KeyboardInterrupt``, so no ``except Exception`` swallows it, but
    not a ``KeyboardInterrupt``: Lightning turns that into ``sys.exit(1)``, which would be
    recorded as a failure.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.last_checkpoint: Path | None = None
        """The run's ``last.ckpt`` to continue from (``None``: no epoch had finished)."""
        self.mlflow_killed = False
        """Whether the run's MLflow run was closed as ``KILLED`` (it has none before fit)."""
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def stop_worker_quietly() -> None:
    """In a DataLoader worker: SIGINT and SIGTERM raise ``KeyboardInterrupt``.

    Ctrl-C in a terminal and a scheduler's kill of a job signal every process of the group,
    the DataLoader workers too. PyTorch's worker loop ends quietly (status 0) on
    ``KeyboardInterrupt``; left alone, a worker would raise the trainer's
    :class:`RunInterrupted` inherited through ``fork`` (and print a traceback), or die of
    PyTorch's own SIGTERM handler, and the trainer would stop on "DataLoader worker ... killed
    by signal" instead of the signal. The trainer shuts its workers down as it stops.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.default_int_handler)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`RunInterrupted` inside the block.

    An error raised after the signal, while the stop unwinds (a DataLoader worker that died of
    the same signal, ...), is part of the stop: it is re-raised as the :class:`RunInterrupted`
    it follows. The workers themselves stop quietly (:func:`stop_worker_quietly`).

    Lightning chains the SIGTERM handler found when ``fit`` starts after its own, so this one
    still runs under the Trainer. A stop raised where Python ignores it is raised again by
    :func:`raise_if_stopped`. Outside the main thread (where Python cannot set handlers) the
    block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = _received
    received.clear()

    def handle(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        raise RunInterrupted(signum)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    previous_hook = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        # A handler that ran inside a __del__ (or a weakref callback): Python ignores what it
        # raised and would print a traceback; raise_if_stopped raises it again.
        if not isinstance(info.exc_value, RunInterrupted):
            previous_hook(info)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)
    sys.unraisablehook = unraisable
    try:
        yield
    except Exception as error:
        if not received:
            raise
        raise RunInterrupted(received[0]) from error
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook
        received.clear()


def raise_if_stopped() -> None:
    """Raise the :class:`RunInterrupted` of a signal :func:`stop_on_signals` received, again.

    Python runs a signal handler wherever the main thread is, and the exception it raises is
    lost when that place is a ``__del__`` or a weakref callback (a garbage collection can run
    them anywhere). ``StopCheck`` (:mod:`skinet.training.callbacks.stop_check`) calls it at
    every batch, so such a stop takes effect one batch later instead of never.
    """
    if _received:
        raise RunInterrupted(_received[0])
