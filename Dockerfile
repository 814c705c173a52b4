# SkiNet training image: CUDA 12.8 runtime + Python 3.11 + the project (pinned by constraints.txt).
#
#   docker build -t skinet:latest .
#   docker run --rm --gpus all --ipc=host --network host \
#       -v "$PWD":/workplace/SkiNet skinet:latest python main_run.py --config configs/main_config.yaml
#
# DataLoader workers share batches through /dev/shm: run with --ipc=host, or --shm-size=8g
# where the host IPC namespace is not allowed (Docker's default 64 MB makes workers crash with
# "bus error" / "unable to write to file </torch_...>"). --network host lets the container reach
# the MLflow server started by start_mlflow.sh on the host's 127.0.0.1:5000.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04

ARG PYTHON_VERSION=3.11
# CUDA wheel index matching the base image (change both together); PyPI's CPU-only torch is not used.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false \
    # Keep freed memory instead of returning it to the OS each step (see docs/development.md).
    MALLOC_MMAP_MAX_=0 \
    MALLOC_TRIM_THRESHOLD_=2147483647

RUN apt-get update \
    && apt-get install -y --no-install-recommends software-properties-common curl git libgl1 libglib2.0-0 \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python${PYTHON_VERSION} python${PYTHON_VERSION}-venv python${PYTHON_VERSION}-dev \
    && rm -rf /var/lib/apt/lists/*

# A venv first on PATH, so `python`, `pip`, `skinet` and `mlflow` are the project's.
RUN python${PYTHON_VERSION} -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /workplace/SkiNet

# Dependencies first (cached while only the source changes): torch from the CUDA index at the
# version pinned in constraints.txt, then everything else under the same constraints.
COPY constraints.txt pyproject.toml README.md ./
RUN pip install --upgrade pip setuptools wheel \
    && pip install --index-url "${TORCH_INDEX_URL}" --extra-index-url https://pypi.org/simple \
        "torch==$(sed -n 's/^torch==//p' constraints.txt)"

COPY src ./src
COPY configs ./configs
COPY main_run.py optuna_sweep.py run_seeds.py start_mlflow.sh ./
# Editable install: a repo mounted over /workplace/SkiNet (as on_start_*.sh do) is what runs.
RUN pip install -c constraints.txt -e .

EXPOSE 5000
CMD ["python", "main_run.py", "--config", "configs/main_config.yaml"]
