"""`prepare-data`: each source's schema from parquet and jsonl, keep/drop counts per reason
on hand-built rows, DAPO unwrapping and held-out reservation, loader compatibility, and
the errors (exit code 2, message naming the file) for missing files and unknown columns."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from openrlhf_speed.data import load_jsonl_rows
from openrlhf_speed.data.prepare import (
    DAPO_PREFIX, DAPO_SUFFIX, as_integer, main, names_other_year, prepare, unwrap_dapo,
)
from openrlhf_speed.data.prompts import DEFAULT_INSTRUCTION, user_turn


def write(tmp_path, name, rows, fmt):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def loadable(path):
    rows, report = load_jsonl_rows(str(path), input_key="prompt", label_key="answer")
    assert report.kept == len(rows) and not report.dropped
    return rows


def dapo_wrap(problem):
    return (f"{DAPO_PREFIX} (without quotes) where $Answer is the answer to the problem.\n\n"
            f"{problem}\n\n{DAPO_SUFFIX}")


def dapo_row(problem, answer, index=0):
    return {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": dapo_wrap(problem)}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": f"uuid-{index}"},
    }


NUMINA = [
    {"problem": "Find 6 * 7.", "solution": "... \\boxed{42}", "answer": "42",
     "problem_type": "Algebra", "question_type": "math-word-problem", "source": "olympiads"},
    {"problem": "Prove that 2 is prime.", "solution": "...", "answer": "proof",
     "problem_type": "Number Theory", "question_type": "proof", "source": "olympiads"},
    {"problem": "Halve 1.", "solution": "...", "answer": "\\frac{1}{2}",
     "problem_type": "Algebra", "question_type": "math-word-problem", "source": "amc_aime"},
    {"problem": "Find x.", "solution": "...", "answer": "",
     "problem_type": "Algebra", "question_type": "math-word-problem", "source": "cn_k12"},
    {"problem": "Sum to 1234.", "solution": "...", "answer": "$1,234$",
     "problem_type": "Algebra", "question_type": "MCQ", "source": "cn_k12"},
]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_numina_keeps_integer_answers_and_drops_proofs(tmp_path, fmt):
    path = write(tmp_path, "numina", NUMINA, fmt)
    report = prepare("numina", [path], str(tmp_path / "out"))
    assert (report["rows_read"], report["kept"]) == (5, 2)
    assert report["dropped"] == {"proof_problem": 1, "non_integer_answer": 1, "missing_answer": 1}
    assert report["examples"]["proof_problem"] == [f"numina.{fmt}:2"]
    assert report["inputs"][0]["format"] == ("parquet" if fmt == "parquet" else "json")
    rows = loadable(tmp_path / "out" / "train.jsonl")
    assert [(r["answer"], r["id"], r["datasource"]) for r in rows] == [
        ("42", "numina-00000", "numina"), ("1234", "numina-00001", "numina")]
    assert rows[0]["prompt"] == [{"role": "user", "content": user_turn("Find 6 * 7.", DEFAULT_INSTRUCTION)}]
    assert rows[0]["meta"] == {"problem_type": "Algebra", "question_type": "math-word-problem", "source": "olympiads"}
    assert not (tmp_path / "out" / "heldout.jsonl").exists()
    assert json.loads((tmp_path / "out" / "report.json").read_text())["kept"] == 2


def test_numina_cot_reads_the_answer_from_the_boxed_solution(tmp_path):
    rows = [{"source": "aops", "Problem": "Add 1 and 2.", "Solution": "So we get $\\boxed{3}$."},
            {"source": "aops", "Problem": "Show it.", "Solution": "No box here."},
            {"source": "aops", "Problem": "Ratio?", "Solution": "\\boxed{\\frac{2}{3}}"}]
    report = prepare("numina", [write(tmp_path, "cot", rows, "parquet")], str(tmp_path / "out"))
    assert report["inputs"][0]["columns"]["answer"] == "Solution"
    assert report["kept"] == 1 and report["dropped"] == {"missing_answer": 1, "non_integer_answer": 1}
    assert read(tmp_path / "out" / "train.jsonl")[0]["answer"] == "3"


def dapo_file(tmp_path, n_unique, fmt="parquet", copies=2):
    rows = [dapo_row(f"Problem number {i}: compute {i} + {i}.", str(2 * i), i) for i in range(n_unique)] * copies
    return write(tmp_path, f"dapo{n_unique}", rows, fmt)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_dapo_unwraps_prompts_drops_duplicates_and_holds_out_a_seeded_split(tmp_path, fmt):
    path = dapo_file(tmp_path, 40, fmt)
    report = prepare("dapo17k", [path], str(tmp_path / "a"), heldout=10, seed=1)
    assert (report["rows_read"], report["kept"], report["dropped"]) == (80, 40, {"duplicate_problem": 40})
    assert report["inputs"][0]["columns"]["answer"] == "reward_model.ground_truth"
    train, held = loadable(tmp_path / "a" / "train.jsonl"), loadable(tmp_path / "a" / "heldout.jsonl")
    assert (len(train), len(held)) == (30, 10)
    assert report["splits"] == {"train": {"path": "train.jsonl", "rows": 30},
                                "heldout": {"path": "heldout.jsonl", "rows": 10}}
    assert not {r["id"] for r in train} & {r["id"] for r in held}
    assert {r["id"] for r in train} | {r["id"] for r in held} == {f"dapo17k-{i:05d}" for i in range(40)}
    row = next(r for r in train + held if r["id"] == "dapo17k-00007")
    assert row["question"] == "Problem number 7: compute 7 + 7." and row["answer"] == "14"
    assert row["prompt"][0]["content"] == user_turn(row["question"]) and "Answer:" not in row["prompt"][0]["content"]
    assert row["meta"] == {"data_source": "math_dapo", "index": "uuid-7"}

    prepare("dapo17k", [path], str(tmp_path / "b"), heldout=10, seed=1)
    prepare("dapo17k", [path], str(tmp_path / "c"), heldout=10, seed=2)
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "heldout.jsonl").read_bytes() != (tmp_path / "c" / "heldout.jsonl").read_bytes()


def test_dapo_default_heldout_is_1000_and_is_capped_for_a_small_file(tmp_path, capsys):
    assert main(["--source", "dapo17k", "--input", dapo_file(tmp_path, 12), "--out", str(tmp_path / "o")]) == 0
    out, err = capsys.readouterr()
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["heldout"] == {"requested": 1000, "rows": 6, "capped": True}
    assert len(read(tmp_path / "o" / "heldout.jsonl")) == 6 and len(read(tmp_path / "o" / "train.jsonl")) == 6
    assert "warning: held out 6 rows, 1000 requested" in err
    assert "read 24 rows" in out and "kept 12, dropped 12" in out and "duplicate_problem" in out


def test_dapo_prompt_without_the_wrapper_is_kept_and_reported(tmp_path, capsys):
    rows = [dapo_row("Wrapped one.", "1"), dapo_row("Wrapped two.", "2"),
            {**dapo_row("x", "3"), "prompt": [{"role": "user", "content": "Plain problem, no wrapper."}]}]
    code = main(["--source", "dapo17k", "--input", write(tmp_path, "d", rows, "jsonl"),
                 "--out", str(tmp_path / "o"), "--heldout", "0"])
    assert code == 0
    assert "1 prompts did not have the recognised DAPO wrapper" in capsys.readouterr().err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["notes"] == {"prompt_kept_wrapped": 1} and report["examples"]["prompt_kept_wrapped"] == ["d.jsonl:3"]
    assert [r["question"] for r in read(tmp_path / "o" / "train.jsonl")] == [
        "Wrapped one.", "Wrapped two.", "Plain problem, no wrapper."]


def test_a_heldout_file_left_by_an_earlier_run_is_reported(tmp_path, capsys):
    path, out = dapo_file(tmp_path, 10), str(tmp_path / "o")
    assert main(["--source", "dapo17k", "--input", path, "--out", out, "--heldout", "2"]) == 0
    assert main(["--source", "dapo17k", "--input", path, "--out", out, "--heldout", "0"]) == 0
    assert "heldout.jsonl is from an earlier run" in capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "report.json").read_text())["stale_files"] == ["heldout.jsonl"]


def test_unwrap_dapo_needs_both_ends_of_the_wrapper():
    assert unwrap_dapo(dapo_wrap("What is 1+1?\n\nGive a number.")) == "What is 1+1?\n\nGive a number."
    assert unwrap_dapo(dapo_wrap("x")[:-5]) is None
    assert unwrap_dapo("What is 1+1?") is None


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_eval_sets_write_test_jsonl_with_their_schemas(tmp_path, fmt):
    math500 = [{"problem": "What is $1+1$?", "solution": "\\boxed{2}", "answer": "2", "subject": "Algebra",
                "level": 1, "unique_id": "test/algebra/1.json"},
               {"problem": "Simplify.", "solution": "...", "answer": "\\frac{\\sqrt{3}}{2}", "subject": "Geometry",
                "level": 4, "unique_id": "test/geometry/2.json"}]
    report = prepare("math500", [write(tmp_path, "m", math500, fmt)], str(tmp_path / "math500"))
    rows = loadable(tmp_path / "math500" / "test.jsonl")
    assert report["kept"] == 2 and report["splits"] == {"test": {"path": "test.jsonl", "rows": 2}}
    assert (rows[1]["answer"], rows[1]["level"], rows[1]["subject"]) == ("\\frac{\\sqrt{3}}{2}", 4, "Geometry")
    assert rows[1]["meta"] == {"unique_id": "test/geometry/2.json"}

    aime24 = [{"ID": "2024-II-4", "Problem": "Find m+n.", "Solution": "...", "Answer": 33},
              {"ID": "2024-I-1", "Problem": "Find s.", "Solution": "...", "Answer": 204}]
    prepare("aime2024", [write(tmp_path, "a24", aime24, fmt)], str(tmp_path / "aime2024"))
    assert [r["answer"] for r in loadable(tmp_path / "aime2024" / "test.jsonl")] == ["33", "204"]

    part1 = [{"question": "AIME 2025 I, problem 1?", "answer": "70"}]
    part2 = [{"question": "AIME 2025 II, problem 1?", "answer": "468"}]
    report = prepare("aime2025", [write(tmp_path, "i", part1, fmt), write(tmp_path, "ii", part2, fmt)],
                     str(tmp_path / "aime2025"))
    assert report["rows_read"] == 2 and len(report["inputs"]) == 2
    assert [r["id"] for r in loadable(tmp_path / "aime2025" / "test.jsonl")] == ["aime2025-00000", "aime2025-00001"]

    amc = [{"id": 0, "problem": "AMC 2023 problem.", "answer": 142.0,
            "url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_23"},
           {"id": 1, "problem": "AMC 2022 problem.", "answer": 3.0,
            "url": "https://artofproblemsolving.com/wiki/index.php/2022_AMC_12B_Problems/Problem_1"}]
    report = prepare("amc2023", [write(tmp_path, "amc", amc, fmt)], str(tmp_path / "amc"))
    assert report["dropped"] == {"other_year": 1}
    assert [r["answer"] for r in loadable(tmp_path / "amc" / "test.jsonl")] == ["142"]


def test_deepscaler_json_array_and_bad_rows_never_stop_the_run(tmp_path):
    rows = [{"problem": "P1", "answer": "1", "solution": "..."}, {"problem": "", "answer": "2"},
            {"problem": "P3"}, {"problem": "P1", "answer": "1"}, ["not", "an", "object"],
            {"problem": "P6", "answer": "\\dfrac{1}{2}"}]
    report = prepare("deepscaler", [write(tmp_path, "deepscaler", rows, "json")], str(tmp_path / "o"))
    assert report["kept"] == 2 and report["dropped"] == {
        "missing_problem": 1, "missing_answer": 1, "duplicate_problem": 1, "invalid_row": 1}
    jsonl = tmp_path / "broken.jsonl"
    jsonl.write_text('{"problem": "Q", "answer": "5"}\n{not json\n\n{"problem": "R", "answer": "6"}\n')
    report = prepare("deepscaler", [str(jsonl)], str(tmp_path / "p"), max_rows=1)
    assert report["dropped"] == {"invalid_row": 1} and report["examples"]["invalid_row"] == ["broken.jsonl:2"]
    assert report["left_out_by_max_rows"] == 1 and len(loadable(tmp_path / "p" / "train.jsonl")) == 1


def test_missing_file_is_exit_code_2_naming_the_file(tmp_path, capsys):
    missing = str(tmp_path / "nope.parquet")
    assert main(["--source", "numina", "--input", missing, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert missing in err and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_unknown_columns_are_exit_code_2_naming_file_and_columns(tmp_path, capsys, fmt):
    path = write(tmp_path, "wrong", [{"text": "hello", "label": "1"}], fmt)
    assert main(["--source", "math500", "--input", path, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert path in err and "no problem column for --source math500" in err
    assert "looked for problem" in err and "the file has columns: text, label" in err


def test_option_errors_and_help(tmp_path, capsys):
    path = write(tmp_path, "m", [{"problem": "Q", "answer": "1"}], "jsonl")
    assert main(["--source", "aime2024", "--input", path, "--out", str(tmp_path / "o"), "--heldout", "5"]) == 2
    assert "--heldout applies to training sources" in capsys.readouterr().err
    empty = write(tmp_path, "e", [{"problem": "Q", "answer": ""}], "jsonl")
    assert main(["--source", "math500", "--input", empty, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no usable rows" in err and "missing_answer 1" in err and empty in err
    assert main(["--source", "nope", "--input", path, "--out", "x"]) == 2
    assert main(["--help"]) == 0
    assert "BytedTsinghua-SIA/DAPO-Math-17k" in capsys.readouterr().out


@pytest.mark.parametrize("answer, expected", [
    ("42", "42"), ("-7", "-7"), ("+7", "7"), ("1,234", "1234"), ("1{,}234", "1234"), ("12.0", "12"),
    ("007", "7"), ("\\frac{1}{2}", None), ("1.5", None), ("12,34", None), ("x=3", None), ("3\\pi", None),
])
def test_as_integer(answer, expected):
    assert as_integer(answer) == expected


def test_names_other_year():
    assert names_other_year({"url": ".../2022_AMC_12B_Problems/Problem_1"}, 2023)
    assert not names_other_year({"url": ".../2023_AMC_12A_Problems/Problem_1"}, 2023)
    assert names_other_year({"id": "2024-II-4"}, 2025) and not names_other_year({"id": 12}, 2025)
    assert not names_other_year({}, 2024)
