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
# Hardware: 1 node x 8 GPUs (A100/H100 80GB), a host of 256 GiB (216.5 GiB planned there,
#   most of it the offloaded optimizer states, see ADAM_OFFLOAD), flash-attn installed (optional:
#   without it, no packing and sdpa attention, see PACKING). Other sizes: GPUS_PER_NODE, NNODES.
# Layout (GPUS_PER_NODE x NNODES GPUs, 8 x 1 by default, nothing colocated; recipe_lib.sh's
#   qwen7b_layout): a DeepSpeed ZeRO-3 actor on half of them (ACTOR_GPUS: 4) and vLLM
#   engines of VLLM_TP GPUs on the rest (4 engines, tensor parallel 1, prefix caching on, so
#   a continuation reuses the KV cache of its own screening). GPUS_PER_NODE=4 gives 2 + 2
#   engines; NNODES=2 (a Ray cluster, RAY_ADDRESS) the actor on one whole node and 8 engines
#   on the other. Not --train.colocate_all: the SPEED driver keeps screening the next prompts
#   while the actor trains (--speed.feed_during_training on; the engines' queue bounded at
#   2 x 16 x 24 = 768 responses, --speed.max_inflight_responses), which needs GPUs of their own,
#   and it does not drive vLLM's sleep mode (--vllm.enable_sleep) that colocation needs.
# Memory, as the dry run's plan prints it (`bash SCRIPT --dry_run`; 7.62e9 parameters, ZeRO-3
#   over 4 actor GPUs of 79.2 GiB): per actor GPU 5.6 GiB of model states (DeepSpeed's own
#   estimate: bf16 weights and gradients, the largest layer gathered) + ~17.5 GiB of activations
#   at the log-prob forward (~15.5 GiB training) + ~3.0 GiB runtime. On the host
#   (--ds.adam_offload, DeepSpeed's cpu_adam) 170.2 GiB of fp32 weights, gradients and Adam m, v
#   (16 B per parameter x DeepSpeed's 1.5 buffer factor), 216.5 GiB on the node with the HF
#   export (14.2 GiB) and 8 GPU processes (~32.0 GiB). Without the offload (ADAM_OFFLOAD=0,
#   fused_adam) the states stay on the actor's GPUs: it fits from 4 of them on (the plan refuses
#   ACTOR_GPUS=2 and names the fix) and spares the host RAM and the CPU Adam step. The
#   reference model shares the actor's GPUs (--train.colocate_actor_ref): its bf16 ZeRO-3 shard
#   (2 B per parameter / 4 GPUs) and a process of its own come on top, both in the plan.
#   vLLM per engine: 14.2 GiB of weights and, of --vllm.gpu_memory_utilization 0.9, 55.1 GiB of
#   KV cache (1.03M tokens).
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
#   OUT (runs/speed_grpo_qwen7b), VENV (.venv-gpu if present, else .venv), SAVE_STEPS (20), EPISODES (1: passes over
#   DATA_PATH; set it here rather than --train.num_episodes, the warmup is computed from it),
#   WARMUP_STEPS (10), ADAM_OFFLOAD (1),
#   PACKING (auto: packed samples when flash_attn imports; 0 never, 1 always),
#   GPUS_PER_NODE (8), NNODES (1), ACTOR_GPUS (half of them), VLLM_TP (1): the layout above
# Extra flags are passed through: bash train_speed_grpo_qwen7b.sh --train.max_steps 200
# Resume a run: the same command with --ckpt.load_enable.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/recipe_lib.sh
VENV=${VENV:-$(default_gpu_venv)}
qwen_common_args ARGS Qwen/Qwen2.5-Math-7B runs/speed_grpo_qwen7b  # inputs, OUT, B N N_INIT, the shared flags
qwen7b_deepspeed_args ARGS  # the layout (GPUS_PER_NODE, NNODES: 4 vLLM engines + a ZeRO-3 actor on 4 GPUs)
ARGS+=(
  # algorithm: GRPO (group-normalised advantages, k3 KL loss, per-sequence loss average),
  # the reference model on the actor's GPUs
  --algo.advantage.estimator group_norm
  --algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 1e-3
  --actor.loss_agg_mode seq-mean-token-mean
)
qwen7b_ref_args ARGS  # the reference model on the actor's GPUs
speed_screening_args ARGS  # curriculum: SPEED screening (64 prompts in flight, engines fed during training)

exec "$VENV/bin/openrlhf-speed" train "${ARGS[@]}" "$@"
