"""A file replaced whole or not at all, a folder made whole or not at all, and the fsync that
makes a write or a rename durable.

`replace_file(path, write)` has `write(f)` fill a temporary file beside `path`
(`PATH.tmp.<pid>`: two processes may write the same path at once) and renames it over `path`,
so a reader sees the old content or the complete new one, never a prefix. With
`durable=True` the file is fsynced before the rename and its folder after it: a rename is
durable only once its directory entry is (checkpoints, `latest`, manifests). On any error
the temporary file is removed and the error raised; what a full disk means is the caller's
to say (rollout/ckpt_manifest.DiskFullError, or a cache that skips the write).

`make_folder(out, fill, complete)` is the same for a folder of the cache (the embedded model,
its data, a proving-ground build): `fill(tmp)` writes a temporary folder beside `out`, which is
renamed to `out`. Two processes may build it at once: the one that renames second keeps the
other's folder when `complete(out)` says it is whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Callable, TypeVar

T = TypeVar("T")


def fsync_path(path: str) -> None:
    """fsync a file or a folder by its path (a folder: its directory entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str, write: Callable[[IO], object], *, text: bool = False, durable: bool = False) -> None:
    """Replace `path` with what `write(f)` writes to an open file (text mode with `text`,
    UTF-8), whole or not at all; `durable`: fsync the file, then its folder."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") if text else open(tmp, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            with contextlib.suppress(OSError):  # the write's own error is the one to raise
                os.remove(tmp)
    if durable:
        fsync_path(folder)


def make_folder(out: Path, fill: Callable[[Path], T], complete: Callable[[Path], bool]) -> T:
    """Make folder `out` whole or not at all: what `fill(tmp)` returns, after the rename; the
    temporary folder is removed on any error (an interrupt too)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        result = fill(tmp)
        try:
            os.rename(tmp, out)
        except OSError:
            if not complete(out):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process made it first: theirs is fine
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result
