"""vLLM general plugin (entry point `vllm.general_plugins`): vLLM loads it in every process
it starts, including the engine core and worker processes that Ray's setup hook never
reaches. It installs the same compat shims as the rest of the run (see `compat.install`).
"""


def register() -> None:
    from openrlhf_speed import compat

    compat.install()
