"""``TRAIN_CONFIG``: the trainer, optimisation, callbacks and tracking."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, field_validator, model_validator

from skinet.config.base import Section

Accelerator = Literal["auto", "cpu", "gpu", "cuda", "mps"]
LossName = Literal["BCE", "DICE", "BCE_DICE"]
DiceReduction = Literal["batch", "image"]
ThresholdSelection = Literal["pooled_dice", "per_image", "guarded"]
SchedulerType = Literal["reduce_on_plateau", "cosine_annealing", "cosine_budget"]
Precision = Literal[
    "32-true",
    "32",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "64-true",
    "transformer-engine",
]


class EarlyStoppingConfig(Section):
    """Lightning ``EarlyStopping`` on the propagated ``SWEEP_CONFIG.monitor``."""

    monitor: str | None = None
    """Set from ``SWEEP_CONFIG.monitor``; do not set it here."""
    patience: int = Field(5, ge=0)
    """Validation epochs without improvement before stopping."""
    min_delta: float = Field(0.0, ge=0.0)
    """Smallest change that counts as an improvement."""
    mode: Literal["max", "min"] = "max"
    """Set from ``SWEEP_CONFIG.direction``."""


class CheckpointConfig(Section):
    """Lightning ``ModelCheckpoint`` on the propagated ``SWEEP_CONFIG.monitor``, or on the epoch
    with ``select: last``."""

    monitor: str | None = None
    """Set from ``SWEEP_CONFIG.monitor``; do not set it here (unused with ``select: last``)."""
    mode: Literal["max", "min"] = "max"
    """Set from ``SWEEP_CONFIG.direction`` (unused with ``select: last``)."""
    save_top_k: int = Field(1, ge=-1)
    """How many best checkpoints to keep (-1 keeps all; the latest epochs with ``select: last``)."""
    save_last: bool = True
    """Also write ``last.ckpt`` every epoch, for ``--resume last``."""
    filename: str = "best-{epoch:03d}"
    """File name pattern of the best checkpoints."""
    select: Literal["best", "last"] = "best"
    """Which epoch's weights the run keeps as its model (``best-epoch=NNN.ckpt``, the checkpoint
    it tests, prints and logs): ``best`` on ``SWEEP_CONFIG.monitor``, or ``last``, the last
    epoch's, for a schedule that anneals to the end of the run (``cosine_budget``)."""

    @property
    def kept_epoch(self) -> str:
        """The kept checkpoint's epoch in words: ``best epoch`` or ``last epoch``."""
        return f"{self.select} epoch"


class LRSchedulerConfig(Section):
    """``ReduceLROnPlateau`` settings (``scheduler_type: reduce_on_plateau``)."""

    monitor: str | None = None
    """Set from ``SWEEP_CONFIG.monitor``; do not set it here."""
    mode: Literal["max", "min"] = "max"
    """Set from ``SWEEP_CONFIG.direction``."""
    patience: int = Field(5, ge=0)
    """Epochs without improvement before the LR is reduced."""
    factor: float = Field(0.5, gt=0.0, lt=1.0)
    """Multiplier applied to the LR on a plateau."""
    min_lr: float = Field(0.0, ge=0.0)
    """Lower bound on the LR."""


class CosineAnnealingConfig(Section):
    """Cosine settings (``scheduler_type: cosine_annealing`` and ``cosine_budget``)."""

    T_max: int | None = Field(None, gt=0)
    """Period in epochs (``cosine_annealing``); ``None`` becomes ``max_epochs``."""
    eta_min: float = Field(1e-6, ge=0.0)
    """Minimum LR at the end of each cycle (``cosine_budget``: when the run ends, by ``max_time``
    or by ``max_epochs`` if they end it first)."""


class EMAConfig(Section):
    """Exponential moving average of the weights (``use_ema: true``)."""

    decay: float = Field(0.995, gt=0.0, lt=1.0)
    """Weight of the old average at each optimizer step: about ``1 / (1 - decay)`` steps of
    memory (0.995: 200 steps)."""
    start_step: int = Field(0, ge=0)
    """Optimizer step from which the average is updated (before it, it copies the weights)."""


class MLflowConfig(Section):
    """MLflow tracking: where runs go and how they are named."""

    tracking_uri: str | None = None
    """``sqlite:///path.db``, ``http://host:port`` or ``postgresql://...``; ``None`` uses
    ``sqlite:///<output_dir>/mlflow.db`` with artifacts in ``<output_dir>/mlartifacts``."""
    experiment_name: str | None = None
    """MLflow experiment; ``None`` uses ``TRAIN_CONFIG.experiment_name``."""
    run_name: str | None = None
    """Run name; ``None`` gives ``{experiment_name}_seed{seed}_{timestamp}``."""
    artifact_location: str | None = None
    """Artifact root for a new experiment on an SQLite or database store."""
    log_model_summary: bool = True
    """Log the model summary (``model_summary.txt``: every layer's parameters, and FLOPs for one
    image) at fit start."""
    log_checkpoint: bool = True
    """Log the best checkpoint as an artifact at fit end."""


class LitLoggerConfig(Section):
    """Lightning Studio's ``LitLogger`` (optional dependency ``litlogger``)."""

    name: str | None = None
    """Experiment name shown in Lightning Studio; ``None`` uses the run name."""
    teamspace: str | None = None
    """Teamspace to log to; ``None`` uses the current one."""
    log_model: bool = False
    """Upload checkpoints to Lightning Studio."""


class TrainConfig(Section):
    """Trainer, optimisation, callbacks and tracking settings."""

    experiment_name: str = "skinet"
    """Names the MLflow experiment, runs and sweeps."""
    output_dir: str = "runs"
    """Folder for run directories, checkpoints, plots and the default MLflow store."""
    batch_size: int = Field(8, gt=0)
    """Samples per training batch."""
    num_workers: int | None = Field(None, ge=0)
    """DataLoader workers; ``None`` = CPU count divided among DDP processes."""
    pin_memory: bool | None = None
    """``None`` = ``True`` on GPU, ``False`` on CPU/MPS."""
    prefetch_factor: int | None = Field(None, gt=0)
    """Batches pre-loaded per worker; ignored when ``num_workers`` is 0."""
    cache_in_ram: bool = True
    """Decode and resize the dataset once and keep it in RAM."""
    augment_on: Literal["cpu", "device"] = "cpu"
    """``device``: keep the training split (always cached) on the accelerator and augment there."""
    use_torch_compile: bool = False
    """Wrap the model with ``torch.compile``."""
    torch_compile_backend: str = "inductor"
    """``torch.compile`` backend (``inductor``, ``eager``, ...)."""
    channels_last: bool | None = None
    """The ``channels_last`` memory format; ``None`` = the faster one for ``MODEL_CONFIG.norm`` on
    the device, as ``benchmarks/bench_norm.py`` measured it (on for batch and instance norm, off
    for group norm)."""
    loss_name: LossName = "BCE_DICE"
    """Loss on raw logits; ``BCE_DICE`` weighs both by ``bce_weight``."""
    bce_weight: float = Field(0.5, ge=0.0, le=1.0)
    """Weight of the BCE term of ``BCE_DICE``; the soft Dice term gets ``1 - bce_weight``."""
    dice_reduction: DiceReduction = "batch"
    """Soft Dice of ``DICE`` and ``BCE_DICE`` over the pixels of the whole batch (``batch``), or
    per image and averaged over the batch (``image``: every image counts once, as in the mean
    per-image score)."""
    optimizer_name: Literal["adam", "adamw"] = "adamw"
    """Optimizer."""
    lr: float = Field(1e-4, gt=0.0)
    """Base learning rate."""
    init_checkpoint: str | None = None
    """Start a new run from this checkpoint's weights (fine-tuning; ``skinet train --init-from``):
    fresh optimizer and schedule; its ``MODEL_CONFIG`` and preprocessing unless set here."""
    weight_decay: float = Field(1e-4, ge=0.0)
    """L2 regularisation strength."""
    optimal_threshold: float | None = Field(None, ge=0.0, le=1.0)
    """``None`` sweeps 51 thresholds each validation epoch; a float fixes the threshold."""
    threshold_selection: ThresholdSelection = "pooled_dice"
    """How the sweep chooses: the best Dice pooled over all pixels, the best mean per-image
    Jaccard (``per_image``), or that only when its gain over ``threshold_reference`` is clear
    (``guarded``: a 95% paired bootstrap interval over the validation images above 0)."""
    threshold_reference: float | None = Field(None, ge=0.0, le=1.0)
    """The threshold ``guarded`` keeps unless the gain is clear; ``None`` = the source
    checkpoint's when fine-tuning (``init_checkpoint``), else 0.5."""
    max_epochs: int = Field(1, gt=0)
    """Maximum training epochs."""
    max_time: str | dict[str, int] | None = None
    """Wall-clock limit of training, ``"DD:HH:MM:SS"`` or e.g. ``{minutes: 15}`` (Lightning's)."""
    accelerator: Accelerator = "auto"
    """``auto`` resolves to ``gpu``, ``mps`` or ``cpu``."""
    devices: int | list[int] | str = "auto"
    """Devices per node (an int, ``"auto"`` or a list spec such as ``"0,1"``)."""
    num_nodes: int = Field(1, gt=0)
    """Machines in a multi-node run."""
    strategy: str = "auto"
    """Lightning strategy (``auto``, ``ddp``, ``ddp_spawn``, ...)."""
    precision: Precision | None = None
    """``None`` = ``16-mixed`` on GPU/MPS, ``32-true`` on CPU."""
    deterministic: bool = True
    """Deterministic algorithms (``warn`` on MPS)."""
    seed: int = 42
    """Global seed for ``L.seed_everything``."""
    use_lr_scheduler: bool = True
    """Enable the LR scheduler."""
    scheduler_type: SchedulerType = "reduce_on_plateau"
    """LR scheduler; ``cosine_budget`` anneals from ``lr`` to ``cosine_annealing_config.eta_min``
    over the wall-clock ``max_time`` (stepped every batch by the time trained so far), or over
    ``max_epochs`` when they end the run first."""
    lr_scheduler_config: LRSchedulerConfig = Field(default_factory=LRSchedulerConfig)
    """``ReduceLROnPlateau`` settings."""
    cosine_annealing_config: CosineAnnealingConfig = Field(default_factory=CosineAnnealingConfig)
    """``CosineAnnealingLR`` settings."""
    freeze_encoder_epochs: int = Field(0, ge=0)
    """Hold the encoder's weights for the first N epochs while the decoder trains (fine-tuning
    on a few images of a new clinic); 0 trains everything from the start."""
    use_ema: bool = False
    """Keep an exponential moving average of the weights; validation, the threshold sweep,
    the checkpoints' weights and so prediction use the average."""
    ema_config: EMAConfig = Field(default_factory=EMAConfig)
    """EMA settings."""
    use_early_stopping: bool = True
    """Enable ``EarlyStopping``."""
    early_stopping_config: EarlyStoppingConfig = Field(default_factory=EarlyStoppingConfig)
    """Early stopping settings."""
    use_checkpoint: bool = True
    """Enable ``ModelCheckpoint``."""
    checkpoint_config: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoint settings."""
    use_mlflow_logger: bool = True
    """Log to MLflow."""
    mlflow_config: MLflowConfig = Field(default_factory=MLflowConfig)
    """MLflow settings."""
    use_litlogger_logger: bool = False
    """Also log to Lightning Studio's ``LitLogger``."""
    litlogger_config: LitLoggerConfig = Field(default_factory=LitLoggerConfig)
    """``LitLogger`` settings."""
    system_metrics_interval_sec: float = Field(5.0, gt=0.0)
    """Period of the CPU/RAM/GPU sampling thread."""
    log_every_n_steps: int = Field(10, gt=0)
    """Lightning's step-metric logging period (capped at the training batches of an epoch)."""
    num_sanity_val_steps: int = Field(2, ge=-1)
    """Validation batches run before training (0 skips the sanity check)."""
    gradient_clip_val: float | None = Field(None, gt=0.0)
    """Clip gradient norm to this value."""
    accumulate_grad_batches: int = Field(1, gt=0)
    """Accumulate gradients over N batches."""
    limit_train_batches: float | int | None = None
    """Use only part of the training set per epoch (debugging)."""
    limit_val_batches: float | int | None = None
    """Use only part of the validation set per epoch (debugging)."""
    enable_progress_bar: bool = True
    """Show the progress bar on a terminal or in Jupyter (none in a log file); epochs from 1."""
    progress_log_interval_sec: float = Field(60.0, gt=0)
    """Off a terminal (``> train.log``, nohup, SLURM, CI) or without the progress bar: log a line
    per epoch and at least one this often while an epoch trains."""

    @field_validator("max_time", mode="before")
    @classmethod
    def _refuse_numbers(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            # YAML 1.1 reads an unquoted 1:00:00:00 as the base-60 integer 216000.
            raise ValueError(
                f"got the number {value}: write the duration as a quoted string, "
                "e.g. max_time: '00:00:15:00' (DD:HH:MM:SS), or a mapping such as {minutes: 15}"
            )
        return value

    @field_validator("max_time")
    @classmethod
    def _check_max_time(cls, value: str | dict[str, int] | None) -> str | dict[str, int] | None:
        if value is not None:
            parse_max_time(value)
        return value

    @field_validator("devices")
    @classmethod
    def _check_devices(cls, devices: int | list[int] | str) -> int | list[int] | str:
        parse_device_spec(devices)
        return devices

    @property
    def budget_schedule(self) -> bool:
        """The learning rate follows the run's budget (``cosine_budget``), stepped every batch."""
        return self.use_lr_scheduler and self.scheduler_type == "cosine_budget"

    @model_validator(mode="after")
    def _check_bce_weight(self) -> TrainConfig:
        if self.loss_name != "BCE_DICE" and self.bce_weight != 0.5:
            raise ValueError(
                f"bce_weight: {self.bce_weight} weighs the terms of loss_name: BCE_DICE, but "
                f"loss_name is {self.loss_name} (set loss_name: BCE_DICE, or drop bce_weight)"
            )
        if self.loss_name == "BCE" and self.dice_reduction != "batch":
            raise ValueError(
                f"dice_reduction: {self.dice_reduction} reduces the soft Dice term, but loss_name "
                "is BCE, which has none (set loss_name: DICE or BCE_DICE, or drop dice_reduction)"
            )
        return self

    @model_validator(mode="after")
    def _check_budget_schedule(self) -> TrainConfig:
        if self.budget_schedule and not self.max_time:
            raise ValueError(
                "scheduler_type: cosine_budget anneals over the time budget: set "
                "TRAIN_CONFIG.max_time (e.g. '00:00:15:00'), or use cosine_annealing (epochs)"
            )
        return self

    @model_validator(mode="after")
    def _check_last_weights(self) -> TrainConfig:
        if self.checkpoint_config.select == "last" and self.use_early_stopping:
            raise ValueError(
                "checkpoint_config.select: last keeps the last epoch's weights, but early "
                "stopping ends the run `patience` epochs after the best one: set "
                "use_early_stopping: false, or checkpoint_config.select: best"
            )
        return self

    @model_validator(mode="after")
    def _derive_schedule_length(self) -> TrainConfig:
        if self.cosine_annealing_config.T_max is None:
            self.cosine_annealing_config._derive("T_max", self.max_epochs)
        return self


MAX_TIME_UNITS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds")


def parse_max_time(value: str | dict[str, int]) -> timedelta:
    """``TRAIN_CONFIG.max_time`` as a positive ``timedelta``, with the formats Lightning accepts.

    Raises:
        ValueError: not ``"DD:HH:MM:SS"`` (two digits for hours, minutes and seconds), a dict
            with other keys than :data:`MAX_TIME_UNITS` or negative values, or zero in total.
    """
    if isinstance(value, str):
        match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", value.strip())
        if match is None:
            raise ValueError(
                f"{value!r} is not a duration: use 'DD:HH:MM:SS' (e.g. '00:00:15:00' for 15 "
                "minutes) or a mapping such as {minutes: 15}"
            )
        days, hours, minutes, seconds = (int(group) for group in match.groups())
        duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    else:
        unknown = sorted(set(value) - set(MAX_TIME_UNITS))
        if unknown:
            raise ValueError(f"unknown time unit(s) {unknown}; allowed: {list(MAX_TIME_UNITS)}")
        if any(amount < 0 for amount in value.values()):
            raise ValueError(f"time amounts must be >= 0, got {value}")
        duration = timedelta(**value)
    if duration <= timedelta(0):
        raise ValueError("max_time must be longer than 0 seconds")
    return duration


DeviceSpec = int | list[int] | str


def parse_device_spec(devices: DeviceSpec) -> int | list[int] | Literal["auto"]:
    """``devices`` as Lightning reads it: ``"auto"``, a count (``-1`` = all) or device indices.

    Strings follow Lightning: ``"2"`` is a count, ``"0,1"`` and ``"1,"`` are indices.

    Raises:
        ValueError: ``devices`` is none of these (a bool, an empty or non-integer string, a
            count below -1).
    """
    if isinstance(devices, bool):
        raise ValueError(f"devices must be an int, a list of ints or a string, got {devices!r}")
    if isinstance(devices, list):
        return [int(d) for d in devices]
    if isinstance(devices, str):
        text = devices.strip()
        if text == "auto":
            return "auto"
        try:
            if "," in text:
                return [int(d) for d in text.split(",") if d.strip()]
            count = int(text)
        except ValueError:
            raise ValueError(
                f"devices {devices!r} is not 'auto', a count such as '2' (-1 = all) or a list "
                "of device indices such as '0,1'"
            ) from None
    else:
        count = int(devices)
    if count < -1:
        raise ValueError(f"devices must be -1 (all), 0 or more, got {count}")
    return count
