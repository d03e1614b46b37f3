"""A rerun that resumes reuses the whole-dataset passes of its first start (data/check_cache.py):
the train command's row check and the SPEED driver's prompt-length count, only while what they
were computed from is unchanged."""

import json
import os
from types import SimpleNamespace as NS

import pytest

from openrlhf_speed.cli import preflight
from openrlhf_speed.data import check_cache
from openrlhf_speed.proving import resolve_model_or_proving
from openrlhf_speed.rollout import speed_generator
from openrlhf_speed.rollout.speed_generator import drop_too_long


def make_args(tmp_path, dataset, load_enable=True, save_steps=5, max_len=256):
    return NS(
        data=NS(prompt_dataset=dataset, input_key="prompt", label_key="answer", prompt_split="train",
                apply_chat_template=True, input_template=None, max_samples=int(1e8), max_len=max_len),
        rollout=NS(batch_size=2, max_new_tokens=64), actor=NS(model_name_or_path=resolve_model_or_proving("proving")),
        reward=NS(remote_url=None), eval=NS(dataset=None),
        ckpt=NS(path=str(tmp_path / "ckpt"), load_enable=load_enable, save_steps=save_steps), dry_run=False)


def write_rows(tmp_path, rows):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
ROWS += [{"prompt": "x " * 300, "answer": "0"}] * 2 + ROWS[:1]  # 2 over the 192-token limit, a duplicate


@pytest.fixture
def reads(monkeypatch):
    """How many times the train command read the dataset's rows."""
    calls = []
    real = preflight.load_dataset_rows

    def counting(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(preflight, "load_dataset_rows", counting)
    return calls


def test_a_rerun_reuses_the_check_of_an_unchanged_dataset(tmp_path, reads):
    path = write_rows(tmp_path, ROWS)
    errors, notes = preflight.input_checks(make_args(tmp_path, path, load_enable=False))
    assert errors == [] and len(reads) == 1
    assert any("2 of 9 prompts are longer than 192" in n for n in notes) and any("duplicate" in n for n in notes)
    assert os.path.isfile(tmp_path / "ckpt" / check_cache.DATASET_CHECK)

    errors, again = preflight.input_checks(make_args(tmp_path, path))
    assert errors == [] and len(reads) == 1  # not read again
    assert again[:-1] == notes and "rows not read again" in again[-1]


@pytest.mark.parametrize("change", ["touch", "edit", "max_len", "no_load_enable", "dry_run"])
def test_any_change_reads_the_rows_again(tmp_path, reads, change):
    path = write_rows(tmp_path, ROWS)
    preflight.input_checks(make_args(tmp_path, path))
    args = make_args(tmp_path, path, max_len=1024 if change == "max_len" else 256,
                     load_enable=change != "no_load_enable")
    if change == "touch":
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    elif change == "edit":  # a broken row, which a reuse would miss
        with open(path, "a") as f:
            f.write('{"prompt": "no answer"}\n')
    args.dry_run = change == "dry_run"
    errors, notes = preflight.input_checks(args)
    assert len(reads) == 2 and not any("not read again" in n for n in notes)
    if change == "edit":
        assert len(errors) == 1 and "line 10: missing_answer" in errors[0]
    if change == "max_len":  # the notes come from this check, not the first one's
        assert not any("longer than" in n for n in notes)


def test_no_record_without_checkpoints_nor_after_a_failed_check(tmp_path, reads):
    path = write_rows(tmp_path, ROWS)
    preflight.input_checks(make_args(tmp_path, path, save_steps=-1))
    assert not os.path.exists(tmp_path / "ckpt")  # the folder is the checkpoints'; none are saved
    bad = write_rows(tmp_path, ROWS[:1])  # fewer rows than the batch
    errors, _ = preflight.input_checks(make_args(tmp_path, bad))
    assert errors and not os.path.exists(tmp_path / "ckpt" / check_cache.DATASET_CHECK)
    preflight.input_checks(make_args(tmp_path, bad))
    assert len(reads) == 3


def test_the_driver_reuses_its_prompt_length_count_only_for_the_same_prompts(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_or_proving("proving"))
    prompts = [f"Q: {i} + 1 = ?\nA:" for i in range(5)] + ["y" * 300]
    labels = [str(i) for i in range(6)]
    args = make_args(tmp_path, None)
    first = drop_too_long(prompts, labels, tok, 200, args)
    assert first[2] == [5] and os.path.isfile(tmp_path / "ckpt" / check_cache.TOO_LONG)

    counted = []
    real = speed_generator.token_counts
    monkeypatch.setattr(speed_generator, "token_counts", lambda texts, t: counted.append(len(texts)) or real(texts, t))
    assert drop_too_long(prompts, labels, tok, 200, args) == first and counted == []  # reused
    assert drop_too_long(prompts, labels, tok, 400, args)[2] == [] and counted == [6]  # another limit
    changed = prompts[:5] + ["short"]
    assert drop_too_long(changed, labels, tok, 200, args)[2] == [] and counted == [6, 6]  # another prompt
    args.ckpt.load_enable = False  # a fresh start counts afresh
    assert drop_too_long(changed, labels, tok, 200, args)[2] == [] and counted == [6, 6, 6]


def test_an_unwritable_or_corrupt_record_is_recomputed_not_an_error(tmp_path, reads):
    path = write_rows(tmp_path, ROWS)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / check_cache.DATASET_CHECK).write_text("{not json")
    assert preflight.input_checks(make_args(tmp_path, path))[0] == [] and len(reads) == 1
    blocked = make_args(tmp_path, path)
    blocked.ckpt.path = str(tmp_path / "file_not_folder" / "ckpt")
    (tmp_path / "file_not_folder").write_text("")
    assert preflight.input_checks(blocked)[0] == [] and len(reads) == 2
