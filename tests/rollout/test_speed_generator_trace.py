"""The SPEED driver's trace holds every request it dispatches, in a form the raw-vLLM replay
reads back (bench/driver.py), and `_collect` counts what the engines returned (the driver/*
metrics). Drives `_dispatch` and `_collect` against the real Scheduler with a fake engine
and Ray's wait/get replaced: no Ray or vLLM runs. Past `--speed.trace_max_mb` the trace
rotates, and each file still replays on its own."""

import json
from types import SimpleNamespace as NS

import pytest
import ray
import torch

from _bare_generator import bare_generator, done_at_once
from openrlhf_speed.bench.driver import replay_requests
from openrlhf_speed.curriculum import SpeedConfig
from openrlhf_speed.rollout.trace import TraceFile

KWARGS = {"max_new_tokens": 8, "temperature": 0.9, "top_p": 1.0, "max_len": 64}


class FakeEngine:
    def __init__(self):
        self.sent = []  # (ref, num_samples) per generate_responses call
        self.calls = []  # the keyword arguments of each call
        self.generate_responses = NS(remote=self._generate)
        self.engine_settings = NS(remote=lambda: {"dtype": "float32", "max_num_seqs": 128,
                                                  "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
                                                  "enable_prefix_caching": False})

    def _generate(self, **kw):
        ref = f"ref{len(self.sent)}"
        self.sent.append((ref, kw["num_samples"]))
        self.calls.append(kw)
        return ref


@pytest.fixture
def gen(tmp_path, monkeypatch):
    g = bare_generator(["Q: 1+1\nA:", "Q: 2+2\nA:"], ["2", "4"],
                       SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=1), [FakeEngine()],
                       NS(algo=NS(advantage=NS(is_correction_level="token")), actor=NS(model_name_or_path="/m"),
                          train=NS(seed=7), data=NS(max_len=64),
                          vllm=NS(enforce_eager=True, gpu_memory_utilization=0.9)),
                       trace=TraceFile(str(tmp_path / "trace.jsonl")))
    monkeypatch.setattr(ray, "get", lambda ref: ref if isinstance(ref, dict) else [
        {"ref": ref, "length": 5}] * dict(g.vllm_engines[0].sent)[ref])
    monkeypatch.setattr(ray, "wait", done_at_once(0.01))
    g._process_response_into_experience = lambda o, **kw: NS(
        rewards=torch.tensor([1.0 if o["ref"] != "ref1" else 0.0]), response_length=torch.tensor([o["length"]]),
        info={})
    g._log_config()
    return g


def test_every_dispatch_is_in_the_trace_with_what_a_replay_needs(gen, tmp_path):
    for request in gen.scheduler.next_requests():  # two screenings of 2
        gen._dispatch(request, KWARGS)
    gen._collect(KWARGS)  # both scored: prompt 0 all correct (rejected), prompt 1 (rewards 0) rejected too
    counts = gen.pop_counts()
    assert (counts["driver/tokens_returned"], counts["driver/responses_returned"]) == (4 * 5, 4)
    assert counts["driver/outstanding_mean"] == pytest.approx(4)  # one wait, 4 responses outstanding
    assert counts["driver/wait_s"] > 0 and counts["timing_parts/convert"] >= 0
    assert gen.pop_counts()["driver/tokens_returned"] == 0  # reset

    events = [json.loads(line) for line in open(tmp_path / "trace.jsonl")]
    assert [e["event"] for e in events[:5]] == ["config", "prompt", "start", "prompt", "start"]
    assert events[0]["dtype"] == "float32" and events[0]["logprobs_mode"] == "processed_logprobs"
    assert (events[0]["max_num_seqs"], events[0]["max_num_batched_tokens"]) == (128, 2048)
    plan = replay_requests(str(tmp_path / "trace.jsonl"))
    assert [(r["prompt"], r["n"], r["text"]) for r in plan["requests"]] == [
        (p, n, gen.prompts[p]) for p, n in [(0, 2), (1, 2)]]
    assert plan["requests"][0]["sampling"] == {"max_tokens": 8, "temperature": 0.9, "top_p": 1.0, "top_k": -1,
                                               "min_tokens": 1, "logprobs": 1, "skip_special_tokens": False,
                                               "max_length": 64}


def test_a_continuation_is_its_own_event_and_start_stays_one_per_screening(gen, tmp_path):
    request = gen.scheduler.next_requests()[0]
    gen._dispatch(request, KWARGS)
    gen._take_scored(request, 0, 0, [], 0, [NS(rewards=torch.tensor([r]), response_length=torch.tensor([3]), info={})
                                            for r in (1.0, 0.0)], KWARGS)  # 1 of 2: qualifies
    gen._pending.clear()
    cont = [r for r in gen.scheduler.next_requests() if r.phase == "continue"]
    assert len(cont) == 1
    gen._dispatch(cont[0], KWARGS)
    events = [json.loads(line) for line in open(tmp_path / "trace.jsonl")]
    assert sum(e["event"] == "start" for e in events) == 1
    assert sum(e["event"] == "prompt" for e in events) == 1  # the text once per prompt
    (c,) = [e for e in events if e["event"] == "continue"]
    assert (c["prompt"], c["n"], c["phase"], c["engine"]) == (request.prompt_index, 2, "continue", 0)


def test_a_request_carries_no_tokenizer_and_asks_for_the_final_output_only(gen):
    """Ray pickles every argument of every call (a 1.6 MB tokenizer for SmolLM2: the engine
    keeps the one set_tokenizer sent), and vLLM's default output kind builds an output at every
    token of every response, which the engine actor throws away."""
    from vllm.sampling_params import RequestOutputKind

    for request in gen.scheduler.next_requests():
        gen._dispatch(request, KWARGS)
    calls = gen.vllm_engines[0].calls
    assert len(calls) == 2
    for kw in calls:
        assert kw.get("hf_tokenizer") is None
        assert kw["sampling_params"].output_kind == RequestOutputKind.FINAL_ONLY
        assert kw["num_samples"] == 2 and kw["max_length"] == KWARGS["max_len"]


def test_the_trace_rotates_at_its_cap_and_each_file_replays_alone(gen, tmp_path):
    path = tmp_path / "trace.jsonl"
    gen._trace.close()
    gen._trace = TraceFile(str(path), max_bytes=1500)
    gen._log_config()
    # Both prompts, again and again (a small dataset wrapping): the trace would grow without end.
    for _ in range(12):
        for request in gen.scheduler.next_requests():
            gen._dispatch(request, KWARGS)
        gen._pending.clear()
        gen.scheduler = type(gen.scheduler)(2, gen.scheduler.config)
    assert gen._trace.rotations >= 2
    files = [path.with_name("trace.jsonl.1"), path]
    assert not path.with_name("trace.jsonl.2").exists()
    for f in files:
        assert f.stat().st_size <= 1500 + 400  # the cap, overshot by at most one record
        events = [json.loads(line) for line in open(f)]
        assert events[0]["event"] == "config"
        texts = {e["prompt"] for e in events if e["event"] == "prompt"}
        assert {e["prompt"] for e in events if e["event"] == "start"} <= texts
        plan = replay_requests(str(f))
        assert plan["requests"] and all(r["text"] == gen.prompts[r["prompt"]] for r in plan["requests"])
