#!/usr/bin/env bash
# SPEED-RLOO on Qwen2.5-Math-7B with the SPEED paper's settings (Zhang et al. 2025, arXiv
# 2506.09016): each prompt is screened with N_init = 4 responses; only prompts whose
# screening pass rate is strictly between 0 and 1 get N_cont = 20 more, and train as groups
# of 24 with the RLOO estimator.
#
# Hardware: 1 node x 4 GPUs (80 GB each: A100/H100), 256+ GB host RAM, flash-attn installed
#   (optional: without it, no packing and sdpa attention, see PACKING).
# Layout (4 GPUs, nothing colocated): 2 vLLM engines (tensor parallel 1, one GPU each,
#   prefix caching on, so a continuation reuses the KV cache of its own screening) and a
#   DeepSpeed ZeRO-3 actor on the other 2 GPUs. Not --train.colocate_all: the SPEED driver
#   keeps screening the next prompts while the actor trains, which needs GPUs of its own,
#   and it does not drive vLLM's sleep mode (--vllm.enable_sleep) that colocation needs.
# Memory per actor GPU (7.6e9 parameters, ZeRO-3 over 2 GPUs): bf16 weights 2 B + bf16
#   gradients 2 B per parameter = 7.6 GB on the GPU; fp32 master weights + Adam m, v
#   (12 B/param = 46 GB per GPU, 91 GB in all) on the host (--ds.adam_offload). Without
#   the offload it is 16 B/param = 61 GB per GPU before activations and gathered layers,
#   too close to 80 GB; ADAM_OFFLOAD=0 tries it. vLLM: 15 GB of weights, the rest of
#   --vllm.gpu_memory_utilization 0.9 is KV cache (~55 GB, ~1M tokens per engine).
#
# Paper settings: 16 prompts per training step (--rollout.batch_size), 64 prompts in flight
#   for screening (--speed.max_inflight_prompts), 4 + 20 responses per prompt, temperature
#   1.0, responses up to 3072 tokens (prompt + response <= 4096, the model's context), lr
#   1e-6 constant after 10 warmup optimizer steps, weight decay 0.1, no KL term (so no
#   reference model), bf16. One training step = 16 x 24 = 384 samples = one optimizer step
#   (--train.batch_size 384).
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
#   OUT (runs/speed_rloo_qwen7b), VENV (.venv-gpu if present, else .venv), SAVE_STEPS (20), EPISODES (1: passes over
#   DATA_PATH; set it here rather than --train.num_episodes, the warmup is computed from it),
#   WARMUP_STEPS (10), ADAM_OFFLOAD (1),
#   PACKING (auto: packed samples when flash_attn imports; 0 never, 1 always)
# Extra flags are passed through: bash train_speed_rloo_qwen7b.sh --train.max_steps 200
# Resume a run: the same command with --ckpt.load_enable.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/recipe_lib.sh
VENV=${VENV:-$(default_gpu_venv)}
qwen_common_args ARGS Qwen/Qwen2.5-Math-7B runs/speed_rloo_qwen7b  # inputs, OUT, B N N_INIT, the shared flags
qwen7b_deepspeed_args ARGS  # 2 vLLM engines + a DeepSpeed ZeRO-3 actor on 2 GPUs
ARGS+=(
  # algorithm: RLOO, no KL term (no reference model)
  --algo.advantage.estimator rloo --algo.kl.init_coef 0
  # curriculum: SPEED screening
  --speed.strategy speed --speed.n_init "$N_INIT" --speed.max_inflight_prompts 64
)

exec "$VENV/bin/openrlhf-speed" train "${ARGS[@]}" "$@"
