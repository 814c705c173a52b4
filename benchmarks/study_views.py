"""Views at prediction time: the four flips of ``--tta`` against the eight symmetries of the square.

Usage::

    python benchmarks/study_views.py --checkpoint runs/<run>/checkpoints/best-*.ckpt \\
        --images data/ISIC2017/ISIC-2017_Validation_Data --name val --output views/seed3
    # views/seed3/flips/val/<id>_mask.png and views/seed3/dihedral/val/<id>_mask.png; then,
    # with a folder per model, paired over images and models (compare reads <folder>/<set>):
    skinet compare --paired-runs flips=views/seed3/flips,views/seed4/flips \\
        dihedral=views/seed3/dihedral,views/seed4/dihedral \\
        --external val=IMAGES:MASKS

``flips`` averages the probabilities of four views, as ``skinet predict --tta`` does (none,
horizontal, vertical and both flips). ``dihedral`` averages eight: the same four of the image
and of its transpose, which adds the rotations by 90 and 270 degrees, the transpose and the
anti-transpose (the dihedral group of the square; the models train with ``RandomRotate90`` as
well as flips, so every view is one they were trained on). Both arms run through
``skinet.inference.predict.predict_paths`` at the checkpoint's threshold, without
post-processing; ``dihedral`` costs twice the model passes of ``flips``. Each arm's
``predictions.json`` is ``predict_paths``' own and says ``"tta": true`` for both: the arm is
the folder's name.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from skinet.inference.predict import list_images, predict_paths
from skinet.inference.predictor import Predictor

ARMS = ("flips", "dihedral")


class WithTranspose(nn.Module):
    """``model`` averaged with itself on the transposed image (its output transposed back).

    The mean probability is returned as a logit, so that ``--tta``'s four flips, which take the
    sigmoid of each view and average, average all eight views' probabilities.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        plain = torch.sigmoid(self.model(images).float())
        swapped = torch.sigmoid(self.model(images.transpose(-1, -2)).float()).transpose(-1, -2)
        return torch.logit((plain + swapped) / 2, eps=1e-7)


def predict_arm(checkpoint: Path, images: Path, output: Path, arm: str) -> int:
    """Write ``arm``'s masks of every image in ``images`` to ``output``; the number written."""
    predictor = Predictor.from_checkpoint(checkpoint, tta=True)
    if arm == "dihedral":
        predictor.model = WithTranspose(predictor.model)
    report = predict_paths(predictor, list_images(images), output, progress=False)
    if report.failures:
        raise SystemExit(f"{len(report.failures)} image(s) failed: {dict(report.failures)}")
    return len(report.written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a .ckpt of skinet train")
    parser.add_argument("--images", type=Path, required=True, help="a folder of images")
    parser.add_argument(
        "--name", help="the set's name, as compare's --external NAME (default: the folder's)"
    )
    parser.add_argument(
        "--output", type=Path, required=True, help="gets flips/NAME/ and dihedral/NAME/"
    )
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated of {ARMS}")
    args = parser.parse_args(argv)
    arms = [arm for arm in args.arms.split(",") if arm]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        parser.error(f"--arms: unknown {unknown or 'none given'}; choose from {', '.join(ARMS)}")
    name = args.name or args.images.name
    for arm in arms:
        start = time.perf_counter()
        written = predict_arm(args.checkpoint, args.images, args.output / arm / name, arm)
        seconds = time.perf_counter() - start
        print(f"{arm}: {written} masks in {seconds:.1f} s -> {args.output / arm / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
