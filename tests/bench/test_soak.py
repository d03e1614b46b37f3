"""The soak's and the scale benchmark's own logic (bench/soak.py, bench/scale.py, bench/probe.py),
on hand-made records, without a run: the growth check flags what grows by more than 10% from
the reference record to the last (bytes per step for the trace and the log, the host's noise
for the step time), the report names it, the commands carry the settings, and the scale
figures and budgets are read the way a user would check them."""

import json
import time

import pytest

from openrlhf_speed.bench import probe, scale, soak

S = {**soak.PRESETS["tiny"], "steps": 1000, "every": 50}


def rec(step, driver=500.0, trace=None, log=None, step_s=(2.0, 2.1, 1.9, 2.0), state=1.0):
    return {"step": step, "rss_mib": {"driver": driver, "actor": 900.0, "engine0": 700.0},
            "object_store_mib": 20.0, "step_s": list(step_s), "parts_s": {"timing/generation": 1.0},
            "trace_bytes": trace if trace is not None else 1000 * step, "log_bytes": log if log is not None else 300 * step,
            "ckpt_mib": 7.0, "state_mib": state}


def run(**last):
    return [rec(s) for s in range(50, 1000, 50)] + [rec(1000, **last)]


def test_flat_run_is_not_flagged():
    g = soak.growth_check(run(), 1000, 0.2)
    assert g["rss_mib/driver"]["ref_step"] == 200 and g["rss_mib/driver"]["last_step"] == 1000
    assert not [k for k, v in g.items() if v["flagged"]]
    # The trace and the log grow with every step; what must be flat is their bytes per step.
    assert g["trace_bytes_per_step"]["ref"] == g["trace_bytes_per_step"]["last"] == 1000


@pytest.mark.parametrize("last,figure", [
    (dict(driver=560.0), "rss_mib/driver"),  # +12%
    (dict(state=1.2), "state_mib"),
    (dict(trace=1000 * 950 + 50 * 1200), "trace_bytes_per_step"),  # the last window wrote 20% more per step
    (dict(step_s=(2.6, 2.7, 2.5, 2.6)), "step_s"),
])
def test_growth_beyond_the_limit_is_flagged_and_named(last, figure):
    g = soak.growth_check(run(**last), 1000, 0.2)
    assert [k for k, v in g.items() if v["flagged"]] == [figure]


def test_step_time_within_the_noise_is_not_flagged():
    g = soak.growth_check(run(step_s=(1.5, 2.6, 1.8, 2.5)), 1000, 0.2)  # mean +5%, spread large
    assert not g["step_s"]["flagged"] and g["step_s"]["growth"] > 0


def test_nine_percent_is_not_flagged():
    assert not soak.growth_check(run(driver=545.0), 1000, 0.2)["rss_mib/driver"]["flagged"]


def test_report_names_flagged_figures_and_draws_every_panel(tmp_path):
    for name, last in (("speed", {}), ("greso", dict(driver=600.0))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run(**last)))
    args = soak.build_parser().parse_args(["--mode", "tiny", "--steps", "1000", "--every", "50"])
    args.argv = ["--mode", "tiny"]
    result = soak.report(str(tmp_path), S, ["speed", "greso"], args)
    assert result["flagged"] == {"speed": [], "greso": ["rss_mib/driver"]}
    md = (tmp_path / "soak.md").read_text()
    assert "## speed: flat" in md and "## greso: flagged rss_mib/driver" in md and "+20.0% **flagged**" in md
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "soak.json").read_text())["machine"]["cores"] >= 1


def test_a_step_time_that_grows_with_the_work_reads_flat_per_token():
    """A policy that drifts (longer responses) makes steps longer: the step time is flagged, the
    seconds per 1,000 tokens are not, and the work per step is reported, never flagged."""
    def worked(step, tokens, step_s):
        return {**rec(step, step_s=step_s), "parts_s": {"timing/generation": tokens / 2000, "timing/ppo_train": 1.0},
                "work": {"speed/tokens_generated": tokens, "speed/tokens_trained": 2000.0}}
    samples = [worked(k, 3000.0, (2.0, 2.1, 1.9, 2.0)) for k in range(50, 1000, 50)]
    g = soak.growth_check(samples + [worked(1000, 4500.0, (2.7, 2.8, 2.6, 2.7))], 1000, 0.2)
    assert [k for k, v in g.items() if v["flagged"]] == ["step_s"]
    assert g["generation_s_per_ktoken"]["growth"] == 0.0 and g["training_s_per_ktoken"]["ref"] == 0.5
    assert g["work/speed/tokens_generated"]["growth"] == 0.5 and not g["work/speed/tokens_generated"]["flagged"]


def test_held_responses_are_apart_from_the_state_that_could_grow():
    parts = {"history": 0.004, "order": 0.001, "inflight": 0.1, "ready": 0.2}
    f = soak.figures({**rec(1000), "state_parts_mib": parts}, None)
    assert f["state_mib/responses_held"] == pytest.approx(0.3) and f["state_mib/rest"] == pytest.approx(0.005)


def test_log_bytes_stop_at_the_step_line_not_at_the_run_end(tmp_path):
    log = tmp_path / "train.log"
    body = "".join(f"(SpeedPPOTrainer pid=1) [openrlhf-speed] step {k} | reward 0.5\nother line\n" for k in (1, 2))
    log.write_text(body + "Episode [3/9]: 25%\n" * 100)  # the run's end after its last step
    at = soak.log_bytes_at_step(str(log), 2)
    tail = log.stat().st_size - body.index("[openrlhf-speed] step 2")  # read from the line on
    assert at == body.rindex("other") and soak.log_bytes_at_step(str(log), 2, tail=tail) == at
    assert soak.log_bytes_at_step(str(log), 7) == log.stat().st_size  # no such line: the whole file
    # Samples recorded from the file's size are read again from the log and the metrics.
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"event": "step", "step": k,
                                                                "speed/tokens_generated": 100.0 * k}) + "\n"
                                                    for k in (1, 2)))
    samples = [{"step": 2, "log_bytes": log.stat().st_size}]
    soak.backfill(samples, str(tmp_path), every=2)
    assert samples == [{"step": 2, "log_bytes": at, "work": {"speed/tokens_generated": 150.0}}]


@pytest.mark.parametrize("strategy,screens", [("speed", True), ("greso", False), ("speed_bayes", True)])
def test_train_command_carries_the_settings_and_extra_flags_last(tmp_path, strategy, screens):
    cmd = soak.train_command(strategy, S, "/data.jsonl", str(tmp_path), ["--rollout.batch_size", "2"])
    flags = dict(zip(cmd, cmd[1:]))
    assert flags["--speed.strategy"] == strategy and ("--speed.n_init" in cmd) == screens
    assert flags["--ckpt.save_steps"] == "50" and flags["--train.max_steps"] == "1000"
    assert flags["--ckpt.max_num"] == "2" and "--ckpt.load_enable" in cmd
    assert flags["--actor.adam.lr"] == str(soak.LR) and flags["--data.prompt_dataset"] == "/data.jsonl"
    # The prompt set wraps many times: enough epochs for 8 screenings per trained prompt.
    assert int(flags["--train.num_episodes"]) * S["prompts"] >= 8 * S["steps"] * S["batch"]
    assert cmd[-2:] == ["--rollout.batch_size", "2"]


def test_prompt_file_takes_the_first_rows_and_refuses_too_many(tmp_path):
    path = soak.prompt_file("proving-ci", 16, str(tmp_path))
    rows = [json.loads(line) for line in open(path)]
    assert len(rows) == 16 and rows[0]["answer"]
    with pytest.raises(SystemExit, match="has 200 prompts"):
        soak.prompt_file("proving-ci", 10_000, str(tmp_path))


def test_roles_and_records_are_read_as_the_run_writes_them(tmp_path):
    assert probe.role_of("ray::SpeedPPOTrainer.fit") == "driver"
    assert probe.role_of("ray::SpeedPolicyActor") == "actor"
    assert probe.role_of("ray::SpeedRolloutActor") == "engine"
    assert probe.role_of("VLLM::Worker") == "vllm_workers"
    assert probe.role_of("/venv/bin/python -m openrlhf_speed.cli.main train --x") == "cli"
    assert probe.role_of("/ray/core/src/ray/raylet/raylet --x") == "ray"
    path = tmp_path / "metrics.jsonl"
    records = probe.Records(str(path))
    assert records.poll() == []
    path.write_text(json.dumps({"event": "step", "step": 1}) + "\n" + json.dumps({"event": "eval"}) + "\n{\"ev")
    assert [r["step"] for r in records.poll()] == [1]  # the half-written line waits
    with open(path, "a") as f:
        f.write('ent": "step", "step": 2}\n')
    assert [r["step"] for r in records.poll()] == [2] and len(records.steps) == 2


def test_scale_figures_and_budgets():
    a = {"launch": 100.0, "driver_peak_mib": 900.0, "rss_mib": {"driver": 850.0},
         "seen": [({"step": 1, "train_wall_s": 10.0, "speed/prompts_too_long": 0.0}, 150.0),
                  ({"step": 2, "train_wall_s": 13.0}, 153.0)], "log": ""}
    b = {"launch": 200.0, "seen": [({"step": 3, "train_wall_s": 4.0}, 250.0)],
         "log": "(SpeedPPOTrainer pid=1) [openrlhf-speed] resuming from step 2: restored the curriculum state of "
                "step 2 from /c/_speed/global_step2.pt in 1.25s\n"}
    ckpt = {"ckpt_mib": 30.0, "state_mib": 8.0, "state_parts_mib": {"history": 5.0}}
    f = scale.figures(a, b, ckpt, steps=2)
    assert (f["startup_s"], f["step_s"], f["resume_s"], f["restore_s"]) == (40.0, [10.0, 3.0], 46.0, 1.25)
    assert f["budgets"] == {"curriculum state < 50 MB": True, "resume < 60 s": True,
                            "resumed from the checkpoint": True}
    f = scale.figures(a, {**b, "launch": 180.0}, {**ckpt, "state_mib": 60.0}, steps=2)
    assert f["budgets"]["resume < 60 s"] is False and f["budgets"]["curriculum state < 50 MB"] is False
    md = scale.markdown({"date": "d", "machine": probe.machine(), "rows": 400000, "steps": 2, "command": "c",
                         "figures": f})
    assert "400,000 prompts" in md and "resume < 60 s: **does not hold**" in md


def test_scale_splits_a_start_up_into_its_phases_from_the_log():
    launch = time.mktime(time.strptime("2026-11-27 09:58:50", "%Y-%m-%d %H:%M:%S"))
    log = ("[openrlhf-speed] device: cpu\n2026-11-27 09:59:27,500\tINFO worker.py:2003 -- Started a local Ray "
           "instance. View the dashboard at x\n(SpeedPPOTrainer pid=4569) Preprocessing data:  50%|#   | "
           "200000/400000 [00:11<00:11, 18000.00it/s]\n(SpeedPPOTrainer pid=4569) Preprocessing data: 100%|####| "
           "400000/400000 [00:22<00:00, 18040.06it/s]\n")
    parts = scale.phases({"launch": launch, "log": log}, 87.1)
    assert parts == {"before Ray (flag and dataset checks)": 37.5, "OpenRLHF renders every prompt": 22.0,
                     "the rest (Ray, vLLM, DeepSpeed, the driver)": 27.6}
    assert scale.phases({"launch": launch, "log": "no such lines"}, 87.1) == {}


def test_scale_prompts_are_distinct_proving_problems(tmp_path):
    path = scale.make_prompts(300, str(tmp_path))
    rows = [json.loads(line) for line in open(path)]
    assert len(rows) == 300 and len({r["question"] for r in rows}) == 300
    assert rows[0]["prompt"] == [{"role": "user", "content": rows[0]["question"]}]
    assert scale.make_prompts(300, str(tmp_path)) == path  # reused
