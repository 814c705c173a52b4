#!/usr/bin/env bash
# Lightning Studio start-up on a GPU machine: start MLflow, run MODE (inside the SkiNet Docker
# image when a Docker daemon answers), then optionally release the GPU (RELEASE_GPU=1).
#   MODE=sweep SWEEP_MONITOR=val_best_dice_at_threshold ./on_start_gpu.sh --dry-run
# See ./on_start_gpu.sh --help and docs/development.md#lightning-studio.
set -euo pipefail
SKINET_DEVICE=gpu
# shellcheck source=scripts/on_start_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/on_start_common.sh"
skinet_on_start "$@"
