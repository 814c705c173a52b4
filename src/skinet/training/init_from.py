"""Fine-tuning: a new run whose weights start from a trained checkpoint (``--init-from``).

``TRAIN_CONFIG.init_checkpoint`` (``skinet train --init-from CKPT``) starts a new run, with a
fresh optimizer, schedule and epoch count, from the weights of ``CKPT``. The model and its
preprocessing are the checkpoint's, except for the ``MODEL_CONFIG`` fields and the
preprocessing fields of ``DATA_CONFIG`` (:data:`PREPROCESSING_FIELDS`) that the config sets
itself; the log says which ones it took and which the config overrides. The weights load with
a strict shape check that names the first layer that does not fit. The source checkpoint and
its MLflow run go to the new run's MLflow tags and model card (:class:`InitLineage`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from torch import Tensor, nn

from skinet.checkpoints.format import CheckpointError
from skinet.checkpoints.read import load_checkpoint
from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.models.unet2d import AUX_HEADS, UNet2D, without_aux_heads
from skinet.runtime.files import file_sha256

log = logging.getLogger(__name__)

PREPROCESSING_FIELDS = (
    "image_size",
    "resize_mode",
    "crop_dark_border",
    "color_constancy",
    "pad_value",
    "reduced_jpeg_decode",
    "normalization_mode",
    "mean",
    "std",
)
"""``DATA_CONFIG`` fields that decide what the model sees: inherited from the source."""
LINEAGE_FILE = "init_from.json"
"""A fine-tuned run's :class:`InitLineage` in its run folder: a resume reads it there, so it
needs neither the source checkpoint nor its path."""


class InitCheckpointError(ValueError):
    """``TRAIN_CONFIG.init_checkpoint`` is unreadable or its weights do not fit the model."""


@dataclass(frozen=True)
class InitLineage:
    """Where a fine-tuned run's weights came from (MLflow tags and the model card)."""

    checkpoint: str
    sha256: str
    mlflow_run_id: str | None
    experiment_name: str

    def as_card(self) -> dict[str, str | None]:
        """What the model card states (:func:`skinet.checkpoints.model_card.build_model_card`)."""
        return {
            "checkpoint": self.checkpoint,
            "sha256": self.sha256,
            "mlflow_run_id": self.mlflow_run_id,
            "experiment_name": self.experiment_name,
        }

    def tags(self) -> dict[str, str]:
        """The MLflow tags of the new run."""
        tags = {"skinet.init_from": self.checkpoint, "skinet.init_from_sha256": self.sha256}
        if self.mlflow_run_id:
            tags["skinet.init_from_run_id"] = self.mlflow_run_id
        return tags


def write_lineage(run_dir: Path, lineage: InitLineage) -> None:
    """``<run_dir>/init_from.json``."""
    (run_dir / LINEAGE_FILE).write_text(json.dumps(asdict(lineage), indent=2))


def read_lineage(run_dir: Path) -> InitLineage | None:
    """The lineage a fine-tuned run recorded, or ``None`` (not fine-tuned, or written before
    SkiNet kept it in the run folder)."""
    path = run_dir / LINEAGE_FILE
    return InitLineage(**json.loads(path.read_text())) if path.is_file() else None


@dataclass(frozen=True)
class InitSource:
    """The checkpoint a run starts from: its weights and its lineage."""

    state_dict: dict[str, Tensor]
    lineage: InitLineage


def read_init_source(cfg: ExperimentConfig) -> tuple[ExperimentConfig, InitSource | None]:
    """``cfg`` with the source's model and preprocessing where it sets none, and the source.

    Returns ``(cfg, None)`` when ``TRAIN_CONFIG.init_checkpoint`` is not set.

    Raises:
        FileNotFoundError: The checkpoint does not exist.
        InitCheckpointError: The file is not a SkiNet checkpoint.
    """
    path = cfg.train.init_checkpoint
    if path is None:
        return cfg, None
    try:
        source = load_checkpoint(path)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"TRAIN_CONFIG.init_checkpoint: {error}") from None
    except CheckpointError as error:
        raise InitCheckpointError(f"TRAIN_CONFIG.init_checkpoint: {error}") from None
    merged = _inherit(cfg, source.config, str(path))
    merged.train.init_checkpoint = str(Path(path).resolve())  # valid from any folder
    train = merged.train
    if train.threshold_selection == "guarded" and train.threshold_reference is None:
        train.threshold_reference = source.threshold
        log.info(
            "threshold: the source's %.2f unless the validation images show a clear gain",
            source.threshold,
        )
    # The shapes are checked now, before any run folder or MLflow run exists.
    load_init_weights(UNet2D(**merged.model.model_dump()), source.state_dict, str(path))
    lineage = InitLineage(
        checkpoint=str(Path(path).resolve()),
        sha256=file_sha256(path),
        mlflow_run_id=source.payload.mlflow_run_id,
        experiment_name=source.config.train.experiment_name,
    )
    log.info(
        "fine-tuning from %s: its weights, a fresh optimizer and schedule (lr %g, %d epoch(s))",
        path,
        merged.train.lr,
        merged.train.max_epochs,
    )
    return merged, InitSource(source.state_dict, lineage)


def resume_config(cfg: ExperimentConfig, saved: ExperimentConfig) -> ExperimentConfig:
    """A fine-tuned run's config for its resume: the model and preprocessing the run itself
    recorded (``saved``, from its checkpoint) where ``cfg`` sets none, and the run's own
    ``init_checkpoint`` when ``cfg`` names the same file. The source is not read: the weights
    come from the run's checkpoint. Other configs are returned as they are."""
    ours, theirs = cfg.train.init_checkpoint, saved.train.init_checkpoint
    if ours is None or theirs is None:
        return cfg
    merged = _inherit(cfg, saved, "the run's checkpoint", quiet=True)
    if ours == theirs or Path(ours).resolve() == Path(theirs).resolve():
        merged.train.init_checkpoint = theirs
    if merged.train.threshold_reference is None:  # the source's, as the run first took it
        merged.train.threshold_reference = saved.train.threshold_reference
    return merged


def _inherit(
    cfg: ExperimentConfig, source: ExperimentConfig, origin: str, quiet: bool = False
) -> ExperimentConfig:
    """Take every model field and preprocessing field that ``cfg`` does not set from ``source``."""
    raw = cfg.to_yaml_dict()
    theirs = source.to_yaml_dict()
    inherited, overridden = [], []
    sections = (
        ("MODEL_CONFIG", cfg.model.model_fields_set, tuple(type(cfg.model).model_fields)),
        ("DATA_CONFIG", cfg.data.model_fields_set, PREPROCESSING_FIELDS),
    )
    for section, fields_set, names in sections:
        for name in names:
            ours, source_value = raw[section][name], theirs[section][name]
            if name not in fields_set:
                raw[section][name] = source_value
                if ours != source_value:
                    inherited.append(f"{section}.{name}={source_value}")
            elif ours != source_value:
                overridden.append(f"{section}.{name}: {source_value} -> {ours}")
    if not quiet:
        if inherited:
            log.info("from the source checkpoint: %s", ", ".join(inherited))
        if overridden:
            log.warning("the config overrides the source checkpoint's %s", "; ".join(overridden))
        else:
            log.info("model and preprocessing are the source checkpoint's")
    return parse_config(raw, f"{origin} + config")


def load_init_weights(model: nn.Module, state_dict: dict[str, Tensor], source: str) -> None:
    """Load ``state_dict`` into ``model`` (a UNet2D) strictly, but for the deep-supervision
    heads: the heads both have load, a source's heads that the model lacks are dropped, and
    heads the source lacks keep their fresh initialisation.

    Raises:
        InitCheckpointError: Naming the first layer whose shape differs, or the first weight
            that one side has and the other lacks, and the fields that decide it.
    """
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper holds the UNet2D
    own_all = model.state_dict()
    heads = {
        name: tensor
        for name, tensor in state_dict.items()
        if name.startswith(AUX_HEADS) and getattr(own_all.get(name), "shape", None) == tensor.shape
    }
    fresh = [name for name in own_all if name.startswith(AUX_HEADS) and name not in heads]
    dropped = [name for name in state_dict if name.startswith(AUX_HEADS) and name not in heads]
    if fresh or dropped:
        log.info(
            "deep-supervision heads: %d weight(s) loaded, %d of the source dropped, %d new",
            len(heads),
            len(dropped),
            len(fresh),
        )
    own, state_dict = without_aux_heads(own_all), without_aux_heads(state_dict)
    for name, tensor in own.items():
        if name not in state_dict:
            raise InitCheckpointError(
                f"{source} has no weight {name!r} that this model has: it was trained with "
                f"another MODEL_CONFIG ({_hint()})"
            )
        if tuple(state_dict[name].shape) != tuple(tensor.shape):
            raise InitCheckpointError(
                f"{source}: layer {name!r} has shape {tuple(state_dict[name].shape)} in the "
                f"checkpoint but {tuple(tensor.shape)} in this model ({_hint()})"
            )
    extra = [name for name in state_dict if name not in own]
    if extra:
        raise InitCheckpointError(
            f"{source} has weight {extra[0]!r} that this model lacks ({len(extra)} in all): it "
            f"was trained with another MODEL_CONFIG ({_hint()})"
        )
    model.load_state_dict({**state_dict, **heads}, strict=False)


def _hint() -> str:
    return (
        "remove the MODEL_CONFIG fields the config sets, so that the checkpoint's are used, "
        "or start without --init-from"
    )
