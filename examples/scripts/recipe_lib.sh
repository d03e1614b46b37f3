# Shared by the GPU recipes (train_*_qwen*.sh); sourced, not run. What every recipe needs
# and gets wrong by hand: failing early, with what to do, when an input is missing; turning
# "N warmup steps" into OpenRLHF's --actor.lr_warmup_ratio; and the arguments the Qwen
# recipes have in common (qwen_common_args, qwen7b_deepspeed_args, at the end), so that each
# recipe lists only what makes it different.

die() {
  echo "$(basename "$0"): error: $*" >&2
  exit 1
}

# need_path VAR KIND HINT: $VAR must be set and name an existing KIND (file | dir | config_dir).
need_path() {
  local var=$1 kind=$2 hint=$3 value=${!1:-}
  [[ -n $value ]] || die "$var is not set: $hint"
  case $kind in
    file) [[ -f $value ]] || die "$var=$value is not a file: $hint" ;;
    dir) [[ -d $value ]] || die "$var=$value is not a directory: $hint" ;;
    config_dir) [[ -f $value/config.json ]] || die "$var=$value is not a Hugging Face model folder (no config.json): $hint" ;;
  esac
}

note() {
  echo "$(basename "$0"): note: $*" >&2
}

# default_gpu_venv: the GPU recipes' venv when VENV is unset: .venv-gpu (make setup-gpu)
# where it exists, else .venv.
default_gpu_venv() {
  if [[ -x .venv-gpu/bin/python ]]; then echo .venv-gpu; else echo .venv; fi
}

# py_imports MODULE: whether $VENV's Python imports MODULE. A real import, not a lookup: a
# build that is installed but does not load (ABI, CUDA mismatch) counts as missing.
py_imports() {
  "${VENV:-.venv}/bin/python" -c "import $1" >/dev/null 2>&1
}

# megatron_te_note: Megatron's actor uses Transformer Engine's layer spec where
# transformer_engine.pytorch imports, its local spec otherwise; say which is off.
megatron_te_note() {
  py_imports transformer_engine.pytorch || note "transformer_engine is not importable in ${VENV:-.venv} on this \
node: the Megatron actor uses Megatron's local layer spec (no fused attention: slower, more activation memory); \
install it with make setup-gpu TE=1"
}

# count_rows FILE: non-blank lines of a jsonl file (the rows OpenRLHF's dataset will hold).
count_rows() {
  grep -c '[^[:space:]]' "$1" || true
}

# warmup_ratio STEPS ROWS N TRAIN_BATCH EPISODES MAX_EPOCHS
# OpenRLHF 0.11.2 has no warmup-steps flag: it warms up for ceil(S * ratio) optimizer steps,
# S = ROWS * N // TRAIN_BATCH * EPISODES * MAX_EPOCHS (ppo_trainer.prepare_datasets). The
# ratio (STEPS - 0.5) / S makes that ceil exactly STEPS; when S <= STEPS every step warms up.
warmup_ratio() {
  awk -v w="$1" -v rows="$2" -v n="$3" -v tb="$4" -v ep="$5" -v me="$6" 'BEGIN {
    s = int(rows * n / tb) * ep * me
    if (w <= 0) { print 0; exit }
    if (s <= w) { print 1; exit }
    printf "%.10g\n", (w - 0.5) / s
  }'
}

# -- the Qwen GPU recipes (train_*_qwen*.sh) -------------------------------------------------
# They share the SPEED paper's data, rollout and optimizer settings and the same outputs; a
# recipe adds only its algorithm, curriculum and (for the 32B one) resources and backend.

# qwen_common_args ARRAY MODEL_ID OUT_DEFAULT [WHERE]
# Checks the inputs: MODEL_PATH (a local folder of the Hugging Face model MODEL_ID) and
# DATA_PATH, with WHERE appended to their hints (", on a filesystem every node mounts" for
# a multi-node recipe); sets OUT (default OUT_DEFAULT, made absolute: the Ray workers do not
# share our cwd, and may run on other nodes) and creates it; sets the paper's sizes
#   B=16 prompts per training step, N=24 responses per prompt, N_INIT=4 screening responses,
#   TRAIN_BATCH=B*N=384 samples = one optimizer step per training step;
# and fills the array named ARRAY with what every Qwen recipe passes:
#   data: DATA_PATH's INPUT_KEY (prompt) / LABEL_KEY (answer), chat template;
#   vLLM: --vllm.gpu_memory_utilization 0.9, prefix caching (a continuation reuses the KV
#     cache of its own screening);
#   rollout: B prompts x N responses, up to 3072 new tokens, prompt + response <= 4096,
#     temperature 1.0, EPISODES (1) passes over DATA_PATH, one epoch per batch;
#   optimizer: lr 1e-6 constant after WARMUP_STEPS (10) warmup optimizer steps, weight
#     decay 0.1;
#   outputs: checkpoints every SAVE_STEPS (20) steps (the last 2 kept) in OUT/ckpt, the
#     final model in OUT/final, TensorBoard logs in OUT/tensorboard, the SPEED trace in
#     OUT/trace.jsonl; with EVAL_PATH set (checked here too) an evaluation every EVAL_STEPS
#     (10) steps.
qwen_common_args() {
  local -n _qwen_args=$1
  local model_id=$2 out_default=$3 where=${4:-}
  need_path MODEL_PATH config_dir "download $model_id where you have network (hf download $model_id --local-dir DIR) and point MODEL_PATH at the local folder$where"
  need_path DATA_PATH file "point DATA_PATH at a jsonl file of math prompts with \"prompt\" and \"answer\" keys (openrlhf-speed prepare-data writes one)$where"
  OUT=$(realpath -m "${OUT:-$out_default}")
  mkdir -p "$OUT"

  B=16 N=24 N_INIT=4
  TRAIN_BATCH=$((B * N))
  EPISODES=${EPISODES:-1}
  local warmup
  warmup=$(warmup_ratio "${WARMUP_STEPS:-10}" "$(count_rows "$DATA_PATH")" "$N" "$TRAIN_BATCH" "$EPISODES" 1)

  _qwen_args=(
    --actor.model_name_or_path "$(realpath "$MODEL_PATH")"
    --data.prompt_dataset "$(realpath "$DATA_PATH")"
    --data.input_key "${INPUT_KEY:-prompt}" --data.label_key "${LABEL_KEY:-answer}" --data.apply_chat_template
    --vllm.gpu_memory_utilization 0.9 --vllm.enable_prefix_caching
    --rollout.batch_size "$B" --rollout.n_samples_per_prompt "$N"
    --rollout.max_new_tokens 3072 --data.max_len 4096 --rollout.temperature 1.0
    --train.num_episodes "$EPISODES" --train.max_epochs 1
    --train.batch_size "$TRAIN_BATCH"
    --actor.adam.lr 1e-6 --actor.adam.weight_decay 0.1
    --actor.lr_scheduler constant_with_warmup --actor.lr_warmup_ratio "$warmup"
    --ckpt.path "$OUT/ckpt" --ckpt.save_steps "${SAVE_STEPS:-20}" --ckpt.max_num 2 --ckpt.output_dir "$OUT/final"
    --logger.tensorboard_dir "$OUT/tensorboard" --speed.trace_path "$OUT/trace.jsonl"
  )
  if [[ -n ${EVAL_PATH:-} ]]; then
    need_path EVAL_PATH file "point EVAL_PATH at a held-out jsonl file with the training data's keys, or unset it"
    _qwen_args+=(--eval.dataset "$(realpath "$EVAL_PATH")" --eval.steps "${EVAL_STEPS:-10}")
  fi
}

# speed_screening_args ARRAY
# Appends SPEED's screening as the paper ran it, for engines with GPUs of their own (every
# GPU recipe: nothing is colocated): N_init screening responses per prompt, 64 prompts in
# flight, and the engines kept fed while the actor trains (--speed.feed_during_training on:
# a finished screening's continuation and new screenings are sent during training, not
# held until the next step), their queue bounded at 2 x B x N responses
# (--speed.max_inflight_responses, uniform's load), so the feeding cannot pile more onto
# them than the baseline's.
speed_screening_args() {
  local -n _speed_args=$1
  _speed_args+=(
    --speed.strategy speed --speed.n_init "$N_INIT" --speed.max_inflight_prompts 64
    --speed.feed_during_training on --speed.max_inflight_responses $((2 * B * N))
  )
}

# qwen7b_layout: the 7B recipes' GPUs, from
#   GPUS_PER_NODE (8), NNODES (1): the GPUs there are (NNODES > 1: a Ray cluster, RAY_ADDRESS);
#   ACTOR_GPUS (half of them): the DeepSpeed actor's, one node's worth or whole nodes;
#   VLLM_TP (1): GPUs per vLLM engine (within a node); the other GPUs are engines.
# Sets ACTOR_NODES x ACTOR_PER_NODE (the reference model, where there is one, takes the
# same: OpenRLHF requires it with --train.colocate_actor_ref), VLLM_ENGINES, and LAYOUT
# (a line saying it all); dies naming the variable when they do not fit together.
qwen7b_layout() {
  local per_node=${GPUS_PER_NODE:-8} nodes=${NNODES:-1} tp=${VLLM_TP:-1} var total
  for var in GPUS_PER_NODE NNODES VLLM_TP ACTOR_GPUS; do
    [[ -z ${!var:-} || ${!var} =~ ^[1-9][0-9]*$ ]] || die "$var=${!var}: use a positive whole number"
  done
  total=$((per_node * nodes))
  ((total >= 2)) || die "GPUS_PER_NODE x NNODES = $total: the actor and the vLLM engines need 2 GPUs or more"
  local actor=${ACTOR_GPUS:-$((total / 2))}
  ((actor < total)) || die "ACTOR_GPUS=$actor leaves none of the $total GPUs (GPUS_PER_NODE x NNODES) to vLLM"
  if ((actor <= per_node)); then
    ACTOR_NODES=1 ACTOR_PER_NODE=$actor
  elif ((actor % per_node == 0)); then
    ACTOR_NODES=$((actor / per_node)) ACTOR_PER_NODE=$per_node
  else
    die "ACTOR_GPUS=$actor: more than a node (GPUS_PER_NODE=$per_node) must be whole nodes"
  fi
  ((TRAIN_BATCH % (2 * actor) == 0)) \
    || die "ACTOR_GPUS=$actor: a step's $TRAIN_BATCH samples must split into micro batches of 2 on every actor GPU (use a divisor of $((TRAIN_BATCH / 2)))"
  ((tp <= per_node && (total - actor) % tp == 0)) \
    || die "VLLM_TP=$tp: the $((total - actor)) vLLM GPUs must hold whole engines of $tp GPUs, each within a node (GPUS_PER_NODE=$per_node)"
  VLLM_ENGINES=$(((total - actor) / tp)) VLLM_TP=$tp
  ((nodes == 1)) || [[ -n ${RAY_ADDRESS:-} ]] \
    || die "NNODES=$nodes: start a Ray cluster on the nodes (ray start, as examples/scripts/slurm/train_speed_qwen32b.sbatch does) and set RAY_ADDRESS=HEAD_IP:6379"
  LAYOUT="$total GPUs ($nodes x $per_node): actor $ACTOR_NODES x $ACTOR_PER_NODE, $VLLM_ENGINES vLLM engines x TP $VLLM_TP"
}

# qwen7b_ref_args ARRAY: the reference model on the actor's GPUs (GRPO, REINFORCE++).
qwen7b_ref_args() {
  local -n _ref_args=$1
  _ref_args+=(--ref.num_nodes "$ACTOR_NODES" --ref.num_gpus_per_node "$ACTOR_PER_NODE" --train.colocate_actor_ref)
}

# qwen7b_deepspeed_args ARRAY
# Appends the 7B recipes' layout (qwen7b_layout: on one 8-GPU node, 4 vLLM engines of one
# GPU + the actor on 4 GPUs) and DeepSpeed actor to the array named ARRAY:
#   micro batches of 2 (training) and 4 (log-prob forward);
#   DeepSpeed ZeRO-3, bf16, gradient checkpointing, and fp32 master weights + Adam states on
#   the host (--ds.adam_offload) unless ADAM_OFFLOAD=0;
#   flash attention 2 and packed samples (--ds.packing_samples), both of which need
#   flash_attn: PACKING=auto (default) packs when $VENV imports flash_attn, and without it
#   runs unpacked with sdpa, saying so; PACKING=0 never packs (an OpenRLHF store_true flag
#   cannot be undone by an extra flag); PACKING=1 packs whatever is installed.
qwen7b_deepspeed_args() {
  local -n _qwen_args=$1
  local packing=${PACKING:-auto} attn=flash_attention_2
  case $packing in
    auto | 0 | 1) ;;
    *) die "PACKING=$packing: use auto (pack when flash_attn imports), 1 (always) or 0 (never)" ;;
  esac
  if ! py_imports flash_attn; then
    if [[ $packing == 1 ]]; then
      note "PACKING=1: packing and flash attention kept though ${VENV:-.venv} cannot import flash_attn (loading the model will fail)"
    else
      attn=sdpa packing=0
      note "flash_attn is not importable in ${VENV:-.venv}: sample packing off, --ds.attn_implementation sdpa \
(install it with make setup-gpu FLASH_ATTN=1; PACKING=1 keeps both)"
    fi
  fi
  qwen7b_layout
  note "$LAYOUT"
  _qwen_args+=(
    --actor.num_nodes "$ACTOR_NODES" --actor.num_gpus_per_node "$ACTOR_PER_NODE"
    --vllm.num_engines "$VLLM_ENGINES" --vllm.tensor_parallel_size "$VLLM_TP"
    --train.micro_batch_size 2 --rollout.micro_batch_size 4
    --ds.zero_stage 3 --ds.param_dtype bf16 --ds.attn_implementation "$attn"
    --actor.gradient_checkpointing_enable
  )
  if [[ $packing != 0 ]]; then _qwen_args+=(--ds.packing_samples); fi
  if [[ ${ADAM_OFFLOAD:-1} != 0 ]]; then _qwen_args+=(--ds.adam_offload); fi
}
