# What `bootstrap.sh --gpu` must know before it compiles anything; sourced, not run (the
# tests source it too). Functions print their answer on stdout and never exit.
#
# Three things compile against torch's CUDA (13.0 for PyPI's torch 2.13.0):
# - DeepSpeed's Adam ops. cpu_adam (--ds.adam_offload) and fused_adam are compiled at run
#   time unless built into the venv. DeepSpeed 0.19.6's op_builder/builder.py accepts an
#   nvcc whose minor version differs from torch's only for CUDA 10-12
#   (cuda_minor_mismatch_ok); for 13.x it raises CUDAMismatchException unless
#   DS_SKIP_CUDA_CHECK=1, and with no toolkit at all cpu_adam fails with a TypeError
#   (os.path.join(CUDA_HOME=None, "lib64")). Its default arch list for CUDA 13 is
#   "6.0;6.1;7.0", which nvcc 13 no longer compiles for: TORCH_CUDA_ARCH_LIST is set here.
# - flash-attn 2.8.3 (sdist): no prebuilt wheel for torch 2.13 / CUDA 13, so it compiles
#   72 kernel files for each arch of FLASH_ATTN_CUDA_ARCHS (default 80;90;100;120; it reads
#   only these four values), MAX_JOBS at a time, NVCC_THREADS (4) archs of a file at once.
#   It passes its own -gencode flags, so TORCH_CUDA_ARCH_LIST does not reach it.
# - transformer-engine's PyTorch extension (sdist).
# All need nvcc 13.x, a C++ compiler (gcc/g++) and Python's headers (python3.11-dev).

# The toolkit to build with: CUDA_HOME (or CUDA_PATH) when set; else, as torch's
# _find_cuda_home guesses, the nvcc on PATH (two levels up, links resolved), then
# /usr/local/cuda. torch stops at the first guess; here a guess without CUDA's headers
# (an nvcc wrapper script in /usr/local/bin gives /usr/local) yields to the next one that
# has them. Empty when there is none. CUDA_FALLBACK_HOME stands in for /usr/local/cuda in
# the tests.
gpu_cuda_home() {
  if [[ -n ${CUDA_HOME:-${CUDA_PATH:-}} ]]; then
    echo "${CUDA_HOME:-$CUDA_PATH}"
    return 0
  fi
  local guesses=() home
  if command -v nvcc >/dev/null 2>&1; then
    guesses+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")")
  fi
  guesses+=("${CUDA_FALLBACK_HOME:-/usr/local/cuda}")
  for home in "${guesses[@]}"; do
    [[ -x $home/bin/nvcc && -f $home/include/cuda_runtime.h ]] && { echo "$home"; return 0; }
  done
  for home in "${guesses[@]}"; do
    [[ -x $home/bin/nvcc ]] && { echo "$home"; return 0; }
  done
  return 0
}

# gpu_nvcc_version HOME: "13.0" from `HOME/bin/nvcc --version` ("release 13.0, V13.0.88"),
# empty when it does not run.
gpu_nvcc_version() {
  { "$1/bin/nvcc" --version 2>/dev/null || true; } | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1
}

# gpu_cuda_verdict NVCC TORCH: match | minor (same major 13+, another minor: DeepSpeed
# needs DS_SKIP_CUDA_CHECK=1; CUDA keeps a major's minors compatible, which is why
# DeepSpeed's own table lists 11.x and 12.x) | ok-minor (10-12, DeepSpeed's table) |
# major (another major: torch's cpp_extension refuses it) | none (no nvcc).
gpu_cuda_verdict() {
  local nvcc=$1 torch=$2
  if [[ -z $nvcc ]]; then echo none
  elif [[ $nvcc == "$torch" ]]; then echo match
  elif [[ ${nvcc%%.*} != "${torch%%.*}" ]]; then echo major
  elif ((${nvcc%%.*} >= 13)); then echo minor
  else echo ok-minor
  fi
}

# gpu_compute_caps: the visible GPUs' compute capabilities, distinct, ";"-joined ("9.0"),
# from nvidia-smi; empty without a GPU (or a driver too old for the query).
gpu_compute_caps() {
  { nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true; } | tr -d ' ' \
    | { grep -E '^[0-9]+\.[0-9]+$' || true; } | sort -u -t. -k1,1n -k2,2n | paste -sd';' -
}

# gpu_ds_archs LIST: a TORCH_CUDA_ARCH_LIST as DeepSpeed 0.19.6's op builder can read it.
# torch takes arch-specific entries ("9.0a", "10.0f"; NVIDIA's images set them), but
# DeepSpeed parses each minor version as an integer and stops with "invalid literal for
# int() with base 10: '0a'", at install and in the run's JIT build alike. Its Adam ops use
# no arch-specific instructions, so "9.0a" becomes "9.0"; "+PTX" stays, spaces become ";",
# repeats go.
gpu_ds_archs() {
  local cc ptx out=()
  for cc in ${1//;/ }; do
    ptx=""
    [[ $cc == *+PTX ]] && ptx=+PTX && cc=${cc%+PTX}
    cc=${cc%[af]}$ptx
    [[ " ${out[*]} " == *" $cc "* ]] || out+=("$cc")
  done
  (IFS=';'; echo "${out[*]}")
}

# gpu_flash_archs CAPS: flash-attn 2.8.3's FLASH_ATTN_CUDA_ARCHS for compute capabilities
# "8.6;9.0": 8.x -> 80 (sm_80 code runs on 8.6 and 8.9), 9.0 -> 90, 10.x -> 100,
# 12.x -> 120; others (below 8.0: flash-attn 2 needs Ampere) are left out.
gpu_flash_archs() {
  local cap out=()
  for cap in ${1//;/ }; do
    case ${cap%%.*} in
      8) out+=(80) ;;
      9) out+=(90) ;;
      10) out+=(100) ;;
      12) out+=(120) ;;
    esac
  done
  printf '%s\n' "${out[@]}" | sort -un | paste -sd';' -
}

# gpu_mem_gb: memory this process may use, in GiB: MemAvailable, or the cgroup's limit
# (Slurm's --mem) when lower.
gpu_mem_gb() {
  local avail limit used
  avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2>/dev/null)
  limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)
  if [[ $limit =~ ^[0-9]+$ ]]; then
    used=$(cat /sys/fs/cgroup/memory.current 2>/dev/null || echo 0)
    limit=$(((limit - used) / 1073741824))
    ((limit < avail)) && avail=$limit
  fi
  echo "${avail:-0}"
}

# gpu_flash_jobs CORES MEM_GB ARCHS THREADS: flash-attn's MAX_JOBS. A job is one kernel
# file; nvcc compiles its archs THREADS at a time (NVCC_THREADS), so a job keeps
# min(THREADS, ARCHS) cores busy and needs about 6.5 GiB for each (measured with nvcc 13.0
# for sm_90: peak RSS 4.1 GiB for flash_fwd_hdim128_bf16, 6.0 GiB for flash_bwd_hdim128_bf16;
# flash-attn's own guess, ~9 GiB a job at 4 threads, is lower). Jobs: as many as the cores
# and the memory allow, >= 1.
gpu_flash_jobs() {
  local cores=$1 mem=$2 archs=$3 threads=$4 busy by_cores by_mem
  busy=$((threads < archs ? threads : archs))
  ((busy < 1)) && busy=1
  by_cores=$((cores / busy))
  by_mem=$((mem * 2 / (13 * busy)))
  local jobs=$((by_cores < by_mem ? by_cores : by_mem))
  echo $((jobs < 1 ? 1 : jobs))
}

# gpu_flash_minutes CORES ARCHS JOBS THREADS: rough wall time of flash-attn's build, in
# minutes: 72 kernel files x ARCHS, about 4 CPU-minutes each, over the cores the jobs keep
# busy. Measured with nvcc 13.0 for sm_90 on a 2-core AMD EPYC VM: flash_fwd_hdim128_bf16
# 4.1 and flash_bwd_hdim128_bf16 5.3 CPU-minutes (a faster CPU takes less; flash-attn's
# README says 3-5 minutes on 64 cores, for its older, smaller build).
gpu_flash_minutes() {
  local cores=$1 archs=$2 jobs=$3 threads=$4 busy
  busy=$((jobs * (threads < archs ? threads : archs)))
  ((busy > cores)) && busy=$cores
  ((busy < 1)) && busy=1
  echo $(((72 * archs * 4 + busy - 1) / busy))
}

# gpu_python_headers PYTHON: whether PYTHON's Python.h exists (python3.11-dev).
gpu_python_headers() {
  "$1" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    >/dev/null 2>&1
}

# gpu_plan TORCH_CUDA PYTHON: checks what the compiled parts need and decides how to build
# them, before anything is installed. Reads DS_ADAM (1: build DeepSpeed's Adam ops, the
# default; 0: skip), FLASH_ATTN and TE (auto | 1 | 0) and any MAX_JOBS, NVCC_THREADS,
# FLASH_ATTN_CUDA_ARCHS, TORCH_CUDA_ARCH_LIST, CUDA_HOME given; exports what the builds
# read (CUDA_HOME, TORCH_CUDA_ARCH_LIST, FLASH_ATTN_CUDA_ARCHS, MAX_JOBS, NVCC_THREADS,
# DS_SKIP_CUDA_CHECK when needed) and sets FLASH_ATTN / TE to 0 where auto cannot build.
# Prints the plan; on a missing requirement prints "error: ..." (what to install) on
# stderr and returns 1.
gpu_plan() {
  local torch_cuda=$1 py=$2 home nvcc verdict why=""
  local need=() missing=()
  [[ ${DS_ADAM:-1} != 0 ]] && need+=("DeepSpeed's Adam ops")
  [[ ${FLASH_ATTN:-auto} != 0 ]] && need+=(flash-attn)
  [[ ${TE:-auto} != 0 ]] && need+=(transformer-engine)
  if ((${#need[@]} == 0)); then
    echo "[bootstrap] nothing to compile (DS_ADAM=0 FLASH_ATTN=0 TE=0)"
    return 0
  fi
  home=$(gpu_cuda_home)
  nvcc=$([[ -z $home ]] || gpu_nvcc_version "$home")
  verdict=$(gpu_cuda_verdict "$nvcc" "$torch_cuda")
  local install="install CUDA toolkit $torch_cuda (its nvcc; any 13.x works) and set CUDA_HOME to it (e.g. /usr/local/cuda-$torch_cuda)"
  case $verdict in
    none) missing+=("nvcc: no CUDA toolkit found (CUDA_HOME=${CUDA_HOME:-unset}, no nvcc on PATH${home:+, $home/bin/nvcc does not run}): $install") ;;
    major) missing+=("nvcc $nvcc in $home, but torch is built for CUDA $torch_cuda (a major version apart: neither torch nor DeepSpeed compiles against it): $install") ;;
    minor) export DS_SKIP_CUDA_CHECK=1
      why="DS_SKIP_CUDA_CHECK=1: DeepSpeed 0.19.6 accepts another minor version only for CUDA 10-12, and a 13.x toolkit is compatible with torch's $torch_cuda (same major)" ;;
  esac
  command -v g++ >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 \
    || missing+=("gcc/g++: not on PATH: install them (Debian/Ubuntu: apt-get install build-essential; RHEL: dnf install gcc gcc-c++)")
  gpu_python_headers "$py" \
    || missing+=("Python.h: $py has no headers: install python3.11-dev (Debian/Ubuntu; RHEL: python3.11-devel)")
  if ((${#missing[@]})); then
    if [[ ${DS_ADAM:-1} == 0 && ${FLASH_ATTN:-auto} != 1 && ${TE:-auto} != 1 ]]; then
      printf '[bootstrap] note: cannot compile (%s): flash-attn and transformer-engine skipped\n' "${missing[*]%%:*}"
      FLASH_ATTN=0 TE=0
      return 0
    fi
    {
      local what
      printf -v what '%s, ' "${need[@]}"
      echo "error: ${what%, } must be compiled against torch's CUDA $torch_cuda, and this machine lacks:"
      printf '  - %s\n' "${missing[@]}"
      echo "  (or set DS_ADAM=0 FLASH_ATTN=0 TE=0 to install without compiling: the DeepSpeed recipes then cannot"
      echo "  start their optimizer, --ds.adam_offload's cpu_adam or fused_adam; --backend megatron needs neither)"
    } >&2
    return 1
  fi
  export CUDA_HOME=$home
  echo "[bootstrap] nvcc $nvcc ($home/bin/nvcc), torch's CUDA $torch_cuda${why:+; $why}"
  gpu_plan_archs || return 1
  [[ ${DS_ADAM:-1} == 0 ]] || echo "[bootstrap] DeepSpeed: cpu_adam and fused_adam built into the venv for $TORCH_CUDA_ARCH_LIST (1-5 min; DS_ADAM=0 skips)"
  return 0
}

# gpu_plan_archs: TORCH_CUDA_ARCH_LIST (DeepSpeed's ops and other torch extensions) and
# flash-attn's build size, from the visible GPUs and this machine's cores and memory.
gpu_plan_archs() {
  local caps archs n threads cores mem minutes
  caps=$(gpu_compute_caps)
  if [[ -n ${TORCH_CUDA_ARCH_LIST:-} ]]; then
    caps=$(gpu_ds_archs "$TORCH_CUDA_ARCH_LIST")
    if [[ $caps == "$TORCH_CUDA_ARCH_LIST" ]]; then
      echo "[bootstrap] GPU archs: $caps (TORCH_CUDA_ARCH_LIST, as you set it)"
    else
      echo "[bootstrap] GPU archs: $caps (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST as you set it, written as DeepSpeed 0.19.6 reads it: no a/f suffixes, which its Adam ops do not need)"
    fi
  elif [[ -n $caps ]]; then
    echo "[bootstrap] GPU archs: $caps (the visible GPUs, nvidia-smi)"
  else
    caps="8.0;9.0;10.0;12.0"
    echo "[bootstrap] GPU archs: $caps (no GPU visible: A100, H100/H200, B200, RTX 50xx; on a GPU node only its own are built; TORCH_CUDA_ARCH_LIST chooses)"
  fi
  export TORCH_CUDA_ARCH_LIST=$caps

  [[ ${FLASH_ATTN:-auto} == 0 ]] && return 0
  archs=${FLASH_ATTN_CUDA_ARCHS:-$(gpu_flash_archs "$caps")}
  if [[ -z $archs ]]; then
    [[ ${FLASH_ATTN:-auto} == 1 ]] && { echo "error: flash-attn 2 needs compute capability 8.0 or newer; these GPUs are $caps (set FLASH_ATTN=0)" >&2; return 1; }
    echo "[bootstrap] note: flash-attn skipped: it needs compute capability 8.0+, these GPUs are $caps (the recipes use sdpa)"
    FLASH_ATTN=0
    return 0
  fi
  n=$(tr ';' '\n' <<<"$archs" | { grep -c . || true; })
  cores=$(nproc)
  mem=$(gpu_mem_gb)
  # nvcc's parallel archs: up to 4, as many as the memory holds (6.5 GiB each), >= 1.
  threads=$((n < 4 ? n : 4))
  ((threads > mem * 2 / 13)) && threads=$((mem * 2 / 13))
  ((threads < 1)) && threads=1
  threads=${NVCC_THREADS:-$threads}
  export FLASH_ATTN_CUDA_ARCHS=$archs NVCC_THREADS=$threads
  export MAX_JOBS=${MAX_JOBS:-$(gpu_flash_jobs "$cores" "$mem" "$n" "$threads")}
  minutes=$(gpu_flash_minutes "$cores" "$n" "$MAX_JOBS" "$threads")
  FLASH_MINUTES=$minutes
  local took="$minutes min"
  ((minutes >= 120)) && took="$((minutes / 60)).$((minutes % 60 / 6)) h"
  echo "[bootstrap] flash-attn: FLASH_ATTN_CUDA_ARCHS=$archs MAX_JOBS=$MAX_JOBS NVCC_THREADS=$threads ($cores cores, $mem GiB free):" \
    "expect about $took (rough: 72 kernel files x $n arch(s)); FLASH_ATTN=0 skips it (sdpa, no packing)"
  ((cores < 4)) && echo "[bootstrap] note: only $cores core(s) here: srun --cpus-per-task=16 (or more) shortens the build"
  return 0
}
