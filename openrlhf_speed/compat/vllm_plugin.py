"""vLLM general plugin (entry point `vllm.general_plugins`): vLLM loads it in every process
it starts, including the engine core and worker processes that Ray's setup hook never
reaches. It installs the same compat shims as the rest of the run (see `compat.install`),
as a worker: the device comes from the driver's decision, never from torch.cuda, because
vLLM may load it before it has set the process's visible GPUs.
"""


def register() -> None:
    from openrlhf_speed import compat

    compat.install(worker=True)
