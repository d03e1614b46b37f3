"""`bench --publish DIR`: the report's figures for docs/, and the evidence they come from.

The proving benchmark's 16 runs take longer than one working session, and a machine is not
kept from one session to the next. So besides results.json, summary.md and accuracy.png,
publishing copies what the report and `--resume` read: bench.json (settings, plan and
target rule, fixed before the first run), the engine and driver results, and each finished
run's metrics.jsonl and done.json. That is about 100 KB a run; checkpoints and train.log (MBs)
stay behind. The copy goes to DIR/<name of --out>, and from there:

    cp -r docs/bench_proving runs/ && make bench-proving BENCH_ARGS="--resume <its --curricula and --runs>"

goes on with the remaining runs on another machine. `--resume` still refuses a machine of
another kind, since bench.json's versions name the CPU's ISA and bf16. And
`bench --report_only --out <copy>` recomputes every figure from the commit.
"""

from __future__ import annotations

import os
import shutil

EVIDENCE_FILES = ("bench.json", "engine_result.json", "driver.json")
RUN_FILES = ("metrics.jsonl", "done.json")


def publish(out: str, dest: str, report_paths: list, run_keys: list) -> str:
    """Copy the report files into dest and the evidence of run_keys into dest/<basename of out>,
    replacing an older copy, so that a run left out of this report cannot linger there.
    Returns the evidence folder."""
    os.makedirs(dest, exist_ok=True)
    for path in report_paths:
        shutil.copy(path, os.path.join(dest, os.path.basename(path)))
    evidence = os.path.join(dest, os.path.basename(os.path.normpath(out)))
    if os.path.realpath(evidence) == os.path.realpath(out):
        return evidence  # a report rebuilt from the published copy itself
    if os.path.exists(evidence):
        shutil.rmtree(evidence)
    os.makedirs(evidence)
    for name in EVIDENCE_FILES:
        if os.path.isfile(os.path.join(out, name)):
            shutil.copy(os.path.join(out, name), os.path.join(evidence, name))
    for key in run_keys:
        os.makedirs(os.path.join(evidence, key))
        for name in RUN_FILES:
            if os.path.isfile(os.path.join(out, key, name)):
                shutil.copy(os.path.join(out, key, name), os.path.join(evidence, key, name))
    return evidence
