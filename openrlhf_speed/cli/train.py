"""`openrlhf-speed train`: OpenRLHF's own `train_ppo_ray` entry point, with our additions.

OpenRLHF builds its parser, validates flags and calls `train(args)` inside the
`if __name__ == "__main__":` block of `openrlhf.cli.train_ppo_ray`, so its flags cannot be
imported as a function. We run that module as `__main__` (runpy) and hook three seams, so
every OpenRLHF flag keeps its name, default, meaning and validation:

1. `ArgumentParser.parse_args`: our flag groups (`--speed.*`, `--backend`, `--dry_run`, ...)
   are added to OpenRLHF's parser just before it parses.
2. `openrlhf.utils.config.hierarchize` (called right after parsing): resolves our defaults
   (embedded model, embedded data, math reward), applies the CPU adjustments, validates our
   flag combinations, and starts Ray with the compat runtime env, before OpenRLHF's own checks.
3. `openrlhf.trainer.ppo_trainer.PPOTrainer` (imported inside `train()`): our trainer.
4. `ray.is_initialized`, the first call of OpenRLHF's `train()`: a `--dry_run` prints the
   plan and stops there, after OpenRLHF's own flag checks have passed too.

Before that, `rollout.actor.install()` / `rollout.engine.install()` swap OpenRLHF's policy
actor and vLLM engine classes for our subclasses (module attributes that `train_ppo_ray` and
`create_vllm_engines` read when they run).

A vLLM engine that dies mid-run ends the command with exit status 1 and, last, one line
`[openrlhf-speed] ERROR vLLM engine I (Ray actor ID) failed ...` naming the checkpoint a rerun
resumes from (rollout/speed_generator.py's EngineDiedError). A full disk while a checkpoint,
the trace, the run log or the summary is written ends it the same way with one line and no
traceback, since the cause is known (rollout/ckpt_manifest.py's DiskFullError).

A run that ends writes `summary.md` and `curves.png` in its run folder (the parent of
`--ckpt.path`) and prints the summary last (rollout/run_summary.py). `--log.jsonl` defaults
to RUN/metrics.jsonl, the records both are drawn from. The summary's resume command is this
command with `--ckpt.load_enable`, or `$OPENRLHF_SPEED_RERUN` where a recipe names itself.
"""

import argparse
import os
import runpy
import shlex
import sys
import time
import traceback
from contextlib import contextmanager

from openrlhf_speed import compat
from openrlhf_speed.cli import flags
from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.run_summary import (CURVES, METRICS, SUMMARY, build_summary, read_records, run_files,
                                                run_folder, run_records, write_atomic)


@contextmanager
def _patched(obj, name, value):
    original = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield original
    finally:
        setattr(obj, name, original)


def rerun_command(argv: list) -> str:
    """The command that resumes this run: $OPENRLHF_SPEED_RERUN (a recipe's own name, e.g.
    `make train`), else this one with --ckpt.load_enable."""
    named = os.environ.get("OPENRLHF_SPEED_RERUN")
    if named:
        return named
    resume = [] if "--ckpt.load_enable" in argv else ["--ckpt.load_enable"]
    return shlex.join(["openrlhf-speed", "train", *argv, *resume])


def finish(args, argv: list, started: float) -> str:
    """Write the run folder's summary.md and curves.png; returns the summary."""
    files = run_files(args)
    records = run_records(read_records(files.metrics)) if files.metrics and os.path.isfile(files.metrics) else []
    curves = ["openrlhf-speed", "curves", files.folder]
    if files.metrics and os.path.abspath(files.metrics) != os.path.join(files.folder, METRICS):
        curves += ["--metrics", files.metrics]
    text = build_summary(records, files, rerun_command(argv), shlex.join(curves), time.time() - started)
    write_atomic(os.path.join(files.folder, SUMMARY), text.encode(), "the run summary")
    if records:
        from openrlhf_speed.rollout.curves import redraw

        redraw(records, os.path.join(files.folder, CURVES), files.folder)
    return text


def main(argv=None) -> int:
    started = time.time()
    compat.install()
    argv = list(sys.argv[1:] if argv is None else argv)
    real_parse_args = argparse.ArgumentParser.parse_args

    def parse_args(parser, args=None, namespace=None):
        flags.add_arguments(parser)
        return real_parse_args(parser, argv if args is None else args, namespace)

    import openrlhf.trainer.ppo_trainer as ppo_trainer_module
    import openrlhf.utils.config as config_module

    from openrlhf_speed.rollout import actor, engine
    from openrlhf_speed.rollout.trainer import make_trainer_class

    actor.install()
    engine.install()

    real_hierarchize = config_module.hierarchize

    def hierarchize(namespace):
        args = real_hierarchize(namespace)
        flags.prepare(args)  # may exit for --dry_run
        return args

    import ray

    parsed = {}
    real_hierarchize_with_capture = hierarchize

    def capture(namespace):
        args = parsed["args"] = real_hierarchize_with_capture(namespace)
        if args.log.jsonl is None:  # the records the summary and the curves are drawn from
            args.log.jsonl = os.path.join(run_folder(args.ckpt.path), METRICS)
        return args

    real_is_initialized = ray.is_initialized

    def is_initialized():
        # The first thing OpenRLHF's train() does, after every one of its flag checks passed:
        # where a dry run stops.
        args = parsed.get("args")
        if args is not None and getattr(args, "dry_run", False):
            flags.print_dry_run(args)
            raise flags.DryRunExit()
        return real_is_initialized()

    with _patched(argparse.ArgumentParser, "parse_args", parse_args), _patched(
        config_module, "hierarchize", capture
    ), _patched(ray, "is_initialized", is_initialized), _patched(
        ppo_trainer_module, "PPOTrainer", make_trainer_class(ppo_trainer_module.PPOTrainer)
    ):
        saved_argv = sys.argv
        sys.argv = ["openrlhf-speed train", *argv]
        try:
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=False)
        except flags.DryRunExit:
            return 0
        except ray.exceptions.RayTaskError as e:
            # A dead engine surfaces here as the trainer actor's failure, its message buried in
            # a remote traceback: keep the traceback, end with the one line that says what to do.
            from openrlhf_speed.rollout.speed_generator import EngineDiedError

            if not isinstance(e.cause, (EngineDiedError, DiskFullError)):
                raise
            if isinstance(e.cause, EngineDiedError):
                traceback.print_exc()
            return last_line_error(e.cause)
        finally:
            sys.argv = saved_argv
    return report(parsed["args"], argv, started) if "args" in parsed else 0


def report(args, argv: list, started: float) -> int:
    """After a run: its summary printed last, or the one line of a full disk (exit status)."""
    try:
        print(finish(args, argv, started), flush=True)
    except DiskFullError as e:
        return last_line_error(e)
    return 0


def last_line_error(error) -> int:
    """Print the run's one closing ERROR line on a line of its own, and return the exit status.
    Ray's log thread forwards the workers' lines into this process's stdout and stderr, each as
    two writes (the text, then its newline): written between them, the ERROR line followed a
    worker's half line. Ray is shut down first, which joins that thread, and stdout flushed, so
    the ERROR line starts a line and is the last one."""
    import ray

    try:
        ray.shutdown()
    except Exception as e:  # the error line matters more than a clean shutdown
        print(f"[openrlhf-speed] ray.shutdown failed: {e!r}", file=sys.stderr)
    sys.stdout.flush()
    print(f"[openrlhf-speed] ERROR {error}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
