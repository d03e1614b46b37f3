"""scripts/mem_peak.py: the peak above idle that docs/cpu.md quotes for a default run, and its
way into the published quickstart run.json."""

import json
import sys

import pytest
from _util import load_script as load


def test_peak_above_idle_is_the_highest_sample_less_the_lowest_before_the_command():
    mem_peak = load("mem_peak")
    gib = mem_peak.GIB
    # 5 idle samples (lowest 2 GiB), then the command runs while the watcher samples 9 GiB.
    samples = iter([3 * gib, 2 * gib, 2.5 * gib, 2 * gib, 4 * gib] + [9 * gib] * 1000)
    got = mem_peak.measure([sys.executable, "-c", "import time; time.sleep(0.3)"], every_s=0.05,
                           sample=lambda: next(samples))
    assert (got["rc"], got["idle_gib"], got["peak_gib"], got["above_idle_gib"]) == (0, 2.0, 9.0, 7.0)


def test_the_commands_exit_status_is_kept():
    mem_peak = load("mem_peak")
    assert mem_peak.measure([sys.executable, "-c", "raise SystemExit(3)"], every_s=0.05)["rc"] == 3


def test_real_meminfo_reads_a_positive_figure():
    assert load("mem_peak").in_use_bytes() > 0


def test_missing_memavailable_is_one_line_naming_the_file(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:        10 kB\n")
    with pytest.raises(SystemExit, match="has no MemAvailable"):
        load("mem_peak").in_use_bytes(str(meminfo))


def test_publish_takes_the_peak_and_refuses_a_failed_measure(tmp_path):
    publish = load("publish_quickstart")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"event": "eval", "step": 0, "eval_accuracy": 0.3}) + "\n")
    (run_dir / "summary.md").write_text("- steps: 12; wall clock of the run 8m 34s\n")
    mem = tmp_path / "mem.json"
    mem.write_text(json.dumps({"rc": 0, "idle_gib": 1.2, "peak_gib": 12.9, "above_idle_gib": 11.7}))
    run = publish.publish(str(run_dir), str(tmp_path / "out"), 797.0, str(mem))
    assert (run["wall_s"], run["mem_above_idle_gib"], run["mem_idle_gib"]) == (514, 11.7, 1.2)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["mem_above_idle_gib"] == 11.7
    mem.write_text(json.dumps({"rc": 2, "idle_gib": 1.2, "peak_gib": 3.0, "above_idle_gib": 1.8}))
    with pytest.raises(SystemExit, match="failed"):
        publish.publish(str(run_dir), str(tmp_path / "out"), 797.0, str(mem))
