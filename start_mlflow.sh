#!/usr/bin/env bash
# Start a local MLflow tracking server in the background and wait until it answers.
#
#   ./start_mlflow.sh            start (no-op when a server already answers on PORT)
#   ./start_mlflow.sh stop       stop the server started from this folder (its whole process group)
#   DRY_RUN=1 ./start_mlflow.sh  print the command only
#
# Environment (defaults in brackets):
#   BACKEND_STORE_URI  [sqlite:///$PWD/mlflow.db]   e.g. postgresql://user:pw@host:5432/mlflow
#   ARTIFACT_ROOT      [file://$PWD/mlartifacts]    where the server stores artifacts; clients
#                                                   upload through the server (--serve-artifacts)
#   HOST [127.0.0.1]  PORT [5000]  WORKERS [1]  STARTUP_TIMEOUT [90 s]
#   LOG_FILE [$PWD/mlflow_server.log]  PID_FILE [$PWD/mlflow_server.pid]
set -euo pipefail

HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-5000}"
WORKERS="${WORKERS:-1}"
BACKEND_STORE_URI="${BACKEND_STORE_URI:-sqlite:///$PWD/mlflow.db}"
ARTIFACT_ROOT="${ARTIFACT_ROOT:-file://$PWD/mlartifacts}"
LOG_FILE="${LOG_FILE:-$PWD/mlflow_server.log}"
PID_FILE="${PID_FILE:-$PWD/mlflow_server.pid}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-90}"
# The job runner is not needed for tracking and costs ~2 GB and several seconds of start-up.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -x "$script_dir/.venv/bin/mlflow" ]]; then
  MLFLOW="$script_dir/.venv/bin/mlflow"
  PYTHON="$script_dir/.venv/bin/python"
else
  MLFLOW="mlflow"
  PYTHON="$(command -v python3 || command -v python)"
fi
# A server bound to all interfaces is still checked on loopback.
check_host="$HOST"
[[ "$HOST" == "0.0.0.0" || "$HOST" == "::" ]] && check_host="127.0.0.1"
health_url="http://$check_host:$PORT/health"

healthy() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 2 "$health_url" >/dev/null 2>&1
  else
    "$PYTHON" -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)" \
      "$health_url" >/dev/null 2>&1
  fi
}

if [[ "${1:-}" == "stop" ]]; then
  if [[ -f "$PID_FILE" ]]; then
    pid="$(cat "$PID_FILE")"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    echo "start_mlflow: stopped the server (process group $pid)"
  else
    echo "start_mlflow: no $PID_FILE, nothing to stop"
  fi
  exit 0
fi

cmd=("$MLFLOW" server
  --backend-store-uri "$BACKEND_STORE_URI"
  --serve-artifacts --artifacts-destination "$ARTIFACT_ROOT"
  --host "$HOST" --port "$PORT" --workers "$WORKERS")

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  line="$(printf '%q ' "${cmd[@]}")"
echo "+ ${line% }"
  exit 0
fi

if healthy; then
  echo "start_mlflow: a server already answers on $health_url; nothing to do"
  exit 0
fi

if [[ "$BACKEND_STORE_URI" == sqlite:///* ]]; then
  mkdir -p "$(dirname "${BACKEND_STORE_URI#sqlite:///}")"
fi
if [[ "$ARTIFACT_ROOT" == file://* ]]; then
  mkdir -p "${ARTIFACT_ROOT#file://}"
fi

line="$(printf '%q ' "${cmd[@]}")"
echo "+ ${line% }"
# setsid: own process group, so `stop` ends the uvicorn workers too.
setsid nohup "${cmd[@]}" >>"$LOG_FILE" 2>&1 </dev/null &
server_pid=$!
echo "$server_pid" >"$PID_FILE"

deadline=$((SECONDS + STARTUP_TIMEOUT))
until healthy; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "start_mlflow: the server exited during start-up; last lines of $LOG_FILE:" >&2
    tail -n 20 "$LOG_FILE" >&2
    rm -f "$PID_FILE"
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    echo "start_mlflow: no answer on $health_url after ${STARTUP_TIMEOUT}s (pid $server_pid," \
      "log $LOG_FILE); raise STARTUP_TIMEOUT or check the log" >&2
    exit 1
  fi
  sleep 1
done
echo "start_mlflow: MLflow UI and tracking URI: http://$check_host:$PORT (pid $server_pid, log $LOG_FILE)"
