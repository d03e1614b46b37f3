"""The SPEED driver against raw vLLM on the same requests, end to end at its smallest (issue
13, item 4): `openrlhf-speed bench --mode proving-ci --driver_only --driver_steps 2` builds the
proving-ground CI model, runs two generation-only steps of the `speed` curriculum's own bench
command (Ray, one vLLM engine, an actor that never trains), replays every request its trace
recorded on one raw `vllm.LLM`, and writes driver.json. It asserts the accounting (same
requests on both sides, nothing trained, in-flight requests drained and counted), not the
ratio: two tiny steps on a shared 2-core machine say nothing about the 95% goal."""

import json
import os
import subprocess

import pytest
from _util import openrlhf_speed_cmd

from openrlhf_speed.bench.driver import replay_requests

pytestmark = pytest.mark.e2e_extra


def test_driver_and_raw_vllm_generate_the_same_requests(tmp_path):
    out = tmp_path / "bench"
    env = dict(os.environ, OPENRLHF_SPEED_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([*openrlhf_speed_cmd(), "bench", "--mode", "proving-ci", "--driver_only", "--driver_steps",
                           "2", "--out", str(out)], capture_output=True, text=True, timeout=2400, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "[bench driver] step 1 |" in log and "[bench driver] step 2 |" in log, log[-3000:]
    assert "SPEED driver: " in log and " tok/s vs raw vLLM " in log

    d = json.load(open(out / "driver.json"))
    plan = replay_requests(str(out / "driver" / "trace.jsonl"))
    # The same requests on both sides: every response the driver dispatched came back to it
    # (the final drain collected those still in flight) and was generated again by raw vLLM.
    assert d["requests"] == len(plan["requests"]) and d["responses"] == d["raw_responses"] == plan["responses"]
    assert d["driver"]["steps"] == 2 and d["driver"]["tokens"] > 0 and d["raw"]["tokens"] > 0
    assert d["driver_tokens_per_s"] > 0 and d["raw_tokens_per_s"] > 0 and d["ratio_pct"] > 0
    sp = d["split_s"]
    assert sp["engine_wait"] > 0 and sp["overhead"] >= 0 and sp["convert"] >= 0
    assert abs(sp["engine_wait"] + sp["overhead"] + sp["convert"] + sp["other"] - d["driver"]["seconds"]) < 1e-6
    replay = json.load(open(out / "driver" / "replay.json"))
    assert replay["engine"]["dtype"] == plan["config"]["dtype"] and plan["config"]["num_engines"] == 1

    # Nothing trained: no loss, no weight sync (every request of policy version 0), no evaluation.
    records = [json.loads(line) for line in open(out / "driver" / "metrics.jsonl")]
    assert [r["event"] for r in records] == ["step", "step", "drain"]
    assert not any("policy_loss" in r or "timing/ppo_train" in r for r in records)
    trace = [json.loads(line) for line in open(out / "driver" / "trace.jsonl")]
    assert {e["policy_version"] for e in trace} == {0}
    command = (out / "driver" / "train.log").read_text().splitlines()[0]
    assert "--train.generation_only" in command and "--eval.at_start" not in command
    assert "generation only: drained" in (out / "driver" / "train.log").read_text()
