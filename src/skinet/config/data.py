"""``DATA_CONFIG``: where the images are, how they are split, sized and normalised."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from skinet.config.base import Section

DatasetName = Literal["synthetic", "isic2017", "isic2018", "ph2", "folder"]
ResizeMode = Literal["squash", "letterbox"]
ColorConstancy = Literal["none", "shades_of_gray"]
NormalizationMode = Literal["standard", "image_per_channel"]

# Per-channel mean/std (RGB, on [0, 1]) over every pixel of the 1800 official ISIC 2017 training
# images (512x512 centre crops), from ``skinet data stats``.
ISIC2017_MEAN = (0.7125, 0.5864, 0.5362)
ISIC2017_STD = (0.1486, 0.1668, 0.1820)


class ProgressiveResizingConfig(Section):
    """Train the first part of a run on smaller images, so the same time buys more epochs;
    validation, the threshold sweep and prediction stay at ``DATA_CONFIG.image_size``."""

    scale: float = Field(0.75, gt=0.0, lt=1.0)
    """Side of the first part's training images as a share of ``DATA_CONFIG.image_size``
    (rounded to whole pixels; each training batch is scaled down from ``image_size``)."""
    fraction: float = Field(0.5, gt=0.0, lt=1.0)
    """Share of the run at that size, measured when each epoch starts: of
    ``TRAIN_CONFIG.max_epochs``, or of ``max_time`` when it is set and further along."""

    def side(self, image_size: int) -> int:
        """The first part's side for a ``DATA_CONFIG.image_size`` of ``image_size``."""
        return round(image_size * self.scale)


class DataConfig(Section):
    """Dataset selection, data roots, splitting, resizing and normalisation."""

    dataset: DatasetName = "isic2017"
    """Layout reader, one of ``isic2017``, ``isic2018``, ``ph2``, ``folder`` or ``synthetic``."""
    data_dir: str | None = None
    """Dataset folder; relative paths are resolved against the data roots below (``None``:
    ``data/ISIC2017``, ``data/ISIC2018``, ``data/PH2Dataset``, ``data/folder`` or
    ``data/synthetic_isic2017``, by ``dataset``)."""
    azure_blob_mount_point: str | None = None
    """Mounted blob storage searched first for ``data_dir`` (e.g. ``/mnt/data/``)."""
    local_data_root: str | None = None
    """Local folder searched after the mount point for ``data_dir``."""
    image_size: int = Field(256, gt=0)
    """Side of the square model input; images and masks are resized to it once (``resize_mode``)."""
    progressive_resizing: ProgressiveResizingConfig | None = None
    """Train the first part of the run at a smaller size (``None``: every epoch at
    ``image_size``)."""
    resize_mode: ResizeMode = "squash"
    """``squash`` stretches to the square; ``letterbox`` keeps the aspect ratio and pads."""
    pad_value: int = Field(0, ge=0, le=255)
    """uint8 value of every channel of the ``letterbox`` padding (masks are padded with 0)."""
    color_constancy: ColorConstancy = "none"
    """``shades_of_gray``: p = 6 Minkowski-norm white balance of each image before normalising."""
    crop_dark_border: bool = False
    """Crop each image to the rows and columns inside its dark border first (the black frame of
    an uncropped full-frame dermatoscope image); predictions are 0 outside the crop."""
    persistent_cache: bool = True
    """Keep each split's decoded, preprocessed pixels as memory-mapped files under ``cache_dir``,
    reused by later runs, seeds, trials and every DDP rank (needs ``TRAIN_CONFIG.cache_in_ram``)."""
    cache_dir: str | None = None
    """Folder of the persistent cache (``None``: ``$SKINET_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/skinet``, else ``~/.cache/skinet``)."""
    reduced_jpeg_decode: bool = True
    """Decode JPEGs at 1/2, 1/4 or 1/8 scale when ``image_size`` is that many times smaller
    (training, validation and test reads, cached or not; prediction decodes in full)."""
    split_random_seed: int = 42
    """Seed of the train/val/test split for layouts without an official split."""
    val_fraction: float = Field(0.15, ge=0.0, lt=1.0)
    """Validation share when the dataset has no official split."""
    test_fraction: float = Field(0.15, ge=0.0, lt=1.0)
    """Test share when the dataset has no official split."""
    split_file: str | None = None
    """CSV ``id,split`` (split: ``train``/``val``/``test``) fixing every sample's split, as
    written to ``splits.csv`` in each run folder; overrides official and carved splits."""
    mask_suffix: str = "_segmentation"
    """Mask file stem suffix of the ``folder`` layout (``X.jpg`` pairs with ``X<suffix>.png``)."""
    normalization_mode: NormalizationMode = "standard"
    """``standard`` uses ``mean``/``std``; ``image_per_channel`` standardises each image."""
    mean: tuple[float, float, float] = ISIC2017_MEAN
    """Per-channel mean on [0, 1] for ``standard`` normalisation."""
    std: tuple[float, float, float] = ISIC2017_STD
    """Per-channel standard deviation on [0, 1] for ``standard`` normalisation."""
    synthetic_num_train: int = Field(160, gt=0)
    """Synthetic training images generated when ``dataset: synthetic``."""
    synthetic_num_val: int = Field(32, gt=0)
    """Synthetic validation images."""
    synthetic_num_test: int = Field(32, gt=0)
    """Synthetic test images."""
    synthetic_image_size: int = Field(256, gt=0)
    """Side of generated synthetic images (before resizing to ``image_size``)."""
    max_samples_per_split: int | None = Field(None, gt=0)
    """Use only the first N samples of each split (quick experiments)."""

    @field_validator("mean")
    @classmethod
    def _finite_mean(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if not all(math.isfinite(v) for v in value):
            raise ValueError(f"every channel mean must be a finite number, got {list(value)}")
        return value

    @field_validator("std")
    @classmethod
    def _positive_std(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if not all(math.isfinite(v) and v > 0 for v in value):
            raise ValueError(
                f"every channel std must be a finite number > 0 (images are divided by it), got "
                f"{list(value)}; `skinet data stats` prints the values of a dataset"
            )
        return value

    @model_validator(mode="after")
    def _check_fractions(self) -> DataConfig:
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction must be < 1 "
                f"(got {self.val_fraction} + {self.test_fraction})"
            )
        return self
