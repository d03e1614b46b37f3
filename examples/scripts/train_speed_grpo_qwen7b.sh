#!/usr/bin/env bash
# SPEED with GRPO (Shao et al. 2024, arXiv 2402.03300) on Qwen2.5-Math-7B: each prompt is
# screened with N_init = 4 responses, prompts with a screening pass rate strictly between
# 0 and 1 get N_cont = 20 more, and groups of 24 train with GRPO:
# - group-normalised advantages, (r - mean) / std within the group
#   (--algo.advantage.estimator group_norm);
# - KL to the reference model as a loss, k3 estimator, coefficient 1e-3
#   (--algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 1e-3);
# - GRPO's per-sequence loss average (--actor.loss_agg_mode seq-mean-token-mean: the mean
#   over each response's tokens, then over responses).
#
# Hardware: 1 node x 4 GPUs (80 GB each: A100/H100), 256+ GB host RAM, flash-attn installed.
# Layout (4 GPUs, nothing colocated): 2 vLLM engines (tensor parallel 1, one GPU each,
#   prefix caching on, so a continuation reuses the KV cache of its own screening) and a
#   DeepSpeed ZeRO-3 actor on the other 2 GPUs. Not --train.colocate_all: the SPEED driver
#   keeps screening the next prompts while the actor trains, which needs GPUs of its own,
#   and it does not drive vLLM's sleep mode (--vllm.enable_sleep) that colocation needs.
# Memory per actor GPU (7.6e9 parameters, ZeRO-3 over 2 GPUs): bf16 weights 2 B + bf16
#   gradients 2 B per parameter = 7.6 GB on the GPU; fp32 master weights + Adam m, v
#   (12 B/param = 46 GB per GPU, 91 GB in all) on the host (--ds.adam_offload). Without
#   the offload it is 16 B/param = 61 GB per GPU before activations and gathered layers,
#   too close to 80 GB; ADAM_OFFLOAD=0 tries it. The reference model shares the actor's
#   GPUs (--train.colocate_actor_ref): bf16 ZeRO-3 over 2 GPUs, 7.6 GB more per GPU.
#   vLLM: 15 GB of weights, the rest of --vllm.gpu_memory_utilization 0.9 is KV cache
#   (~55 GB, ~1M tokens per engine).
#
# Paper settings: 16 prompts per training step (--rollout.batch_size), 64 prompts in flight
#   for screening (--speed.max_inflight_prompts), 4 + 20 responses per prompt, temperature
#   1.0, responses up to 3072 tokens (prompt + response <= 4096, the model's context), lr
#   1e-6 constant after 10 warmup optimizer steps, weight decay 0.1, bf16. One training
#   step = 16 x 24 = 384 samples = one optimizer step (--train.batch_size 384).
#
# Inputs (environment):
#   MODEL_PATH  local folder of Qwen/Qwen2.5-Math-7B (required)
#   DATA_PATH   training prompts, a jsonl file with "prompt" (chat messages or text) and
#               "answer" keys (required; INPUT_KEY / LABEL_KEY for other names), e.g.
#               openrlhf-speed prepare-data --source deepscaler --input deepscaler.json --out data/deepscaler
#               then DATA_PATH=data/deepscaler/train.jsonl
#   EVAL_PATH   optional held-out jsonl (same keys), evaluated every EVAL_STEPS (10) steps,
#               e.g. openrlhf-speed prepare-data --source math500 --input test.jsonl --out data/math500
#               then EVAL_PATH=data/math500/test.jsonl
#   OUT (runs/speed_grpo_qwen7b), VENV (.venv), SAVE_STEPS (20), EPISODES (1: passes over
#   DATA_PATH; set it here rather than --train.num_episodes, the warmup is computed from it),
#   WARMUP_STEPS (10), ADAM_OFFLOAD (1)
# Extra flags are passed through: bash train_speed_grpo_qwen7b.sh --train.max_steps 200
# Resume a run: the same command with --ckpt.load_enable.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/recipe_lib.sh
VENV=${VENV:-.venv}
need_path MODEL_PATH config_dir "download Qwen/Qwen2.5-Math-7B where you have network (huggingface-cli download Qwen/Qwen2.5-Math-7B --local-dir DIR) and point MODEL_PATH at the local folder"
need_path DATA_PATH file "point DATA_PATH at a jsonl file of math prompts with \"prompt\" and \"answer\" keys (openrlhf-speed prepare-data writes one)"
OUT=$(realpath -m "${OUT:-runs/speed_grpo_qwen7b}")  # absolute: Ray workers do not share our cwd
mkdir -p "$OUT"

B=16 N=24 N_INIT=4
TRAIN_BATCH=$((B * N))
EPISODES=${EPISODES:-1}
WARMUP_RATIO=$(warmup_ratio "${WARMUP_STEPS:-10}" "$(count_rows "$DATA_PATH")" "$N" "$TRAIN_BATCH" "$EPISODES" 1)

ARGS=(
  --actor.model_name_or_path "$(realpath "$MODEL_PATH")"
  --data.prompt_dataset "$(realpath "$DATA_PATH")"
  --data.input_key "${INPUT_KEY:-prompt}" --data.label_key "${LABEL_KEY:-answer}" --data.apply_chat_template
  # resources: 2 vLLM engines + 2 actor GPUs
  --actor.num_nodes 1 --actor.num_gpus_per_node 2
  --vllm.num_engines 2 --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.9
  --vllm.enable_prefix_caching
  # algorithm
  --algo.advantage.estimator group_norm
  --algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 1e-3
  --actor.loss_agg_mode seq-mean-token-mean
  --ref.num_nodes 1 --ref.num_gpus_per_node 2 --train.colocate_actor_ref
  --speed.strategy speed --speed.n_init "$N_INIT" --speed.max_inflight_prompts 64
  --rollout.batch_size "$B" --rollout.n_samples_per_prompt "$N"
  --rollout.max_new_tokens 3072 --data.max_len 4096 --rollout.temperature 1.0
  --train.num_episodes "$EPISODES" --train.max_epochs 1
  # optimizer
  --train.batch_size "$TRAIN_BATCH" --train.micro_batch_size 2 --rollout.micro_batch_size 4
  --actor.adam.lr 1e-6 --actor.adam.weight_decay 0.1
  --actor.lr_scheduler constant_with_warmup --actor.lr_warmup_ratio "$WARMUP_RATIO"
  # DeepSpeed
  --ds.zero_stage 3 --ds.param_dtype bf16 --ds.attn_implementation flash_attention_2 --ds.packing_samples
  --actor.gradient_checkpointing_enable
  # outputs
  --ckpt.path "$OUT/ckpt" --ckpt.save_steps "${SAVE_STEPS:-20}" --ckpt.max_num 2 --ckpt.output_dir "$OUT/final"
  --logger.tensorboard_dir "$OUT/tensorboard" --speed.trace_path "$OUT/trace.jsonl"
)
if [[ ${ADAM_OFFLOAD:-1} != 0 ]]; then ARGS+=(--ds.adam_offload); fi
if [[ -n ${EVAL_PATH:-} ]]; then
  need_path EVAL_PATH file "point EVAL_PATH at a held-out jsonl file with the training data's keys, or unset it"
  ARGS+=(--eval.dataset "$(realpath "$EVAL_PATH")" --eval.steps "${EVAL_STEPS:-10}")
fi

exec "$VENV/bin/openrlhf-speed" train "${ARGS[@]}" "$@"
