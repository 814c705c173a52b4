"""The checkpoint: its one format, loading state dicts, reading a checkpoint for inference, and the
model card that travels with it.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "SkinetCheckpoint",
    "load_checkpoint",
    "build_model",
    "read_checkpoint_file",
    "CheckpointPayload",
    "CheckpointError",
    "load_portable_state_dict",
    "compile_model",
    "count_parameters",
    "build_model_card",
]

if TYPE_CHECKING:
    from skinet.checkpoints.format import CheckpointError, CheckpointPayload
    from skinet.checkpoints.model_card import build_model_card
    from skinet.checkpoints.read import (
        SkinetCheckpoint,
        build_model,
        load_checkpoint,
        read_checkpoint_file,
    )
    from skinet.checkpoints.state_dict import (
        compile_model,
        count_parameters,
        load_portable_state_dict,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "read": ("SkinetCheckpoint", "load_checkpoint", "build_model", "read_checkpoint_file"),
            "format": ("CheckpointPayload", "CheckpointError"),
            "state_dict": ("load_portable_state_dict", "compile_model", "count_parameters"),
            "model_card": ("build_model_card",),
        },
    )
