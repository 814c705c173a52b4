"""``Predictor``: a trained checkpoint applied to RGB images at their original resolution."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from skinet.checkpoints.read import build_model, load_checkpoint
from skinet.checkpoints.threshold import DEFAULT_THRESHOLD, Threshold, for_flips
from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.imaging.normalize import Normalizer, build_normalizer
from skinet.imaging.preprocess import (
    Placement,
    Preprocessing,
    build_preprocessing,
    preprocess_image,
)
from skinet.inference.postprocess import postprocess_mask
from skinet.inference.tta import predict_probs
from skinet.models.layers import uses_channels_last
from skinet.models.unet2d import UNet2D
from skinet.runtime.devices import cuda_available, mps_available


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``mps`` (Apple silicon), else ``cpu``.

    Raises:
        UsageError: ``cuda`` or ``mps`` was asked for on a machine without it.
    """
    if str(device) == "auto":
        if cuda_available():
            return torch.device("cuda")
        return torch.device("mps" if mps_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not cuda_available():
        raise UsageError("--device cuda was requested but CUDA is not available here")
    if resolved.type == "mps" and not mps_available():
        raise UsageError(
            "--device mps was requested but this machine has no Apple MPS backend "
            "(torch.backends.mps.is_available() is False)"
        )
    return resolved


def _check_image(image: np.ndarray) -> None:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise ValueError(f"image must be a uint8 numpy array, got {getattr(image, 'dtype', image)}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be RGB with shape (H, W, 3), got {image.shape}")


class Predictor:
    """Binary lesion segmentation with a trained UNet2D.

    Each image goes through the training preprocessing (``DATA_CONFIG``'s resize mode, colour
    constancy and normalisation, by :func:`~skinet.imaging.preprocess.preprocess_image`), is
    segmented, and its probability map is un-padded and resized back to the image's own size with
    bilinear interpolation before thresholding, so outputs always match the input's height,
    width and aspect ratio.

    Args:
        model: The trained network (returns logits).
        config: The experiment config it was trained with (``image_size``, normalisation).
        threshold: Probability cutoff; a pixel is lesion iff ``proba >= threshold``. A number
            is recorded as given (``Threshold.given``); a :class:`Threshold` keeps its source.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"`` or a ``torch.device``.
        tta: Average probabilities over horizontal, vertical and both flips (``None``: no;
            :meth:`from_checkpoint` reads it from a calibration instead).
        keep_largest: Keep only the largest connected component of each mask.
        fill_holes: Fill holes inside each mask.
        batch_size: Images per forward pass in the batch methods.

    Shapes:
        ``predict``: uint8 RGB ``(H, W, 3)`` -> uint8 ``(H, W)`` with values ``{0, 1}``.
        ``predict_proba``: uint8 RGB ``(H, W, 3)`` -> float32 ``(H, W)`` in ``[0, 1]``.
    """

    def __init__(
        self,
        model: UNet2D,
        config: ExperimentConfig,
        threshold: float | Threshold = DEFAULT_THRESHOLD,
        device: str | torch.device = "auto",
        tta: bool | None = False,
        keep_largest: bool = False,
        fill_holes: bool = False,
        batch_size: int = 8,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = resolve_device(device)
        self.config = config
        # The one record of the threshold and where it came from (predictions.json, the log).
        self.threshold_choice = (
            threshold if isinstance(threshold, Threshold) else Threshold.given(threshold)
        )
        self.tta = bool(tta)
        self.keep_largest = keep_largest
        self.fill_holes = fill_holes
        self.batch_size = batch_size
        self.image_size = config.data.image_size
        self.normalizer: Normalizer = build_normalizer(config)
        # Any user's files at any size: decoded in full, as the export sidecar describes.
        self.preprocessing: Preprocessing = build_preprocessing(config).with_full_decode()
        self.channels_last = uses_channels_last(
            config.train.channels_last, config.model.norm, self.device.type
        )
        model = model.eval().to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | torch.device = "auto",
        threshold: float | None = None,
        **kwargs: bool | int | None,
    ) -> Predictor:
        """Load a training checkpoint (safely, ``weights_only=True``); no config file needed.

        Args:
            path: A ``.ckpt`` written by ``skinet train``.
            device: Where the model runs.
            threshold: Overrides the checkpoint's threshold (its calibrated one, else its
                validation-optimal one).
            kwargs: ``tta`` (``None`` or absent: what the checkpoint's calibration chose, else
                no; given the way its calibration did not choose, the threshold it chose that
                way: :func:`~skinet.checkpoints.threshold.for_flips`), ``keep_largest``,
                ``fill_holes``, ``batch_size``.
        """
        checkpoint = load_checkpoint(path)
        if kwargs.get("tta") is None:
            kwargs["tta"] = checkpoint.tta
        recorded = for_flips(checkpoint.threshold_choice, bool(kwargs["tta"]))
        chosen = recorded if threshold is None else Threshold.given(threshold)
        return cls(build_model(checkpoint), checkpoint.config, chosen, device, **kwargs)  # type: ignore[arg-type]

    @property
    def threshold(self) -> float:
        """The probability cutoff (:attr:`threshold_choice`'s value)."""
        return self.threshold_choice.value

    @property
    def calibration(self) -> Mapping[str, Any] | None:
        """Where a calibrated checkpoint's threshold was tuned (``None`` otherwise)."""
        return self.threshold_choice.calibration

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        """uint8 RGB ``(H, W, 3)`` -> normalised float32 ``(3, S, S)`` at ``image_size``."""
        return self.prepare(image)[0]

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, Placement]:
        """:meth:`preprocess` and the :class:`Placement` that maps the output back."""
        _check_image(image)
        placed, placement = preprocess_image(image, self.preprocessing)
        return self.normalizer(placed), placement

    @torch.inference_mode()
    def _forward(self, batch: np.ndarray, tta: bool) -> np.ndarray:
        images = torch.from_numpy(batch).to(self.device)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self._probabilities(images, tta)[:, 0].float().cpu().numpy()

    def _probabilities(self, images: torch.Tensor, tta: bool) -> torch.Tensor:
        """The model's probabilities ``(N, 1, S, S)`` for a batch on its device."""
        return predict_probs(self.model, images, tta=tta)

    def predict_proba_batch(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Probability maps float32 ``(H_i, W_i)`` for RGB images of any sizes."""
        return self.predict_proba_ways(images, (self.tta,))[self.tta]

    def predict_proba_ways(
        self, images: Sequence[np.ndarray], ways: Iterable[bool]
    ) -> dict[bool, list[np.ndarray]]:
        """:meth:`predict_proba_batch` once per way of predicting (flips off or on), each image
        prepared once; :attr:`tta` is not changed."""
        out: dict[bool, list[np.ndarray]] = {tta: [] for tta in ways}
        for start in range(0, len(images), self.batch_size):
            prepared = [self.prepare(image) for image in images[start : start + self.batch_size]]
            for tta in out:
                probs = self.forward_prepared(prepared, tta=tta)
                for prob, (_, placement) in zip(probs, prepared, strict=True):
                    out[tta].append(self.restore(prob, placement))
        return out

    def forward_prepared(
        self, prepared: Sequence[tuple[np.ndarray, Placement]], tta: bool | None = None
    ) -> np.ndarray:
        """The model's probabilities ``(N, S, S)`` for :meth:`prepare` results (one batch).

        With :meth:`prepare` and :meth:`restore` this is :meth:`predict_proba_batch` in three
        steps, so a caller can run the CPU steps in other threads while the model runs, or
        predict the same prepared batch both ways. ``tta``: with flips or not (``None``: as
        :attr:`tta`).
        """
        batch = np.stack([chw for chw, _ in prepared])
        return self._forward(batch, self.tta if tta is None else tta)

    @staticmethod
    def restore(probs: np.ndarray, placement: Placement) -> np.ndarray:
        """A probability map at ``image_size`` -> float32 ``(H, W)`` in ``[0, 1]``."""
        return np.clip(placement.restore(probs), 0.0, 1.0).astype(np.float32, copy=False)

    def predict_proba(self, image: np.ndarray) -> np.ndarray:
        """Probability map float32 ``(H, W)`` in ``[0, 1]`` at the image's resolution."""
        return self.predict_proba_batch([image])[0]

    def binarize(self, probs: np.ndarray) -> np.ndarray:
        """Threshold (``>=``) and post-process a probability map into a ``{0, 1}`` mask."""
        mask = (probs >= self.threshold).astype(np.uint8)
        return postprocess_mask(mask, keep_largest=self.keep_largest, fill=self.fill_holes)

    def predict_batch(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Binary masks uint8 ``(H_i, W_i)`` with values ``{0, 1}``."""
        return [self.binarize(probs) for probs in self.predict_proba_batch(images)]

    def predict(self, image: np.ndarray) -> np.ndarray:
        """Binary mask uint8 ``(H, W)`` with values ``{0, 1}`` (multiply by 255 to save)."""
        return self.predict_batch([image])[0]
