#!/usr/bin/env bash
# Lightning Studio start-up on a CPU machine: like on_start_gpu.sh, but every job gets
# --set TRAIN_CONFIG.accelerator=cpu and no GPU is requested from Docker.
#   MODE=train DATASET=isic2017 ./on_start_cpu.sh --dry-run
# See ./on_start_cpu.sh --help and docs/development.md#lightning-studio.
set -euo pipefail
SKINET_DEVICE=cpu
# shellcheck source=scripts/on_start_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/on_start_common.sh"
skinet_on_start "$@"
