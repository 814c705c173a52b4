"""The grid of a sweep and the per-trial config, both keyed by :class:`HyperparamKey`.

Free of Optuna: these functions turn ``SWEEP_CONFIG`` into grid points and one grid point into
a validated :class:`ExperimentConfig`, so they can be tested and reused without a study.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from skinet.config.experiment import ExperimentConfig, apply_override, parse_config
from skinet.config.sweep import SweepConfig
from skinet.keys import HyperparamKey

GridValue = str | int | float
SearchSpace = dict[str, list[GridValue]]


def expected_keys() -> list[str]:
    """The search-space keys the sweep requires: every :class:`HyperparamKey` value."""
    return [key.value for key in HyperparamKey]


def validate_search_space(search_space: Mapping[str, Any]) -> None:
    """Check that the search space has exactly one entry per :class:`HyperparamKey` member.

    Raises:
        ValueError: A key is missing or unknown, or a dimension has no candidate; the message
            names the key and lists the expected ones.
    """
    expected = expected_keys()
    missing = [key for key in expected if key not in search_space]
    unknown = [str(key) for key in search_space if key not in expected]
    problems = []
    if missing:
        problems.append(f"missing key(s) {missing}")
    if unknown:
        problems.append(f"unknown key(s) {unknown}")
    empty = [key for key in expected if key in search_space and not list(search_space[key])]
    if empty:
        problems.append(f"no candidate value for {empty}")
    if problems:
        raise ValueError(
            f"invalid sweep search space: {'; '.join(problems)}; expected exactly the "
            f"HyperparamKey members {expected}"
        )


def build_search_space(sweep_cfg: SweepConfig) -> SearchSpace:
    """``{HyperparamKey value: candidates}`` read from ``SWEEP_CONFIG`` for every member."""
    space: SearchSpace = {key.value: list(getattr(sweep_cfg, key.value)) for key in HyperparamKey}
    validate_search_space(space)
    return space


def grid_points(search_space: Mapping[str, list[GridValue]]) -> list[dict[str, GridValue]]:
    """The Cartesian product in :class:`HyperparamKey` order (the last key varies fastest)."""
    validate_search_space(search_space)
    keys = expected_keys()
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(search_space[key] for key in keys))
    ]


def grid_key(params: Mapping[str, Any]) -> str:
    """A canonical string identifying one grid point (JSON with sorted keys)."""
    return json.dumps({str(k): params[k] for k in sorted(params)}, sort_keys=True)


def scale_lr(lr: float, batch_size: int, min_batch_size: int) -> float:
    """Linear LR scaling: ``lr * batch_size / min_batch_size``.

    ``lr`` is the rate at ``min_batch_size``, the smallest batch of the sweep.
    """
    if batch_size <= 0 or min_batch_size <= 0:
        raise ValueError(
            f"batch sizes must be positive (got batch_size={batch_size}, "
            f"min_batch_size={min_batch_size})"
        )
    return lr * batch_size / min_batch_size


def trial_run_name(number: int, params: Mapping[str, Any]) -> str:
    """The guide's child run name of trial ``number``."""
    return (
        f"trial_{number}_lr{params[HyperparamKey.LR]}_wd{params[HyperparamKey.WEIGHT_DECAY]}"
        f"_bs{params[HyperparamKey.BATCH_SIZE]}_nw{params[HyperparamKey.NUM_WORKERS]}"
        f"_pf{params[HyperparamKey.PREFETCH_FACTOR]}_sched{params[HyperparamKey.SCHEDULER_TYPE]}"
    )


def resolved_raw_config(cfg: ExperimentConfig) -> dict[str, Any]:
    """``cfg`` as plain data holding only the values that were set, ready for overrides.

    Auto-derived values (propagated monitor/mode, ``T_max``, precision, workers, ...) are never
    "set" (see ``Section._derive``), so parsing the result derives them again for new values.
    """
    return cfg.model_dump(mode="json", by_alias=True, exclude_unset=True)


def hyperparam_overrides(params: Mapping[str, Any], min_batch_size: int) -> dict[str, Any]:
    """Dotted config overrides for one grid point.

    Each :class:`HyperparamKey` member sets ``TRAIN_CONFIG.<key>`` except two:
    ``lr`` is rescaled by :func:`scale_lr`, and ``scheduler_type: none`` turns the scheduler
    off (``use_lr_scheduler: false``) instead of naming one.
    """
    overrides: dict[str, Any] = {}
    for key in HyperparamKey:
        value = params[key.value]
        if key is HyperparamKey.LR:
            batch_size = int(params[HyperparamKey.BATCH_SIZE.value])
            overrides["TRAIN_CONFIG.lr"] = scale_lr(float(value), batch_size, min_batch_size)
        elif key is HyperparamKey.SCHEDULER_TYPE:
            overrides["TRAIN_CONFIG.use_lr_scheduler"] = value != "none"
            if value != "none":
                overrides["TRAIN_CONFIG.scheduler_type"] = value
        else:
            overrides[f"TRAIN_CONFIG.{key.value}"] = value
    return overrides


def build_trial_config(
    cfg: ExperimentConfig,
    params: Mapping[str, Any],
    min_batch_size: int,
    extra_overrides: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    """The config of one trial: ``cfg`` with the grid point applied and derivations redone.

    Raises:
        ConfigError: The combination does not validate (the message names the YAML path).
    """
    overrides = {**hyperparam_overrides(params, min_batch_size), **(extra_overrides or {})}
    return config_with_overrides(cfg, overrides, source=f"sweep trial {dict(params)}")


def config_with_overrides(
    cfg: ExperimentConfig, overrides: Mapping[str, Any], source: str = "<derived config>"
) -> ExperimentConfig:
    """``cfg`` with dotted overrides applied and auto-derived values recomputed."""
    raw = resolved_raw_config(cfg)
    for dotted, value in overrides.items():
        apply_override(raw, dotted, value)
    return parse_config(raw, source=source)
