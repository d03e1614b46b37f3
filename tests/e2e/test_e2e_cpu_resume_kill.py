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

Run with the DeepSpeed actor (the recipe's) and with `--backend megatron` and the Megatron
e2e's CPU flags (2 pipeline stages, fp32 engine). Both are `e2e_long` (`make test-all`): about
13 minutes each on 2 cores, which CI's 90 minutes cannot take beside `make test` and
`make test-extra` on a CPU without native bf16.
The shared steps and checks are tests/_kill_util.py's.
"""

import pytest
from _kill_util import MEGATRON, check_continued_from_step2, events, recipe_cmd, rerun, run_until_step3_started


def plant_half_written_step3(ckpt) -> None:
    tag = ckpt / "_actor" / "global_step3"
    tag.mkdir(exist_ok=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"PK\x03\x04 truncated")
    (ckpt / "_speed" / "global_step3.pt").write_bytes(b"not a torch file")
    (ckpt / "_speed" / "global_step3.pt.tmp.12345").write_bytes(b"half")


@pytest.mark.parametrize("backend_flags", [
    pytest.param((), id="deepspeed", marks=pytest.mark.e2e_long),
    pytest.param(MEGATRON, id="megatron", marks=pytest.mark.e2e_long),
])
def test_kill_during_step3_then_rerun_continues_from_step2(tmp_path, backend_flags):
    out = tmp_path / "out"
    ckpt, trace = out / "ckpt", out / "trace.jsonl"
    cmd = recipe_cmd(*backend_flags)
    log_a, _ = run_until_step3_started(cmd, out, tmp_path / "run_a.log")
    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step2"
    n_a = len(events(trace))
    plant_half_written_step3(ckpt)

    log_b = rerun(cmd, out, tmp_path / "run_b.log")
    # The step-3 leftovers were named and not read.
    assert "ignoring what a crashed save left after it: _actor/global_step3, _speed/global_step3.pt" in log_b
    check_continued_from_step2(out, n_a, log_a, log_b)
    # No temporary file is left by our saves.
    leftovers = [p.name for p in (ckpt / "_speed").iterdir() if ".tmp." in p.name and p.name != "global_step3.pt.tmp.12345"]
    assert not leftovers
