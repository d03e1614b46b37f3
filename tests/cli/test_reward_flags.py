"""The reward-guard flags: defaults, range checks naming the flag, and the path through the
real parser into args.speed (a dry run: nothing is started)."""

import argparse
import json

import pytest
from _cli import run_cli

from openrlhf_speed.cli.reward_flags import add_reward_guard_arguments


def _parser():
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_reward_guard_arguments(parser)
    return parser


def test_defaults():
    args = vars(_parser().parse_args([]))
    assert args == {"speed.reward_max_error_rate": 0.02, "speed.reward_retries": 2}


@pytest.mark.parametrize("flag, value", [("--speed.reward_max_error_rate", "1.5"), ("--speed.reward_retries", "-1")])
def test_out_of_range_is_refused(flag, value):
    with pytest.raises(argparse.ArgumentError, match=flag.lstrip("-")):
        _parser().parse_args([flag, value])


def test_dry_run_carries_the_flags():
    out = run_cli("train", "--dry_run", "--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1",
                  "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--train.batch_size", "16",
                  "--speed.reward_max_error_rate", "0.1", "--speed.reward_retries", "0")
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{"):])
    assert plan["config"]["speed"]["reward_max_error_rate"] == 0.1 and plan["config"]["speed"]["reward_retries"] == 0
