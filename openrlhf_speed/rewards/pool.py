"""A small pool of persistent worker processes with a hard per-call timeout.

Why: math-verify's own timeouts use SIGALRM, which works only in the main thread, and the
reward is called from worker threads (OpenRLHF runs `reward_func` via asyncio.to_thread
inside Ray actors). A thread cannot be interrupted, so the work runs in a process that is
killed when it overruns, and a fresh process takes its slot.

Mechanism: `num_workers` slots in a queue; a call takes a slot (waiting while all are
busy), sends `(fn, args)` over the slot's pipe and polls for the answer for `timeout_s`.
No answer in time: the process is killed (SIGKILL) and a replacement is started at once,
so it warms up while the slot is idle. A crashed worker (segfault, OOM kill) is detected
by EOF on the pipe and replaced the same way. Time spent starting a worker (importing
sympy and friends, seconds on a loaded machine) is bounded by `startup_timeout_s`
separately and never counts against the per-call timeout.

Processes use the 'spawn' start method: fork from a multi-threaded parent can copy locks
held by other threads and deadlock the child. Like every spawn user (vLLM too), the
entry script must guard its top level with `if __name__ == "__main__":`, since the child
re-imports it. `fn` must be picklable by reference (a module-level function).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

_PARENT_POLL_S = 1.0


@dataclass(frozen=True)
class CallOutcome:
    status: str  # "ok" | "timeout" | "error"
    value: Any = None
    detail: str = ""


class _Slot:
    """One worker position; the process in it may be absent, starting or ready."""

    __slots__ = ("proc", "conn", "ready")

    def __init__(self):
        self.proc = None
        self.conn = None
        self.ready = False


def _exit_when_orphaned(parent_pid: int) -> None:
    # A worker stuck in a long computation never reads its pipe, so it would not notice
    # the parent's death through EOF; watch the parent pid instead.
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(0)


def _worker_loop(conn, initializer, parent_pid: int) -> None:
    """Body of a worker process: initialise, report ready, then serve calls until EOF."""
    # Ctrl-C reaches the whole process group; the parent decides, workers exit on EOF.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    try:
        if initializer is not None:
            initializer()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, not raised
        conn.send(("error", f"initializer failed: {type(e).__name__}: {str(e)[:200]}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - the parent turns it into status "error"
            reply = ("error", f"{type(e).__name__}: {str(e)[:200]}")
        try:
            conn.send(reply)
        except Exception as e:  # unpicklable result
            conn.send(("error", f"cannot send result: {type(e).__name__}"))


class WorkerPool:
    """Thread-safe pool of `num_workers` processes; `call` never raises and never hangs
    longer than startup (first use of a slot only) + `timeout_s` + kill time."""

    def __init__(
        self,
        num_workers: int = 2,
        initializer: Callable[[], None] | None = None,
        startup_timeout_s: float = 120.0,
        start_method: str = "spawn",
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.startup_timeout_s = startup_timeout_s
        self._initializer = initializer
        self._ctx = mp.get_context(start_method)
        self._slots: queue.Queue[_Slot] = queue.Queue()
        for _ in range(num_workers):
            self._slots.put(_Slot())
        # Process creation touches multiprocessing's module-level bookkeeping; serialise it.
        self._start_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._stats = {"started": 0, "killed_timeout": 0, "died": 0, "calls": 0}
        self._closed = False

    # -- public ---------------------------------------------------------------------------

    def call(self, fn: Callable, *args, timeout_s: float) -> CallOutcome:
        """Run `fn(*args)` in a worker; status "ok", "timeout" or "error"."""
        if self._closed:
            return CallOutcome("error", detail="worker pool is closed")
        slot = self._slots.get()
        try:
            if self._closed:
                return CallOutcome("error", detail="worker pool is closed")
            self._bump("calls")
            return self._call_on(slot, fn, args, timeout_s)
        finally:
            if self._closed:
                self._discard(slot)
            self._slots.put(slot)

    def start(self) -> None:
        """Start all idle workers now (non-blocking) instead of on first use."""
        taken = self._take_idle()
        try:
            for slot in taken:
                if slot.proc is None:
                    self._start(slot)
        finally:
            for slot in taken:
                self._slots.put(slot)

    def stats(self) -> dict[str, int]:
        with self._stats_lock:
            return dict(self._stats)

    def pids(self) -> list[int]:
        """Pids of idle live workers (for tests and debugging)."""
        taken = self._take_idle()
        pids = [s.proc.pid for s in taken if s.proc is not None]
        for slot in taken:
            self._slots.put(slot)
        return pids

    def close(self) -> None:
        """Kill idle workers now; busy ones are killed when their call returns."""
        self._closed = True
        taken = self._take_idle()
        for slot in taken:
            self._discard(slot)
            self._slots.put(slot)

    # -- internals ------------------------------------------------------------------------

    def _call_on(self, slot: _Slot, fn: Callable, args: tuple, timeout_s: float) -> CallOutcome:
        try:
            if slot.proc is None or not slot.proc.is_alive():
                self._discard(slot)
                self._start(slot)
            if not slot.ready:
                failure = self._wait_ready(slot)
                if failure is not None:
                    return failure
            slot.conn.send((fn, args))
            if not slot.conn.poll(timeout_s):
                self._bump("killed_timeout")
                self._replace(slot)
                return CallOutcome("timeout", detail=f"no result within {timeout_s:g}s; worker killed")
            kind, value = slot.conn.recv()
        except (EOFError, OSError) as e:  # BrokenPipeError/ConnectionResetError included
            self._bump("died")
            self._replace(slot)
            return CallOutcome("error", detail=f"worker died ({type(e).__name__}); replaced")
        except Exception as e:  # e.g. fn or args not picklable; the stream may be torn
            self._replace(slot)
            return CallOutcome("error", detail=f"{type(e).__name__}: {str(e)[:200]}")
        if kind == "ok":
            return CallOutcome("ok", value)
        return CallOutcome("error", detail=str(value))

    def _wait_ready(self, slot: _Slot) -> CallOutcome | None:
        if not slot.conn.poll(self.startup_timeout_s):
            self._discard(slot)
            return CallOutcome("error", detail=f"worker not ready within {self.startup_timeout_s:g}s")
        kind, detail = slot.conn.recv()
        if kind != "ready":
            self._discard(slot)
            return CallOutcome("error", detail=str(detail))
        slot.ready = True
        return None

    def _start(self, slot: _Slot) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        with self._start_lock:
            proc = self._ctx.Process(
                target=_worker_loop,
                args=(child_conn, self._initializer, os.getpid()),
                name="openrlhf-speed-reward-worker",
                daemon=True,
            )
            proc.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        slot.proc, slot.conn, slot.ready = proc, parent_conn, False
        self._bump("started")

    def _replace(self, slot: _Slot) -> None:
        """Kill the slot's worker and start its successor (best effort, never raises)."""
        self._discard(slot)
        if self._closed:
            return
        try:
            self._start(slot)
        except Exception:  # the next call on this slot retries
            self._discard(slot)

    @staticmethod
    def _discard(slot: _Slot) -> None:
        proc, conn = slot.proc, slot.conn
        slot.proc, slot.conn, slot.ready = None, None, False
        if proc is not None:
            try:
                proc.kill()
                proc.join(timeout=10)  # reap it; SIGKILL cannot be ignored
            except Exception:
                pass
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _take_idle(self) -> list[_Slot]:
        taken = []
        while True:
            try:
                taken.append(self._slots.get_nowait())
            except queue.Empty:
                return taken

    def _bump(self, key: str) -> None:
        with self._stats_lock:
            self._stats[key] += 1
