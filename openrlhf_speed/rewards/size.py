"""A cheap upper estimate of how many digits an answer's numbers have, before sympy sees it.

Why: math-verify evaluates numeric powers and factorials exactly. `10^{10^{10}}`,
`2^{2^{2^{2^{2^2}}}}` or `1000000!` then runs until the per-call timeout kills the worker
(5 s, plus seconds to start a new one), so a batch of such responses stalls scoring. Measured
with math-verify 0.9.0 on one CPU core: `10^{10^{6}}` (10^6 digits) and `100000!` (456,574
digits) verify in under 0.5 s; `10^{10^{7}}` and `1000000!` run past 8 s. Answers whose
estimate exceeds `MAX_DIGITS` (10^5 digits, 10x below the slowest measured case that was
still fast) are refused without calling math-verify.

`estimated_digits(text)` walks the text once (tokens: numbers, `^`/`**`, `!`, `{}` and `()`
groups; everything else is ignored) and returns an upper estimate of log10 of the largest
magnitude it builds: a number counts its digits, `a^b` counts b * log10(a), `n!` counts
n * log10(n), and the atoms of one group add up (a product bounds a sum). A base that is
not a number (`x^{10^{10}}`) stays symbolic in sympy and costs nothing, so it counts 0.
Signs are ignored on purpose: `10^{-10^{10}}` is tiny, but sympy builds 10^(10^10) first.
"""

from __future__ import annotations

import math
import re

MAX_DIGITS = 1e5
MAX_NESTING = 50  # deeper groups than this are refused outright (estimated as infinite)

_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|\*\*|[\^{}()!]|\\[A-Za-z]+|.", re.S)
_CLOSERS = {"{": "}", "(": ")"}


def _number_digits(text: str) -> float:
    """log10 of max(value, 1) for a plain decimal number (cheap for any length)."""
    whole = text.split(".")[0].lstrip("0")
    if len(whole) > 300:
        return float(len(whole) - 1)
    return math.log10(max(float(text), 1.0))


def _power(base: float, exponent: float) -> float:
    """log10(a^b) from log10(a) and log10(b): b * log10(a) = 10^log10(b) * log10(a)."""
    if base <= 0.0:
        return 0.0
    if exponent > 300.0:
        return math.inf
    return 10.0**exponent * base


def _factorial(n_digits: float) -> float:
    """log10(n!) <= n log10(n), from log10(n)."""
    if n_digits > 15.0:
        return math.inf
    n = 10.0**n_digits
    return n * math.log10(max(n, 2.0))


class _Walker:
    """One pass over the tokens; `group()` returns the estimate of one `{...}`/`(...)`."""

    def __init__(self, text: str):
        self.tokens = _TOKEN_RE.findall(text)
        self.i = 0

    def atom(self, depth: int) -> float | None:
        """The estimate of the next atom (number or group), None for anything else."""
        if self.i >= len(self.tokens):
            return None
        tok = self.tokens[self.i]
        self.i += 1
        if tok[0].isdigit():
            return _number_digits(tok)
        if tok in _CLOSERS:
            return self.group(depth + 1, _CLOSERS[tok])
        return None

    def group(self, depth: int, closer: str | None) -> float:
        if depth > MAX_NESTING:
            return math.inf
        total, last = 0.0, None  # last: the estimate of the atom a `^` or `!` applies to
        while self.i < len(self.tokens):
            if math.isinf(total):
                return math.inf
            tok = self.tokens[self.i]
            if tok == closer:
                self.i += 1
                break
            if tok in ("^", "**"):
                self.i += 1
                exponent = self.atom(depth)
                if last is not None and exponent is not None:
                    total -= last
                    last = _power(last, exponent)
                    total += last
                continue
            if tok == "!":
                self.i += 1
                if last is not None:
                    total -= last
                    last = _factorial(last)
                    total += last
                continue
            if tok in _CLOSERS or tok[0].isdigit():
                last = self.atom(depth)
                total += last
            else:
                self.i += 1
                last = None
        return total


def estimated_digits(text: str) -> float:
    """Upper estimate of the digits of the largest number `text` builds (inf: refuse)."""
    try:
        return _Walker(text).group(0, None)
    except (OverflowError, ValueError):
        return math.inf


def size_problem(text: str) -> str | None:
    """Why `text` is too large to give to math-verify, or None."""
    digits = estimated_digits(text)
    if digits <= MAX_DIGITS:
        return None
    shown = "more than 10^300" if math.isinf(digits) else f"about {digits:.3g}"
    return f"builds a number of {shown} digits (limit {MAX_DIGITS:.0e}); not given to math-verify"
