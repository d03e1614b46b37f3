"""Splits and prompts of the embedded dataset: determinism, exact answers, disjoint splits,
prompt structure, mix apportionment and the gen-data command line."""

import ast
import json
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openrlhf_speed.data import DEFAULT_MIX, LEVELS, build_dataset, generate_splits, main_generate, render_prompt
from openrlhf_speed.data.arithmetic import shot_problems
from openrlhf_speed.data.build import apportion

BOXED = re.compile(r"\\boxed\{(\d+)\}$")
EXPR_IN_TEXT = re.compile(r"\d[\d +\-*/()]*\d|\d")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def value(expr):
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unexpected syntax in {expr!r}")
    return walk(ast.parse(expr, mode="eval"))


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("arith")
    summary = build_dataset(str(out), n_train=600, n_test=100, seed=7)
    return summary, read(out / "train.jsonl"), read(out / "test.jsonl")


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    for name in ("a", "b"):
        build_dataset(str(tmp_path / name), n_train=300, n_test=50, seed=3)
    build_dataset(str(tmp_path / "c"), n_train=300, n_test=50, seed=4)
    for f in ("train.jsonl", "test.jsonl", "info.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    for f in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes()


def test_rows_have_the_documented_fields(built):
    summary, train, test = built
    assert len(train) == 600 and len(test) == 100
    for split, rows in (("train", train), ("test", test)):
        assert [r["id"] for r in rows] == [f"{split}-{i:05d}" for i in range(len(rows))]
        for r in rows:
            assert set(r) == {"prompt", "answer", "question", "level", "id", "datasource", "meta"}
            assert r["datasource"] == "arith" and r["level"] in LEVELS
            assert r["answer"] == str(int(r["answer"])) and int(r["answer"]) >= 0
    assert summary["splits"]["train"]["rows"] == 600


def test_answers_are_correct(built):
    _, train, test = built
    for r in train + test:
        if r["level"].startswith("word_"):
            expr = r["meta"]["expr"]
            assert all(str(x) in r["question"] for x in r["meta"]["operands"])
        else:
            expr = EXPR_IN_TEXT.findall(r["question"])[0].strip()
            assert expr == r["meta"]["expr"]
        assert value(expr) == int(r["answer"]), r


def test_no_duplicates_and_splits_disjoint(built):
    _, train, test = built
    for rows in (train, test):
        assert len({r["question"] for r in rows}) == len(rows)
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    # Stronger: no arithmetic problem of a level is shared, whatever the phrasing or story,
    # and the test split holds each at most once.
    def keys(rows):
        return [(r["level"], r["meta"]["expr"]) for r in rows]
    assert not set(keys(train)) & set(keys(test))
    assert len(set(keys(test))) == len(test)


def test_prompts_alternate_and_end_with_the_question(built):
    _, train, test = built
    for r in train + test:
        msgs = r["prompt"]
        assert len(msgs) == 2 * 2 + 1
        assert [m["role"] for m in msgs] == ["user", "assistant"] * 2 + ["user"]
        final = msgs[-1]["content"]
        assert final.startswith(r["question"]) and "\\boxed{}" in final
        for user, assistant in zip(msgs[0:-1:2], msgs[1::2]):
            assert user["content"] != final  # an example is never the question itself
            example_q = user["content"].split("\n")[0]
            assert example_q != r["question"]
            if not r["level"].startswith("word_"):
                assert EXPR_IN_TEXT.findall(example_q)[0].strip() != r["meta"]["expr"]
            (boxed,) = BOXED.findall(assistant["content"])
            example = next(p for p in shot_problems(r["level"]) if p.question == example_q)
            assert int(boxed) == example.answer == value(example.expr)


def test_shots_change_prompts_but_not_questions(tmp_path):
    questions = {}
    for shots in (0, 1, 4):
        summary = build_dataset(str(tmp_path / str(shots)), n_train=120, n_test=20, seed=1, shots=shots)
        rows = read(summary["splits"]["train"]["path"])
        assert all(len(r["prompt"]) == 2 * shots + 1 for r in rows)
        questions[shots] = [r["question"] for r in rows]
    assert questions[0] == questions[1] == questions[4]


def test_zeroshot_style_and_custom_instruction():
    msgs = render_prompt("What is 2 + 2?", "sum_small", shots=2, style="zeroshot", instruction="Solve. Box it.")
    assert msgs == [{"role": "user", "content": "Solve. Box it.\nWhat is 2 + 2?"}]
    msgs = render_prompt("What is 2 + 2?", "sum_small", instruction="Q: {question} A in \\boxed{}")
    assert msgs[-1]["content"] == "Q: What is 2 + 2? A in \\boxed{}" and len(msgs) == 5


def test_user_question_equal_to_an_example_is_replaced_by_the_spare():
    example = shot_problems("mul_1x1")[0]
    msgs = render_prompt(example.question, "mul_1x1", shots=4)
    assert len(msgs) == 9 and all(example.question not in m["content"] for m in msgs[:-1])


def test_render_prompt_rejects_bad_arguments():
    with pytest.raises(ValueError, match="style"):
        render_prompt("x", "sum_small", style="nope")
    with pytest.raises(ValueError, match="shots"):
        render_prompt("x", "sum_small", shots=9)
    with pytest.raises(ValueError, match="level"):
        render_prompt("x", None)


def test_test_split_does_not_depend_on_n_train():
    a = generate_splits(200, 60, seed=5)["test"]
    b = generate_splits(900, 60, seed=5)["test"]
    assert a == b


def test_a_test_mix_weights_the_test_split_alone_and_keeps_it_whatever_the_train_mix():
    # The proving ground trains on a harder mix than it evaluates on; its held-out split, and
    # so the supervision that leaves that split's keys out, must not move with the train mix.
    held_out = {"sum_2digit": 3, "mul_2x2": 1}
    a = generate_splits(400, 40, {"sum_2digit": 1, "mul_2x2": 1}, seed=0, test_mix=held_out)
    b = generate_splits(400, 40, {"sum_2digit": 1, "mul_2x2": 3}, seed=0, test_mix=held_out)
    assert a["test"] == b["test"] == generate_splits(400, 40, held_out, seed=0)["test"]
    assert a["report"]["test"]["per_level"] == {"sum_2digit": 30, "mul_2x2": 10}
    assert b["report"]["train"]["per_level"] == {"sum_2digit": 100, "mul_2x2": 300}
    assert not {p.key for p in b["train"]} & {p.key for p in b["test"]}
    with pytest.raises(ValueError, match="mix_2x2"):
        generate_splits(10, 10, held_out, test_mix={"mix_2x2": 1})


def test_counts_follow_the_mix_when_no_level_runs_out():
    result = generate_splits(400, 40, {"sum_2digit": 3, "mul_2x2": 1}, seed=0)
    assert result["report"]["train"]["per_level"] == {"sum_2digit": 300, "mul_2x2": 100}
    assert result["report"]["test"]["per_level"] == {"sum_2digit": 30, "mul_2x2": 10}
    assert result["report"]["train"]["exhausted"] == []


def test_a_used_up_level_passes_its_share_on():
    # sum_small: 25 keys - 5 worked examples = 20; test may take ceil(0.2 * 20) = 4 keys;
    # train gets the other 16 keys in 8 phrasings = 128 questions.
    result = generate_splits(400, 100, {"sum_small": 1, "sum_2digit": 1}, seed=0)
    train, test = result["report"]["train"], result["report"]["test"]
    assert train["per_level"] == {"sum_small": 128, "sum_2digit": 272} and train["rows"] == 400
    assert test["per_level"] == {"sum_small": 4, "sum_2digit": 96}
    assert train["exhausted"] == ["sum_small"] and test["exhausted"] == ["sum_small"]
    alone = generate_splits(500, 10, {"sum_small": 1}, seed=0)["report"]["train"]
    assert alone["rows"] == 128 and alone["requested"] == 500


def test_apportion_hand_cases():
    assert apportion(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert apportion(7, {"a": 0.5, "b": 0.25, "c": 0.25}) == {"a": 3, "b": 2, "c": 2}
    assert apportion(0, {"a": 1}) == {"a": 0}


@given(n=st.integers(0, 5000), weights=st.lists(st.floats(0.001, 100), min_size=1, max_size=11))
def test_apportion_sums_to_n_and_stays_within_one_of_the_quota(n, weights):
    named = {f"l{i}": w for i, w in enumerate(weights)}
    counts = apportion(n, named)
    assert sum(counts.values()) == n
    total = sum(weights)
    for name, w in named.items():
        assert abs(counts[name] - n * w / total) < 1 + 1e-9


def test_mix_validation():
    with pytest.raises(ValueError, match="nope"):
        generate_splits(10, 0, {"nope": 1})
    with pytest.raises(ValueError, match=">= 0"):
        generate_splits(10, 0, {"sum_small": -1})
    with pytest.raises(ValueError, match="no level"):
        generate_splits(10, 0, {"sum_small": 0})


def test_default_mix_covers_every_level():
    assert list(DEFAULT_MIX) == list(LEVELS)
    assert abs(sum(DEFAULT_MIX.values()) - 1) < 1e-9 and min(DEFAULT_MIX.values()) > 0


def test_main_generate_prints_counts_per_level_and_split(tmp_path, capsys):
    out = tmp_path / "d"
    assert main_generate(["--out", str(out), "--n_train", "50", "--n_test", "10", "--seed", "2",
                          "--shots", "1", "--levels", "sum_2digit=3", "mul_1x1"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^sum_2digit\s+\d+\s+\d+$", text, re.M) and re.search(r"^mul_1x1\s+\d+\s+\d+$", text, re.M)
    assert re.search(r"^total\s+50\s+10$", text, re.M)
    rows = read(out / "train.jsonl")
    assert {r["level"] for r in rows} == {"sum_2digit", "mul_1x1"} and len(rows[0]["prompt"]) == 3
    info = json.loads((out / "info.json").read_text())
    assert info["mix"] == {"mul_1x1": DEFAULT_MIX["mul_1x1"], "sum_2digit": 3.0}


def test_main_generate_lists_levels_and_rejects_unknown_ones(tmp_path, capsys):
    assert main_generate(["--list_levels"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in LEVELS)
    with pytest.raises(SystemExit):
        main_generate(["--out", str(tmp_path), "--levels", "nope"])
    assert "unknown level 'nope'" in capsys.readouterr().err
