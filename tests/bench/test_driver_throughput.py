"""The SPEED driver against raw vLLM on the same requests (bench/driver.py),
on synthetic traces and run logs: which requests a replay sends, the rates, their ratio and
the split of the driver's seconds, the summary line, the bench flags that run it, and the
train flags `--train.generation_only` refuses. Nothing here starts an engine; the real
measurement is tests/e2e/test_e2e_cpu_driver.py."""

import json
import os
import re
from types import SimpleNamespace as NS

import pytest

from openrlhf_speed.bench import driver as drv
from openrlhf_speed.bench import report as rep
from openrlhf_speed.bench import run as bench_run
from openrlhf_speed.cli.preflight import generation_only_errors

SAMPLING = {"max_tokens": 32, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_tokens": 1, "logprobs": 1,
            "skip_special_tokens": False, "max_length": 544}
CONFIG = {"event": "config", "model": "/m", "num_engines": 1, "dtype": "float32", "seed": 42, "max_model_len": 544,
          "enforce_eager": True, "enable_prefix_caching": False, "gpu_memory_utilization": 0.95,
          "logprobs_mode": "processed_logprobs", "max_num_seqs": 128, "max_num_batched_tokens": 2048,
          "enable_chunked_prefill": True}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def trace_records():
    """Prompt 3: screened (2), continued (2); prompt 5: screened (2), one response regenerated."""
    req = lambda event, prompt, n, **kw: {"event": event, "prompt": prompt, "n": n, "phase": kw.pop("phase", "screen"),
                                          "engine": 0, "sampling": SAMPLING, "policy_version": 0, **kw}
    return [CONFIG,
            {"event": "prompt", "prompt": 3, "text": "Q: 1+2\nA:"}, req("start", 3, 2, epoch=0),
            {"event": "prompt", "prompt": 5, "text": "Q: 4*4\nA:"}, req("start", 5, 2, epoch=0),
            {"event": "scored", "prompt": 3, "phase": "screen", "rewards": [1.0, 0.0], "invalid": []},
            req("continue", 3, 2, phase="continue", epoch=0),
            {"event": "scored", "prompt": 5, "phase": "screen", "rewards": [1.0], "invalid": ["raised"]},
            req("regenerate", 5, 1, attempt=1),
            {"event": "batch", "step": 0, "prompts": [[3, 0]], "rewards": [[1, 0, 1, 1]]}]


def test_replay_requests_are_every_dispatch_with_the_text_sent(tmp_path):
    plan = drv.replay_requests(write_jsonl(tmp_path / "trace.jsonl", trace_records()))
    assert [(r["prompt"], r["n"]) for r in plan["requests"]] == [(3, 2), (5, 2), (3, 2), (5, 1)]
    assert [r["text"] for r in plan["requests"]][:2] == ["Q: 1+2\nA:", "Q: 4*4\nA:"]
    assert plan["responses"] == 7 and plan["requests"][0]["sampling"] == SAMPLING
    assert plan["config"]["dtype"] == "float32" and plan["config"]["logprobs_mode"] == "processed_logprobs"


@pytest.mark.parametrize("edit, match", [
    (lambda t: [{k: v for k, v in e.items() if k not in ("n", "sampling")} for e in t],
     r"line 3: a 'start' event without n and sampling: the trace was written before"),
    (lambda t: t + [CONFIG], "2 'config' events; a replay needs the trace of exactly one run"),
    (lambda t: [e for e in t if e["event"] != "prompt" or e["prompt"] != 5], r"prompt indices \[5\]"),
    (lambda t: [e for e in t if e["event"] not in ("start", "continue", "regenerate")], "no request was dispatched"),
])
def test_traces_that_cannot_be_replayed_say_why(tmp_path, edit, match):
    with pytest.raises(drv.TraceError, match=match):
        drv.replay_requests(write_jsonl(tmp_path / "trace.jsonl", edit(trace_records())))


def step(i, gen_s, tokens, wait_s, outstanding, overhead=0.1, convert=0.2, reward=0.5):
    return {"event": "step", "step": i, "train_wall_s": 10.0 * i, "timing/generation": gen_s,
            "driver/tokens_returned": tokens, "driver/responses_returned": tokens / 10, "driver/wait_s": wait_s,
            "driver/outstanding_mean": outstanding, "timing_parts/curriculum_overhead": overhead,
            "timing_parts/convert": convert, "timing_parts/reward": reward}


def driver_log(tmp_path):
    drain = {"event": "drain", "train_wall_s": 21.0, "timing_parts/drain": 1.0, "driver/tokens_returned": 100,
             "driver/responses_returned": 10, "driver/wait_s": 0.9, "driver/outstanding_mean": 10.0,
             "timing_parts/curriculum_overhead": 0.05, "timing_parts/convert": 0.05}
    return write_jsonl(tmp_path / "metrics.jsonl", [step(1, 9.0, 900, 8.0, 40.0), step(2, 10.0, 1000, 9.1, 20.0),
                                                    drain])


def test_driver_side_sums_steps_and_the_final_drain(tmp_path):
    d = drv.driver_side(driver_log(tmp_path))
    assert (d["steps"], d["tokens"], d["responses"]) == (2, 2000, 200)
    assert d["seconds"] == pytest.approx(9.0 + 10.0 + 1.0) and d["drain_s"] == 1.0
    assert d["engine_wait_s"] == pytest.approx(18.0) and d["overhead_s"] == pytest.approx(0.25)
    assert d["convert_s"] == pytest.approx(0.45) and d["reward_s"] == pytest.approx(1.0)
    # time-weighted: (40 x 8 + 20 x 9.1 + 10 x 0.9) / 18
    assert d["outstanding_mean"] == pytest.approx((320 + 182 + 9) / 18)


def test_a_log_without_its_drain_record_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "metrics.jsonl", [step(1, 9.0, 900, 8.0, 40.0)])
    with pytest.raises(drv.TraceError, match="final 'drain' record"):
        drv.driver_side(path)


def test_ratio_and_split_arithmetic(tmp_path):
    d = drv.summarize(drv.driver_side(driver_log(tmp_path)), {"tokens": 2100, "generation_s": 20.0 * 0.95 * 1.05,
                                                              "responses": 210, "requests": 60}, requests=60)
    assert d["driver_tokens_per_s"] == pytest.approx(2000 / 20.0)  # 100 tok/s
    assert d["raw_tokens_per_s"] == pytest.approx(2100 / 19.95)
    assert d["ratio_pct"] == pytest.approx(95.0)
    sp = d["split_s"]
    assert sp["engine_wait"] + sp["overhead"] + sp["convert"] + sp["other"] == pytest.approx(20.0)
    assert sp["other"] == pytest.approx(20.0 - 18.0 - 0.25 - 0.45)
    assert sp["at_raw_rate"] == pytest.approx(19.0) and sp["lost"] == pytest.approx(1.0)
    assert sp["between_steps"] == pytest.approx(1.0) and d["raw_batch"] == 210


def test_summary_line_and_report(tmp_path):
    d = drv.summarize(drv.driver_side(driver_log(tmp_path)), {"tokens": 2100, "generation_s": 19.95,
                                                              "responses": 210, "requests": 60}, requests=60)
    line = drv.driver_line(d)
    assert line.startswith("SPEED driver: 100 tok/s vs raw vLLM 105 tok/s on the same 60 requests (95.0%; goal 95%)")
    assert "waiting on the engines 18.0 s (90%)" in line and "19.0 s (1.0 s lost)" in line
    assert "28.4 on average, vs 210 at once" in line  # (40 x 8 + 20 x 9.1 + 10 x 0.9) / 18
    run = {"steps": [{"event": "step", "step": 1, "train_wall_s": 5.0}],
           "evals": [{"event": "eval", "step": 0, "train_wall_s": 0, "eval_accuracy": 0.3},
                     {"event": "eval", "step": 1, "train_wall_s": 5.0, "eval_accuracy": 0.4}]}
    report = rep.build_report({"speed": run}, target=None)
    assert "SPEED driver" not in rep.table_markdown(report)
    report["driver"] = json.loads(json.dumps(d))  # as read back from driver.json
    assert line in rep.table_markdown(report)


def bench_args(*argv):
    args = bench_run.build_parser().parse_args(list(argv))
    return args, bench_run._settings(args)


def test_bench_driver_steps_defaults_and_refusals(tmp_path):
    assert bench_args("--mode", "proving-v4")[0].driver_steps == bench_run.DRIVER_STEPS
    assert bench_args("--mode", "proving-v4", "--driver_steps", "0")[0].driver_steps == 0
    assert bench_args("--mode", "proving")[0].driver_steps == 0  # v5: 100-step runs, no driver measurement
    assert bench_args("--mode", "proving-ci")[0].driver_steps == 0
    assert bench_args("--mode", "quick", "--driver_only")[0].driver_steps == bench_run.DRIVER_STEPS
    with pytest.raises(SystemExit, match="--driver_steps 0: need K >= 1"):
        bench_args("--mode", "proving", "--driver_only", "--driver_steps", "0")
    with pytest.raises(SystemExit, match="--driver_steps -1"):
        bench_args("--driver_steps", "-1")
    args, s = bench_args("--mode", "proving-ci", "--driver_only", "--vllm_engines", "2")
    with pytest.raises(SystemExit, match="--vllm_engines 2 would compare several with one"):
        bench_run._driver(args, s, "train.jsonl", "test.jsonl", str(tmp_path))


def train_ns(**over):
    """The parsed flags generation_only_errors reads, as the bench's command sets them."""
    a = NS(train=NS(generation_only=True, max_steps=2), speed=NS(strategy="speed"),
           ckpt=NS(load_enable=False, save_steps=10 ** 9), eval=NS(at_start=False, dataset=None, steps=1),
           check=NS(weight_sync=False))
    for key, value in over.items():
        group, name = key.split("__")
        setattr(getattr(a, group), name, value)
    return a


@pytest.mark.parametrize("over, match", [
    (dict(speed__strategy="off"), "--speed.strategy off is OpenRLHF's own generator"),
    (dict(ckpt__load_enable=True), "with --ckpt.load_enable: a generation-only run trains nothing"),
    (dict(ckpt__save_steps=1), "with --ckpt.save_steps 1: saving the curriculum needs every request collected"),
    (dict(train__max_steps=None, ckpt__save_steps=50), "--ckpt.save_steps 50"),
    (dict(eval__at_start=True), r"with evaluation \(--eval.at_start, --eval.steps\)"),
    (dict(eval__dataset="test.jsonl"), r"with evaluation"),
    (dict(check__weight_sync=True), "--check.weight_sync checks every weight sync"),
])
def test_generation_only_refuses_what_it_cannot_mean(over, match):
    errors = generation_only_errors(train_ns(**over))
    assert len(errors) == 1 and re.search(match, errors[0]), errors


def test_generation_only_accepts_the_bench_command_and_checks_nothing_without_the_flag(tmp_path):
    assert generation_only_errors(train_ns()) == []
    # Evaluations or saves past the last step never happen: allowed.
    assert generation_only_errors(train_ns(eval__dataset="t.jsonl", eval__steps=3, ckpt__save_steps=-1)) == []
    assert generation_only_errors(train_ns(train__generation_only=False, eval__at_start=True)) == []
    args, s = bench_args("--mode", "proving-ci", "--driver_steps", "3", "--", "--speed.max_inflight_prompts", "8")
    train_cmd = bench_run.train_command("speed", dict(s, steps=3), args, "train.jsonl", "test.jsonl", str(tmp_path))
    cmd = drv.generation_only_command(train_cmd, str(tmp_path))
    flag = lambda f: cmd[cmd.index(f) + 1]
    assert "--eval.at_start" not in cmd and "--eval.dataset" not in cmd and "test.jsonl" not in cmd
    assert flag("--train.max_steps") == "3" and flag("--speed.strategy") == "speed" and "--train.generation_only" in cmd
    assert flag("--speed.trace_path") == os.path.join(str(tmp_path), "trace.jsonl")
    assert int(flag("--ckpt.save_steps")) > 3 and flag("--speed.max_inflight_prompts") == "8"
    # Everything else is the benchmark's command for the speed curriculum, unchanged.
    kept = [a for a in train_cmd if a not in ("--eval.at_start", "--eval.dataset", "test.jsonl")]
    assert cmd[:len(kept)] == kept


def test_measure_runs_both_sides_and_writes_driver_json(tmp_path):
    """The orchestration with a fake runner in place of the two subprocesses."""
    calls = []

    def run_logged(cmd, log_path, prefix):
        calls.append((prefix, cmd))
        run_dir = os.path.dirname(log_path)
        if prefix == "driver":
            assert not os.path.exists(os.path.join(run_dir, "trace.jsonl"))  # a rerun starts a fresh trace
            write_jsonl(tmp_path / "driver" / "trace.jsonl", trace_records())
            driver_log(tmp_path / "driver")
        else:
            out = cmd[cmd.index("--out") + 1]
            n = len(drv.replay_requests(cmd[cmd.index("--trace") + 1])["requests"])
            json.dump({"requests": n, "responses": 7, "tokens": 2100, "generation_s": 19.95}, open(out, "w"))
        return 0

    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "trace.jsonl").write_text("stale\n")
    result = drv.measure(["python", "-m", "openrlhf_speed.cli.main", "train", "--eval.at_start"], str(tmp_path),
                         run_logged)
    assert [p for p, _ in calls] == ["driver", "replay"]
    trace = str(tmp_path / "driver" / "trace.jsonl")
    assert calls[0][1][-4:] == ["train", "--train.generation_only", "--speed.trace_path", trace]  # eval flag dropped
    assert calls[1][1][2:4] == ["openrlhf_speed.cli.main", "replay"]
    saved = json.load(open(tmp_path / "driver.json"))
    assert saved["requests"] == 4 and saved["ratio_pct"] == pytest.approx(result["ratio_pct"]) == pytest.approx(95.0)
    with pytest.raises(SystemExit, match="generation-only run failed \\(exit 3\\); see .*train.log"):
        drv.measure(["train"], str(tmp_path), lambda cmd, log, prefix: 3)
