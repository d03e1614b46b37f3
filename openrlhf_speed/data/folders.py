"""The prompt datasets a user passes as `--data.prompt_dataset`, read the way OpenRLHF's
`blending_datasets` will read them, and checked row by row with loader.py before a run starts.

Accepted, as OpenRLHF 0.11.2 loads them:
- a file: .jsonl (or .json with one object per line), a .json array, .parquet, .arrow, .csv;
- a folder written by `datasets`' `save_to_disk` (a Dataset, or a DatasetDict whose split
  `--data.prompt_split` is taken);
- a folder of data files (jsonl shards, parquet shards, ...): the files `datasets.load_dataset`
  would take for that split, found with its own rules (`train-00000-of-00002.parquet`,
  `data/train.jsonl`, or every file when no name says a split).

An empty folder, or one without such files, is refused with `DatasetError` naming it and the
accepted forms: OpenRLHF would fail later, inside a Ray actor, or load a README as text.
Reading needs `datasets` and `pyarrow` (installed with OpenRLHF); they are imported here only.
"""

from __future__ import annotations

import json
import os

from openrlhf_speed.data.loader import DatasetError, LoadReport, load_jsonl_rows, load_records

TABLE_EXTENSIONS = (".parquet", ".arrow", ".csv")
FILE_EXTENSIONS = (".jsonl", ".json") + TABLE_EXTENSIONS
ACCEPTED = ("accepted: a .jsonl/.json/.parquet/.arrow/.csv file, a folder of such files (shards of one split, e.g. "
            "train-00000-of-00002.parquet), or a folder written by datasets' save_to_disk")
# datasets' builder modules for the data files we read; others (text, imagefolder, ...) are refused.
_MODULES = {"json": (".jsonl", ".json"), "parquet": (".parquet",), "arrow": (".arrow",), "csv": (".csv",)}


def is_saved_dataset(path: str) -> bool:
    """A folder written by save_to_disk (a Dataset's state.json, or a DatasetDict's dataset_dict.json)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_dict.json"))


def folder_files(path: str, split: str = "train", data_dir: str | None = None) -> list[str]:
    """The data files `datasets.load_dataset(path, data_dir=data_dir)` takes for `split`, sorted;
    DatasetError when there are none."""
    from datasets.load import LocalDatasetModuleFactory

    found = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
    listing = f"it holds {', '.join(found[:5])}{', ...' if len(found) > 5 else ''}" if found else "it is empty"
    try:
        module = LocalDatasetModuleFactory(path, data_dir=data_dir).get_module()
    except FileNotFoundError:  # datasets' EmptyDatasetError and DataFilesNotFoundError are ones
        raise DatasetError(f"{path}: no dataset file in this folder ({listing}); {ACCEPTED}") from None
    kind = module.module_path.rsplit(".", 1)[-1]
    if kind not in _MODULES:
        raise DatasetError(f"{path}: no dataset file in this folder ({listing}; datasets would read it as "
                           f"'{kind}'); {ACCEPTED}")
    data_files = module.builder_configs_parameters.builder_configs[0].data_files
    splits = {str(name): list(files) for name, files in data_files.items()}
    if split not in splits:
        raise DatasetError(f"{path}: no '{split}' split among its files (splits: {', '.join(sorted(splits))}); "
                           "name one with --data.prompt_split, or rename the files")
    files = [f for f in splits[split] if f.lower().endswith(_MODULES[kind])]
    if not files:
        raise DatasetError(f"{path}: no dataset file in this folder ({listing}); {ACCEPTED}")
    return sorted(files)


def _table_rows(path: str) -> list:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if ext == ".csv":
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path).to_pylist()
    from datasets import Dataset  # .arrow: datasets' own stream files

    return Dataset.from_file(path).to_list()


def _saved_rows(path: str, split: str) -> list:
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(path)
    if isinstance(data, DatasetDict):
        if split not in data:
            raise DatasetError(f"{path}: this saved DatasetDict has no '{split}' split (splits: "
                               f"{', '.join(sorted(data))}); name one with --data.prompt_split")
        data = data[split]
    return data.to_list()


def _starts_with_bracket(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4096).lstrip().startswith(b"[")


def load_file_rows(path: str, **checks) -> tuple[list[dict], LoadReport]:
    """One data file, any accepted format, checked with loader.py (`checks`: its keyword arguments)."""
    ext = os.path.splitext(path)[1].lower()
    if ext in (".jsonl", ".json") and not _starts_with_bracket(path):
        return load_jsonl_rows(path, **checks)
    try:
        if ext in (".jsonl", ".json"):
            with open(path, encoding="utf-8") as f:
                records = json.load(f)
        else:
            records = _table_rows(path)
    except (ValueError, OSError) as e:  # json, pyarrow and datasets errors are ValueErrors or OSErrors
        raise DatasetError(f"{path}: cannot be read as {ext[1:]} ({type(e).__name__}: {str(e)[:200]}); "
                           f"{ACCEPTED}") from None
    return load_records(path, records if isinstance(records, list) else [records], **checks)


def load_dataset_rows(path: str, split: str = "train", data_dir: str | None = None,
                      **checks) -> tuple[list[dict], LoadReport]:
    """A file or folder of `--data.prompt_dataset`, every row checked; one report for all its files."""
    if not os.path.isdir(path):
        return load_file_rows(path, **checks)
    if is_saved_dataset(path):
        return load_records(path, _saved_rows(path, split), **checks)
    rows, merged = [], None
    for file in folder_files(path, split, data_dir):
        file_rows, report = load_file_rows(file, **checks)
        rows += file_rows
        merged = report if merged is None else _merge(merged, report)
    merged.path = path
    return rows, merged


def _merge(a: LoadReport, b: LoadReport) -> LoadReport:
    """Counts of two files together (line numbers stay per file); duplicates across files count."""
    a.lines_read += b.lines_read
    a.blank_lines += b.blank_lines
    a.kept += b.kept
    a.dropped.update(b.dropped)
    for reason, lines in b.lines.items():
        a.lines.setdefault(reason, lines)
    a.answers_converted += b.answers_converted
    for key, n in b.prompt_counts.items():
        before = a.prompt_counts[key]
        a.prompt_counts[key] += n
        a.duplicates += n - (0 if before else 1)
    a.duplicate_lines = a.duplicate_lines or b.duplicate_lines
    return a
