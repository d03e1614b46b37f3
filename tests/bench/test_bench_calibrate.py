"""`proving-ground calibrate`: the horizon's criteria read off `off` runs alone."""

import json

import pytest

from openrlhf_speed.cli import proving_ground
from openrlhf_speed.proving import shipped
from openrlhf_speed.bench.calibrate import calibrate, format_calibration, frontier


def _write_runs(root, curves, curriculum="off", wall_per_step=10.0):
    root.mkdir(parents=True, exist_ok=True)
    plan = []
    for i, curve in enumerate(curves, 1):
        key = f"{curriculum}-r{i}"
        plan.append({"key": key, "curriculum": curriculum, "run": i, "seed": 41 + i})
        lines = []
        for step, acc in curve:
            lines.append({"event": "eval", "step": float(step), "train_wall_s": step * wall_per_step,
                          "eval_accuracy": acc})
            if step:
                lines.append({"event": "step", "step": float(step), "train_wall_s": step * wall_per_step})
        (root / key).mkdir()
        (root / key / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (root / "bench.json").write_text(json.dumps({"plan": plan}))
    return root


def _climb(offset, slope=0.002, flat_after=None):
    """Evaluations every 5 steps to 100: rising by `slope` a step, flat after `flat_after`."""
    return [(s, 0.3 + offset + slope * min(s, flat_after if flat_after is not None else s)) for s in range(0, 101, 5)]


def test_a_climb_through_the_last_quarter_passes_and_a_plateau_does_not(tmp_path):
    rising = calibrate(_write_runs(tmp_path / "rising", [_climb(0.0), _climb(0.004), _climb(-0.004)]))
    learning = rising["checks"]["still_learning"]
    # last two evaluations (95, 100) against the two ending at 75 (70, 75): 0.002 x 25 = 0.05
    assert learning["value"] == pytest.approx(0.05) and learning["spread"] == pytest.approx(0.004)
    assert learning["pass"] and rising["checks"]["horizon"]["pass"] and rising["checks"]["clock"]["pass"]
    assert rising["off_final"] == pytest.approx(0.3 + 0.002 * 97.5)
    flat = calibrate(_write_runs(tmp_path / "flat", [_climb(0.0, flat_after=60), _climb(0.01, flat_after=60)]))
    assert flat["checks"]["still_learning"]["value"] == pytest.approx(0.0) and not flat["checks"]["still_learning"]["pass"]
    slow = calibrate(_write_runs(tmp_path / "slow", [_climb(0.0), _climb(0.001)], wall_per_step=16.0))
    assert slow["checks"]["clock"]["value"] == 1600 and not slow["checks"]["clock"]["pass"]
    assert slow["checks"]["clock"]["budget_s"] == 1500  # what the docs quote as the sitting budget
    text = format_calibration(rising)
    assert "| off-r1 | 42 | 0.3000 | 0.4000 |" in text and "| yes |" in text


def test_one_seed_is_not_enough_to_call_it_still_learning(tmp_path):
    one = calibrate(_write_runs(tmp_path / "one", [_climb(0.0)]))
    learning = one["checks"]["still_learning"]
    assert learning["value"] == pytest.approx(0.05) and learning["spread"] is None and not learning["pass"]
    json.dumps(one, allow_nan=False)  # calibration.json stays strict JSON
    assert "rise +0.0500; one seed has no spread (the check needs 2 or more) | NO |" in format_calibration(one)


def test_the_calibration_reads_off_alone(tmp_path):
    runs = _write_runs(tmp_path / "b", [_climb(0.0), _climb(0.002)])
    _write_runs(tmp_path / "s", [_climb(0.1)], curriculum="speed")
    (tmp_path / "s" / "speed-r1").rename(runs / "speed-r1")
    (runs / "speed-r1" / "metrics.jsonl").write_text("not json: a SPEED run is never opened\n")
    c = calibrate(runs)
    assert [r["key"] for r in c["runs"]] == ["off-r1", "off-r2"] and c["skipped_unread"] == ["speed-r1"]
    assert "other curricula skipped unread: speed-r1" in format_calibration(c)
    (runs / "off-r1").rename(tmp_path / "x1")
    (runs / "off-r2").rename(tmp_path / "x2")
    with pytest.raises(ValueError, match="no `off` run folder.*skipped, not `off`: speed-r1"):
        calibrate(runs)


def test_the_plan_names_the_curriculum_before_the_folder_does(tmp_path):
    runs = _write_runs(tmp_path / "b", [_climb(0.0), _climb(0.002)])
    bench = json.loads((runs / "bench.json").read_text())
    bench["plan"][1]["curriculum"] = "speed"  # off-r2 by name, a SPEED run by its plan
    (runs / "bench.json").write_text(json.dumps(bench))
    c = calibrate(runs)
    assert [r["key"] for r in c["runs"]] == ["off-r1"] and c["skipped_unread"] == ["off-r2"]
    # the clock is the last step's, as the bench report reads it: 100 steps x 10 s
    assert c["runs"][0]["train_wall_s"] == 1000


def _table(ids, solved, samples=10):
    return {"ids": ids, "solved_per_prompt": solved, "samples": samples}


def test_the_frontier_counts_prompts_entering_and_leaving_the_band_prompt_by_prompt():
    ids = ["a", "b", "c", "d", "e"]
    t0 = _table(ids + ["only-at-0"], [0, 0, 5, 5, 10, 3])
    t50 = _table(ids, [3, 0, 10, 5, 10])  # a enters; c leaves solved
    t100 = _table(ids, [10, 4, 10, 0, 10])  # a leaves solved, b enters, d leaves unsolved
    f = frontier([(100, t100), (0, t0), (50, t50)])
    assert f["prompts"] == 5 and [s["step"] for s in f["steps"]] == [0, 50, 100]
    assert f["steps"][0]["some"] == 0.4 and f["steps"][0]["never"] == 0.4 and f["steps"][0]["always"] == 0.2
    assert f["moves"][0] == {"from": 0, "to": 50, "entered": 1, "left_solved": 1, "left_unsolved": 0, "stayed": 1}
    assert f["moves"][1] == {"from": 50, "to": 100, "entered": 1, "left_solved": 1, "left_unsolved": 1, "stayed": 0}
    with pytest.raises(ValueError, match="share no prompt id"):
        frontier([(0, t0), (50, _table(["z"], [1]))])


def test_the_command_reads_the_shipped_start_table_and_writes_its_report(tmp_path, capsys):
    start = json.loads((shipped.path("full") / shipped.DIFFICULTY).read_text())
    ids, solved = start["ids"][:20], start["solved_per_prompt"][:20]
    later = tmp_path / "later.json"
    later.write_text(json.dumps(_table(ids, [min(s + 10, 50) for s in solved], samples=50)))
    runs = _write_runs(tmp_path / "runs", [_climb(0.0), _climb(0.002)])
    code = proving_ground.main(["calibrate", "--runs", str(runs), "--frontier", "0=shipped", f"50={later}",
                                "--out", str(tmp_path / "out")])
    assert code == 0
    saved = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert saved["frontier"]["prompts"] == 20 and saved["frontier"]["steps"][0]["samples"] == 50
    assert "Frontier on 20 RL prompts" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="give STEP=FILE"):
        proving_ground.main(["calibrate", "--runs", str(runs), "--frontier", "later.json"])
    with pytest.raises(SystemExit, match="holds no `off` run folder"):
        proving_ground.main(["calibrate", "--runs", str(tmp_path / "out")])
