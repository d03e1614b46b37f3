"""`openrlhf-speed prepare-data`: real math datasets (local files) -> the project's prompt jsonl.

Implements `prepare` and its command line. A source (prepare_sources.SOURCES: DAPO-17k,
DeepScaleR, NuminaMath, MATH500, AIME 2024/2025, AMC 2023) is read from parquet or
json/jsonl files the user downloaded; nothing is downloaded here. Each kept row is
    {"prompt": [{"role": "user", "content": problem + DEFAULT_INSTRUCTION}], "answer": "42",
     "question": problem, "id": "numina-00012", "datasource": "numina",
     "level": ..., "subject": ... (when the source has them), "meta": {other source fields}}
like the embedded data (build.make_row), and trains with `--data.apply_chat_template
--data.input_key prompt --data.label_key answer`.

Outputs in --out: training sources write `train.jsonl` (and `heldout.jsonl` when rows are
held out), evaluation sets write `test.jsonl`; `report.json` has the counts.

- Every row is kept or dropped for one reason (`decide`), counted with its first locations;
  a bad row never stops the run. Checks, in order: invalid_row, missing_problem,
  duplicate_problem (the problem, whitespace-collapsed, of a row already kept),
  proof_problem, missing_answer, non_integer_answer, other_year.
- NuminaMath keeps only integer answers and drops proofs, as the SPEED paper does.
- DAPO-17k prompts carry an "Answer: $Answer" instruction wrapper that would contradict
  the \\boxed{} instruction; it is stripped when recognised, else the text is kept and
  counted (prompt_kept_wrapped). DAPO's file repeats each prompt ~100 times: duplicates go.
- Held-out rows (default 1000 for DAPO-17k) are a seeded sample of the unique rows, drawn
  before --max_rows, at most half the rows; ids number the unique rows in file order, so
  an id does not depend on the seed or the caps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from openrlhf_speed.data.prepare_sources import (
    SOURCES, PrepareError, Source, TableFile, get_value, open_table, resolve_column, sources_help,
)
from openrlhf_speed.data.prompts import DEFAULT_INSTRUCTION, user_turn
from openrlhf_speed.rewards.extract import extract_boxed, normalize_gold

DROP_REASONS = (
    "invalid_row", "missing_problem", "duplicate_problem", "proof_problem", "missing_answer",
    "non_integer_answer", "other_year",
)
KEPT_WRAPPED = "prompt_kept_wrapped"
_EXAMPLES = 5  # locations kept per reason, for the report

DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer")
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'
ANSWER_PLACEHOLDERS = {"notfound", "not found", "proof"}  # NuminaMath-1.5 writes these for no answer
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?")
_YEAR = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")
LIFTED_META = ("level", "subject")  # top-level fields, as in the embedded data


@dataclass
class Record:
    question: str
    answer: str
    meta: dict
    wrapped: bool = False  # DAPO wrapper present but not recognised: text kept as is


@dataclass
class Counts:
    rows_read: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    where: dict = field(default_factory=dict)  # reason -> first "file:row" locations

    def count(self, reason: str, location: str, note: bool = False) -> None:
        (self.notes if note else self.dropped)[reason] += 1
        places = self.where.setdefault(reason, [])
        if len(places) < _EXAMPLES:
            places.append(location)


def unwrap_dapo(text: str) -> str | None:
    """The bare problem inside DAPO's instruction wrapper, or None when it is not recognised."""
    if not (text.startswith(DAPO_PREFIX) and text.endswith(DAPO_SUFFIX)):
        return None
    body = text[len(DAPO_PREFIX): -len(DAPO_SUFFIX)]
    cut = body.find("\n\n")  # the wrapper's first sentence ends in a blank line
    return (body[cut:].strip() or None) if cut >= 0 else None


def problem_text(value, unwrap: bool) -> tuple[str | None, bool]:
    """(problem, kept_wrapped) from a string or a chat message list (its last user turn)."""
    if isinstance(value, list):
        turns = [m for m in value if isinstance(m, dict) and isinstance(m.get("content"), str)]
        users = [m for m in turns if m.get("role") == "user"] or turns
        value = users[-1]["content"] if users else None
    if not isinstance(value, str) or not value.strip():
        return None, False
    text = value.strip()
    if not unwrap:
        return text, False
    bare = unwrap_dapo(text)
    return (bare, False) if bare else (text, True)


def normalize_answer(value, from_solution: bool) -> str | None:
    """The reference answer as a string; a full solution gives its last \\boxed{} content."""
    if from_solution:
        value = extract_boxed(value) if isinstance(value, str) else None
    if isinstance(value, float) and value.is_integer():  # aimo-validation-amc stores 142.0
        value = int(value)
    answer = normalize_gold(value)
    return None if answer is None or answer.lower() in ANSWER_PLACEHOLDERS else answer


def as_integer(answer: str) -> str | None:
    """"1,234" / "+7" / "12.0" -> "1234" / "7" / "12"; None for anything not an integer."""
    text = answer.replace("{,}", ",").replace("\\!", "").replace(" ", "")
    if not _INTEGER.fullmatch(text):
        return None
    return str(int(text.replace(",", "").split(".")[0]))


def is_proof(meta: dict, raw_answer) -> bool:
    qtype = meta.get("question_type")
    return (isinstance(qtype, str) and qtype.strip().lower() == "proof") or (
        isinstance(raw_answer, str) and raw_answer.strip().lower() == "proof")


def names_other_year(meta: dict, year: int) -> bool:
    """True when the row's year, url or id names a year other than `year`."""
    for key in ("year", "url", "id"):
        found = _YEAR.search(str(meta.get(key, "")))
        if found:
            return int(found.group()) != year
    return False


def problem_key(question: str) -> str:
    return " ".join(question.split())


def decide(source: Source, row: dict | None, columns: dict, kept: set[str]) -> tuple[str, Record | None]:
    """("kept", record) or (drop reason, None) for one input row; `kept` holds the problem
    keys already kept. Duplicates are checked early: DAPO's file is 99% duplicates."""
    if row is None:
        return "invalid_row", None
    question, wrapped = problem_text(get_value(row, columns["problem"]), source.unwrap_dapo)
    if question is None:
        return "missing_problem", None
    if problem_key(question) in kept:
        return "duplicate_problem", None
    meta = {key: v for key, col in columns["meta"].items() if (v := get_value(row, col)) is not None}
    raw_answer = get_value(row, columns["answer"])
    if source.drop_proofs and is_proof(meta, raw_answer):
        return "proof_problem", None
    answer = normalize_answer(raw_answer, from_solution=columns["answer"].lower() == "solution")
    if answer is None:
        return "missing_answer", None
    if source.integer_only and (answer := as_integer(answer)) is None:
        return "non_integer_answer", None
    if source.year is not None and names_other_year(meta, source.year):
        return "other_year", None
    return "kept", Record(question, answer, meta, wrapped)


def resolve_columns(source: Source, table: TableFile) -> dict:
    """{"problem": col, "answer": col, "meta": {key: col}}; raises naming what was looked for."""
    found = {}
    for role in ("problem", "answer"):
        alternatives = getattr(source, role)
        found[role] = resolve_column(alternatives, table.columns)
        if found[role] is None:
            raise PrepareError(
                f"{table.path}: no {role} column for --source {source.name}: looked for "
                f"{', '.join(alternatives)} (any case); the file has columns: "
                f"{', '.join(table.columns) or 'none (no readable rows)'}. Check --source, or rename the column."
            )
    found["meta"] = {}
    for alt in source.meta:
        col = resolve_column((alt,), table.columns)
        if col is not None:
            found["meta"][alt.rpartition(".")[2].lower()] = col
    return found


def read_records(source: Source, tables: list[TableFile], counts: Counts) -> tuple[list[Record], list[dict]]:
    """Unique kept records of all files in order, and each file's summary for the report."""
    records: list[Record] = []
    seen: set[str] = set()
    files = []
    for table in tables:
        columns = resolve_columns(source, table)
        used = (columns["problem"], columns["answer"], *columns["meta"].values())
        needed = sorted({c.partition(".")[0] for c in used})  # parquet: read only these columns
        name, rows = os.path.basename(table.path), 0
        for number, row in table.rows(needed):
            rows += 1
            location = f"{name}:{number}"
            reason, record = decide(source, row, columns, seen)
            if record is None:
                counts.count(reason, location)
                continue
            seen.add(problem_key(record.question))
            if record.wrapped:
                counts.count(KEPT_WRAPPED, location, note=True)
            records.append(record)
        counts.rows_read += rows
        files.append({"path": table.path, "format": table.format, "rows": rows,
                      "columns": {"problem": columns["problem"], "answer": columns["answer"], **columns["meta"]}})
    counts.kept = len(records)
    return records, files


def make_row(source: Source, record: Record, row_id: str, instruction: str = DEFAULT_INSTRUCTION) -> dict:
    row = {
        "prompt": [{"role": "user", "content": user_turn(record.question, instruction)}],
        "answer": record.answer, "question": record.question, "id": row_id, "datasource": source.name,
    }
    row.update({k: record.meta[k] for k in LIFTED_META if k in record.meta})
    meta = {k: v for k, v in record.meta.items() if k not in LIFTED_META}
    if meta:
        row["meta"] = meta
    return row


def split_heldout(n: int, requested: int, seed: int, source: str) -> tuple[set[int], int]:
    """Seeded sample of row indices to hold out, capped at half the rows; (indices, cap used)."""
    k = min(requested, n // 2)
    # String seeds hash with SHA-512 in `random`: stable across processes and PYTHONHASHSEED.
    rng = random.Random(f"openrlhf_speed.prepare/{source}/{seed}/heldout")
    return set(rng.sample(range(n), k)), k


def prepare(
    source_name: str, inputs: list[str], out_dir: str, heldout: int | None = None, seed: int = 0,
    max_rows: int | None = None, instruction: str = DEFAULT_INSTRUCTION,
) -> dict:
    """Convert `inputs` of one source into out_dir's jsonl files and report.json; returns the report.

    Raises PrepareError for a missing/unreadable file, columns that cannot be found, bad
    options, or no usable row at all.
    """
    if source_name not in SOURCES:
        raise PrepareError(f"unknown source {source_name!r}; sources are: {', '.join(SOURCES)}")
    source = SOURCES[source_name]
    requested = source.default_heldout if heldout is None else heldout
    if requested < 0 or (max_rows is not None and max_rows < 1):
        raise PrepareError("--heldout must be >= 0 and --max_rows >= 1")
    if requested and source.split != "train":
        raise PrepareError(f"--heldout applies to training sources; {source.name} is an evaluation set (test.jsonl)")
    tables = [open_table(path) for path in inputs]  # every file is checked before any is read
    for table in tables:
        resolve_columns(source, table)
    counts = Counts()
    records, files = read_records(source, tables, counts)
    if not records:
        raise PrepareError(f"no usable rows in {', '.join(inputs)} (read {counts.rows_read}; dropped "
                           f"{_reasons(counts.dropped) or 'none'}); check --source and the files")

    width = max(5, len(str(len(records))))
    rows = [make_row(source, r, f"{source.name}-{i:0{width}d}", instruction) for i, r in enumerate(records)]
    held, k = split_heldout(len(rows), requested, seed, source.name) if requested else (set(), 0)
    main_rows = [row for i, row in enumerate(rows) if i not in held]
    over_max = max(0, len(main_rows) - max_rows) if max_rows else 0
    splits = {source.split: main_rows[: len(main_rows) - over_max]}
    if held:
        splits["heldout"] = [row for i, row in enumerate(rows) if i in held]

    os.makedirs(out_dir, exist_ok=True)
    for split, split_rows in splits.items():
        with open(os.path.join(out_dir, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for row in split_rows:
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    stale = [name for name in ("train.jsonl", "heldout.jsonl", "test.jsonl")
             if name[:-6] not in splits and os.path.exists(os.path.join(out_dir, name))]
    report = {
        "source": source.name, "where": source.where, "inputs": files, "rows_read": counts.rows_read,
        "kept": counts.kept, "dropped": dict(counts.dropped), "notes": dict(counts.notes),
        "examples": counts.where, "instruction": instruction, "seed": seed,
        "heldout": {"requested": requested, "rows": k, "capped": k < requested},
        "max_rows": max_rows, "left_out_by_max_rows": over_max,
        "splits": {split: {"path": f"{split}.jsonl", "rows": len(r)} for split, r in splits.items()},
        "stale_files": stale,  # not written by this run: from an earlier one
    }
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
    return report


def _reasons(counter: Counter) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counter.items(), key=lambda kv: -kv[1]))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openrlhf-speed prepare-data",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Convert downloaded math datasets (parquet or json/jsonl files; nothing is downloaded) "
        "into prompt jsonl: train.jsonl (+ heldout.jsonl) for training sources, test.jsonl for evaluation "
        "sets, and report.json with rows read, kept and dropped per reason. Train with "
        "--data.apply_chat_template --data.input_key prompt --data.label_key answer.",
        epilog=sources_help() + "\n\ndrop reasons: " + ", ".join(DROP_REASONS)
        + f"; {KEPT_WRAPPED} counts DAPO prompts whose wrapper was not recognised (kept as is).",
    )
    parser.add_argument("--source", required=True, choices=list(SOURCES), help="which dataset the files hold")
    parser.add_argument("--input", required=True, nargs="+", metavar="FILE", help="local .parquet/.jsonl/.json files")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--heldout", type=int, default=None, metavar="N",
        help="unique rows held out into heldout.jsonl (default 1000 for dapo17k, else 0; at most half the rows)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the held-out sample (default 0)")
    parser.add_argument(
        "--max_rows", type=int, default=None, metavar="N", help="keep at most N rows in train/test.jsonl"
    )
    parser.add_argument(
        "--instruction", default=DEFAULT_INSTRUCTION,
        help="user-turn text; {question} marks where the problem goes (default: %(default)r)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """`openrlhf-speed prepare-data`; returns the exit code (2 for a usage or file error)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    try:
        report = prepare(args.source, args.input, args.out, args.heldout, args.seed, args.max_rows, args.instruction)
    except (PrepareError, OSError) as e:
        print(f"openrlhf-speed prepare-data: error: {e}", file=sys.stderr)
        return 2
    _print_summary(report, args.out)
    return 0


def _print_summary(report: dict, out_dir: str) -> None:
    dropped = sum(report["dropped"].values())
    print(f"{report['source']}: read {report['rows_read']} rows from {len(report['inputs'])} file(s); "
          f"kept {report['kept']}, dropped {dropped}")
    for reason, n in sorted(report["dropped"].items(), key=lambda kv: -kv[1]):
        print(f"  dropped {reason:<20} {n:>9}  (e.g. {', '.join(report['examples'][reason])})")
    held = report["heldout"]
    if held["capped"]:
        print(f"warning: held out {held['rows']} rows, {held['requested']} requested: at most half of the "
              f"{report['kept']} kept rows are held out", file=sys.stderr)
    if report["notes"].get(KEPT_WRAPPED):
        print(f"warning: {report['notes'][KEPT_WRAPPED]} prompts did not have the recognised DAPO wrapper and were "
              f"kept as written (e.g. {', '.join(report['examples'][KEPT_WRAPPED])})", file=sys.stderr)
    if report["left_out_by_max_rows"]:
        print(f"note: --max_rows {report['max_rows']} left out {report['left_out_by_max_rows']} rows")
    for name in report["stale_files"]:
        print(f"warning: {os.path.join(out_dir, name)} is from an earlier run, not this one; delete it",
              file=sys.stderr)
    written = [f"{os.path.join(out_dir, s['path'])} ({s['rows']} rows)" for s in report["splits"].values()]
    print(f"wrote {', '.join(written)} and {os.path.join(out_dir, 'report.json')}")
