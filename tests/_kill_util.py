"""Shared by the end-to-end kill tests (tests/e2e/test_e2e_cpu_resume_kill.py,
test_e2e_cpu_engine_kill.py): the default SPEED recipe run small with a checkpoint every
step, interrupted once the step-2 checkpoint is complete and step 3 generates, then run again.

Legend: B prompts per batch, N responses per prompt, N_INIT screening responses.
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

RECIPE = REPO / "examples" / "scripts" / "train_speed_rloo_smollm2_cpu.sh"
B, N, N_INIT = 4, 4, 2
STEP_LINE = re.compile(r"\[openrlhf-speed\] step (\d+) \|")
# The flags tests/e2e/test_e2e_cpu_megatron.py runs the Megatron actor with on CPU: 2 pipeline
# stages (SmolLM2's heads admit no TP of 2), fp32 engine.
MEGATRON = ("--backend", "megatron", "--megatron.pp", "2", "--vllm.dtype", "float32",
            "--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2")


def recipe_cmd(*extra) -> list:
    # The recipe's own flags, made small; later flags win (argparse), so these override it.
    return [
        "bash", str(RECIPE),
        "--rollout.batch_size", str(B), "--rollout.n_samples_per_prompt", str(N), "--speed.n_init", str(N_INIT),
        "--rollout.micro_batch_size", "8", "--train.batch_size", "16", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "48", "--data.max_len", "512", "--data.max_samples", "200",
        "--ckpt.save_steps", "1", "--train.max_steps", "4", *extra,
    ]


def recipe_env(out: Path) -> dict:
    return {**os.environ, "VENV": str(VENV_BIN.parent), "OUT": str(out), "PYTHONUNBUFFERED": "1"}


def events(path: Path) -> list:
    """The trace's complete lines (the run may be writing the last one)."""
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def process_tree(proc: subprocess.Popen) -> list:
    """The driver and every process it started, alive now (Ray's processes, the engine's)."""
    try:
        root = psutil.Process(proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver's process group and every process it started (Ray's processes
    may leave the group); wait until all are gone, so the rerun starts on a clean machine."""
    tree = process_tree(proc)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the driver's group is gone already; its children may not be
        pass
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=60)
    _, alive = psutil.wait_procs(tree, timeout=60)
    assert not alive, f"processes survived the kill: {alive}"


def run_until_step3_started(cmd: list, out: Path, log_path: Path, interrupt=kill_tree):
    """Start `cmd`; once the step-2 checkpoint is complete and step 3 generates, call
    `interrupt(proc)`. Returns (the run's log, what `interrupt` returned); the driver's tree
    is SIGKILLed on the way out if it still runs."""
    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    proc = subprocess.Popen(cmd, env=recipe_env(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
        result = interrupt(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
        reader.join(timeout=30)
        log_path.write_text("".join(lines))
    return "".join(lines), result


def rerun(cmd: list, out: Path, log_path: Path) -> str:
    """The same command again, to the end; returns its log."""
    done = subprocess.run(cmd, env=recipe_env(out), capture_output=True, text=True, timeout=1800)
    log = done.stdout + done.stderr
    log_path.write_text(log)
    assert done.returncode == 0, f"see {log_path}: " + log[-4000:]
    return log


def check_continued_from_step2(out: Path, n_a: int, log_a: str, log_b: str) -> None:
    """The rerun resumed from the complete step-2 checkpoint and trained steps 3 and 4 only,
    with the curriculum state saved at step 2; nothing lost or repeated; step-4 checkpoints.
    `n_a`: the trace's events when the first run was interrupted."""
    import torch
    from openrlhf_speed.curriculum import Scheduler, SpeedConfig

    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    # Resumed from the complete step-2 checkpoint, said before anything started.
    assert f"[openrlhf-speed] resuming from step 2 (global_step2 in {ckpt})" in log_b
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

    # It ends with a complete step-4 checkpoint.
    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step4"
    assert torch.load(ckpt / "_speed" / "global_step4.pt", weights_only=False)["scheduler"] is not None


def run_and_kill_when(cmd: list, out: Path, log_path: Path, moment_reached, delay_s: float = 0.0,
                      limit_s: float = 1800):
    """Start `cmd`; once `moment_reached(out, log_so_far)` is true, wait `delay_s` and SIGKILL the
    driver's tree (kill_tree). Returns (the run's log, the trace events it left, whether it was
    killed: False when it ended first)."""
    proc = subprocess.Popen(cmd, env=recipe_env(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    killed = False
    try:
        deadline = time.time() + limit_s
        while time.time() < deadline and proc.poll() is None:
            if moment_reached(out, "".join(lines)):
                time.sleep(delay_s)
                if proc.poll() is None:
                    kill_tree(proc)
                    killed = True
                break
            time.sleep(0.1)
        else:
            if proc.poll() is None:
                pytest.fail(f"the moment to kill did not come within {limit_s:.0f} s")
    finally:
        if proc.poll() is None:
            kill_tree(proc)
        reader.join(timeout=30)
        log_path.write_text("".join(lines))
    trace = out / "trace.jsonl"
    return "".join(lines), events(trace) if trace.is_file() else [], killed
