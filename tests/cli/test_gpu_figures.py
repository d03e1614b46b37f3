"""The GPU memory figures users size a node from are the memory plan's: every GiB/GB figure in
the README's GPU prerequisites, docs/gpu.md's host-RAM row and the 7B recipes' headers must be
one that the dry run of train_speed_rloo_qwen7b.sh prints, rounded as printed, and each of them
quotes the plan's host figures (the offloaded states and the node's total).

The dry run is the plan's config-only path: Qwen2.5-Math-7B's config.json (no weights), no GPU,
no engine; one run of it, about 15 s on 2 cores, most of it imports.
"""

import json
import os
import re
import subprocess

import pytest
from _util import REPO, VENV_BIN

RECIPE = "train_speed_rloo_qwen7b.sh"
HEADERS = sorted((REPO / "examples" / "scripts").glob("*qwen7b*.sh"))
# Qwen/Qwen2.5-Math-7B's config.json (its architecture fields).
QWEN25_MATH_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 4096, "max_window_layers": 28,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "use_sliding_window": False,
    "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "bfloat16", "bos_token_id": 151643,
    "eos_token_id": 151643,
}
# Variables the recipe reads: cleared so the caller's environment cannot change the plan.
SCRIPT_VARS = ("MODEL_PATH", "DATA_PATH", "EVAL_PATH", "EVAL_STEPS", "OUT", "VENV", "INPUT_KEY", "LABEL_KEY",
               "EPISODES", "WARMUP_STEPS", "SAVE_STEPS", "ADAM_OFFLOAD", "MAX_STEPS", "RAY_ADDRESS", "PACKING",
               "OPENRLHF_SPEED_DEVICE", "GPUS_PER_NODE", "NNODES", "ACTOR_GPUS", "VLLM_TP")
# A figure in the docs: a number, a space, then GiB or GB ("A100/H100 80GB" is a card's name).
DOC_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) (GiB|GB)\b")
# What the plan prints: "170.2 GiB  ...", "= 216.5 of 256.0 GiB", "host RAM 256 GiB per node".
PLAN_FIGURE = re.compile(r"(\d+(?:\.\d+)?)(?= GiB| of \d+(?:\.\d+)? GiB)")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """(the readable plan the dry run printed, its JSON under resources.memory)."""
    root = tmp_path_factory.mktemp("gpu_figures")
    model = root / "qwen2.5-math-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_MATH_7B_CONFIG))
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(32)))
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS}
    env.update(MODEL_PATH=str(model), DATA_PATH=str(data), OUT=str(root / "out"), VENV=str(VENV_BIN.parent))
    out = subprocess.run(["bash", str(REPO / "examples" / "scripts" / RECIPE), "--dry_run"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stderr[out.stderr.index("[openrlhf-speed] memory plan"):]
    return text, json.loads(out.stdout[out.stdout.index("{"):])["resources"]["memory"]


def printed(text: str) -> set:
    return {float(x) for x in PLAN_FIGURE.findall(text)}


def host_figures(memory: dict) -> list:
    """The offloaded states and the node's total, as the plan prints them."""
    host = next(p for p in memory["parts"] if p["key"] == "host")
    return [f"{host['figures'][0]['nbytes'] / 2**30:.1f} GiB", f"{host['total'] / 2**30:.1f} GiB"]


def readme_prerequisites() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## On GPUs"):]
    return section[:section.index("```")]


def gpu_md_host_row() -> str:
    return next(line for line in (REPO / "docs" / "gpu.md").read_text().splitlines() if line.startswith("| host RAM |"))


def recipe_header(path) -> str:
    text = path.read_text()
    return text[:text.index("set -euo pipefail")]


SOURCES = {"README.md GPU prerequisites": readme_prerequisites, "docs/gpu.md host RAM row": gpu_md_host_row,
           **{f"{p.name} header": (lambda p=p: recipe_header(p)) for p in HEADERS}}


def test_the_7b_headers_are_all_checked():
    assert {p.name for p in HEADERS} >= {RECIPE, "train_rloo_qwen7b.sh", "train_speed_grpo_qwen7b.sh"}


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_figure_is_the_plans(source, plan):
    text, memory = plan
    figures = printed(text)
    doc = SOURCES[source]()
    for value, unit in DOC_FIGURE.findall(doc):
        assert unit == "GiB" and float(value) in figures, (
            f"{source}: {value} {unit} is no figure of the plan (`bash examples/scripts/{RECIPE} --dry_run` prints "
            f"{sorted(figures)} GiB)")
    for figure in host_figures(memory):
        assert figure in doc, f"{source} does not quote the plan's host figure {figure}"


def test_the_figures_are_what_deepspeed_estimates(plan):
    """The host figures the docs quote: DeepSpeed's 16 B per parameter x 1.5 for 7.62e9
    parameters, plus the HF export, 8 GPU processes and the object store."""
    _, memory = plan
    assert memory["model"]["params"] == 7_615_616_512 and memory["verdict"] == "fits"
    assert host_figures(memory) == ["170.2 GiB", "216.5 GiB"]
