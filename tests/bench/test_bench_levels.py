"""The speedup at every target level and the off_final headline, on hand-made runs whose
times to each level are computed by hand."""

import math

import pytest

from openrlhf_speed.bench import aggregate, evidence
from openrlhf_speed.bench import levels as lv
from openrlhf_speed.bench import report


def _run(points, step_s=10.0):
    """A run from [(step, accuracy)], the clock step_s per step, one 100-token response a step."""
    evals = [{"event": "eval", "step": s, "eval_accuracy": a, "train_wall_s": s * step_s, "eval_num_samples": 1000}
             for s, a in points]
    steps = [{"step": i, "train_wall_s": i * step_s, "speed/tokens_generated": 100.0, "speed/tokens_trained": 100.0,
              "timing/ppo_train": 1.0} for i in range(1, points[-1][0] + 1)]
    return {"evals": evals, "steps": steps}


def _bench():
    # off: 0.30 -> 0.50 at step 40, flat after; its last two evaluations 0.50 and 0.52 -> final 0.51.
    off = [(0, 0.30), (10, 0.40), (20, 0.45), (30, 0.48), (40, 0.50), (50, 0.52)]
    # speed: faster per step, and higher at the end.
    speed = [(0, 0.30), (10, 0.45), (20, 0.50), (30, 0.55), (40, 0.58), (50, 0.60)]
    runs = {"off-r1": _run(off), "off-r2": _run(off), "speed-r1": _run(speed, 12.0), "speed-r2": _run(speed, 12.0)}
    groups = {k: k.split("-")[0] for k in runs}
    return runs, groups


def test_final_is_mean_of_last_two_evaluations_of_off_runs():
    runs, groups = _bench()
    anchor = lv.base_final(runs, groups)
    assert anchor["final"] == pytest.approx(0.51)
    assert anchor["start"] == pytest.approx(0.30)
    assert lv.level_target(anchor, 0.5) == pytest.approx(0.405)


def test_speedup_per_level_matches_hand_interpolation():
    runs, groups = _bench()
    tab = lv.table(runs, groups, {}, ["speed"], baselines=("off",), levels=(0.5, 1.0, 1.2))
    half, full, above = tab["levels"]
    # f=0.5, target 0.405: off crosses between 0.40 (step 10) and 0.45 (20) at step 11 -> 110 s;
    # speed between 0.30 (0) and 0.45 (10) at step 7 -> 84 s. 110 / 84.
    assert half["ratios"]["speed_over_off"]["measured"]["point"] == pytest.approx(110 / 84)
    # f=1.0, target 0.51: off at step 45 -> 450 s; speed between 0.50 (20) and 0.55 (30): step 22 -> 264 s.
    assert full["ratios"]["speed_over_off"]["measured"]["point"] == pytest.approx(450 / 264)
    assert full["reached"] == {"off": 1.0, "speed": 1.0}
    # f=1.2, target 0.552: off never gets there (censored at its whole clock, 500 s), speed at
    # step 30 + 0.002/0.03 x 10 -> 30.667 x 12 s: a floor, not a point.
    cell = above["ratios"]["speed_over_off"]["measured"]
    assert above["reached"] == {"off": 0.0, "speed": 1.0}
    assert cell["at_least"] is True
    assert cell["point"] == pytest.approx(500 / ((30 + 0.002 / 0.03 * 10) * 12))
    assert "floor" in cell["verdict"]


def test_a_paced_curriculum_is_measured_over_each_baseline_and_over_it_paced_the_same_way():
    runs, groups = _bench()
    slow = [(0, 0.30), (10, 0.40), (20, 0.45), (30, 0.48), (40, 0.50), (50, 0.52)]
    runs.update({"dapo-r1": _run(slow, 20.0), "dapo+pace2-r1": _run(slow, 15.0), "speed+pace2-r1": runs["speed-r1"]})
    groups = {k: k.split("-")[0] for k in runs}
    tab = lv.table(runs, groups, {}, ["speed", "speed+pace2"], baselines=("off", "dapo"), levels=(1.0,))
    ratios = tab["levels"][0]["ratios"]
    # the pace is the driver's: the unpaced SPEED is not measured over paced DAPO
    assert set(ratios) == {"speed_over_off", "speed_over_dapo", "speed+pace2_over_off", "speed+pace2_over_dapo",
                           "speed+pace2_over_dapo+pace2"}
    # target 0.51: both DAPO runs at step 45 (900 s unpaced, 675 s paced), SPEED at step 22 (264 s)
    assert ratios["speed+pace2_over_dapo+pace2"]["measured"]["point"] == pytest.approx(675 / 264)
    assert ratios["speed+pace2_over_dapo"]["measured"]["point"] == pytest.approx(900 / 264)
    rows = {k: {"curriculum": groups[k], "t": 100.0 if "pace" in k else 120.0} for k in runs}
    assert "speed+pace2_over_dapo+pace2" in evidence.intervals(rows, "t", "whole")
    assert "speed_over_dapo+pace2" not in evidence.intervals(rows, "t", "whole")


def test_a_level_ours_never_reaches_gives_no_ratio():
    runs, groups = _bench()
    tab = lv.table(runs, groups, {}, ["speed"], baselines=("off",), levels=(1.8,))
    assert "point" not in tab["levels"][0]["ratios"]["speed_over_off"]["measured"]
    assert "not reached" in "\n".join(lv.markdown(tab))


def test_a_level_only_ours_misses_is_a_ceiling_priced_at_its_whole_clock():
    """A run of ours under the target still says something: it took longer than its whole
    clock, so the speedup is at most baseline time / that clock, and "slower" when even that
    bound's interval is under 1."""
    runs, groups = _bench()
    slow = [(0, 0.30), (10, 0.35), (20, 0.40), (30, 0.44), (40, 0.47), (50, 0.49)]  # never 0.51
    runs["speed-r1"], runs["speed-r2"] = _run(slow, 12.0), _run(slow, 12.0)
    tab = lv.table(runs, groups, {}, ["speed"], baselines=("off",), levels=(1.0,))
    cell = tab["levels"][0]["ratios"]["speed_over_off"]["measured"]
    # off reaches 0.51 at step 45 (450 s); speed's whole clock is its last evaluation, 50 x 12 s
    assert cell["at_most"] is True and "at_least" not in cell
    assert cell["point"] == pytest.approx(450 / 600)
    assert cell["verdict"] == "slower, a ceiling (2/2 runs of ours did not reach it)"
    assert lv.regime.format_ci(cell) == "<=0.75x [0.75-0.75]"
    assert "| 1 | 0.5100 | <=0.75x [0.75-0.75] |" in "\n".join(lv.markdown(tab))
    # one run of ours reached: still a ceiling, over the mean of a reached time and a whole clock
    runs["speed-r2"] = _run([(0, 0.30), (10, 0.45), (20, 0.50), (30, 0.55), (40, 0.58), (50, 0.60)], 12.0)
    cell = lv.table(runs, groups, {}, ["speed"], baselines=("off",), levels=(1.0,))["levels"][0]["ratios"][
        "speed_over_off"]["measured"]
    assert cell["point"] == pytest.approx(450 / ((600 + 264) / 2)) and cell["at_most"] is True
    assert cell["verdict"].startswith("not resolved, a ceiling (1/2 runs")


def test_a_level_both_miss_and_a_run_without_a_clock_give_no_ratio():
    assert "point" not in lv.aggregate.censored_ratio([("censored", 500.0)], [("censored", 600.0)])
    assert "did not reach" in lv.aggregate.censored_ratio([("censored", 500.0)], [("censored", 600.0)])["verdict"]
    assert lv.aggregate.censored_ratio([450.0, 450.0], [("censored", None), 264.0]) == {"verdict": "not measured (a run has no clock)"}
    assert lv.aggregate.censored_ratio([], [264.0]) == {"verdict": "not measured (no runs)"}
    one = lv.aggregate.censored_ratio([450.0], [("censored", 600.0)])
    assert one == {"point": pytest.approx(0.75), "at_most": True, "verdict": "slower, a ceiling (one run of a curriculum)"}


def test_table_before_any_run_of_ours_has_as_many_header_cells_as_columns():
    # A cell's report while only off and a baseline have run (DAPO's first seed, say).
    runs, groups = _bench()
    runs = {k: r for k, r in runs.items() if k.startswith("off")}
    runs["dapo-r1"], groups["dapo-r1"] = _run([(0, 0.30), (10, 0.42), (50, 0.53)]), "dapo"
    tab = lv.table(runs, {k: groups[k] for k in runs}, {}, ["speed"], baselines=("off",), levels=(1.0,))
    header, sep, row = [line for line in lv.markdown(tab) if line.startswith("|")]
    assert header == "| f | target | off reached | dapo reached |"
    assert header.count("|") == sep.count("|") == row.count("|") == 5


def test_headline_and_off_final_rule_in_the_report():
    runs, groups = _bench()
    settings = {"batch": 1, "n": 1}
    rep = report.build_report(runs, None, settings, groups, rule="off_final")
    assert rep["target_accuracy"] == pytest.approx(0.51)
    assert "off_final" in aggregate.rule_line(rep["target_rule"])
    head = rep["headline"]
    assert head["target"] == pytest.approx(0.51)
    assert head["ratios"]["speed_over_off"]["measured"]["point"] == pytest.approx(450 / 264)
    text = report.table_markdown(rep)
    assert "speedup at every target level" in text


def test_projected_clock_prices_tokens_not_the_host():
    # speed's steps took 12 s against off's 10 s; the projection prices tokens only, and both
    # spend the same tokens a step, so projected ratios equal the ratio of steps to target.
    runs, groups = _bench()
    runs = {k: r for k, r in runs.items()}
    groups_u = {**groups}
    runs["uniform-r1"], groups_u["uniform-r1"] = _run([(0, 0.3), (50, 0.4)]), "uniform"  # the cost model's source
    clocks = lv.clock_sets(runs, groups_u, responses=1, batch=1, linear=evidence.projection(runs, groups_u, 1)[1])
    tab = lv.table(runs, groups_u, clocks, ["speed"], baselines=("off",), levels=(1.0,))
    proj = tab["levels"][0]["ratios"]["speed_over_off"]["projected_linear"]
    assert proj["point"] == pytest.approx(45 / 22)


def test_off_final_rule_is_parsed_and_named_in_errors():
    assert aggregate.parse_target_rule("off_final") == ("off_final", 1.0)
    assert aggregate.RULE_BASE["off_final"] == "off"
    with pytest.raises(ValueError, match="off_final"):
        aggregate.parse_target_rule("off_final:0.5")


def test_plot_writes_a_png(tmp_path):
    runs, groups = _bench()
    tab = lv.table(runs, groups, {}, ["speed"], baselines=("off",))
    path = lv.plot(tab, str(tmp_path / "levels.png"))
    assert path and (tmp_path / "levels.png").stat().st_size > 1000
    assert lv.plot(None, str(tmp_path / "none.png")) is None
    assert not math.isnan(tab["base_final"])


def test_a_measured_engine_curve_adds_a_cpu_projection():
    runs, groups = _bench()
    runs["uniform-r1"], groups["uniform-r1"] = _run([(0, 0.3), (50, 0.4)]), "uniform"
    curve = {"source": "cpu", "points": [(1.0, 10.0), (100.0, 100.0)]}
    rep = report.build_report(runs, None, {"batch": 1, "n": 1}, groups, rule="off_final", engine_curve=curve)
    assert rep["levels"]["kinds"] == ["measured", "projected_linear", "projected_concurrency", "cpu_concurrency"]
    cell = rep["headline"]["ratios"]["speed_over_off"]["cpu_concurrency"]
    # every step of every run had the same concurrency (1 response, no driver record): the CPU
    # curve prices their tokens alike, so the ratio is the steps' ratio, as per token
    assert cell["point"] == pytest.approx(45 / 22)
    without = report.build_report(runs, None, {"batch": 1, "n": 1}, groups, rule="off_final")
    assert "cpu_concurrency" not in without["levels"]["kinds"]
