"""Disk faults at checkpoint time, on real files (rollout/ckpt_manifest.py, rollout/checkpoint.py
and the trainer's save seam), without the pipeline:

- a torn checkpoint (a file of the newest one truncated, deleted or zero-filled, or `latest`
  lost, as after a node crash): `resume_point` names it in one line, resumes from the previous
  complete checkpoint, points `latest` there and moves the damaged one out of `_actor`;
  DeepSpeed's loader is never handed the damaged tag;
- a full disk while a checkpoint is written, as a real ENOSPC from the kernel (/dev/full) under
  the curriculum state's write, as an ENOSPC raised in the actor's save (Ray hands it over as
  the `cause` of its error), and as torch's errno-less writer failure on a disk with too little
  space: the run stops with CheckpointDiskFullError, one line naming the folder and the space
  needed, the unfinished tag is removed, `latest` names the last complete one, and a rerun
  restores exactly that checkpoint's curriculum state.
"""

import errno
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.rollout import ckpt_manifest
from openrlhf_speed.rollout.checkpoint import ResumeError, adopt_folder, curriculum_state_path, resume_point

DEV_FULL = "/dev/full"


def state_of(step):
    # What the SPEED driver's state_dict() holds, in small: a position, a buffer, history arrays.
    return {"scheduler": {"step": step, "position": 10 * step, "ready": [3, 1, 4][:step],
                          "history": [i * step for i in range(50)]}, "policy_version": step}


class FakeUpstream:
    """OpenRLHF's PPOTrainer as the save seam sees it: DeepSpeed writes the tag's files, then
    `latest` (without fsync); `fail` makes the actor's save raise (what a full disk does)."""

    fail = None
    states = {}

    def init_checkpoint_states(self):
        return dict(self.states)

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        if global_step % self.args.ckpt.save_steps:
            return
        tag = self.actor_dir / f"global_step{global_step}"
        tag.mkdir(parents=True, exist_ok=True)
        torch.save({"w": torch.full((1000,), float(global_step))}, tag / "mp_rank_00_model_states.pt")
        if self.fail is not None:
            (tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"half")
            raise self.fail
        torch.save({"adam": torch.zeros(2000)}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
        (self.actor_dir / "latest").write_text(tag.name)


    def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
        tag = self.actor_dir / f"best_global_step{global_step}"
        tag.mkdir(parents=True)
        torch.save({"w": torch.zeros(10)}, tag / "mp_rank_00_model_states.pt")
        (self.actor_dir / "latest").write_text(tag.name)


class FakeGenerator:
    def __init__(self):
        self.step, self.loaded = 0, None

    def state_dict(self):
        return state_of(self.step)

    def log_saved(self, step, state):
        pass

    def load_state_dict(self, state):
        self.loaded = state


@pytest.fixture
def trainer(tmp_path):
    from openrlhf_speed.rollout.trainer import make_trainer_class

    cls = make_trainer_class(type("Upstream", (), {"__ray_actor_class__": FakeUpstream})).__ray_actor_class__
    t = cls.__new__(cls)
    t.args = SimpleNamespace(ckpt=SimpleNamespace(path=str(tmp_path / "ckpt"), save_steps=1, max_num=2,
                                                  load_enable=True, verify="sha256"),
                             actor=SimpleNamespace(model_name_or_path=str(tmp_path / "no_model")),
                             log=SimpleNamespace(jsonl=None))
    t.actor_dir = tmp_path / "ckpt" / "_actor"
    t.speed, t.samples_generator = True, FakeGenerator()
    return t


def train_to(trainer, steps):
    for step in steps:
        trainer.samples_generator.step = step
        trainer.save_logs_and_checkpoints(step)


def resume_and_restore(trainer):
    """What a rerun does: flags.prepare's resume_point (applied), then the actor loads `latest`
    and the trainer restores the curriculum state of that step."""
    point = resume_point(trainer.args.ckpt.path, curriculum=True, apply=True)
    latest = (trainer.actor_dir / "latest").read_text().strip()
    FakeUpstream.states = {"episode": 0, "global_step": point.step, "total_consumed_prompts": 0,
                           "data_loader_state_dict": {}}
    try:
        trainer.samples_generator.loaded = None
        trainer._restore_curriculum()
    finally:
        FakeUpstream.states = {}
    return point, latest


# -- torn checkpoints -----------------------------------------------------------------------
def optim(trainer, step):
    return trainer.actor_dir / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"


@pytest.mark.parametrize("damage,problem", [
    ("truncate", "zero_pp_rank_0_mp_rank_00_optim_states.pt has 100 bytes, its manifest says"),
    ("delete", "zero_pp_rank_0_mp_rank_00_optim_states.pt is missing"),
    ("zero_fill", "zero_pp_rank_0_mp_rank_00_optim_states.pt does not match its sha256"),
    ("state", "_speed/global_step3.pt has 10 bytes"),
])
def test_torn_newest_checkpoint_resumes_from_the_previous_one(trainer, capsys, damage, problem):
    train_to(trainer, [1, 2, 3])
    path = optim(trainer, 3)
    if damage == "truncate":
        os.truncate(path, 100)
    elif damage == "delete":
        path.unlink()
    elif damage == "zero_fill":  # what a crash can leave on XFS/ext4: the right size, zeros inside
        path.write_bytes(bytes(path.stat().st_size))
    else:
        open(curriculum_state_path(trainer.args.ckpt.path, 3), "wb").write(b"0123456789")
    dry = resume_point(trainer.args.ckpt.path, curriculum=True)  # a dry run names it, changes nothing
    assert dry.step == 2 and (trainer.actor_dir / "latest").read_text() == "global_step3"

    point, latest = resume_and_restore(trainer)
    assert point.step == 2 and latest == "global_step2"
    assert "\n" not in point.message and problem in point.message, point.message
    assert point.message.startswith("checkpoint global_step3 is damaged (")
    assert "resuming from the previous complete checkpoint, step 2 (global_step2" in point.message
    # The damaged tag is out of DeepSpeed's and OpenRLHF's rotation's sight, kept for inspection.
    assert not (trainer.actor_dir / "global_step3").exists()
    assert (trainer.actor_dir.parent / "_torn" / "global_step3").is_dir()
    assert trainer.samples_generator.loaded == state_of(2)
    assert "resuming from step 2: restored the curriculum state of step 2" in capsys.readouterr().out
    # The rerun's next save of step 3 completes and is what the following resume takes.
    train_to(trainer, [3])
    assert resume_point(trainer.args.ckpt.path, curriculum=True).step == 3


def test_a_save_cut_short_after_latest_is_ignored_like_a_newer_leftover(trainer):
    """Killed after DeepSpeed wrote `latest` but before the manifest: the save did not finish,
    whatever `latest` says; the previous checkpoint is the last complete one."""
    train_to(trainer, [1, 2, 3])
    (trainer.actor_dir / "global_step3" / ckpt_manifest.MANIFEST).unlink()
    point, latest = resume_and_restore(trainer)
    assert point.step == 2 and latest == "global_step2" and "damaged" not in point.message
    assert point.message.startswith(f"resuming from step 2 (global_step2 in {trainer.args.ckpt.path}) (ignoring what "
                                    "a crashed save left after it: _actor/global_step3, _speed/global_step3.pt; moved")
    assert trainer.samples_generator.loaded == state_of(2)


def test_a_best_checkpoint_at_a_save_step_keeps_both_verifiable(trainer):
    """A new best evaluation at a --ckpt.save_steps step: the curriculum state of that step is
    not written twice (the regular checkpoint's manifest vouches for the first write)."""
    train_to(trainer, [1, 2])
    state = curriculum_state_path(trainer.args.ckpt.path, 2)
    before = os.stat(state).st_mtime_ns
    trainer.samples_generator.step = 99  # a rewrite would show
    trainer.save_best_checkpoint({"eval_accuracy": 0.5}, 2)
    assert os.stat(state).st_mtime_ns == before
    for tag in ("global_step2", "best_global_step2"):
        assert ckpt_manifest.verify(trainer.args.ckpt.path, tag, 2).problem is None
    point, latest = resume_and_restore(trainer)
    assert (point.step, latest) == (2, "best_global_step2") and trainer.samples_generator.loaded == state_of(2)


def test_size_mode_catches_truncation_but_not_zero_fill(trainer):
    trainer.args.ckpt.verify = "size"
    train_to(trainer, [1, 2])
    path = optim(trainer, 2)
    path.write_bytes(bytes(path.stat().st_size))
    assert resume_point(trainer.args.ckpt.path, curriculum=True).step == 2
    os.truncate(path, 10)
    assert resume_point(trainer.args.ckpt.path, curriculum=True).step == 1


@pytest.mark.parametrize("latest", ["", "global_st", None])
def test_lost_latest_resumes_from_the_newest_complete_checkpoint(trainer, latest):
    train_to(trainer, [1, 2])
    if latest is None:
        (trainer.actor_dir / "latest").unlink()
    else:
        (trainer.actor_dir / "latest").write_text(latest)
    point, now = resume_and_restore(trainer)
    assert point.step == 2 and now == "global_step2" and "is missing or unreadable" in point.message
    assert trainer.samples_generator.loaded == state_of(2)


def test_nothing_complete_starts_fresh_and_loads_nothing(trainer):
    train_to(trainer, [1])
    os.truncate(optim(trainer, 1), 5)
    point = resume_point(trainer.args.ckpt.path, curriculum=True, apply=True)
    assert point.step == 0 and "is damaged" in point.message and "starting fresh" in point.message
    assert not (trainer.actor_dir / "latest").exists() and not (trainer.actor_dir / "global_step1").exists()


def test_half_written_newer_tag_is_moved_aside_with_the_old_message(trainer):
    train_to(trainer, [1, 2])
    (trainer.actor_dir / "global_step3").mkdir()
    (trainer.actor_dir / "global_step3" / "mp_rank_00_model_states.pt").write_bytes(b"PK half")
    point = resume_point(trainer.args.ckpt.path, curriculum=True, apply=True)
    assert point.step == 2
    assert "ignoring what a crashed save left after it: _actor/global_step3" in point.message
    assert "_torn" in point.message and not (trainer.actor_dir / "global_step3").exists()


def test_a_checkpoint_without_curriculum_state_is_refused_for_speed(trainer):
    trainer.speed = False  # --speed.strategy off: the manifest lists no curriculum state
    train_to(trainer, [1])
    with pytest.raises(ResumeError, match="holds no curriculum state"):
        resume_point(trainer.args.ckpt.path, curriculum=True)
    assert resume_point(trainer.args.ckpt.path, curriculum=False).step == 1


def test_a_folder_written_before_manifests_is_adopted_up_to_latest(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (1, 2, 3):
        (ckpt / "_actor" / f"global_step{step}").mkdir(parents=True)
        (ckpt / "_actor" / f"global_step{step}" / "model.pt").write_bytes(b"x" * step)
    (ckpt / "_actor" / "latest").write_text("global_step2")  # step 3: a save that never completed
    assert resume_point(str(ckpt), curriculum=False).step == 2  # unverified, as before manifests
    adopt_folder(str(ckpt))
    assert ckpt_manifest.uses_manifests(str(ckpt))
    assert [ckpt_manifest.verify(str(ckpt), f"global_step{s}", s).problem is None for s in (1, 2, 3)] == \
        [True, True, False]


# -- a full disk while saving ---------------------------------------------------------------
def fill_disk_for(trainer, monkeypatch, free=1000):
    """Make the checkpoint's disk report `free` bytes: what the trainer sees after a failed save."""
    real = shutil.disk_usage
    monkeypatch.setattr(ckpt_manifest.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=free) if str(p).startswith(trainer.args.ckpt.path) else real(p))


def check_stopped_at_step3(trainer, err, needed):
    msg = str(err)
    folder = os.path.join(trainer.args.ckpt.path, "_actor")
    assert "\n" not in msg
    assert msg.startswith(f"disk full while writing checkpoint global_step3 to {folder}: a checkpoint needs about "
                          f"{needed / 1e9:.2f} GB free there")
    assert "The last complete checkpoint is step 2" in msg and "run the same command again" in msg
    assert not (trainer.actor_dir / "global_step3").exists()
    assert not os.path.exists(curriculum_state_path(trainer.args.ckpt.path, 3))
    assert not [n for n in os.listdir(os.path.join(trainer.args.ckpt.path, "_speed")) if ".tmp." in n]
    point, latest = resume_and_restore(trainer)  # the rerun, once space is freed
    assert point.step == 2 and latest == "global_step2" and "damaged" not in point.message
    assert trainer.samples_generator.loaded == state_of(2)


def test_real_enospc_under_the_curriculum_state_stops_with_one_line(trainer):
    if not os.path.exists(DEV_FULL):
        pytest.skip("needs /dev/full")
    train_to(trainer, [1, 2])
    needed = ckpt_manifest.manifest_bytes(trainer.args.ckpt.path, "global_step2")
    # atomic_save writes PATH.tmp.<pid> first: make that a door to the kernel's always-full device.
    tmp = curriculum_state_path(trainer.args.ckpt.path, 3) + f".tmp.{os.getpid()}"
    os.symlink(DEV_FULL, tmp)
    trainer.samples_generator.step = 3
    with pytest.raises(ckpt_manifest.CheckpointDiskFullError) as err:
        trainer.save_logs_and_checkpoints(3)
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC
    check_stopped_at_step3(trainer, err.value, needed)


def test_enospc_in_the_actors_save_stops_with_one_line(trainer):
    train_to(trainer, [1, 2])
    needed = ckpt_manifest.manifest_bytes(trainer.args.ckpt.path, "global_step2")

    class RayTaskError(RuntimeError):  # as ray.get raises an actor's failure: the error in `cause`
        cause = OSError(errno.ENOSPC, "No space left on device")

    FakeUpstream.fail = RayTaskError("ray::PolicyActor.save_checkpoint() failed")
    try:
        trainer.samples_generator.step = 3
        with pytest.raises(ckpt_manifest.CheckpointDiskFullError) as err:
            trainer.save_logs_and_checkpoints(3)
    finally:
        FakeUpstream.fail = None
    check_stopped_at_step3(trainer, err.value, needed)


def test_torch_writer_failure_on_a_full_disk_is_a_full_disk(trainer, monkeypatch):
    """torch.save to a path reports a full disk without an errno ("file write failed",
    "unexpected pos"): with less space free than a checkpoint needs, it is one."""
    train_to(trainer, [1, 2])
    needed = ckpt_manifest.manifest_bytes(trainer.args.ckpt.path, "global_step2")
    FakeUpstream.fail = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    try:
        trainer.samples_generator.step = 3
        with pytest.raises(RuntimeError, match="unexpected pos") as err:  # plenty of space: not a full disk
            trainer.save_logs_and_checkpoints(3)
        assert not isinstance(err.value, ckpt_manifest.CheckpointDiskFullError)
        shutil.rmtree(trainer.actor_dir / "global_step3")
        fill_disk_for(trainer, monkeypatch, free=needed // 2)
        with pytest.raises(ckpt_manifest.CheckpointDiskFullError) as err:
            trainer.save_logs_and_checkpoints(3)
    finally:
        FakeUpstream.fail = None
    assert f"{needed / 2 / 1e9:.2f} GB is free" in str(err.value)
    check_stopped_at_step3(trainer, err.value, needed)


def test_first_checkpoint_estimate_comes_from_the_model_weights(tmp_path):
    from safetensors.torch import save_file

    model = tmp_path / "model"
    model.mkdir()
    save_file({"a": torch.zeros(10, 20, dtype=torch.bfloat16), "b": torch.zeros(5)}, str(model / "model.safetensors"))
    assert ckpt_manifest.model_state_bytes(str(model)) == 205 * ckpt_manifest.BYTES_PER_PARAM
    assert ckpt_manifest.model_state_bytes(str(tmp_path / "missing")) is None
