"""``ExperimentConfig``: the whole YAML file, cross-section rules and loading."""

from __future__ import annotations

import difflib
import shlex
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from skinet.config.data import DataConfig
from skinet.config.errors import ConfigError
from skinet.config.model import UNet2DModelConfig
from skinet.config.sweep import SweepConfig
from skinet.config.train import (
    CheckpointConfig,
    EarlyStoppingConfig,
    LRSchedulerConfig,
    TrainConfig,
)
from skinet.config.transform import TransformConfig

# YAML section name -> field of ExperimentConfig. Keys are matched case-insensitively with
# underscores removed, so ``TRAIN_CONFIG``, ``trainconfig`` and ``train_config`` all work.
SECTIONS = {
    "TRAIN_CONFIG": "train",
    "MODEL_CONFIG": "model",
    "DATA_CONFIG": "data",
    "TRANSFORM_CONFIG": "transform",
    "SWEEP_CONFIG": "sweep",
}
_SECTION_BY_KEY = {name.replace("_", "").lower(): name for name in SECTIONS}


RESOLVED_KEY = "RESOLVED"
"""Where a run writes what its automatic values resolved to on the machine that ran it
(``skinet.runtime.devices.TrainSettings``), beside the sections in its ``config.yaml`` and
checkpoint. A config read back drops this key: the values are resolved again where it runs."""


class ExperimentConfig(BaseModel):
    """Every section of a SkiNet YAML file."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    train: TrainConfig = Field(default_factory=TrainConfig, alias="TRAIN_CONFIG")
    """Trainer, optimisation, callbacks and tracking."""
    model: UNet2DModelConfig = Field(default_factory=UNet2DModelConfig, alias="MODEL_CONFIG")
    """Network architecture."""
    data: DataConfig = Field(default_factory=DataConfig, alias="DATA_CONFIG")
    """Dataset, splits and normalisation."""
    transform: TransformConfig = Field(default_factory=TransformConfig, alias="TRANSFORM_CONFIG")
    """Augmentation pipeline."""
    sweep: SweepConfig = Field(default_factory=SweepConfig, alias="SWEEP_CONFIG")
    """Optuna grid and the monitored metric."""

    @model_validator(mode="before")
    @classmethod
    def _normalise_section_names(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        out: dict[str, Any] = {}
        for key, value in raw.items():
            canonical = _SECTION_BY_KEY.get(str(key).replace("_", "").lower())
            if canonical is None and key in SECTIONS.values():
                canonical = next(k for k, v in SECTIONS.items() if v == key)
            name = canonical or key
            if name in out:
                raise ValueError(f"section {name} is given twice (as {key!r} and another spelling)")
            out[name] = value
        return out

    @model_validator(mode="after")
    def _propagate_monitor(self) -> ExperimentConfig:
        monitor, mode = self.sweep.monitor, self.sweep.mode
        sections: dict[str, EarlyStoppingConfig | CheckpointConfig | LRSchedulerConfig] = {
            "early_stopping_config": self.train.early_stopping_config,
            "checkpoint_config": self.train.checkpoint_config,
            "lr_scheduler_config": self.train.lr_scheduler_config,
        }
        for name, section in sections.items():
            if section.monitor is not None and section.monitor != monitor:
                raise ValueError(
                    f"TRAIN_CONFIG.{name}.monitor is {section.monitor!r} but SWEEP_CONFIG.monitor "
                    f"is {monitor!r}; remove 'monitor' from {name} (it is propagated from "
                    "SWEEP_CONFIG.monitor)"
                )
            if "mode" in section.model_fields_set and section.mode != mode:
                raise ValueError(
                    f"TRAIN_CONFIG.{name}.mode is {section.mode!r} but SWEEP_CONFIG.direction is "
                    f"{self.sweep.direction!r} (mode {mode!r}); remove 'mode' from {name} (it is "
                    "propagated from SWEEP_CONFIG.direction)"
                )
            section._derive("monitor", monitor)
            section._derive("mode", mode)
        return self

    @model_validator(mode="after")
    def _check_image_size(self) -> ExperimentConfig:
        model, size = self.model, self.data.image_size
        multiple = model.size_multiple
        if size < model.smallest_side:
            bottleneck = (
                "1x1, which norm 'instance' cannot normalise"
                if size == multiple
                else f"{size}/{multiple} of a pixel"
            )
            raise ValueError(
                f"DATA_CONFIG.image_size {size} is too small for MODEL_CONFIG.number_of_layers "
                f"{model.number_of_layers} with stride {model.stride}: the bottleneck would be "
                f"{bottleneck} (image_size / stride**(number_of_layers - 1)); use image_size >= "
                f"{model.smallest_side} or fewer number_of_layers"
            )
        if model.deep_supervision and size % multiple:
            raise ValueError(
                f"MODEL_CONFIG.deep_supervision needs a DATA_CONFIG.image_size that is a "
                f"multiple of {multiple} (stride**(number_of_layers - 1)), got {size}: its "
                f"coarse maps then cover the image and no padding (e.g. image_size: "
                f"{max(multiple, size // multiple * multiple)})"
            )
        self._check_progressive_resizing()
        return self

    def _check_progressive_resizing(self) -> None:
        resizing, model = self.data.progressive_resizing, self.model
        if resizing is None:
            return
        size, multiple = self.data.image_size, model.size_multiple
        small = resizing.side(size)
        least = model.smallest_side
        if model.deep_supervision:
            least = -(-least // multiple) * multiple
        fits = least <= small < size and not (model.deep_supervision and small % multiple)
        if fits:
            return
        rule = (
            f"between {least} and {size - 1}"
            + (f", a multiple of {multiple}" if model.deep_supervision else "")
            + f" (stride**(number_of_layers - 1) = {multiple} for MODEL_CONFIG.number_of_layers "
            f"{model.number_of_layers} with stride {model.stride}"
            + (", above it for norm 'instance')" if model.norm == "instance" else ")")
        )
        raise ValueError(
            f"DATA_CONFIG.progressive_resizing.scale {resizing.scale} makes the first epochs' "
            f"images {small} px of image_size {size}; the side must be {rule}: use a scale of "
            f"at least {least / size:.3g} and below 1"
        )

    def to_yaml_dict(self) -> dict[str, Any]:
        """The resolved config as plain data with the YAML section names."""
        return self.model_dump(mode="json", by_alias=True)


def _format_error(error: ValidationError, section_names: dict[str, str]) -> str:
    lines = []
    for item in error.errors():
        loc = [str(p) for p in item["loc"]]
        if loc and loc[0] in section_names:
            loc[0] = section_names[loc[0]]
        path = ".".join(loc)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key" + _suggest(item["loc"])
        if path and message.startswith(path):
            # The validator already named the exact entry (e.g. ``...train_transforms[2]``).
            lines.extend(message.split("; "))
            continue
        line = f"{path}: {message}" if path else message
        given = item.get("input")
        short_list = isinstance(given, list) and len(repr(given)) <= 60
        if item["type"] != "missing" and (short_list or not isinstance(given, dict | list | None)):
            line += f" (got {given!r})"
        lines.append(line)
    return "\n".join(lines)


def _suggest(loc: tuple[int | str, ...]) -> str:
    """``; did you mean max_epochs?`` for the closest valid key at ``loc``, else a docs hint."""
    fallback = " (check the spelling against the docs)"
    node: Any = ExperimentConfig
    for part in loc[:-1]:
        fields = {f.alias or name: f for name, f in node.model_fields.items()}
        field = fields.get(part) if isinstance(part, str) else None
        node = _model_class(field.annotation) if field is not None else None
        if node is None:
            return fallback
    valid = list(SECTIONS) if node is ExperimentConfig else list(node.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]}?"
    if node is ExperimentConfig:
        return f" (the sections are {', '.join(SECTIONS)})"
    return fallback


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``annotation`` (``X``, ``X | None``), else ``None``."""
    candidates = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def parse_config(raw: dict[str, Any] | None, source: str = "<config>") -> ExperimentConfig:
    """Validate a config given as plain data, raising :class:`ConfigError` with YAML paths.

    Args:
        raw: The sections, as read from YAML.
        source: What to name in error messages (the file).
    """
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source}: top level must be a mapping of sections, got {type(raw).__name__}"
        )
    raw = {k: v for k, v in raw.items() if k != RESOLVED_KEY}
    written = {_SECTION_BY_KEY.get(str(k).replace("_", "").lower(), str(k)): str(k) for k in raw}
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid config {source}:\n{_format_error(exc, written)}") from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read a YAML file (``yaml.safe_load``) into an :class:`ExperimentConfig`.

    Args:
        path: The YAML file.
        overrides: Dotted keys replacing values of the file, e.g.
            ``{"TRAIN_CONFIG.max_epochs": 3}``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}; {_shipped_hint(path)}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: top level must be a mapping of sections (TRAIN_CONFIG: ..., "
            f"MODEL_CONFIG: ...), got a {type(raw).__name__}"
        )
    for dotted, value in (overrides or {}).items():
        apply_override(raw, dotted, value)
    source = f"{path} with --set {', '.join(overrides)}" if overrides else str(path)
    return parse_config(raw, source)


def _shipped_hint(path: Path) -> str:
    """Where a missing config may come from: the shipped one of that name, or the list of them."""
    from skinet.config.templates import shipped_configs_hint, template_names

    stem = path.name.removesuffix(".yaml")
    if stem not in template_names():
        return shipped_configs_hint()
    if path == Path(f"{stem}.yaml"):
        return f"`skinet config init {stem}` writes SkiNet's {stem}.yaml into the current folder"
    return f"`skinet config init {stem} --output {shlex.quote(str(path))}` writes SkiNet's there"


def apply_override(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"``, creating mappings as needed."""
    keys = dotted.split(".")
    node = raw
    for depth, key in enumerate(keys[:-1]):
        match = next((k for k in node if _same_section(k, key)), key)
        node = node.setdefault(match, {})
        if not isinstance(node, dict):
            raise ConfigError(
                f"--set {dotted}: {'.'.join(keys[: depth + 1])} is {node!r}, not a section"
            )
    node[keys[-1]] = value


def _same_section(a: Any, b: str) -> bool:
    norm = lambda s: str(s).replace("_", "").lower()  # noqa: E731
    return norm(a) == norm(b)
