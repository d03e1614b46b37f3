"""Answer extraction, gold normalisation and prompt/response splitting (pure, no workers)."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_speed.rewards.extract import (
    MAX_ANSWER_CHARS,
    extract_answer,
    extract_boxed,
    normalize_gold,
    parse_plain_number,
    split_response,
    strip_special_tokens,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so the answer is \boxed{5}.", "5"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
        (r"first \boxed{1} then \boxed{2}", "2"),  # the last box wins
        (r"$\boxed 7$", "7"),
        (r"\fbox{42}", "42"),
        (r"\boxed{ 12 }", "12"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces are literal
        (r"\boxed{3} and later \boxed{4", "3"),  # unclosed last box: earlier complete one
        (r"the sum is 12 \boxed{", "12"),  # only an unclosed box: last number
        (r"\boxed{} but 9", "9"),  # empty box: last number
        (r"\boxedfoo{3}", "3"),  # not a box command; last number
    ],
)
def test_extract_boxed_cases(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3 apples and 4 pears make 7", "7"),
        ("The answer is 12.", "12"),
        ("it is -3", "-3"),
        ("5-3 = 2", "2"),
        ("x-3", "3"),  # a minus after a letter is subtraction, not a sign
        ("total: 1,234 dollars", "1234"),
        ("total: 1,234,567.25", "1234567.25"),
        ("the list 1,2,3", "3"),
        ("3.75 m", "3.75"),
        ("it is 3/4", "3/4"),
        ("about .5", ".5"),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", ["", "no digits here", r"\boxed{", "{{{{", None, 12, b"5", {"a": 1}])
def test_extract_none(text):
    assert extract_answer(text) is None


def test_extract_adversarial_sizes_are_handled():
    digits = "9" * 10**6
    assert extract_answer(f"answer {digits}") == digits
    assert extract_answer(r"\boxed{" * 100_000) is None  # unbalanced, quadratic if naive
    nested = r"\frac{" * 5000 + "1" + "}{2}" * 5000
    assert extract_answer(r"\boxed{" + nested + "}") == nested
    assert extract_answer("1," * 200_000) == "1"


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_extract_never_raises(text):
    out = extract_answer(text)
    assert out is None or isinstance(out, str)


@given(st.integers(min_value=-10**12, max_value=10**12), st.text(alphabet="abc .,:\n", max_size=30))
@settings(max_examples=200, deadline=None)
def test_extract_last_integer_roundtrip(n, filler):
    assert parse_plain_number(extract_answer(f"{filler} = {n}")) == n


@given(st.integers(min_value=0, max_value=6))
def test_extract_nested_boxes(depth):
    inner = "{" * depth + "x" + "}" * depth
    assert extract_boxed(r"pre \boxed{" + inner + "} post") == inner


@pytest.mark.parametrize(
    "text, value",
    [("12", 12), ("12.0", 12), ("-3", -3), ("1,234", 1234), ("3/4", Fraction(3, 4)), ("0.75", Fraction(3, 4)),
     ("$5$", 5), (" 7 ", 7), ("5.", 5), (".5", Fraction(1, 2))],
)
def test_parse_plain_number(text, value):
    assert parse_plain_number(text) == value


@pytest.mark.parametrize("text", [r"\frac{1}{2}", "x=5", "1/0", "1e5", "12,34", "", "9" * (MAX_ANSWER_CHARS + 1)])
def test_parse_plain_number_rejects(text):
    assert parse_plain_number(text) is None


@pytest.mark.parametrize(
    "label, gold",
    [("12", "12"), (12, "12"), (0.5, "0.5"), ("$\\frac12$", "\\frac12"), (r"so \boxed{7}", "7"), (b"3", "3"),
     (None, None), (True, None), ({"a": 1}, None), ("  ", None)],
)
def test_normalize_gold(label, gold):
    assert normalize_gold(label) == gold


@pytest.mark.parametrize(
    "tail", ["<|im_end|>", "</s>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>\n<|endoftext|>", "<｜end▁of▁sentence｜>"]
)
def test_strip_special_tokens(tail):
    assert strip_special_tokens(r"answer \boxed{3}" + tail) == r"answer \boxed{3}"


CHATML_PROMPT = (
    "<|im_start|>system\nSolve it.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n2+2=4, \\boxed{4}<|im_end|>\n"
    "<|im_start|>user\nWhat is 3+5?<|im_end|>\n<|im_start|>assistant\n"
)


def test_split_verbatim_prefix():
    assert split_response(CHATML_PROMPT + "It is 8.<|im_end|>", CHATML_PROMPT) == "It is 8."


def test_split_whitespace_normalised_decode():
    query = CHATML_PROMPT.replace("2+2=4, ", "2+2=4,").replace("\n", " \n") + "It is 8.<|im_end|>"
    assert split_response(query, CHATML_PROMPT).strip() == "It is 8."


def test_split_truncated_prompt_uses_last_assistant_marker():
    query = CHATML_PROMPT[40:].replace("Solve", "solve") + "It is 8.</s>"
    assert split_response(query, "X" + CHATML_PROMPT) == "\nIt is 8."


def test_split_plain_prompt_tail():
    prompt = "Q: 2+2? A: \\boxed{4}\n" * 5 + "Q: 3+5? A:"
    query = "!" + prompt[30:] + " 8"  # left-truncated and not a prefix: tail rule
    assert split_response(query, prompt) == " 8"


@pytest.mark.parametrize("query, prompt", [("abc", "xyz"), (None, "p"), ("q", None), ("q", 5)])
def test_split_impossible(query, prompt):
    assert split_response(query, prompt) is None


def _strip_counted(text: str, monkeypatch) -> tuple:
    """strip_special_tokens(text), the lines it ran and the characters its token regex was
    given: an operation count, so linearity is checked without timing anything."""
    import sys

    from openrlhf_speed.rewards import extract

    code, real, count = strip_special_tokens.__code__, extract._SPECIAL_TOKEN_RE, {"lines": 0, "chars": 0}

    class CountingRegex:
        def fullmatch(self, s, pos, endpos):
            count["chars"] += endpos - pos
            return real.fullmatch(s, pos, endpos)

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None
        count["lines"] += event == "line"
        return trace

    monkeypatch.setattr(extract, "_SPECIAL_TOKEN_RE", CountingRegex())
    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        result = strip_special_tokens(text)
    finally:
        sys.settrace(previous)
    return result, count["lines"], count["chars"]


def test_strip_special_tokens_keeps_content_and_is_linear(monkeypatch):
    assert strip_special_tokens("x [1] <b>") == "x [1] <b>"  # not special tokens
    assert strip_special_tokens("a" + " " * 10**6 + "b") == "a" + " " * 10**6 + "b"
    assert strip_special_tokens("ok" + "<|im_end|>\n" * 10**5) == "ok"
    # Operation counts at sizes k, 2k, 4k: a cost linear in the size has equal steps per
    # doubling, twice as large (a quadratic one quadruples), and the regex sees each token once.
    tokens = [_strip_counted("ok" + "<|im_end|>\n" * k, monkeypatch) for k in (500, 1000, 2000)]
    assert [r[0] for r in tokens] == ["ok"] * 3
    assert [r[2] for r in tokens] == [10 * 500, 10 * 1000, 10 * 2000]  # len("<|im_end|>") = 10
    lines = [r[1] for r in tokens]
    assert lines[2] - lines[1] == 2 * (lines[1] - lines[0]) > 0, lines
    spaces = [_strip_counted("a" + " " * m, monkeypatch) for m in (500, 1000, 2000)]
    lines = [r[1] for r in spaces]
    assert [r[0] for r in spaces] == ["a"] * 3 and lines[2] - lines[1] == 2 * (lines[1] - lines[0]) > 0, lines
    # Content after a long whitespace run: nothing to strip, so as few steps as for "ab".
    assert _strip_counted("a" + " " * 10**6 + "b", monkeypatch)[1:] == _strip_counted("ab", monkeypatch)[1:]
