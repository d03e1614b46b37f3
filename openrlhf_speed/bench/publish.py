"""`bench --publish DIR [--publish_docs DOCS]`: a benchmark's figures and the evidence they
come from, kept apart from the documents that read them.

The proving benchmark's runs take longer than one working session, and a machine is not kept
from one session to the next. So publishing copies, into DIR (e.g. benchmarks/proving-v4/avx2),
everything the report and `--resume` read: results.json (every figure), bench.json (settings,
plan and target rule, fixed before the first run), the engine and driver results, and each
finished run's metrics.jsonl and done.json, about 100 KB a run; checkpoints and train.log (MBs)
stay behind. The report's documents, summary.md and accuracy.png, go to DOCS (e.g.
docs/proving-v4/avx2), or beside the data without --publish_docs. From DIR:

    mkdir -p runs && cp -r benchmarks/proving-v4/avx2 runs/bench_proving
    make bench-proving BENCH_ARGS="--resume <its --curricula and --runs>"

goes on with the remaining runs on another machine. `--resume` still refuses a machine of
another kind, since bench.json's versions name the CPU's ISA and bf16. And
`bench --report_only --out <copy of DIR>` recomputes every figure from the commit.

The rule not to break: DIR holds exactly the evidence of the report beside it. A run folder
from an older publish that this report leaves out is removed, so it cannot be read as part of
the figures; files that are not evidence are left alone.
"""

from __future__ import annotations

import os
import shutil

EVIDENCE_FILES = ("bench.json", "engine_result.json", "driver.json")
RUN_FILES = ("metrics.jsonl", "done.json")
DATA_REPORTS = ("json",)  # write_all's results.json; its md and png are documents


def _copy(src: str, dst_dir: str) -> None:
    dst = os.path.join(dst_dir, os.path.basename(src))
    if not os.path.exists(dst) or not os.path.samefile(src, dst):
        shutil.copy(src, dst)


def _clear_old_evidence(dest: str) -> None:
    """The evidence files and run folders (those holding a metrics.jsonl or done.json) of an
    older publish in dest."""
    for name in sorted(os.listdir(dest)):
        path = os.path.join(dest, name)
        if name in EVIDENCE_FILES and os.path.isfile(path):
            os.remove(path)
        elif os.path.isdir(path) and any(os.path.isfile(os.path.join(path, f)) for f in RUN_FILES):
            shutil.rmtree(path)


def publish(out: str, dest: str, report_paths: dict, run_keys: list, docs: str | None = None) -> str:
    """Copy results.json and the evidence of run_keys from out into dest, and the report's
    documents (summary.md, accuracy.png) into docs (default: dest). report_paths is write_all's
    {kind: path}. Returns dest."""
    docs = docs or dest
    for folder in (dest, docs):
        os.makedirs(folder, exist_ok=True)
    for kind, path in report_paths.items():
        _copy(path, dest if kind in DATA_REPORTS else docs)
    if os.path.realpath(dest) == os.path.realpath(out):
        return dest  # a report rebuilt from the published evidence itself
    _clear_old_evidence(dest)
    for name in EVIDENCE_FILES:
        if os.path.isfile(os.path.join(out, name)):
            shutil.copy(os.path.join(out, name), os.path.join(dest, name))
    for key in run_keys:
        os.makedirs(os.path.join(dest, key))
        for name in RUN_FILES:
            if os.path.isfile(os.path.join(out, key, name)):
                shutil.copy(os.path.join(out, key, name), os.path.join(dest, key, name))
    return dest
