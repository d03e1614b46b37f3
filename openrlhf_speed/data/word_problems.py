"""Templated one- and two-step word problems with exact non-negative integer answers.

Implements the `word_1step` and `word_2step` levels of arithmetic.py. Each draw picks a
template, names and objects, then operands within ranges that keep the answer a
non-negative integer (a difference never goes below zero, a division is exact because the
dividend is built as quotient * divisor), and computes the answer from the operands.
It returns the text, an arithmetic expression over the same operands (so a test can
re-derive the answer independently), the operands, the answer, and the worked steps.
"""

from __future__ import annotations

import random

NAMES = (
    "Ana", "Ben", "Carla", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack",
    "Kira", "Leo", "Maya", "Noah", "Olga", "Pablo", "Rosa", "Sam", "Tara", "Yuki",
)
OBJECTS = (
    "apples", "marbles", "stickers", "pencils", "cookies", "books", "coins", "cards",
    "shells", "stamps", "balloons", "crayons", "buttons", "beads", "eggs", "oranges",
    "toy cars", "candies", "flowers", "blocks",
)
CONTAINERS = ("boxes", "bags", "packs", "jars", "baskets")

# Draw result: (text, expr, operands, answer, worked steps without the final \boxed{}).
Drawn = tuple[str, str, tuple[int, ...], int, str]


def _cast(rng: random.Random) -> dict:
    name, other = rng.sample(NAMES, 2)
    return {"n": name, "m": other, "o": rng.choice(OBJECTS), "box": rng.choice(CONTAINERS)}


def _add(rng: random.Random) -> Drawn:
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    text = rng.choice((
        "{n} has {a} {o}. {m} gives {n} {b} more. How many {o} does {n} have now?",
        "There are {a} {o} in a basket. {n} puts in {b} more. How many {o} are in the basket now?",
    )).format(a=a, b=b, **_cast(rng))
    return text, f"{a} + {b}", (a, b), a + b, f"{a} + {b} = {a + b}"


def _sub(rng: random.Random) -> Drawn:
    a = rng.randint(10, 99)
    b = rng.randint(1, a - 1)
    text = rng.choice((
        "{n} has {a} {o} and gives {b} of them to {m}. How many {o} does {n} have left?",
        "A shelf holds {a} {o}. {n} takes {b} of them away. How many {o} are left on the shelf?",
    )).format(a=a, b=b, **_cast(rng))
    return text, f"{a} - {b}", (a, b), a - b, f"{a} - {b} = {a - b}"


def _mul(rng: random.Random) -> Drawn:
    a, b = rng.randint(2, 9), rng.randint(2, 12)
    text = rng.choice((
        "{n} has {a} {box} with {b} {o} in each. How many {o} does {n} have in total?",
        "{n} buys {b} {o} every day for {a} days. How many {o} does {n} buy in all?",
    )).format(a=a, b=b, **_cast(rng))
    return text, f"{a} * {b}", (a, b), a * b, f"{a} * {b} = {a * b}"


def _div(rng: random.Random) -> Drawn:
    b, q = rng.randint(2, 9), rng.randint(2, 12)
    t = b * q  # exact division by construction
    text = rng.choice((
        "{n} shares {t} {o} equally among {b} friends. How many {o} does each friend get?",
        "{n} puts {t} {o} into {b} {box}, the same number in each. How many {o} go in each?",
    )).format(t=t, b=b, **_cast(rng))
    return text, f"{t} / {b}", (t, b), q, f"{t} / {b} = {q}"


def one_step(rng: random.Random) -> Drawn:
    return rng.choice((_add, _sub, _mul, _div))(rng)


def _add_sub(rng: random.Random) -> Drawn:
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    c = rng.randint(1, a + b - 1)
    s, v = a + b, a + b - c
    text = (
        "{n} has {a} {o}, buys {b} more and then gives {c} to {m}. How many {o} does {n} have now?"
    ).format(a=a, b=b, c=c, **_cast(rng))
    return text, f"{a} + {b} - {c}", (a, b, c), v, f"{a} + {b} = {s}, and {s} - {c} = {v}"


def _mul_sub(rng: random.Random) -> Drawn:
    a, b = rng.randint(2, 9), rng.randint(2, 12)
    p = a * b
    d = rng.randint(1, p - 1)
    text = (
        "{n} buys {a} {box} of {o} with {b} in each and gives away {d}. How many {o} does {n} have left?"
    ).format(a=a, b=b, d=d, **_cast(rng))
    return text, f"{a} * {b} - {d}", (a, b, d), p - d, f"{a} * {b} = {p}, and {p} - {d} = {p - d}"


def _mul_add(rng: random.Random) -> Drawn:
    d, a, b = rng.randint(2, 50), rng.randint(2, 9), rng.randint(2, 12)
    p = a * b
    text = (
        "{n} has {d} {o} and then gets {a} {box} with {b} {o} in each. How many {o} does {n} have now?"
    ).format(d=d, a=a, b=b, **_cast(rng))
    return text, f"{d} + {a} * {b}", (d, a, b), d + p, f"{a} * {b} = {p}, and {d} + {p} = {d + p}"


def _sum_div(rng: random.Random) -> Drawn:
    k, q = rng.randint(2, 6), rng.randint(2, 12)
    total = k * q  # exact division by construction
    a = rng.randint(1, total - 1)
    b = total - a
    text = (
        "{n} has {a} {o} and {m} has {b}. They put them together and share them equally "
        "among {k} friends. How many {o} does each friend get?"
    ).format(a=a, b=b, k=k, **_cast(rng))
    return text, f"({a} + {b}) / {k}", (a, b, k), q, f"{a} + {b} = {total}, and {total} / {k} = {q}"


def two_step(rng: random.Random) -> Drawn:
    return rng.choice((_add_sub, _mul_sub, _mul_add, _sum_div))(rng)
