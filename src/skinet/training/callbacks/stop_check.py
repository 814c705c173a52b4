"""``StopCheck``: a stop whose first raise was lost takes effect at the next batch."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from skinet.training.signals import raise_if_stopped


class StopCheck(Callback):
    """Raise again, at the next batch, a signal's stop that Python ignored.

    A signal handler runs wherever the main thread is; inside a ``__del__`` what it raises is
    ignored (:func:`skinet.training.signals.raise_if_stopped`). Without this a Ctrl-C that lands
    in a garbage collection would let the run go on to its end.
    """

    def on_train_batch_start(self, *_: Any, **__: Any) -> None:
        raise_if_stopped()

    def on_train_batch_end(self, *_: Any, **__: Any) -> None:
        raise_if_stopped()

    def on_validation_batch_end(self, *_: Any, **__: Any) -> None:
        raise_if_stopped()

    def on_test_batch_end(self, *_: Any, **__: Any) -> None:
        raise_if_stopped()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        raise_if_stopped()
