"""Reading one image into the canonical form and preparing it for the model: decode, crop, colour
constancy, resize, normalise. Core install.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "read_image",
    "read_mask",
    "load_pair",
    "DecodeError",
    "DatasetError",
    "Normalizer",
    "build_normalizer",
    "Preprocessing",
    "build_preprocessing",
    "preprocess_image",
    "preprocess_mask",
    "preprocess_pair",
    "apply_circular_vignette",
]

if TYPE_CHECKING:
    from skinet.imaging.decode import DecodeError, load_pair, read_image, read_mask
    from skinet.imaging.errors import DatasetError
    from skinet.imaging.normalize import Normalizer, build_normalizer
    from skinet.imaging.preprocess import (
        Preprocessing,
        build_preprocessing,
        preprocess_image,
        preprocess_mask,
        preprocess_pair,
    )
    from skinet.imaging.vignette import apply_circular_vignette
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "decode": ("read_image", "read_mask", "load_pair", "DecodeError"),
            "errors": ("DatasetError",),
            "normalize": ("Normalizer", "build_normalizer"),
            "preprocess": (
                "Preprocessing",
                "build_preprocessing",
                "preprocess_image",
                "preprocess_mask",
                "preprocess_pair",
            ),
            "vignette": ("apply_circular_vignette",),
        },
    )
