"""`--speed.schedule auto`: serial where the engines share the CPU with the actor, overlap where
they have devices of their own, overlap when a flag keeps the engines generating while the
actor works; resolved once in the driver, and said in the run's first lines."""

import json
import os
from types import SimpleNamespace as NS

import pytest
from _cli import run_cli

from openrlhf_speed.cli import flags
from openrlhf_speed.compat.device import DEVICE_ENV
from openrlhf_speed.rollout.speed_config import resolve_schedule

SMALL = ("--vllm.num_engines", "1", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4",
         "--train.batch_size", "16")


@pytest.mark.parametrize("device, expected, why", [
    ("cpu", "serial", "auto: engines share the CPU with the actor"),
    ("cuda", "overlap", "auto: engines have devices of their own"),
])
def test_auto_is_serial_on_cpu_and_overlap_on_gpus(device, expected, why):
    assert resolve_schedule("auto", device) == (expected, why)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("flag", [dict(feed_during_training="on"), dict(async_enable=True)])
def test_auto_overlaps_where_a_flag_keeps_the_engines_generating(device, flag):
    # Serial would contradict them (an explicit serial is refused with them): auto gives way.
    schedule, why = resolve_schedule("auto", device, **flag)
    assert schedule == "overlap"
    assert ("--speed.feed_during_training on" if "feed_during_training" in flag else "--train.async_enable") in why


def test_auto_streams_in_a_generation_only_run_whose_actor_never_works():
    # The driver measurement (bench/driver.py) times the stream from one step into the next.
    assert resolve_schedule("auto", "cpu", generation_only=True) == (
        "overlap", "auto: --train.generation_only has no actor work to idle the engines for")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("named", ["overlap", "serial"])
def test_a_named_schedule_is_kept_on_every_device(device, named):
    assert resolve_schedule(named, device) == (named, f"--speed.schedule {named}")
    # Even with the flags that conflict with serial: flags.py refuses that pair, naming both.
    assert resolve_schedule(named, device, feed_during_training="on")[0] == named


def test_an_unknown_schedule_is_named():
    with pytest.raises(ValueError, match="--speed.schedule 'fast': expected one of auto, overlap, serial"):
        resolve_schedule("fast", "cpu")


def _args(schedule="auto", feed="off", async_enable=False, strategy="speed", dry_run=False):
    return NS(speed=NS(schedule=schedule, feed_during_training=feed, strategy=strategy),
              train=NS(async_enable=async_enable), dry_run=dry_run)


@pytest.mark.parametrize("device, line", [
    ("cpu", "schedule: serial (auto: engines share the CPU with the actor)"),
    ("cuda", "schedule: overlap (auto: engines have devices of their own)"),
])
def test_the_run_resolves_auto_once_and_says_which(device, line, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, device)
    args = _args()
    assert flags._resolve_schedule(args, device) == line
    assert args.speed.schedule == line.split()[1]  # the driver sees overlap or serial only


def test_a_dry_run_without_cuda_leaves_a_device_dependent_auto_to_the_machine_that_runs_it(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    args = _args(dry_run=True)
    note = flags._resolve_schedule(args, "cpu")
    assert args.speed.schedule == "auto"
    assert note == ("schedule: auto, left to the machine that runs it: serial here (auto: engines share the CPU "
                    "with the actor), overlap on GPUs")
    # Where the flags decide it, the device does not: resolved in the dry run too.
    args = _args(feed="on", dry_run=True)
    assert flags._resolve_schedule(args, "cpu").startswith("schedule: overlap (auto: --speed.feed_during_training")
    assert args.speed.schedule == "overlap"


def _dry_run(*more, device=None):
    # The device is read when the shims install, at import: a run on another device is a fresh process.
    env = {**os.environ, DEVICE_ENV: device} if device else None
    return run_cli("train", "--dry_run", *SMALL, *more, env=env)


def test_the_run_prints_the_schedule_with_its_device_in_its_first_lines():
    out = _dry_run(device="cuda")
    assert out.returncode == 0, out.stderr[-2000:]
    notes = [line for line in out.stdout.splitlines() if line.startswith("[openrlhf-speed] ")]
    device = next(i for i, line in enumerate(notes) if line.startswith("[openrlhf-speed] device: cuda"))
    assert notes[device + 1] == "[openrlhf-speed] schedule: overlap (auto: engines have devices of their own)"
    assert json.loads(out.stdout[out.stdout.index("{"):])["config"]["speed"]["schedule"] == "overlap"


def test_feeding_during_training_with_the_default_schedule_is_accepted_on_cpu():
    out = _dry_run("--speed.feed_during_training", "on", device="cpu")
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("[openrlhf-speed] schedule: overlap (auto: --speed.feed_during_training on keeps the engines "
            "generating while the actor works)") in out.stdout
    assert json.loads(out.stdout[out.stdout.index("{"):])["config"]["speed"]["schedule"] == "overlap"
