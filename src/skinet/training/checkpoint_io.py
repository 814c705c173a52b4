"""How a run writes its checkpoints: whole or not at all, in the checkpoint's own folder.

Lightning's writer goes through fsspec, which writes a local file to a temporary file in the
system's temporary folder and then moves it over the checkpoint. When the output folder is on
another filesystem that move is a copy: on a full disk it leaves an empty or partial
``best-epoch=002.ckpt`` (and truncates the ``last.ckpt`` it was replacing), and the error names
the temporary file in ``/tmp``. Here the bytes go to a hidden temporary file beside the
checkpoint, which is renamed over it once complete and removed if the write fails, and the
error names the checkpoint.
"""

from __future__ import annotations

import io
import os
import secrets
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem

PARTIAL_SUFFIX = ".partial"
"""The temporary file of a checkpoint being written: ``.<name>.<random>.partial`` beside it."""


def write_whole(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, renamed into
    place once complete: ``path`` is either untouched or whole, and nothing else is left.

    Raises:
        OSError: The write failed; its ``filename`` is ``path``, never the temporary file.
    """
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}{PARTIAL_SUFFIX}")
    try:
        # Created as open() creates a file (the umask applies), unlike mkstemp's 0600.
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


class WholeFileCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes a local checkpoint with :func:`write_whole`."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_whole(target, buffer.getbuffer())


def _is_local(path: Any) -> bool:
    protocol = get_filesystem(path).protocol
    return "file" in (protocol if isinstance(protocol, tuple | list) else (protocol,))
