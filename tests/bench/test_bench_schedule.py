"""The benchmark records which `--speed.schedule` its runs used, resolved as each run resolves
`auto` on the machine, and `--resume` compares that, not the flags that named it: a folder
whose runs used overlap (the flag's default before auto) is not mixed with serial runs. The
train subprocess is replaced by one that writes a run log."""

import json

import pytest

from _bench_fakes import _data, _fake_train

from openrlhf_speed.bench import run as bench_run
from openrlhf_speed.compat.device import DEVICE_ENV


def _argv(tmp_path, *more):
    return ["--mode", "tiny", "--curricula", "uniform,speed", "--skip_engine", "--target", "0.4",
            "--out", str(tmp_path / "out"), *_data(tmp_path), *more]


@pytest.mark.parametrize("device, passed, expected", [
    ("cpu", [], "serial"),
    ("cuda", [], "overlap"),
    ("cpu", ["--", "--speed.schedule", "overlap"], "overlap"),
    ("cpu", ["--", "--speed.schedule=overlap"], "overlap"),
    ("cuda", ["--", "--speed.schedule", "serial"], "serial"),
    ("cpu", ["--", "--speed.feed_during_training", "on"], "overlap"),
])
def test_the_settings_say_which_schedule_the_runs_used(device, passed, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(DEVICE_ENV, device)
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([]))
    assert bench_run.main(_argv(tmp_path, *passed)) == 0
    assert json.load(open(tmp_path / "out" / "bench.json"))["settings"]["schedule"] == expected
    assert json.load(open(tmp_path / "out" / "results.json"))["settings"]["schedule"] == expected
    assert f"schedule {expected})" in capsys.readouterr().out


def test_an_unknown_schedule_after_the_separator_is_named(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="after '--': --speed.schedule 'fast': expected one of auto, overlap"):
        bench_run.main(_argv(tmp_path, "--", "--speed.schedule", "fast"))


def _as_before_auto(tmp_path, keep_flags=True):
    """bench.json as written before `schedule` was recorded: the flags after '--' only, if any."""
    path = tmp_path / "out" / "bench.json"
    meta = json.load(open(path))
    del meta["settings"]["schedule"]
    if not keep_flags:
        del meta["settings"]["train_args"]
    path.write_text(json.dumps(meta))


def test_resume_compares_the_schedule_the_runs_used_not_the_flags_that_named_it(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    trained = []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))
    assert bench_run.main(_argv(tmp_path)) == 0  # auto: serial on this CPU
    # Naming the schedule auto chose gives the same runs: they compare, nothing is trained again.
    trained.clear()
    assert bench_run.main(_argv(tmp_path, "--resume", "--", "--speed.schedule", "serial")) == 0
    assert trained == []
    with pytest.raises(SystemExit, match=r"settings \(its runs used --speed.schedule serial, these would use "
                                         r"overlap: add `-- --speed.schedule serial`\) differ"):
        bench_run.main(_argv(tmp_path, "--resume", "--", "--speed.schedule", "overlap"))


def test_a_benchmark_from_before_auto_resumes_with_the_schedule_its_runs_used(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([]))
    assert bench_run.main(_argv(tmp_path, "--", "--speed.schedule", "overlap")) == 0
    _as_before_auto(tmp_path, keep_flags=False)  # as the v4 tables' benchmarks: no flags after '--'
    # Its runs used overlap, the default then; auto would now run serial on this CPU: refused, with the fix.
    with pytest.raises(SystemExit, match=r"its runs used --speed.schedule overlap, these would use serial: add "
                                         r"`-- --speed.schedule overlap`"):
        bench_run.main(_argv(tmp_path, "--resume"))
    assert bench_run.main(_argv(tmp_path, "--resume", "--", "--speed.schedule", "overlap")) == 0


def test_a_serial_benchmark_from_before_auto_resumes_with_or_without_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train([]))
    assert bench_run.main(_argv(tmp_path, "--", "--speed.schedule", "serial")) == 0
    _as_before_auto(tmp_path)
    assert bench_run.main(_argv(tmp_path, "--resume", "--", "--speed.schedule", "serial")) == 0
    assert bench_run.main(_argv(tmp_path, "--resume")) == 0  # auto is serial on this CPU too
