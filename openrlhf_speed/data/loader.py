"""Validation of user prompt datasets before a run spends anything on them.

Implements `load_jsonl_rows` (one JSON object per line) and `load_records` (rows read
already from parquet, arrow, csv, a JSON array or a save_to_disk folder: data/folders.py).
Each row must have a usable prompt (a non-empty string or a non-empty list of
{"role", "content"} messages) and a non-empty reference answer, under the keys the run will
use (OpenRLHF's --data.input_key / --data.label_key).

- A broken row (invalid JSON or UTF-8, not an object, missing or empty prompt or answer)
  raises DatasetError naming the file, the line (row) and the key, and saying what to do;
  with `skip_invalid=True` it is dropped and counted by reason instead.
- A row whose prompt is longer than `max_prompt_tokens` is always dropped and counted,
  never an error: one long prompt should not stop a run, and OpenRLHF would otherwise
  truncate it from the left silently. Tokens are counted as the run will see them: a message
  list through the tokenizer's chat template (with the generation prompt), a string as is
  (through `input_template` if given), or wrapped as a user message first when
  `apply_chat_template=True`. `prompt_limit` is the limit a run's flags set; the SPEED
  driver skips the same prompts at run time (rollout/speed_generator.py).
- Duplicate prompts (the same string or message list in two kept rows) are counted in the
  report: SPEED treats every row as a prompt of its own.
- Numeric answers (`"answer": 42`) are kept as strings ("42") and counted, since
  OpenRLHF's reward code handles labels as text.
- Blank lines are skipped and counted. A file left with no rows at all raises.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

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
    duplicates: int = 0  # kept rows whose prompt an earlier kept row has already
    duplicate_lines: list = field(default_factory=list)  # the first of them
    prompt_counts: Counter = field(default_factory=Counter, repr=False)  # prompt (as JSON) -> kept rows

    def drop(self, reason: str, lineno: int) -> None:
        self.dropped[reason] += 1
        self.lines.setdefault(reason, [])
        if len(self.lines[reason]) < _EXAMPLE_LINES:
            self.lines[reason].append(lineno)

    def count_prompt(self, prompt, lineno: int) -> None:
        """Count a kept row's prompt; a repeat of an earlier one is a duplicate."""
        key = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
        self.prompt_counts[key] += 1
        if self.prompt_counts[key] > 1:
            self.duplicates += 1
            if len(self.duplicate_lines) < _EXAMPLE_LINES:
                self.duplicate_lines.append(lineno)

    @property
    def repeated_prompts(self) -> int:
        """Distinct prompts that appear more than once."""
        return sum(1 for n in self.prompt_counts.values() if n > 1)

    @property
    def most_repeats(self) -> int:
        return max(self.prompt_counts.values(), default=0)

    def as_dict(self) -> dict:
        return {
            "path": self.path, "lines_read": self.lines_read, "blank_lines": self.blank_lines,
            "kept": self.kept, "dropped": dict(self.dropped), "lines": dict(self.lines),
            "answers_converted": self.answers_converted, "max_prompt_tokens": self.max_prompt_tokens,
            "duplicates": self.duplicates, "duplicate_lines": list(self.duplicate_lines),
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


def prompt_limit(max_len: int, max_new_tokens: int | None) -> tuple[int, str]:
    """(tokens a prompt may have, why): what OpenRLHF's executor leaves for the prompt before it
    truncates one from the left (openrlhf/utils/agent.py): --data.max_len minus
    --rollout.max_new_tokens, or minus 1 when that is unset (the response gets the rest)."""
    if max_new_tokens:
        return max_len - max_new_tokens, f"--data.max_len {max_len} - --rollout.max_new_tokens {max_new_tokens}"
    return max_len - 1, f"--data.max_len {max_len} - 1 (--rollout.max_new_tokens unset)"


def prompt_text(prompt, tokenizer, apply_chat_template: bool = False, input_template: str | None = None) -> str:
    """The prompt text the run's engines see (see the module docstring)."""
    if isinstance(prompt, str) and apply_chat_template:
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    if input_template:  # OpenRLHF's --data.input_template, applied without a chat template
        return input_template.format(prompt)
    return prompt


def token_counts(texts: list, tokenizer) -> list:
    """Each text's length in tokens, no special tokens added (template text already holds the
    ones it needs). A Hugging Face fast tokenizer counts the whole list in one call of its Rust
    backend: at 400,000 prompts, one `encode` per text took 30 s of every start-up (2 cores);
    the counts are the same."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch"):
        return [len(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    # A tokenizer file may switch on padding or truncation, which would count the batch's longest
    # prompt, or the cut, for every one; off for the call, as transformers does for each of its own.
    padding, truncation = backend.padding, backend.truncation
    backend.no_padding()
    backend.no_truncation()
    try:
        # encode_batch over encode_batch_fast and the tokenizer's __call__: 6.3 s against 7.7 s
        # and 11.3 s for 200,000 chat prompts on 2 cores (SmolLM2's tokenizer, 2026-11-27).
        return [len(e.ids) for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    finally:
        if padding is not None:
            backend.enable_padding(**padding)
        if truncation is not None:
            backend.enable_truncation(**truncation)


def _error(path: str, lineno: int, reason: str, detail: str, input_key: str, label_key: str,
           skip_hint: str | None = SKIP_HINT, where: str = "line") -> DatasetError:
    if reason in ("missing_prompt", "missing_answer"):
        fix = (f"put the prompt under '{input_key}' and the reference answer under '{label_key}', or name "
               "the keys your file uses (input_key/label_key; --data.input_key/--data.label_key in training)")
    elif reason in ("invalid_utf8", "invalid_json", "not_an_object"):
        fix = f"write one JSON object per line, e.g. {{\"{input_key}\": \"What is 2 + 3?\", \"{label_key}\": \"5\"}}"
    else:
        fix = "fix or remove the row"
    return DatasetError(f"{path}, {where} {lineno}: {reason}: {detail}. To fix: {fix}"
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
    input_template: str | None = None,
) -> tuple[list[dict], LoadReport]:
    """Read and validate a prompt jsonl file; returns (usable rows, report).

    `tokenizer` needs `encode(text, add_special_tokens=False)` and, for message-list
    prompts, `apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`
    (any Hugging Face tokenizer); it is required when `max_prompt_tokens` is set.
    """
    opts = _Options(str(path), input_key, label_key, max_prompt_tokens, tokenizer, skip_invalid,
                    apply_chat_template, input_template, skip_hint, "line")
    _check_tokenizer(opts)
    report = LoadReport(path=str(path), max_prompt_tokens=max_prompt_tokens)
    rows: list[dict] = []
    try:
        f = open(path, "rb")  # bytes, so a bad UTF-8 sequence is reported with its line
    except OSError as e:
        raise DatasetError(f"{path}: cannot read the dataset file ({e.strerror}); check the path") from None
    with f:
        pending: list = []
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                report.blank_lines += 1
                continue
            row, problem = _parse(raw)
            _take(row, problem, lineno, rows, report, opts, pending)
    _count_lengths(pending, rows, report, opts)
    return _finish(rows, report, opts)


class _Options(NamedTuple):
    """What every row is checked against (the arguments of load_jsonl_rows / load_records)."""
    path: str
    input_key: str
    label_key: str
    max_prompt_tokens: Optional[int]
    tokenizer: object
    skip_invalid: bool
    apply_chat_template: bool
    input_template: Optional[str]
    skip_hint: Optional[str]
    where: str  # "line" for jsonl, "row" for tables


_LENGTH_BATCH = 4096  # rows whose prompt lengths are counted in one tokenizer call


def _take(row, problem, lineno: int, rows: list, report: "LoadReport", o: _Options, pending: list) -> None:
    """Check one parsed row: keep it in `rows`, drop it (counted), or raise DatasetError. With a
    prompt limit, a valid row waits in `pending` until its batch's lengths are counted."""
    report.lines_read += 1
    if problem is None:
        problem = check_row(row, o.input_key, o.label_key)
    if problem is not None:
        if not o.skip_invalid:
            raise _error(o.path, lineno, *problem, o.input_key, o.label_key, o.skip_hint, where=o.where)
        report.drop(problem[0], lineno)
        return
    if o.max_prompt_tokens is None:
        _keep(row, lineno, rows, report, o)
        return
    pending.append((row, lineno))
    if len(pending) >= _LENGTH_BATCH:
        _count_lengths(pending, rows, report, o)


def _count_lengths(pending: list, rows: list, report: "LoadReport", o: _Options) -> None:
    """Drop the pending rows over the prompt limit (counted), keep the others in file order."""
    if not pending:
        return
    texts = [prompt_text(row[o.input_key], o.tokenizer, o.apply_chat_template, o.input_template)
             for row, _ in pending]
    for (row, lineno), n in zip(pending, token_counts(texts, o.tokenizer)):
        if n > o.max_prompt_tokens:
            report.drop(TOO_LONG, lineno)
        else:
            _keep(row, lineno, rows, report, o)
    pending.clear()


def _keep(row, lineno: int, rows: list, report: "LoadReport", o: _Options) -> None:
    if not isinstance(row[o.label_key], str):
        row[o.label_key] = str(row[o.label_key])
        report.answers_converted += 1
    report.count_prompt(row[o.input_key], lineno)
    rows.append(row)


def _finish(rows: list, report: "LoadReport", o: _Options) -> tuple[list[dict], "LoadReport"]:
    report.kept = len(rows)
    if not report.lines_read:
        what = "file" if o.where == "line" else "dataset"
        raise DatasetError(f"{o.path}: the {what} is empty (no rows); give one "
                           f"{{\"{o.input_key}\": ..., \"{o.label_key}\": ...}} object per row")
    if not rows:
        raise DatasetError(f"no usable rows: {report.summary()}")
    return rows, report


def load_records(path: str, records, input_key: str = "prompt", label_key: str = "answer",
                 max_prompt_tokens: Optional[int] = None, tokenizer=None, skip_invalid: bool = False,
                 apply_chat_template: bool = False, input_template: Optional[str] = None,
                 skip_hint: Optional[str] = SKIP_HINT) -> tuple[list[dict], "LoadReport"]:
    """The checks of load_jsonl_rows on rows read already (parquet, arrow, csv, a JSON array,
    a save_to_disk folder: data/folders.py); `path` names them in messages, rows count from 1."""
    opts = _Options(str(path), input_key, label_key, max_prompt_tokens, tokenizer, skip_invalid,
                    apply_chat_template, input_template, skip_hint, "row")
    _check_tokenizer(opts)
    report, rows, pending = LoadReport(path=str(path), max_prompt_tokens=max_prompt_tokens), [], []
    for index, row in enumerate(records, start=1):
        _take(row, None, index, rows, report, opts, pending)
    _count_lengths(pending, rows, report, opts)
    return _finish(rows, report, opts)


def _check_tokenizer(o: _Options) -> None:
    if o.max_prompt_tokens is not None and o.tokenizer is None:
        raise ValueError("max_prompt_tokens needs a tokenizer to count prompt tokens")


def _parse(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, ("invalid_utf8", f"bytes at offset {e.start} are not UTF-8")
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, ("invalid_json", f"not valid JSON ({e.msg}, column {e.colno})")
