"""The benchmark's figures from run logs: what a user reads off the table must follow from
the logged evaluations (time to target, speedups, token accounting, overhead share)."""

import csv
import json

import pytest

from openrlhf_speed.bench import report as rep
from openrlhf_speed.bench import run as bench_run


def _write_run(path, accs, step_s, tokens, useful, overhead=0.01):
    """accs[i]: eval accuracy at step i (step 0 = before training); step_s: seconds per step."""
    with open(path, "w") as f:
        for step, acc in enumerate(accs):
            if step > 0:
                f.write(json.dumps({"event": "step", "step": step, "train_wall_s": step * step_s,
                                    "timing/generation": step_s / 2, "timing/ppo_train": step_s / 2,
                                    "timing_parts/curriculum_overhead": overhead, "speed/tokens_screen": tokens[0],
                                    "speed/tokens_continue": tokens[1], "speed/tokens_full": tokens[2],
                                    "speed/tokens_discarded": tokens[3], "speed/tokens_generated": sum(tokens[:3]),
                                    "speed/useful_token_share_cum": useful,
                                    "actor_grad_norm": 0.0 if step == 1 else 1.0}) + "\n")
            f.write(json.dumps({"event": "eval", "step": step, "train_wall_s": step * step_s, "eval_accuracy": acc,
                                "eval_time_s": 3.0}) + "\n")


@pytest.fixture
def bench_dir(tmp_path):
    for name in ("uniform", "dapo", "speed"):
        (tmp_path / name).mkdir()
    # uniform: slow steps, reaches 0.5 at step 4; dapo: reaches it at step 2 (40 s steps);
    # speed: reaches it at step 2 with 20 s steps.
    _write_run(tmp_path / "uniform" / "metrics.jsonl", [0.3, 0.35, 0.4, 0.45, 0.5], 30, (0, 0, 800, 0), 0.5)
    _write_run(tmp_path / "dapo" / "metrics.jsonl", [0.3, 0.45, 0.5, 0.52, 0.55], 40, (0, 0, 1000, 400), 0.6)
    _write_run(tmp_path / "speed" / "metrics.jsonl", [0.3, 0.42, 0.5, 0.55, 0.56], 20, (300, 400, 0, 100), 0.7)
    (tmp_path / "bench.json").write_text(json.dumps({"command": "openrlhf-speed bench --mode tiny", "settings": {},
                                                     "curricula": ["uniform", "dapo", "speed"], "versions": {}}))
    return tmp_path


def test_time_to_target_and_speedups(bench_dir):
    runs = {n: rep.load_run(str(bench_dir / n / "metrics.jsonl")) for n in ("uniform", "dapo", "speed")}
    report = rep.build_report(runs, target=0.5)
    s = report["summary"]
    assert (s["uniform"]["time_to_target_s"], s["uniform"]["steps_to_target"]) == (120, 4)
    assert (s["dapo"]["time_to_target_s"], s["speed"]["time_to_target_s"]) == (80, 40)
    assert report["speedups"] == {"speed_over_uniform": 3.0, "speed_over_dapo": 2.0}
    assert s["speed"]["tokens_screen"] == 4 * 300 and s["dapo"]["tokens_discarded"] == 4 * 400
    assert s["speed"]["useful_token_share"] == 0.7 and s["speed"]["zero_gradient_steps"] == 1
    assert s["speed"]["curriculum_overhead_share"] == pytest.approx(4 * 0.01 / 80)
    assert s["speed"]["generation_tokens_per_s"] == pytest.approx(4 * 700 / (4 * 10))
    # useful tokens = the run's share x its generated tokens, per second of training clock.
    assert s["speed"]["useful_tokens_per_s"] == pytest.approx(0.7 * 4 * 700 / 80)
    assert s["uniform"]["useful_tokens_per_s"] == pytest.approx(0.5 * 4 * 800 / 120)
    assert "useful tokens per second of training clock" in rep.table_markdown(report)
    # 20 s steps, half generation, half training.
    assert s["speed"]["step_profile_s"]["generation wait"] == 10 and s["speed"]["step_profile_s"]["train"] == 10
    assert "speed 10.0 / 0.0 / 10.0 / 0.0 / 0.0" in rep.table_markdown(report)


def test_unreached_target_is_reported_not_guessed(bench_dir):
    runs = {n: rep.load_run(str(bench_dir / n / "metrics.jsonl")) for n in ("uniform", "speed")}
    report = rep.build_report(runs, target=0.56)
    assert report["summary"]["uniform"]["time_to_target_s"] is None
    assert report["speedups"] == {"speed_over_uniform": None}
    assert "not reached" in rep.table_markdown(report)


def test_auto_target_is_the_best_accuracy_every_curriculum_reached(bench_dir):
    runs = {n: rep.load_run(str(bench_dir / n / "metrics.jsonl")) for n in ("uniform", "dapo", "speed")}
    report = rep.build_report(runs, target=None)
    assert report["target_accuracy"] == 0.5 and report["target_mode"] == "auto" and report["note"] is None
    flat = {n: {"steps": [], "evals": [{"event": "eval", "step": 0, "train_wall_s": 0, "eval_accuracy": 0.4},
                                       {"event": "eval", "step": 1, "train_wall_s": 9, "eval_accuracy": 0.3}]}
            for n in ("uniform", "speed")}
    assert "not above the step-0 accuracy" in rep.build_report(flat, target=None)["note"]


def test_report_only_writes_table_csv_and_png(bench_dir, capsys):
    assert bench_run.main(["--report_only", "--out", str(bench_dir), "--target", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert "speed_over_uniform 3.00x" in printed and "speed_over_dapo 2.00x" in printed
    png = (bench_dir / "accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    rows = list(csv.DictReader(open(bench_dir / "results.csv")))
    assert len(rows) == 3 * (5 + 4)  # per curriculum: 5 evaluations + 4 steps
    results = json.load(open(bench_dir / "results.json"))
    assert results["command"] == "openrlhf-speed bench --mode tiny" and results["target_accuracy"] == 0.5


def test_steps_must_end_on_an_evaluation(tmp_path):
    with pytest.raises(SystemExit, match="--steps .* multiple of --eval_every"):
        bench_run.main(["--mode", "tiny", "--steps", "3", "--eval_every", "2", "--out", str(tmp_path)])


# Flags a curriculum's command may set its own way: its strategy, its screening size and the
# prompts it keeps in flight (uniform keeps the driver's default window, see bench/commands.py).
# `off` (stock OpenRLHF) also gets its length from its own cycled prompt file and one episode,
# so its schedule's warm-up ratio is computed from that file.
CURRICULUM_OWN = ("--speed.strategy", "--speed.n_init", "--speed.max_inflight_prompts")
OFF_OWN = ("--train.max_steps", "--train.num_episodes", "--data.prompt_dataset", "--actor.lr_warmup_ratio")


def _flags(cmd: list, run_dir: str) -> dict:
    """A train command as {flag: values}, the run's own folder written as <run>."""
    flags, last = {}, None
    for arg in cmd[cmd.index("train") + 1:]:
        if arg.startswith("--"):
            assert arg not in flags, f"{arg} given twice"
            flags[arg], last = [], arg
        else:
            flags[last].append(arg.replace(run_dir, "<run>"))
    return {k: tuple(v) for k, v in flags.items()}


def _differences(flags: dict) -> list:
    """Every pair of curricula, flag by flag, apart from the flags each may set its own way."""
    from itertools import combinations

    found = []
    for a, b in combinations(flags, 2):
        own = CURRICULUM_OWN + (OFF_OWN if "off" in (a, b) else ())
        for flag in sorted((set(flags[a]) | set(flags[b])) - set(own)):
            if flags[a].get(flag) != flags[b].get(flag):
                found.append(f"{a} vs {b}: {flag} {flags[a].get(flag)} != {flags[b].get(flag)}")
    return found


@pytest.mark.parametrize("mode", ["tiny", "proving"])
def test_train_command_runs_each_curriculum_with_same_settings(tmp_path, mode):
    from openrlhf_speed.curriculum import STRATEGIES

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"prompt": f"{i} + 1", "answer": str(i + 1)}) + "\n" for i in range(40)))
    args = bench_run.build_parser().parse_args(["--mode", mode, "--", "--actor.adam.weight_decay", "0.1"])
    s = bench_run._settings(args)
    flags = {}
    for name in ["off", *STRATEGIES, "speed@8"]:
        run = tmp_path / name
        run.mkdir()
        cmd = bench_run.train_command(name, s, args, str(train), "test.jsonl", str(run))
        assert cmd[-2:] == ["--actor.adam.weight_decay", "0.1"]  # the flags after '--' come last, so they win
        flags[name] = _flags(cmd, str(run))
    # Everything else is identical: the same seed, sizes, lr, data and evaluation.
    assert _differences(flags) == []
    assert {f["--train.seed"] for f in flags.values()} == {("42",)}
    assert {f["--actor.adam.lr"] for f in flags.values()} == {(str(s["lr"]),)}
    # What each curriculum sets its own way is what its name says.
    for name, f in flags.items():
        strategy, _, k = name.partition("@")
        assert f["--speed.strategy"] == (strategy,), name
        n_init = (k or str(s["n_init"]),) if strategy in STRATEGIES and STRATEGIES[strategy].uses_n_init else None
        assert f.get("--speed.n_init") == n_init, name
        window = None if mode == "tiny" or name in ("off", "uniform") else ("64",)
        assert f.get("--speed.max_inflight_prompts") == window, name
    assert flags["speed@8"]["--speed.n_init"] == ("8",) and "--speed.n_init" not in flags["dapo"]
    assert flags["off"]["--train.num_episodes"] == ("1",) and "--train.max_steps" not in flags["off"]
    assert flags["off"]["--data.prompt_dataset"] == ("<run>/train_prompts.jsonl",)
    assert flags["uniform"]["--train.max_steps"] == (str(s["steps"]),)
    # The comparison sees one curriculum given another seed or lr.
    for flag, value in (("--train.seed", "43"), ("--actor.adam.lr", "3e-05")):
        changed = {**flags, "greso": {**flags["greso"], flag: (value,)}}
        assert any(d.endswith(f": {flag} {flags['speed'][flag]} != ('{value}',)") for d in _differences(changed)), flag
