"""The end of a run prints no `KeyError: '/psm_...'` (compat/vllm_plugin.py says why it did):
a spawned child creates a shared-memory segment, registered with its parent's resource
tracker; the tracker is then killed, as Ray kills an exiting engine actor's children; the
child unlinks its segment. Without the plugin's fix Python relaunches a tracker and sends it
the unregister, which prints the KeyError traceback; with it, nothing is printed."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, signal, sys, time
    from multiprocessing import resource_tracker, shared_memory

    def child(conn, fix):
        if fix:
            from openrlhf_speed.compat.vllm_plugin import quiet_unregister_after_tracker_death
            quiet_unregister_after_tracker_death()
        shm = shared_memory.SharedMemory(create=True, size=64)
        conn.send(shm.name)
        conn.recv()  # the tracker is dead now
        shm.close()
        shm.unlink()
        time.sleep(0.5)  # let a relaunched tracker print

    if __name__ == "__main__":
        mp.set_start_method("spawn")
        resource_tracker.ensure_running()
        parent, theirs = mp.Pipe()
        p = mp.Process(target=child, args=(theirs, sys.argv[1] == "fix"))
        p.start()
        name = parent.recv()
        os.kill(resource_tracker._resource_tracker._pid, signal.SIGKILL)
        os.waitpid(resource_tracker._resource_tracker._pid, 0)
        parent.send("go")
        p.join()
        print("unlinked", name, "exit", p.exitcode, "left", os.path.exists("/dev/shm/" + name.lstrip("/")))
""")


def run(tmp_path, mode: str) -> str:
    path = tmp_path / "shm_after_tracker_death.py"
    path.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(path), mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_unlink_after_the_tracker_died_prints_no_keyerror(tmp_path):
    without = run(tmp_path, "plain")
    assert "KeyError: '/psm_" in without  # the noise, reproduced
    with_fix = run(tmp_path, "fix")
    assert "Traceback" not in with_fix and "KeyError" not in with_fix and "relaunching" not in with_fix, with_fix
    assert "exit 0 left False" in with_fix  # the segment is gone all the same
