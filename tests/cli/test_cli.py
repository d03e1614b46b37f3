"""The console script: subcommands, flag validation and dry runs, through the real parser."""

import json

import pytest
from _cli import run_cli


def run(*args, timeout=600):
    return run_cli(*args, timeout=timeout)


def test_help_lists_commands():
    out = run("--help")
    assert out.returncode == 0
    for cmd in ("train", "evaluate", "gen-data"):
        assert cmd in out.stdout


def test_unknown_command_exits_2():
    out = run("trian")
    assert out.returncode == 2 and "unknown command 'trian'" in out.stderr


def test_unknown_flag_is_named():
    out = run("train", "--rollout.n_sample_per_prompt", "4", "--dry_run")
    assert out.returncode == 2
    assert "--rollout.n_sample_per_prompt" in out.stderr


def test_dry_run_prints_resolved_config_and_plan_without_starting_anything():
    out = run(
        "train", "--dry_run", "--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0", "--rollout.n_samples_per_prompt", "4",
        "--rollout.batch_size", "4", "--train.batch_size", "16",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{"):])
    assert plan["resources"]["total_gpus"] == 2
    assert plan["config"]["reward"]["remote_url"] == [plan["config"]["reward"]["remote_url"][0]]  # split by OpenRLHF
    assert plan["config"]["reward"]["remote_url"][0].endswith("reward_func.py")
    assert plan["config"]["actor"]["model_name_or_path"].endswith("SmolLM2-135M-Instruct-bf16-v2")
    assert "Started a local Ray instance" not in out.stdout + out.stderr
    # The dtype stays auto (resolved on the machine that runs it); the note says what it would be here.
    assert plan["config"]["ds"]["param_dtype"] == "auto" and plan["config"]["vllm"]["dtype"] == "auto"
    assert "dtype auto would be" in out.stdout
    curriculum = plan["resources"]["curriculum"]
    assert curriculum["max_inflight_prompts"] == 8 and curriculum["max_inflight_responses"] is None


def test_a_response_window_reaches_the_curriculum():
    out = run("train", "--dry_run", "--vllm.num_engines", "1", "--rollout.n_samples_per_prompt", "4",
              "--rollout.batch_size", "4", "--train.batch_size", "16", "--speed.n_init", "2",
              "--speed.max_inflight_responses", "32")
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{"):])
    # 32 responses of 2-response screenings: 16 prompts in flight, buffer 16 + B.
    curriculum = plan["resources"]["curriculum"]
    assert (curriculum["max_inflight_responses"], curriculum["max_inflight_prompts"], curriculum["buffer_size"]) == (32, 16, 20)


def test_hub_name_without_network_says_which_path_to_pass():
    out = run("train", "--dry_run", "--actor.model_name_or_path", "Qwen/Qwen2.5-Math-7B")
    assert out.returncode != 0
    assert "Qwen/Qwen2.5-Math-7B" in out.stderr and "--actor.model_name_or_path DIR" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("flag", ["--train.colocate_all", "--ds.packing_samples"])
def test_cpu_rejects_cuda_only_flags(flag):
    # Refused before Ray starts (a dry run reports instead: it validates for the recipe's GPUs).
    out = run("train", flag, "--vllm.num_engines", "1")
    assert out.returncode != 0 and flag in out.stderr
    assert "Traceback" not in out.stderr


def test_speed_flag_combinations_are_named():
    out = run("train", "--dry_run", "--vllm.num_engines", "1", "--rollout.n_samples_per_prompt", "4",
              "--speed.n_init", "4")
    assert out.returncode != 0 and "--speed.n_init" in out.stderr and "Traceback" not in out.stderr
    out = run("train", "--dry_run", "--vllm.num_engines", "1", "--rollout.n_samples_per_prompt", "4",
              "--algo.dynamic_filtering_enable")
    assert out.returncode != 0 and "--speed.strategy dapo" in out.stderr


def test_a_pace_reaches_the_curriculum_and_are_refused_where_nothing_screens():
    base = ("train", "--dry_run", "--vllm.num_engines", "1", "--rollout.n_samples_per_prompt", "4",
            "--rollout.batch_size", "4", "--train.batch_size", "16", "--speed.n_init", "2")
    out = run(*base, "--speed.pace_batches", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    curriculum = json.loads(out.stdout[out.stdout.index("{"):])["resources"]["curriculum"]
    assert curriculum["pace_batches"] == 2 and curriculum["max_staleness"] == 2
    out = run(*base, "--speed.pace_batches", "2", "--speed.strategy", "off", "--algo.kl.init_coef", "0")
    assert out.returncode != 0 and "--speed.pace_batches" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("other", [["--speed.feed_during_training", "on"],
                                   ["--speed.strategy", "off", "--train.async_enable"]])
def test_a_serial_schedule_refuses_flags_that_keep_the_engines_generating_during_the_step(other):
    out = run("train", "--dry_run", "--vllm.num_engines", "1", "--speed.schedule", "serial", *other)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "--speed.schedule serial" in out.stderr and other[-2 if other[-1] == "on" else -1] in out.stderr


def test_a_serial_schedule_is_accepted_with_stock_generation_which_is_serial_already():
    out = run("train", "--dry_run", "--vllm.num_engines", "1", "--speed.schedule", "serial", "--speed.strategy", "off",
              "--algo.kl.init_coef", "0", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4",
              "--train.batch_size", "16")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout[out.stdout.index("{"):])["config"]["speed"]["schedule"] == "serial"


def test_gen_data_writes_splits(tmp_path):
    out = run("gen-data", "--out", str(tmp_path), "--n_train", "50", "--n_test", "10")
    assert out.returncode == 0, out.stderr
    assert sum(1 for _ in open(tmp_path / "train.jsonl")) == 50
    assert sum(1 for _ in open(tmp_path / "test.jsonl")) == 10
