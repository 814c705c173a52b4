"""A calibrated checkpoint's model card states one threshold to predict with: the calibrated one."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.inference import run_cli

from skinet.checkpoints.calibrated_card import (
    CALIBRATION_HEADING,
    checkpoint_card_path,
    find_checkpoint_card,
)
from skinet.checkpoints.model_card import OUTPUT_LINE
from skinet.checkpoints.read import load_checkpoint
from skinet.evaluation.calibration import save_calibrated_checkpoint


def _calibrate(source: Path, output: Path, threshold: float) -> Path:
    own = load_checkpoint(source).threshold
    record = {"threshold": threshold, "tuned_on": "/clinic/images", "num_images": 4}
    record.update(source_checkpoint=str(source), source_threshold=own)
    save_calibrated_checkpoint(source, output, record)
    return checkpoint_card_path(output)


def _lines(card: str, start: str) -> list[str]:
    return [line for line in card.splitlines() if start in line]


def test_a_calibrated_card_predicts_at_the_calibrated_threshold(
    tmp_path: Path, trained_checkpoint: Path
) -> None:
    source = load_checkpoint(trained_checkpoint).threshold
    assert find_checkpoint_card(trained_checkpoint) is not None  # the run's card is copied
    card = _calibrate(trained_checkpoint, tmp_path / "clinic.ckpt", 0.3).read_text()
    [output] = _lines(card, OUTPUT_LINE)
    assert "(0.3000: calibrated on /clinic/images, 4 images)" in output, output
    assert f"{source:.4f}" not in output
    # The figures were measured at the source's threshold, and the card says so.
    [evaluated] = _lines(card, "test metrics at threshold")
    assert f"at threshold {source:.4f} (the source model's threshold" in evaluated
    assert "this calibrated copy predicts at 0.3000" in evaluated

    # Calibrating the copy again: one threshold, one note, one calibration section.
    again = _calibrate(tmp_path / "clinic.ckpt", tmp_path / "again.ckpt", 0.2).read_text()
    [output] = _lines(again, OUTPUT_LINE)
    assert "(0.2000: calibrated" in output
    [evaluated] = _lines(again, "test metrics at threshold")
    assert evaluated.count("source model's") == 1 and "predicts at 0.2000" in evaluated
    assert again.count(CALIBRATION_HEADING) == 1 and "**0.2000**" in again

    # `skinet export` copies the card as it is: the same one threshold.
    exported = tmp_path / "model.pt"
    argv = ["export", "--checkpoint", str(tmp_path / "clinic.ckpt"), "--format", "torchscript"]
    assert run_cli([*argv, "--output", str(exported)]) == 0
    exported_card = checkpoint_card_path(exported).read_text()
    assert _lines(exported_card, OUTPUT_LINE) == _lines(card, OUTPUT_LINE)
    assert exported_card.count(CALIBRATION_HEADING) == 1


def test_a_calibrated_card_names_its_own_file_and_the_source_run_folder(
    tmp_path: Path, trained_checkpoint: Path
) -> None:
    """Saved elsewhere, the copy has no splits.csv or config.yaml beside its card: the card
    says where they are (the source run folder), and its checkpoint line names the copy."""
    run = trained_checkpoint.resolve().parent.parent
    assert (run / "splits.csv").is_file() and (run / "config.yaml").is_file()
    output = tmp_path / "clinic" / "clinic.ckpt"
    card = _calibrate(trained_checkpoint, output, 0.3).read_text()
    assert "beside this card" not in card
    [checkpoint] = _lines(card, "- Checkpoint: ")
    assert checkpoint == f"- Checkpoint: `{output.resolve()}` (calibrated)"
    [split] = _lines(card, "splits.csv")
    assert f"in the source run folder `{run}`" in split
    [config] = _lines(card, "with this config")
    assert f"in the source run folder `{run}`" in config
    # Calibrated again, from the copy: still the first run's folder, the new file's name.
    again = _calibrate(output, tmp_path / "again.ckpt", 0.2).read_text()
    assert f"`{run}`" in again and "beside this card" not in again
    assert _lines(again, "- Checkpoint: ") == [
        f"- Checkpoint: `{(tmp_path / 'again.ckpt').resolve()}` (calibrated)"
    ]
