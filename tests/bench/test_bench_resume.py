"""`bench --resume`: a benchmark of hours that stops part-way (a closed laptop, a job's time
limit) goes on where it stopped. A user checks that finished runs are not trained again, that
the unfinished one starts over from nothing, and that a resume with other settings is
refused rather than mixed into the same table. The train subprocess is replaced by one
that writes a run log; everything around it (plan, folders, bench.json, report) is real."""

import json
import os
import re
import shutil

import pytest

from _bench_fakes import _data, _fake_train
from _util import REPO

from openrlhf_speed.bench import run as bench_run

PUBLISHED_DRIVER = REPO / "benchmarks" / "proving-v4" / "avx512" / "driver.json"


def _argv(tmp_path, *more):
    return ["--mode", "tiny", "--curricula", "uniform,dapo,speed", "--skip_engine", "--target", "0.4",
            "--out", str(tmp_path / "out"), *_data(tmp_path), *more]


def test_resume_keeps_finished_runs_and_restarts_the_cut_one(tmp_path, monkeypatch, capsys):
    trained = []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained, fail_on="dapo"))
    with pytest.raises(SystemExit, match="the dapo run failed"):
        bench_run.main(_argv(tmp_path))
    assert trained == ["uniform", "dapo"]
    (tmp_path / "out" / "dapo" / "stale.txt").write_text("left by the cut run")
    meta_before = (tmp_path / "out" / "bench.json").read_text()

    trained.clear()
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))
    assert bench_run.main(_argv(tmp_path, "--resume")) == 0
    assert trained == ["dapo", "speed"]  # uniform finished before and is not trained again
    printed = capsys.readouterr().out
    assert "[bench] (1/3) uniform: finished earlier, kept" in printed
    assert not (tmp_path / "out" / "dapo" / "stale.txt").exists()  # the cut run started over
    assert (tmp_path / "out" / "bench.json").read_text() == meta_before  # target fixed before the first run
    results = json.load(open(tmp_path / "out" / "results.json"))
    assert set(results["runs_summary"]) == {"uniform", "dapo", "speed"}


def test_resume_with_other_settings_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([]))
    assert bench_run.main(_argv(tmp_path)) == 0
    with pytest.raises(SystemExit, match=r"--resume: settings differ from .*bench\.json.*pass the flags of its "
                                         r"command: openrlhf-speed bench --mode tiny"):
        bench_run.main(_argv(tmp_path, "--resume", "--lr", "3e-4"))
    # The flags after '--' go to every run: the runs would not compare either.
    with pytest.raises(SystemExit, match=r"--resume: settings differ"):
        bench_run.main(_argv(tmp_path, "--resume", "--", "--speed.max_staleness", "1"))


def test_resume_on_another_cpu_names_the_field_that_differs(tmp_path, monkeypatch):
    """The runs of an AVX512_BF16 host and an AMX host do not compare; the refusal says which
    of the versions moved, so a user sees it is the machine, not a package."""
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([]))
    assert bench_run.main(_argv(tmp_path)) == 0
    meta_path = tmp_path / "out" / "bench.json"
    meta = json.loads(meta_path.read_text())
    now = bench_run._versions()["cpu_dtype"]
    then = "native bf16 on this CPU (" + ("avx512_bf16)" if "amx" in now else "amx_bf16, avx512_bf16)")
    meta["versions"]["cpu_dtype"] = then
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SystemExit, match=rf"--resume: versions \(cpu_dtype: '{re.escape(then)}' "
                                         rf"then, '{re.escape(now)}' now\) differ from"):
        bench_run.main(_argv(tmp_path, "--resume"))


def test_resume_adds_curricula_and_keeps_the_target_and_measurements(tmp_path, monkeypatch, capsys):
    """A benchmark that left rows out (speed@8, greso) gets them later on the same machine
    kind, against the same baseline runs, without training those again."""
    trained, drivers = [], []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))

    def fake_driver(args, s, train, test, out):
        drivers.append(out)
        shutil.copy(PUBLISHED_DRIVER, tmp_path / "out" / "driver.json")
    monkeypatch.setattr(bench_run, "_driver", fake_driver)
    first = ["--mode", "tiny", "--curricula", "uniform,speed", "--skip_engine", "--target_rule", "uniform_gain:0.5",
             "--driver_steps", "2", "--out", str(tmp_path / "out"), *_data(tmp_path)]
    assert bench_run.main(first) == 0
    assert trained == ["uniform", "speed"] and len(drivers) == 1
    before = json.load(open(tmp_path / "out" / "bench.json"))

    trained.clear()
    more = list(first)
    more[more.index("--curricula") + 1] = "uniform,speed,speed@8,greso"
    assert bench_run.main(more + ["--resume"]) == 0
    assert trained == ["speed@8", "greso"] and len(drivers) == 1  # the driver measurement is kept too
    out = capsys.readouterr().out
    assert "--resume adds speed@8, greso to the benchmark" in out
    assert "SPEED driver against raw vLLM: measured earlier, kept" in out
    after = json.load(open(tmp_path / "out" / "bench.json"))
    assert after["curricula"] == ["uniform", "speed", "speed@8", "greso"]
    assert after["target_rule"] == before["target_rule"] and after["settings"] == before["settings"]
    assert after["commands"] == [before["command"], after["command"]]
    assert set(json.load(open(tmp_path / "out" / "results.json"))["runs_summary"]) == {"uniform", "speed", "speed@8", "greso"}

    # Leaving a curriculum out, or changing the seeds, would mix two benchmarks: refused.
    fewer = list(first)
    fewer[fewer.index("--curricula") + 1] = "uniform,greso"
    with pytest.raises(SystemExit, match=r"--resume: curricula \(leaves out speed, speed@8\) differ"):
        bench_run.main(fewer + ["--resume"])
    with pytest.raises(SystemExit, match=r"--resume: runs or seed differ"):
        bench_run.main(more + ["--resume", "--seed", "7"])


def test_resume_needs_an_earlier_benchmark(tmp_path):
    with pytest.raises(SystemExit, match="there is no benchmark to go on with"):
        bench_run.main(_argv(tmp_path, "--resume"))
    with pytest.raises(SystemExit, match="give its --out folder"):
        bench_run.main(["--mode", "tiny", "--resume"])


def test_a_plain_rerun_into_the_same_folder_trains_everything_again(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))
    assert bench_run.main(_argv(tmp_path)) == 0
    assert bench_run.main(_argv(tmp_path)) == 0
    assert trained == ["uniform", "dapo", "speed"] * 2


def test_report_only_leaves_out_a_run_still_going(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([], fail_on="speed"))
    with pytest.raises(SystemExit, match="the speed run failed"):
        bench_run.main(_argv(tmp_path))
    # The cut run's log holds only its step-0 evaluation, as one still training would.
    (tmp_path / "out" / "speed" / "metrics.jsonl").write_text(
        json.dumps({"event": "eval", "step": 0, "train_wall_s": 0.0, "eval_accuracy": 0.3}) + "\n")
    assert bench_run.main(["--report_only", "--out", str(tmp_path / "out")]) == 0
    assert "[bench] left out of the report, not finished: speed" in capsys.readouterr().out
    results = json.load(open(tmp_path / "out" / "results.json"))
    assert set(results["runs_summary"]) == {"uniform", "dapo"}


def test_published_evidence_rebuilds_the_report_and_resumes_elsewhere(tmp_path, monkeypatch, capsys):
    """Machines are not kept between working sessions: what --publish commits must be enough
    to recompute the figures and to go on with the runs left, without checkpoints or logs; the
    report's documents go to their own folder (docs/), the figures and evidence to theirs."""
    trained = []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained, fail_on="speed"))
    with pytest.raises(SystemExit, match="the speed run failed"):
        bench_run.main(_argv(tmp_path))
    (tmp_path / "out" / "uniform" / "ckpt").mkdir()
    (tmp_path / "out" / "uniform" / "ckpt" / "model.pt").write_bytes(b"\0" * 1024)
    (tmp_path / "out" / "uniform" / "train.log").write_text("many MB of engine output\n")
    evidence, docs = tmp_path / "benchmarks" / "proving-v4" / "avx2", tmp_path / "docs" / "proving-v4" / "avx2"
    assert bench_run.main(["--report_only", "--out", str(tmp_path / "out"), "--publish", str(evidence),
                           "--publish_docs", str(docs)]) == 0
    assert f"the figures and their evidence to {evidence}, the report to {docs}" in capsys.readouterr().out
    assert sorted(p.name for p in docs.iterdir()) == ["accuracy.png", "summary.md"]
    kept = sorted(str(p.relative_to(evidence)) for p in evidence.rglob("*") if p.is_file())
    assert kept == ["bench.json", "dapo/done.json", "dapo/metrics.jsonl", "results.json", "uniform/done.json",
                    "uniform/metrics.jsonl"]  # not the unfinished speed run, no checkpoint, no train.log

    # Another machine: a copy of the published folder, rebuilt, then resumed.
    moved = tmp_path / "elsewhere"
    shutil.copytree(evidence, moved)
    assert bench_run.main(["--report_only", "--out", str(moved)]) == 0
    published, rebuilt = json.load(open(evidence / "results.json")), json.load(open(moved / "results.json"))
    assert rebuilt["summary"] == published["summary"] and rebuilt["runs_summary"] == published["runs_summary"]
    assert "runs" not in published  # the step records are the runs' own metrics.jsonl, published beside it
    trained.clear()
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))
    argv = _argv(tmp_path, "--resume")
    argv[argv.index("--out") + 1] = str(moved)
    assert bench_run.main(argv) == 0
    assert trained == ["speed"]
    assert set(json.load(open(moved / "results.json"))["runs_summary"]) == {"uniform", "dapo", "speed"}

    # Published again: the older run folders are replaced, not merged, so no run outside the
    # report lingers; what is not evidence stays.
    (evidence / "left-over-r9").mkdir()
    (evidence / "left-over-r9" / "metrics.jsonl").write_text("{}\n")
    (evidence / "NOTES.txt").write_text("kept")
    assert bench_run.main(["--report_only", "--out", str(moved), "--publish", str(evidence)]) == 0
    assert sorted(p.name for p in evidence.iterdir() if p.is_dir()) == ["dapo", "speed", "uniform"]
    assert (evidence / "NOTES.txt").read_text() == "kept" and (evidence / "summary.md").is_file()
    assert set(json.load(open(evidence / "results.json"))["runs_summary"]) == {"uniform", "dapo", "speed"}

    # Rebuilt in place from the published folder itself: nothing is copied onto itself.
    assert bench_run.main(["--report_only", "--out", str(evidence), "--publish", str(evidence)]) == 0
    assert sorted(p.name for p in evidence.iterdir() if p.is_dir()) == ["dapo", "speed", "uniform"]


def test_publish_docs_without_publish_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--publish_docs .* pass --publish DIR too"):
        bench_run.main(["--report_only", "--out", str(tmp_path), "--publish_docs", str(tmp_path / "docs")])
