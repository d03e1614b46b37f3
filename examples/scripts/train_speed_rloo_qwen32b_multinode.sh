#!/usr/bin/env bash
# SPEED-RLOO on Qwen2.5-32B across 4 nodes, on a Ray cluster that is already running: the
# settings of train_speed_rloo_qwen7b.sh (the SPEED paper's, which trained 1.5B and 7B
# models; not tuned for 32B), with DeepSpeed ZeRO-3 over 16 GPUs.
#
# Hardware: 4 nodes x 8 GPUs (80 GB each: A100/H100), InfiniBand or RoCE between nodes,
#   flash-attn installed, a filesystem every node mounts at the same path holding this
#   repository and its .venv, MODEL_PATH, DATA_PATH and OUT (the actor ranks on every node
#   read the model and write their checkpoint shards there).
# Layout (32 GPUs, nothing colocated):
#   actor: DeepSpeed ZeRO-3 on 2 nodes x 8 GPUs (--actor.num_nodes 2 --actor.num_gpus_per_node 8)
#   vLLM:  4 engines x tensor parallel 4 = 16 GPUs (the other 2 nodes; each engine on one node)
#   The SPEED driver keeps screening the next prompts while the actor trains, so the two
#   sides need GPUs of their own.
# Memory (Qwen2.5-32B: 32.8e9 parameters, 64 layers, hidden 5120, 8 KV heads, vocab 152k):
#   actor, ZeRO-3 partitions everything over the 16 actor GPUs, per parameter
#     bf16 weights 2 B + bf16 gradients 2 B + fp32 master weights 4 B + Adam m, v 8 B = 16 B
#     16 B x 32.8e9 / 16 GPUs = 32.8 GB per GPU (weights 4.1, gradients 4.1, master 8.2, Adam 16.4)
#   + one gathered layer and the prefetch bucket (~1-2 GB), activations with gradient
#     checkpointing at <= 4096 tokens per micro batch (64 x 4096 x 5120 x 2 B = 2.7 GB) and
#     the fp32 logits (4096 x 152064 x 4 B = 2.5 GB): about 40-45 GB of 80, no offload needed.
#   vLLM, tensor parallel 4: 65.5 GB of bf16 weights / 4 = 16.4 GB per GPU; of
#     --vllm.gpu_memory_utilization 0.9 the rest (~55 GB per GPU) is KV cache at
#     64 layers x 8 heads x 128 x 2 (K, V) x 2 B = 262 kB per token / 4 GPUs: ~0.8M tokens
#     per engine, ~200 sequences of 4096 tokens.
#
# Settings: 16 prompts per training step, 64 prompts in flight for screening, N_init 4 +
#   N_cont 20 responses per prompt, RLOO, no KL (no reference model), temperature 1.0,
#   responses up to 3072 tokens (prompt + response <= 4096), lr 1e-6 constant after 10
#   warmup optimizer steps, weight decay 0.1, bf16. One training step = 384 samples = one
#   optimizer step.
#
# Running: start the cluster (slurm/train_speed_qwen32b.sbatch does it and then calls this
# script), or on a cluster you started yourself, on its head node:
#   RAY_ADDRESS=HEAD_IP:6379 MODEL_PATH=/shared/Qwen2.5-32B DATA_PATH=/shared/data/train.jsonl \
#     bash examples/scripts/train_speed_rloo_qwen32b_multinode.sh
# openrlhf-speed connects to the cluster named by RAY_ADDRESS (ray.init reads it) and
# OpenRLHF places the actor and the engines on its GPUs; the driver itself needs no GPU.
# Inputs (environment): RAY_ADDRESS, MODEL_PATH (local folder of Qwen/Qwen2.5-32B), DATA_PATH
#   (jsonl with "prompt" and "answer"; INPUT_KEY / LABEL_KEY for other names), EVAL_PATH
#   (optional held-out jsonl, every EVAL_STEPS (10) steps), OUT (runs/speed_rloo_qwen32b),
#   VENV (.venv), SAVE_STEPS (20), EPISODES (1), WARMUP_STEPS (10).
# Extra flags are passed through: bash train_speed_rloo_qwen32b_multinode.sh --train.max_steps 200
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/recipe_lib.sh
VENV=${VENV:-.venv}
[[ -n ${RAY_ADDRESS:-} ]] || die "RAY_ADDRESS is not set: start a Ray cluster of 4 nodes x 8 GPUs (sbatch examples/scripts/slurm/train_speed_qwen32b.sbatch does) and set RAY_ADDRESS=HEAD_IP:6379 on its head node"
need_path MODEL_PATH config_dir "download Qwen/Qwen2.5-32B where you have network (huggingface-cli download Qwen/Qwen2.5-32B --local-dir DIR) and point MODEL_PATH at the local folder, on a filesystem every node mounts"
need_path DATA_PATH file "point DATA_PATH at a jsonl file of math prompts with \"prompt\" and \"answer\" keys (openrlhf-speed prepare-data writes one), on a filesystem every node mounts"
OUT=$(realpath -m "${OUT:-runs/speed_rloo_qwen32b}")  # absolute: the Ray workers run on other nodes
mkdir -p "$OUT"

B=16 N=24 N_INIT=4
TRAIN_BATCH=$((B * N))
EPISODES=${EPISODES:-1}
WARMUP_RATIO=$(warmup_ratio "${WARMUP_STEPS:-10}" "$(count_rows "$DATA_PATH")" "$N" "$TRAIN_BATCH" "$EPISODES" 1)

ARGS=(
  --actor.model_name_or_path "$(realpath "$MODEL_PATH")"
  --data.prompt_dataset "$(realpath "$DATA_PATH")"
  --data.input_key "${INPUT_KEY:-prompt}" --data.label_key "${LABEL_KEY:-answer}" --data.apply_chat_template
  # resources: actor on 2 nodes x 8 GPUs, 4 vLLM engines x TP 4
  --actor.num_nodes 2 --actor.num_gpus_per_node 8
  --vllm.num_engines 4 --vllm.tensor_parallel_size 4 --vllm.gpu_memory_utilization 0.9
  --vllm.enable_prefix_caching
  # algorithm
  --algo.advantage.estimator rloo --algo.kl.init_coef 0
  --speed.strategy speed --speed.n_init "$N_INIT" --speed.max_inflight_prompts 64
  --rollout.batch_size "$B" --rollout.n_samples_per_prompt "$N"
  --rollout.max_new_tokens 3072 --data.max_len 4096 --rollout.temperature 1.0
  --train.num_episodes "$EPISODES" --train.max_epochs 1
  # optimizer
  --train.batch_size "$TRAIN_BATCH" --train.micro_batch_size 1 --rollout.micro_batch_size 2
  --actor.adam.lr 1e-6 --actor.adam.weight_decay 0.1
  --actor.lr_scheduler constant_with_warmup --actor.lr_warmup_ratio "$WARMUP_RATIO"
  # DeepSpeed
  --ds.zero_stage 3 --ds.param_dtype bf16 --ds.attn_implementation flash_attention_2 --ds.packing_samples
  --actor.gradient_checkpointing_enable
  # outputs
  --ckpt.path "$OUT/ckpt" --ckpt.save_steps "${SAVE_STEPS:-20}" --ckpt.max_num 2 --ckpt.output_dir "$OUT/final"
  --logger.tensorboard_dir "$OUT/tensorboard" --speed.trace_path "$OUT/trace.jsonl"
)
if [[ -n ${EVAL_PATH:-} ]]; then
  need_path EVAL_PATH file "point EVAL_PATH at a held-out jsonl file with the training data's keys, or unset it"
  ARGS+=(--eval.dataset "$(realpath "$EVAL_PATH")" --eval.steps "${EVAL_STEPS:-10}")
fi

exec "$VENV/bin/openrlhf-speed" train "${ARGS[@]}" "$@"
