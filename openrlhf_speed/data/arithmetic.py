"""Arithmetic problems at graded difficulty levels, with exact answers by construction.

Implements the embedded default training data of the CPU pipeline. SmolLM2-135M-Instruct
solves 1-digit sums most of the time, 2-digit ones now and then and word problems almost
never (STACK.md, "What things cost"), so a mix of levels spreads prompts over the whole
pass-rate range that SPEED screens for.

- A level is a function `draw(rng) -> Problem` that picks operands first and computes the
  answer from them with integer arithmetic; the rendered text is never evaluated. Every
  answer is a non-negative integer.
- A problem has a `key`, its arithmetic ("3 + 4"; "word_1step: 5 + 3" for a word problem,
  so two stories with the same numbers count as one problem), and a `question`, the key in
  one of several phrasings (or stories). Small levels have few keys (there are 25 sums of
  1-5), and the phrasings give them enough distinct questions for a training split; splits
  are kept disjoint by key (see build.py), so a test question is never a re-worded training
  one.
- Levels are disjoint by construction (sum_1digit leaves out the pairs of sum_small, ...), so
  a question text names its level.
- Determinism: all randomness comes from the `random.Random` passed in; the split builder
  seeds one per (seed, split, level). The global RNG is never touched.

Level names are stable: they are the `level` field of every row and the keys of a mix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

from openrlhf_speed.data.word_problems import one_step, two_step

# Wordings of a bare expression; each contains the expression verbatim, so a question can
# be checked by parsing it back. Varied wording also keeps the policy from keying on one form.
PHRASINGS = (
    "What is {e}?",
    "Compute {e}.",
    "Calculate {e}.",
    "Evaluate {e}.",
    "Find the value of {e}.",
    "Work out {e}.",
    "What does {e} equal?",
    "{e} = ?",
)

# Worked examples per level are the first MAX_SHOTS + 1 problems of a fixed stream (one
# spare, so skipping an example equal to a user-given question still leaves MAX_SHOTS).
# Their keys are left out of every split whatever `shots` is, so changing the number of
# shots changes the prompts but never the questions.
MAX_SHOTS = 4
_SHOT_SEED = "openrlhf_speed.data.shots"

# A stream ends after this many draws in a row that gave nothing new: the level is used up.
# With one question left among sum_small's 200 (25 keys x 8 phrasings), the chance of
# stopping before it is drawn is (199/200)^20000 ~ e^-100.
MAX_MISSES = 20_000


@dataclass(frozen=True)
class Problem:
    """One generated problem. `expr` evaluates (with + - * /) to `answer`; `solution` is a
    short worked answer ending in \\boxed{answer}, used when the problem is a worked example."""

    level: str
    key: str
    question: str
    answer: int
    expr: str
    operands: tuple[int, ...]
    solution: str

    def meta(self) -> dict:
        # Same shape for every level, so `datasets`' JSON reader infers one schema.
        return {"expr": self.expr, "operands": list(self.operands)}


@dataclass(frozen=True)
class Level:
    name: str
    description: str
    draw: Callable[[random.Random], Problem]
    n_keys: int | None  # distinct problems it can produce; None: too many to run out


def _apply(x: int, op: str, y: int) -> int:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    raise ValueError(f"unknown operator {op!r}")


def _evaluate(operands: tuple[int, ...], ops: tuple[str, ...]) -> int:
    """Value of `o0 op0 o1 op1 o2 ...` with * before + and -, left to right otherwise."""
    terms, signs = [operands[0]], []
    for op, x in zip(ops, operands[1:]):
        if op == "*":
            terms[-1] *= x
        else:
            signs.append(op)
            terms.append(x)
    total = terms[0]
    for op, x in zip(signs, terms[1:]):
        total = _apply(total, op, x)
    return total


def _expr_problem(level, rng, operands, ops, steps=()) -> Problem:
    """A bare-expression problem; `steps` are intermediate forms shown in the worked answer."""
    operands, ops = tuple(operands), tuple(ops)
    expr = str(operands[0]) + "".join(f" {op} {x}" for op, x in zip(ops, operands[1:]))
    value = _evaluate(operands, ops)
    assert value >= 0, (level, expr)
    chain = " = ".join([expr, *steps, str(value)])
    return Problem(
        level=level,
        key=expr,
        question=rng.choice(PHRASINGS).format(e=expr),
        answer=value,
        expr=expr,
        operands=operands,
        solution=f"{chain}. \\boxed{{{value}}}",
    )


def _split_second(a: int, op: str, b: int, unit: int) -> list[str]:
    # "23 + 45 = 23 + 40 + 5 = 63 + 5": one place value at a time, the method a small model
    # can imitate; nothing to show when b has a single nonzero part.
    big, small = b - b % unit, b % unit
    if big == 0 or small == 0:
        return []
    return [f"{a} {op} {big} {op} {small}", f"{_apply(a, op, big)} {op} {small}"]


def _sum_small(rng):
    a, b = rng.randint(1, 5), rng.randint(1, 5)
    return _expr_problem("sum_small", rng, (a, b), "+")


def _sum_1digit(rng):
    while True:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        if max(a, b) >= 6:  # pairs within 1-5 belong to sum_small
            return _expr_problem("sum_1digit", rng, (a, b), "+")


def _mul_1x1(rng):
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return _expr_problem("mul_1x1", rng, (a, b), "*")


def _sum_2digit(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return _expr_problem("sum_2digit", rng, (a, b), "+", _split_second(a, "+", b, 10))


def _addsub_2d1d(rng):
    while True:
        a, b, op = rng.randint(10, 99), rng.randint(1, 9), rng.choice("+-")
        units = a % 10
        if (op == "+" and units + b <= 9) or (op == "-" and units >= b):  # no carry/borrow
            return _expr_problem("addsub_2d1d_nocarry", rng, (a, b), op)


def _mul_2x1(rng):
    a, b = rng.randint(10, 99), rng.randint(2, 9)
    tens, units = a - a % 10, a % 10
    steps = [f"{tens} * {b} + {units} * {b}", f"{tens * b} + {units * b}"] if units else []
    return _expr_problem("mul_2x1", rng, (a, b), "*", steps)


def _addsub_3digit(rng):
    a, b, op = rng.randint(100, 999), rng.randint(100, 999), rng.choice("+-")
    if op == "-" and a < b:  # answers stay non-negative
        a, b = b, a
    return _expr_problem("addsub_3digit", rng, (a, b), op, _split_second(a, op, b, 100))


def _mul_2x2(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    tens, units = b - b % 10, b % 10
    steps = [f"{a} * {tens} + {a} * {units}", f"{a * tens} + {a * units}"] if units else []
    return _expr_problem("mul_2x2", rng, (a, b), "*", steps)


def _expr_3term(rng):
    # One product and one sum or difference, in either order, so precedence matters.
    while True:
        a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        pm = rng.choice("+-")
        if rng.random() < 0.5:  # a * b ± c
            if pm == "+" or a * b >= c:
                return _expr_problem("expr_3term", rng, (a, b, c), ("*", pm), [f"{a * b} {pm} {c}"])
        elif pm == "+" or a >= b * c:  # a ± b * c
            return _expr_problem("expr_3term", rng, (a, b, c), (pm, "*"), [f"{a} {pm} {b * c}"])


def _word(level: str, draw_fields) -> Callable[[random.Random], Problem]:
    def draw(rng: random.Random) -> Problem:
        text, expr, operands, value, steps = draw_fields(rng)
        return Problem(
            level=level,
            key=f"{level}: {expr}",
            question=text,
            answer=value,
            expr=expr,
            operands=tuple(operands),
            solution=f"{steps}. \\boxed{{{value}}}",
        )

    return draw


# Ordered from easiest to hardest by SmolLM2-135M's measured pass rate (STACK.md).
LEVELS: dict[str, Level] = {
    lvl.name: lvl
    for lvl in (
        Level("sum_small", "a + b with a, b in 1-5", _sum_small, 25),
        Level("sum_1digit", "a + b with a, b in 1-9, not both <= 5", _sum_1digit, 56),
        Level("mul_1x1", "a * b with a, b in 1-9", _mul_1x1, 81),
        Level("sum_2digit", "a + b with a, b in 10-99", _sum_2digit, 8100),
        Level("addsub_2d1d_nocarry", "2-digit +/- 1-digit, no carry or borrow", _addsub_2d1d, 810),
        Level("mul_2x1", "2-digit * 1-digit (2-9)", _mul_2x1, 720),
        Level("addsub_3digit", "3-digit +/- 3-digit, non-negative", _addsub_3digit, 1_215_450),
        Level("mul_2x2", "2-digit * 2-digit", _mul_2x2, 8100),
        Level("expr_3term", "a * b +/- c or a +/- b * c, 1-digit operands", _expr_3term, 2210),
        Level("word_1step", "one-step word problem (+, -, *, exact /)", _word("word_1step", one_step), None),
        Level("word_2step", "two-step word problem", _word("word_2step", two_step), None),
    )
}


def get_level(name: str) -> Level:
    try:
        return LEVELS[name]
    except KeyError:
        raise ValueError(f"unknown level {name!r}; levels are: {', '.join(LEVELS)}") from None


def problem_stream(
    level: str,
    rng: random.Random,
    *,
    exclude_keys: frozenset[str] | set[str] = frozenset(),
    unique_by: str = "question",
    max_misses: int = MAX_MISSES,
) -> Iterator[Problem]:
    """Yield new problems of `level` until it runs out (`max_misses` draws in a row that gave
    nothing new). `unique_by="question"` allows several phrasings of one key;
    `unique_by="key"` gives each key at most once. Keys in `exclude_keys` never appear."""
    if unique_by not in ("question", "key"):
        raise ValueError(f"unique_by must be 'question' or 'key', not {unique_by!r}")
    draw = get_level(level).draw
    seen: set[str] = set()
    misses = 0
    while misses < max_misses:
        problem = draw(rng)
        ident = problem.question if unique_by == "question" else problem.key
        if problem.key in exclude_keys or ident in seen:
            misses += 1
            continue
        misses = 0
        seen.add(ident)
        yield problem


@lru_cache(maxsize=None)
def shot_problems(level: str) -> tuple[Problem, ...]:
    """The level's MAX_SHOTS + 1 worked examples: fixed, the same for every seed and split."""
    stream = problem_stream(level, random.Random(f"{_SHOT_SEED}/{level}"), unique_by="key")
    return tuple(next(stream) for _ in range(MAX_SHOTS + 1))


def shot_keys() -> frozenset[str]:
    """Keys of every level's worked examples; generated splits leave them out."""
    return frozenset(p.key for name in LEVELS for p in shot_problems(name))
