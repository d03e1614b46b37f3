"""The layer order of the package's own imports, checked on the source (ast), not by importing it.

Every module of `openrlhf_speed` belongs to the layer of its top-level folder; a module may
import its own layer or a lower one, never a higher one. Lowest first:

    0  openrlhf_speed, storage   the package root (its docstring only); files replaced whole or
                                 not at all (standard library only: every room may use it)
    1  curriculum                pure logic: the scheduler, strategies, records (DESIGN.md)
    2  models, rewards           leaves: the embedded model; answer extraction and checking
    3  data                      the generated data (asks models for the tokenizer) and the
                                 preparation of real datasets (normalizes answers with rewards)
    4  proving                   the proving-ground model: built by supervised learning on
                                 data's generator, its pass table scored with rewards' rules
    5  compat                    what OpenRLHF needs to run on CPU; nothing of ours above it
    6  backends, probes          the training side: Megatron-Core actor, placement logging and
                                 weight fingerprints shared with rollout's actor and engines;
                                 the node's facts that `doctor` judges (GPUs, ops, an engine,
                                 a wheelhouse)
    7  rollout                   drives vLLM engines and the actors: the SPEED generator, our
                                 trainer, the DeepSpeed actor and the backend switch
    8  bench, memory             runs and reports benchmarks (subprocesses of the CLI); the GPU
                                 memory plan of the train flags (reads rollout's SpeedConfig)
    9  cli                       entry points and flags: parses, calls everything below, prints

Two modules of one layer may import each other's modules, but the module graph as a whole
has no cycle (a cycle means neither side can be read, tested or imported first on its own).
Imports inside functions count: they are how a cycle hides. Only imports of
`openrlhf_speed` modules are checked here; tests/curriculum/test_import_boundary.py checks
which third-party packages each folder may import.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openrlhf_speed"
LAYERS = [
    {"openrlhf_speed", "storage"},
    {"curriculum"},
    {"models", "rewards"},
    {"data"},
    {"proving"},
    {"compat"},
    {"backends", "probes"},
    {"rollout"},
    {"bench", "memory"},
    {"cli"},
]
LAYER_OF = {folder: i for i, folders in enumerate(LAYERS) for folder in folders}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYER_OF["openrlhf_speed"]
    return LAYER_OF[parts[1]]


def own_imports(module: str) -> list[tuple[int, str]]:
    """(line, module) for every import of an `openrlhf_speed` module anywhere in the file,
    relative imports resolved; `from pkg import name` counts as pkg.name when that is a module."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "openrlhf_speed"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "openrlhf_speed":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append((node.lineno, sub if sub in MODULES else source))
    return found


def graph() -> dict[str, set[str]]:
    return {m: {target for _, target in own_imports(m) if target != m} for m in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One example cycle per strongly connected component of more than one module (Tarjan);
    `components` lists the components themselves."""
    return [_example_cycle(c, edges) for c in components(edges)]


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, each sorted (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _example_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself (breadth first)."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(edges[path[-1]] & members):
            if w == start:
                return path + [start]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return component


def test_every_folder_has_a_layer():
    folders = {p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE}
    assert folders and folders <= set(LAYER_OF), f"give these folders a layer: {sorted(folders - set(LAYER_OF))}"


def test_modules_import_only_their_layer_or_lower():
    bad = []
    for module in MODULES:
        for line, target in own_imports(module):
            if layer(target) > layer(module):
                bad.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: {module} (layer {layer(module)}) "
                           f"imports {target} (layer {layer(target)})")
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def test_no_import_cycles():
    edges = graph()
    found = components(edges)
    assert not found, "import cycles:\n" + "\n".join(
        f"{' -> '.join(_example_cycle(c, edges))}  (modules on cycles with it: {', '.join(c)})" for c in found)


def test_checker_sees_lazy_and_relative_imports():
    # A function-level `from openrlhf_speed.x import y` and a `from .m import n` must both be
    # seen, or a cycle could hide in either.
    assert "openrlhf_speed.curriculum.config" in {t for _, t in own_imports("openrlhf_speed.curriculum.scheduler")}
    assert "openrlhf_speed.cli.megatron_flags" in {t for _, t in own_imports("openrlhf_speed.cli.flags")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
