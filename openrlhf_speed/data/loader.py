"""Validation of user prompt datasets (jsonl) before a run spends anything on them.

Implements `load_jsonl_rows`: it reads one JSON object per line and checks that each row
has a usable prompt (a non-empty string or a non-empty list of {"role", "content"}
messages) and a non-empty reference answer, under the keys the run will use
(OpenRLHF's --data.input_key / --data.label_key).

- A broken row (invalid JSON or UTF-8, not an object, missing or empty prompt or answer)
  raises DatasetError naming the file, the line and the key, and saying what to do; with
  `skip_invalid=True` it is dropped and counted by reason instead.
- A row whose prompt is longer than `max_prompt_tokens` is always dropped and counted,
  never an error: one long prompt should not stop a run, and OpenRLHF would otherwise
  truncate or overflow it silently. Tokens are counted as the run will see them: a message
  list through the tokenizer's chat template (with the generation prompt), a string as is,
  or wrapped as a user message first when `apply_chat_template=True`.
- Numeric answers (`"answer": 42`) are kept as strings ("42") and counted, since
  OpenRLHF's reward code handles labels as text.
- Blank lines are skipped and counted. A file left with no rows at all raises.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

# Reasons a row is dropped; all but prompt_too_long are errors unless skip_invalid=True.
INVALID_REASONS = (
    "invalid_utf8", "invalid_json", "not_an_object",
    "missing_prompt", "invalid_prompt", "missing_answer", "empty_answer", "invalid_answer",
)
TOO_LONG = "prompt_too_long"
_EXAMPLE_LINES = 5  # line numbers kept per reason, for the report
# What the error offers besides fixing the row; callers without skip_invalid (the train
# command's preflight check) pass their own or None.
SKIP_HINT = "or load with skip_invalid=True to drop such rows and count them in the report"


class DatasetError(ValueError):
    """A dataset file that cannot be used as given; the message says where and what to do."""


@dataclass
class LoadReport:
    path: str
    lines_read: int = 0  # non-blank lines
    blank_lines: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)  # reason -> rows
    lines: dict = field(default_factory=dict)  # reason -> first line numbers
    answers_converted: int = 0  # numeric answers turned into strings
    max_prompt_tokens: int | None = None

    def drop(self, reason: str, lineno: int) -> None:
        self.dropped[reason] += 1
        self.lines.setdefault(reason, [])
        if len(self.lines[reason]) < _EXAMPLE_LINES:
            self.lines[reason].append(lineno)

    def as_dict(self) -> dict:
        return {
            "path": self.path, "lines_read": self.lines_read, "blank_lines": self.blank_lines,
            "kept": self.kept, "dropped": dict(self.dropped), "lines": dict(self.lines),
            "answers_converted": self.answers_converted, "max_prompt_tokens": self.max_prompt_tokens,
        }

    def summary(self) -> str:
        text = f"{self.path}: kept {self.kept} of {self.lines_read} rows"
        if self.dropped:
            parts = [f"{r} {n} (lines {', '.join(map(str, self.lines[r]))}"
                     f"{', ...' if n > len(self.lines[r]) else ''})" for r, n in sorted(self.dropped.items())]
            text += "; dropped: " + "; ".join(parts)
        if self.answers_converted:
            text += f"; {self.answers_converted} numeric answers read as strings"
        return text


def check_row(row, input_key: str = "prompt", label_key: str = "answer") -> tuple[str, str] | None:
    """None if the parsed row is usable, else (reason, what is wrong in words)."""
    if not isinstance(row, dict):
        return "not_an_object", f"the line is a JSON {type(row).__name__}, not an object"
    if row.get(input_key) is None:
        return "missing_prompt", f"no '{input_key}' key (keys: {', '.join(map(repr, row)) or 'none'})"
    prompt = row[input_key]
    if isinstance(prompt, str):
        if not prompt.strip():
            return "invalid_prompt", f"'{input_key}' is an empty string"
    elif isinstance(prompt, list):
        if not prompt:
            return "invalid_prompt", f"'{input_key}' is an empty message list"
        for i, msg in enumerate(prompt):
            fields_ok = isinstance(msg, dict) and all(isinstance(msg.get(k), str) for k in ("role", "content"))
            if not fields_ok:
                return "invalid_prompt", f"'{input_key}'[{i}] is not a {{\"role\": str, \"content\": str}} message"
    else:
        return "invalid_prompt", f"'{input_key}' is a {type(prompt).__name__}, not a string or a message list"
    if label_key not in row:
        return "missing_answer", f"no '{label_key}' key (keys: {', '.join(map(repr, row))})"
    answer = row[label_key]
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return "empty_answer", f"'{label_key}' is empty"
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return "invalid_answer", f"'{label_key}' is a {type(answer).__name__}, not a string or a number"
    return None


def count_prompt_tokens(prompt, tokenizer, apply_chat_template: bool = False) -> int:
    """Prompt length in tokens as the run sees it (see the module docstring)."""
    if isinstance(prompt, str) and apply_chat_template:
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        prompt = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    # Template text already holds the special tokens it needs; don't count a second BOS.
    return len(tokenizer.encode(prompt, add_special_tokens=False))


def _error(path: str, lineno: int, reason: str, detail: str, input_key: str, label_key: str,
           skip_hint: str | None = SKIP_HINT) -> DatasetError:
    if reason in ("missing_prompt", "missing_answer"):
        fix = (f"put the prompt under '{input_key}' and the reference answer under '{label_key}', or name "
               "the keys your file uses (input_key/label_key; --data.input_key/--data.label_key in training)")
    elif reason in ("invalid_utf8", "invalid_json", "not_an_object"):
        fix = f"write one JSON object per line, e.g. {{\"{input_key}\": \"What is 2 + 3?\", \"{label_key}\": \"5\"}}"
    else:
        fix = "fix or remove the row"
    return DatasetError(f"{path}, line {lineno}: {reason}: {detail}. To fix: {fix}"
                        + (f"; {skip_hint}." if skip_hint else "."))


def load_jsonl_rows(
    path: str,
    input_key: str = "prompt",
    label_key: str = "answer",
    max_prompt_tokens: int | None = None,
    tokenizer=None,
    skip_invalid: bool = False,
    apply_chat_template: bool = False,
    skip_hint: str | None = SKIP_HINT,
) -> tuple[list[dict], LoadReport]:
    """Read and validate a prompt jsonl file; returns (usable rows, report).

    `tokenizer` needs `encode(text, add_special_tokens=False)` and, for message-list
    prompts, `apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`
    (any Hugging Face tokenizer); it is required when `max_prompt_tokens` is set.
    """
    if max_prompt_tokens is not None and tokenizer is None:
        raise ValueError("max_prompt_tokens needs a tokenizer to count prompt tokens")
    report = LoadReport(path=str(path), max_prompt_tokens=max_prompt_tokens)
    rows: list[dict] = []
    try:
        f = open(path, "rb")  # bytes, so a bad UTF-8 sequence is reported with its line
    except OSError as e:
        raise DatasetError(f"{path}: cannot read the dataset file ({e.strerror}); check the path") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                report.blank_lines += 1
                continue
            report.lines_read += 1
            row, problem = _parse(raw)
            if problem is None:
                problem = check_row(row, input_key, label_key)
            if problem is not None:
                if not skip_invalid:
                    raise _error(path, lineno, *problem, input_key, label_key, skip_hint)
                report.drop(problem[0], lineno)
                continue
            if max_prompt_tokens is not None and (
                count_prompt_tokens(row[input_key], tokenizer, apply_chat_template) > max_prompt_tokens
            ):
                report.drop(TOO_LONG, lineno)
                continue
            if not isinstance(row[label_key], str):
                row[label_key] = str(row[label_key])
                report.answers_converted += 1
            rows.append(row)
    report.kept = len(rows)
    if not report.lines_read:
        raise DatasetError(f"{path}: the file is empty (no rows); give a jsonl file with one "
                           f"{{\"{input_key}\": ..., \"{label_key}\": ...}} object per line")
    if not rows:
        raise DatasetError(f"no usable rows: {report.summary()}")
    return rows, report


def _parse(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, ("invalid_utf8", f"bytes at offset {e.start} are not UTF-8")
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, ("invalid_json", f"not valid JSON ({e.msg}, column {e.colno})")
