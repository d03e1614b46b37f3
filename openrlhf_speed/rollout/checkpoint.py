"""Which checkpoint a rerun resumes from, and how the curriculum state is written so that a
crash never leaves a half-written one to read.

A run's `--ckpt.path` holds:

    _actor/latest                 the newest complete actor tag, e.g. "global_step2"
    _actor/global_stepK/          the actor checkpoint of step K (DeepSpeed or Megatron);
                                  best_global_stepK/ for a new best evaluation at step K
    _speed/global_stepK.pt        the curriculum state of step K (rollout/trainer.py)

Both actor backends write `latest` only after every rank finished writing the tag, so a
crash mid-save leaves `latest` naming the previous complete tag (DeepSpeed: the `latest`
file is rewritten after its barrier; Megatron: backends/megatron/checkpoint.py renames a
`.partial` folder first). The actor loads the tag `latest` names, and the curriculum state
is read for exactly that step, so a newer, half-written tag or state file is never read.

The curriculum state of step K is written before any actor checkpoint of step K (tmp
file, fsync, rename): whenever `latest` names step K, the state of step K is complete on
disk. The trainer keeps `--ckpt.max_num` + 1 states, so the one `latest` needs survives a
crash between the two writes.
"""

import os
import re
from typing import NamedTuple

ACTOR_DIR, SPEED_DIR, LATEST = "_actor", "_speed", "latest"
# OpenRLHF's tags: global_stepK (every --ckpt.save_steps) and best_global_stepK (a new best
# evaluation; it rewrites `latest` too).
_TAG = re.compile(r"(?:best_)?global_step(\d+)")


class ResumeError(RuntimeError):
    """The checkpoint folder is inconsistent; the message says what to do."""


class ResumePoint(NamedTuple):
    step: int  # 0: start fresh
    message: str  # one line for the console


def curriculum_state_path(ckpt_path: str, step: int) -> str:
    return os.path.join(ckpt_path, SPEED_DIR, f"global_step{step}.pt")


def atomic_save(obj, path: str) -> None:
    """torch.save to `path` so that `path` holds either the old content or the complete new
    one, never a prefix: write a temporary file beside it, fsync it, rename it over `path`,
    fsync the folder (the rename is durable only once its directory entry is)."""
    import torch

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def saved_steps(ckpt_path: str) -> list:
    """Steps with a complete curriculum state file, ascending (temporary files excluded)."""
    folder = os.path.join(ckpt_path, SPEED_DIR)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(int(m.group(1)) for m in map(re.compile(r"global_step(\d+)\.pt").fullmatch, names) if m)


def resume_point(ckpt_path: str, curriculum: bool) -> ResumePoint:
    """Where `--ckpt.load_enable` resumes: the step of the tag `_actor/latest` names, or 0
    (fresh) when there is no `latest` yet. `curriculum`: the SPEED driver runs, so the
    curriculum state of that step must exist too. Raises ResumeError when `latest` is
    unreadable or names something missing: resuming then would lose or repeat steps."""
    actor_dir = os.path.join(ckpt_path, ACTOR_DIR)
    latest = os.path.join(actor_dir, LATEST)
    if not os.path.isfile(latest):
        partial = sorted(n for n in os.listdir(actor_dir) if _TAG.search(n)) if os.path.isdir(actor_dir) else []
        ignored = f" (ignoring the incomplete {', '.join(partial)})" if partial else ""
        return ResumePoint(0, f"no complete checkpoint in {ckpt_path} yet: starting fresh{ignored}")
    with open(latest) as f:
        tag = f.read().strip()
    m = _TAG.fullmatch(tag)
    if not m or not os.path.isdir(os.path.join(actor_dir, tag)):
        raise ResumeError(
            f"{latest} names {tag!r}, which is not a checkpoint folder beside it (a crash while it was written?). "
            f"Write the newest complete tag into it (e.g. `echo global_stepK > {latest}`, with K one of the "
            f"global_stepK folders in {actor_dir}), or start over with another --ckpt.path."
        )
    step = int(m.group(1))
    if curriculum and not os.path.isfile(curriculum_state_path(ckpt_path, step)):
        raise ResumeError(
            f"resuming from {tag}, but its curriculum state {curriculum_state_path(ckpt_path, step)} is missing: the "
            "checkpoint was not written by openrlhf-speed with this --ckpt.path, or the file was deleted. Resume "
            "from a complete checkpoint, or start over without --ckpt.load_enable."
        )
    newer = [f"{ACTOR_DIR}/{n}" for n in sorted(os.listdir(actor_dir))
             if (t := _TAG.fullmatch(n)) and int(t.group(1)) > step]
    newer += [f"{SPEED_DIR}/global_step{s}.pt" for s in saved_steps(ckpt_path) if s > step]
    ignored = f" (ignoring what a crashed save left after it: {', '.join(newer)})" if newer else ""
    return ResumePoint(step, f"resuming from step {step} ({tag} in {ckpt_path}){ignored}")


def resume_hint(ckpt_path: str, load_enable: bool) -> str:
    """One sentence for an error that stops a SPEED run: the last complete checkpoint and the
    command that resumes from it (what `resume_point` would pick on a rerun)."""
    try:
        point = resume_point(ckpt_path, curriculum=True)
    except ResumeError as e:
        return f"The checkpoint folder cannot be resumed as it is: {e}"
    if not point.step:
        return f"There is no complete checkpoint in {ckpt_path} yet: a rerun starts over."
    how = "run the same command again" if load_enable else "run the same command with --ckpt.load_enable"
    return f"The last complete checkpoint is step {point.step} in {ckpt_path}: {how} to resume from it."
