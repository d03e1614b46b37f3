"""Validation of user jsonl datasets: errors name file, line and key; skip counts; the
prompt-length filter counts tokens through the chat template."""

import json

import pytest

from openrlhf_speed.data import DatasetError, build_dataset, load_jsonl_rows
from openrlhf_speed.data.loader import check_row, prompt_text, token_counts


class WhitespaceTokenizer:
    """One token per whitespace-separated word; the 'chat template' tags each turn."""

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        assert tokenize is False
        text = " ".join(f"<{m['role']}> {m['content']}" for m in messages)
        return text + (" <assistant>" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return list(range(len(text.split())))


def write(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return str(path)


GOOD = {"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5"}


def test_valid_rows_load_and_numeric_answers_become_strings(tmp_path):
    path = write(tmp_path, [GOOD, "", {"prompt": "What is 1 + 1?", "answer": 2}])
    rows, report = load_jsonl_rows(path)
    assert [r["answer"] for r in rows] == ["5", "2"]
    assert (report.kept, report.lines_read, report.blank_lines, report.answers_converted) == (2, 2, 1, 1)
    assert not report.dropped and "kept 2 of 2 rows" in report.summary()


@pytest.mark.parametrize(
    "bad, reason, key",
    [
        ({"answer": "5"}, "missing_prompt", "'prompt'"),
        ({"prompt": "What is 2 + 3?"}, "missing_answer", "'answer'"),
        ({"prompt": "What is 2 + 3?", "answer": "  "}, "empty_answer", "'answer'"),
        ({"prompt": "What is 2 + 3?", "answer": None}, "empty_answer", "'answer'"),
        ({"prompt": [{"role": "user"}], "answer": "5"}, "invalid_prompt", "'prompt'[0]"),
        ({"prompt": "", "answer": "5"}, "invalid_prompt", "'prompt'"),
        ("{not json", "invalid_json", "one JSON object per line"),
        ("[1, 2]", "not_an_object", "one JSON object per line"),
    ],
)
def test_a_broken_row_names_file_line_and_key(tmp_path, bad, reason, key):
    path = write(tmp_path, [GOOD, GOOD, bad, GOOD])
    with pytest.raises(DatasetError) as err:
        load_jsonl_rows(path)
    message = str(err.value)
    assert path in message and "line 3" in message and reason in message and key in message
    assert "skip_invalid=True" in message  # says what to do


def test_custom_keys_are_named_in_the_error(tmp_path):
    path = write(tmp_path, [{"question": "What is 2 + 3?", "answer": "5"}])
    with pytest.raises(DatasetError, match=r"line 1: missing_answer: no 'solution' key.*--data.label_key"):
        load_jsonl_rows(path, input_key="question", label_key="solution")


def test_invalid_utf8_is_reported_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"prompt": "\xff", "answer": "1"}\n')
    with pytest.raises(DatasetError, match="line 2: invalid_utf8"):
        load_jsonl_rows(str(path))


def test_skip_invalid_counts_reasons_and_lines(tmp_path):
    lines = [GOOD, {"answer": "1"}, "{oops", GOOD, {"prompt": "x", "answer": ""}, {"answer": "2"}]
    rows, report = load_jsonl_rows(write(tmp_path, lines), skip_invalid=True)
    assert len(rows) == report.kept == 2
    assert report.dropped == {"missing_prompt": 2, "invalid_json": 1, "empty_answer": 1}
    assert report.lines == {"missing_prompt": [2, 6], "invalid_json": [3], "empty_answer": [5]}
    assert "missing_prompt 2 (lines 2, 6)" in report.summary()
    assert report.as_dict()["dropped"]["invalid_json"] == 1


def count_prompt_tokens(prompt, tok, apply_chat_template=False):
    return token_counts([prompt_text(prompt, tok, apply_chat_template)], tok)[0]


def test_token_counts_go_through_the_chat_template():
    tok = WhitespaceTokenizer()
    # "<user> a b c <assistant>": 5 tokens; a plain string is counted as is unless wrapped.
    assert count_prompt_tokens([{"role": "user", "content": "a b c"}], tok) == 5
    assert count_prompt_tokens("a b c d", tok) == 4
    assert count_prompt_tokens("a b c d", tok, apply_chat_template=True) == 6


def test_prompts_over_the_limit_are_skipped_and_counted(tmp_path):
    lines = [
        {"prompt": [{"role": "user", "content": "a b c"}], "answer": "1"},  # 5 tokens
        {"prompt": [{"role": "user", "content": "a b c d"}], "answer": "2"},  # 6 tokens
        {"prompt": "a b c d e f", "answer": "3"},  # 6 tokens
        {"prompt": "a b", "answer": "4"},  # 2 tokens
    ]
    rows, report = load_jsonl_rows(write(tmp_path, lines), max_prompt_tokens=5, tokenizer=WhitespaceTokenizer())
    assert [r["answer"] for r in rows] == ["1", "4"]
    assert report.dropped == {"prompt_too_long": 2} and report.lines == {"prompt_too_long": [2, 3]}
    assert report.kept == 2 and report.max_prompt_tokens == 5


def test_limit_without_tokenizer_missing_file_and_empty_result_fail_clearly(tmp_path):
    path = write(tmp_path, [GOOD])
    with pytest.raises(ValueError, match="needs a tokenizer"):
        load_jsonl_rows(path, max_prompt_tokens=10)
    with pytest.raises(DatasetError, match="cannot read"):
        load_jsonl_rows(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetError, match="no usable rows"):
        load_jsonl_rows(path, max_prompt_tokens=1, tokenizer=WhitespaceTokenizer())


def test_check_row_accepts_both_prompt_shapes():
    assert check_row(GOOD) is None
    assert check_row({"prompt": "hi", "answer": 3}) is None
    assert check_row({"prompt": 3, "answer": "3"})[0] == "invalid_prompt"
    assert check_row({"prompt": "hi", "answer": True})[0] == "invalid_answer"


def test_generated_dataset_passes_validation(tmp_path):
    summary = build_dataset(str(tmp_path), n_train=50, n_test=10, seed=0)
    rows, report = load_jsonl_rows(summary["splits"]["train"]["path"])
    assert report.kept == 50 and not report.dropped and not report.answers_converted


def test_batched_counts_equal_one_encode_per_prompt():
    """token_counts (one call of the Rust backend for a list) counts what `encode` counts, on
    the bundled model's tokenizer and the proving model's, for text a chat template makes."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from openrlhf_speed.data.loader import token_counts
    from openrlhf_speed.models.default_model import resolve_model
    from openrlhf_speed.proving import resolve_model_or_proving

    texts = ["What is 2 + 3?", "  leading spaces and\ttabs\n\nnew lines", "unicode: é ü 中文 ∑ 🙂",
             "<|im_start|>user\nspecial tokens as text<|im_end|>\n<|im_start|>assistant\n",
             "Q: 12 * 7 + 3 = ?\nA:", "x" * 3000]
    for path in (resolve_model(None), resolve_model_or_proving("proving")):
        tok = AutoTokenizer.from_pretrained(path)
        assert tok.is_fast
        # As loaded, before any call of transformers' own (which resets them), with a padding and
        # a truncation a tokenizer file may set.
        tok.backend_tokenizer.enable_padding(pad_id=0, pad_token=tok.convert_ids_to_tokens(0))
        tok.backend_tokenizer.enable_truncation(max_length=8)
        counts = token_counts(texts, tok)
        assert tok.backend_tokenizer.padding["pad_id"] == 0 and tok.backend_tokenizer.truncation["max_length"] == 8
        expected = [len(tok.encode(t, add_special_tokens=False)) for t in texts]
        assert counts == expected and max(expected) > 100 and len(set(expected)) >= 4  # not one padded length
        # A tokenizer that adds a BOS: special tokens stay uncounted, as in `encode`.
        bos = tok.convert_ids_to_tokens(0)
        tok.backend_tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)])
        assert len(tok.encode(texts[0])) == expected[0] + 1 and token_counts(texts, tok) == expected


def test_length_batches_keep_file_order_and_line_numbers(tmp_path, monkeypatch):
    """Prompt lengths are counted in batches: rows stay in file order across a batch boundary,
    and dropped rows keep their own line numbers, beside rows dropped as invalid."""
    import openrlhf_speed.data.loader as loader

    monkeypatch.setattr(loader, "_LENGTH_BATCH", 3)
    lines = [{"prompt": " ".join(["w"] * (i % 4 + 1)), "answer": str(i)} for i in range(10)]
    lines[5] = {"prompt": "x"}  # no answer, line 6
    rows, report = load_jsonl_rows(write(tmp_path, lines), max_prompt_tokens=3, tokenizer=WhitespaceTokenizer(),
                                   skip_invalid=True)
    # i % 4 + 1 words: rows 3 and 7 (4 words) are over 3; row 5 is invalid.
    assert [r["answer"] for r in rows] == ["0", "1", "2", "4", "6", "8", "9"]
    assert report.lines == {"missing_answer": [6], "prompt_too_long": [4, 8]} and report.kept == 7
