"""Run a command and record the machine's memory in use above what it used before the command:
the evidence behind docs/cpu.md's "a default run peaks at ... GiB above idle".

    python scripts/mem_peak.py OUT.json -- make train

In use is MemTotal - MemAvailable from /proc/meminfo, sampled every second: it counts every
process of the run (Ray, the vLLM engine and its workers, the actor, the trainer) and, like
any machine-wide figure, anything else running beside it, so run it on a machine left alone.
Idle is the lowest of five samples taken before the command starts. The command's exit status
is passed on; the JSON is written either way."""

import json
import subprocess
import sys
import threading
import time

GIB = 1024 ** 3


def in_use_bytes(meminfo: str = "/proc/meminfo") -> int:
    fields = {}
    with open(meminfo, encoding="ascii") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024  # kB
    if "MemAvailable" not in fields:
        raise SystemExit(f"mem_peak: {meminfo} has no MemAvailable (Linux 3.14 or later has it)")
    return fields["MemTotal"] - fields["MemAvailable"]


def measure(cmd: list, every_s: float = 1.0, idle_samples: int = 5, sample=in_use_bytes) -> dict:
    before = []
    for _ in range(idle_samples):
        before.append(sample())
        time.sleep(every_s / idle_samples)
    idle = min(before)
    peak = [idle]
    done = threading.Event()

    def watch():
        while not done.wait(every_s):
            peak[0] = max(peak[0], sample())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.time()
    rc = subprocess.call(cmd)
    done.set()
    watcher.join()
    peak[0] = max(peak[0], sample())
    return {"command": " ".join(cmd), "rc": rc, "seconds": round(time.time() - start),
            "idle_gib": round(idle / GIB, 2), "peak_gib": round(peak[0] / GIB, 2),
            "above_idle_gib": round((peak[0] - idle) / GIB, 2)}


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        raise SystemExit(__doc__)
    result = measure(sys.argv[3:])
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"mem_peak: {result['above_idle_gib']} GiB above idle ({result['idle_gib']} -> {result['peak_gib']} GiB), "
          f"{result['seconds']} s, exit {result['rc']}", file=sys.stderr)
    sys.exit(result["rc"])
