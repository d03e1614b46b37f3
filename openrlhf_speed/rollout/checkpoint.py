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

`latest` says a save returned, not that its data reached the disk: in a folder whose tags
carry manifests (rollout/ckpt_manifest.py, written after each save), `resume_point`
resumes from the newest tag its manifest vouches for, and says in one line which one was
damaged, instead of handing DeepSpeed's loader a truncated file. That needs a previous
checkpoint to fall back to: `--ckpt.max_num` >= 2 (cli/flags.py refuses 1 with --ckpt.load_enable).
"""

import os
import re
from typing import NamedTuple, Optional

from openrlhf_speed.rollout import ckpt_manifest as manifest
from openrlhf_speed.storage.atomic import replace_file

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
    one, never a prefix, durably (storage/atomic.replace_file)."""
    import torch

    replace_file(path, lambda f: torch.save(obj, f), durable=True)


def adopt_folder(ckpt_path: str, hashed: bool = True) -> None:
    """Before a save: mark the folder as one whose tags carry manifests. The tags it holds
    already (a folder written before manifests, resumed) get theirs now, with their step's
    curriculum state: they are trusted as they were before, the new ones are verified."""
    if manifest.uses_manifests(ckpt_path):
        return
    actor_dir = os.path.join(ckpt_path, ACTOR_DIR)
    named = _read_latest(actor_dir)
    for tag, step in _tags(actor_dir):
        # Newer than `latest`: a save that never completed, not to be vouched for.
        if named and step <= named.step and not os.path.isfile(os.path.join(actor_dir, tag, manifest.MANIFEST)):
            state = curriculum_state_path(ckpt_path, step)
            manifest.write_manifest(ckpt_path, tag, state if os.path.isfile(state) else None, hashed=hashed)
    manifest.mark_folder(ckpt_path)


def saved_steps(ckpt_path: str) -> list:
    """Steps with a complete curriculum state file, ascending (temporary files excluded)."""
    folder = os.path.join(ckpt_path, SPEED_DIR)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(int(m.group(1)) for m in map(re.compile(r"global_step(\d+)\.pt").fullmatch, names) if m)


def resume_point(ckpt_path: str, curriculum: bool, apply: bool = False) -> ResumePoint:
    """Where `--ckpt.load_enable` resumes: the step of the tag `_actor/latest` names, or 0
    (fresh) when there is no `latest` yet. `curriculum`: the SPEED driver runs, so the
    curriculum state of that step must exist too. Raises ResumeError when `latest` is
    unreadable or names something missing: resuming then would lose or repeat steps.
    In a folder with manifests, the newest verified tag instead (`_verified_resume_point`);
    `apply`: also point `latest` at it and move what is newer or damaged aside."""
    if manifest.uses_manifests(ckpt_path):
        return _verified_resume_point(ckpt_path, curriculum, apply)
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


def _tags(actor_dir: str) -> list:
    """(tag, step) of every checkpoint folder in `actor_dir`."""
    names = sorted(os.listdir(actor_dir)) if os.path.isdir(actor_dir) else []
    return [(n, int(m.group(1))) for n in names
            if (m := _TAG.fullmatch(n)) and os.path.isdir(os.path.join(actor_dir, n))]


def _read_latest(actor_dir: str) -> Optional[manifest.TagCheck]:
    try:
        with open(os.path.join(actor_dir, LATEST)) as f:
            tag = f.read().strip()
    except OSError:
        return None
    m = _TAG.fullmatch(tag)
    return manifest.TagCheck(tag, int(m.group(1)), None) if m else None


def _verified_resume_point(ckpt_path: str, curriculum: bool, apply: bool) -> ResumePoint:
    """The newest tag whose manifest holds, the one `latest` names first. What is newer
    never completed; a damaged `latest` tag is named in the message, never loaded."""
    actor_dir = os.path.join(ckpt_path, ACTOR_DIR)
    tags, named = _tags(actor_dir), _read_latest(actor_dir)
    keep, problem = manifest.last_complete(ckpt_path, named, tags)
    if keep is not None and curriculum and not manifest.holds_state(ckpt_path, keep.tag):
        raise ResumeError(
            f"resuming from {keep.tag}, but it holds no curriculum state: it was written by a run without the "
            "SPEED driver (--speed.strategy off). Resume with the flags it was written with, or start over "
            "without --ckpt.load_enable."
        )
    damaged = named.tag if named is not None and problem else None
    moved = manifest.apply_resume(ckpt_path, keep, tags, damaged) if apply and tags else []
    newer = [f"{ACTOR_DIR}/{t}" for t, s in tags if keep is None or (s > keep.step)]
    newer += [f"{SPEED_DIR}/global_step{s}.pt" for s in saved_steps(ckpt_path) if keep is None or s > keep.step]
    where = f"; moved to {os.path.join(ckpt_path, manifest.TORN_DIR)}, delete them when done" if moved else ""
    # A `latest` tag without a manifest is a save cut short (killed after DeepSpeed wrote
    # `latest`), like a newer tag without `latest`; a manifest that no longer holds is damage.
    cut_short = named is None or problem in (None, manifest.NO_MANIFEST)
    if keep is None:
        if cut_short:
            ignored = f" (ignoring the incomplete {', '.join(t for t, _ in tags)}{where})" if tags else ""
            return ResumePoint(0, f"no complete checkpoint in {ckpt_path} yet: starting fresh{ignored}")
        return ResumePoint(0, f"checkpoint {named.tag} in {ckpt_path} is damaged ({problem}) and no older one is "
                              f"complete: starting fresh{where}")
    if named is not None and cut_short:
        ignored = f" (ignoring what a crashed save left after it: {', '.join(newer)}{where})" if newer else ""
        return ResumePoint(keep.step, f"resuming from step {keep.step} ({keep.tag} in {ckpt_path}){ignored}")
    if named is None:
        return ResumePoint(keep.step, f"{actor_dir}/{LATEST} is missing or unreadable: resuming from the newest "
                                      f"complete checkpoint, step {keep.step} ({keep.tag} in {ckpt_path}){where}")
    return ResumePoint(keep.step, f"checkpoint {named.tag} is damaged ({problem}): resuming from the previous "
                                  f"complete checkpoint, step {keep.step} ({keep.tag} in {ckpt_path}){where}")


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
