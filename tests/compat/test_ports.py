"""Rendezvous ports: below the kernel's ephemeral range, so an outgoing connection or another
bind(0) between OpenRLHF's pick and its bind cannot take them (EADDRINUSE in CI once)."""

import random
import socket
import subprocess
import sys
import textwrap

from openrlhf_speed.compat import ports


def test_a_port_is_above_rays_worker_ports_below_the_ephemeral_range_and_binds():
    first, _ = ports.ephemeral_range()
    rng = random.Random(0)
    for _ in range(20):
        port = ports.free_port(rng)
        assert ports.LOW <= port < first
        with socket.socket() as sock:
            sock.bind(("", port))


def test_a_taken_port_is_not_handed_out(tmp_path):
    rng_file = tmp_path / "range"
    rng_file.write_text(f"{ports.LOW + 60}\t60999\n")
    held = []
    try:  # hold every port of a 60-port window but one: the draw must find that one
        for port in range(ports.LOW, ports.LOW + 60):
            if port == ports.LOW + 17:
                continue
            sock = socket.socket()
            try:
                sock.bind(("", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        picks = {ports.free_port(random.Random(seed), str(rng_file)) for seed in range(5)}
    finally:
        for sock in held:
            sock.close()
    taken = {s_port for s_port in range(ports.LOW, ports.LOW + 60)} - {ports.LOW + 17}
    assert not picks & taken


def test_no_room_below_the_range_falls_back_to_the_kernels_choice(tmp_path):
    rng_file = tmp_path / "range"
    rng_file.write_text(f"{ports.LOW + 10} 60999\n")
    port = ports.free_port(path=str(rng_file))
    assert not ports.LOW <= port < ports.LOW + 10


def test_unreadable_range_is_linuxs_default(tmp_path):
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    (tmp_path / "bad").write_text("not ports")
    assert ports.ephemeral_range(str(tmp_path / "bad")) == (32768, 60999)


def test_openrlhf_actors_take_their_master_port_from_it():
    """What a Ray actor of OpenRLHF does at start-up, in a fresh process after install()."""
    code = """
        import os
        from openrlhf_speed import compat
        compat.install()
        from openrlhf.trainer.ray.launcher import BaseDistributedActor
        from openrlhf_speed.compat import ports
        BaseDistributedActor._get_current_node_ip = staticmethod(lambda: "127.0.0.1")  # no Ray here
        BaseDistributedActor(1, 0, None, None)
        print(os.environ["MASTER_PORT"], ports.ephemeral_range()[0])
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    port, first = (int(x) for x in out.stdout.split()[-2:])
    assert ports.LOW <= port < first
