"""UNet2D and its building blocks; free of Lightning, MLflow and Optuna.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "UNet2D",
    "ENCODER_BLOCKS",
    "SqueezeExcitation",
    "MERGE_BLOCKS",
    "AttentionGate",
    "InstanceNorm",
    "find_nondeterministic_ops",
]

if TYPE_CHECKING:
    from skinet.models.determinism import find_nondeterministic_ops
    from skinet.models.encoder_blocks import ENCODER_BLOCKS, SqueezeExcitation
    from skinet.models.layers import InstanceNorm
    from skinet.models.merge_blocks import MERGE_BLOCKS, AttentionGate
    from skinet.models.unet2d import UNet2D
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "unet2d": ("UNet2D",),
            "encoder_blocks": ("ENCODER_BLOCKS", "SqueezeExcitation"),
            "merge_blocks": ("MERGE_BLOCKS", "AttentionGate"),
            "layers": ("InstanceNorm",),
            "determinism": ("find_nondeterministic_ops",),
        },
    )
