"""What a node has, as plain facts that judge nothing: `openrlhf-speed doctor` (cli/doctor.py)
turns them into its table.

- node.py: torch and its GPUs, nvidia-smi, nvcc, Ray, the disk, the memory plan's dry run;
  DeepSpeed's ops, the NCCL all-reduce and a vLLM engine in child processes of their own.
- wheelhouse.py: which pins of a stack a wheelhouse folder lacks. Standard library only:
  scripts/bootstrap.sh runs it with a bare Python before any venv exists, so this package's
  `__init__` (this file) imports nothing.
"""
