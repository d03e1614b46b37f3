"""The run summary (rollout/run_summary.py) on hand-written metrics records: which records are
the run's, its training clock over resumed legs, and every line of summary.md, hand-computed;
and cli/train.py's end of a run: summary.md and curves.png written, the summary printed, a
full disk under them one ERROR line."""

import json
import math
import os
from types import SimpleNamespace

import pytest

from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.run_summary import (RunFiles, build_summary, read_records, run_files, run_records,
                                                training_seconds, write_atomic)
from openrlhf_speed.storage import atomic

NAN = float("nan")


# Every number as the trainer's --log.jsonl writes it: a float, the step too.
def step(k, wall, reward=0.5, gen=1000.0, trained=600.0, discarded=300.0, qualified=4.0, screened=10.0):
    return {"event": "step", "step": float(k), "train_wall_s": wall, "rollout/reward_mean": reward,
            "speed/tokens_generated": gen, "speed/tokens_trained": trained, "speed/tokens_discarded": discarded,
            "speed/prompts_qualified": qualified, "speed/prompts_screened": screened}


def evaluation(k, wall, acc, n=400):
    return {"event": "eval", "step": float(k), "train_wall_s": wall, "eval_accuracy": acc, "eval_num_samples": n}


FILES = RunFiles("/runs/a", "/runs/a/ckpt", "/runs/a/metrics.jsonl", "/runs/a/tensorboard", "/runs/a/trace.jsonl", 2)


def test_a_fresh_run_after_an_old_one_in_the_same_log_starts_over():
    old = [step(1, 5.0), step(2, 9.0), step(3, 14.0)]
    new = [evaluation(0, 0.0, 0.3), step(1, 4.0), step(2, 8.0)]
    assert run_records(old + new) == new


def test_a_fresh_run_without_a_first_evaluation_starts_at_step_1():
    old = [evaluation(0, 0.0, 0.3), step(1, 5.0), step(2, 9.0)]
    new = [step(1, 4.0), step(2, 8.0)]
    assert run_records(old + new) == new


def test_a_resume_keeps_the_legs_and_the_repeated_steps_later_record():
    # Crashed after step 3, resumed from the checkpoint of step 2: step 3 ran twice.
    log = [evaluation(0, 0.0, 0.3), step(1, 10.0), step(2, 20.0), evaluation(2, 20.5, 0.4), step(3, 30.0),
           step(3, 12.0, reward=0.9), step(4, 25.0)]
    records = run_records(log)
    assert [(r["event"], r["step"]) for r in records] == [("eval", 0), ("step", 1), ("step", 2), ("eval", 2),
                                                         ("step", 3), ("step", 4)]
    assert records[4]["rollout/reward_mean"] == 0.9
    # Leg 1 ends at 20.5 s (its last kept reading), leg 2 at 25 s.
    assert training_seconds(records) == (45.5, 2)


def test_a_record_cut_short_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(step(1, 3.0)) + "\n" + '{"event": "step", "st')
    assert read_records(str(path)) == [step(1, 3.0)]


def test_nan_figures_read_back_and_count_as_not_recorded(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(step(1, 3.0, qualified=NAN)) + "\n")
    (record,) = read_records(str(path))
    assert math.isnan(record["speed/prompts_qualified"])
    text = build_summary([record], FILES, "rerun", "curves")
    assert "- qualification: not applicable (no pass-rate band" in text


def test_the_summary_of_a_run_hand_computed():
    records = [evaluation(0, 0.0, 0.32), step(1, 60.0, reward=0.25), step(2, 130.0, reward=0.5),
               step(3, 190.0, reward=0.5), step(4, 312.0, reward=0.75), evaluation(4, 312.0, 0.53)]
    text = build_summary(records, FILES, "openrlhf-speed train --ckpt.path /runs/a/ckpt --ckpt.load_enable",
                         "openrlhf-speed curves /runs/a", wall_s=400.0)
    lines = text.splitlines()
    assert lines[0] == "# Run summary: /runs/a"
    assert ("- steps: 4, training clock 5m 12s (evaluation and checkpoints excluded); "
            "wall clock of the run 6m 40s") in lines
    # sqrt(.32 * .68 / 400 + .53 * .47 / 400) = 0.03416
    assert "- held-out accuracy: 0.320 at step 0 -> 0.530 at step 4, +0.210 (2 SE 0.068, 400 and 400 samples)" in lines
    assert "- reward: 0.250 at step 1 -> 0.750 at step 4" in lines
    assert "- tokens: 4,000 generated, 2,400 trained (60%), 1,200 discarded (30%)" in lines
    assert "- qualification: 16 of 40 screened prompts qualified (0.40)" in lines
    assert "- checkpoint: /runs/a/ckpt (last saved at step 4)" in lines
    assert "- metrics: /runs/a/metrics.jsonl" in lines and "- trace: /runs/a/trace.jsonl" in lines
    assert "- TensorBoard: /runs/a/tensorboard" in lines and "- curves: /runs/a/curves.png" in lines
    assert "    openrlhf-speed train --ckpt.path /runs/a/ckpt --ckpt.load_enable" in lines
    assert "    openrlhf-speed curves /runs/a" in lines
    assert len(lines) <= 30  # one screen


def test_a_run_that_kept_nothing_says_which_flag_keeps_it():
    files = RunFiles("/runs/b", None, None, None, None)
    text = build_summary([step(1, 2.0, qualified=NAN)], files, "rerun", "curves")
    assert "- held-out accuracy: not evaluated (--eval.dataset with --eval.steps or --eval.at_start)" in text
    assert "- checkpoint: none saved (--ckpt.save_steps)" in text
    assert "- TensorBoard: not kept (--logger.tensorboard_dir)" in text
    assert "- trace: not kept (--speed.trace_path)" in text
    assert "(no checkpoint to resume from: set --ckpt.save_steps)" in text and "    rerun" not in text


def test_a_reward_outside_0_1_gets_no_binomial_error():
    # DAPO's overlong penalty can make an evaluation's mean reward negative.
    text = build_summary([evaluation(0, 0.0, -0.1), evaluation(2, 5.0, 0.2)], FILES, "rerun", "curves")
    assert "- held-out accuracy: -0.100 at step 0 -> 0.200 at step 2, +0.300\n" in text


def test_one_evaluation_and_no_steps():
    text = build_summary([evaluation(0, 0.0, 0.25, n=None)], FILES, "rerun", "curves")
    assert "- steps: none recorded in the metrics log" in text
    assert "- held-out accuracy: 0.250 at step 0 (one evaluation)" in text
    assert "- tokens: not recorded" in text


def test_the_files_of_parsed_flags():
    args = SimpleNamespace(ckpt=SimpleNamespace(path="/r/ckpt", save_steps=-1), log=SimpleNamespace(jsonl="/r/m.jsonl"),
                           logger=SimpleNamespace(tensorboard_dir=None), speed=SimpleNamespace(trace_path="/r/t.jsonl"))
    assert run_files(args) == RunFiles("/r", None, "/r/m.jsonl", None, "/r/t.jsonl", None)
    args.ckpt.save_steps = 5
    assert run_files(args).checkpoint == "/r/ckpt" and run_files(args).save_steps == 5


# -- writing it ----------------------------------------------------------------------------

def full_disk_under(monkeypatch, module):
    """The module's writes of new files go to /dev/full: the kernel's ENOSPC at the flush."""
    real_open = open
    monkeypatch.setattr(module, "open", lambda path, mode="r", *a, **k: real_open("/dev/full", mode, *a, **k)
                        if "w" in mode else real_open(path, mode, *a, **k), raising=False)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_keeps_the_previous_file_and_stops_with_one_line(tmp_path, monkeypatch):
    path = tmp_path / "summary.md"
    path.write_text("previous\n")
    full_disk_under(monkeypatch, atomic)
    with pytest.raises(DiskFullError) as err:
        write_atomic(str(path), b"x" * 10_000, "the run summary")
    assert path.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["summary.md"]
    message = str(err.value)
    assert message.startswith(f"disk full while writing the run summary {path}: ") and "\n" not in message
    assert "the previous one is kept" in message


def train_args(tmp_path, **ckpt):
    return SimpleNamespace(ckpt=SimpleNamespace(path=str(tmp_path / "ckpt"), save_steps=ckpt.get("save_steps", 2)),
                           log=SimpleNamespace(jsonl=str(tmp_path / "metrics.jsonl")),
                           logger=SimpleNamespace(tensorboard_dir=None), speed=SimpleNamespace(trace_path=None))


def test_the_end_of_a_run_writes_both_files_and_prints_the_summary_last(tmp_path, capsys, monkeypatch):
    from openrlhf_speed.cli import train

    monkeypatch.delenv("OPENRLHF_SPEED_RERUN", raising=False)
    records = [evaluation(0, 0.0, 0.3), step(1, 5.0), step(2, 9.0), evaluation(2, 9.5, 0.4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.save_steps", "2"]
    assert train.report(train_args(tmp_path), argv, started=0.0) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip("\n") == (tmp_path / "summary.md").read_text().rstrip("\n")
    assert f"openrlhf-speed train --ckpt.path {tmp_path / 'ckpt'} --ckpt.save_steps 2 --ckpt.load_enable" in printed
    assert f"    openrlhf-speed curves {tmp_path}\n" in printed  # metrics at the default place: no --metrics
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_recipe_names_its_own_rerun_command(tmp_path, monkeypatch):
    from openrlhf_speed.cli import train

    monkeypatch.setenv("OPENRLHF_SPEED_RERUN", "make train")
    assert train.rerun_command(["--ckpt.path", "x"]) == "make train"
    monkeypatch.delenv("OPENRLHF_SPEED_RERUN")
    assert train.rerun_command(["--ckpt.load_enable"]) == "openrlhf-speed train --ckpt.load_enable"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_at_the_end_of_a_run_is_one_line(tmp_path, capsys, monkeypatch):
    from openrlhf_speed.cli import train

    full_disk_under(monkeypatch, atomic)
    assert train.report(train_args(tmp_path), [], started=0.0) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"[openrlhf-speed] ERROR disk full while writing the run summary {tmp_path / 'summary.md'}: ")
