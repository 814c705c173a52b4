"""Ctrl-C and ``kill``: stop a run as KILLED with a resumable checkpoint, not as a crash."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(BaseException):
    """The run was stopped by SIGINT or SIGTERM.

    A ``BaseException`` like ``KeyboardInterrupt``, so no ``except Exception`` swallows it, but
    not a ``KeyboardInterrupt``: Lightning turns that into ``sys.exit(1)``, which would be
    recorded as a failure.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise RunInterrupted(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`RunInterrupted` inside the block.

    Lightning chains the SIGTERM handler found when ``fit`` starts after its own, so this one
    still runs under the Trainer. Outside the main thread (where Python cannot set handlers)
    the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
