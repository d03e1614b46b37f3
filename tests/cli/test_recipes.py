"""The recipes in examples/scripts: shell syntax, inputs that fail early with a message, and
a dry run of every train_*.sh through the real parser (`bash SCRIPT --dry_run`), checking
the resolved settings and the resource plan against what each script's header says.

A dry run on this CPU machine validates for the hardware the recipe names (flags.prepare
skips the CPU adaptations), so GPU-only flags are accepted. Each dry run spends most of its
time importing torch/vLLM/OpenRLHF, so the selected ones start together, a few at a time,
on first use, and each test waits for its own.
"""

import json
import math
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _util import REPO, VENV_BIN, openrlhf_speed_cmd

SCRIPTS = REPO / "examples" / "scripts"
SHELL_FILES = sorted([*SCRIPTS.rglob("*.sh"), *SCRIPTS.rglob("*.sbatch")])
RECIPES = sorted(p.name for p in SCRIPTS.glob("train_*.sh"))
MULTINODE = "train_speed_rloo_qwen32b_multinode.sh"
SBATCH = SCRIPTS / "slurm" / "train_speed_qwen32b.sbatch"
DATA_ROWS = 1000
PARALLEL = 4  # dry runs at once (~0.7 GB of memory each)
NO_PARAMS = type("NoCallspec", (), {"params": {}})()  # stands in for a test item without parameters
# Variables the scripts read: cleared so the caller's environment cannot change a result.
SCRIPT_VARS = ("MODEL_PATH", "DATA_PATH", "EVAL_PATH", "EVAL_STEPS", "OUT", "VENV", "INPUT_KEY", "LABEL_KEY",
               "EPISODES", "WARMUP_STEPS", "SAVE_STEPS", "ADAM_OFFLOAD", "MAX_STEPS", "RAY_ADDRESS", "PACKING",
               "OPENRLHF_SPEED_DEVICE", "GPUS_PER_NODE", "NNODES", "ACTOR_GPUS", "VLLM_TP")

# What each recipe must resolve to: dotted config path -> value. Every train_*.sh needs an entry.
# PAPER: what every Qwen recipe shares (recipe_lib.sh's qwen_common_args).
PAPER = {
    "rollout.batch_size": 16, "rollout.n_samples_per_prompt": 24, "rollout.max_new_tokens": 3072,
    "rollout.temperature": 1.0, "data.max_len": 4096, "train.batch_size": 384,
    "actor.adam.lr": 1e-6, "actor.adam.weight_decay": 0.1, "actor.lr_scheduler": "constant_with_warmup",
    "data.apply_chat_template": True, "data.input_key": "prompt", "data.label_key": "answer",
    "vllm.gpu_memory_utilization": 0.9, "vllm.enable_prefix_caching": True,
}
# SPEED's screening (recipe_lib.sh's speed_screening_args): the paper's 64 prompts in flight,
# the engines (on GPUs of their own) fed during training, their queue bounded at 2BN.
SPEED = {"speed.strategy": "speed", "speed.n_init": 4, "speed.max_inflight_prompts": 64,
         "speed.feed_during_training": "on", "speed.max_inflight_responses": 2 * 16 * 24}
# Whether the venv running the recipes imports flash_attn: with it the 7B recipes pack samples
# and use flash attention 2, without it (this CPU machine) neither (PACKING=auto).
HAS_FLASH_ATTN = subprocess.run([str(VENV_BIN / "python"), "-c", "import flash_attn"], capture_output=True).returncode == 0
NO_FLASH_ATTN_NOTE = "flash_attn is not importable"
# The 7B recipes' default layout, one node of 8 GPUs, and DeepSpeed actor (recipe_lib.sh's
# qwen7b_deepspeed_args).
PAPER_7B = {
    **PAPER, "backend": "deepspeed",
    "actor.num_nodes": 1, "actor.num_gpus_per_node": 4, "vllm.num_engines": 4, "vllm.tensor_parallel_size": 1,
    "train.micro_batch_size": 2, "rollout.micro_batch_size": 4,
    "ds.zero_stage": 3, "ds.param_dtype": "bf16", "ds.packing_samples": HAS_FLASH_ATTN, "ds.adam_offload": True,
    "ds.attn_implementation": "flash_attention_2" if HAS_FLASH_ATTN else "sdpa",
    "actor.gradient_checkpointing_enable": True,
}
SPEED_7B = {**PAPER_7B, **SPEED}
NO_KL = {"algo.kl.init_coef": 0.0, "algo.kl.use_loss": False}
# The CPU recipes (the default job) checkpoint every 2 steps and resume when rerun.
RESUMABLE = {"ckpt.load_enable": True, "ckpt.save_steps": 2, "ckpt.max_num": 2}
EXPECTED = {
    "train_speed_rloo_qwen7b.sh": {**SPEED_7B, **NO_KL, "algo.advantage.estimator": "rloo"},
    "train_rloo_qwen7b.sh": {
        **PAPER_7B, **NO_KL, "algo.advantage.estimator": "rloo", "speed.strategy": "uniform",
        "speed.max_inflight_prompts": 16, "speed.buffer_size": 16,
    },
    "train_speed_dapo_qwen7b.sh": {
        **SPEED_7B, **NO_KL, "algo.advantage.estimator": "group_norm", "actor.eps_clip_low_high": [0.2, 0.28],
        "actor.loss_agg_mode": "token-mean", "reward.overlong_buffer_len": 512.0,
        "reward.overlong_penalty_factor": 1.0,
    },
    "train_speed_reinforce_pp_qwen7b.sh": {
        **SPEED_7B, "algo.advantage.estimator": "reinforce_baseline", "algo.kl.use_loss": True,
        "algo.kl.estimator": "k2", "algo.kl.init_coef": 1e-5, "algo.advantage.is_correction_level": "token",
        "algo.advantage.is_correction_mode": "mask", "algo.advantage.is_correction_threshold": [0.5, 5.0],
        "train.colocate_actor_ref": True, "ref.num_nodes": 1, "ref.num_gpus_per_node": 4,
    },
    "train_speed_grpo_qwen7b.sh": {
        **SPEED_7B, "algo.advantage.estimator": "group_norm", "algo.kl.use_loss": True, "algo.kl.estimator": "k3",
        "algo.kl.init_coef": 1e-3, "actor.loss_agg_mode": "seq-mean-token-mean",
        "train.colocate_actor_ref": True, "ref.num_nodes": 1, "ref.num_gpus_per_node": 4,
    },
    MULTINODE: {
        **PAPER, **SPEED, **NO_KL, "algo.advantage.estimator": "rloo", "actor.num_nodes": 2,
        "actor.num_gpus_per_node": 8, "vllm.num_engines": 4, "vllm.tensor_parallel_size": 4,
        "train.micro_batch_size": 1, "rollout.micro_batch_size": 2,
        "backend": "megatron", "megatron.tp": 8, "megatron.pp": 2, "megatron.recompute": "full",
        "megatron.dtype": "bf16", "megatron.sequence_parallel": False, "megatron.vocab_divisible_by": 1,
        "ds.packing_samples": False, "ds.adam_offload": False,
    },
    "train_speed_rloo_proving_cpu.sh": {
        "speed.strategy": "speed", "speed.n_init": 4, "rollout.batch_size": 16, "rollout.n_samples_per_prompt": 24,
        "algo.advantage.estimator": "rloo", "eval.steps": 6, "eval.at_start": True,
        "ds.param_dtype": "fp32", **RESUMABLE, "ckpt.save_steps": 6,
    },
    "train_speed_rloo_smollm2_cpu.sh": {
        "speed.strategy": "speed", "speed.n_init": 4, "rollout.batch_size": 8, "rollout.n_samples_per_prompt": 8,
        "algo.advantage.estimator": "rloo", **RESUMABLE,
    },
    "train_rloo_smollm2_cpu.sh": {
        "speed.strategy": "uniform", "rollout.batch_size": 8, "rollout.n_samples_per_prompt": 8,
        "algo.advantage.estimator": "rloo", **RESUMABLE,
    },
}


# Qwen/Qwen2.5-32B's config.json (its architecture fields): the multi-node recipe's dry run
# checks --megatron.tp / --megatron.pp against the model's heads and layers, so it gets this
# instead of the embedded model's config. The 7B recipes get Qwen/Qwen2.5-Math-7B's, so their
# memory plans are the real model's.
QWEN25_32B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 5120,
    "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 131072,
    "max_window_layers": 64, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 131072,
    "use_sliding_window": False, "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "bfloat16",
    "bos_token_id": 151643, "eos_token_id": 151643,
}
QWEN25_MATH_7B_CONFIG = {
    **QWEN25_32B_CONFIG, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 4096, "max_window_layers": 28,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
}


def qwen2_params(cfg: dict) -> int:
    """Parameters of a Qwen2 model from its config: QKV (with bias), output, SwiGLU MLP and two
    RMSNorms per layer, the final norm, the embedding and (untied) the LM head."""
    h, kv = cfg["hidden_size"], cfg["num_key_value_heads"] * cfg["hidden_size"] // cfg["num_attention_heads"]
    layer = (h * (h + 2 * kv) + h + 2 * kv) + h * h + 3 * h * cfg["intermediate_size"] + 2 * h
    embeddings = cfg["vocab_size"] * h * (1 if cfg["tie_word_embeddings"] else 2)
    return cfg["num_hidden_layers"] * layer + h + embeddings


def lookup(config: dict, dotted: str):
    for key in dotted.split("."):
        config = config[key]
    return config


def header_gpus(text: str):
    """(nodes, GPUs per node) from a header line 'Hardware: 4 nodes x 8 GPUs', or None (CPU)."""
    m = re.search(r"^# Hardware: (\d+) nodes? x (\d+) GPUs", text, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else None


# -- syntax ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", SHELL_FILES, ids=[str(p.relative_to(SCRIPTS)) for p in SHELL_FILES])
def test_shell_syntax(path):
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_every_recipe_has_expectations():
    assert set(RECIPES) == set(EXPECTED), "add the new recipe's resolved settings to EXPECTED"


# -- inputs ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A fake model folder (the embedded model's config.json) and tiny prompt files."""
    root = tmp_path_factory.mktemp("recipes")
    out = subprocess.run([*openrlhf_speed_cmd(), "prepare-model"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    model = root / "model"
    model.mkdir()
    shutil.copy(Path(out.stdout.strip().splitlines()[-1]) / "config.json", model / "config.json")
    data = root / "train.jsonl"
    rows = ({"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "answer": str(i + 1)} for i in range(DATA_ROWS))
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    held_out = root / "test.jsonl"
    held_out.write_text(json.dumps({"prompt": "What is 2 + 2?", "answer": "4"}) + "\n")
    model_32b = root / "qwen2.5-32b"
    model_32b.mkdir()
    (model_32b / "config.json").write_text(json.dumps(QWEN25_32B_CONFIG))
    model_7b = root / "qwen2.5-math-7b"
    model_7b.mkdir()
    (model_7b / "config.json").write_text(json.dumps(QWEN25_MATH_7B_CONFIG))
    return {"MODEL_PATH": str(model), "DATA_PATH": str(data), "EVAL_PATH": str(held_out), "OUT": str(root / "out"),
            "MODEL_PATH_32B": str(model_32b), "MODEL_PATH_7B": str(model_7b)}


def model_path(name: str, inputs: dict) -> str:
    if name == MULTINODE:
        return inputs["MODEL_PATH_32B"]
    return inputs["MODEL_PATH_7B"] if "qwen7b" in name else inputs["MODEL_PATH"]


def script_env(name: str, inputs: dict, **overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS}
    env["VENV"] = str(VENV_BIN.parent)
    if header_gpus((SCRIPTS / name).read_text()):  # GPU recipes take their inputs from the environment
        env.update({k: v for k, v in inputs.items() if k in SCRIPT_VARS}, MODEL_PATH=model_path(name, inputs))
    else:  # CPU recipes resume (--ckpt.load_enable): their own OUT, so no run of the user's is read
        env["OUT"] = str(Path(inputs["OUT"]) / name)
    if name == MULTINODE:
        env["RAY_ADDRESS"] = "127.0.0.1:6379"  # a dry run never connects
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_script(name: str, env: dict, *args, timeout=900):
    return subprocess.run(["bash", str(SCRIPTS / name), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


MISSING = {
    "model-unset": ("train_speed_rloo_qwen7b.sh", {"MODEL_PATH": None}, ["MODEL_PATH is not set", "Qwen/Qwen2.5-Math-7B"]),
    "model-no-config": ("train_speed_grpo_qwen7b.sh", {"MODEL_PATH": "/"}, ["MODEL_PATH=/", "config.json"]),
    "data-missing": ("train_rloo_qwen7b.sh", {"DATA_PATH": "/nonexistent/train.jsonl"}, ["DATA_PATH=/nonexistent"]),
    "eval-missing": ("train_speed_dapo_qwen7b.sh", {"EVAL_PATH": "/nonexistent/test.jsonl"}, ["EVAL_PATH"]),
    "ray-address-unset": (MULTINODE, {"RAY_ADDRESS": None}, ["RAY_ADDRESS is not set", "sbatch"]),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_missing_input_fails_with_the_variable_named(case, inputs):
    name, overrides, needles = MISSING[case]
    out = run_script(name, script_env(name, inputs, **overrides), "--dry_run", timeout=60)
    assert out.returncode != 0
    for needle in needles:
        assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# -- dry runs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dry_runs(request, inputs):
    """name -> Future of the recipe's dry run, started together for the selected tests."""
    if not (VENV_BIN / "openrlhf-speed").exists():
        pytest.skip(f"no openrlhf-speed console script in {VENV_BIN}")
    selected = sorted({item.callspec.params["recipe"] for item in request.session.items
                       if item.module is request.module and "recipe" in getattr(item, "callspec", NO_PARAMS).params})
    pool = ThreadPoolExecutor(max_workers=PARALLEL)
    futures = {name: pool.submit(run_script, name, script_env(name, inputs), "--dry_run", "--train.max_steps", "3")
               for name in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def plan_of(out) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout[out.stdout.index("{"):])


@pytest.mark.parametrize("recipe", RECIPES)
def test_dry_run_resolves_the_recipe(recipe, dry_runs, inputs):
    from transformers import SchedulerType

    out = dry_runs[recipe].result()
    plan = plan_of(out)
    config, resources = plan["config"], plan["resources"]
    if "qwen7b" in recipe:  # what is off without flash_attn is said, not silent
        assert (NO_FLASH_ATTN_NOTE in out.stderr) != HAS_FLASH_ATTN, out.stderr[-2000:]
    if recipe == MULTINODE:  # a dry run does not probe RAY_ADDRESS's cluster, and says so
        assert "device: cuda (RAY_ADDRESS is set and the cluster was not probed" in out.stdout
    for dotted, want in EXPECTED[recipe].items():
        assert lookup(config, dotted) == want, dotted
    assert config["train"]["max_steps"] == 3  # extra arguments are passed through
    curriculum = resources["curriculum"]
    assert curriculum["strategy"] == config["speed"]["strategy"]

    gpus = header_gpus((SCRIPTS / recipe).read_text())
    if gpus is None:  # CPU recipe: a shipped model and its data; resumable, nothing to resume yet
        shipped = "proving-full-v5" if "proving" in recipe else "SmolLM2-135M-Instruct-bf16-v2"
        assert config["actor"]["model_name_or_path"].endswith(shipped)
        assert config["ckpt"]["path"] == str(Path(inputs["OUT"]) / recipe / "ckpt")
        assert "[openrlhf-speed] no complete checkpoint in " in dry_runs[recipe].result().stdout
        return
    nodes, per_node = gpus
    assert resources["total_gpus"] == nodes * per_node, resources
    assert resources["nodes"] <= nodes
    assert config["actor"]["model_name_or_path"] == model_path(recipe, inputs)
    assert config["data"]["prompt_dataset"] == inputs["DATA_PATH"]
    assert config["eval"]["dataset"] == inputs["EVAL_PATH"] and config["eval"]["steps"] > 0
    assert config["ckpt"]["path"].startswith(inputs["OUT"])
    assert [u.endswith("reward_func.py") for u in config["reward"]["remote_url"]] == [True]  # split by OpenRLHF

    # 10 warmup optimizer steps through OpenRLHF's ratio: ceil(S * ratio), with S as
    # ppo_trainer.prepare_datasets computes it for the 1000-row data file.
    s = (DATA_ROWS * config["rollout"]["n_samples_per_prompt"] // config["train"]["batch_size"]
         * config["train"]["num_episodes"] * config["train"]["max_epochs"])
    assert math.ceil(s * config["actor"]["lr_warmup_ratio"]) == 10
    SchedulerType(config["actor"]["lr_scheduler"])  # OpenRLHF passes any string on to transformers

    if config["backend"] == "megatron":
        check_megatron_plan(recipe, config, resources)
    else:
        assert "megatron" not in resources
    check_memory_plan(out, config, resources)

    if recipe == MULTINODE:  # the Slurm job allocates what the recipe plans
        text = SBATCH.read_text()
        sbatch_nodes = int(re.search(r"^#SBATCH --nodes=(\d+)$", text, re.M).group(1))
        sbatch_gpus = int(re.search(r"^#SBATCH --gpus-per-task=(\d+)$", text, re.M).group(1))
        assert (sbatch_nodes, sbatch_gpus) == (nodes, per_node)
        assert MULTINODE in text and "ray\" start --head" in text




def test_cpu_recipe_rerun_resumes_from_the_last_checkpoint(inputs):
    """Rerunning the default job finds the last complete checkpoint (the one `_actor/latest`
    names, with its curriculum state) and says so before starting anything; a newer tag
    folder that a killed save left behind is named as ignored."""
    if not (VENV_BIN / "openrlhf-speed").exists():
        pytest.skip(f"no openrlhf-speed console script in {VENV_BIN}")
    name = "train_speed_rloo_smollm2_cpu.sh"
    out = Path(inputs["OUT"]) / "rerun"
    for tag in ("global_step2", "global_step4"):
        (out / "ckpt" / "_actor" / tag).mkdir(parents=True)
    (out / "ckpt" / "_actor" / "latest").write_text("global_step2")
    (out / "ckpt" / "_speed").mkdir()
    (out / "ckpt" / "_speed" / "global_step2.pt").write_bytes(b"state")
    result = run_script(name, script_env(name, inputs, OUT=str(out)), "--dry_run")
    plan_of(result)
    assert f"[openrlhf-speed] resuming from step 2 (global_step2 in {out / 'ckpt'})" in result.stdout
    assert "ignoring what a crashed save left after it: _actor/global_step4" in result.stdout

    (out / "ckpt" / "_speed" / "global_step2.pt").unlink()  # inconsistent: refused before anything starts
    result = run_script(name, script_env(name, inputs, OUT=str(out)), "--dry_run")
    assert result.returncode != 0 and "global_step2.pt is missing" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def check_memory_plan(out, config: dict, resources: dict) -> None:
    """Every GPU recipe's dry run ends with the memory plan of the model it names (read from
    its config.json) and the verdict `fits` on the hardware its header names (80 GB GPUs,
    assumed here: this machine has none)."""
    memory = resources["memory"]
    cfg = json.loads((Path(config["actor"]["model_name_or_path"]) / "config.json").read_text())
    assert memory["model"]["params"] == qwen2_params(cfg)
    assert [p["key"] for p in memory["parts"]] == ["actor", "engines", "host"]
    assert "GPU 79.2 GiB (assumed" in memory["hardware"]["source"]
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == "verdict: fits" == f"verdict: {memory['verdict']}", out.stderr[-3000:]
    assert "[openrlhf-speed] memory plan" in lines


def test_7b_recipe_without_offload_on_2_actor_gpus_names_the_fix(inputs):
    """ADAM_OFFLOAD=0 with 2 actor GPUs: 18 B x 7.6e9 parameters / 2 GPUs of Adam states and
    fp32 copies does not fit an 80 GB GPU; the plan says so and names the flag."""
    name = "train_speed_rloo_qwen7b.sh"
    out = run_script(name, script_env(name, inputs, ADAM_OFFLOAD="0", ACTOR_GPUS="2"), "--dry_run")
    memory = plan_of(out)["resources"]["memory"]
    verdict = out.stderr.strip().splitlines()[-1]
    assert verdict == f"verdict: {memory['verdict']}"
    assert verdict.startswith("verdict: does not fit: actor needs ") and "fix: --ds.adam_offload (" in verdict, verdict


def check_megatron_plan(recipe: str, config: dict, resources: dict) -> None:
    """The Megatron layout the dry run planned, and the header's arithmetic for it: the flags
    it names, the data-parallel size, the parameter count and the per-GPU state (18 B per
    parameter over tp x pp: bf16 weights, fp32 main gradients and master weights, Adam m and
    v; no distributed optimizer, so nothing is divided by dp)."""
    text = (SCRIPTS / recipe).read_text()
    header = text[: text.index("set -euo pipefail")]
    mg = config["megatron"]
    tp, pp = mg["tp"], mg["pp"]
    dp = resources["actor"] // (tp * pp)
    assert resources["megatron"] == {"tp": tp, "pp": pp, "dp": dp}
    assert tp * pp * dp == resources["actor"] == config["actor"]["num_nodes"] * config["actor"]["num_gpus_per_node"]
    assert config["ds"]["tensor_parallel_size"] == tp * pp  # OpenRLHF's ranks per model replica
    for flag in ("--backend megatron", f"--megatron.tp {tp}", f"--megatron.pp {pp}",
                 f"--megatron.recompute {mg['recompute']}", f"--megatron.dtype {mg['dtype']}",
                 f"--train.micro_batch_size {config['train']['micro_batch_size']}",
                 f"--rollout.micro_batch_size {config['rollout']['micro_batch_size']}"):
        assert flag in header, flag
    assert f"data parallel {resources['actor']} / ({tp} x {pp}) = {dp}" in header
    cfg = json.loads((Path(config["actor"]["model_name_or_path"]) / "config.json").read_text())
    params = qwen2_params(cfg)
    assert f"{params / 1e9:.2f}e9" in header, params
    assert f"18 B x {params / 1e9:.1f}e9 / ({tp} x {pp}) = {18 * params / (tp * pp) / 1e9:.1f} GB" in header
