"""The benchmark's evidence, by hand-computed cases: time to target between evaluations, the
bootstrap interval of a speedup and its verdict, the GPU projection's arithmetic, the mechanism
columns and their rendering in the report."""

import os

import pytest

from _util import REPO

from openrlhf_speed.bench import aggregate
from openrlhf_speed.bench import evidence
from openrlhf_speed.bench import report as rep


def _evals(*points):
    return [{"step": s, "train_wall_s": t, "eval_accuracy": a, "eval_num_samples": 100} for s, t, a in points]


def test_interpolation_reads_the_clock_where_the_line_crosses_the_target():
    evals = _evals((0, 0.0, 0.4), (2, 10.0, 0.5), (4, 20.0, 0.7))
    # 0.6 lies halfway from 0.5 (step 2, 10 s) to 0.7 (step 4, 20 s); the grid would say 20 s.
    assert aggregate.interpolate_to_target(evals, 0.6) == pytest.approx((15.0, 3.0))
    assert aggregate.interpolate_to_target(evals, 0.7) == pytest.approx((20.0, 4.0))
    assert aggregate.interpolate_to_target(evals, 0.4) == (0.0, 0.0)  # the start already reaches it
    assert aggregate.interpolate_to_target(evals, 0.8) == (None, None)
    assert aggregate.interpolate_to_target(list(reversed(evals)), 0.6) == pytest.approx((15.0, 3.0))  # order-free


def test_bootstrap_interval_and_verdicts():
    assert aggregate.bootstrap_ratio([10.0, 10.0], [5.0, 5.0]) == pytest.approx((2.0, 2.0, 2.0))
    assert aggregate.resolution(aggregate.bootstrap_ratio([10.0, 10.0], [5.0, 5.0])) == "faster"
    # Means of two resampled runs are 10, 15 or 20 s: ratios from 0.5 to 2, so 1 is inside.
    ci = aggregate.bootstrap_ratio([10.0, 20.0], [10.0, 20.0])
    assert ci[0] == 1.0 and 0.5 <= ci[1] < 1.0 < ci[2] <= 2.0
    assert aggregate.resolution(ci) == "not resolved"
    assert aggregate.bootstrap_ratio([10.0, 20.0], [10.0, 20.0]) == ci  # fixed RNG seed: reproducible
    assert aggregate.resolution((0.9, 0.8, 0.95)) == "slower"
    assert aggregate.bootstrap_ratio([10.0, None], [5.0]) is None and aggregate.resolution(None) == "not measured"
    assert aggregate.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5


def test_projection_prices_tokens_so_uniform_generation_is_twice_its_training():
    assert aggregate.cost_ratio(100.0, 100.0) == 2.0  # uniform trains on what it generates
    assert aggregate.cost_ratio(200.0, 100.0) == 1.0
    steps = [{"speed/tokens_generated": 100, "speed/tokens_trained": 50},
             {"speed/tokens_generated": 0, "speed/tokens_trained": 50}]
    clock = aggregate.projected_clock(steps, ratio=2.0, s_per_train_token=0.1)
    assert clock == pytest.approx([0.0, 25.0, 30.0])  # 0.1 x (50 + 2 x 100), then 0.1 x 50
    assert aggregate.clock_at_step(clock, 1.5) == pytest.approx(27.5)
    assert aggregate.clock_at_step(clock, 7.0) == 30.0 and aggregate.clock_at_step(clock, None) is None


def test_mechanism_columns_from_step_records():
    steps = [{"speed/tokens_screen": 40, "speed/tokens_continue": 60, "speed/tokens_full": 0,
              "speed/tokens_discarded": 20, "speed/tokens_generated": 100, "speed/tokens_trained": 80,
              "speed/useful_token_share": 0.6, "speed/prompts_screened": 8, "speed/prompts_qualified": 2,
              "actor_grad_norm": 1.0, "speed/accuracy": 0.5, "timing/generation": 2.0},
             {"speed/tokens_screen": 20, "speed/tokens_continue": 40, "speed/tokens_full": 0,
              "speed/tokens_discarded": 0, "speed/tokens_generated": 60, "speed/tokens_trained": 80,
              "speed/useful_token_share": 0.5, "speed/prompts_screened": 2, "speed/prompts_qualified": 2,
              "actor_grad_norm": 3.0, "speed/accuracy": 0.3, "timing/generation": 2.0}]
    m = aggregate.mechanism(steps)
    assert (m["tokens_per_step_screen"], m["tokens_per_step_continue"], m["tokens_per_step_discarded"]) == (30, 50, 10)
    assert m["qualification_rate"] == pytest.approx(0.4)  # 4 of 10 screened
    # useful tokens 0.6 x 100 + 0.5 x 60 = 90 of 160 trained: 70 in groups without a gradient
    assert m["zero_variance_share"] == pytest.approx(70 / 160)
    assert m["grad_norm_mean"] == 2.0 and m["trained_accuracy_mean"] == pytest.approx(0.4)
    assert m["generation_tokens_per_s"] == pytest.approx(40.0)
    off = aggregate.mechanism([{"rollout/reward_mean": 0.25, "actor_grad_norm": 1.0}])
    assert off["trained_accuracy_mean"] == 0.25 and off["qualification_rate"] != off["qualification_rate"]  # NaN
    # A log with no useful-token share says nothing about zero-variance groups: NaN, not 1.0.
    assert aggregate.is_nan(off["zero_variance_share"])


def test_stale_drops_per_step_count_qualified_groups_the_buffer_let_age():
    # DAPO-like: step 1 generates and qualifies 20 prompts for a batch of 16; step 2 trains 16
    # from the buffer; step 3 generates again and drops 4 groups that aged past the bound.
    steps = [{"speed/prompts_screened": 24, "speed/prompts_qualified": 20, "speed/prompts_rescreened_stale": 0},
             {"speed/prompts_screened": 0, "speed/prompts_qualified": 0, "speed/prompts_rescreened_stale": 0},
             {"speed/prompts_screened": 24, "speed/prompts_qualified": 22, "speed/prompts_rescreened_stale": 4}]
    m = aggregate.mechanism(steps)
    assert m["prompts_qualified_per_step"] == pytest.approx(14.0) and m["prompts_stale_per_step"] == pytest.approx(4 / 3)
    # uniform logs NaN qualification; `off` logs neither count: NaN, not zero.
    uniform = aggregate.mechanism([{"speed/prompts_screened": 16, "speed/prompts_qualified": float("nan")}])
    assert aggregate.is_nan(uniform["prompts_qualified_per_step"])
    off = aggregate.mechanism([{"rollout/reward_mean": 0.25}])
    assert aggregate.is_nan(off["prompts_qualified_per_step"]) and aggregate.is_nan(off["prompts_stale_per_step"])


def _run(times, accs, gen, trained, train_s=1.0, driver=True):
    evals = _evals(*[(2 * i, t, a) for i, (t, a) in enumerate(zip(times, accs))])
    step = {"speed/tokens_generated": gen, "speed/tokens_trained": trained, "timing/ppo_train": train_s,
            "actor_grad_norm": 1.0, "timing/generation": 1.0, "train_wall_s": times[-1]}
    if not driver:  # `off`: OpenRLHF's own generation logs a response length, not driver token counts
        step = {"rollout/response_length_mean": gen / 4, "timing/ppo_train": train_s, "actor_grad_norm": 1.0,
                "rollout/reward_mean": 0.5, "train_wall_s": times[-1]}
    return {"steps": [dict(step) for _ in range(4)], "evals": evals}


def test_report_renders_intervals_projection_mechanism_and_start_model(monkeypatch):
    runs = {"off-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100, driver=False),
            "off-r2": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100, driver=False),
            "uniform-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "uniform-r2": _run([0, 12, 24], [0.4, 0.5, 0.7], 100, 100),
            "speed-r1": _run([0, 5, 10], [0.4, 0.6, 0.7], 160, 100),
            "speed-r2": _run([0, 6, 12], [0.4, 0.6, 0.7], 160, 100)}
    groups = {k: k.split("-")[0] for k in runs}
    report = rep.build_report(runs, 0.6, {"batch": 2, "n": 2}, groups=groups)
    e = report["evidence"]
    assert e["runs"]["uniform-r1"]["time_to_target_interp_s"] == pytest.approx(15.0)
    assert e["runs"]["speed-r1"]["time_to_target_interp_s"] == pytest.approx(5.0)
    # speed 5 and 6 s against uniform 15 and 18 s: every resample's ratio is 2.5 to 3.6.
    ci = e["intervals_measured"]["speed_over_uniform"]
    assert ci["point"] == pytest.approx(16.5 / 5.5) and ci["low"] >= 2.5 and ci["verdict"] == "faster"
    # Cost model from uniform: ratio 2 x 100 / 100, 1 s of training over 100 trained tokens.
    assert e["cost_model"]["ratio"] == pytest.approx(2.0) and e["cost_model"]["s_per_train_token"] == 0.01
    # off: 25 tokens x 4 responses a step = 100 generated and trained; the target at step 3 of 4
    assert e["runs"]["off-r1"]["projected_time_to_target_s"] == pytest.approx(3 * 0.01 * (100 + 200))
    # speed: 0.01 x (100 + 2 x 160) = 4.2 s a step, target at step 2
    assert e["runs"]["speed-r1"]["projected_time_to_target_s"] == pytest.approx(2 * 4.2)
    assert e["intervals_projected"]["speed_over_off"]["point"] == pytest.approx(9.0 / 8.4)
    monkeypatch.setattr(rep, "start_model", lambda model: "start model: sha256 abc")
    report["start_model"] = rep.start_model("proving")
    text = rep.table_markdown(report)
    assert text.startswith("start model: sha256 abc")
    assert "- speed_over_uniform: measured 3.00x [" in text and "] faster; GPU projection " in text
    assert "GPU projection (a model, not a measurement)" in text
    assert "| speed-r1 | speed | 5.0 s | 2.0 | 8.4 s |" in text


def test_not_resolved_is_printed_when_the_interval_holds_one():
    runs = {"uniform-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "uniform-r2": _run([0, 20, 40], [0.4, 0.5, 0.7], 100, 100),
            "speed-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "speed-r2": _run([0, 20, 40], [0.4, 0.5, 0.7], 100, 100)}
    report = rep.build_report(runs, 0.6, {"batch": 2, "n": 2}, groups={k: k.split("-")[0] for k in runs})
    assert "- speed_over_uniform: measured 1.00x [" in rep.table_markdown(report)
    assert report["evidence"]["intervals_measured"]["speed_over_uniform"]["verdict"] == "not resolved"


def test_a_run_under_the_target_bounds_the_speedup_by_its_whole_clock():
    """SPEED's second run never reaches the target within its 12 s: its time is later than 12 s,
    so SPEED over uniform is at most mean(9, 9) / mean(4, 12) = 1.12x, printed as a ceiling the
    way the levels' table and the regime map print it, not left out."""
    rows = {"u1": {"curriculum": "uniform", "t": 9.0, "whole": 20.0},
            "u2": {"curriculum": "uniform", "t": 9.0, "whole": 20.0},
            "s1": {"curriculum": "speed", "t": 4.0, "whole": 12.0},
            "s2": {"curriculum": "speed", "t": None, "whole": 12.0}}
    ci = evidence.intervals(rows, "t", "whole")["speed_over_uniform"]
    assert ci["at_most"] is True and ci["point"] == pytest.approx(18.0 / 16.0)
    assert ci["verdict"] == "not resolved, a ceiling (1/2 runs of ours did not reach it)"
    # a baseline under the target: a floor; both under it: no ratio
    rows["s2"]["t"], rows["u2"]["t"] = 4.0, None
    floor = evidence.intervals(rows, "t", "whole")["speed_over_uniform"]
    assert floor["at_least"] is True and floor["point"] == pytest.approx(29.0 / 8.0)
    rows["s2"]["t"] = None
    assert "point" not in evidence.intervals(rows, "t", "whole")["speed_over_uniform"]
    runs = {"uniform-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "uniform-r2": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "speed-r1": _run([0, 5, 10], [0.4, 0.6, 0.7], 160, 100),
            "speed-r2": _run([0, 5, 10], [0.4, 0.5, 0.55], 160, 100)}
    e = rep.build_report(runs, 0.6, {"batch": 2, "n": 2}, groups={k: k.split("-")[0] for k in runs})["evidence"]
    assert "- speed_over_uniform: measured <=" in "\n".join(evidence.markdown(e))


def test_curriculum_with_n_init_and_off_command(tmp_path):
    from openrlhf_speed.bench import run as bench_run

    assert bench_run.parse_curriculum("speed@8", 4) == ("speed", 8)
    assert bench_run.parse_curriculum("off", 4) == ("off", 4)
    with pytest.raises(SystemExit, match="name@K"):
        bench_run.parse_curriculum("speed@x", 4)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(f'{{"prompt": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(5)))
    args = bench_run.build_parser().parse_args(["--mode", "proving-v4", "--model", "proving-ci"])
    s = bench_run._settings(args)
    (tmp_path / "off").mkdir()
    cmd = bench_run.train_command("off", s, args, str(train), "test.jsonl", str(tmp_path / "off"))
    flag = lambda f: cmd[cmd.index(f) + 1]
    # stock OpenRLHF: no --train.max_steps (it refuses it); 30 steps x 16 prompts, cycling the 5 rows, one epoch
    assert "--train.max_steps" not in cmd and flag("--train.num_episodes") == "1" and flag("--speed.strategy") == "off"
    rows = open(flag("--data.prompt_dataset")).read().splitlines()
    assert len(rows) == 30 * 16 and rows[5] == rows[0]
    assert "--speed.max_inflight_prompts" not in cmd and "--speed.n_init" not in cmd
    cmd = bench_run.train_command("speed@8", s, args, str(train), "test.jsonl", str(tmp_path / "off"))
    flag = lambda f: cmd[cmd.index(f) + 1]
    assert (flag("--speed.strategy"), flag("--speed.n_init"), flag("--speed.max_inflight_prompts")) == ("speed", "8", "64")
    assert flag("--train.max_steps") == "30"
    # Uniform over-samples nothing: the 64-prompt window would outrun the staleness bound.
    cmd = bench_run.train_command("uniform", s, args, str(train), "test.jsonl", str(tmp_path / "off"))
    assert "--speed.max_inflight_prompts" not in cmd and cmd[cmd.index("--speed.strategy") + 1] == "uniform"
    dapo = bench_run.train_command("dapo", s, args, str(train), "test.jsonl", str(tmp_path / "off"))
    assert dapo[dapo.index("--speed.max_inflight_prompts") + 1] == "64"


def test_host_speed_is_the_median_evaluation_throughput_and_its_spread_is_reported():
    def evals(seconds):  # 1,200 samples of mean length 38, the first evaluation pays the warm-up
        return [{"step": 2 * i, "eval_accuracy": 0.3 + 0.01 * i, "train_wall_s": 10.0 * i, "eval_num_samples": 1200,
                 "eval_response_length_mean": 38.0, "eval_time_s": t} for i, t in enumerate(seconds)]

    # warm-up 40 s left out; median of 16, 17, 18 -> 1200 x 38 / 17
    assert evidence.host_speed(evals([40.0, 16.0, 18.0, 17.0])) == pytest.approx(1200 * 38 / 17)
    assert evidence.host_speed(evals([40.0])) is None and evidence.host_speed([]) is None
    fast, slow = evals([16.0, 16.6, 16.6]), evals([39.6, 26.0, 26.0])
    runs = {"off-r1": {"steps": [], "evals": fast}, "uniform-r1": {"steps": [], "evals": slow}}
    groups = {"off-r1": "off", "uniform-r1": "uniform"}
    built = evidence.build(runs, groups, 0.31, {"batch": 2, "n": 2}, evidence.projection(runs, groups, 4))
    assert built["host_spread"] == pytest.approx(26.0 / 16.6)
    text = "\n".join(evidence.markdown(built))
    assert "fastest run / slowest 1.57, over 1.10: the host's own speed moved between runs" in text
    assert "| off-r1 | off |" in text and f"| {1200 * 38 / 16.6:.0f} |" in text
    alone = {"off-r1": runs["off-r1"]}
    same = evidence.build(alone, {"off-r1": "off"}, 0.31, {"batch": 2, "n": 2},
                          evidence.projection(alone, {"off-r1": "off"}, 4))
    assert "fastest run / slowest 1.00" in "\n".join(evidence.markdown(same))
    assert "moved between runs" not in "\n".join(evidence.markdown(same))


def test_zero_variance_share_leaves_out_steps_that_generated_nothing():
    # DAPO: step 1 generates 20,000 tokens, trains the 10,000 of its non-constant groups; step 2
    # trains 10,000 more from the buffer and generates nothing (share NaN). No group trained had
    # zero variance.
    nan = float("nan")
    steps = [{"speed/useful_token_share": 0.5, "speed/tokens_generated": 20000.0, "speed/tokens_trained": 10000.0},
             {"speed/useful_token_share": nan, "speed/tokens_generated": 0.0, "speed/tokens_trained": 10000.0}]
    assert aggregate.mechanism(steps)["zero_variance_share"] == pytest.approx(0.0)
    # uniform: 40% of each step's trained tokens in zero-variance groups
    uniform = [{"speed/useful_token_share": 0.6, "speed/tokens_generated": 1000.0, "speed/tokens_trained": 1000.0}] * 3
    assert aggregate.mechanism(uniform)["zero_variance_share"] == pytest.approx(0.4)
    assert aggregate.is_nan(aggregate.mechanism([steps[1]])["zero_variance_share"])


def test_one_run_of_a_curriculum_is_never_an_interval():
    runs = {"uniform-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "speed-r1": _run([0, 5, 10], [0.4, 0.6, 0.7], 160, 100),
            "speed-r2": _run([0, 6, 12], [0.4, 0.6, 0.7], 160, 100)}
    e = rep.build_report(runs, 0.6, {"batch": 2, "n": 2}, groups={k: k.split("-")[0] for k in runs})["evidence"]
    ci = e["intervals_measured"]["speed_over_uniform"]
    assert "low" not in ci and ci["point"] == pytest.approx(15.0 / 5.5)
    assert ci["verdict"].startswith("not resolved (one run of a curriculum")
    assert "- speed_over_uniform: measured 2.73x, not resolved (one run" in "\n".join(evidence.markdown(e))


def test_a_curriculum_with_another_n_init_gets_its_own_intervals():
    """The paper's second row (N_init 8) is compared with the baselines like speed itself."""
    runs = {"uniform-r1": _run([0, 10, 20], [0.4, 0.5, 0.7], 100, 100),
            "uniform-r2": _run([0, 12, 24], [0.4, 0.5, 0.7], 100, 100),
            "speed@8-r1": _run([0, 5, 10], [0.4, 0.6, 0.7], 160, 100),
            "speed@8-r2": _run([0, 6, 12], [0.4, 0.6, 0.7], 160, 100),
            "cures-r1": _run([0, 5, 10], [0.4, 0.6, 0.7], 160, 100)}
    groups = {k: k.rsplit("-", 1)[0] for k in runs}
    e = rep.build_report(runs, 0.6, {"batch": 2, "n": 2}, groups=groups)["evidence"]
    assert list(e["intervals_measured"]) == ["speed@8_over_uniform"]  # cures is not one of ours
    assert e["intervals_measured"]["speed@8_over_uniform"]["point"] == pytest.approx(16.5 / 5.5)
    assert evidence.is_ours("speed_bayes@8") and not evidence.is_ours("dapo@8")
    # every screening strategy of ours gets its speedups, the ones a tag prior reads included
    from openrlhf_speed.curriculum import STRATEGIES

    assert all(evidence.is_ours(f"{name}+level") for name, c in STRATEGIES.items() if c.reads_tags)


def test_the_projection_and_advise_read_one_cost_ratio_off_a_run():
    """The bench's cost model and `advise --from_run` time training alike (payoff.step_totals:
    experience + update + weight sync), so on one run they give one ratio."""
    import types

    from openrlhf_speed.bench.report import load_run
    from openrlhf_speed.cli import advise

    path = str(REPO / "benchmarks" / "proving-v5" / "avx512" / "off-r1")
    run = load_run(os.path.join(path, "metrics.jsonl"))
    model = evidence.cost_model({"off-r1": run}, {"off-r1": "off"}, 16 * 24)
    ratio, source = advise.cost_ratio(types.SimpleNamespace(from_run=path, cost_ratio=None))
    assert model["anchor"] == "off" and model["measured_ratio"] == pytest.approx(ratio, rel=1e-12)
    # and the projection's seconds per trained token are that training time over the trained tokens
    steps = [st for st in run["steps"]]
    trained = sum(st["speed/tokens_trained"] for st in steps)
    assert model["s_per_train_token"] == pytest.approx(source["training_s_per_step"] * len(steps) / trained)


def test_qualification_by_quarter_shows_a_drift_the_run_mean_hides():
    # 8 steps: the screen qualifies 6 of 8 prompts in the first quarter and 2 of 8 in the last,
    # where the rest are turned away solved (all right, or above the band) or unsolved.
    def step(qualified, solved, too_easy=0):
        return {"speed/prompts_screened": 8, "speed/prompts_qualified": qualified,
                "speed/reason/screen_qualified": qualified, "speed/reason/screen_all_correct": solved,
                "speed/reason/screen_too_easy": too_easy,
                "speed/reason/screen_all_wrong": 8 - qualified - solved - too_easy}
    steps = [step(6, 1), step(6, 1), step(5, 2), step(4, 2, 1), step(4, 3), step(3, 4), step(2, 5), step(2, 4, 2)]
    m = aggregate.mechanism(steps)
    assert m["qualification_by_quarter"] == pytest.approx([12 / 16, 9 / 16, 7 / 16, 4 / 16])
    assert m["rejected_solved_by_quarter"] == pytest.approx([2 / 16, 5 / 16, 7 / 16, 11 / 16])
    assert m["qualification_rate"] == pytest.approx(32 / 64)
    # seq's early stop counts as turned away solved; `off` logs no screening: NaN each quarter.
    seq = aggregate.mechanism([{"speed/prompts_screened": 4, "speed/prompts_qualified": 1,
                                "speed/reason/seq_stop_all_correct": 2, "speed/reason/seq_more": 2}] * 4)
    assert seq["rejected_solved_by_quarter"] == pytest.approx([0.5] * 4)
    off = aggregate.mechanism([{"rollout/reward_mean": 0.25}] * 4)
    assert all(aggregate.is_nan(q) for q in off["qualification_by_quarter"] + off["rejected_solved_by_quarter"])
