"""``MODEL_CARD.md``: what a trained model is, what it was trained on and how well it does.

The sections follow the Hugging Face model card (model details, uses, limitations, training
data, training procedure, evaluation, how to reproduce). Plain text from the run's config and
metrics; nothing here imports Lightning, so ``skinet export`` can write the card too.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skinet.checkpoints.threshold import Threshold, trained_threshold
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.registry import get_layout
from skinet.keys import MetricsKey

MODEL_CARD_FILE = "MODEL_CARD.md"


@dataclass
class CardInputs:
    """Everything a model card states that the config does not hold."""

    run_name: str
    metrics: Mapping[str, float]
    monitor: str
    split_counts: Mapping[str, int]
    split_file_sha256: str | None = None
    mlflow_run_id: str | None = None
    command: str | None = None
    checkpoint: str | None = None
    members: list[str] = field(default_factory=list)
    """Checkpoints of an ensemble (empty for one model)."""
    init_from: Mapping[str, str | None] | None = None
    """The checkpoint a fine-tuned model started from (``checkpoint``, ``sha256``,
    ``mlflow_run_id``, ``experiment_name``); ``None`` when trained from scratch."""
    threshold: Threshold | None = None
    """The threshold the model predicts with; ``None``: the one the training run chose
    (``test_threshold_used`` in ``metrics``)."""
    reproduce: str | None = None
    """The command that trains the run again from its own ``config.yaml``."""
    workdir: str | None = None
    """The folder the run was trained in: its config's relative paths start there."""
    precision: str | None = None
    """The precision the run trained with (``TRAIN_CONFIG.precision`` as resolved)."""


OUTPUT_LINE = "- Output: one logit per pixel; probability = sigmoid, lesion where probability >= "
"""How the card's line on the prediction threshold starts."""
EVALUATED_AT = "test metrics at threshold"
"""How the evaluation's line names the threshold its test figures were computed at."""
CHECKPOINT_LINE = "- Checkpoint: "
"""How the card's line naming the checkpoint file starts."""
BESIDE = "beside this card"
"""How a run's card points at its ``splits.csv`` and ``config.yaml``: a card away from its run
folder names the folder instead (``calibrated_card.moved_card``)."""


def card_threshold(cfg: ExperimentConfig, inputs: CardInputs) -> Threshold:
    """The threshold a card states: ``inputs.threshold``, else the training run's."""
    if inputs.threshold is not None:
        return inputs.threshold
    metrics = inputs.metrics
    chosen = metrics.get("test_threshold_used", metrics.get("val_optimal_threshold"))
    train = cfg.train
    return trained_threshold(
        train.optimal_threshold,
        chosen,
        selection=train.threshold_selection,
        reference=train.threshold_reference,
    )


def output_line(threshold: Threshold) -> str:
    """The card's line on how a mask is made from the probabilities."""
    return f"{OUTPUT_LINE}the threshold ({card_figure(threshold.value)}: {threshold.origin})."


def invoked_command() -> str:
    """The command line of this process, as a user would type it again: ``skinet ...``,
    ``python -m skinet ...`` or ``python main_run.py ...``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "skinet"
    if name == "__main__.py":
        program = ["python", "-m", "skinet"]
    elif name.endswith(".py"):
        program = ["python", name]
    else:
        program = [name]
    return shlex.join([*program, *sys.argv[1:]])


def card_figure(value: float | None) -> str:
    """A figure as the card prints it: four decimals, ``n/a`` when missing or not finite."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.4f}"


def _metrics_table(metrics: Mapping[str, float], monitor: str, swept: bool, kept: str) -> list[str]:
    names = [monitor] + sorted(k for k in metrics if k.startswith(("val_", "test_")))
    rows = ["| metric | value |", "|---|---|"]
    for name in dict.fromkeys(names):
        if name in metrics:
            label = f"{name} ({kept})" if name == monitor else name
            rows.append(f"| {label} | {card_figure(metrics[name])} |")
    if swept and MetricsKey.VAL_THRESHOLD_USED.value in metrics:
        rows += [
            "",
            "`val_optimal_threshold` is the threshold that epoch chose; `val_threshold_used` the "
            "one its `val_dice` and `val_iou` were computed at (the previous epoch's choice, 0.5 "
            "on the first).",
        ]
    return rows


def _lineage_lines(init_from: Mapping[str, str | None] | None) -> list[str]:
    if not init_from:
        return []
    run = f", MLflow run `{init_from['mlflow_run_id']}`" if init_from.get("mlflow_run_id") else ""
    sha = init_from.get("sha256") or ""
    return [
        f"- Fine-tuned from `{init_from['checkpoint']}` (experiment "
        f"`{init_from.get('experiment_name')}`{run}; SHA-256 `{sha[:16]}`) with a fresh "
        "optimizer and schedule.",
    ]


def _precision(configured: str | None, resolved: str | None) -> str:
    """The precision as set, or as resolved and marked automatic where the config left it."""
    if configured is not None:
        return f"`{configured}`"
    return f"`{resolved}` (automatic)" if resolved else "automatic (per device)"


def _loss_detail(cfg: ExperimentConfig) -> str:
    """The loss weighting, the Dice reduction and deep supervision, where the loss has them."""
    parts = []
    if cfg.train.loss_name == "BCE_DICE" and cfg.train.bce_weight != 0.5:
        parts.append(f"BCE weight {cfg.train.bce_weight}")
    if cfg.train.loss_name != "BCE" and cfg.train.dice_reduction == "image":
        parts.append("soft Dice per image")
    if cfg.model.deep_supervision:
        parts.append(f"deep supervision of {cfg.model.deep_supervision} coarser map(s)")
    return f" ({', '.join(parts)})" if parts else ""


def _validation_label(metrics: Mapping[str, float], kept: str) -> str:
    epoch = metrics.get("best_epoch")
    if epoch is None:
        return "Validation metrics of the last epoch (no best checkpoint was kept)"
    which = kept.removesuffix(" epoch")  # best, last
    return f"Validation metrics of the {which} checkpoint (epoch {int(epoch)}, 0-based)"


def _evaluation_label(metrics: Mapping[str, Any], threshold: Threshold, kept: str) -> str:
    """The line above the metrics table: which validation epoch, and the test's threshold (a
    run without a test split says so instead)."""
    if MetricsKey.TEST_THRESHOLD_USED.value not in metrics:
        return f"{_validation_label(metrics, kept)}; no test split was scored:"
    label = _validation_label(metrics, kept)
    return f"{label} and {EVALUATED_AT} {card_figure(threshold.value)}:"


def _resizing_lines(cfg: ExperimentConfig) -> list[str]:
    resizing, size = cfg.data.progressive_resizing, cfg.data.image_size
    if resizing is None:
        return []
    small = resizing.side(size)
    return [
        f"- The first {resizing.fraction:.0%} of the run trained on {small}x{small} images scaled "
        f"down from {size}x{size} (`DATA_CONFIG.progressive_resizing`)."
    ]


def _kept_line(cfg: ExperimentConfig, monitor: str) -> str:
    if cfg.train.checkpoint_config.select == "last":
        select = "`checkpoint_config.select: last`"
        return f"- The last epoch's weights kept ({select}), not the best by `{monitor}`."
    return f"- Best checkpoint chosen by `{monitor}` ({cfg.sweep.direction})."


def build_model_card(cfg: ExperimentConfig, inputs: CardInputs) -> str:
    """The Markdown text of the model card of one run (or ensemble)."""
    data, model, train = cfg.data, cfg.model, cfg.train
    metrics = inputs.metrics
    threshold = card_threshold(cfg, inputs)
    counts = ", ".join(f"{n} {name}" for name, n in inputs.split_counts.items())
    split_source = (
        f"`DATA_CONFIG.split_file: {data.split_file}`"
        if data.split_file
        else f"the layout's splits (carved by `split_random_seed: {data.split_random_seed}` "
        "where it has none)"
    )
    normalisation = (
        f"per-channel mean {list(data.mean)} and std {list(data.std)} on [0, 1]"
        if data.normalization_mode == "standard"
        else "each image standardised per channel"
    )
    lines = [
        f"# Model card: {inputs.run_name}",
        "",
        "## Model details",
        "",
        f"- Binary skin-lesion segmentation, SkiNet UNet2D: {model.number_of_layers} levels, "
        f"{model.out_channels_layer1} channels in the first, encoder "
        f"`{model.encoder_residual_mode}`, merge `{model.merge_residual_mode}`.",
        output_line(threshold),
        f"- Preprocessing: {'dark border cropped, ' if data.crop_dark_border else ''}"
        f"RGB resized to {data.image_size}x{data.image_size} "
        f"(`{data.resize_mode}`), colour constancy `{data.color_constancy}`, {normalisation}.",
    ]
    if inputs.members:
        lines.append(f"- Ensemble of {len(inputs.members)} models (mean of probabilities):")
        lines += [f"  - `{member}`" for member in inputs.members]
    lines += _lineage_lines(inputs.init_from)
    if inputs.checkpoint:
        lines.append(f"{CHECKPOINT_LINE}`{inputs.checkpoint}`")
    if inputs.mlflow_run_id:
        lines.append(f"- MLflow run: `{inputs.mlflow_run_id}`")
    lines += [
        "",
        "## Uses",
        "",
        "Research use: outlining lesions in dermoscopy images for studies and method "
        "comparison. **Not a medical device**: not validated for diagnosis or treatment "
        "decisions, and must not be used for them.",
        "",
        "## Bias, risks and limitations",
        "",
        "- Trained and tested only on the data below; expect worse masks on other devices, "
        "skin types, body sites, image sizes or lighting (`skinet robustness` measures some).",
        "- A single threshold is applied to every image; the metrics are averages and hide "
        "individual failures (`skinet evaluate --gallery N` shows the worst).",
        f"- Training data licence: {get_layout(data.dataset).licence}",
        "",
        "## Training data",
        "",
        f"- Dataset: `{data.dataset}` at `{data.data_dir}`.",
        *(
            [
                f"- Samples per split: {counts}.",
                f"- Split: {split_source}; the split used is `splits.csv` {BESIDE} "
                f"(SHA-256 `{inputs.split_file_sha256 or 'n/a'}`).",
            ]
            if inputs.split_counts
            else ["- Splits: see `splits.csv` and `MODEL_CARD.md` in each member's run folder."]
        ),
        "",
        "## Training procedure",
        "",
        f"- Loss `{train.loss_name}`{_loss_detail(cfg)}, optimizer `{train.optimizer_name}`, "
        f"lr {train.lr}, batch size {train.batch_size}, up to {train.max_epochs} "
        f"{'epoch' if train.max_epochs == 1 else 'epochs'}, precision "
        f"{_precision(train.precision, inputs.precision)}, seed {train.seed}, weight decay "
        f"{train.weight_decay}.",
        *_resizing_lines(cfg),
        _kept_line(cfg, inputs.monitor),
        "",
        "## Evaluation",
        "",
        _evaluation_label(metrics, threshold, train.checkpoint_config.kept_epoch),
        "",
        *_metrics_table(
            metrics,
            inputs.monitor,
            train.optimal_threshold is None,
            train.checkpoint_config.kept_epoch,
        ),
        "",
        "## How to reproduce",
        "",
        *(
            [f"From `{inputs.workdir}`, where the config's relative paths start:", ""]
            if inputs.workdir
            else []
        ),
        "```bash",
        inputs.reproduce or "skinet train --config config.yaml",
        "```",
        "",
        (
            f"with this config (`config.yaml` {BESIDE}; its seed and every `--set` are in it):"
            if inputs.reproduce
            else "with this config saved as `config.yaml` (its seed and every `--set` are in it):"
        ),
        "",
        "```yaml",
        yaml.safe_dump(cfg.to_yaml_dict(), sort_keys=False).rstrip(),
        "```",
        "",
        *([f"Made by `{inputs.command}`.", ""] if inputs.command else []),
    ]
    return "\n".join(lines)
