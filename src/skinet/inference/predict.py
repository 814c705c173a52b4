"""Predicting a file or a folder of images and writing masks, probability maps and overlays."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from skinet.data.io import DecodeError, read_image
from skinet.data.layouts import is_image
from skinet.inference.predictor import Predictor

log = logging.getLogger(__name__)

ProbaFormat = Literal["png", "npy"]
OVERLAY_COLOR = (0, 255, 0)  # RGB
"""Colour of the predicted lesion contour on overlays."""


@dataclass
class PredictReport:
    """Outcome of :func:`predict_paths`: the masks written and the files that failed."""

    written: list[Path] = field(default_factory=list)
    failures: dict[Path, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when every input was predicted, 1 otherwise."""
        return 1 if self.failures else 0


def list_images(input_path: Path) -> list[Path]:
    """``input_path`` itself if it is a file, else the images directly inside the folder."""
    if input_path.is_file():
        return [input_path]
    if not input_path.is_dir():
        raise FileNotFoundError(f"input not found: {input_path}")
    return sorted(path for path in input_path.iterdir() if is_image(path))


def draw_overlay(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The RGB image with the mask's outline drawn on it (line width ~0.4% of the image)."""
    overlay = image.copy()
    contours, _ = cv2.findContours(
        (mask > 0).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
    )
    thickness = max(1, round(0.004 * max(image.shape[:2])))
    cv2.drawContours(overlay, contours, -1, OVERLAY_COLOR, thickness, lineType=cv2.LINE_AA)
    return overlay


def _write_png(path: Path, array: np.ndarray) -> None:
    if array.ndim == 3:
        array = cv2.cvtColor(array, cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(str(path), array):
        raise OSError(f"cannot write {path}")


def _read_batches(
    paths: Sequence[Path], batch_size: int, failures: dict[Path, str]
) -> Iterator[tuple[list[Path], list[np.ndarray]]]:
    """Batches of decoded images; unreadable files go to ``failures`` and are skipped."""
    batch_paths: list[Path] = []
    images: list[np.ndarray] = []
    for path in paths:
        try:
            images.append(read_image(path))
            batch_paths.append(path)
        except (DecodeError, OSError) as error:
            failures[path] = str(error)
            log.error("%s: %s", path, error)
        if len(images) == batch_size:
            yield batch_paths, images
            batch_paths, images = [], []
    if images:
        yield batch_paths, images


def predict_paths(
    predictor: Predictor,
    paths: Sequence[Path],
    output_dir: Path,
    save_proba: ProbaFormat | None = None,
    save_overlay: bool = False,
    progress: bool = True,
) -> PredictReport:
    """Predict every image and write ``<stem>_mask.png`` (0/255) at its original size.

    Also writes ``<stem>_proba.png`` (0..255) or ``<stem>_proba.npy`` (float32) with
    ``save_proba``, and ``<stem>_overlay.png`` with ``save_overlay``. A file that cannot be read
    or written is recorded in the report and the others carry on.
    """
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    output_dir.mkdir(parents=True, exist_ok=True)
    report = PredictReport()
    columns = (*Progress.get_default_columns()[:2], MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("predicting", total=len(paths))
        for batch_paths, images in _read_batches(paths, predictor.batch_size, report.failures):
            for path, image, probs in zip(
                batch_paths, images, predictor.predict_proba_batch(images), strict=True
            ):
                try:
                    mask = predictor.binarize(probs)
                    target = output_dir / f"{path.stem}_mask.png"
                    _write_png(target, mask * np.uint8(255))
                    if save_proba == "npy":
                        np.save(output_dir / f"{path.stem}_proba.npy", probs)
                    elif save_proba == "png":
                        scaled = np.round(probs * 255).astype(np.uint8)
                        _write_png(output_dir / f"{path.stem}_proba.png", scaled)
                    if save_overlay:
                        overlay = draw_overlay(image, mask)
                        _write_png(output_dir / f"{path.stem}_overlay.png", overlay)
                    report.written.append(target)
                except OSError as error:
                    report.failures[path] = str(error)
                    log.error("%s: %s", path, error)
            bar.update(task, completed=len(report.written) + len(report.failures))
        bar.update(task, completed=len(paths))
    return report
