"""The vLLM engine dies mid-generation: the run stops with a clear error, rerunning continues.

The default SPEED recipe runs small with a checkpoint every step, as in
test_e2e_cpu_resume_kill.py (shared steps: tests/_kill_util.py). Once the step-2 checkpoint is
complete and step 3 generates, the engine's own processes are SIGKILLed: those descending
from the driver whose title is `VLLM::EngineCore` or `VLLM::Worker` (vLLM names them so; the
Ray engine actor above them stays). vLLM then raises EngineDeadError inside the Ray engine
actor, the SPEED driver's `ray.get` raises, and:
- the command exits with a non-zero status within 5 minutes (it does not hang), printing one
  line `[openrlhf-speed] ERROR vLLM engine 0 (Ray actor <id>) failed ...` that names what
  vLLM raised (EngineDeadError), the last complete checkpoint (step 2) and that running the
  command again resumes from it (tests/rollout/test_engine_died.py: it is the last line);
- none of the processes the driver had started (Ray's, the actors', the engine's) is left
  within a minute of its exit (any that is gets killed, and the test fails naming it);
- the step-2 checkpoint is intact: `latest` names it, its curriculum state loads, a rerun
  would pick it (`resume_point`) and no step-3 checkpoint was begun;
- the same command run again resumes from step 2 and trains steps 3 and 4, with the state
  saved at step 2, nothing lost or repeated, and ends with complete step-4 checkpoints.
"""

import re
import subprocess
import time

import psutil
import pytest
from _kill_util import check_continued_from_step2, events, process_tree, recipe_cmd, rerun, run_until_step3_started

pytestmark = pytest.mark.e2e_long

ENGINE_TITLE = re.compile(r"VLLM::(EngineCore|Worker)")
DRIVER_EXIT_S = 300
# vLLM's EngineDeadError, raised in the engine actor when its EngineCore process is gone.
ERROR_LINE = re.compile(r"\[openrlhf-speed\] ERROR vLLM engine 0 \(Ray actor [0-9a-f]{8}\) failed while generating "
                        r"\d+ responses for prompt \d+ \(\w+\): EngineDeadError: EngineCore encountered an issue\..*")


def title(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()) or p.name()
    except psutil.NoSuchProcess:
        return ""


def kill_engine_and_wait(proc: subprocess.Popen) -> dict:
    """SIGKILL the engine's processes; wait (bounded) for the driver to exit."""
    tree = process_tree(proc)
    engine = [p for p in tree if ENGINE_TITLE.match(title(p))]
    assert engine, "no VLLM::EngineCore / VLLM::Worker process under the driver: " + str(
        sorted({title(p)[:40] for p in tree}))
    for p in engine:
        p.kill()
    t0 = time.time()
    try:
        proc.wait(timeout=DRIVER_EXIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the driver still ran {DRIVER_EXIT_S} s after its engine was killed (hangs)")
    return {"returncode": proc.returncode, "exit_s": time.time() - t0, "tree": tree,
            "engine": [title(p) for p in engine]}


def test_engine_killed_during_step3_stops_the_run_then_rerun_continues(tmp_path):
    import torch
    from openrlhf_speed.rollout.checkpoint import resume_point

    out = tmp_path / "out"
    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    cmd = recipe_cmd()
    log_a, killed = run_until_step3_started(cmd, out, tmp_path / "run_a.log", interrupt=kill_engine_and_wait)

    # The driver stopped by itself, non-zero, ending with the one line that says what to do.
    assert killed["returncode"] != 0, log_a[-4000:]
    errors = [line for line in log_a.splitlines() if line.startswith("[openrlhf-speed] ERROR")]
    assert len(errors) == 1 and ERROR_LINE.fullmatch(errors[0]), log_a[-4000:]
    assert f"The last complete checkpoint is step 2 in {ckpt}: run the same command again to resume from it." in errors[0]

    # Nothing the driver started is left running.
    _, alive = psutil.wait_procs(killed["tree"], timeout=60)
    left = [f"{p.pid} {title(p)[:80]}" for p in alive]
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"left running after the driver exited (now killed): {left}"

    # The step-2 checkpoint is intact and is what a rerun picks; no step-3 save was begun.
    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step2"
    assert torch.load(ckpt / "_speed" / "global_step2.pt", weights_only=False)["scheduler"] is not None
    assert resume_point(str(ckpt), curriculum=True).step == 2
    assert not (ckpt / "_actor" / "global_step3").exists() and not (ckpt / "_speed" / "global_step3.pt").exists()
    n_a = len(events(trace))

    log_b = rerun(cmd, out, tmp_path / "run_b.log")
    check_continued_from_step2(out, n_a, log_a, log_b)
