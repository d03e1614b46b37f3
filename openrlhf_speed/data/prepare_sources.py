"""The real datasets `openrlhf-speed prepare-data` reads, and how their files are read.

Implements the source table (where each dataset comes from, which columns hold the
problem, the answer and the metadata) and the reading of one local file, parquet or
json/jsonl, into rows. Nothing here downloads: users fetch the files on a machine with
network (the ids are in SOURCES) and pass the local paths.

Column detection: for each role (problem, answer, metadata) a source lists alternative
column names, matched case-insensitively against the file's columns; the first present
wins. `a.b` reads key `b` of a struct/dict column `a` (DAPO's `reward_model.ground_truth`).
A file whose columns match no alternative of a required role is an error naming the file,
the names looked for and the columns found.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import chain, islice
from typing import Iterator

SCHEMA_SAMPLE_ROWS = 1000  # json/jsonl: columns are the keys seen in the first rows
PARQUET_MAGIC = b"PAR1"


class PrepareError(ValueError):
    """A file or option that cannot be used; the message names it and says what to do."""


@dataclass(frozen=True)
class Source:
    name: str
    split: str  # output file: "train" (training sources) or "test" (evaluation sets)
    where: str  # where users download it (Hugging Face dataset ids and file names)
    problem: tuple[str, ...]
    answer: tuple[str, ...]  # a "solution" column gives the content of its last \boxed{}
    meta: tuple[str, ...] = ()  # copied into the row when present
    integer_only: bool = False  # keep only integer answers (the SPEED paper's NuminaMath filter)
    drop_proofs: bool = False
    unwrap_dapo: bool = False  # strip DAPO's "Answer:" instruction wrapper from the prompt
    year: int | None = None  # drop rows whose year/url/id names another year
    default_heldout: int = 0


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source(
        "dapo17k", "train",
        "BytedTsinghua-SIA/DAPO-Math-17k (data/dapo-math-17k.parquet; ~1.8M rows, each of the "
        "~17.4k prompts repeated, so most rows are dropped as duplicate_problem)",
        problem=("prompt", "problem", "question"),
        answer=("reward_model.ground_truth", "answer", "ground_truth"),
        meta=("data_source", "extra_info.index"), unwrap_dapo=True, default_heldout=1000,
    ),
    Source(
        "deepscaler", "train", "agentica-org/DeepScaleR-Preview-Dataset (deepscaler.json)",
        problem=("problem", "question"), answer=("answer",),
    ),
    Source(
        "numina", "train",
        "AI-MO/NuminaMath-1.5 (data/*.parquet) or AI-MO/NuminaMath-CoT (answers read from the "
        "solution's last \\boxed{})",
        problem=("problem", "question"), answer=("answer", "solution"),
        meta=("problem_type", "question_type", "source"), integer_only=True, drop_proofs=True,
    ),
    Source(
        "math500", "test", "HuggingFaceH4/MATH-500 (test.jsonl)",
        problem=("problem",), answer=("answer",), meta=("level", "subject", "unique_id"),
    ),
    Source(
        "aime2024", "test", "Maxwell-Jia/AIME_2024 (aime_2024_problems.parquet)",
        problem=("problem", "question"), answer=("answer",), meta=("id", "url", "year"), year=2024,
    ),
    Source(
        "aime2025", "test",
        "opencompass/AIME2025 (aime2025-I.jsonl and aime2025-II.jsonl: pass both) or yentinglin/aime_2025",
        problem=("problem", "question"), answer=("answer",), meta=("id", "url", "year"), year=2025,
    ),
    Source(
        "amc2023", "test",
        "math-ai/amc23 (40 problems) or AI-MO/aimo-validation-amc (AMC 12 2022 and 2023; rows whose "
        "url names 2022 are dropped as other_year)",
        problem=("problem", "question"), answer=("answer",), meta=("id", "url", "year"), year=2023,
    ),
)}


def resolve_column(alternatives: tuple[str, ...], columns: list[str]) -> str | None:
    """The first alternative present in `columns` (any case), spelled as in the file."""
    by_lower = {c.lower(): c for c in columns}
    for alt in alternatives:
        head, dot, rest = alt.partition(".")
        if head.lower() in by_lower:
            return by_lower[head.lower()] + dot + rest
    return None


def get_value(row: dict, column: str):
    """The row's value of a resolved column; `a.b` looks up key `b` (any case) of dict `a`."""
    head, _, rest = column.partition(".")
    value = row.get(head)
    for part in rest.split(".") if rest else ():
        if not isinstance(value, dict):
            return None
        value = next((v for k, v in value.items() if str(k).lower() == part.lower()), None)
    return value


@dataclass
class TableFile:
    """One input file: its format, its top-level columns, and its rows on demand."""

    path: str
    format: str  # "parquet" or "json"
    columns: list[str]
    _head: list  # json: rows parsed for the schema, replayed first
    _tail: Iterator

    def rows(self, columns: list[str]) -> Iterator[tuple[int, dict | None]]:
        """(1-based row or line number, row) pairs; row is None for an unreadable line."""
        if self.format == "json":
            yield from chain(self._head, self._tail)
            return
        import pyarrow.parquet as pq

        number = 0
        try:
            for batch in pq.ParquetFile(self.path).iter_batches(columns=columns, batch_size=8192):
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise PrepareError(f"{self.path}: cannot read parquet row {number + 1} ({e}); re-download the file")


def open_table(path: str) -> TableFile:
    """Open a parquet or json/jsonl file (parquet is recognised by its magic bytes)."""
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
        raise PrepareError(f"{path}: {what}; pass the downloaded .parquet/.jsonl/.json file(s) with --input")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == PARQUET_MAGIC:
        return _open_parquet(path)
    return _open_json(path)


def _open_parquet(path: str) -> TableFile:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PrepareError(f"{path}: reading parquet needs pyarrow (pip install pyarrow), or convert it to jsonl")
    try:
        names = pq.ParquetFile(path).schema_arrow.names
    except Exception as e:
        raise PrepareError(f"{path}: not a readable parquet file ({e}); re-download it") from None
    return TableFile(path, "parquet", list(names), [], iter(()))


def _open_json(path: str) -> TableFile:
    f = open(path, "rb")
    first = f.read(4096).lstrip()[:1]
    f.seek(0)
    if first == b"[":  # one JSON array of objects (DeepScaleR's deepscaler.json)
        try:
            data = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PrepareError(f"{path}: not valid JSON ({e}); expected a list of objects or one object per line")
        finally:
            f.close()
        rows = iter([(i, row if isinstance(row, dict) else None) for i, row in enumerate(data, start=1)])
    else:
        rows = _jsonl_rows(f)
    head = list(islice(rows, SCHEMA_SAMPLE_ROWS))
    columns: dict[str, None] = {}
    for _, row in head:
        columns.update(dict.fromkeys(row or ()))
    return TableFile(path, "json", list(columns), head, rows)


def _jsonl_rows(f) -> Iterator[tuple[int, dict | None]]:
    with f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                row = None
            yield lineno, row if isinstance(row, dict) else None


def sources_help() -> str:
    lines = ["sources (download on a machine with network, e.g. `hf download --repo-type "
             "dataset ID --local-dir DIR`, then pass the local files):"]
    for s in SOURCES.values():
        lines.append(f"  {s.name:<11} -> {s.split + '.jsonl':<12} {s.where}")
    return "\n".join(lines)
