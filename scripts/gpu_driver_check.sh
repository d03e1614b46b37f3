#!/usr/bin/env bash
# The SPEED driver over a real vLLM engine on one lent GPU, as one prepared script: the
# carried packages installed, vLLM's names checked, the driver against raw vLLM on the same
# requests (bench --mode proving-ci --driver_only), a few SPEED steps with the weight sync
# into the engine timed and the actor beside it on one device, then the memory plan's check.
#
# For a lent machine with torch 2.11 + CUDA 13 and Python 3.12 but no vLLM, Ray or DeepSpeed,
# reaching no index: scripts/gpu_carry.py builds the packages (vLLM 0.26.0 cut down, Ray
# without extras, the small dependencies) where pip reaches an index, as .carry/part-NN
# folders (git-ignored); each device call carries one and runs `python3 scripts/gpu_carry.py
# receive`, the last one runs this script. Where a venv has it all (make setup-gpu), VENV=.venv-gpu
# skips the carry.
#
#   bash scripts/gpu_driver_check.sh                 # every step; OUT (default $OUT or /tmp/gpu_driver_check)
#   STEPS='driver sync' bash scripts/gpu_driver_check.sh   # some of: driver sync memplan
# Settings: UTIL (0.4: --vllm.gpu_memory_utilization, the rest of the GPU for the actor),
# SYNC_STEPS (3), CASES (gpu_memory_plan_check.sh's pytest -k selection), CHECK_TIMEOUT.
# Results in $OUT: device.txt, steps.tsv (step, exit status, seconds), <step>.log, gpu_mem.csv
# (MiB used, every 0.5 s), driver/driver.json, sync/metrics.jsonl, memplan/table.md, summary.txt.
# Steps that fail are recorded and the later ones still run, except after a failed install or
# name check. One 10-minute call holds install, names, driver and sync; memplan (about 8
# minutes with its op builds) wants a call of its own.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_driver_check}
mkdir -p "$OUT"
STEPS=${STEPS:-driver sync memplan} UTIL=${UTIL:-0.4} SYNC_STEPS=${SYNC_STEPS:-3}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions} PYTHONUNBUFFERED=1
# One GPU: the engine and the actor share it (the engine keeps UTIL of it); the proving model
# is float32 (bench's own flags), which FlashAttention does not take, and flash-attn is absent.
FLAGS=(--train.colocate_all --vllm.gpu_memory_utilization "$UTIL" --ds.attn_implementation sdpa)

# run NAME COMMAND...: COMMAND's output in $OUT/NAME.log, its status and seconds in steps.tsv.
run() {
  local name=$1 start=$SECONDS rc
  shift
  echo "== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >>"$OUT/steps.tsv"
  tail -n 4 "$OUT/$name.log"
  return $rc
}
wants() { [[ " $STEPS " == *" $1 "* ]]; }

if [[ -n ${VENV:-} ]]; then
  PY=$VENV/bin/python
else
  PY=${PYTHON:-python3} SITE=${SITE:-/tmp/site}
  $PY scripts/gpu_carry.py receive || exit 1  # the last part may come with this call
  run install $PY scripts/gpu_carry.py install --site "$SITE" || exit 1
  export PYTHONPATH=$SITE
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u +%F
  $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"; } >"$OUT/device.txt" 2>&1
run names $PY scripts/vllm_api_check.py || exit 1
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$OUT/gpu_mem.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

if wants driver; then
  run driver $PY -m openrlhf_speed.cli.main bench --mode proving-ci --driver_only --out "$OUT/driver" -- "${FLAGS[@]}"
fi
if wants sync; then  # SPEED steps that train: each step line times weight_sync and train
  read -r TRAIN _ < <($PY -c "from openrlhf_speed import proving; print(*proving.data_paths('proving-ci'))")
  run sync $PY -m openrlhf_speed.cli.main train --actor.model_name_or_path proving-ci \
    --actor.num_nodes 1 --actor.num_gpus_per_node 1 --vllm.num_engines 1 --vllm.enforce_eager \
    --algo.advantage.estimator rloo --algo.kl.init_coef 0 --rollout.batch_size 4 --rollout.n_samples_per_prompt 4 \
    --speed.strategy speed --speed.n_init 2 --rollout.micro_batch_size 16 --train.batch_size 16 \
    --train.micro_batch_size 8 --train.max_steps "$SYNC_STEPS" --train.num_episodes 10 --rollout.max_new_tokens 32 \
    --data.max_len 544 --actor.adam.lr 1e-4 --data.prompt_dataset "$TRAIN" --data.input_key prompt \
    --data.label_key answer --data.apply_chat_template --ckpt.path "$OUT/sync/ckpt" --ckpt.save_steps 1000000000 \
    --log.jsonl "$OUT/sync/metrics.jsonl" --ds.param_dtype fp32 --vllm.dtype float32 "${FLAGS[@]}"
fi
if wants memplan; then
  run memplan env OUT="$OUT/memplan" SITE="${SITE:-}" PYTHON="$PY" bash scripts/gpu_memory_plan_check.sh
fi

kill $SMI 2>/dev/null
{
  cat "$OUT/device.txt"
  column -t "$OUT/steps.tsv"
  [[ -f $OUT/driver/driver.json ]] && echo "driver: $(tr -d '\n' <"$OUT/driver/driver.json" | head -c 600)"
  grep -h "\[openrlhf-speed\] step " "$OUT/sync.log" 2>/dev/null
  sort -n "$OUT/gpu_mem.csv" 2>/dev/null | tail -n 1 | sed 's/^/peak MiB used (nvidia-smi): /'
  cat "$OUT/memplan/table.md" 2>/dev/null
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
