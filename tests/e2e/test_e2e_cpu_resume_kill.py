"""The default job survives a kill: SIGKILL mid-run, rerun the same command, it continues.

The default SPEED recipe (examples/scripts/train_speed_rloo_smollm2_cpu.sh, which passes
--ckpt.load_enable) runs small (B=4 prompts x N=4, N_init=2, a checkpoint every step).
Once the step-2 checkpoint is complete (`_actor/latest` names global_step2) and step 3's
generation has begun (curriculum events after the step-2 save), the driver's whole process
tree is SIGKILLed: no atexit, no Ray shutdown, no final save. A half-written step-3
checkpoint is then planted beside the complete one (an actor tag folder with a truncated
file, a curriculum state file and a temporary file, all garbage: reading any of them would
fail). The same command runs again, and:
- it says "resuming from step 2" before starting anything, naming the step-3 leftovers as
  ignored, and trains steps 3 and 4 (not 1, not 4 only);
- the curriculum state it restores is exactly the one saved at step 2 (buffer, in-flight
  prompts and policy version, from the trace events);
- counting the first run's prompt starts up to its step-2 save and the rerun's, no prompt
  starts twice and the start order is the seeded epoch order of an uninterrupted run (the
  prompts started during the killed step 3 are started again, as they must be);
- it ends with complete step-4 checkpoints (actor `latest` and curriculum state).
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from _util import REPO, VENV_BIN

pytestmark = pytest.mark.e2e_extra

RECIPE = REPO / "examples" / "scripts" / "train_speed_rloo_smollm2_cpu.sh"
B, N, N_INIT = 4, 4, 2
STEP_LINE = re.compile(r"\[openrlhf-speed\] step (\d+) \|")


def recipe_cmd() -> list:
    # The recipe's own flags, made small; later flags win (argparse), so these override it.
    return [
        "bash", str(RECIPE),
        "--rollout.batch_size", str(B), "--rollout.n_samples_per_prompt", str(N), "--speed.n_init", str(N_INIT),
        "--rollout.micro_batch_size", "8", "--train.batch_size", "16", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "48", "--data.max_len", "512", "--data.max_samples", "200",
        "--ckpt.save_steps", "1", "--train.max_steps", "4",
    ]


def recipe_env(out: Path) -> dict:
    return {**os.environ, "VENV": str(VENV_BIN.parent), "OUT": str(out), "PYTHONUNBUFFERED": "1"}


def events(path: Path) -> list:
    """The trace's complete lines (the run may be writing the last one)."""
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver's process group and every process it started (Ray's processes
    may leave the group); wait until all are gone, so the rerun starts on a clean machine."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    os.killpg(proc.pid, signal.SIGKILL)
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=60)
    _, alive = psutil.wait_procs(tree, timeout=60)
    assert not alive, f"processes survived the kill: {alive}"


def run_until_step3_started(out: Path, log_path: Path) -> str:
    """Start the recipe; kill it once the step-2 checkpoint is complete and step 3 generates."""
    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    proc = subprocess.Popen(recipe_cmd(), env=recipe_env(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 1800
        while time.time() < deadline:
            assert proc.poll() is None, "the first run ended before step 3:\n" + "".join(lines)[-4000:]
            latest = ckpt / "_actor" / "latest"
            if latest.is_file() and latest.read_text().strip() == "global_step2" and trace.is_file():
                evs = events(trace)
                saves = [i for i, e in enumerate(evs) if e["event"] == "save" and e["global_step"] == 2]
                if saves and any(e["event"] in ("start", "scored") for e in evs[saves[-1] + 1:]):
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no step-3 generation after the step-2 checkpoint within 30 min")
        steps = [int(s) for s in STEP_LINE.findall("".join(lines))]
        assert max(steps) == 2, f"the kill came too late (steps logged: {steps})"
    finally:
        if proc.poll() is None:
            kill_tree(proc)
        reader.join(timeout=30)
    log = "".join(lines)
    log_path.write_text(log)
    return log


def plant_half_written_step3(ckpt: Path) -> None:
    tag = ckpt / "_actor" / "global_step3"
    tag.mkdir(exist_ok=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"PK\x03\x04 truncated")
    (ckpt / "_speed" / "global_step3.pt").write_bytes(b"not a torch file")
    (ckpt / "_speed" / "global_step3.pt.tmp.12345").write_bytes(b"half")


def test_kill_during_step3_then_rerun_continues_from_step2(tmp_path):
    from openrlhf_speed.curriculum import Scheduler, SpeedConfig

    out = tmp_path / "out"
    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    log_a = run_until_step3_started(out, tmp_path / "run_a.log")
    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step2"
    n_a = len(events(trace))
    plant_half_written_step3(ckpt)

    rerun = subprocess.run(recipe_cmd(), env=recipe_env(out), capture_output=True, text=True, timeout=1800)
    log_b = rerun.stdout + rerun.stderr
    (tmp_path / "run_b.log").write_text(log_b)
    assert rerun.returncode == 0, f"see {tmp_path / 'run_b.log'}: " + log_b[-4000:]

    # Resumed from the complete step-2 checkpoint, said before anything started, and the
    # step-3 leftovers were named and not read.
    assert f"[openrlhf-speed] resuming from step 2 (global_step2 in {ckpt})" in log_b
    assert "ignoring what a crashed save left after it: _actor/global_step3, _speed/global_step3.pt" in log_b
    assert "restored the curriculum state of step 2" in log_b
    assert [int(s) for s in STEP_LINE.findall(log_b)] == [3, 4], log_b[-4000:]
    assert [int(s) for s in STEP_LINE.findall(log_a)] == [1, 2]

    # The restored curriculum state is the one saved at step 2.
    trace_a, trace_b = events(trace)[:n_a], events(trace)[n_a:]
    save_index = max(i for i, e in enumerate(trace_a) if e["event"] == "save" and e["global_step"] == 2)
    saved = trace_a[save_index]
    restored = [e for e in trace_b if e["event"] == "restore"]
    assert len(restored) == 1
    assert (restored[0]["buffer"], restored[0]["inflight"], restored[0]["policy_version"]) == (
        saved["buffer"], saved["inflight"], saved["policy_version"])

    # Nothing lost or repeated relative to the step-2 state: the starts before the save plus
    # the rerun's are the epoch order of an uninterrupted run, each prompt once.
    starts = [e["prompt"] for e in trace_a[:save_index] + trace_b if e["event"] == "start"]
    assert len(starts) == len(set(starts))
    order = Scheduler(200, SpeedConfig(n_samples_per_prompt=N, n_init=N_INIT, batch_prompts=B, seed=42)).epoch_order(0)
    assert starts == order[: len(starts)].tolist()
    batches = [e for e in trace_b if e["event"] == "batch"]
    assert len(batches) == 2 and all(len(b["prompts"]) == B for b in batches)

    # It ends with a complete step-4 checkpoint; no temporary file is left by our saves.
    import torch

    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step4"
    assert torch.load(ckpt / "_speed" / "global_step4.pt", weights_only=False)["scheduler"] is not None
    leftovers = [p.name for p in (ckpt / "_speed").iterdir() if ".tmp." in p.name and p.name != "global_step3.pt.tmp.12345"]
    assert not leftovers
