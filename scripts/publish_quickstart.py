"""Publish a finished `make train` run as the evidence behind the README's quickstart figures.

    .venv/bin/python scripts/publish_quickstart.py RUN_DIR OUT_DIR SETUP_SECONDS [MEMORY_JSON]

RUN_DIR is the run folder (runs/speed_rloo_proving_cpu), SETUP_SECONDS the whole `make train`
from a fresh clone, bootstrap included, as the caller timed it. OUT_DIR gets run.json (the
run's metrics records, its wall clock as its summary.md printed it, the set-up's seconds, the
machine and the date; with MEMORY_JSON, what scripts/mem_peak.py measured around the same
`make train`: `mem_above_idle_gib`, the peak above idle) and curves.png. The README's summary
block is then rebuilt from it by `openrlhf-speed figures --write README.md`
(bench/doc_tables.py, table `quickstart`)."""

import datetime
import json
import os
import re
import shutil
import sys

from openrlhf_speed.compat.precision import machine_kind
from openrlhf_speed.rollout.run_summary import CURVES, METRICS, SUMMARY, read_records, run_records

WALL = re.compile(r"wall clock of the run (?:(\d+)h )?(?:(\d+)m )?(\d+)s")


def wall_seconds(summary: str) -> int:
    """The run's wall clock from its summary.md's steps line (the run prints whole seconds)."""
    m = WALL.search(summary)
    if not m:
        raise SystemExit("publish_quickstart: the summary has no 'wall clock of the run' (a resumed run? "
                         "publish a run made in one leg from a fresh clone)")
    h, mins, s = (int(x or 0) for x in m.groups())
    return 3600 * h + 60 * mins + s


def publish(run_dir: str, out: str, setup_s: float, memory_json: str = "") -> dict:
    with open(os.path.join(run_dir, SUMMARY), encoding="utf-8") as f:
        summary = f.read()
    run = {"date": datetime.date.today().isoformat(), "machine": machine_kind(), "command": "make train",
           "setup_s": round(setup_s), "wall_s": wall_seconds(summary),
           "records": run_records(read_records(os.path.join(run_dir, METRICS)))}
    if memory_json:
        with open(memory_json, encoding="utf-8") as f:
            memory = json.load(f)
        if memory.get("rc") != 0:
            raise SystemExit(f"publish_quickstart: {memory_json} measured a command that failed (exit {memory.get('rc')})")
        run["mem_above_idle_gib"], run["mem_idle_gib"] = memory["above_idle_gib"], memory["idle_gib"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "run.json"), "w", encoding="utf-8") as f:
        json.dump(run, f, indent=None, separators=(",", ":"))
        f.write("\n")
    if os.path.isfile(os.path.join(run_dir, CURVES)):
        shutil.copyfile(os.path.join(run_dir, CURVES), os.path.join(out, CURVES))
    return run


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    done = publish(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) == 5 else "")
    print(f"wrote {sys.argv[2]}/run.json: {len(done['records'])} records, wall {done['wall_s']} s, set-up {done['setup_s']} s")
