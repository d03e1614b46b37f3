"""A full disk under the run's own logs (rollout/trace.py's append_whole): the trace and the run
log (`--log.jsonl`) keep their last whole line, and the run stops with one line naming the file,
as a full disk at checkpoint time does (test_ckpt_faults.py).

The kernel's ENOSPC comes from /dev/full; a write cut short mid-line by a disk that fills
during it comes from a file whose writes take 10 bytes and then fail.
"""

import errno
import json
import os
from types import SimpleNamespace

import pytest
from _failing_train import train_failing_with

from openrlhf_speed.rollout.ckpt_manifest import CheckpointDiskFullError, DiskFullError
from openrlhf_speed.rollout.trace import TraceFile, append_whole

DEV_FULL = "/dev/full"
needs_dev_full = pytest.mark.skipif(not os.path.exists(DEV_FULL), reason="needs /dev/full")


class FillsUp:
    """An unbuffered append-mode file on a disk with `room` bytes left: a write takes what fits,
    the next one fails with ENOSPC."""

    def __init__(self, path, room):
        self._f, self.room, self.name = open(path, "ab", buffering=0), room, str(path)

    def fileno(self):
        return self._f.fileno()

    def write(self, data):
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = self._f.write(bytes(data[: self.room]))
        self.room -= taken
        return taken


def test_a_write_cut_short_leaves_the_file_at_its_last_whole_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')
    f = FillsUp(path, room=10)
    with pytest.raises(DiskFullError) as err:
        append_whole(f, b'{"step": 2, "reward": 0.5}\n', "the run log (--log.jsonl)")
    assert path.read_text() == '{"step": 1}\n'  # the 10 bytes that fitted are cut back
    message = str(err.value)
    assert message.startswith(f"disk full while writing the run log (--log.jsonl) {path}: ")
    assert "MB is free in" in message and "--ckpt.load_enable" in message and "\n" not in message
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC


def test_a_write_that_fits_takes_several_partial_writes(tmp_path):
    path = tmp_path / "trace.jsonl"
    f = FillsUp(path, room=1000)
    f.write = (lambda inner: lambda data: inner(data[:7]))(f.write)  # 7 bytes per call
    append_whole(f, b'{"event": "request", "prompt": 3}\n', "the trace")
    assert json.loads(path.read_text()) == {"event": "request", "prompt": 3}


def test_other_write_errors_are_not_a_full_disk(tmp_path):
    f = FillsUp(tmp_path / "x", room=10)
    f.write = lambda data: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))
    with pytest.raises(OSError) as err:
        append_whole(f, b"line\n", "the trace")
    assert not isinstance(err.value, DiskFullError) and err.value.errno == errno.EIO


@needs_dev_full
def test_the_trace_on_a_full_disk_stops_with_one_line():
    trace = TraceFile(DEV_FULL)
    with pytest.raises(DiskFullError, match=r"^disk full while writing the trace /dev/full: .* MB is free in /dev"):
        trace.write({"event": "request", "prompt": 0})


def test_a_trace_rotated_onto_a_full_disk_keeps_the_rotated_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    trace = TraceFile(str(path), max_bytes=50)
    trace.write({"event": "config", "n": 24}, header=True)
    trace.write({"event": "request", "prompt": 1, "text": "x" * 40})
    full = FillsUp(tmp_path / "never", room=0)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: full if str(p) == str(path) else real_open(p, *a, **k))
    with pytest.raises(DiskFullError, match="the trace"):
        trace.write({"event": "request", "prompt": 2})  # past the cap: rotates, then the header fails
    lines = [json.loads(x) for x in (tmp_path / "trace.jsonl.1").read_text().splitlines()]
    assert [r["event"] for r in lines] == ["config", "request"]


@needs_dev_full
def test_the_run_log_on_a_full_disk_stops_with_one_line():
    from openrlhf_speed.rollout.trainer import make_trainer_class

    cls = make_trainer_class(type("Upstream", (), {"__ray_actor_class__": object})).__ray_actor_class__
    t = cls.__new__(cls)
    t.args = SimpleNamespace(log=SimpleNamespace(jsonl=DEV_FULL))
    with pytest.raises(DiskFullError, match=r"^disk full while writing the run log \(--log.jsonl\) /dev/full"):
        t._log_jsonl({"event": "step", "step": 3, "train_wall_s": 1.5})


def test_a_checkpoint_disk_full_is_a_disk_full():
    assert issubclass(CheckpointDiskFullError, DiskFullError)


def test_the_command_ends_with_status_1_and_one_line_without_a_traceback():
    out = train_failing_with("openrlhf_speed.rollout.ckpt_manifest", "DiskFullError",
                             "disk full while writing the trace /data/t.jsonl: 0.0 MB is free")
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == (
        "[openrlhf-speed] ERROR disk full while writing the trace /data/t.jsonl: 0.0 MB is free")
    assert "Traceback" not in out.stderr
