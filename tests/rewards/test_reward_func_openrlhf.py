"""The OpenRLHF adapter file: loaded by path, scores the response only, returns values
that OpenRLHF's own conversion turns into [1]-shaped tensors; and the real
SingleTurnAgentExecutor path end to end.

OpenRLHF is run, not imitated: the end-to-end script imports it without a fallback, so a
broken compat shim or a moved OpenRLHF function fails these tests instead of skipping them.
Only a Python without OpenRLHF installed skips them.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import openrlhf_speed.rewards as rewards_pkg

REWARD_FILE = Path(rewards_pkg.__file__).with_name("reward_func.py")
REPO_ROOT = REWARD_FILE.parents[2]

# Few-shot worked examples as earlier chat turns, each with its own boxed answer.
PROMPT = (
    "<|im_start|>system\nPut the final answer in \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n2+2=4, so \\boxed{4}.<|im_end|>\n"
    "<|im_start|>user\nWhat is 6/12?<|im_end|>\n<|im_start|>assistant\n6/12 = \\boxed{\\frac{1}{2}}<|im_end|>\n"
    "<|im_start|>user\nWhat is 3+5?<|im_end|>\n<|im_start|>assistant\n"
)


def load_like_openrlhf():
    """Exactly how SingleTurnAgentExecutor.__init__ loads a `.py` reward endpoint."""
    spec = importlib.util.spec_from_file_location("reward_func", str(REWARD_FILE))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


@pytest.fixture(scope="module")
def reward_func():
    return load_like_openrlhf()


@pytest.mark.parametrize(
    "response, label, reward, flags",
    [
        ("3+5 = 8, so \\boxed{8}.<|im_end|>", "8", 1.0, (0.0, 0.0, 0.0)),
        ("\\boxed{9}<|im_end|><|endoftext|>", "8", 0.0, (0.0, 0.0, 0.0)),
        # The prompt's examples box 4 and 1/2; a response without an answer must not
        # inherit them.
        ("I am not sure.<|im_end|>", "4", 0.0, (0.0, 0.0, 1.0)),
        ("I am not sure.<|im_end|>", "\\frac{1}{2}", 0.0, (0.0, 0.0, 1.0)),
        ("Half: \\boxed{0.5}<|im_end|>", "\\frac{1}{2}", 1.0, (0.0, 0.0, 0.0)),
    ],
)
def test_scores_response_only(reward_func, response, label, reward, flags):
    out = reward_func([PROMPT + response], [PROMPT], [label])
    assert out["rewards"] == reward and out["scores"] == reward
    logs = out["extra_logs"]
    assert (logs["reward_timeout"], logs["reward_error"], logs["reward_no_answer"]) == flags


def test_unlocatable_response_is_error(reward_func):
    out = reward_func(["something else entirely \\boxed{8}"], [PROMPT], ["8"])
    assert out["rewards"] == 0.0 and out["extra_logs"]["reward_error"] == 1.0


def test_malformed_arguments_do_not_raise(reward_func):
    for queries, prompts, labels in [([None], [PROMPT], ["8"]), ([b"x"], [None], [None]), ([{"q": 1}], [{}], [[]])]:
        out = reward_func(queries, prompts, labels)
        assert out["rewards"] == 0.0 and out["extra_logs"]["reward_error"] == 1.0


def test_batch_of_two_returns_lists(reward_func):
    out = reward_func([PROMPT + "\\boxed{8}", PROMPT + "no idea"], [PROMPT, PROMPT], ["8", "8"])
    assert out["rewards"] == [1.0, 0.0]
    assert out["extra_logs"]["reward_no_answer"] == [0.0, 1.0]


# Runs in a fresh interpreter: importing openrlhf (torch, transformers, vllm) takes tens of
# seconds, and compat.install() patches torch process-wide. No import here may fall back.
OPENRLHF_SCRIPT = r"""
import asyncio, json, sys
from types import SimpleNamespace

import openrlhf_speed.compat as compat
compat.install()  # the flash_attn fallback OpenRLHF imports on CPU
import torch
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.utils.agent import SingleTurnAgentExecutor

reward_file, prompt, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

class CharTokenizer:
    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        return {"input_ids": torch.tensor([[ord(c) for c in text]])}
    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))

class CannedEngine:
    def __init__(self, text):
        self.text = text
    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        ids = [ord(c) for c in self.text]
        out = SimpleNamespace(token_ids=ids, text=self.text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])

# The real consumer of the executor's output: what the trainer's samples generator (ours
# subclasses it) does with every finished request.
convert = SamplesGenerator._process_response_into_experience
consumer = f"{convert.__module__}.{convert.__qualname__}"

async def main():
    executor = SingleTurnAgentExecutor(remote_rm_url=reward_file)
    params = SimpleNamespace(max_tokens=512, logprobs=None)
    tokenizer = CharTokenizer()
    runs = [executor.execute(prompt, label, params, 8192, tokenizer, CannedEngine(r)) for r, label in cases]
    return await asyncio.gather(*runs)  # concurrent: reward_func runs in to_thread workers

describe = lambda x: {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""), "values": x.tolist()}
results = []
for out in asyncio.run(main()):
    exp = convert(None, out, max_len=8192)
    results.append({"reward": describe(exp.rewards), "score": describe(exp.scores),
                    "info": {k: describe(v) for k, v in exp.info.items()}})
print(json.dumps({"consumer": consumer, "results": results}))
"""
CASES = [
    ("3+5 = 8, so \\boxed{8}.<|im_end|>", "8"),
    ("I am not sure.<|im_end|>", "4"),
    ("\\boxed{\\dfrac{16}{2}}<|im_end|>", "8"),
    ("It is 7.<|im_end|>", "8"),
] * 2


@pytest.fixture(scope="module")
def through_openrlhf() -> dict:
    """CASES through OpenRLHF's SingleTurnAgentExecutor and its conversion to Experiences."""
    if importlib.util.find_spec("openrlhf") is None:  # never so in the project's venv
        pytest.skip("OpenRLHF is not installed in this Python")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", OPENRLHF_SCRIPT, str(REWARD_FILE), PROMPT, json.dumps(CASES)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["consumer"] == ("openrlhf.trainer.ppo_utils.samples_generator."
                                  "SamplesGenerator._process_response_into_experience")
    return report


def test_values_become_shape_1_tensors(reward_func, through_openrlhf):
    logged = set(reward_func([PROMPT + "\\boxed{8}<|im_end|>"], [PROMPT], ["8"])["extra_logs"])
    first = through_openrlhf["results"][0]  # CASES[0]: a correct answer
    assert first["reward"] == first["score"] == {"shape": [1], "dtype": "float32", "values": [1.0]}
    assert logged and logged <= set(first["info"])  # every logged value reaches the Experience
    for result in through_openrlhf["results"]:
        for key in logged | {"reward", "score"}:
            assert result["info"][key]["shape"] == [1] and result["info"][key]["dtype"] == "float32", key


def test_real_openrlhf_single_turn_executor(through_openrlhf):
    results = through_openrlhf["results"]
    assert [r["reward"]["values"][0] for r in results] == [1.0, 0.0, 1.0, 0.0] * 2
    assert [r["info"]["reward_no_answer"]["values"][0] for r in results] == [0.0, 1.0, 0.0, 0.0] * 2
    assert all(r["info"]["reward_timeout"]["values"] == [0.0] for r in results)
