"""``predict_paths`` with background decode/write threads: same files, same report, in order."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.inference import write_rgb

from skinet.inference.predict import list_images, predict_paths
from skinet.inference.predictor import Predictor

SIZES = [(50, 70), (64, 64), (33, 97), (40, 40), (71, 45), (64, 80), (30, 30)]


def _folder_with_a_bad_file(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (height, width) in enumerate(SIZES):
        write_rgb(folder / f"img{i}.png", height, width, seed=i)
    (folder / "img3b.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")  # sorts mid-list
    return folder


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("io_workers", [1, 3])
def test_threaded_prediction_equals_serial_and_reports_the_bad_file(
    trained_checkpoint: Path, tmp_path: Path, io_workers: int
) -> None:
    paths = list_images(_folder_with_a_bad_file(tmp_path))
    predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", batch_size=2)
    options = {"save_proba": "npy", "save_overlay": True, "progress": False}
    serial = predict_paths(predictor, paths, tmp_path / "serial", io_workers=0, **options)
    threaded = predict_paths(
        predictor, paths, tmp_path / "threaded", io_workers=io_workers, **options
    )
    assert [p.name for p in threaded.written] == [p.name for p in serial.written]
    assert [p.name for p in threaded.written] == [f"img{i}_mask.png" for i in range(len(SIZES))]
    assert list(threaded.failures) == list(serial.failures) == [paths[4]]
    assert "JPEG" in threaded.failures[paths[4]] and threaded.exit_code == 1
    assert _outputs(tmp_path / "threaded") == _outputs(tmp_path / "serial")
    assert len(_outputs(tmp_path / "threaded")) == 3 * len(SIZES)


def test_a_write_failure_is_reported_and_the_rest_written(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    paths = list_images(_folder_with_a_bad_file(tmp_path))
    out = tmp_path / "out"
    (out / "img5_mask.png").mkdir(parents=True)  # a folder where the mask should go
    predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", batch_size=2)
    report = predict_paths(predictor, paths, out, progress=False, io_workers=2)
    assert sorted(p.name for p in report.failures) == ["img3b.jpg", "img5.png"]
    assert len(report.written) == len(SIZES) - 1
    assert (out / "img6_mask.png").is_file()
    with pytest.raises(ValueError, match="io_workers"):
        predict_paths(predictor, paths, out, progress=False, io_workers=-1)
