#!/usr/bin/env bash
# GPU smoke run: serve a small model with vLLM through `evalpkg run --worker vllm` over the first 20
# tasks (both languages: 40 dialogues), then print the served model's identity and the throughput of
# the execute stage (dialogues, model calls and tokens per second) and the worker's start time.
# Needs a GPU, vLLM (`.venv/bin/pip install vllm`) and a synced eval DB (scripts/demo, or
# `evalpkg up && evalpkg prod generate && evalpkg sync && evalpkg testset build`). Logs to MLflow when
# TRACK=1 and `evalpkg up` runs it; extra arguments go to `evalpkg run`.
#
#   benchmarks/gpu_smoke.sh /models/Qwen2.5-1.5B-Instruct [--concurrency 32 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: benchmarks/gpu_smoke.sh MODEL_DIR_OR_NAME [evalpkg run options]}
shift
export PATH="$PWD/.venv/bin:$PATH"
command -v vllm >/dev/null || { echo "gpu_smoke: no vllm on PATH (.venv/bin/pip install vllm)" >&2; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
track=(--no-track)
[ "${TRACK:-0}" = 1 ] && track=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
started=$(date +%s)
evalpkg run --name gpu-smoke --worker vllm --model-path "$model" --limit 20 --concurrency 16 "${track[@]}" "$@" 2>&1 |
    tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
run_id=$(sed -n 's/^run \(.*\): planned$/\1/p' "$log" | tail -1)
grep -h "worker up in" "$log" || true
python - "$run_id" "$(($(date +%s) - started))" <<'PY'
import sys
from datetime import datetime

from evalpkg.pipeline import store
from evalpkg.settings import get_settings

run_id, wall = sys.argv[1], float(sys.argv[2])
settings = get_settings()
config, *_ = store.load_run(settings, run_id)
trajectories = store.trajectories(settings, run_id)
t0 = min(datetime.fromisoformat(t.started_at) for t in trajectories)
t1 = max(datetime.fromisoformat(t.ended_at) for t in trajectories)
execute_s = (t1 - t0).total_seconds()
calls = sum(len(t.steps) for t in trajectories)
prompt = sum(s.prompt_tokens for t in trajectories for s in t.steps)
completion = sum(s.completion_tokens for t in trajectories for s in t.steps)
errors = sum(t.stop_reason == "model_error" for t in trajectories)
print(f"\nrun {run_id}: {len(trajectories)} dialogues, {calls} model calls, {errors} model errors")
print(f"execute stage {execute_s:.1f}s (whole command {wall:.1f}s): {len(trajectories) / execute_s:.2f} dialogues/s, "
      f"{calls / execute_s:.2f} model calls/s, {completion / execute_s:.0f} completion tokens/s "
      f"({prompt / execute_s:.0f} prompt tokens/s)")
for shard, identity in sorted(config.served.items()):
    print(f"shard {shard} served:", ", ".join(f"{k}={v}" for k, v in identity.items()))
PY
