"""Runs ``skinet.cli.main.main`` in a subprocess the way the run-safety tests need.

``python cli_harness.py barrier DIR ID ROUNDS -- ARGS...``
    Import everything, then for each round r: write ``DIR/ready_r_ID``, wait for ``DIR/go_r``
    (so several processes start ``main`` at the same moment), run ``main(ARGS)`` with
    ``TRAIN_CONFIG.output_dir=DIR/round_r`` and write its exit code to ``DIR/rc_r_ID``.

``python cli_harness.py kill HOOK EPOCH -- ARGS...``
    Run ``main(ARGS)`` and SIGKILL this process when ``LightningModel.HOOK`` runs in epoch
    ``EPOCH`` (``-1``: any epoch): a real hard kill at a chosen point of a real run.

``python cli_harness.py signal SIGNAL FUNCTION -- ARGS...``
    Run ``main(ARGS)`` and send this process ``SIGNAL`` (``SIGINT``, ``SIGTERM``) as soon as
    ``skinet.training.run.FUNCTION`` has returned: a real signal between two steps of a run.

``python cli_harness.py signal-in-del SIGNAL FUNCTION -- ARGS...``
    The same, sent from an object's ``__del__`` (Python ignores what a ``__del__`` raises).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path

import lightning  # noqa: F401  (imported before the barrier, as main would)
import mlflow  # noqa: F401

import skinet.training.run as run_module
from skinet.cli.main import main
from skinet.training.lightning_model import LightningModel


def _barrier(folder: Path, worker: str, rounds: int, args: list[str]) -> int:
    for r in range(rounds):
        (folder / f"ready_{r}_{worker}").touch()
        go = folder / f"go_{r}"
        while not go.exists():
            time.sleep(0.001)
        try:
            code = main([*args, "--set", f"TRAIN_CONFIG.output_dir={folder / f'round_{r}'}"])
        except BaseException:  # noqa: BLE001 - the test reads the traceback
            traceback.print_exc()
            code = 99
        (folder / f"rc_{r}_{worker}").write_text(str(code))
    return 0


def _kill_at(hook: str, epoch: int, args: list[str]) -> int:
    def die(self: LightningModel, *_: object) -> None:
        if epoch < 0 or self.current_epoch == epoch:
            os.kill(os.getpid(), signal.SIGKILL)

    setattr(LightningModel, hook, die)
    return main(args)


class _SignalOnDelete:
    def __init__(self, name: str) -> None:
        self.name = name

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.Signals[self.name])


def _signal_after(name: str, function: str, args: list[str], in_del: bool = False) -> int:
    original = getattr(run_module, function)

    def then_signal(*inner: object, **kwargs: object) -> object:
        result = original(*inner, **kwargs)
        if in_del:
            _SignalOnDelete(name)  # dropped at once: its __del__ sends the signal
        else:
            os.kill(os.getpid(), signal.Signals[name])
        return result

    setattr(run_module, function, then_signal)
    return main(args)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    split = rest.index("--")
    head, cli_args = rest[:split], rest[split + 1 :]
    if mode == "barrier":
        sys.exit(_barrier(Path(head[0]), head[1], int(head[2]), cli_args))
    if mode in ("signal", "signal-in-del"):
        sys.exit(_signal_after(head[0], head[1], cli_args, in_del=mode == "signal-in-del"))
    sys.exit(_kill_at(head[0], int(head[1]), cli_args))
