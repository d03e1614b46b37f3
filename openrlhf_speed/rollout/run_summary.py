"""What a finished `openrlhf-speed train` run leaves beside its checkpoints: `summary.md`, one
screen built from the run's metrics records (`--log.jsonl`), and where every output is.

The run folder is the parent of `--ckpt.path` (the recipes' OUT; `./ckpt` by OpenRLHF's own
defaults, where its final model goes too). `--log.jsonl` defaults to RUN/metrics.jsonl, so
every run keeps the records its summary and `curves.png` (rollout/curves.py) are made from.

The records of one run: a metrics log is appended to, by a resumed run and by a fresh run in
the same folder alike. A fresh run starts at its step-0 evaluation or at step 1 (a resume
starts past its checkpoint's step); steps a resume repeated count once, the later record.
The training clock (`train_wall_s`) restarts with each process, so the run's is the sum of
each leg's last reading. `build_summary` is pure; docs/design.md ("What a run leaves
behind") has the layout.
"""

import contextlib
import json
import math
import os
from typing import NamedTuple, Optional

from openrlhf_speed.rollout.ckpt_manifest import FULL_ERRNOS
from openrlhf_speed.rollout.trace import disk_full
from openrlhf_speed.storage.atomic import replace_file

SUMMARY = "summary.md"
CURVES = "curves.png"
METRICS = "metrics.jsonl"


class RunFiles(NamedTuple):
    """Where a run's outputs are; None: not kept (the flag that keeps it is in the summary)."""
    folder: str
    checkpoint: Optional[str]  # --ckpt.path, when --ckpt.save_steps saves any
    metrics: Optional[str]  # --log.jsonl
    tensorboard: Optional[str]  # --logger.tensorboard_dir
    trace: Optional[str]  # --speed.trace_path
    save_steps: Optional[int] = None  # --ckpt.save_steps, for the last saved step


def run_folder(ckpt_path: str) -> str:
    return os.path.dirname(os.path.abspath(ckpt_path))


def run_files(args) -> RunFiles:
    """The outputs of a run with these (parsed) flags."""
    save = args.ckpt.save_steps
    saves = isinstance(save, int) and save > 0  # OpenRLHF turns -1 into inf: no checkpoints
    speed = getattr(args, "speed", None)
    return RunFiles(run_folder(args.ckpt.path), os.path.abspath(args.ckpt.path) if saves else None,
                    args.log.jsonl, args.logger.tensorboard_dir, getattr(speed, "trace_path", None),
                    save if saves else None)


def read_records(path: str) -> list:
    """The JSON records of a metrics log; a line cut short (a crash mid-write) is skipped."""
    records = []
    with open(path) as f:
        for line in f:
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
    return [r for r in records if isinstance(r, dict)]


def run_records(records: list) -> list:
    """The records of the log's last run, a repeated step's later record only, in step order."""
    start = 0
    for i, r in enumerate(records):
        prev = records[i - 1] if i else {}
        fresh_eval = r.get("event") == "eval" and r.get("step") == 0
        fresh_step = r.get("event") == "step" and r.get("step") == 1 and not (
            prev.get("event") == "eval" and prev.get("step") == 0)
        if fresh_eval or fresh_step:
            start = i
    latest = {}
    for r in records[start:]:
        latest[(r.get("event"), r.get("step"))] = r
    # Step K's record, then the evaluation after it; a record without a step (the generation-only
    # drain) last. Sorted, a leg's clock still restarts where the leg does (training_seconds).
    order = {"step": 0, "eval": 1}
    return sorted(latest.values(), key=lambda r: (r.get("step", math.inf), order.get(r.get("event"), 2)))


def training_seconds(records: list) -> tuple:
    """(seconds on the training clock over every leg, legs) of `run_records`' records."""
    total, last, legs = 0.0, None, 0
    for r in records:
        t = r.get("train_wall_s")
        if not _finite(t):
            continue
        if last is None or t < last:  # a new process: its clock started over
            total, legs = total + (last or 0.0), legs + 1
        last = t
    return total + (last or 0.0), legs


def build_summary(records: list, files: RunFiles, rerun: str, curves: str, wall_s: Optional[float] = None) -> str:
    """The summary of one run (`run_records` of its log) as markdown that reads on a terminal:
    figures, files, and the commands that resume it (`rerun`) and view its curves (`curves`);
    `wall_s`: the last leg's seconds from start to end, when known."""
    steps = [r for r in records if r.get("event") == "step"]
    evals = [r for r in records if r.get("event") == "eval" and _finite(r.get("eval_accuracy"))]
    lines = [f"# Run summary: {files.folder}", ""]
    lines.append("- " + _steps_line(steps, records, wall_s))
    lines.append("- held-out accuracy: " + _accuracy_line(evals))
    lines.append("- reward: " + _first_last(steps, "rollout/reward_mean", "{:.3f}"))
    lines.append("- tokens: " + _tokens_line(steps))
    lines.append("- qualification: " + _qualification_line(steps))
    lines += ["", "Files:", ""] + [f"- {name}: {where}" for name, where in _file_lines(files, steps)]
    lines += ["", "Resume the run (from its last checkpoint; a larger --train.max_steps trains on):", "",
              f"    {rerun}" if files.checkpoint else
              "    (no checkpoint to resume from: set --ckpt.save_steps)", "", "View its curves:", "", f"    {curves}"]
    return "\n".join(lines) + "\n"


def _steps_line(steps: list, records: list, wall_s: Optional[float]) -> str:
    if not steps:
        return "steps: none recorded in the metrics log"
    clock, legs = training_seconds(records)
    text = f"steps: {steps[-1]['step']:.0f}, training clock {format_duration(clock)} (evaluation and checkpoints excluded)"
    if legs > 1:
        text += f" over {legs} legs (resumed {legs - 1}x)"
    if wall_s is not None:
        text += f"; wall clock of {'the last leg' if legs > 1 else 'the run'} {format_duration(wall_s)}"
    return text


def _accuracy_line(evals: list) -> str:
    if not evals:
        return "not evaluated (--eval.dataset with --eval.steps or --eval.at_start)"
    first, last = evals[0], evals[-1]
    p0, p1 = first["eval_accuracy"], last["eval_accuracy"]
    if len(evals) == 1:
        return f"{p0:.3f} at step {first['step']:.0f} (one evaluation)"
    text = f"{p0:.3f} at step {first['step']:.0f} -> {p1:.3f} at step {last['step']:.0f}, {p1 - p0:+.3f}"
    n0, n1 = first.get("eval_num_samples"), last.get("eval_num_samples")
    if n0 and n1 and 0 <= min(p0, p1) <= max(p0, p1) <= 1:  # binomial SEs; the difference's is their root sum
        se = math.sqrt(p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1)
        text += f" (2 SE {2 * se:.3f}, {n0:.0f} and {n1:.0f} samples)"
    return text


def _first_last(steps: list, key: str, fmt: str) -> str:
    points = [(r["step"], r[key]) for r in steps if _finite(r.get(key))]
    if not points:
        return "not recorded"
    (s0, v0), (s1, v1) = points[0], points[-1]
    return f"{fmt.format(v0)} at step {s0:.0f} -> {fmt.format(v1)} at step {s1:.0f}"


def _tokens_line(steps: list) -> str:
    generated, trained, discarded = (_total(steps, f"speed/tokens_{k}") for k in ("generated", "trained", "discarded"))
    if generated is None:
        return "not recorded"
    parts = [f"{generated:,.0f} generated"]
    for name, value in (("trained", trained), ("discarded", discarded)):
        if value is not None:
            share = f" ({value / generated:.0%})" if generated else ""
            parts.append(f"{value:,.0f} {name}{share}")
    return ", ".join(parts)


def _qualification_line(steps: list) -> str:
    qualified, screened = _total(steps, "speed/prompts_qualified"), _total(steps, "speed/prompts_screened")
    if qualified is None or not screened:
        return "not applicable (no pass-rate band: uniform or --speed.strategy off)"
    return f"{qualified:,.0f} of {screened:,.0f} screened prompts qualified ({qualified / screened:.2f})"


def _file_lines(files: RunFiles, steps: list) -> list:
    saved = [r["step"] for r in steps if files.save_steps and r["step"] % files.save_steps == 0]
    ckpt = (f"{files.checkpoint} " + (f"(last saved at step {saved[-1]:.0f})" if saved else "(none saved yet)")
            if files.checkpoint else "none saved (--ckpt.save_steps)")
    return [("checkpoint", ckpt),
            ("metrics", files.metrics or "not kept (--log.jsonl)"),
            ("TensorBoard", files.tensorboard or "not kept (--logger.tensorboard_dir)"),
            ("trace", files.trace or "not kept (--speed.trace_path)"),
            ("curves", os.path.join(files.folder, CURVES)),
            ("summary", os.path.join(files.folder, SUMMARY))]


def _total(steps: list, key: str) -> Optional[float]:
    values = [r[key] for r in steps if _finite(r.get(key))]
    return sum(values) if values else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def format_duration(seconds: float) -> str:
    """7m 52s, as the summary prints a clock (docs quote it the same way, bench/doc_tables.py)."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def write_atomic(path: str, data: bytes, what: str) -> None:
    """Write `path` whole or leave the previous one: a temporary file renamed over it. A full
    disk removes the temporary file and raises DiskFullError naming `path`."""
    try:  # PATH.tmp.<pid>: the trainer and `openrlhf-speed curves` may draw at once
        replace_file(path, lambda f: f.write(data))
    except OSError as e:
        if e.errno not in FULL_ERRNOS:
            raise
        kept = "the previous one is kept" if os.path.exists(path) else "it was not written"
        raise disk_full(what, path, len(data), kept) from e
