"""A standard output whose reader has gone (``skinet config init | head -3``): the command ends
at its next line of output, quietly, with :data:`BROKEN_PIPE_EXIT`, as ``yes | head`` does.

Python ignores SIGPIPE, so a write to such a pipe raises ``BrokenPipeError`` wherever it happens:
in a ``print`` (caught by ``skinet.__main__.entry``), in a log record or a rich table (turned
into :class:`OutputClosed` there). Either way the output is first pointed at ``os.devnull``
(:func:`release_stdout`), so what a stopping run still writes (its closing log lines, the flush
at exit) is dropped instead of failing again.
"""

from __future__ import annotations

import os
import select
import sys

BROKEN_PIPE_EXIT = 141
"""The shell's status for a command whose standard output's reader has gone (128 + SIGPIPE), as
``yes | head`` reports for ``yes``."""

_released = False


class OutputClosed(BaseException):
    """The standard output's reader has gone. A ``BaseException`` like ``KeyboardInterrupt``, so
    no ``except Exception`` swallows it (a sweep's trial, a plot that may fail): the command ends
    at once, a training run closed like any stopped one."""

    def __init__(self) -> None:
        super().__init__("the standard output's reader has gone")


def release_stdout() -> None:
    """Point the standard output at ``os.devnull`` (once its reader has gone): what is still
    written is dropped, and :func:`stdout_released` says so from then on."""
    global _released
    _released = True
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no file descriptor: nothing to point
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def stdout_released() -> bool:
    """Whether :func:`release_stdout` ran in this process: the command ends with
    :data:`BROKEN_PIPE_EXIT` whatever else it returns."""
    return _released


def stdout_reader_gone() -> bool:
    """Whether the standard output is a pipe whose reader has gone (or was released for that):
    a ``BrokenPipeError`` from anywhere else (a socket to a tracking server) is a real error."""
    if _released:
        return True
    if not hasattr(select, "poll"):  # Windows: no poll on pipes; a print's error is the likely one
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        ready = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no file descriptor (a StringIO), or closed
        return False
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in ready)


def release_if_reader_gone(error: BaseException | None) -> bool:
    """Whether ``error`` is a ``BrokenPipeError`` of the standard output; if so, the output is
    released first (:func:`release_stdout`)."""
    if isinstance(error, BrokenPipeError) and stdout_reader_gone():
        release_stdout()
        return True
    return False


def close_output_for(error: BaseException | None) -> None:
    """Raise :class:`OutputClosed` if ``error`` is a ``BrokenPipeError`` of the standard output,
    after releasing it; else return. For the places that write a line of output and would
    otherwise report the error (a log handler, a rich console)."""
    if release_if_reader_gone(error):
        raise OutputClosed from error
