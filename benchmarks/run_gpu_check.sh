#!/usr/bin/env bash
# The GPU check, as run on a lent GPU machine from the repository root:
#
#   benchmarks/run_gpu_check.sh WHEELS_DIR [OUT_DIR]
#
# 1. installs, from WHEELS_DIR only (pip --no-index --find-links), whichever packages the
#    training path, the check and the tests need that this machine lacks (on the lent machines:
#    pydantic and albumentations with their dependencies; MLflow and Optuna are not needed);
# 2. runs benchmarks/gpu_check.py, which writes OUT_DIR/gpu_check.json and gpu_check.md;
# 3. runs the CUDA tests (pytest -m gpu on the files that hold them);
# all within one total timeout, GPU_CHECK_TIMEOUT_S (default 780 s; the check itself gets at most
# 540 s of it). Exit status: the check's, or the tests' when the check passed.
#
# WHEELS_DIR is made beforehand on a machine with registry access, for the GPU machine's Python
# (run `python -V` there) and platform, e.g.:
#   pip download --only-binary=:all: --no-deps --python-version 3.11 \
#     --platform manylinux2014_x86_64 -c constraints.txt -d wheels \
#     pydantic pydantic-core annotated-types typing-inspection typing-extensions \
#     albumentations albucore simsimd stringzilla scipy
# Step 1 prints what is missing; add those wheels (psutil, rich, matplotlib, pytest, ...) too.
set -euo pipefail

WHEELS=${1:?usage: benchmarks/run_gpu_check.sh WHEELS_DIR [OUT_DIR]}
OUT=${2:-gpu_check_out}
TOTAL=${GPU_CHECK_TIMEOUT_S:-780}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
started=$(date +%s)
left() { echo $((TOTAL - ($(date +%s) - started))); }

missing=$("$PY" - <<'PYEOF'
import importlib.util

# import name -> pip name, for what training, gpu_check.py and the gpu tests import
needed = {
    "torch": "torch", "lightning": "lightning", "torchmetrics": "torchmetrics",
    "cv2": "opencv-python-headless", "numpy": "numpy", "yaml": "PyYAML",
    "pydantic": "pydantic", "albumentations": "albumentations", "psutil": "psutil",
    "rich": "rich", "matplotlib": "matplotlib", "pytest": "pytest",
    "pytest_timeout": "pytest-timeout",
}
print(" ".join(pip for module, pip in needed.items() if importlib.util.find_spec(module) is None))
PYEOF
)
if [ -n "$missing" ]; then
  echo "installing from $WHEELS: $missing"
  # shellcheck disable=SC2086  # one argument per package
  "$PY" -m pip install --no-index --find-links "$WHEELS" $missing
fi

check_limit=$(left)
if [ "$check_limit" -gt 540 ]; then check_limit=540; fi
status=0
timeout --kill-after=10 "$check_limit" "$PY" benchmarks/gpu_check.py --out "$OUT" || status=$?
echo "gpu_check.py exit status: $status (results in $OUT/gpu_check.md)"

mapfile -t gpu_tests < <(grep -rl "pytest.mark.gpu" tests --include='test_*.py')
test_status=0
timeout --kill-after=10 "$(left)" "$PY" -m pytest -m gpu -q -p no:cacheprovider "${gpu_tests[@]}" \
  || test_status=$?
echo "pytest -m gpu exit status: $test_status"
if [ "$status" -eq 0 ]; then status=$test_status; fi
exit "$status"
