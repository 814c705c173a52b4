"""``benchmarks/study_views.py``: the eight symmetries of the square against ``--tta``'s flips."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from tests.helpers.inference import run_cli
from tests.helpers.scripts import load_benchmark
from torch import Tensor, nn

from skinet.inference.tta import predict_probs


class _Lopsided(nn.Module):
    """A model whose output depends on where a pixel is, so every view gives another map."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 1, 3, padding=1)

    def forward(self, images: Tensor) -> Tensor:
        ramp = torch.linspace(-2.0, 2.0, images.shape[-1]) * torch.linspace(
            0.5, 1.5, images.shape[-2]
        ).unsqueeze(-1)
        return self.conv(images) + ramp


def test_the_dihedral_arm_averages_the_eight_symmetries_of_the_square() -> None:
    study = load_benchmark("study_views")
    torch.manual_seed(0)
    model, images = _Lopsided().eval(), torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        got = predict_probs(study.WithTranspose(model), images, tta=True)
        views = []
        for turns in range(4):
            for mirrored in (False, True):
                view = images.flip(-1) if mirrored else images
                out = torch.sigmoid(model(torch.rot90(view, turns, (-2, -1))))
                back = torch.rot90(out, -turns, (-2, -1))
                views.append(back.flip(-1) if mirrored else back)
        expected = torch.stack(views).mean(0)
        flips_only = predict_probs(model, images, tta=True)
    assert torch.allclose(got, expected, atol=1e-6)
    assert not torch.allclose(flips_only, expected, atol=1e-3), "the views would prove nothing"


def test_the_flips_arm_writes_what_predict_tta_writes(
    tmp_path: Path, trained_checkpoint: Path, synthetic_root: Path
) -> None:
    study = load_benchmark("study_views")
    images = next(synthetic_root.glob("ISIC-2017_*_Data"))
    assert study.main(["--checkpoint", str(trained_checkpoint), "--images", str(images),
                       "--name", "tiny", "--output", str(tmp_path / "views")]) == 0  # fmt: skip
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
    assert run_cli([*argv, "--output", str(tmp_path / "predicted"), "--tta"]) == 0
    predicted = sorted((tmp_path / "predicted").glob("*_mask.png"))
    assert predicted
    for arm in ("flips", "dihedral"):
        written = sorted((tmp_path / "views" / arm / "tiny").glob("*_mask.png"))
        assert [p.name for p in written] == [p.name for p in predicted]
    for path in predicted:
        flips = tmp_path / "views" / "flips" / "tiny" / path.name
        assert np.array_equal(
            cv2.imread(str(flips), cv2.IMREAD_GRAYSCALE),
            cv2.imread(str(path), cv2.IMREAD_GRAYSCALE),
        ), path.name
    with pytest.raises(SystemExit, match="2"):
        study.main(["--checkpoint", "x", "--images", "y", "--output", "z", "--arms", "rot"])
