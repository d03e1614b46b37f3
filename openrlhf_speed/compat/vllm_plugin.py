"""vLLM general plugin (entry point `vllm.general_plugins`): vLLM loads it in every process
it starts, including the engine core and worker processes that Ray's setup hook never
reaches. It installs the same compat shims as the rest of the run (see `compat.install`),
as a worker: the device comes from the driver's decision, never from torch.cuda, because
vLLM may load it before it has set the process's visible GPUs.

It also keeps the end of a run free of two `KeyError: '/psm_...'` tracebacks
(`quiet_unregister_after_tracker_death`): vLLM's shared-memory message queues (the
executor's RPC broadcast queue, created in the engine core, and each worker's response
queue, created in the worker; vllm/distributed/device_communicators/shm_broadcast.py) are
registered with Python's resource tracker, a child of the Ray engine actor. When the run
ends, Ray kills the exiting actor's child processes, the tracker among them, while the
engine core and the worker are still shutting down. Each queue's creator then unlinks its
segment (correctly, once) and unregisters it; Python finds its tracker dead, starts a new
one ("resource_tracker: process died unexpectedly, relaunching") and sends it the
unregister, and that tracker, which never saw the name, prints the KeyError. The segment is
already unlinked at that point, so skipping the unregister loses nothing.
"""

from multiprocessing import resource_tracker

_original_unregister = resource_tracker.unregister


def _unregister(name, rtype):
    tracker = resource_tracker._resource_tracker
    if tracker._fd is not None and not tracker._check_alive():
        # The tracker this name was registered with is gone (see the module docstring): a new
        # one would not know the name. SharedMemory.unlink() has removed the segment already.
        return
    _original_unregister(name, rtype)


def quiet_unregister_after_tracker_death() -> None:
    """Route `resource_tracker.unregister` (what SharedMemory.unlink calls) through `_unregister`."""
    resource_tracker.unregister = _unregister


def register() -> None:
    from openrlhf_speed import compat

    compat.install(worker=True)
    quiet_unregister_after_tracker_death()
