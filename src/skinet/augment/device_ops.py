"""Batched augmentation ops on tensors, for the device-resident batch path.

Each function takes a float batch of pixel values in ``[0, 255]`` (``(B, 3, H, W)``; masks
``(B, 1, H, W)`` in {0, 1}) and one parameter per sample, and reproduces what the albumentations
transform of the same name does to a uint8 image, up to rounding: the CPU pipeline rounds to
uint8 after every transform, these keep float values between ops (colour ops still clip to
``[0, 255]`` as uint8 saturation does). :mod:`skinet.augment.device_pipeline` draws the parameters
from ``TRANSFORM_CONFIG`` and applies each op to the samples chosen with probability ``p``.

Albumentations has no batched tensor backend; these ops are written here for that reason.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

# ITU-R BT.601 luma weights, as OpenCV's RGB2GRAY and JPEG's YCbCr use.
_LUMA = (0.299, 0.587, 0.114)


def rot90(batch: Tensor, factors: Tensor) -> Tensor:
    """Rotate each square sample by ``factors[i]`` quarter turns anticlockwise (``np.rot90``)."""
    out = batch.clone()
    for k in (1, 2, 3):
        chosen = factors == k
        if bool(chosen.any()):
            out[chosen] = torch.rot90(batch[chosen], k, dims=(-2, -1))
    return out


def compute_affine_matrices(
    translate: Tensor, shear: Tensor, scale: Tensor, rotate: Tensor, height: int, width: int
) -> Tensor:
    """Pixel-space forward matrices ``(B, 3, 3)``, as albumentations' Affine builds them.

    Args:
        translate: ``(B, 2)`` shift in pixels (x, y).
        shear: ``(B, 2)`` shear in degrees (x, y), already negated as albumentations samples it.
        scale: ``(B, 2)`` scale factors (x, y).
        rotate: ``(B,)`` angle in degrees.
        height: Image height.
        width: Image width.

    The rotation is about the centre ``(W / 2 - 0.5, H / 2 - 0.5)`` (pixel centres), as
    ``albumentations.augmentations.geometric.functional.create_affine_transformation_matrix``.
    """
    count = rotate.shape[0]
    dtype, device = torch.float64, rotate.device
    eye = torch.eye(3, dtype=dtype, device=device).repeat(count, 1, 1)
    center_x, center_y = width / 2 - 0.5, height / 2 - 0.5
    to_origin, from_origin, scaling, rotation, shearing, shift = (eye.clone() for _ in range(6))
    to_origin[:, 0, 2], to_origin[:, 1, 2] = -center_x, -center_y
    from_origin[:, 0, 2], from_origin[:, 1, 2] = center_x, center_y
    scaling[:, 0, 0], scaling[:, 1, 1] = scale[:, 0].double(), scale[:, 1].double()
    radians = torch.deg2rad(rotate.double() % 360)
    cos, sin = torch.cos(radians), torch.sin(radians)
    rotation[:, 0, 0], rotation[:, 0, 1], rotation[:, 1, 0], rotation[:, 1, 1] = cos, sin, -sin, cos
    shearing[:, 0, 1] = torch.tan(torch.deg2rad(shear[:, 0].double()))
    shearing[:, 1, 0] = torch.tan(torch.deg2rad(shear[:, 1].double()))
    shift[:, 0, 2], shift[:, 1, 2] = translate[:, 0].double(), translate[:, 1].double()
    return from_origin @ shift @ shearing @ rotation @ scaling @ to_origin


def warp_affine(batch: Tensor, matrices: Tensor, mode: str, fill: float = 0.0) -> Tensor:
    """``cv2.warpAffine`` with a constant border, per sample, via ``affine_grid``/``grid_sample``.

    Args:
        batch: ``(B, C, H, W)`` float.
        matrices: ``(B, 3, 3)`` forward pixel-space matrices (:func:`compute_affine_matrices`).
        mode: ``"bilinear"`` or ``"nearest"``.
        fill: Value of pixels mapped from outside the image.
    """
    count, _, height, width = batch.shape
    dtype, device = torch.float64, batch.device
    # theta maps output to input in normalised coordinates (align_corners=False), so it is the
    # inverse pixel matrix conjugated by the pixel -> normalised map.
    to_norm = torch.tensor(
        [[2 / width, 0, 1 / width - 1], [0, 2 / height, 1 / height - 1], [0, 0, 1]],
        dtype=dtype,
        device=device,
    )
    theta = to_norm @ torch.linalg.inv(matrices.to(dtype)) @ torch.linalg.inv(to_norm)
    grid = F.affine_grid(theta[:, :2].to(batch.dtype), [count, 1, height, width], False)
    warped = F.grid_sample(batch, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if fill != 0:
        ones = torch.ones_like(batch[:, :1])
        coverage = F.grid_sample(ones, grid, mode=mode, padding_mode="zeros", align_corners=False)
        warped = warped + fill * (1 - coverage)
    return warped


def to_gray(batch: Tensor) -> Tensor:
    """``(B, 1, H, W)`` luma of an RGB batch."""
    red, green, blue = batch.unbind(1)
    return (_LUMA[0] * red + _LUMA[1] * green + _LUMA[2] * blue).unsqueeze(1)


def _per_sample(values: Tensor) -> Tensor:
    return values.to(torch.float32).view(-1, 1, 1, 1)


def adjust_brightness(batch: Tensor, factors: Tensor) -> Tensor:
    """ColorJitter's brightness: multiply by the factor, clip."""
    return (batch * _per_sample(factors)).clamp(0, 255)


def adjust_contrast(batch: Tensor, factors: Tensor) -> Tensor:
    """ColorJitter's contrast: blend with the mean grey value of the image, clip."""
    mean = to_gray(batch).mean(dim=(1, 2, 3), keepdim=True)
    factor = _per_sample(factors)
    return (batch * factor + mean * (1 - factor)).clamp(0, 255)


def adjust_saturation(batch: Tensor, factors: Tensor) -> Tensor:
    """ColorJitter's saturation: blend with the grey image, clip."""
    factor = _per_sample(factors)
    return (batch * factor + to_gray(batch) * (1 - factor)).clamp(0, 255)


def rgb_to_hsv(batch: Tensor) -> Tensor:
    """RGB in ``[0, 255]`` -> hue in turns ``[0, 1)``, saturation ``[0, 1]``, value ``[0, 255]``."""
    red, green, blue = batch.unbind(1)
    value = torch.maximum(torch.maximum(red, green), blue)
    delta = value - torch.minimum(torch.minimum(red, green), blue)
    inverse = torch.where(delta > 0, 1 / delta, torch.zeros_like(delta))
    # Hexcone hue; ties resolve red, then green first (as an argmax would).
    hue = torch.where(
        red == value,
        (green - blue) * inverse,
        torch.where(green == value, (blue - red) * inverse + 2, (red - green) * inverse + 4),
    )
    hue = torch.frac(hue.div_(6).add_(1))
    saturation = torch.where(value > 0, delta / value, torch.zeros_like(value))
    return torch.stack((hue, saturation, value), dim=1)


def hsv_to_rgb(hsv: Tensor) -> Tensor:
    """Inverse of :func:`rgb_to_hsv`."""
    hue, saturation, value = hsv.unbind(1)
    sector = hue * 6
    channels = []
    for offset in (5.0, 3.0, 1.0):  # red, green, blue
        k = (offset + sector) % 6
        weight = torch.clamp(torch.minimum(k, 4 - k), 0, 1)
        channels.append(value - value * saturation * weight)
    return torch.stack(channels, dim=1)


def adjust_hue(batch: Tensor, factors: Tensor) -> Tensor:
    """ColorJitter's hue: rotate the hue by ``factors[i]`` turns."""
    hsv = rgb_to_hsv(batch)
    hsv[:, 0] = (hsv[:, 0] + factors.to(hsv.dtype).view(-1, 1, 1)) % 1.0
    return hsv_to_rgb(hsv).clamp(0, 255)


def shift_hsv(batch: Tensor, hue_shift: Tensor, sat_shift: Tensor, val_shift: Tensor) -> Tensor:
    """HueSaturationValue: shifts in OpenCV's uint8 HSV units (hue 0-180, S and V 0-255).

    Saturation stays 0 where it is 0 (grey pixels stay grey), as albumentations does.
    """
    hsv = rgb_to_hsv(batch)
    view = (-1, 1, 1)
    hue = (hsv[:, 0] + hue_shift.to(hsv.dtype).view(view) / 180) % 1.0
    saturation = ((hsv[:, 1] * 255 + sat_shift.to(hsv.dtype).view(view)).clamp(0, 255)) / 255
    saturation = torch.where(hsv[:, 1] > 0, saturation, torch.zeros_like(saturation))
    value = (hsv[:, 2] + val_shift.to(hsv.dtype).view(view)).clamp(0, 255)
    return hsv_to_rgb(torch.stack((hue, saturation, value), dim=1)).clamp(0, 255)


def gamma(batch: Tensor, gammas: Tensor) -> Tensor:
    """RandomGamma: ``255 * (x / 255) ** gamma``."""
    return 255 * (batch / 255).clamp_min(0) ** _per_sample(gammas)


def brightness_contrast(batch: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    """RandomBrightnessContrast: ``alpha * x + beta`` (``beta`` already in pixel units), clip."""
    return (batch * _per_sample(alpha) + _per_sample(beta)).clamp(0, 255)


def rgb_shift(batch: Tensor, shifts: Tensor) -> Tensor:
    """RGBShift: add ``shifts[i]`` (``(B, 3)``, pixel units) to each channel, clip."""
    return (batch + shifts.to(batch.dtype).view(-1, 3, 1, 1)).clamp(0, 255)


def gaussian_kernels(sigmas: Tensor, sizes: Tensor) -> Tensor:
    """``(B, K)`` 1-D Gaussian kernels, zero-padded to the largest odd size ``K``.

    Same kernel as albumentations' ``create_gaussian_kernel_1d``: size 0 means
    ``int(sigma * 3.5) * 2 + 1``, an even size is made odd by adding one.
    """
    sizes = torch.where(sizes == 0, (sigmas * 3.5).long() * 2 + 1, sizes.long())
    sizes = sizes + (sizes % 2 == 0).long()
    largest = int(sizes.max())
    offsets = torch.arange(largest, device=sigmas.device, dtype=torch.float32) - largest // 2
    kernels = torch.exp(-0.5 * (offsets[None] / sigmas.float()[:, None]) ** 2)
    kernels = kernels * (offsets[None].abs() <= (sizes[:, None] // 2)).float()
    return kernels / kernels.sum(dim=1, keepdim=True)


def gaussian_blur(batch: Tensor, kernels: Tensor) -> Tensor:
    """GaussianBlur: separable convolution, each sample with its own kernel (reflect-101 border)."""
    count, channels, height, width = batch.shape
    size = kernels.shape[1]
    half = size // 2
    weights = kernels.repeat_interleave(channels, dim=0).to(batch.dtype)
    flat = batch.reshape(1, count * channels, height, width)
    flat = F.pad(flat, (half, half, half, half), mode="reflect")
    flat = F.conv2d(flat, weights.view(-1, 1, 1, size), groups=count * channels)
    flat = F.conv2d(flat, weights.view(-1, 1, size, 1), groups=count * channels)
    return flat.view(count, channels, height, width)


def circular_vignette(batch: Tensor, centers: Tensor, radii: Tensor, fills: Tensor) -> Tensor:
    """CircularVignette: pixels outside each sample's circle become its fill value.

    ``centers`` ``(B, 2)`` are fractions of (width, height); ``radii`` fractions of half the
    shorter side, as :func:`skinet.imaging.vignette.apply_circular_vignette`.
    """
    _, _, height, width = batch.shape
    device = batch.device
    cols = torch.arange(width, device=device, dtype=torch.float32) + 0.5
    rows = torch.arange(height, device=device, dtype=torch.float32) + 0.5
    dx = cols[None, None, :] - centers[:, 0, None, None].float() * width
    dy = rows[None, :, None] - centers[:, 1, None, None].float() * height
    radius_px = radii.float() * min(height, width) / 2
    outside = (dx**2 + dy**2) > (radius_px**2)[:, None, None]
    return torch.where(outside[:, None], _per_sample(fills).to(batch.dtype), batch)


# JPEG (ITU T.81 Annex K) quantisation tables, scaled by quality as libjpeg does.
_JPEG_LUMA_TABLE = (
    (16, 11, 10, 16, 24, 40, 51, 61), (12, 12, 14, 19, 26, 58, 60, 55),
    (14, 13, 16, 24, 40, 57, 69, 56), (14, 17, 22, 29, 51, 87, 80, 62),
    (18, 22, 37, 56, 68, 109, 103, 77), (24, 35, 55, 64, 81, 104, 113, 92),
    (49, 64, 78, 87, 103, 121, 120, 101), (72, 92, 95, 98, 112, 100, 103, 99),
)  # fmt: skip
_JPEG_CHROMA_TABLE = (
    (17, 18, 24, 47, 99, 99, 99, 99), (18, 21, 26, 66, 99, 99, 99, 99),
    (24, 26, 56, 99, 99, 99, 99, 99), (47, 66, 99, 99, 99, 99, 99, 99),
) + ((99,) * 8,) * 4  # fmt: skip


def _dct_matrix(device: torch.device) -> Tensor:
    index = torch.arange(8, dtype=torch.float32, device=device)
    basis = torch.cos((2 * index[None, :] + 1) * index[:, None] * math.pi / 16)
    basis[0] *= 1 / math.sqrt(2)
    return basis * 0.5


def jpeg_quant_tables(qualities: Tensor) -> Tensor:
    """``(B, 2, 8, 8)`` luma and chroma tables for each quality (libjpeg's scaling)."""
    q = qualities.float().clamp(1, 100)
    scale = torch.where(q < 50, 5000 / q, 200 - 2 * q)[:, None, None, None]
    base = torch.tensor((_JPEG_LUMA_TABLE, _JPEG_CHROMA_TABLE), device=q.device).float()
    return torch.floor((base[None] * scale + 50) / 100).clamp(1, 255)


def _blockwise(planes: Tensor, tables: Tensor, dct: Tensor) -> Tensor:
    """Quantise every 8x8 block of ``planes`` ``(B, C, H, W)`` with ``tables`` ``(B, C, 8, 8)``.

    The 2-D DCT of a block is one product with ``kron(D, D)`` on the flattened block, so the
    whole batch is a single matrix product rather than many 8x8 ones.
    """
    count, channels, height, width = planes.shape
    blocks = planes.reshape(count, channels, height // 8, 8, width // 8, 8).transpose(3, 4)
    blocks = blocks.reshape(count, channels, -1, 64) - 128
    basis = torch.kron(dct, dct)
    table = tables.reshape(count, channels, 1, 64)
    coefficients = torch.round((blocks @ basis.T) / table) * table
    blocks = (coefficients @ basis + 128).reshape(count, channels, height // 8, width // 8, 8, 8)
    return blocks.transpose(3, 4).reshape(count, channels, height, width)


def jpeg_approximation(batch: Tensor, qualities: Tensor) -> Tensor:
    """ImageCompression (JPEG), approximated: YCbCr, 4:2:0 chroma, 8x8 DCT quantisation.

    What libjpeg does (as ``cv2.imencode``'s default), without entropy coding (lossless) and
    with bilinear rather than libjpeg's "fancy" chroma upsampling. Sides are padded by
    replication to a multiple of 16 and cropped back.
    """
    count, _, height, width = batch.shape
    pad_h, pad_w = (-height) % 16, (-width) % 16
    padded = F.pad(batch, (0, pad_w, 0, pad_h), mode="replicate") if pad_h or pad_w else batch
    red, green, blue = padded.unbind(1)
    luma = _LUMA[0] * red + _LUMA[1] * green + _LUMA[2] * blue
    cb = -0.168736 * red - 0.331264 * green + 0.5 * blue + 128
    cr = 0.5 * red - 0.418688 * green - 0.081312 * blue + 128
    tables = jpeg_quant_tables(qualities).to(batch.dtype)
    dct = _dct_matrix(batch.device).to(batch.dtype)
    luma = _blockwise(luma[:, None], tables[:, :1], dct)[:, 0]
    chroma = F.avg_pool2d(torch.stack((cb, cr), dim=1), 2)
    chroma = _blockwise(chroma, tables[:, 1:].expand(-1, 2, -1, -1), dct)
    chroma = F.interpolate(chroma, scale_factor=2, mode="bilinear", align_corners=False)
    cb, cr = chroma[:, 0] - 128, chroma[:, 1] - 128
    rgb = torch.stack(
        (luma + 1.402 * cr, luma - 0.344136 * cb - 0.714136 * cr, luma + 1.772 * cb), dim=1
    )
    return torch.round(rgb[:, :, :height, :width]).clamp(0, 255)


def normalize(batch: Tensor, mode: str, mean: Tensor, std: Tensor, eps: float = 1e-6) -> Tensor:
    """Pixels in ``[0, 255]`` -> normalised float, as :class:`skinet.imaging.normalize.Normalizer`.

    ``mode`` ``"standard"`` uses ``mean``/``std`` ``(3,)`` (fractions of 255);
    ``"image_per_channel"`` each image's own channel mean and (population) std.
    """
    pixels = batch / 255
    if mode == "standard":
        mean_b, std_b = mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)
    else:
        mean_b = pixels.mean(dim=(2, 3), keepdim=True)
        std_b = pixels.std(dim=(2, 3), keepdim=True, correction=0)
    return (pixels - mean_b) / std_b.clamp_min(eps)
