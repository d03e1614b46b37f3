#!/usr/bin/env bash
# SPEED-RLOO on Qwen2.5-32B across 4 nodes, on a Ray cluster that is already running: the
# settings of train_speed_rloo_qwen7b.sh (the SPEED paper's, which trained 1.5B and 7B
# models; not tuned for 32B), with a Megatron-Core actor (--backend megatron): tensor
# parallel 8 x pipeline parallel 2 over 16 GPUs.
#
# Hardware: 4 nodes x 8 GPUs (80 GB each: A100/H100), NVLink within a node, InfiniBand or
#   RoCE between nodes, Transformer Engine installed (Megatron's fused attention; optional:
#   without it Megatron's local layer spec, with a note), a filesystem every node mounts
#   at the same path holding this repository and its venv (make setup-gpu: .venv-gpu),
#   MODEL_PATH, DATA_PATH and OUT (the actor ranks on every node read the model and write
#   their checkpoint shards there).
# Layout (32 GPUs, nothing colocated):
#   actor: Megatron-Core on 2 nodes x 8 GPUs (--actor.num_nodes 2 --actor.num_gpus_per_node 8)
#     = tensor parallel 8 (--megatron.tp 8: within a node, over NVLink; 8 divides the 40
#       attention heads and the 8 KV heads)
#     x pipeline parallel 2 (--megatron.pp 2: 32 layers per stage, one stage per node)
#     x data parallel 16 / (8 x 2) = 1: one model replica; a training step's 384 samples run
#       through it as 384 micro batches of 1 (--train.micro_batch_size 1), one optimizer step.
#   vLLM:  4 engines x tensor parallel 4 = 16 GPUs (the other 2 nodes; each engine on one node)
#   The SPEED driver keeps screening the next prompts while the actor trains
#   (--speed.feed_during_training on; the engines' queue bounded at 768 responses,
#   --speed.max_inflight_responses), so the two sides need GPUs of their own.
# Parameters (Qwen2.5-32B's config.json: hidden 5120, 64 layers, 40 heads and 8 KV heads of
#   128, intermediate 27648, vocab 152064, untied embeddings, QKV bias):
#   per layer: QKV 5120 x (5120 + 2 x 1024) + 7168 bias = 36.7M, output 5120 x 5120 = 26.2M,
#     MLP (gate, up, down) 3 x 5120 x 27648 = 424.7M, 2 RMSNorms 10k: 487.6M
#   64 layers x 487.6M = 31.21e9, + embedding and LM head 2 x 152064 x 5120 = 1.56e9
#     = 32.76e9 (32.8e9) parameters
#   per actor GPU: a stage is 32 layers + the embedding (first) or the LM head (last)
#     = 16.38e9, split over tp 8: 2.05e9 = 32.8e9 / (tp x pp). 152064 = 8 x 19008, so the
#     vocabulary needs no padding (--megatron.vocab_divisible_by 1).
# Memory per actor GPU, bf16 parameters (--megatron.dtype bf16) with fp32 master weights in
#   a plain AdamW; each micro batch's bf16 gradient is added into an fp32 main_grad (so 384
#   micro batches accumulate in fp32) and freed; no distributed optimizer, so the optimizer
#   state is split over tp x pp only, never over data parallel ranks:
#     bf16 weights 2 B + fp32 main gradients 4 B + fp32 master weights 4 B + Adam m, v 8 B = 18 B
#     18 B x 32.8e9 / (8 x 2) = 36.9 GB (weights 4.1, gradients 8.2, master 8.2, Adam 16.4)
#   + activations, --megatron.recompute full, one micro batch of <= 4096 tokens (1 row,
#     no packing) on each stage at a time:
#       each layer's input: 32 layers x 4096 x 5120 x 2 B = 1.3 GB (whole on every TP rank)
#       + the layer recomputed in the backward, per token 4 x 5120 x 2 B (norm inputs and
#       outputs, whole) + 2 x (7168 + 5120) / 8 B (Q, K, V, attention output) + 6 x 27648 / 8
#       B (gate, up, SwiGLU output) = 65 kB, x 4096 = 0.27 GB (Megatron's local attention,
#       without Transformer Engine, adds 5 heads x 4096^2 x 2 B = 0.17 GB of scores)
#   + fp32 logits on the last stage, the vocab / tp = 19008 columns of this rank:
#       4096 x 19008 x 4 B = 0.31 GB (+ the bf16 output 0.16 GB, the cross entropy's
#       softmax and gradient): ~1 GB
#   = ~40 GB during the backward (+ one layer's transient bf16 gradients, freed as each
#     is added into main_grad). The optimizer step hands main_grad to AdamW as is (no copy);
#     its foreach update takes one fp32 temporary (+8.2 GB): a peak of ~48 GB, + CUDA /
#     NCCL context and fragmentation (~3-5 GB): ~53 GB of 80.
#   Why full recompute: without it the stage would keep every layer's activations,
#     32 x 4096 x 65 kB = 8.5 GB per micro batch (more without Transformer Engine: fp32
#     norm intermediates, 32 x 0.17 GB of attention scores), ~43+ GB during the backward;
#     that fits too, but full recompute (one more forward per layer, as
#     --actor.gradient_checkpointing_enable did for the DeepSpeed actor) keeps the margin
#     whatever the attention path. Selective recompute saves little with Transformer
#     Engine: its fused attention keeps no score matrix. The log-prob forward
#     (--rollout.micro_batch_size 2, no gradients) holds one layer and the logits of
#     2 x 4096 tokens (~2 GB).
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
# OpenRLHF places the actor and the engines on its GPUs; the driver itself needs no GPU: it
# reads the cluster's GPUs (ray.cluster_resources) and sends every worker the GPU settings,
# printing "device: cuda (...)"; OPENRLHF_SPEED_DEVICE=cuda skips that probe.
# Inputs (environment): RAY_ADDRESS, MODEL_PATH (local folder of Qwen/Qwen2.5-32B), DATA_PATH
#   (jsonl with "prompt" and "answer"; INPUT_KEY / LABEL_KEY for other names), EVAL_PATH
#   (optional held-out jsonl, every EVAL_STEPS (10) steps), OUT (runs/speed_rloo_qwen32b),
#   VENV (.venv-gpu if present, else .venv), SAVE_STEPS (20), EPISODES (1), WARMUP_STEPS (10).
# Extra flags are passed through: bash train_speed_rloo_qwen32b_multinode.sh --train.max_steps 200
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/scripts/recipe_lib.sh
VENV=${VENV:-$(default_gpu_venv)}
[[ -n ${RAY_ADDRESS:-} ]] || die "RAY_ADDRESS is not set: start a Ray cluster of 4 nodes x 8 GPUs (sbatch examples/scripts/slurm/train_speed_qwen32b.sbatch does) and set RAY_ADDRESS=HEAD_IP:6379 on its head node"
qwen_common_args ARGS Qwen/Qwen2.5-32B runs/speed_rloo_qwen32b ", on a filesystem every node mounts"
megatron_te_note  # says so when Transformer Engine is missing: Megatron's local layer spec then
ARGS+=(
  # resources: the actor on 2 nodes x 8 GPUs, 4 vLLM engines x TP 4 on the other 2
  --actor.num_nodes 2 --actor.num_gpus_per_node 8
  --vllm.num_engines 4 --vllm.tensor_parallel_size 4
  # Megatron-Core actor: TP 8 x PP 2 = 16 GPUs, DP 1; bf16 with fp32 master weights
  --backend megatron --megatron.tp 8 --megatron.pp 2 --megatron.dtype bf16 --megatron.recompute full
  --train.micro_batch_size 1 --rollout.micro_batch_size 2
  # algorithm: RLOO, no KL term (no reference model)
  --algo.advantage.estimator rloo --algo.kl.init_coef 0
)
speed_screening_args ARGS  # curriculum: SPEED screening (64 prompts in flight, engines fed during training)

exec "$VENV/bin/openrlhf-speed" train "${ARGS[@]}" "$@"
