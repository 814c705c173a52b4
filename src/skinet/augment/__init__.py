"""Training augmentations: albumentations and SkiNet's own transforms on the CPU, their tensor
versions on the device, and the checks of a TRANSFORM_CONFIG against both. Training extra.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "build_train_transform",
    "CircularVignette",
    "CUSTOM_TRANSFORMS",
    "DeviceAugmentation",
    "build_device_augmentation",
    "DEVICE_TRANSFORMS",
    "check_config",
]

if TYPE_CHECKING:
    from skinet.augment.checks import check_config
    from skinet.augment.cpu import CUSTOM_TRANSFORMS, CircularVignette, build_train_transform
    from skinet.augment.device_pipeline import DeviceAugmentation, build_device_augmentation
    from skinet.augment.device_transforms import DEVICE_TRANSFORMS
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "cpu": ("build_train_transform", "CircularVignette", "CUSTOM_TRANSFORMS"),
            "device_pipeline": ("DeviceAugmentation", "build_device_augmentation"),
            "device_transforms": ("DEVICE_TRANSFORMS",),
            "checks": ("check_config",),
        },
    )
