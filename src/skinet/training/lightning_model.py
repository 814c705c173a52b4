"""``LightningModel``: the shared train/val/test step, metrics and threshold selection."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import MLFlowLogger
from torch import Tensor
from torchmetrics.aggregation import MeanMetric
from torchmetrics.classification import BinaryF1Score, BinaryJaccardIndex

from skinet.checkpoints.format import (
    CHECKPOINT_KEY,
    DEFAULT_THRESHOLD,
    CheckpointError,
    CheckpointPayload,
)
from skinet.checkpoints.state_dict import compile_model, match_state_dict_keys
from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.keys import MetricsKey
from skinet.metrics.losses import DeepSupervisionLoss, build_loss
from skinet.metrics.thresholds import ThresholdResult, ThresholdSweep
from skinet.models.layers import uses_channels_last
from skinet.models.unet2d import UNet2D
from skinet.training.callbacks.resizing import ProgressiveResizing, find_resizing, scale_batch
from skinet.training.data.device_split import DeviceResidentSplit, find_device_split
from skinet.training.optim import build_lr_scheduler, build_optimizer
from skinet.training.schedules import run_progress


def _tensor_debug_summary(tensor: Tensor) -> str:
    """Min, max, mean, std and non-finite count of a tensor, ignoring non-finite values."""
    values = tensor.detach().float()
    finite = values[torch.isfinite(values)]
    non_finite = values.numel() - finite.numel()
    if finite.numel() == 0:
        return f"shape={tuple(values.shape)} all {values.numel()} values non-finite"
    std = finite.std().item() if finite.numel() > 1 else 0.0
    return (
        f"shape={tuple(values.shape)} min={finite.min().item():.4g} max={finite.max().item():.4g} "
        f"mean={finite.mean().item():.4g} std={std:.4g} "
        f"non_finite={non_finite} (nan={torch.isnan(values).sum().item()}, "
        f"inf={torch.isinf(values).sum().item()})"
    )


def _raise_if_non_finite(tensors: dict[str, Tensor], batch_idx: int) -> None:
    """Raise ``ValueError`` naming the first tensor (in order) holding NaN or Inf, and the batch.

    All tensors are checked with one device synchronisation; the summary is built only on failure.
    """
    flags = torch.stack([torch.isfinite(t).all() for t in tensors.values()])
    if bool(flags.all()):
        return
    name, tensor = next((n, t) for (n, t), ok in zip(tensors.items(), flags, strict=True) if not ok)
    raise ValueError(
        f"non-finite values in {name} at batch {batch_idx}: {_tensor_debug_summary(tensor)}"
    )


def check_attention_upsample(payload: CheckpointPayload, cfg: ExperimentConfig) -> None:
    """Refuse to continue a checkpoint whose attention gate upsampled differently than ``cfg``'s.

    Raises:
        CheckpointError: Naming the setting that continues it (format-1 checkpoints with
            ``attention_gate`` were trained with the bilinear gate).
    """
    mode = cfg.model.attention_upsample
    if cfg.model.merge_residual_mode != "attention_gate":
        return
    trained = parse_config(payload.config, "checkpoint config").model.attention_upsample
    if trained != mode:
        raise CheckpointError(
            f"the checkpoint's attention gate was trained with attention_upsample: {trained} "
            f"(checkpoint format {payload.format_version}) but this config builds it with "
            f"{mode}. To continue it, set MODEL_CONFIG.attention_upsample: {trained} "
            "(bilinear is not deterministic on CUDA: also set TRAIN_CONFIG.deterministic: "
            "false), or start a new run. skinet predict, evaluate and export read the "
            "checkpoint as it was trained."
        )


class LightningModel(L.LightningModule):
    """UNet2D segmentation with BCE/Dice losses, Dice/IoU metrics and a threshold sweep.

    Args:
        config: The experiment config as plain data (``ExperimentConfig.to_yaml_dict()``, the
            automatic values left ``None``); saved in every checkpoint so a checkpoint reloads
            on its own.
        resolved: What those automatic values resolved to on this machine
            (``TrainSettings.as_dict()``); saved apart in every checkpoint, for the record.

    Batches are ``(images, masks)``: images ``(B, C, H, W)`` float and masks ``(B, 1, H, W)``
    in {0, 1}.
    """

    def __init__(self, config: dict[str, Any], resolved: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.save_hyperparameters({"config": config})
        self.resolved = resolved
        self.cfg: ExperimentConfig = parse_config(config, "checkpoint config")
        train_cfg = self.cfg.train
        model = UNet2D(**self.cfg.model.model_dump())
        # Resolved in setup(), once the device is known; forward() follows it.
        self.channels_last = False
        self.model = (
            compile_model(model, train_cfg.torch_compile_backend)
            if train_cfg.use_torch_compile
            else model
        )
        self.loss_fn = build_loss(
            train_cfg.loss_name, train_cfg.bce_weight, train_cfg.dice_reduction
        )
        # MODEL_CONFIG.deep_supervision: training also scores the coarser decoder maps.
        levels = self.cfg.model.deep_supervision
        self.deep_loss = DeepSupervisionLoss(self.loss_fn, levels) if levels else None
        fixed = train_cfg.optimal_threshold
        self.threshold_used: float = DEFAULT_THRESHOLD if fixed is None else fixed
        self.optimal_threshold: float | None = fixed
        # The last validation sweep (on the CPU), read by the training plots.
        self.val_threshold_result: ThresholdResult | None = None
        # Inputs are already binary long tensors: skip torchmetrics' per-update torch.unique check.
        self.train_dice, self.val_dice, self.test_dice = (
            BinaryF1Score(validate_args=False) for _ in range(3)
        )
        self.train_iou, self.val_iou, self.test_iou = (
            BinaryJaccardIndex(validate_args=False) for _ in range(3)
        )
        # A metric rather than ``self.log(loss, sync_dist=True)``: Lightning's mean sync divides
        # the summed batch counts by the world size in integer arithmetic, which is wrong when
        # ranks score different numbers of images (unpadded validation and test under DDP).
        self.train_loss, self.val_loss, self.test_loss = (MeanMetric() for _ in range(3))
        reference = train_cfg.threshold_reference
        if train_cfg.threshold_selection == "guarded" and reference is None:
            reference = DEFAULT_THRESHOLD
        self.val_sweep = ThresholdSweep(
            fixed_threshold=fixed, selection=train_cfg.threshold_selection, reference=reference
        )
        # Rebuilt in on_test_epoch_start at the threshold chosen by then.
        self.test_sweep = ThresholdSweep(fixed_threshold=self.threshold_used)
        # TRAIN_CONFIG.augment_on: device: the training split, on this module's device in fit.
        self.device_split: DeviceResidentSplit | None = None
        # DATA_CONFIG.progressive_resizing: the callback that sizes each epoch's training
        # batches, found in fit; None trains at the size the batches come in.
        self.resizing: ProgressiveResizing | None = None
        # Stages ("train", "val", "test") whose epoch metrics are logged in the current epoch.
        self._epoch_metrics_logged: set[str] = set()

    def setup(self, stage: str) -> None:
        """Pick the memory format for ``MODEL_CONFIG.norm`` on the device the Trainer runs on."""
        device_type = self.trainer.strategy.root_device.type
        self.channels_last = uses_channels_last(
            self.cfg.train.channels_last, self.cfg.model.norm, device_type
        )
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        self.model.to(memory_format=memory_format)  # type: ignore[call-overload]

    def on_train_start(self) -> None:
        self.resizing = find_resizing(self.trainer)
        split = find_device_split(self.trainer.train_dataloader)
        self.device_split = split.to(self.device) if split is not None else None

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not self.trainer.training:
            return batch
        if self.device_split is not None and isinstance(batch, Tensor):
            batch = self.device_split.make_batch(batch, self.current_epoch, self.global_rank)
        size = self.resizing.size if self.resizing is not None else None
        if size is not None and tuple(batch[0].shape[-2:]) != (size, size):
            batch = scale_batch(batch[0], batch[1], size)
        return batch

    def on_train_end(self) -> None:
        if self.device_split is not None:
            self.device_split.release()

    def forward(self, images: Tensor, deep: bool = False) -> Any:
        """Raw logits ``(B, num_output_classes, H, W)``; with ``deep``, the list of those and
        the auxiliary heads' coarser logits (:meth:`UNet2D.forward`)."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.model(images, deep=True) if deep else self.model(images)

    def _get_probs_and_preds(self, logits: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
        """The only place sigmoid is applied: probabilities and binary predictions."""
        probs = torch.sigmoid(logits.float())
        return probs, (probs >= threshold).long()

    def _shared_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, prefix: str) -> dict:
        images, masks = batch
        if prefix == "train" and self.deep_loss is not None:
            outputs = self(images, deep=True)
            terms = self.deep_loss.terms([o.float() for o in outputs], masks)
            # The full-resolution term is logged (comparable with val_loss); the sum is trained.
            logits, loss, trained = outputs[0], terms[0], self.deep_loss.combine(terms)
        else:
            logits = self(images)
            loss = trained = self.loss_fn(logits.float(), masks.float())
        # Checked in data-flow order, so a NaN image is reported as the image, not the loss.
        _raise_if_non_finite(
            {
                f"{prefix}/image": images,
                f"{prefix}/mask": masks,
                f"{prefix}/logits": logits.detach(),
                f"{prefix}/loss": trained.detach(),
            },
            batch_idx,
        )
        probs, preds = self._get_probs_and_preds(logits.detach(), self.threshold_used)
        targets = masks.long()
        dice, iou = getattr(self, f"{prefix}_dice"), getattr(self, f"{prefix}_iou")
        dice.update(preds, targets)
        iou.update(preds, targets)
        batch_size = images.shape[0]
        mean_loss = getattr(self, f"{prefix}_loss")
        mean_loss.update(loss.detach(), batch_size)
        if prefix not in self._epoch_metrics_logged:
            self._log_epoch_metrics(prefix)
        return {"loss": trained, "probs": probs, "targets": targets}

    def _log_epoch_metrics(self, prefix: str) -> None:
        """Register the epoch's loss, Dice and IoU metric objects with Lightning, once per epoch.

        Lightning computes a logged ``Metric`` from its state at the end of the epoch and then
        resets it, so one ``self.log`` per epoch reports every update of the epoch; logging it
        at every step would only repeat that (and costs a module ``.to()`` per call).
        """
        self._epoch_metrics_logged.add(prefix)
        for name, prog_bar in (("loss", True), ("dice", prefix != "train"), ("iou", False)):
            metric = getattr(self, f"{prefix}_{name}")
            self.log(f"{prefix}_{name}", metric, on_step=False, on_epoch=True, prog_bar=prog_bar)

    def on_train_epoch_start(self) -> None:
        self._epoch_metrics_logged.discard("train")

    def on_validation_epoch_start(self) -> None:
        self._epoch_metrics_logged.discard("val")

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, batch_idx, "train")["loss"]

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        out = self._shared_step(batch, batch_idx, "val")
        self.val_sweep.update(out["probs"], out["targets"])

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        out = self._shared_step(batch, batch_idx, "test")
        self.test_sweep.update(out["probs"], out["targets"])

    def on_validation_epoch_end(self) -> None:
        result = self.val_sweep.compute()
        self.val_sweep.reset()
        threshold_used = self.threshold_used
        if not self.trainer.sanity_checking:
            self.optimal_threshold = float(result.optimal_threshold)
            self.val_threshold_result = result.cpu()
            # The next epochs (and the test of this checkpoint) use the threshold found here.
            self.threshold_used = self.optimal_threshold
        self.log_dict(
            {
                MetricsKey.VAL_BEST_DICE_AT_THRESHOLD.value: float(result.best_dice),
                MetricsKey.VAL_MEAN_DICE_PER_IMAGE.value: float(result.mean_dice_per_image),
                MetricsKey.VAL_MEAN_IOU_PER_IMAGE.value: float(result.mean_iou_per_image),
                MetricsKey.VAL_OPTIMAL_THRESHOLD.value: float(result.optimal_threshold),
                MetricsKey.VAL_DICE_THRESHOLD_GAIN.value: float(result.dice_threshold_gain),
                MetricsKey.VAL_THRESHOLD_USED.value: float(threshold_used),
            },
            prog_bar=False,
        )

    def on_test_epoch_start(self) -> None:
        self._epoch_metrics_logged.discard("test")
        self.test_sweep = ThresholdSweep(fixed_threshold=self.threshold_used).to(self.device)

    def on_test_epoch_end(self) -> None:
        result = self.test_sweep.compute()
        self.test_sweep.reset()
        self.log_dict(
            {
                MetricsKey.TEST_MEAN_DICE_PER_IMAGE.value: float(result.mean_dice_per_image),
                MetricsKey.TEST_MEAN_IOU_PER_IMAGE.value: float(result.mean_iou_per_image),
                MetricsKey.TEST_THRESHOLD_USED.value: float(self.threshold_used),
            }
        )

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            self.log(
                MetricsKey.GRAD_SCALE.value, float(scaler.get_scale()), on_step=True, on_epoch=False
            )

    def configure_optimizers(self) -> Any:
        optimizer = build_optimizer(self.parameters(), self.cfg.train)
        train = self.cfg.train
        progress = run_progress(self.trainer) if train.budget_schedule else None
        scheduler = build_lr_scheduler(optimizer, train, progress)
        if scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = CheckpointPayload(
            config=self.hparams["config"],
            val_optimal_threshold=self.optimal_threshold,
            threshold_used=self.threshold_used,
            # Lets a resumed run continue the same MLflow run.
            mlflow_run_id=next(
                (lg.run_id for lg in self.loggers if isinstance(lg, MLFlowLogger)), None
            ),
            resolved=self.resolved,
        ).to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Checkpoints written with and without torch.compile load into either kind of model.
        if "state_dict" in checkpoint:
            checkpoint["state_dict"] = match_state_dict_keys(self, checkpoint["state_dict"])
        if CHECKPOINT_KEY not in checkpoint:
            return
        payload = CheckpointPayload.from_checkpoint(checkpoint)
        check_attention_upsample(payload, self.cfg)
        if payload.val_optimal_threshold is not None:
            self.optimal_threshold = payload.val_optimal_threshold
            self.threshold_used = self.optimal_threshold
