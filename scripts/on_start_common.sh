# shellcheck shell=bash
# Shared implementation of on_start_gpu.sh and on_start_cpu.sh (sourced; set SKINET_DEVICE first).
#
# Environment (defaults in brackets):
#   MODE            train | sweep | seeds | ablation                      [train]
#   CONFIG          YAML experiment config                                [configs/main_config.yaml]
#   DATASET         sets DATA_CONFIG.dataset (isic2017, isic2018, ph2, folder, synthetic)
#   SEEDS           seeds of MODE=seeds, space or comma separated         [42 200 300]
#   SWEEP_MONITOR   --monitor of MODE=sweep (only passed when set)
#   SWEEP_DIRECTION --direction of MODE=sweep (only passed when set)
#   TRIALS          --trials of MODE=sweep (only passed when set)
#   ENCODER_MODES   --encoder-modes of MODE=ablation, space or comma separated
#   MERGE_MODES     --merge-modes of MODE=ablation, space or comma separated
#   EXTRA_SET       more overrides, e.g. "TRAIN_CONFIG.max_epochs=3 TRAIN_CONFIG.batch_size=16"
#   RELEASE_GPU     1: stop the Lightning Studio when the job ends (GPU script only)   [0]
#   USE_DOCKER      auto | 1 | 0: run inside the SkiNet image when a Docker daemon answers [auto]
#   IMAGE           Docker image, built from ./Dockerfile when missing    [skinet:latest]
#   SHM_SIZE        use --shm-size=SHM_SIZE instead of --ipc=host
#   DOCKER_ARGS     extra `docker run` arguments (e.g. "-v /teamspace:/teamspace")
#   MLFLOW_PORT     port of the MLflow server started by start_mlflow.sh [5000]
#   DRY_RUN         1 (or --dry-run): print every command, run nothing    [0]

skinet_usage() {
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Print a command as it would be typed, then run it unless DRY_RUN=1.
skinet_run() {
  local line
  line="$(printf '%q ' "$@")"
  echo "+ ${line% }"
  if [[ "$DRY_RUN" != "1" ]]; then
    "$@"
  fi
}

skinet_words() {  # "a,b c" -> "a b c"
  echo "${1//,/ }"
}

skinet_on_start() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --dry-run) DRY_RUN=1 ;;
      -h | --help) skinet_usage; return 0 ;;
      *) echo "on_start: unknown argument '$arg' (use --dry-run or --help)" >&2; return 2 ;;
    esac
  done
  DRY_RUN="${DRY_RUN:-0}"
  local repo_root
  repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$repo_root"

  local mode="${MODE:-train}" config="${CONFIG:-configs/main_config.yaml}"
  local -a overrides=()
  [[ -n "${DATASET:-}" ]] && overrides+=(--set "DATA_CONFIG.dataset=$DATASET")
  [[ "$SKINET_DEVICE" == "cpu" ]] && overrides+=(--set "TRAIN_CONFIG.accelerator=cpu")
  local pair
  for pair in $(skinet_words "${EXTRA_SET:-}"); do overrides+=(--set "$pair"); done

  local -a job
  case "$mode" in
    train) job=(python main_run.py --config "$config") ;;
    sweep)
      job=(python optuna_sweep.py --config "$config")
      [[ -n "${SWEEP_MONITOR:-}" ]] && job+=(--monitor "$SWEEP_MONITOR")
      [[ -n "${SWEEP_DIRECTION:-}" ]] && job+=(--direction "$SWEEP_DIRECTION")
      [[ -n "${TRIALS:-}" ]] && job+=(--trials "$TRIALS")
      ;;
    seeds)
      # shellcheck disable=SC2046
      job=(python run_seeds.py --config "$config" --seeds $(skinet_words "${SEEDS:-42 200 300}"))
      ;;
    ablation)
      job=(skinet ablation --config "$config")
      # shellcheck disable=SC2046
      [[ -n "${ENCODER_MODES:-}" ]] && job+=(--encoder-modes $(skinet_words "$ENCODER_MODES"))
      # shellcheck disable=SC2046
      [[ -n "${MERGE_MODES:-}" ]] && job+=(--merge-modes $(skinet_words "$MERGE_MODES"))
      ;;
    *)
      echo "on_start: unknown MODE '$mode'; choose one of: train, sweep, seeds, ablation" >&2
      return 2
      ;;
  esac
  job+=("${overrides[@]}")

  # MLflow: one server for every job; the training code logs to it through MLFLOW_TRACKING_URI
  # unless the config names another store.
  local port="${MLFLOW_PORT:-5000}"
  export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-http://127.0.0.1:$port}"
  if [[ "$MLFLOW_TRACKING_URI" == "http://127.0.0.1:$port" ]]; then
    PORT="$port" skinet_run ./start_mlflow.sh
  fi

  local use_docker="${USE_DOCKER:-auto}"
  if [[ "$use_docker" == "auto" ]]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
      use_docker=1
    else
      use_docker=0
    fi
  fi

  local status=0
  if [[ "$use_docker" == "1" ]]; then
    local image="${IMAGE:-skinet:latest}"
    if [[ "$DRY_RUN" == "1" ]] || ! docker image inspect "$image" >/dev/null 2>&1; then
      skinet_run docker build -t "$image" . || status=$?
    fi
    local -a docker_run=(docker run --rm --network host)
    [[ "$SKINET_DEVICE" == "gpu" ]] && docker_run+=(--gpus all)
    if [[ -n "${SHM_SIZE:-}" ]]; then docker_run+=("--shm-size=$SHM_SIZE"); else docker_run+=(--ipc=host); fi
    docker_run+=(-v "$repo_root:/workplace/SkiNet" -w /workplace/SkiNet
      -e "MLFLOW_TRACKING_URI=$MLFLOW_TRACKING_URI")
    [[ -d /teamspace ]] && docker_run+=(-v /teamspace:/teamspace)
    # shellcheck disable=SC2206
    [[ -n "${DOCKER_ARGS:-}" ]] && docker_run+=($DOCKER_ARGS)
    ((status == 0)) && { skinet_run "${docker_run[@]}" "$image" "${job[@]}" || status=$?; }
  else
    # Directly on this machine, with the project's venv when there is one.
    if [[ -x .venv/bin/python ]]; then
      [[ "${job[0]}" == "python" ]] && job[0]=.venv/bin/python
      [[ "${job[0]}" == "skinet" && -x .venv/bin/skinet ]] && job[0]=.venv/bin/skinet
    fi
    skinet_run "${job[@]}" || status=$?
  fi

  if [[ "${RELEASE_GPU:-0}" == "1" ]]; then
    if [[ "$SKINET_DEVICE" != "gpu" ]]; then
      echo "on_start: RELEASE_GPU is only used by on_start_gpu.sh; ignored"
    elif [[ "$DRY_RUN" == "1" ]] || command -v lightning >/dev/null 2>&1; then
      echo "on_start: job finished (exit $status); releasing the GPU machine"
      skinet_run lightning studio stop || true
    else
      echo "on_start: RELEASE_GPU=1 but the 'lightning' CLI is not installed;" \
        "would run: lightning studio stop (pip install lightning-sdk)"
    fi
  fi
  return "$status"
}
