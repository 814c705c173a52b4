"""``skinet robustness`` end to end on the synthetic set with a real tiny checkpoint."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from tests.helpers.inference import run_cli

from skinet.evaluation.shifts import SHIFTS

VAL_IMAGES = "ISIC-2017_Validation_Data"
VAL_MASKS = "ISIC-2017_Validation_Part1_GroundTruth"


def _read_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as handle:
        return {row["condition"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def split_report(
    trained_checkpoint: Path, synthetic_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The full report of the trained checkpoint on the synthetic validation split."""
    out = tmp_path_factory.mktemp("robustness") / "report"
    argv = [
        "robustness",
        "--checkpoint",
        str(trained_checkpoint),
        "--data-dir",
        str(synthetic_root),
    ]
    argv += ["--split", "val", "--output", str(out), "--device", "cpu", "--batch-size", "5"]
    assert run_cli(argv) == 0
    return out


def test_report_files_and_numbers_agree(
    split_report: Path, trained_checkpoint: Path, synthetic_root: Path, tmp_path: Path
) -> None:
    rows = _read_rows(split_report / "robustness.csv")
    assert list(rows) == ["clean", *(shift.key for shift in SHIFTS)]
    summary = json.loads((split_report / "robustness.json").read_text())
    assert summary["num_images"] == 4 and summary["num_failed"] == 0
    assert summary["split"] == "val" and summary["seed"] == 0
    png = (split_report / "robustness.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000

    # The clean row is what `skinet evaluate` reports on the same images.
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--data-dir", str(synthetic_root)]
    assert run_cli([*argv, "--split", "val", "--output", str(tmp_path), "--device", "cpu"]) == 0
    evaluated = json.loads((tmp_path / "summary.json").read_text())["mean_jaccard"]
    clean = float(rows["clean"]["mean_jaccard"])
    assert clean == pytest.approx(evaluated, abs=1e-12)
    assert summary["clean_mean_jaccard"] == pytest.approx(clean)

    shifted = [float(row["mean_jaccard"]) for key, row in rows.items() if key != "clean"]
    for key, row in rows.items():
        assert float(row["drop"]) == pytest.approx(clean - float(row["mean_jaccard"]))
        assert int(row["num_images"]) == 4
        assert summary["conditions"][key]["mean_jaccard"] == pytest.approx(
            float(row["mean_jaccard"])
        )
    assert summary["mean_shifted_jaccard"] == pytest.approx(np.mean(shifted))
    assert summary["mean_drop"] == pytest.approx(clean - np.mean(shifted))

    with (split_report / "robustness_per_image.csv").open() as handle:
        per_image = list(csv.DictReader(handle))
    assert len(per_image) == 4
    for key, row in rows.items():
        mean = np.mean([float(image[key]) for image in per_image])
        assert mean == pytest.approx(float(row["mean_jaccard"]))


def test_same_seed_same_numbers_and_folder_mode_matches_the_split(
    split_report: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    tmp_path: Path,
    capsys,
    monkeypatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the table's rows unwrapped
    out = tmp_path / "folders"
    argv = ["robustness", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    argv += [
        "--images",
        str(synthetic_root / VAL_IMAGES),
        "--masks",
        str(synthetic_root / VAL_MASKS),
    ]
    assert run_cli([*argv, "--output", str(out)]) == 0
    again = json.loads((out / "robustness.json").read_text())["conditions"]
    first = json.loads((split_report / "robustness.json").read_text())["conditions"]
    assert again == first  # same images, same seed: identical to the last digit

    # The printed change has the PNG's sign (shifted minus clean: negative is worse).
    printed = {
        cells[0]: cells
        for line in capsys.readouterr().out.splitlines()
        if len(cells := [cell.strip() for cell in re.split("[│┃]", line.strip("│┃ "))]) == 7
    }
    assert printed["condition"][3] == "change"
    for key, row in _read_rows(out / "robustness.csv").items():
        if key != "clean":
            assert printed[key][3] == f"{-float(row['drop']):+.4f}", printed[key]


def test_a_bad_image_is_reported_and_the_others_scored(
    trained_checkpoint: Path, synthetic_root: Path, tmp_path: Path
) -> None:
    images, masks = tmp_path / "images", synthetic_root / VAL_MASKS
    shutil.copytree(synthetic_root / VAL_IMAGES, images)
    broken, other_size = sorted(images.iterdir())[:2]
    broken.write_bytes(broken.read_bytes()[:200])  # truncated JPEG
    pixels = cv2.imread(str(other_size))
    assert cv2.imwrite(str(other_size), cv2.resize(pixels, (48, 40)))  # its mask stays 64x64
    out = tmp_path / "report"
    argv = ["robustness", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    argv += ["--images", str(images), "--masks", str(masks), "--shifts", "scale,frame"]
    assert run_cli([*argv, "--output", str(out)]) == 1
    summary = json.loads((out / "robustness.json").read_text())
    assert sorted(summary["failures"]) == sorted([broken.stem, other_size.stem])
    assert "truncated" in summary["failures"][broken.stem]
    assert summary["failures"][other_size.stem] == (
        f"mask size 64x64 does not match image size 48x40 ({other_size.name})"
    )
    assert summary["num_images"] == 2
    assert list(summary["conditions"]) == ["clean", "frame_mild", "frame_strong"] + [
        "scale_mild",
        "scale_strong",
    ]


@pytest.mark.parametrize(
    "extra",
    [
        ["--images", "somewhere"],
        ["--images", "a", "--masks", "b", "--data-dir", "c"],
        ["--shifts", "blur,bogus"],
    ],
    ids=["images-without-masks", "images-and-data", "unknown-shift"],
)
def test_usage_errors_exit_2(trained_checkpoint: Path, tmp_path: Path, extra: list[str]) -> None:
    argv = ["robustness", "--checkpoint", str(trained_checkpoint), "--output", str(tmp_path / "r")]
    assert run_cli([*argv, *extra]) == 2
    assert not (tmp_path / "r").exists()


def test_missing_folders_exit_2(trained_checkpoint: Path, tmp_path: Path) -> None:
    argv = ["robustness", "--checkpoint", str(trained_checkpoint), "--output", str(tmp_path / "r")]
    argv += ["--images", str(tmp_path / "none"), "--masks", str(tmp_path), "--device", "cpu"]
    assert run_cli(argv) == 2


REAL_ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "isic2017"


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL_ROOT / "ISIC-2017_Validation_Data").is_dir(), reason="real ISIC 2017 data absent"
)
def test_report_on_the_real_isic2017_validation_split(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "real"
    argv = ["robustness", "--checkpoint", str(trained_checkpoint), "--data-dir", str(REAL_ROOT)]
    argv += ["--dataset", "isic2017", "--split", "val", "--output", str(out), "--device", "cpu"]
    assert run_cli(argv) == 0
    summary = json.loads((out / "robustness.json").read_text())
    assert summary["num_images"] == 121 and summary["num_failed"] == 0
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--data-dir", str(REAL_ROOT)]
    argv += ["--dataset", "isic2017", "--split", "val", "--output", str(tmp_path / "evaluate")]
    assert run_cli([*argv, "--device", "cpu"]) == 0
    evaluated = json.loads((tmp_path / "evaluate" / "summary.json").read_text())
    assert summary["clean_mean_jaccard"] == pytest.approx(evaluated["mean_jaccard"], abs=1e-12)
    assert all(0.0 <= row["mean_jaccard"] <= 1.0 for row in summary["conditions"].values())
