"""Answer extraction: find the final answer in a response and the response in a query.

Implements the string side of the math reward, all pure and linear-time (no regex with
nested quantifiers, no recursion), so adversarial text cannot hang the calling thread:

- `extract_answer`: the content of the last complete `\\boxed{...}` / `\\fbox{...}`
  (balanced braces, `\\{` `\\}` are literal), or `\\boxed 5`; else the last number in the
  text (integer, decimal, negative, `1,234`, `3/4`); else None.
- `parse_plain_number`: the exact value of a plain number, for the parent-side fast path.
- `canonical_decimal`: a plain decimal number of any length in one canonical spelling, so
  long numbers (a 5,000-digit gold answer) compare exactly without int() or math-verify.
- `is_nan_text`: whether an answer spells "not a number" (`nan`, `NaN`, `-nan`).
- `normalize_gold`: a dataset label (str, int, `$...$`, `\\boxed{...}`) as an answer string.
- `split_response`: the response part of an OpenRLHF query (prompt + response decoded
  together), with trailing special tokens removed. The rule is in its docstring.

Departure from common practice: when a response has a `\\boxed` that never closes (a
truncated generation), an earlier complete box or else the last number is used; the
unclosed box itself is never read.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Longer extracted answers are scored without math-verify (see math_reward.py); the bound
# also keeps Fraction() below Python's 4300-digit int-parsing limit.
MAX_ANSWER_CHARS = 1000

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# `\boxed 5` form: the argument is one run of non-space characters up to `$` or space.
_BOX_SPACE_ARG_RE = re.compile(r" +([^\s${}]+)")

# A minus counts as a sign only when it does not follow something it could subtract from
# ("5-3" ends with the number 3, not -3). Thousands groups need exactly 3 digits each.
_SIGN = r"(?:(?<![0-9A-Za-z)\]}])-)?"
_NUMBER_RE = re.compile(
    _SIGN + r"(?:(?<![\d,.])\d{1,3}(?:,\d{3})+(?!\d|,\d)(?:\.\d+)?"  # 1,234,567.5
    r"|\d+/\d+"  # 3/4
    r"|\d+(?:\.\d+)?"  # 12, 12.5
    r"|\.\d+)"  # .5
)
_PLAIN_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|-?\.\d+|-?\d+/\d+")

# Special tokens a decode with skip_special_tokens=False leaves at the end of a response:
# ChatML/Llama-3 `<|...|>`, DeepSeek `<｜...｜>`, sentencepiece `</s>`, Gemma's tokens.
_SPECIAL_TOKEN_RE = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜]{1,40}｜>|</s>|<eos>|<pad>|<end_of_turn>|\[PAD\]")
_SPECIAL_TOKEN_MAX_CHARS = 48

# Assistant-turn markers of common chat templates, for queries that do not start with the
# prompt verbatim. Order does not matter: the one found last in the prompt wins.
ASSISTANT_MARKERS = (
    "<|im_start|>assistant",  # ChatML (Qwen, SmolLM2)
    "<|start_header_id|>assistant<|end_header_id|>",  # Llama 3
    "<|assistant|>",  # Phi, Zephyr
    "<｜Assistant｜>",  # DeepSeek
    "<start_of_turn>model",  # Gemma
    "[/INST]",  # Llama 2, Mistral
    "Assistant:",  # plain-text templates
)
_PROMPT_TAIL_CHARS = 64


def _match_braces(text: str, start: int = 0) -> dict[int, int]:
    """Map each `{` at or after `start` to its matching `}` in one pass (unmatched: absent).

    A brace's match depends only on the text after it, so scanning may begin at `start`.
    """
    matches: dict[int, int] = {}
    stack: list[int] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2  # `\{` and `\}` are literal braces in LaTeX, not grouping
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            matches[stack.pop()] = i
        i += 1
    return matches


def extract_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}`/`\\fbox{...}` (or `\\boxed 5`), else None."""
    starts = [m.end() for m in _BOX_RE.finditer(text)]
    if not starts:
        return None
    braces = _match_braces(text, starts[0])
    for start in reversed(starts):
        j = start
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = braces.get(j)
            if end is not None:
                return text[j + 1 : end].strip()
            continue  # unclosed box (truncated generation): try an earlier one
        m = _BOX_SPACE_ARG_RE.match(text, start)
        if m:
            return m.group(1)
    return None


def extract_last_number(text: str) -> str | None:
    """The last number in `text` as written (commas removed), or None."""
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return last.group(0).replace(",", "") if last else None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: last complete box, else last number, else None.

    Never raises for a str; non-str input returns None.
    """
    if not isinstance(response, str):
        return None
    boxed = extract_boxed(response)
    if boxed:
        return boxed
    return extract_last_number(response)


def parse_plain_number(text: str) -> Fraction | None:
    """Exact value of a plain number (`12`, `-3.50`, `1,234`, `3/4`, `$12$`), else None."""
    s = text.strip().strip("$").strip()
    if len(s) > MAX_ANSWER_CHARS or not _PLAIN_NUMBER_RE.fullmatch(s):
        return None
    try:
        return Fraction(s.replace(",", ""))
    except (ValueError, ZeroDivisionError):  # "1/0"
        return None


_DECIMAL_RE = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d*)(?:\.(\d*))?")
_NAN_SPELLINGS = frozenset({"nan", "-nan", "+nan", "\\mathrm{nan}", "\\text{nan}"})


def canonical_decimal(text: str) -> str | None:
    """`text` as `[-]digits[.digits]` without commas, leading or trailing zeros, or None
    when it is not a plain decimal number. Two decimals are equal iff their canonical
    spellings are; linear in the length, no int() (Python refuses > 4300 digits)."""
    m = _DECIMAL_RE.fullmatch(text.strip().strip("$").strip())
    if m is None or not (m.group(2) or m.group(3)):
        return None
    sign, whole, frac = m.group(1), m.group(2).replace(",", "").lstrip("0"), (m.group(3) or "").rstrip("0")
    body = (whole or "0") + ("." + frac if frac else "")
    return body if body == "0" or sign != "-" else "-" + body


def is_nan_text(text: str) -> bool:
    """True for spellings of NaN (`nan`, `NaN`, `-nan`, `\\mathrm{NaN}`): never a correct
    answer and never a usable gold answer (math-verify would call nan equal to nan)."""
    return text.strip().strip("$").strip().lower() in _NAN_SPELLINGS


def normalize_gold(label) -> str | None:
    """A dataset label as an answer string, or None when it is unusable.

    Accepts str/bytes/int/float/Fraction; strips `$...$`; a label that contains a box
    is reduced to the box content (some datasets store full solutions as labels).
    """
    if isinstance(label, bytes):
        label = label.decode("utf-8", errors="replace")
    if isinstance(label, bool) or label is None:
        return None
    if isinstance(label, (int, float, Fraction)):
        label = str(label)
    if not isinstance(label, str):
        return None
    boxed = extract_boxed(label) if "\\" in label else None
    gold = (boxed if boxed else label).strip().strip("$").strip()
    return gold or None


def strip_special_tokens(text: str) -> str:
    """Remove trailing special tokens (`<|im_end|>`, `</s>`, `<|endoftext|>`, ...) and
    whitespace. Walks back token by token with an index: a regex anchored at the end
    would rescan long whitespace runs from every position (quadratic)."""
    end = len(text)
    while True:
        while end > 0 and text[end - 1].isspace():
            end -= 1
        lo = max(0, end - _SPECIAL_TOKEN_MAX_CHARS)
        start = max(text.rfind("<", lo, end), text.rfind("[", lo, end))
        if start < 0 or not _SPECIAL_TOKEN_RE.fullmatch(text, start, end):
            return text[:end]
        end = start


def _nonspace_prefix_end(query: str, prompt: str) -> int | None:
    """Index in `query` just past `prompt`, ignoring whitespace differences; else None."""
    qi, qn = 0, len(query)
    for c in prompt:
        if c.isspace():
            continue
        while qi < qn and query[qi].isspace():
            qi += 1
        if qi >= qn or query[qi] != c:
            return None
        qi += 1
    return qi


def split_response(query: str, prompt: str) -> str | None:
    """The response part of `query` (= decode(prompt_tokens + response_tokens)), or None.

    Rule, first that applies:
    1. `query` starts with `prompt`: everything after it.
    2. `query` starts with `prompt` up to whitespace (decode normalisation such as
       clean_up_tokenization_spaces or sentencepiece prefix spaces): everything after it.
    3. The prompt contains an assistant-turn marker (ASSISTANT_MARKERS; the one found last
       in the prompt is the generation prompt): everything after the LAST occurrence of
       that marker in `query`. This covers a left-truncated prompt.
    4. The prompt's last 64 characters occur in `query`: everything after the last
       occurrence.
    Rules 3-4 take the last occurrence so that prompt text (few-shot examples with their
    own boxed answers) can never be scored; a response that repeats the marker only loses
    its beginning. Trailing special tokens are stripped from the result.
    """
    if not isinstance(query, str) or not isinstance(prompt, str):
        return None
    if query.startswith(prompt):
        return strip_special_tokens(query[len(prompt) :])
    end = _nonspace_prefix_end(query, prompt)
    if end is not None:
        return strip_special_tokens(query[end:])
    found = [(prompt.rfind(m), m) for m in ASSISTANT_MARKERS]
    pos, marker = max(found)
    if pos >= 0 and marker in query:
        return strip_special_tokens(query[query.rfind(marker) + len(marker) :])
    tail = prompt[-_PROMPT_TAIL_CHARS:]
    if tail and tail in query:
        return strip_special_tokens(query[query.rfind(tail) + len(tail) :])
    return None
