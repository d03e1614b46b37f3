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


@pytest.mark.parametrize("max_num,save_steps,errors", [(1, 2, 1), (2, 2, 0), (1, -1, 0)])
def test_one_kept_checkpoint_is_refused_while_checkpoints_are_saved(max_num, save_steps, errors):
    """OpenRLHF deletes the older checkpoints before writing the next: with 1 kept, a failed
    save leaves nothing to resume from (docs/long_runs.md)."""
    args = make_args()
    args.ckpt = NS(max_num=max_num, save_steps=save_steps)
    out = preflight.range_errors(args)
    assert len(out) == errors and all(e.startswith("--ckpt.max_num 1 is out of range: must be >= 2") for e in out)


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
        f"--data.prompt_dataset {tmp_path / 'nope.jsonl'}: no such file or folder"]
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

    from openrlhf_speed.cli.speed_flags import add_speed_arguments
    from openrlhf_speed.curriculum import SpeedConfig
    from openrlhf_speed.curriculum.config import DEFAULT_MAX_STALENESS

    parser = argparse.ArgumentParser()
    add_speed_arguments(parser)
    assert parser.get_default("speed.max_staleness") == DEFAULT_MAX_STALENESS == 2
    assert SpeedConfig().max_staleness is None


class WordTokenizer:
    """One token per word; a chat template that adds two ('<user>' and '<assistant>')."""

    def encode(self, text, add_special_tokens=False):
        return text.split()

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "<user> " + " ".join(m["content"] for m in messages) + " <assistant>"


def test_an_empty_folder_is_refused_in_one_line_naming_it(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    errors = preflight.input_errors(make_args(str(folder)))
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith(f"--data.prompt_dataset {folder}: no dataset file in this folder (it is empty); "
                                "accepted: a .jsonl/.json/.parquet/.arrow/.csv file, a folder of such files")


def test_a_folder_of_shards_is_checked_like_a_file(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    write(folder, "train-00000-of-00002.jsonl", GOOD)
    write(folder, "train-00001-of-00002.jsonl", '{"prompt": "1+1?", "solution": "2"}\n')
    errors = preflight.input_errors(make_args(str(folder)))
    assert len(errors) == 1 and "train-00001-of-00002.jsonl, line 1: missing_answer" in errors[0], errors
    (folder / "train-00001-of-00002.jsonl").unlink()
    assert preflight.input_errors(make_args(str(folder))) == []


def make_speed_args(dataset, strategy="speed"):
    args = make_args(dataset, data__apply_chat_template=True)
    args.speed = NS(strategy=strategy)
    return args


def long_and_duplicate_rows(tmp_path):
    rows = [{"prompt": f"what is {i} plus one", "answer": str(i + 1)} for i in range(8)]  # 6 tokens templated
    rows += [{"prompt": " ".join(["word"] * 600), "answer": "1"}] * 3  # 602 tokens templated
    rows += [rows[0]] * 4
    return write(tmp_path, "mixed.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_dry_run_counts_over_long_prompts_and_says_what_happens(tmp_path):
    args = make_speed_args(long_and_duplicate_rows(tmp_path))
    errors, notes = preflight.check_dataset(args.data.prompt_dataset, args, 4, "--data.prompt_dataset",
                                            WordTokenizer())
    assert errors == []
    (note,) = [n for n in notes if "longer than" in n]
    assert note.startswith(f"--data.prompt_dataset {args.data.prompt_dataset}: 3 of 15 prompts are longer than "
                           "448 tokens after the chat template and tokenizer (the prompt limit, --data.max_len 512 - "
                           "--rollout.max_new_tokens 64; rows 9, 10, 11)")
    assert "the SPEED driver skips them, never sends them, and counts them (speed/prompts_too_long)" in note
    args.speed.strategy = "off"
    _, notes = preflight.check_dataset(args.data.prompt_dataset, args, 4, "--data.prompt_dataset", WordTokenizer())
    assert "OpenRLHF's generator truncates them from the left" in [n for n in notes if "longer than" in n][0]
    # Without a tokenizer nothing is counted, and the rows stay usable.
    assert preflight.check_dataset(args.data.prompt_dataset, args, 4, "--data.prompt_dataset")[1][0].startswith(
        "WARNING")


def test_dry_run_warns_of_duplicates_with_their_count(tmp_path):
    args = make_speed_args(long_and_duplicate_rows(tmp_path))
    _, notes = preflight.check_dataset(args.data.prompt_dataset, args, 4, "--data.prompt_dataset", WordTokenizer())
    (note,) = [n for n in notes if "duplicate" in n]
    # Rows 9-11 are over the limit (skipped, not counted here); row 1 repeats at rows 12-15.
    assert note.startswith(f"WARNING --data.prompt_dataset {args.data.prompt_dataset}: 4 duplicate prompts (1 "
                           "prompt repeated, one 5 times; repeats at rows 12, 13, 14, 15)")
    assert "screened k times per epoch" in note and "greso, speed_bayes" in note and "\n" not in note
    # The eval set is not warned about.
    assert preflight.check_dataset(args.data.prompt_dataset, args, 0, "--eval.dataset", WordTokenizer())[1] == []


def test_the_dry_run_counts_the_prompts_the_driver_skips(tmp_path):
    """Same tokenizer, same template, same limit: the dry run's count is what the SPEED driver
    drops at run time (rollout/speed_generator.drop_too_long, on OpenRLHF's rendered prompts)."""
    from openrlhf.datasets.prompts_dataset import preprocess_data
    from transformers import AutoTokenizer

    from openrlhf_speed.models.default_model import resolve_model
    from openrlhf_speed.rollout.speed_generator import drop_too_long

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(None))
    rows = [json.loads(line) for line in open(long_and_duplicate_rows(tmp_path))]
    # The limit falls inside the spread of lengths: prompts just under and just over it.
    rows += [{"prompt": " ".join(["seven"] * n), "answer": "7"} for n in range(400, 470, 10)]
    path = write(tmp_path, "lengths.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    args = make_speed_args(path)
    _, notes = preflight.check_dataset(path, args, 4, "--data.prompt_dataset", tokenizer)
    counted = int([n for n in notes if "longer than" in n][0].split(": ", 1)[1].split(" of ")[0])
    rendered = [preprocess_data(r, None, "prompt", "answer", tokenizer.apply_chat_template) for r in rows]
    limit = preflight.prompt_limit(args)[0]
    kept, labels, dropped = drop_too_long([p for p, _ in rendered], [a for _, a in rendered], tokenizer, limit)
    assert 3 < counted == len(dropped) < len(rows) and len(kept) == len(labels) == len(rows) - counted
