"""Predicting a file or a folder of images and writing masks, probability maps and overlays."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from skinet.datasets.layouts import ID_SUFFIXES, IGNORED_SUFFIXES, IMAGE_SUFFIXES, is_image
from skinet.imaging.decode import DecodeError, read_image
from skinet.imaging.preprocess import Placement
from skinet.inference.predictor import Predictor

log = logging.getLogger(__name__)

ProbaFormat = Literal["png", "npy"]
OVERLAY_COLOR = (0, 255, 0)  # RGB
"""Colour of the predicted lesion contour on overlays."""
DEFAULT_IO_WORKERS = 2
"""Threads that decode and write while the model runs (``0``: everything in one thread)."""
PREFETCH_BATCHES = 2
"""Batches decoded ahead of the model, and batches of results waiting to be written."""


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
    """``input_path`` itself if it is an image file, else the images directly inside the folder,
    less the masks and maps of those images kept beside them (``<stem>_mask.png``, ...).

    Raises:
        FileNotFoundError: ``input_path`` does not exist, or is a file that is not an image.
    """
    if input_path.is_file():
        if not is_image(input_path):
            raise FileNotFoundError(
                f"{input_path} is not an image ({', '.join(IMAGE_SUFFIXES)}): give an image "
                "file or a folder of them"
            )
        return [input_path]
    if not input_path.is_dir():
        raise FileNotFoundError(f"input not found: {input_path}")
    images = sorted(path for path in input_path.iterdir() if is_image(path))
    stems = {path.stem for path in images}
    beside = [path for path in images if _names_a_file_of(path.stem, stems)]
    if beside:
        log.warning(
            "%d file(s) in %s are named like the mask or map of an image beside them (e.g. %s): "
            "they are not taken as images",
            len(beside),
            input_path,
            beside[0].name,
        )
    return [path for path in images if path not in beside]


def _names_a_file_of(stem: str, stems: set[str]) -> bool:
    """Whether ``stem`` is another stem of ``stems`` with a mask's or map's suffix
    (``ISIC_1_segmentation`` beside ``ISIC_1``)."""
    return any(
        stem.endswith(suffix) and stem[: -len(suffix)] in stems
        for suffix in ID_SUFFIXES + IGNORED_SUFFIXES
    )


def check_unique_stems(paths: Sequence[Path]) -> None:
    """Refuse inputs whose outputs would overwrite each other (``a.jpg`` and ``a.png``).

    Raises:
        ValueError: Naming both inputs of the first clash, before anything is written.
    """
    seen: dict[str, Path] = {}
    for path in paths:
        if path.stem in seen:
            raise ValueError(
                f"{seen[path.stem]} and {path} would both write {path.stem}_mask.png: rename one "
                "or predict them into separate --output folders (nothing was written)"
            )
        seen[path.stem] = path


OUTPUT_SUFFIXES = ("_mask.png", "_proba.png", "_proba.npy", "_overlay.png")
"""How the names of the files :func:`predict_paths` writes end (after the input's stem)."""


def output_names(stem: str, save_proba: ProbaFormat | None, save_overlay: bool) -> list[str]:
    """The files :func:`predict_paths` writes for an input of this stem."""
    names = [f"{stem}_mask.png"]
    if save_proba is not None:
        names.append(f"{stem}_proba.{save_proba}")
    if save_overlay:
        names.append(f"{stem}_overlay.png")
    return names


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


Prepared = tuple[np.ndarray, np.ndarray, Placement]
"""A decoded RGB image, its normalised model input and the placement that maps it back."""


def _read_prepared(predictor: Predictor, path: Path) -> Prepared:
    image = read_image(path)
    chw, placement = predictor.prepare(image)
    return image, chw, placement


def _prefetch_batches(
    predictor: Predictor,
    paths: Sequence[Path],
    pool: ThreadPoolExecutor,
    failures: dict[Path, str],
) -> Iterator[tuple[list[Path], list[Prepared]]]:
    """Batches decoded and preprocessed in ``pool``, up to two batches ahead, in input order.

    Unreadable files go to ``failures`` (in input order) and are skipped, as in
    :func:`_read_batches`. The bounded lookahead caps the decoded images held in memory.
    """
    batch_size = predictor.batch_size
    pending: deque[tuple[Path, Future[Prepared]]] = deque()
    upcoming = iter(paths)

    def top_up() -> None:
        while len(pending) < PREFETCH_BATCHES * batch_size:
            path = next(upcoming, None)
            if path is None:
                return
            pending.append((path, pool.submit(_read_prepared, predictor, path)))

    top_up()
    batch_paths: list[Path] = []
    batch: list[Prepared] = []
    while pending:
        path, future = pending.popleft()
        top_up()
        try:
            batch.append(future.result())
            batch_paths.append(path)
        except (DecodeError, OSError) as error:
            failures[path] = str(error)
            log.error("%s: %s", path, error)
        if len(batch) == batch_size:
            yield batch_paths, batch
            batch_paths, batch = [], []
    if batch:
        yield batch_paths, batch


@dataclass(frozen=True)
class _Outputs:
    """What to write for each image, and where."""

    predictor: Predictor
    output_dir: Path
    save_proba: ProbaFormat | None
    save_overlay: bool

    def write(self, path: Path, image: np.ndarray, probs: np.ndarray) -> Path:
        """Write the mask (and proba/overlay) of ``path``; returns the mask's path."""
        mask = self.predictor.binarize(probs)
        target = self.output_dir / f"{path.stem}_mask.png"
        _write_png(target, mask * np.uint8(255))
        if self.save_proba == "npy":
            np.save(self.output_dir / f"{path.stem}_proba.npy", probs)
        elif self.save_proba == "png":
            scaled = np.round(probs * 255).astype(np.uint8)
            _write_png(self.output_dir / f"{path.stem}_proba.png", scaled)
        if self.save_overlay:
            _write_png(self.output_dir / f"{path.stem}_overlay.png", draw_overlay(image, mask))
        return target

    def restore_and_write(
        self, path: Path, image: np.ndarray, probs: np.ndarray, placement: Placement
    ) -> Path:
        """:meth:`write` of a probability map still at the model's input size."""
        return self.write(path, image, self.predictor.restore(probs, placement))


def predict_paths(
    predictor: Predictor,
    paths: Sequence[Path],
    output_dir: Path,
    save_proba: ProbaFormat | None = None,
    save_overlay: bool = False,
    progress: bool = True,
    io_workers: int = DEFAULT_IO_WORKERS,
) -> PredictReport:
    """Predict every image and write ``<stem>_mask.png`` (0/255) at its original size.

    Also writes ``<stem>_proba.png`` (0..255) or ``<stem>_proba.npy`` (float32) with
    ``save_proba``, and ``<stem>_overlay.png`` with ``save_overlay``. A file that cannot be read
    or written is recorded in the report and the others carry on.

    With ``io_workers > 0`` that many threads decode and preprocess the next batches and
    restore and write the finished ones while the model runs (OpenCV releases the GIL); the
    files written and the report are the same as with ``io_workers=0`` (all in the caller's
    thread), in input order.
    """
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    if io_workers < 0:
        raise ValueError(f"io_workers must be >= 0, got {io_workers}")
    check_unique_stems(paths)
    output_dir.mkdir(parents=True, exist_ok=True)
    report = PredictReport()
    outputs = _Outputs(predictor, output_dir, save_proba, save_overlay)
    columns = (*Progress.get_default_columns()[:2], MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("predicting", total=len(paths))

        def advance() -> None:
            bar.update(task, completed=len(report.written) + len(report.failures))

        if io_workers == 0:
            _predict_serial(predictor, paths, outputs, report, advance)
        else:
            _predict_threaded(predictor, paths, outputs, report, advance, io_workers)
        bar.update(task, completed=len(paths))
    return report


def _record(report: PredictReport, path: Path, write: Callable[[], Path]) -> None:
    try:
        report.written.append(write())
    except OSError as error:
        report.failures[path] = str(error)
        log.error("%s: %s", path, error)


def _predict_serial(
    predictor: Predictor,
    paths: Sequence[Path],
    outputs: _Outputs,
    report: PredictReport,
    advance: Callable[[], None],
) -> None:
    for batch_paths, images in _read_batches(paths, predictor.batch_size, report.failures):
        probs_list = predictor.predict_proba_batch(images)
        for path, image, probs in zip(batch_paths, images, probs_list, strict=True):
            _record(report, path, lambda: outputs.write(path, image, probs))  # noqa: B023
        advance()


def _predict_threaded(
    predictor: Predictor,
    paths: Sequence[Path],
    outputs: _Outputs,
    report: PredictReport,
    advance: Callable[[], None],
    io_workers: int,
) -> None:
    writes: deque[tuple[Path, Future[Path]]] = deque()
    limit = PREFETCH_BATCHES * predictor.batch_size

    def settle(keep: int) -> None:
        while len(writes) > keep:
            path, future = writes.popleft()
            _record(report, path, future.result)

    with ThreadPoolExecutor(io_workers, thread_name_prefix="skinet-predict-io") as pool:
        for batch_paths, batch in _prefetch_batches(predictor, paths, pool, report.failures):
            probs_batch = predictor.forward_prepared(
                [(chw, placement) for _, chw, placement in batch]
            )
            for path, (image, _, placement), probs in zip(
                batch_paths, batch, probs_batch, strict=True
            ):
                future = pool.submit(outputs.restore_and_write, path, image, probs, placement)
                writes.append((path, future))
            settle(limit)  # bounded: at most two batches of results wait to be written
            advance()
        settle(0)
