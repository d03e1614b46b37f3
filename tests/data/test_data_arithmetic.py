"""Levels of the arithmetic generator: answers re-derived independently, operand ranges,
level sizes, worked examples, determinism."""

import ast
import random
import re
from collections import Counter
from fractions import Fraction
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_speed.data import arithmetic
from openrlhf_speed.data.arithmetic import LEVELS, PHRASINGS, problem_stream, shot_problems

WORD_LEVELS = ("word_1step", "word_2step")
EXPR_LEVELS = tuple(name for name in LEVELS if name not in WORD_LEVELS)
EXPR_IN_TEXT = re.compile(r"\d[\d +\-*/()]*\d|\d")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def value(expr: str) -> Fraction:
    """Exact value of an expression of integers, + - * / and parentheses; nothing else parses."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unexpected syntax in {expr!r}")
    return walk(ast.parse(expr, mode="eval"))


def expr_of(question: str) -> str:
    (expr,) = EXPR_IN_TEXT.findall(question)
    return expr.strip()


def operands_and_ops(expr: str):
    tokens = expr.split()
    return [int(t) for t in tokens[::2]], tokens[1::2]


def test_evaluator_hand_cases():
    assert arithmetic._evaluate((7, 3, 4), ("+", "*")) == 19
    assert arithmetic._evaluate((8, 2, 3), ("-", "*")) == 2
    assert arithmetic._evaluate((8, 2, 3), ("*", "-")) == 13
    assert arithmetic._evaluate((9, 4, 2), ("-", "-")) == 3  # left to right
    assert value("(5 + 7) / 4") == 3


def test_worked_solutions_hand_cases():
    rng = random.Random(0)
    p = arithmetic._expr_problem("sum_2digit", rng, (23, 45), "+", arithmetic._split_second(23, "+", 45, 10))
    assert p.solution == "23 + 45 = 23 + 40 + 5 = 63 + 5 = 68. \\boxed{68}"
    p = arithmetic._expr_problem("addsub_3digit", rng, (512, 247), "-", arithmetic._split_second(512, "-", 247, 100))
    assert p.solution == "512 - 247 = 512 - 200 - 47 = 312 - 47 = 265. \\boxed{265}"
    assert p.answer == 265 and p.key == "512 - 247" and "512 - 247" in p.question


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_expression_answers_match_question_text(seed):
    rng = random.Random(seed)
    for name in EXPR_LEVELS:
        for _ in range(20):
            p = LEVELS[name].draw(rng)
            expr = expr_of(p.question)
            assert expr == p.key == p.expr
            assert value(expr) == p.answer and isinstance(p.answer, int) and p.answer >= 0
            assert p.question in {f.format(e=expr) for f in PHRASINGS}


def _carry_free(a, op, b):
    return a % 10 + b <= 9 if op == "+" else a % 10 >= b


RANGE_CHECKS = {
    "sum_small": lambda xs, ops: ops == ["+"] and all(1 <= x <= 5 for x in xs),
    "sum_1digit": lambda xs, ops: ops == ["+"] and all(1 <= x <= 9 for x in xs) and max(xs) >= 6,
    "mul_1x1": lambda xs, ops: ops == ["*"] and all(1 <= x <= 9 for x in xs),
    "sum_2digit": lambda xs, ops: ops == ["+"] and all(10 <= x <= 99 for x in xs),
    "addsub_2d1d_nocarry": lambda xs, ops: ops[0] in "+-" and 10 <= xs[0] <= 99 and 1 <= xs[1] <= 9
    and _carry_free(xs[0], ops[0], xs[1]),
    "mul_2x1": lambda xs, ops: ops == ["*"] and 10 <= xs[0] <= 99 and 2 <= xs[1] <= 9,
    "addsub_3digit": lambda xs, ops: ops[0] in "+-" and all(100 <= x <= 999 for x in xs),
    "mul_2x2": lambda xs, ops: ops == ["*"] and all(10 <= x <= 99 for x in xs),
    "expr_3term": lambda xs, ops: len(xs) == 3 and all(1 <= x <= 9 for x in xs)
    and sorted(ops) in (["*", "+"], ["*", "-"]),
}


@pytest.mark.parametrize("name", EXPR_LEVELS)
def test_operand_ranges(name):
    rng = random.Random(name)
    for _ in range(500):
        xs, ops = operands_and_ops(LEVELS[name].draw(rng).key)
        assert RANGE_CHECKS[name](xs, ops), (name, xs, ops)


@pytest.mark.parametrize("name", WORD_LEVELS)
def test_word_problem_answers_from_meta(name):
    rng = random.Random(name)
    kinds = Counter()
    for _ in range(500):
        p = LEVELS[name].draw(rng)
        meta = p.meta()
        assert value(meta["expr"]) == p.answer and isinstance(p.answer, int) and p.answer >= 0
        assert [int(x) for x in re.findall(r"\d+", meta["expr"])] == meta["operands"]
        numbers_in_text = Counter(int(x) for x in re.findall(r"\d+", p.question))
        assert not Counter(meta["operands"]) - numbers_in_text, (p.question, meta)
        n_ops = len(re.findall(r"[+\-*/]", meta["expr"]))
        assert n_ops == (1 if name == "word_1step" else 2)
        kinds[re.sub(r"\d+", "n", meta["expr"])] += 1
        assert p.key == f"{name}: {p.expr}" and p.solution.endswith(f"\\boxed{{{p.answer}}}")
    assert len(kinds) == 4  # every template family shows up


SMALL_LEVELS = [n for n in EXPR_LEVELS if LEVELS[n].n_keys <= 2210]


@lru_cache(maxsize=None)
def all_keys(name):
    """Every key of a level: its stream runs until it finds nothing new. 30 misses per key:
    the rarest expr_3term key has probability >= 1/(4 * 729) per draw, so stopping early
    has probability < exp(-30 * 2210 / 2916) ~ 1e-10."""
    stream = problem_stream(name, random.Random(1), unique_by="key", max_misses=30 * LEVELS[name].n_keys)
    return [p.key for p in stream]


@pytest.mark.parametrize("name", SMALL_LEVELS)
def test_small_levels_have_exactly_n_keys(name):
    keys = all_keys(name)
    assert len(keys) == len(set(keys)) == LEVELS[name].n_keys


def test_question_stream_gives_every_phrasing_once():
    questions = [p.question for p in problem_stream("sum_small", random.Random(2))]
    assert len(questions) == len(set(questions)) == 25 * len(PHRASINGS)


def test_levels_are_disjoint():
    seen = {}
    for name in SMALL_LEVELS:
        for key in all_keys(name):
            assert seen.setdefault(key, name) == name, (key, seen[key], name)


def test_exclude_keys_are_never_drawn():
    excluded = {p.key for p in problem_stream("sum_small", random.Random(4), unique_by="key") if p.answer > 6}
    keys = {p.key for p in problem_stream("sum_small", random.Random(5), exclude_keys=excluded)}
    assert keys and not keys & excluded and len(keys) + len(excluded) == 25


def test_streams_are_deterministic_and_leave_global_rng_alone():
    random.seed(123)
    state = random.getstate()
    for name in LEVELS:
        a = [p.question for _, p in zip(range(50), problem_stream(name, random.Random("x")))]
        b = [p.question for _, p in zip(range(50), problem_stream(name, random.Random("x")))]
        assert a == b
    assert random.getstate() == state


@pytest.mark.parametrize("name", list(LEVELS))
def test_shot_problems_are_fixed_distinct_and_correct(name):
    shots = shot_problems(name)
    assert len(shots) == arithmetic.MAX_SHOTS + 1 and len({p.key for p in shots}) == len(shots)
    for p in shots:
        assert value(p.expr) == p.answer
        assert p.solution.endswith(f"\\boxed{{{p.answer}}}") and len(p.solution) < 200
    assert {p.key for p in shots} <= arithmetic.shot_keys()


def test_unknown_level_lists_the_levels():
    with pytest.raises(ValueError, match="sum_small"):
        arithmetic.get_level("nope")
