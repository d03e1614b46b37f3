"""Prompt datasets as a user passes them (data/folders.py): files of every accepted format and
folders (save_to_disk, jsonl and parquet shards), checked row by row like a jsonl file; an
empty folder or one without data files is refused in one line that names it."""

import json

import pytest

from openrlhf_speed.data.folders import ACCEPTED, folder_files, load_dataset_rows
from openrlhf_speed.data.loader import DatasetError

ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("make", ["jsonl_shards", "parquet_shards", "data_subfolder", "save_to_disk",
                                  "save_to_disk_dict"])
def test_folders_a_user_would_pass_are_read_whole(tmp_path, make):
    folder = tmp_path / "ds"
    if make == "jsonl_shards":
        write_jsonl(folder / "train-00000-of-00002.jsonl", ROWS[:3])
        write_jsonl(folder / "train-00001-of-00002.jsonl", ROWS[3:])
    elif make == "parquet_shards":
        write_parquet(folder / "train-00000-of-00002.parquet", ROWS[:3])
        write_parquet(folder / "train-00001-of-00002.parquet", ROWS[3:])
        (folder / "README.md").write_text("# a dataset card\n")  # not a data file: ignored
    elif make == "data_subfolder":  # the Hub's layout: data/train-*.parquet beside data/test-*.parquet
        write_parquet(folder / "data" / "train-00000-of-00001.parquet", ROWS)
        write_parquet(folder / "data" / "test-00000-of-00001.parquet", ROWS[:1])
    else:
        from datasets import Dataset, DatasetDict

        ds = Dataset.from_list(ROWS)
        (DatasetDict({"train": ds, "test": ds.select([0])}) if make.endswith("dict") else ds).save_to_disk(str(folder))
    rows, report = load_dataset_rows(str(folder))
    assert [r["answer"] for r in sorted(rows, key=lambda r: int(r["answer"]))] == [str(i + 1) for i in range(6)]
    assert report.kept == 6 and report.path == str(folder) and not report.duplicates


@pytest.mark.parametrize("contents", [[], ["README.md", "notes.txt"]], ids=["empty", "no_data_file"])
def test_a_folder_without_data_files_is_refused_naming_it(tmp_path, contents):
    folder = tmp_path / "prompts"
    folder.mkdir()
    for name in contents:
        (folder / name).write_text("hello\n")
    with pytest.raises(DatasetError) as e:
        load_dataset_rows(str(folder))
    message = str(e.value)
    assert message.startswith(f"{folder}: no dataset file in this folder") and ACCEPTED in message
    assert ("it is empty" if not contents else "it holds README.md, notes.txt") in message
    assert "\n" not in message


def test_rows_in_shards_and_tables_are_checked_like_a_jsonl_file(tmp_path):
    folder = tmp_path / "ds"
    write_jsonl(folder / "train-00000-of-00002.jsonl", ROWS[:3])
    write_jsonl(folder / "train-00001-of-00002.jsonl", ROWS[3:] + [{"prompt": "x?", "answer": ""}])
    with pytest.raises(DatasetError, match=r"train-00001-of-00002.jsonl, line 4: empty_answer"):
        load_dataset_rows(str(folder))
    table = write_parquet(tmp_path / "t.parquet", ROWS[:2] + [{"prompt": None, "answer": "3"}])
    with pytest.raises(DatasetError, match=r"t.parquet, row 3: missing_prompt"):
        load_dataset_rows(str(table))


@pytest.mark.parametrize("kind", ["parquet", "csv", "json_array", "arrow"])
def test_single_files_of_each_format(tmp_path, kind):
    if kind == "parquet":
        path = write_parquet(tmp_path / "p.parquet", ROWS)
    elif kind == "csv":
        path = tmp_path / "p.csv"
        path.write_text("prompt,answer\n" + "".join(f"{r['prompt']},{r['answer']}\n" for r in ROWS))
    elif kind == "json_array":
        path = tmp_path / "p.json"
        path.write_text(json.dumps(ROWS))
    else:
        from datasets import Dataset

        Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
        path = next((tmp_path / "saved").glob("*.arrow"))
    rows, report = load_dataset_rows(str(path))
    assert report.kept == 6 and {r["answer"] for r in rows} == {str(i + 1) for i in range(6)}


def test_split_is_named_and_a_missing_one_refused(tmp_path):
    folder = tmp_path / "ds"
    write_jsonl(folder / "train.jsonl", ROWS[:4])
    write_jsonl(folder / "test.jsonl", ROWS[4:])
    assert [p.rsplit("/", 1)[-1] for p in folder_files(str(folder), "test")] == ["test.jsonl"]
    assert load_dataset_rows(str(folder), split="test")[1].kept == 2
    with pytest.raises(DatasetError, match=r"no 'validation' split among its files \(splits: test, train\)"):
        load_dataset_rows(str(folder), split="validation")


def test_duplicates_are_counted_within_and_across_shards(tmp_path):
    folder = tmp_path / "ds"
    write_jsonl(folder / "train-00000-of-00002.jsonl", ROWS[:3] + [ROWS[0]])
    write_jsonl(folder / "train-00001-of-00002.jsonl", [ROWS[0], ROWS[1]] + ROWS[3:])
    _, report = load_dataset_rows(str(folder))
    # ROWS[0] three times, ROWS[1] twice: 3 rows repeat an earlier prompt; 2 prompts repeat.
    assert (report.duplicates, report.repeated_prompts, report.most_repeats) == (3, 2, 3)
