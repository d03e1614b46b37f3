"""Rendezvous ports that nothing else is handed while they wait to be bound.

OpenRLHF picks each actor group's `MASTER_PORT` by binding port 0 and closing the socket
(`BaseDistributedActor._get_free_port`), but binds it for real only later, when the actor
initializes its model: after the vLLM engines and every other Ray worker have started. A
port from bind(0) comes from the kernel's ephemeral range, the same range it draws from for
every outgoing connection and every other bind(0) in between (Ray's gRPC channels, vLLM's
and gloo's own ports), so now and then one of them gets it first and the run dies with
`EADDRINUSE` in `init_process_group`. This once failed CI on a loaded 2-core machine.

A port below the ephemeral range is never handed out implicitly: only an explicit bind to
that very number can take it. `free_port()` draws one at random between Ray's worker ports
(10002-19999 by default) and the ephemeral range, checks that it binds, and falls back to
bind(0) where the kernel's range leaves no room.
"""

import random
import socket

from .import_hooks import when_imported

LOW = 20000  # above Ray's default worker ports (--min-worker-port 10002 .. --max-worker-port 19999)
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
TRIES = 50


def ephemeral_range(path: str = RANGE_FILE) -> tuple:
    """(first, last) port the kernel hands out implicitly; Linux's default where unreadable."""
    try:
        with open(path) as f:
            first, last = (int(x) for x in f.read().split())
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def _binds(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port(rng: random.Random | None = None, path: str = RANGE_FILE) -> int:
    """A port that binds now and that the kernel will not give to anyone implicitly."""
    rng = rng or random.SystemRandom()
    high = ephemeral_range(path)[0] - 1
    if high - LOW >= TRIES:
        for _ in range(TRIES):
            port = rng.randint(LOW, high)
            if _binds(port):
                return port
    with socket.socket() as sock:  # no room below the range, or all tries taken: the old way
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _patch_launcher(module) -> None:
    module.BaseDistributedActor._get_free_port = staticmethod(free_port)


def install() -> None:
    """On every device: the race is the same with NCCL as with gloo."""
    when_imported("openrlhf.trainer.ray.launcher", _patch_launcher)
