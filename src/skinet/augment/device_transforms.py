"""Batched tensor versions of the transforms ``augment_on: device`` supports, by their
``TRANSFORM_CONFIG`` name (:data:`DEVICE_TRANSFORMS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import albumentations as A
import cv2
import numpy as np
import torch
from torch import Tensor

from skinet.augment import device_ops as ops

Params = dict[str, Tensor]


class DeviceOp:
    """One transform on a batch: draw parameters for every sample, apply to a random subset.

    Parameters are drawn for every sample whether or not it is chosen, so the random stream
    (and with it every later op) does not depend on which samples were picked.
    """

    def __init__(self, transform: A.BasicTransform) -> None:
        self.transform = transform
        self.p = float(transform.p)

    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        """Per-sample parameters ``(count, ...)``."""
        return {}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        """The op on chosen samples: images ``(n, 3, H, W)`` in [0, 255], masks ``(n, 1, H, W)``."""
        raise NotImplementedError

    def __call__(
        self, images: Tensor, masks: Tensor, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        count, device = images.shape[0], images.device
        params = self.draw(count, generator, device)
        chosen = torch.rand(count, generator=generator, device=device) < self.p
        if bool(chosen.all()):
            return self.apply(images, masks, params)
        if not bool(chosen.any()):
            return images, masks
        picked = {name: value[chosen] for name, value in params.items()}
        new_images, new_masks = self.apply(images[chosen], masks[chosen], picked)
        images, masks = images.clone(), masks.clone()
        images[chosen], masks[chosen] = new_images, new_masks
        return images, masks

    @classmethod
    def refuse(cls, transform: A.BasicTransform) -> str | None:
        """Why this transform's settings have no device version (``None``: they do)."""
        return None


def _uniform(bounds: Any, count: int, generator: torch.Generator, device: torch.device) -> Tensor:
    """Floats in ``[low, high)`` from a ``(low, high)`` pair (a number means that number)."""
    low, high = (bounds, bounds) if isinstance(bounds, int | float) else bounds
    low, high = float(low), float(high)
    return low + (high - low) * torch.rand(count, generator=generator, device=device)


def _randint(bounds: Sequence[int], count: int, generator: torch.Generator, device: Any) -> Tensor:
    """Integers in ``[low, high]``, both inclusive (as ``random.randint``)."""
    low, high = int(bounds[0]), int(bounds[1])
    return torch.randint(low, high + 1, (count,), generator=generator, device=device)


class HorizontalFlipOp(DeviceOp):
    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return images.flip(-1), masks.flip(-1)


class VerticalFlipOp(DeviceOp):
    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return images.flip(-2), masks.flip(-2)


class RandomRotate90Op(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        return {"factor": _randint((0, 3), count, generator, device)}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return ops.rot90(images, params["factor"]), ops.rot90(masks, params["factor"])


_INTERPOLATION = {cv2.INTER_NEAREST: "nearest", cv2.INTER_LINEAR: "bilinear"}


class AffineOp(DeviceOp):
    """Scale, rotate, shear and translate about the centre; constant border; same output size."""

    @classmethod
    def refuse(cls, transform: A.BasicTransform) -> str | None:
        t: Any = transform
        settings = {
            "fit_output": (t.fit_output, False),
            "balanced_scale": (t.balanced_scale, False),
            "border_mode": (t.border_mode, cv2.BORDER_CONSTANT),
        }
        for name, (value, supported) in settings.items():
            if value != supported:
                return f"{name}={value!r} (the device version supports only {supported!r})"
        for name in ("interpolation", "mask_interpolation"):
            if getattr(t, name) not in _INTERPOLATION:
                return f"{name}={getattr(t, name)!r} (the device version supports 0 and 1)"
        for name in ("fill", "fill_mask"):
            if not np.isscalar(getattr(t, name)):
                return f"{name}={getattr(t, name)!r} (the device version supports one number)"
        return None

    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        if t.translate_px is not None:
            translate = [_randint(t.translate_px[k], count, generator, device) for k in "xy"]
            fractions = None
        else:
            ranges = t.translate_percent or {"x": 0.0, "y": 0.0}
            fractions = torch.stack(
                [_uniform(ranges[k], count, generator, device) for k in "xy"], 1
            )
            translate = []
        shear = torch.stack([-_uniform(t.shear[k], count, generator, device) for k in "xy"], 1)
        scale = torch.stack([_uniform(t.scale[k], count, generator, device) for k in "xy"], 1)
        if t.keep_ratio:
            scale[:, 1] = scale[:, 0]
        params = {
            "shear": shear,
            "scale": scale,
            "rotate": _uniform(t.rotate, count, generator, device),
        }
        if fractions is not None:
            params["translate_fraction"] = fractions
        else:
            params["translate_px"] = torch.stack(translate, 1).float()
        return params

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        t: Any = self.transform
        height, width = images.shape[-2:]
        if "translate_px" in params:
            translate = params["translate_px"]
        else:  # albumentations truncates the pixel shift to an integer
            size = torch.tensor([width, height], device=images.device, dtype=torch.float32)
            translate = torch.trunc(params["translate_fraction"] * size)
        matrices = ops.compute_affine_matrices(
            translate, params["shear"], params["scale"], params["rotate"], height, width
        )
        images = ops.warp_affine(images, matrices, _INTERPOLATION[t.interpolation], float(t.fill))
        masks = ops.warp_affine(
            masks, matrices, _INTERPOLATION[t.mask_interpolation], float(t.fill_mask)
        )
        return images, masks


class ColorJitterOp(DeviceOp):
    """Brightness, contrast, saturation and hue in a random order per sample, as albumentations."""

    _STEPS: tuple[Callable[[Tensor, Tensor], Tensor], ...] = (
        ops.adjust_brightness,
        ops.adjust_contrast,
        ops.adjust_saturation,
        ops.adjust_hue,
    )
    _NAMES = ("brightness", "contrast", "saturation", "hue")

    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        params = {
            name: _uniform(getattr(t, name), count, generator, device) for name in self._NAMES
        }
        params["order"] = torch.rand(count, 4, generator=generator, device=device).argsort(dim=1)
        return params

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        images = images.clone()
        for position in range(4):
            for step, name in enumerate(self._NAMES):
                chosen = params["order"][:, position] == step
                if bool(chosen.any()):
                    images[chosen] = self._STEPS[step](images[chosen], params[name][chosen])
        return images, masks


class RandomGammaOp(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        return {"gamma": _uniform(t.gamma_limit, count, generator, device) / 100}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return ops.gamma(images, params["gamma"]), masks


class RandomBrightnessContrastOp(DeviceOp):
    @classmethod
    def refuse(cls, transform: A.BasicTransform) -> str | None:
        if getattr(transform, "ensure_safe_range", False):
            return "ensure_safe_range=True (the device version supports only False)"
        return None

    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        alpha = 1 + _uniform(t.contrast_limit, count, generator, device)
        return {"alpha": alpha, "beta": _uniform(t.brightness_limit, count, generator, device)}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        t: Any = self.transform
        if t.brightness_by_max:
            beta = params["beta"] * 255
        else:
            beta = params["beta"] * images.mean(dim=(1, 2, 3))
        return ops.brightness_contrast(images, params["alpha"], beta), masks


class HueSaturationValueOp(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        names = ("hue_shift", "sat_shift", "val_shift")
        return {n: _uniform(getattr(t, f"{n}_limit"), count, generator, device) for n in names}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        shifted = ops.shift_hsv(
            images, params["hue_shift"], params["sat_shift"], params["val_shift"]
        )
        return shifted, masks


class RGBShiftOp(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        # albumentations stores the limits as fractions of 255 (values above 1 were divided).
        ranges = self.transform.noise_params["ranges"]  # type: ignore[attr-defined]
        shifts = [_uniform(r, count, generator, device) * 255 for r in ranges]
        return {"shift": torch.stack(shifts, dim=1)}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return ops.rgb_shift(images, params["shift"]), masks


class GaussianBlurOp(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        sigma = _uniform(t.sigma_limit, count, generator, device)
        return {"sigma": sigma, "size": _randint(t.blur_limit, count, generator, device)}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        kernels = ops.gaussian_kernels(params["sigma"], params["size"])
        return ops.gaussian_blur(images, kernels), masks


class ImageCompressionOp(DeviceOp):
    """JPEG approximated by DCT quantisation (:func:`.device_augment.jpeg_approximation`)."""

    @classmethod
    def refuse(cls, transform: A.BasicTransform) -> str | None:
        kind = getattr(transform, "compression_type", "jpeg")
        if kind != "jpeg":
            return f"compression_type={kind!r} (the device version approximates only 'jpeg')"
        return None

    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        return {"quality": _randint(t.quality_range, count, generator, device)}

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return ops.jpeg_approximation(images, params["quality"]), masks


class CircularVignetteOp(DeviceOp):
    def draw(self, count: int, generator: torch.Generator, device: torch.device) -> Params:
        t: Any = self.transform
        jitter = (-t.center_jitter, t.center_jitter)
        center = torch.stack([0.5 + _uniform(jitter, count, generator, device) for _ in "xy"], 1)
        return {
            "center": center,
            "radius": _uniform(t.radius_range, count, generator, device),
            "fill": _randint(t.fill_range, count, generator, device),
        }

    def apply(self, images: Tensor, masks: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return ops.circular_vignette(
            images, params["center"], params["radius"], params["fill"]
        ), masks


DEVICE_TRANSFORMS: dict[str, type[DeviceOp]] = {
    "HorizontalFlip": HorizontalFlipOp,
    "VerticalFlip": VerticalFlipOp,
    "RandomRotate90": RandomRotate90Op,
    "Affine": AffineOp,
    "ColorJitter": ColorJitterOp,
    "RandomGamma": RandomGammaOp,
    "RandomBrightnessContrast": RandomBrightnessContrastOp,
    "HueSaturationValue": HueSaturationValueOp,
    "RGBShift": RGBShiftOp,
    "GaussianBlur": GaussianBlurOp,
    "ImageCompression": ImageCompressionOp,
    "CircularVignette": CircularVignetteOp,
}
"""Transforms with a batched device version, by their ``TRANSFORM_CONFIG`` name."""
