"""The resume pieces of rollout/checkpoint.py and rollout/trainer.py, without the pipeline:

- `atomic_save` leaves the old file or the complete new one, never a prefix, even when the
  writing process is SIGKILLed mid-write;
- `resume_point` decides which checkpoint a rerun reads: the step `_actor/latest` names,
  never a newer half-written tag or curriculum state; fresh when there is no `latest`;
  an error naming the fix when the folder is inconsistent;
- the trainer writes the curriculum state before the actor's checkpoint (a regular one, or
  the best-evaluation one that also moves `latest`), keeps one more
  than `--ckpt.max_num`, restores the state of the actor's step, and starts fresh when the
  actor found no complete checkpoint (upstream would fail on the empty states).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.rollout.checkpoint import (ResumeError, atomic_save, curriculum_state_path, resume_point,
                                               saved_steps)


def make_ckpt(root, latest=None, tags=(), states=(), extra=()):
    """A --ckpt.path folder: actor tag folders, `_actor/latest`, curriculum state files."""
    actor = root / "_actor"
    actor.mkdir(parents=True, exist_ok=True)
    for tag in tags:
        (actor / tag).mkdir()
        (actor / tag / "mp_rank_00_model_states.pt").write_bytes(b"x")
    if latest is not None:
        (actor / "latest").write_text(latest)
    for step in states:
        atomic_save({"step": step}, curriculum_state_path(str(root), step))
    for rel in extra:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"half")
    return str(root)


# -- atomic_save ---------------------------------------------------------------------------
def test_atomic_save_round_trip_leaves_no_temporary(tmp_path):
    path = tmp_path / "_speed" / "global_step1.pt"
    atomic_save({"a": [1, 2]}, str(path))
    atomic_save({"a": [3]}, str(path))
    assert torch.load(path, weights_only=False) == {"a": [3]}
    assert os.listdir(path.parent) == ["global_step1.pt"]


def test_atomic_save_failure_keeps_the_old_file(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    path = tmp_path / "state.pt"
    atomic_save({"v": 1}, str(path))
    with pytest.raises(RuntimeError, match="boom"):
        atomic_save({"big": torch.zeros(1000), "bad": Unpicklable()}, str(path))
    assert torch.load(path, weights_only=False) == {"v": 1}
    assert os.listdir(tmp_path) == ["state.pt"]


def test_atomic_save_sigkill_mid_write_keeps_the_old_file(tmp_path):
    """A process killed in the middle of torch.save (the temporary file open, the object
    half pickled) leaves the previous state readable, and a leftover temporary file that
    nothing reads as a state."""
    path = tmp_path / "_speed" / "global_step2.pt"
    atomic_save({"step": 2, "old": True}, str(path))
    child = textwrap.dedent(f"""
        import sys, time, torch
        from openrlhf_speed.rollout.checkpoint import atomic_save

        class Slow:
            def __reduce__(self):
                print("pickling", flush=True)
                time.sleep(120)  # killed here
                return (int, (0,))

        atomic_save({{"step": 3, "pad": torch.zeros(1 << 18), "slow": Slow()}}, {str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "pickling", f"the child did not reach torch.save (exit {proc.wait()})"
        assert [n for n in os.listdir(path.parent) if ".tmp." in n], "no temporary file while saving"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert torch.load(path, weights_only=False) == {"step": 2, "old": True}
    assert saved_steps(str(tmp_path)) == [2]  # the temporary file is not a state


# -- resume_point ----------------------------------------------------------------------------
def test_no_checkpoint_folder_starts_fresh(tmp_path):
    point = resume_point(str(tmp_path / "ckpt"), curriculum=True)
    assert point.step == 0 and "starting fresh" in point.message


def test_first_save_cut_short_starts_fresh(tmp_path):
    # DeepSpeed made the tag folder, the process died before `latest` was written.
    root = make_ckpt(tmp_path, tags=["global_step2"], extra=["_speed/global_step2.pt"])
    point = resume_point(root, curriculum=True)
    assert point.step == 0 and "ignoring the incomplete global_step2" in point.message


def test_resumes_from_the_step_latest_names(tmp_path):
    root = make_ckpt(tmp_path, latest="global_step2", tags=["global_step1", "global_step2"], states=[1, 2])
    point = resume_point(root, curriculum=True)
    assert point == (2, f"resuming from step 2 (global_step2 in {root})")


def test_newer_half_written_checkpoint_is_never_read(tmp_path):
    # Killed during step 3's save: the curriculum state of step 3 is complete (written
    # first), a temporary file and the actor's tag folder are half-written, `latest` is 2.
    root = make_ckpt(tmp_path, latest="global_step2\n", tags=["global_step2", "global_step3"], states=[2, 3],
                     extra=["_speed/global_step4.pt.tmp.123"])
    point = resume_point(root, curriculum=True)
    assert point.step == 2
    assert "_actor/global_step3" in point.message and "_speed/global_step3.pt" in point.message
    assert ".pt.tmp" not in point.message


def test_best_checkpoint_tag_is_resumed_from_its_step(tmp_path):
    # A new best evaluation at step 3 saved best_global_step3 and pointed `latest` at it.
    root = make_ckpt(tmp_path, latest="best_global_step3", tags=["global_step2", "best_global_step3"], states=[2, 3])
    assert resume_point(root, curriculum=True).step == 3


@pytest.mark.parametrize("latest", ["", "global_step", "global_step5"])
def test_unreadable_latest_is_an_error_naming_the_fix(tmp_path, latest):
    root = make_ckpt(tmp_path, latest=latest, tags=["global_step2"], states=[2])
    with pytest.raises(ResumeError, match="echo global_stepK"):
        resume_point(root, curriculum=True)


def test_missing_curriculum_state_is_an_error_unless_no_curriculum(tmp_path):
    root = make_ckpt(tmp_path, latest="global_step2", tags=["global_step2"], states=[1])
    with pytest.raises(ResumeError, match="curriculum state .*global_step2.pt is missing"):
        resume_point(root, curriculum=True)
    assert resume_point(root, curriculum=False).step == 2  # --speed.strategy off keeps no curriculum state


# -- the trainer's save / restore order ----------------------------------------------------
class FakeGenerator:
    def __init__(self):
        self.loaded, self.logged = None, []

    def state_dict(self):
        return {"scheduler": {"ready": [], "inflight": []}, "policy_version": 7}

    def log_saved(self, step, state):
        self.logged.append(step)

    def load_state_dict(self, state):
        self.loaded = state


class FakeUpstream:
    """Stands in for OpenRLHF's PPOTrainer: records the order of the saves, returns the
    checkpoint states the actor group would."""

    states = {}
    save_s = 0.0  # how long the actor's save takes

    def init_checkpoint_states(self):
        return dict(self.states)

    def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
        self.best_saved_with_state = os.path.isfile(curriculum_state_path(self.args.ckpt.path, global_step))
        time.sleep(self.save_s)

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        # The curriculum state of this step must already be complete on disk.
        self.saved_with_state = os.path.isfile(curriculum_state_path(self.args.ckpt.path, global_step))
        (self.actor_dir / f"global_step{global_step}").mkdir(parents=True, exist_ok=True)
        (self.actor_dir / "latest").write_text(f"global_step{global_step}")


@pytest.fixture
def trainer(tmp_path):
    from openrlhf_speed.rollout.trainer import make_trainer_class

    upstream = type("Upstream", (), {"__ray_actor_class__": FakeUpstream})
    cls = make_trainer_class(upstream).__ray_actor_class__
    t = cls.__new__(cls)
    t.args = SimpleNamespace(ckpt=SimpleNamespace(path=str(tmp_path / "ckpt"), save_steps=1, max_num=2,
                                                  load_enable=True), log=SimpleNamespace(jsonl=None))
    t.actor_dir = tmp_path / "ckpt" / "_actor"
    t.speed, t.samples_generator = True, FakeGenerator()
    return t


def test_trainer_writes_the_curriculum_state_first_and_keeps_max_num_plus_one(trainer):
    for step in range(1, 6):
        trainer.save_logs_and_checkpoints(step)
        assert trainer.saved_with_state
    assert saved_steps(trainer.args.ckpt.path) == [3, 4, 5]
    assert trainer.samples_generator.logged == [1, 2, 3, 4, 5]


def test_trainer_writes_the_curriculum_state_before_a_best_checkpoint(trainer):
    trainer.save_best_checkpoint({"eval_accuracy": 0.5}, 3)  # step 3 is an evaluation step only
    assert trainer.best_saved_with_state


def test_a_best_checkpoint_is_off_the_training_clock(trainer):
    """train_wall_s, which the benchmark's time to target reads, excludes checkpointing: a new
    best evaluation's save (the actor and its optimizer) must not count as training time."""
    trainer._clock_start, trainer._excluded_s, trainer.save_s = time.time(), 0.0, 0.3
    trainer.save_best_checkpoint({"eval_accuracy": 0.5}, 3)
    assert trainer._excluded_s >= 0.3 and trainer._train_wall_s() < 0.3


def test_trainer_restores_the_state_of_the_actors_step(trainer, capsys):
    for step in (1, 2):
        trainer.save_logs_and_checkpoints(step)
    atomic_save({"newer": True}, curriculum_state_path(trainer.args.ckpt.path, 3))  # a crashed step-3 save
    FakeUpstream.states = {"episode": 0, "global_step": 2, "total_consumed_prompts": 16, "data_loader_state_dict": {}}
    try:
        trainer._restore_curriculum()
    finally:
        FakeUpstream.states = {}
    assert trainer.samples_generator.loaded == FakeGenerator().state_dict()
    assert "resuming from step 2" in capsys.readouterr().out


def test_trainer_starts_fresh_when_the_actor_loaded_nothing(trainer, capsys):
    # `_actor` exists (a first save was cut short) so upstream asks the actors, which
    # loaded nothing and return {}: upstream fit() would fail on states["episode"].
    trainer.actor_dir.mkdir(parents=True)
    states = trainer.init_checkpoint_states()
    assert states == {"episode": 0, "global_step": 0, "total_consumed_prompts": 0, "data_loader_state_dict": {}}
    trainer._restore_curriculum()
    assert trainer.samples_generator.loaded is None
    assert "starting fresh" in capsys.readouterr().out
