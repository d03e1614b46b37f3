"""Preflight checks of flags, datasets and the reward file (cli/preflight.py), on plain
namespaces: what `openrlhf-speed train` checks in the driver before Ray starts."""

import json
from types import SimpleNamespace as NS

import pytest

from openrlhf_speed.cli import preflight


def make_args(dataset=None, label_key="answer", reward=None, **over):
    args = NS(
        rollout=NS(temperature=1.0, top_p=1.0, batch_size=4, micro_batch_size=1, n_samples_per_prompt=4,
                   max_new_tokens=64),
        eval=NS(temperature=0.6, n_samples_per_prompt=4, dataset=None),
        data=NS(max_len=512, max_samples=int(1e8), prompt_dataset=dataset, input_key="prompt", label_key=label_key),
        train=NS(batch_size=16, micro_batch_size=1, max_epochs=1, num_episodes=1),
        actor=NS(adam=NS(lr=1e-6), eps_clip=0.2), critic=NS(adam=NS(lr=9e-6)),
        algo=NS(kl=NS(init_coef=0.0)), vllm=NS(num_engines=1, tensor_parallel_size=1, gpu_memory_utilization=0.9),
        reward=NS(remote_url=reward),
    )
    for dotted, value in over.items():
        group, name = dotted.split("__")
        setattr(getattr(args, group), name, value)
    return args


@pytest.mark.parametrize("flag,value", [("rollout__temperature", -1.0), ("train__batch_size", -64),
                                        ("rollout__top_p", 1.5), ("rollout__max_new_tokens", 0),
                                        ("train__max_epochs", 0), ("actor__eps_clip", -0.1)])
def test_out_of_range_values_are_named(flag, value):
    errors = preflight.range_errors(make_args(**{flag: value}))
    assert len(errors) == 1 and errors[0].startswith(f"--{flag.replace('__', '.')} ")


def test_defaults_are_in_range():
    assert preflight.range_errors(make_args()) == []


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


GOOD = "".join(json.dumps({"prompt": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(8))


@pytest.mark.parametrize("name,text,expect", [
    ("malformed.jsonl", GOOD[:60] + '{"prompt": "x" "answer": "1"}\n', "line 2: invalid_json"),
    ("nolabel.jsonl", '{"prompt": "1+1?", "solution": "2"}\n', "line 1: missing_answer: no 'answer' key (keys: 'prompt', 'solution')"),
    ("empty.jsonl", "", "the file is empty"),
    ("emptylabel.jsonl", '{"prompt": "1+1?", "answer": ""}\n', "line 1: empty_answer"),
    ("csv.jsonl", "prompt,answer\n1+1?,2\n", "line 1: invalid_json"),
    ("utf16.jsonl", '{"prompt": "1+1?", "answer": "2"}\n'.encode("utf-16"), "line 1: invalid_utf8"),
    ("few.jsonl", GOOD.splitlines(True)[0], "only 1 usable prompts, fewer than --rollout.batch_size 4"),
])
def test_bad_dataset_is_one_line_naming_file_line_and_key(tmp_path, name, text, expect):
    path = write(tmp_path, name, text)
    errors = preflight.input_errors(make_args(path))
    assert len(errors) == 1 and expect in errors[0] and path in errors[0], errors
    assert "\n" not in errors[0] and "skip_invalid" not in errors[0]


def test_missing_file_and_unset_label_key(tmp_path):
    assert preflight.input_errors(make_args(str(tmp_path / "nope.jsonl"))) == [
        f"--data.prompt_dataset {tmp_path / 'nope.jsonl'}: no such file"]
    path = write(tmp_path, "good.jsonl", GOOD)
    errors = preflight.input_errors(make_args(path, label_key=None, reward="/r.py"))
    assert "--data.label_key is not set" in errors[0] and "'prompt', 'answer'" in errors[0]
    assert preflight.input_errors(make_args(path)) == []


def test_reward_file(tmp_path):
    ok = write(tmp_path, "ok.py", "def reward_func(queries, prompts, labels):\n    return 0\n")
    bad = write(tmp_path, "bad.py", "def reward_func(q, p, l)\n    return 0\n")
    none = write(tmp_path, "none.py", "def score(q, p, l):\n    return 0\n")
    assert preflight.reward_file_errors(ok) == []
    assert "line 1: syntax error" in preflight.reward_file_errors(bad)[0]
    assert "defines no top-level reward_func" in preflight.reward_file_errors(none)[0]
    assert "no such file" in preflight.reward_file_errors(str(tmp_path / "x.py"))[0]
    assert preflight.reward_file_errors("http://host/reward") == []


def test_optimizer_steps_per_training_step():
    args = make_args()
    assert preflight.optimizer_steps(args) == 1 and "WARNING" not in preflight.optimizer_steps_note(args)
    args = make_args(train__batch_size=4, train__max_epochs=2)
    assert preflight.optimizer_steps(args) == 8  # 4 prompts x 4 samples / 4 x 2 epochs
    assert "WARNING: more than one" in preflight.optimizer_steps_note(args)
    assert "--train.batch_size 16 and --train.max_epochs 1" in preflight.optimizer_steps_note(args)


def test_trainer_bounds_staleness_while_the_library_does_not():
    # SpeedConfig's default is the paper's unbounded algorithm; the trainer's flag bounds
    # what pre-fetching across weight syncs lets train (curriculum/config.py says why).
    import argparse

    from openrlhf_speed.cli.flags import add_speed_arguments
    from openrlhf_speed.curriculum import SpeedConfig
    from openrlhf_speed.curriculum.config import DEFAULT_MAX_STALENESS

    parser = argparse.ArgumentParser()
    add_speed_arguments(parser)
    assert parser.get_default("speed.max_staleness") == DEFAULT_MAX_STALENESS == 2
    assert SpeedConfig().max_staleness is None
