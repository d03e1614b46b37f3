"""What a rerun that resumes need not compute again over the whole dataset.

Two passes over every prompt run before a step: the train command reads and checks each row of
--data.prompt_dataset (cli/preflight.py), and the SPEED driver counts each rendered prompt's
tokens to skip those over the prompt limit (rollout/speed_generator.drop_too_long). At 400,000
prompts they took about 25 s and 8 s of 2 cores, spent again by every rerun of the same command.
Their results are kept in the checkpoint folder, beside the checkpoints they belong to, and
reused only when what they were computed from is unchanged:

- `dataset_check.json`: the check's notes, under each dataset file's size and modification
  time (nanoseconds, what make and rsync trust) and every flag the check reads. A rerun with
  --ckpt.load_enable whose files and flags match reuses the notes; any difference (the file
  edited, replaced or touched, another tokenizer, key or prompt limit) reads the rows again.
- `prompts_too_long.json`: the driver's skipped prompt indices, under a sha256 of every rendered
  prompt, the limit and the tokenizer's own definition: equal inputs give equal counts, so the
  reuse is exact.

Both are written only by runs that save checkpoints (--ckpt.save_steps > 0), since the folder is
theirs, and are a cache: a record that cannot be read or written is recomputed, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Optional

from openrlhf_speed.storage.atomic import replace_file

FORMAT = 1
DATASET_CHECK = "dataset_check.json"
TOO_LONG = "prompts_too_long.json"


def _write(path: str, record: dict) -> None:
    """Atomically, or not at all (a full disk or a read-only folder leaves no record)."""
    with contextlib.suppress(OSError):
        replace_file(path, lambda f: json.dump(record, f), text=True)


def _read(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


def saves_checkpoints(args) -> bool:
    ckpt = getattr(args, "ckpt", None)
    return bool(ckpt is not None and ckpt.path and (ckpt.save_steps or 0) > 0)


def _resumes(args) -> bool:
    """A rerun asked to resume (--ckpt.load_enable): the only run that reuses a record."""
    ckpt = getattr(args, "ckpt", None)
    return bool(ckpt is not None and ckpt.path and getattr(ckpt, "load_enable", False))


# -- the train command's dataset check (cli/preflight.py) ------------------------------------
def _file_stats(path: str) -> list:
    """[relative path, size, mtime_ns] of a file, or of every file under a folder."""
    if os.path.isfile(path):
        st = os.stat(path)
        return [[os.path.basename(path), st.st_size, st.st_mtime_ns]]
    out = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            st = os.stat(full)
            out.append([os.path.relpath(full, path), st.st_size, st.st_mtime_ns])
    return out


def dataset_identity(args, paths: list) -> Optional[dict]:
    """What the dataset check's result depends on; None when a path cannot be read."""
    data = args.data
    try:
        files = {os.path.abspath(os.path.expanduser(p)): _file_stats(os.path.expanduser(p)) for p in paths}
    except OSError:
        return None
    flags = {"input_key": data.input_key, "label_key": data.label_key, "prompt_split": getattr(data, "prompt_split", None),
             "apply_chat_template": bool(getattr(data, "apply_chat_template", False)),
             "input_template": getattr(data, "input_template", None), "max_samples": getattr(data, "max_samples", None),
             "max_len": data.max_len, "max_new_tokens": getattr(args.rollout, "max_new_tokens", None),
             "batch_size": args.rollout.batch_size, "tokenizer": getattr(args.actor, "model_name_or_path", None),
             "reward": getattr(args.reward, "remote_url", None)}
    return {"files": files, "flags": flags}


def reused_check(args, paths: list) -> Optional[list]:
    """The notes of an earlier, passed check of these files under these flags, or None."""
    if not _resumes(args):
        return None
    record = _read(os.path.join(args.ckpt.path, DATASET_CHECK))
    identity = dataset_identity(args, paths)
    if record is None or identity is None or record.get("identity") != identity:
        return None
    return list(record.get("notes", []))


def save_check(args, paths: list, notes: list) -> None:
    identity = dataset_identity(args, paths) if saves_checkpoints(args) else None
    if identity is not None:
        _write(os.path.join(args.ckpt.path, DATASET_CHECK), {"format": FORMAT, "identity": identity, "notes": notes})


# -- the SPEED driver's prompt-length count (rollout/speed_generator.py) ----------------------
def _tokenizer_digest(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        text = backend.to_str()  # the whole definition: vocabulary, merges, normalizer, added tokens
    else:
        text = f"{type(tokenizer).__name__}:{getattr(tokenizer, 'name_or_path', '')}:{len(tokenizer)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompts_key(prompts: list, tokenizer, limit: int) -> str:
    h = hashlib.sha256(f"{FORMAT}:{limit}:{_tokenizer_digest(tokenizer)}:{len(prompts)}".encode())
    for p in prompts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def reused_too_long(args, key: str) -> Optional[list]:
    """The skipped indices counted earlier for exactly these prompts, tokenizer and limit, or None."""
    if not _resumes(args):
        return None  # a run that starts fresh counts afresh
    record = _read(os.path.join(args.ckpt.path, TOO_LONG))
    if record is None or record.get("key") != key or not isinstance(record.get("dropped"), list):
        return None
    return record["dropped"]


def save_too_long(args, key: str, dropped: list) -> None:
    if saves_checkpoints(args):
        _write(os.path.join(args.ckpt.path, TOO_LONG), {"format": FORMAT, "key": key, "dropped": dropped})
