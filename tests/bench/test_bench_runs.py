"""Several runs per curriculum (`--runs`), the target rule (`--target_rule`) and the
proving-ground presets: a curriculum's row must say how many of its runs reached the
target, a speedup must not rest on runs that missed it, and the rule's target must be
the arithmetic it states. Synthetic run logs only: nothing here trains."""

import csv
import json
import math

import pytest

from openrlhf_speed.bench import aggregate
from openrlhf_speed.bench import report as rep
from openrlhf_speed.bench import run as bench_run


def _run(accs, step_s, samples=4000, reward=None):
    """accs[i]: eval accuracy at step i (step 0 before training); step_s: seconds per step."""
    steps = [{"event": "step", "step": i, "train_wall_s": i * step_s, "timing/generation": step_s / 2,
              "timing/ppo_train": step_s / 2, "speed/useful_token_share_cum": 0.5,
              **({} if reward is None else {"rollout/reward_mean": reward[i - 1]})} for i in range(1, len(accs))]
    evals = [{"event": "eval", "step": i, "train_wall_s": i * step_s, "eval_accuracy": a, "eval_num_samples": samples}
             for i, a in enumerate(accs)]
    return {"steps": steps, "evals": evals}


def _two_seeds():
    # uniform reaches 0.5 at 60 s (r1) and 90 s (r2); speed r1 at 20 s, speed r2 never.
    runs = {"uniform-r1": _run([0.3, 0.4, 0.5, 0.55], 30, reward=[0.2, 0.3, 0.3]),
            "uniform-r2": _run([0.3, 0.4, 0.45, 0.5], 30, reward=[0.2, 0.2, 0.3]),
            "speed-r1": _run([0.3, 0.5, 0.55, 0.6], 20, reward=[0.5, 0.5, 0.5]),
            "speed-r2": _run([0.3, 0.4, 0.45, 0.48], 20, reward=[0.4, 0.5, 0.6])}
    return runs, {k: k.split("-r")[0] for k in runs}


def test_run_plan_names_folders_and_seeds():
    one = aggregate.run_plan(["uniform", "dapo"], 1, 42)
    assert [(r["key"], r["seed"]) for r in one] == [("uniform", 42), ("dapo", 42)]  # folders as before --runs
    two = aggregate.run_plan(["uniform", "dapo", "speed"], 2, 42)
    assert [(r["key"], r["curriculum"], r["seed"]) for r in two[:4]] == [
        ("uniform-r1", "uniform", 42), ("dapo-r1", "dapo", 42), ("speed-r1", "speed", 42), ("uniform-r2", "uniform", 43)]


def test_train_commands_differ_only_in_seed_and_folder(tmp_path):
    args = bench_run.build_parser().parse_args(["--mode", "tiny", "--runs", "2", "--seed", "7"])
    s = bench_run._settings(args)
    cmds = {r["key"]: bench_run.train_command(r["curriculum"], s, args, "train.jsonl", "test.jsonl",
                                              str(tmp_path / r["key"]), seed=r["seed"])
            for r in aggregate.run_plan(["uniform"], args.runs, args.seed)}
    seeds = {k: c[c.index("--train.seed") + 1] for k, c in cmds.items()}
    assert seeds == {"uniform-r1": "7", "uniform-r2": "8"}
    strip = lambda c: [a.replace("uniform-r1", "X").replace("uniform-r2", "X") for a in c if a not in ("7", "8")]
    assert strip(cmds["uniform-r1"]) == strip(cmds["uniform-r2"])
    # Without a seed, the command keeps --seed (single runs, as before).
    plain = bench_run.train_command("uniform", s, args, "train.jsonl", "test.jsonl", str(tmp_path))
    assert plain[plain.index("--train.seed") + 1] == "7"


def test_progress_lines_name_the_run_and_its_seed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_run, "_run_logged", lambda cmd, log, prefix: 0)
    args = bench_run.build_parser().parse_args(["--mode", "tiny", "--runs", "2"])
    s = bench_run._settings(args)
    bench_run._train_all(args, s, aggregate.run_plan(["uniform", "dapo", "speed"], 2, 42), "t.jsonl", "e.jsonl",
                         str(tmp_path))
    out = capsys.readouterr().out
    assert "[bench] (2/6) dapo run 1/2 (seed 42): training ..." in out
    assert "[bench] (6/6) speed run 2/2 (seed 43): training ..." in out
    assert (tmp_path / "dapo-r2").is_dir()


def test_runs_are_grouped_with_spread_and_reached_counts():
    runs, groups = _two_seeds()
    report = rep.build_report(runs, target=0.5, groups=groups)
    u, s = report["summary"]["uniform"], report["summary"]["speed"]
    assert set(report["summary"]) == {"uniform", "speed"} and set(report["runs_summary"]) == set(runs)
    assert report["runs_summary"]["speed-r1"]["time_to_target_s"] == 20
    assert report["runs_summary"]["speed-r2"]["curriculum"] == "speed"
    assert (u["runs"], u["reached"], u["time_to_target_s"]) == (2, 2, 75)
    assert (u["time_to_target_min"], u["time_to_target_max"], u["steps_to_target"]) == (60, 90, 2.5)
    # One speed run missed: no mean time, but the spread of those that reached it.
    assert (s["reached"], s["time_to_target_s"], s["time_to_target_min"]) == (1, None, 20)
    assert s["final_accuracy"] == pytest.approx(0.54)
    assert (s["final_accuracy_min"], s["final_accuracy_max"]) == (0.48, 0.6)
    assert u["train_wall_s"] == 90 and u["steps"] == 3  # equal counts stay counts
    # The standard error of a mean over two independent runs: sqrt(se1^2 + se2^2) / 2.
    se = [report["runs_summary"][k]["final_accuracy_se"] for k in ("uniform-r1", "uniform-r2")]
    assert u["final_accuracy_se"] == pytest.approx((se[0] ** 2 + se[1] ** 2) ** 0.5 / 2)
    # Mean reward of trained groups: the mean of the runs' step means.
    assert u["trained_reward_mean"] == pytest.approx((0.8 / 3 + 0.7 / 3) / 2)
    assert s["trained_reward_mean"] == pytest.approx(0.5)
    table = rep.table_markdown(report)
    assert "| uniform | 2 | 75 s [60-90] | 2.5 | 0.525 [0.500-0.550] |" in table
    assert "| speed | 2 | 1/2 reached [20-20] |" in table
    assert "| speed-r2 | speed | - | not reached |" in table  # each run's own row
    assert "mean reward of trained groups" in table and "speed 0.500" in table
    _assert_tables_are_rectangular(table)


def _assert_tables_are_rectangular(md: str) -> None:
    """Every markdown table's header, separator and rows have the same number of cells."""
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert rows
    blocks, current = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line.count("|"))
        elif current:
            blocks.append(current)
            current = []
    for counts in blocks:
        assert len(set(counts)) == 1, counts


def test_speedup_needs_every_run_of_both_to_reach_the_target():
    runs, groups = _two_seeds()
    report = rep.build_report(runs, target=0.5, groups=groups, settings={"n": 4, "n_init": 2})
    assert report["speedups"] == {"speed_over_uniform": None}
    assert report["speedup_notes"]["speed_over_uniform"] == "speed 1/2 runs reached the target"
    assert "speed_over_uniform n/a (speed 1/2 runs reached the target)" in rep.table_markdown(report)
    sooner = {c["claim"]: c for c in report["claims"]}["speed reaches the target accuracy sooner than uniform"]
    assert sooner["status"] == "n/a" and sooner["why"] == "speed 1/2 runs reached the target"
    # Both reach it in every run: the ratio of the mean times, 75 s / 30 s.
    runs["speed-r2"] = _run([0.3, 0.45, 0.5, 0.6], 20)
    report = rep.build_report(runs, target=0.5, groups=groups)
    assert report["summary"]["speed"]["time_to_target_s"] == 30
    assert report["speedups"] == {"speed_over_uniform": pytest.approx(2.5)} and report["speedup_notes"] == {}


def test_single_runs_keep_their_shape():
    runs = {"uniform": _run([0.3, 0.4, 0.5], 30), "speed": _run([0.3, 0.5, 0.5], 20)}
    report = rep.build_report(runs, target=0.5)
    u = report["summary"]["uniform"]
    assert (u["runs"], u["reached"], u["time_to_target_s"], u["steps_to_target"]) == (1, 1, 60, 2)
    assert u["final_accuracy_se"] == report["runs_summary"]["uniform"]["final_accuracy_se"]
    table = rep.table_markdown(report)
    assert "| uniform | 1 | 60 s | 2 | 0.500 |" in table and "each run:" not in table
    assert "trained reward" not in table  # no rollout/reward_mean logged
    _assert_tables_are_rectangular(table)


def test_target_rule_arithmetic():
    runs, groups = _two_seeds()
    report = rep.build_report(runs, target=None, groups=groups, rule="uniform_gain:0.75")
    info = report["target_rule"]
    # start: every run's step-0 mean (0.3); uniform's final mean (0.55 + 0.5) / 2 = 0.525.
    assert info["start"] == pytest.approx(0.3) and info["baseline_final"] == pytest.approx(0.525)
    assert info["gain"] == pytest.approx(0.225) and report["target_accuracy"] == pytest.approx(0.3 + 0.75 * 0.225)
    assert report["target_mode"] == "rule" and report["note"] is None and not report["target_within_noise"]
    # The start's error over the 2 seeds, not over all 4 runs (curricula share a seed's step 0).
    se0 = report["runs_summary"]["uniform-r1"]["start_accuracy_se"]
    assert info["start_se"] == pytest.approx(se0 / 2 ** 0.5)
    assert "target accuracy 0.4688 (rule uniform_gain:0.75: step-0 0.3000 + 0.75 x uniform gain 0.2250" \
        in rep.table_markdown(report)
    # 0.469: uniform-r1 reaches it at step 2 (0.50), uniform-r2 at step 3 (0.45 at step 2 is short).
    assert report["summary"]["uniform"]["time_to_target_s"] == (60 + 90) / 2
    with pytest.raises(ValueError, match="--target_rule"):
        aggregate.parse_target_rule("uniform_gain:1.5")
    with pytest.raises(ValueError, match="both given"):
        rep.build_report(runs, target=0.5, groups=groups, rule="uniform_gain:0.75")


def test_target_rule_says_when_uniform_did_not_improve():
    flat = {"uniform": _run([0.3, 0.3, 0.29], 30), "speed": _run([0.3, 0.35, 0.4], 20)}
    report = rep.build_report(flat, target=None, rule="uniform_gain:0.75", settings={"n": 4, "n_init": 2})
    assert "uniform runs did not improve" in report["note"] and report["target_within_noise"]
    sooner = {c["claim"]: c for c in report["claims"]}["speed reaches the target accuracy sooner than uniform"]
    assert sooner["status"] == "n/a" and "see the note" in sooner["why"]
    # A gain of 0.05 over 64 samples: two standard errors are about 0.16.
    noisy = {"uniform": _run([0.3, 0.32, 0.35], 30, samples=64), "speed": _run([0.3, 0.35, 0.4], 20, samples=64)}
    report = rep.build_report(noisy, target=None, rule="uniform_gain:0.75")
    assert "within two standard errors" in report["note"] and report["target_within_noise"]
    assert report["target_accuracy"] == pytest.approx(0.3 + 0.75 * 0.05)
    # No uniform runs: no target, and the note says what to add.
    report = rep.build_report({"speed": _run([0.3, 0.4], 20)}, target=None, rule="uniform_gain:0.75")
    assert report["target_accuracy"] is None and "add uniform to --curricula" in report["note"]


def test_target_and_target_rule_together_are_an_error(tmp_path):
    with pytest.raises(SystemExit, match="--target and --target_rule both given"):
        bench_run.main(["--target", "0.5", "--target_rule", "uniform_gain:0.75", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--target_rule 'uniform_gain' is not understood"):
        bench_run.main(["--target_rule", "uniform_gain", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="add uniform to --curricula"):
        bench_run.main(["--mode", "proving-v4", "--curricula", "dapo,speed", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="off_final measures the off runs: add off to --curricula"):
        bench_run.main(["--mode", "proving", "--curricula", "uniform,speed", "--out", str(tmp_path)])
    # A mode's rule gives way to an explicit --target.
    args = bench_run.build_parser().parse_args(["--mode", "proving", "--target", "0.5"])
    bench_run._settings(args)
    assert args.target == 0.5 and args.target_rule is None


def test_proving_preset_uses_the_proving_data(tmp_path, monkeypatch):
    import openrlhf_speed.data.embedded as embedded
    import openrlhf_speed.proving as proving

    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text('{"prompt": "1+1", "answer": "2"}\n')
    test.write_text("".join(json.dumps({"prompt": f"{i}+0", "answer": str(i)}) + "\n" for i in range(1500)))
    asked = []
    monkeypatch.setattr(proving, "data_paths", lambda name: asked.append(name) or (str(train), str(test)))
    monkeypatch.setattr(embedded, "ensure_embedded_dataset", lambda **kw: pytest.fail("embedded data used"))
    # v4's published tables keep their preset under its own mode.
    args = bench_run.build_parser().parse_args(["--mode", "proving-v4", "--out", str(tmp_path)])
    s = bench_run._settings(args)
    assert (args.model, args.runs, args.target_rule) == ("proving-v4", 4, "uniform_gain:0.75")
    assert args.curricula == "off,uniform,dapo,speed,speed@8,greso,speed_bayes"
    assert tuple(s[k] for k in ("steps", "eval_every", "lr")) == (30, 2, 1e-4)
    # v5, the paper's regime: 100 steps, the target stock OpenRLHF's final accuracy.
    args = bench_run.build_parser().parse_args(["--mode", "proving", "--out", str(tmp_path)])
    s = bench_run._settings(args)
    assert (args.model, args.runs, args.target_rule) == ("proving", 4, "off_final")
    assert args.curricula == "off,uniform,dapo,speed"
    assert args.skip_engine is True and args.driver_steps == 0
    sizes = ("batch", "n", "n_init", "max_new_tokens", "steps", "eval_every")
    assert tuple(s[k] for k in sizes) == (16, 24, 4, 64, 100, 5)  # the paper's B, N and N_init
    assert (s["eval_prompts"], s["eval_k"], s["lr"], s["warmup"]) == (1200, 1, 2e-5, 10)
    got_train, got_test = bench_run._data(args, s, str(tmp_path))
    assert asked == ["proving"] and got_train == str(train)
    rows = [json.loads(line) for line in open(got_test)]
    assert len(rows) == 1200 and rows[0]["prompt"] == "0+0"  # the first eval_prompts rows
    cmd = bench_run.train_command("speed", s, args, got_train, got_test, str(tmp_path / "speed-r1"), seed=43)
    flag = lambda f: cmd[cmd.index(f) + 1]
    assert flag("--actor.model_name_or_path") == "proving" and flag("--data.prompt_dataset") == str(train)
    assert flag("--data.max_len") == str(512 + 64) and flag("--speed.n_init") == "4" and flag("--train.seed") == "43"
    # the proving model computes in float32 whatever the CPU (its figures must not depend on native bf16)
    assert flag("--ds.param_dtype") == "fp32" and flag("--vllm.dtype") == "float32"
    args.model = "default"
    assert "--ds.param_dtype" not in bench_run.train_command("speed", s, args, got_train, got_test, str(tmp_path / "x"))
    args.model = "proving"
    # Explicit flags override the mode's defaults; given data files win over the proving data.
    args = bench_run.build_parser().parse_args(["--mode", "proving", "--model", "proving-ci", "--runs", "3",
                                                "--prompt_data", str(train), "--eval_data", str(test)])
    s = bench_run._settings(args)
    assert (args.model, args.runs) == ("proving-ci", 3)
    bench_run._data(args, s, str(tmp_path))
    assert asked == ["proving"]  # not asked again
    ci = bench_run.build_parser().parse_args(["--mode", "proving-ci"])
    s = bench_run._settings(ci)
    assert (ci.model, ci.runs, ci.target_rule, ci.skip_engine) == ("proving-ci", 1, None, False)
    assert (s["batch"], s["n"], s["n_init"], s["max_new_tokens"], s["steps"], s["eval_every"], s["eval_prompts"],
            s["eval_k"], s["lr"]) == (4, 4, 2, 32, 2, 1, 32, 1, 1e-4)


def _write(path, run):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for rec in run["steps"] + run["evals"]:
            f.write(json.dumps(rec) + "\n")


def test_report_only_rebuilds_a_multi_run_folder_with_its_rule(tmp_path, capsys):
    runs, groups = _two_seeds()
    for key, run in runs.items():
        _write(tmp_path / key / "metrics.jsonl", run)
    plan = aggregate.run_plan(["uniform", "speed"], 2, 42)
    (tmp_path / "bench.json").write_text(json.dumps({
        "command": "openrlhf-speed bench --mode proving", "settings": {"n": 16, "n_init": 4},
        "curricula": ["uniform", "speed"], "runs": 2, "seeds": [42, 43], "plan": plan, "target": None,
        "target_rule": "uniform_gain:0.75", "versions": {}}))
    docs = tmp_path / "docs"
    assert bench_run.main(["--report_only", "--out", str(tmp_path), "--publish", str(docs)]) == 0
    printed = capsys.readouterr().out
    # Without --publish_docs the report's documents sit beside the figures and the evidence.
    assert sorted(p.name for p in docs.iterdir() if p.is_file()) == ["accuracy.png", "bench.json", "results.json",
                                                                     "summary.md"]
    assert sorted(p.name for p in docs.iterdir() if p.is_dir()) == sorted(runs)
    assert "(rule uniform_gain:0.75: step-0 " in printed and "| uniform-r2 | uniform | 43 |" in printed
    results = json.load(open(tmp_path / "results.json"))
    assert set(results["summary"]) == {"uniform", "speed"} and set(results["runs_summary"]) == set(runs)
    assert results["runs_summary"]["speed-r2"]["seed"] == 43 and results["target_mode"] == "rule"
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert {(r["curriculum"], r["run"]) for r in rows} == {(groups[k], k) for k in runs}


def test_training_sizes_and_warmup_reach_the_train_command(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(4000)))
    args = bench_run.build_parser().parse_args(["--mode", "proving", "--train_batch", "64", "--micro", "64",
                                                "--train_micro", "32", "--warmup", "10", "--epochs", "10"])
    s = bench_run._settings(args)
    cmd = bench_run.train_command("uniform", s, args, str(train), "test.jsonl", str(tmp_path / "u"))
    flag = lambda f: cmd[cmd.index(f) + 1]
    assert (flag("--train.batch_size"), flag("--rollout.micro_batch_size"), flag("--train.micro_batch_size")) == (
        "64", "64", "32")
    assert flag("--actor.lr_scheduler") == "constant_with_warmup"
    # OpenRLHF's schedule length, from the data as ppo_trainer.prepare_datasets computes it: its
    # ceil(length x ratio) is the warm-up, 10 optimizer updates (5 bench steps of 2 updates).
    length = 4000 * 24 // 64 * 10
    assert math.ceil(length * float(flag("--actor.lr_warmup_ratio"))) == 10
    # Without --warmup, the command is as before: no warm-up, OpenRLHF's default schedule.
    plain = bench_run.build_parser().parse_args(["--mode", "tiny"])
    cmd = bench_run.train_command("uniform", bench_run._settings(plain), plain, "t.jsonl", "e.jsonl", str(tmp_path))
    assert "--actor.lr_scheduler" not in cmd and cmd[cmd.index("--actor.lr_warmup_ratio") + 1] == "0"
    assert (cmd[cmd.index("--train.batch_size") + 1], cmd[cmd.index("--train.micro_batch_size") + 1]) == ("16", "8")
    for bad, why in ((["--train_batch", "50"], "must divide the step's 384 responses"),
                     (["--train_batch", "64", "--train_micro", "48"], "multiple of the train micro-batch 48"),
                     (["--warmup", "-1"], "--warmup -1")):
        with pytest.raises(SystemExit, match=why):
            bench_run._settings(bench_run.build_parser().parse_args(["--mode", "proving", *bad]))
