# Shared by the GPU recipes (train_*_qwen*.sh); sourced, not run. Two things every recipe
# needs and gets wrong by hand: failing early, with what to do, when an input is missing;
# and turning "N warmup steps" into OpenRLHF's --actor.lr_warmup_ratio.

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
