"""`openrlhf-speed ...` for the tests, as a fresh process that skips the imports.

A dry run of `train` spends about 20 s of its 21 s importing torch, vLLM, DeepSpeed, Ray and
OpenRLHF; the CLI tests run some forty of them. Here a multiprocessing fork server imports
what the command imports once, in the command's own order (the shims before OpenRLHF), and
each call forks a child of it that runs `openrlhf_speed.cli.main.main(argv)` with its stdout
and stderr (file descriptors, so logging and C extensions too) in files, in the caller's
current environment and working directory. A child is a process of its own like the
console script's: the flags' patches, os.environ and the exit status stay in it.

What the fork server cannot give is an environment read at import time; `run_cli(env=...)`
therefore runs the console script itself."""

import multiprocessing
import os
import subprocess
import sys
import tempfile

from _util import openrlhf_speed_cmd

_CONTEXT = None
TESTS = os.path.dirname(os.path.abspath(__file__))
# The modules `train` imports, in its order: compat's shims (the flash-attn fallback) must be
# in place before OpenRLHF is imported.
PRELOAD = ["_cli_warm"]


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing.forkserver

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        # Python 3.11's fork server does not apply the caller's sys.path before its preload (and
        # skips a module it cannot import): it finds tests/_cli_warm.py through PYTHONPATH, set
        # for its start only.
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([TESTS, saved] if saved else [TESTS])
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        _CONTEXT = context
    return _CONTEXT


def _child(argv, env, cwd, out_path, err_path):
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
    sys.argv = ["openrlhf-speed", *argv]
    from openrlhf_speed.cli.main import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


def run_cli(*argv, timeout=600, env=None) -> subprocess.CompletedProcess:
    """`openrlhf-speed *argv`: returncode, stdout and stderr as subprocess.run gives them."""
    argv = [str(a) for a in argv]
    if env is not None:
        return subprocess.run([*openrlhf_speed_cmd(), *argv], capture_output=True, text=True, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory(prefix="cli-") as folder:
        out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        child = _context().Process(target=_child, args=(argv, dict(os.environ), os.getcwd(), out_path, err_path))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["openrlhf-speed", *argv], timeout)
        with open(out_path, encoding="utf-8", errors="replace") as f_out, open(err_path, encoding="utf-8",
                                                                               errors="replace") as f_err:
            return subprocess.CompletedProcess(["openrlhf-speed", *argv], child.exitcode, f_out.read(), f_err.read())
