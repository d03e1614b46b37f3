"""WorkerPool: hard timeout by kill-and-replace, crash recovery, thread safety.

Uses stdlib functions as the work (picklable by reference), so no test code has to be
importable in the spawned workers. Timing assertions are only upper bounds with generous
slack, for a loaded 2-core machine.
"""

import math
import operator
import os
import threading
import time

import pytest

from openrlhf_speed.rewards.pool import WorkerPool

SLACK_S = 30.0


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(num_workers=2)
    yield p
    p.close()


def test_call_returns_value(pool):
    out = pool.call(operator.add, 2, 3, timeout_s=SLACK_S)
    assert (out.status, out.value) == ("ok", 5)


def test_exception_in_worker_is_error_and_worker_survives(pool):
    out = pool.call(math.sqrt, -1, timeout_s=SLACK_S)
    assert out.status == "error" and "ValueError" in out.detail
    assert pool.call(operator.mul, 6, 7, timeout_s=SLACK_S).value == 42


def test_timeout_kills_and_replaces_worker():
    p = WorkerPool(num_workers=1)
    try:
        assert p.call(operator.add, 1, 1, timeout_s=SLACK_S).status == "ok"  # started and warm
        (old_pid,) = p.pids()
        t0 = time.monotonic()
        out = p.call(time.sleep, 3600, timeout_s=1.0)
        elapsed = time.monotonic() - t0
        assert out.status == "timeout"
        assert elapsed < 1.0 + SLACK_S
        with pytest.raises(ProcessLookupError):  # the stuck worker is really gone
            os.kill(old_pid, 0)
        assert p.call(operator.add, 2, 2, timeout_s=SLACK_S).value == 4  # replacement works
        assert p.pids() != [old_pid]
        assert p.stats()["killed_timeout"] == 1
    finally:
        p.close()


def test_crashed_worker_is_error_then_replaced():
    p = WorkerPool(num_workers=1)
    try:
        out = p.call(os._exit, 3, timeout_s=SLACK_S)
        assert out.status == "error" and "died" in out.detail
        assert p.call(operator.add, 2, 2, timeout_s=SLACK_S).value == 4
        assert p.stats()["died"] == 1
    finally:
        p.close()


def test_unpicklable_call_is_error(pool):
    out = pool.call(lambda: 1, timeout_s=SLACK_S)
    assert out.status == "error"
    assert pool.call(operator.add, 1, 2, timeout_s=SLACK_S).value == 3


def test_failing_initializer_is_error():
    # math.factorial() without an argument raises TypeError inside the worker.
    p = WorkerPool(num_workers=1, initializer=math.factorial)
    try:
        out = p.call(operator.add, 1, 1, timeout_s=SLACK_S)
        assert out.status == "error" and "initializer failed" in out.detail
    finally:
        p.close()


def test_concurrent_calls_from_threads(pool):
    results, errors = {}, []

    def work(i):
        try:
            results[i] = [pool.call(operator.mul, i, k, timeout_s=SLACK_S).value for k in range(20)]
        except Exception as e:  # pragma: no cover - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: [i * k for k in range(20)] for i in range(8)}


def test_closed_pool_refuses_calls():
    p = WorkerPool(num_workers=1)
    p.close()
    assert p.call(operator.add, 1, 1, timeout_s=1).status == "error"


def test_rejects_zero_workers():
    with pytest.raises(ValueError, match="num_workers"):
        WorkerPool(num_workers=0)
