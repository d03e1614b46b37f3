"""A vLLM engine that dies mid-generation stops the run with one clear error.

When the engine's EngineCore process dies, vLLM raises EngineDeadError inside the Ray engine
actor; the SPEED driver (the trainer actor) sees it as a RayTaskError from `ray.get`, and the
command's process as the trainer's failure. Checked without Ray or vLLM running:
- `_collect` turns that error (or a dead actor's RayActorError) into EngineDiedError naming
  the engine index, its Ray actor id, what vLLM raised, the last complete checkpoint and how
  to resume (`resume_hint`, for each state of the checkpoint folder);
- `openrlhf-speed train` ends with exit status 1 and that message as its last line.
"""

import pickle
from types import SimpleNamespace

import pytest
import ray
from _failing_train import train_failing_with
from vllm.v1.engine.exceptions import EngineDeadError

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.rollout.checkpoint import atomic_save, curriculum_state_path, resume_hint
from openrlhf_speed.rollout.speed_generator import EngineDiedError, SpeedSamplesGenerator


def complete_checkpoint(root, step):
    (root / "_actor" / f"global_step{step}").mkdir(parents=True)
    (root / "_actor" / "latest").write_text(f"global_step{step}")
    atomic_save({"step": step}, curriculum_state_path(str(root), step))


def engine_task_error():
    """What `ray.get` raises in the driver when the engine actor's task raised EngineDeadError:
    the error crossed Ray by pickle, after which its `args` hold the message twice."""
    cause = pickle.loads(pickle.dumps(EngineDeadError()))
    return ray.exceptions.RayTaskError("generate_responses", "Traceback ...", cause).as_instanceof_cause()


@pytest.fixture
def gen(tmp_path, monkeypatch):
    g = SpeedSamplesGenerator.__new__(SpeedSamplesGenerator)
    g.scheduler = Scheduler(num_prompts=3, config=SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=1))
    g.args = SimpleNamespace(ckpt=SimpleNamespace(path=str(tmp_path), load_enable=True))
    g.vllm_engines = [SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "0123456789abcdef"))]
    g._engine_load, g._trace = [2], None
    (request,) = g.scheduler.next_requests()[:1]
    g._pending = {"ref": (request, 0, 0, [], 0)}
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns=1, timeout=None: (list(refs)[:num_returns], []))
    return g


@pytest.mark.parametrize("error, raised", [
    (engine_task_error(), "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
                          "cause. The run stops"),
    (ray.exceptions.RayActorError(), "RayActorError: The actor experienced an error before finishing this task."),
])
def test_dead_engine_becomes_engine_died_error_naming_engine_and_checkpoint(gen, tmp_path, monkeypatch, error, raised):
    complete_checkpoint(tmp_path, 2)

    def get(ref):
        raise error

    monkeypatch.setattr(ray, "get", get)
    with pytest.raises(EngineDiedError) as info:
        gen._collect({})
    message = str(info.value)
    assert message.startswith("vLLM engine 0 (Ray actor 01234567) failed while generating 2 responses for prompt ")
    assert raised in message
    assert message.endswith(f"The last complete checkpoint is step 2 in {tmp_path}: run the same command again to "
                            "resume from it.")
    assert info.value.__cause__ is error


def test_resume_hint_for_each_checkpoint_folder(tmp_path):
    assert resume_hint(str(tmp_path), True) == f"There is no complete checkpoint in {tmp_path} yet: a rerun starts over."
    complete_checkpoint(tmp_path, 4)
    assert resume_hint(str(tmp_path), False).endswith("run the same command with --ckpt.load_enable to resume from it.")
    (tmp_path / "_actor" / "latest").write_text("global_step9")  # names a missing folder
    assert resume_hint(str(tmp_path), True).startswith("The checkpoint folder cannot be resumed as it is: ")


def test_driver_ends_with_status_1_and_the_error_as_last_line():
    out = train_failing_with("openrlhf_speed.rollout.speed_generator", "EngineDiedError",
                             "vLLM engine 0 (Ray actor 01234567) failed ...")
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == "[openrlhf-speed] ERROR vLLM engine 0 (Ray actor 01234567) failed ..."
    assert "Traceback" in out.stderr  # the remote traceback is kept above it
