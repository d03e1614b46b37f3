"""Prompt data: the embedded arithmetic dataset and validation of user dataset files.

- arithmetic.py / word_problems.py: problems at graded difficulty levels, exact answers
- prompts.py: question -> chat messages with worked examples (few-shot) or zero-shot
- build.py: deterministic, disjoint train/test jsonl splits; `openrlhf-speed gen-data`
- loader.py: checks of user jsonl files (missing keys, empty answers, over-long prompts)
- check_cache.py: those checks' results kept for a rerun that resumes, reused while their inputs are unchanged

Stdlib only, so it imports anywhere (no torch, ray or vllm).
"""

from openrlhf_speed.data.arithmetic import LEVELS, MAX_SHOTS, Problem, problem_stream, shot_problems
from openrlhf_speed.data.build import DEFAULT_MIX, build_dataset, generate_splits, main_generate
from openrlhf_speed.data.loader import DatasetError, LoadReport, load_jsonl_rows
from openrlhf_speed.data.prompts import DEFAULT_INSTRUCTION, STYLES, render_prompt

__all__ = [
    "DEFAULT_INSTRUCTION", "DEFAULT_MIX", "LEVELS", "MAX_SHOTS", "STYLES", "DatasetError", "LoadReport",
    "Problem", "build_dataset", "generate_splits", "load_jsonl_rows", "main_generate", "problem_stream",
    "render_prompt", "shot_problems",
]
