"""What makes a checkpoint complete, how start-up finds the last complete one, and what a
full disk during a save leaves behind.

A checkpoint (`--ckpt.path`/_actor/<tag>/) is complete when its manifest, written last,
lists every one of its files and the curriculum state of its step (`_speed/global_stepK.pt`)
with the size and, by default, the sha256 each had when the save returned, after all of
them were fsynced. DeepSpeed's `latest` file alone does not say that: it is written before
the data reaches the disk, so after a node crash it can name a tag whose files are
truncated, zero-filled or missing, and DeepSpeed's loader then fails with a traceback
deep inside torch.load, or loads garbage. The rule not to break: nothing is loaded that
its manifest does not vouch for. `_actor/manifest_format`, written before the first save
of a run, marks a folder whose tags all carry manifests; a folder without it predates
manifests and is resumed as before, unverified.

`last_complete` picks the newest tag whose manifest holds, trying the one `latest` names
first; `apply_resume` points `latest` at it and moves newer tags (half-written, or damaged)
out of `_actor` into `_torn/`: OpenRLHF's rotation counts every folder in `_actor`, and with
a leftover among them it would delete the last complete checkpoint before writing the next.

A save that fails with the disk full (ENOSPC, a quota, or any failure that leaves less free
space than a checkpoint needs: torch's writer reports a full disk without an errno) removes
what it had written of the new tag and stops the run with one line: the folder, the space a
checkpoint needs (the last one's size, or 16 bytes a parameter for a first one: fp32 Adam
moments and master weights, and the weights), what is free, and where a rerun resumes.
"""

import errno
import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import List, NamedTuple, Optional

from openrlhf_speed.storage.atomic import fsync_path, replace_file

MANIFEST = "openrlhf_speed_manifest.json"
FORMAT_MARKER = "manifest_format"  # in _actor/, beside DeepSpeed's `latest`
TORN_DIR = "_torn"
NO_MANIFEST = "it has no readable manifest: its save did not finish"
BYTES_PER_PARAM = 16
_CHUNK = 1 << 22
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)  # a full disk, or a full quota


class DiskFullError(RuntimeError):
    """A file of the run (a checkpoint, the trace, the run log) could not be written for lack
    of space; cli/train.py prints it as one line and exits 1."""


class CheckpointDiskFullError(DiskFullError):
    """A checkpoint could not be written for lack of space."""


class TagCheck(NamedTuple):
    """What verify found for one checkpoint tag against its manifest."""

    tag: str
    step: int
    problem: Optional[str]  # None: complete


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(root: str) -> List[str]:
    out = []
    for folder, _, names in os.walk(root):
        out += [os.path.join(folder, n) for n in names if n != MANIFEST]
    return sorted(out)


def mark_folder(ckpt_path: str) -> None:
    """Before the run's first actor save: every tag of this folder will carry a manifest."""
    actor = os.path.join(ckpt_path, "_actor")
    os.makedirs(actor, exist_ok=True)
    marker = os.path.join(actor, FORMAT_MARKER)
    if not os.path.isfile(marker):
        with open(marker, "w") as f:
            f.write("1\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_path(actor)


def uses_manifests(ckpt_path: str) -> bool:
    return os.path.isfile(os.path.join(ckpt_path, "_actor", FORMAT_MARKER))


def write_manifest(ckpt_path: str, tag: str, state_path: Optional[str], hashed: bool = True) -> dict:
    """After the actor's save of `tag` returned: fsync its files (and the curriculum state),
    then write the manifest atomically. Paths are relative to `ckpt_path`."""
    tag_dir = os.path.join(ckpt_path, "_actor", tag)
    paths = _files(tag_dir) + ([state_path] if state_path else [])

    def entry(path):
        fsync_path(path)  # the data must be on disk before the manifest vouches for it
        return [os.path.getsize(path), _sha256(path) if hashed else None]

    # sha256 releases the GIL: the ranks' files hash in parallel.
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(paths)))) as pool:
        entries = list(pool.map(entry, paths))
    manifest = {"format": 1, "tag": tag, "state": os.path.relpath(state_path, ckpt_path) if state_path else None,
                "files": {os.path.relpath(p, ckpt_path): e for p, e in zip(paths, entries)}}
    replace_file(os.path.join(tag_dir, MANIFEST), lambda f: json.dump(manifest, f), text=True, durable=True)
    return manifest


def _read(ckpt_path: str, tag: str) -> dict:
    with open(os.path.join(ckpt_path, "_actor", tag, MANIFEST)) as f:
        return json.load(f)


def holds_state(ckpt_path: str, tag: str) -> bool:
    """Whether the manifest of `tag` lists a curriculum state (a SPEED run wrote it)."""
    try:
        return bool(_read(ckpt_path, tag).get("state"))
    except (OSError, ValueError):
        return False


def manifest_bytes(ckpt_path: str, tag: str) -> Optional[int]:
    """The bytes a complete checkpoint `tag` holds (its files and curriculum state), or None."""
    try:
        return sum(size for size, _ in _read(ckpt_path, tag)["files"].values())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_checkpoint_bytes(ckpt_path: str, exclude: str) -> Optional[int]:
    """The size of the newest tag with a manifest other than `exclude` (the one being written):
    what the next checkpoint will need."""
    actor = os.path.join(ckpt_path, "_actor")
    tags = [t for t in (os.listdir(actor) if os.path.isdir(actor) else []) if t != exclude]
    sized = [(os.path.getmtime(os.path.join(actor, t, MANIFEST)), t) for t in tags
             if os.path.isfile(os.path.join(actor, t, MANIFEST))]
    return manifest_bytes(ckpt_path, max(sized)[1]) if sized else None


def verify(ckpt_path: str, tag: str, step: int) -> TagCheck:
    """Whether `tag` is complete: its manifest is readable and every file it lists has the
    recorded size and sha256. The problem names the first file that differs."""
    tag_dir = os.path.join(ckpt_path, "_actor", tag)
    if not os.path.isdir(tag_dir):
        return TagCheck(tag, step, f"its folder {tag_dir} is missing")
    try:
        manifest = _read(ckpt_path, tag)
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return TagCheck(tag, step, NO_MANIFEST)
    for rel, (size, _) in files.items():  # sizes first: cheap, and they catch most damage
        path = os.path.join(ckpt_path, rel)
        if not os.path.isfile(path):
            return TagCheck(tag, step, f"{rel} is missing")
        if os.path.getsize(path) != size:
            return TagCheck(tag, step, f"{rel} has {os.path.getsize(path):,} bytes, its manifest says {size:,}")
    hashed = [(rel, digest) for rel, (_, digest) in files.items() if digest]
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(hashed)))) as pool:
        actual = list(pool.map(lambda item: _sha256(os.path.join(ckpt_path, item[0])), hashed))
    for (rel, digest), got in zip(hashed, actual):
        if got != digest:
            return TagCheck(tag, step, f"{rel} does not match its sha256 (overwritten or corrupted)")
    return TagCheck(tag, step, None)


def last_complete(ckpt_path: str, named: Optional[TagCheck], tags: list):
    """(the complete TagCheck to resume from or None, the problem of the one `latest` names or
    None). `named`: (tag, step) from `latest`, or None when it is unreadable; `tags`: every
    (tag, step) in _actor, tried newest first."""
    first = verify(ckpt_path, named.tag, named.step) if named else None
    if first is not None and first.problem is None:
        return first, None
    for tag, step in sorted(tags, key=lambda t: (-t[1], t[0].startswith("best_"))):
        if named and (tag == named.tag or step > named.step):
            continue  # tried already, or newer than `latest`: a save that never completed
        v = verify(ckpt_path, tag, step)
        if v.problem is None:
            return v, first.problem if first else "`latest` is unreadable"
    return None, first.problem if first else "`latest` is unreadable"


def apply_resume(ckpt_path: str, keep: Optional[TagCheck], tags: list, damaged: Optional[str]) -> List[str]:
    """Point `latest` at `keep` (remove it when None: start fresh) and move the tags newer
    than `keep`, which never completed, and the `damaged` one into _torn/. Returns the moved
    folders' paths."""
    actor = os.path.join(ckpt_path, "_actor")
    latest = os.path.join(actor, "latest")
    current = open(latest).read().strip() if os.path.isfile(latest) else None
    if keep is None and current is not None:
        os.remove(latest)
    elif keep is not None and current != keep.tag:
        replace_file(latest, lambda f: f.write(keep.tag), text=True, durable=True)
    moved = []
    for tag, step in tags:
        if keep is None or (tag != keep.tag and (step > keep.step or tag == damaged)):
            dst = os.path.join(ckpt_path, TORN_DIR, tag)
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(os.path.join(actor, tag), dst)
            moved.append(dst)
    fsync_path(actor)
    return moved


# -- a full disk while saving ---------------------------------------------------------------
def _chain(error: BaseException):
    """The error, its causes and contexts, and Ray's wrapped `cause` (an actor's failure)."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]


def is_disk_full(error: BaseException, folder: str, needed: Optional[int]) -> bool:
    """ENOSPC or a quota anywhere in the chain, or less free space in `folder` now than a
    checkpoint needs (`needed` bytes): torch's zip writer reports a full disk without errno."""
    for e in _chain(error):
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return True
        if isinstance(e, BaseException) and ("No space left on device" in str(e) or "Disk quota exceeded" in str(e)):
            return True
    return needed is not None and free_bytes(folder) < needed


def free_bytes(folder: str) -> int:
    while not os.path.isdir(folder):  # the folder may not exist yet: its nearest ancestor's disk
        folder = os.path.dirname(folder) or "."
    return shutil.disk_usage(folder).free


def model_state_bytes(model_path: str) -> Optional[int]:
    """BYTES_PER_PARAM x the parameters in the model folder's safetensors files (headers only),
    the estimate of a first checkpoint; None when the folder has none."""
    try:
        from safetensors import safe_open

        names = [n for n in os.listdir(model_path) if n.endswith(".safetensors")]
        total = 0
        for name in names:
            with safe_open(os.path.join(model_path, name), "pt") as f:
                for key in f.keys():
                    n = 1
                    for d in f.get_slice(key).get_shape():
                        n *= d
                    total += n
        return total * BYTES_PER_PARAM if total else None
    except (OSError, ImportError, ValueError):
        return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def disk_full_message(folder: str, tag: str, needed: Optional[int], resume: str) -> str:
    need = f"about {_gb(needed)}" if needed else "more space"
    return (f"disk full while writing checkpoint {tag} to {folder}: a checkpoint needs {need} free there, "
            f"{_gb(free_bytes(folder))} is free (the unfinished {tag} was removed). {resume}")
