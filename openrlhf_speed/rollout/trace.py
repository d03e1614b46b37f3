"""The SPEED trace file (`--speed.trace_path`), capped by rotation (`--speed.trace_max_mb`).

A trace grows with every request a run makes, so a multi-day run would fill its disk with it.
When the file passes the cap, it is renamed PATH.1 (replacing the previous PATH.1) and a new
PATH starts: at most twice the cap is kept. The rule not to break: every file stands alone
for its readers. A replay (bench/driver.py, cli/replay.py) needs the engine settings and the
text of each prompt it sends, so the header records ("config") open every new file again and
`seen` (the prompts whose text this file holds) starts empty.

A full disk under a write (the trace here, the run log in rollout/trainer.py) cuts the file
back to its last whole line and stops the run with DiskFullError, one line naming the file:
a torn last line would break every reader, and a resumed run appends after it. Opening the
file on a full disk (a new file needs a directory entry) stops it the same way.
"""

import json
import os
from typing import Optional

from openrlhf_speed.rollout.ckpt_manifest import FULL_ERRNOS, DiskFullError, free_bytes


def disk_full(what: str, path: str, needed: int, kept: str) -> DiskFullError:
    """The one-line error for a run file that did not fit: `kept` says what the file still holds."""
    folder = os.path.dirname(os.path.abspath(path))
    return DiskFullError(
        f"disk full while writing {what} {path}: {free_bytes(folder) / 1e6:.1f} MB is free in {folder} "
        f"({needed} bytes were needed; {kept}). Free space there and rerun; a run that saves checkpoints "
        "resumes from its last complete one with --ckpt.load_enable")


def open_append(path: str, what: str):
    """`path` opened unbuffered for binary appends, its folder made first; a full disk (no room
    for a new file's entry) raises DiskFullError."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "ab", buffering=0)
    except OSError as e:
        if e.errno not in FULL_ERRNOS:
            raise
        raise disk_full(what, path, 0, "nothing was written to it") from e


def append_whole(f, data: bytes, what: str) -> None:
    """Append `data` to `f` (a binary file opened unbuffered in append mode): all of it, or on a
    full disk none of it and DiskFullError; `what` names the file for the message."""
    start = os.fstat(f.fileno()).st_size
    view = memoryview(data)
    try:
        while view:  # an unbuffered write may take part of the data
            view = view[f.write(view):]
    except OSError as e:
        if e.errno not in FULL_ERRNOS:
            raise
        try:
            os.ftruncate(f.fileno(), start)
        except OSError:  # a device file (/dev/full) has no length to cut back to
            pass
        raise disk_full(what, f.name, len(data), "the file keeps its last whole line") from e


class TraceFile:
    def __init__(self, path: str, max_bytes: Optional[int] = None):
        self.path = path
        self.max_bytes = max_bytes or None  # None / 0: never rotate
        self.header: list = []  # lines written again at the top of every new file
        self.seen: set = set()  # keys whose record this file holds already (prompt texts)
        self.rotations = 0
        self._f = open_append(path, "the trace")

    def write(self, *records: dict, header: bool = False, once=None) -> None:
        """Append `records`; `header`: also open every later file with them. `once`: (key,
        record), written first unless this file holds it already (a prompt's text, which its
        requests need in the same file)."""
        if header:
            self.header.append("".join(json.dumps(r) + "\n" for r in records))
        elif self.max_bytes is not None and self._f.tell() >= self.max_bytes:
            self._rotate()
        if once is not None and once[0] not in self.seen:
            self.seen.add(once[0])
            records = (once[1], *records)
        append_whole(self._f, "".join(json.dumps(r) + "\n" for r in records).encode(), "the trace")

    def _rotate(self) -> None:
        self._f.close()
        os.replace(self.path, self.path + ".1")
        self._f = open_append(self.path, "the trace")
        append_whole(self._f, "".join(self.header).encode(), "the trace")
        self.seen = set()
        self.rotations += 1

    def close(self) -> None:
        self._f.close()
