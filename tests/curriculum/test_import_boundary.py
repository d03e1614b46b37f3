"""The import boundary of DESIGN.md, checked on the source (ast), not by importing it.

- Only `rollout/`, `backends/`, `compat/` and `cli/` may import ray, vllm, deepspeed,
  megatron or transformer_engine, and the two rooms moved out of `cli/` that must ask the
  engines themselves: `memory/` (DeepSpeed's own estimators of its model states) and
  `probes/` (doctor's facts: Ray's nodes, DeepSpeed's ops, a vLLM engine).
- `curriculum/` imports nothing but the standard library, numpy and itself, so it runs
  (and is tested) without any engine installed.
"""

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "openrlhf_speed"
ENGINE_PACKAGES = {"ray", "vllm", "deepspeed", "megatron", "transformer_engine"}
ENGINE_FOLDERS = {"rollout", "backends", "compat", "cli", "memory", "probes"}
CURRICULUM_EXTRA = {"numpy"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.lineno, node.module))
                continue
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
    return found


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def test_engine_imports_stay_in_engine_folders():
    bad = []
    for path in _files(PACKAGE):
        top_folder = path.relative_to(PACKAGE).parts[0]
        if top_folder in ENGINE_FOLDERS:
            continue
        for line, module in _imports(path):
            if module.split(".")[0] in ENGINE_PACKAGES:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not bad, "engine imports outside rollout/backends/compat/cli/memory/probes:\n" + "\n".join(bad)


def test_curriculum_imports_only_stdlib_and_numpy():
    files = _files(PACKAGE / "curriculum")
    assert files, "no curriculum sources found: the boundary test would pass vacuously"
    allowed = set(sys.stdlib_module_names) | CURRICULUM_EXTRA
    bad = []
    for path in files:
        for line, module in _imports(path):
            top = module.split(".")[0]
            own = module == "openrlhf_speed.curriculum" or module.startswith("openrlhf_speed.curriculum.")
            if not own and top not in allowed:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not bad, "curriculum/ must import only stdlib + numpy:\n" + "\n".join(bad)


def test_checker_resolves_relative_imports():
    # `from .config import X` must be seen as openrlhf_speed.curriculum.config, or a
    # relative import could smuggle in anything.
    path = PACKAGE / "curriculum" / "scheduler.py"
    modules = {m for _, m in _imports(path)}
    assert "openrlhf_speed.curriculum.config" in modules
