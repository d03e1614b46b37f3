"""The SPEED trace file (`--speed.trace_path`), capped by rotation (`--speed.trace_max_mb`).

A trace grows with every request a run makes, so a multi-day run would fill its disk with it.
When the file passes the cap, it is renamed PATH.1 (replacing the previous PATH.1) and a new
PATH starts: at most twice the cap is kept. The rule not to break: every file stands alone
for its readers. A replay (bench/driver.py, cli/replay.py) needs the engine settings and the
text of each prompt it sends, so the header records ("config") open every new file again and
`seen` (the prompts whose text this file holds) starts empty.
"""

import json
import os
from typing import Optional


class TraceFile:
    def __init__(self, path: str, max_bytes: Optional[int] = None):
        self.path = path
        self.max_bytes = max_bytes or None  # None / 0: never rotate
        self.header: list = []  # lines written again at the top of every new file
        self.seen: set = set()  # keys whose record this file holds already (prompt texts)
        self.rotations = 0
        self._f = open(path, "a")

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
        self._f.write("".join(json.dumps(r) + "\n" for r in records))
        self._f.flush()

    def _rotate(self) -> None:
        self._f.close()
        os.replace(self.path, self.path + ".1")
        self._f = open(self.path, "a")
        self._f.writelines(self.header)
        self.seen = set()
        self.rotations += 1

    def close(self) -> None:
        self._f.close()
