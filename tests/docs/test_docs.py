"""README.md and docs/ against the code: what a user copies from them must exist.

- the README stays short (under 25,000 bytes);
- every `--flag` they name is accepted by one of the project's parsers (the train parser is
  OpenRLHF's with ours added; every subcommand's parser is found through cli/main.py), or is
  a flag of an outside tool listed below;
- every `make X` they name is a Makefile target, every example script they name exists;
- docs/flags.md is what `python -m openrlhf_speed.cli.flags_doc` prints;
- no text of the project (its code, tests, scripts and docs) tells how it was developed: a
  numbered stop, issue or helper (the patterns are HISTORY's; this file is the one that names them).

The parsers are read once, in a subprocess (building OpenRLHF's train parser imports vLLM
and installs the flash_attn fallback, which must not leak into other tests' process).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _util import REPO

README = REPO / "README.md"
GENERATED = REPO / "docs" / "flags.md"
REGENERATE = ".venv/bin/python -m openrlhf_speed.cli.flags_doc > docs/flags.md"
MARKER = "=== flags_doc json ==="

# Flags of other tools that the docs show in their commands, by tool.
OUTSIDE_FLAGS = {
    "scripts/bootstrap.sh, flags_doc": {"--gpu", "--check"},
    "ray start": {"--head", "--address", "--num-gpus"},
    "srun / sbatch": {"--nodes", "--gpus", "--cpus-per-task", "--partition", "--account", "--mem",
                      "--exclusive", "--gpus-per-task", "--ntasks-per-node", "--time"},
    "hf download": {"--repo-type", "--local-dir"},
    "pip": {"--no-build-isolation", "--no-deps"},
    "pytest": {"--durations"},
}

FLAG = re.compile(r"(?<![\w/!-])--[A-Za-z][\w.-]*")  # not an HTML comment's <!--
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
MAKE = re.compile(r"(?:^|[\s;&|(`])make\s+(?:[A-Z_]+=\S*\s+)*([a-z][\w-]*)", re.M)
SCRIPT = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:sh|sbatch))\b")
# "stop 24", "Stop-24", "issue 13", "issue #13", "helper-7", "Helper 7"; not "stops", "nonstop".
HISTORY = re.compile(r"\b(?:stop|issue|helper)(?: ?#|[ -])[0-9]+", re.I)


def doc_files() -> list[Path]:
    """README.md and every .md under docs/, subfolders included, written by hand (flags.md is
    checked against its generator). Only documents: run evidence beside them (metrics.jsonl,
    bench.json) is data, and may or may not sit under docs/."""
    return [README, *sorted(p for p in (REPO / "docs").rglob("*.md") if p != GENERATED)]


@pytest.fixture(scope="module")
def parsers(tmp_path_factory) -> dict:
    """The parsers' option strings, the generated reference, and `--check` run on a stale file."""
    stale = tmp_path_factory.mktemp("flags_doc") / "flags.md"
    stale.write_text("# Flags\n", encoding="utf-8")
    code = ("import contextlib, io, json; from openrlhf_speed.cli import flags_doc as f; "
            "options = sorted(f.all_option_strings()); doc = f.render(); err = io.StringIO()\n"
            f"with contextlib.redirect_stderr(err): rc = f.main(['--check', {str(stale)!r}])\n"
            f"print({MARKER!r}); "
            "print(json.dumps({'options': options, 'doc': doc, 'check_rc': rc, 'check_err': err.getvalue()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and MARKER in out.stdout, out.stderr[-3000:]
    return json.loads(out.stdout.split(MARKER, 1)[1])


def named_flags(text: str) -> set[str]:
    flags = set()
    for m in FLAG.finditer(text):
        if text[m.end():m.end() + 1] == "*":  # `--speed.*`: a namespace, not a flag
            continue
        flags.add(m.group(0).rstrip(".-"))
    return flags


def test_readme_is_under_25_kb():
    size = README.stat().st_size  # the figures' source markers count too
    assert size < 25_000, f"README.md is {size:,} bytes; keep it under 25,000 and move detail to docs/"


def test_every_named_flag_exists(parsers):
    known = set(parsers["options"]).union(*OUTSIDE_FLAGS.values())
    missing = {}
    for path in doc_files():
        for flag in sorted(named_flags(path.read_text(encoding="utf-8")) - known):
            missing.setdefault(flag, []).append(path.name)
    assert not missing, (
        "flags named in the docs that no parser accepts (rename them, or add an outside tool's flag to "
        f"OUTSIDE_FLAGS): {missing}")


def test_the_flag_scan_finds_flags_and_skips_namespaces():
    assert named_flags("`--speed.n_init 4`, the `--speed.*` group, `--ds.param_dtype`.") == {
        "--speed.n_init", "--ds.param_dtype"}


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))


def test_every_named_make_target_exists():
    targets = makefile_targets()
    missing = {}
    for path in doc_files():
        code = "\n".join(CODE.findall(path.read_text(encoding="utf-8")))
        for target in set(MAKE.findall(code)) - targets:
            missing.setdefault(target, []).append(path.name)
    assert not missing, f"`make` targets named in the docs that the Makefile lacks: {missing}"


def test_the_make_scan_reads_variables_and_prefixes():
    code = "\n".join(CODE.findall("`make setup-gpu FLASH_ATTN=1`\n```\nsrun --gpus=1 make FOO=1 train\n```"))
    assert set(MAKE.findall(code)) == {"setup-gpu", "train"}


def script_exists(name: str) -> bool:
    if "/" in name:
        return any((root / name).is_file() for root in (REPO, REPO / "examples" / "scripts", REPO / "scripts"))
    return any(p.is_file() for root in (REPO / "examples", REPO / "scripts") for p in root.rglob(name))


def test_every_named_script_exists():
    missing = {}
    for path in doc_files():
        for name in set(SCRIPT.findall(path.read_text(encoding="utf-8"))):
            if not script_exists(name):
                missing.setdefault(name, []).append(path.name)
    assert not missing, f"scripts named in the docs that do not exist: {missing}"


def test_the_flags_reference_is_generated_from_the_parsers(parsers):
    actual = GENERATED.read_text(encoding="utf-8") if GENERATED.exists() else ""
    assert actual == parsers["doc"], f"docs/flags.md is out of date with the parsers; regenerate it: {REGENERATE}"


def test_check_mode_fails_on_a_stale_reference_and_says_how_to_regenerate(parsers):
    assert parsers["check_rc"] == 1
    assert "out of date" in parsers["check_err"] and REGENERATE in parsers["check_err"]
    assert "+## `openrlhf-speed train`" in parsers["check_err"]  # the diff shows what is missing


def test_the_reference_lists_the_project_flags_and_every_subcommand(parsers):
    doc = parsers["doc"]
    for flag in ("--speed.strategy", "--speed.n_init", "--megatron.tp", "--backend", "--dry_run",
                 "--ds.param_dtype", "--speed.reward_retries"):
        assert f"| `{flag}` |" in doc, flag
    for command in ("train", "evaluate", "bench", "replay", "prepare-data", "proving-ground"):
        assert f"## `openrlhf-speed {command}" in doc, command
    assert "`--actor.model_name_or_path`" in doc  # OpenRLHF's own, listed by name


def project_text_files():
    roots = ["README.md", "Makefile", "docs", "openrlhf_speed", "examples", "tests", "scripts"]
    for root in (REPO / r for r in roots):
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if (path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".png", ".pyc")
                    and path != Path(__file__).resolve()):  # this file names the patterns it looks for
                yield path


def test_the_history_scan_catches_numbered_stops_issues_and_helpers_only():
    for line in ("fixed in stop 24", "Stop-37 measured it", "see issue 13 item 4", "Issue #15 (2):",
                 "issue#2", "the helper-7 run", "Helper 3 found"):
        assert HISTORY.search(line), line
    for line in ("the run stops at 3 steps", "nonstop 5", "helpers 2 and", "an issue: 3 rows", "stop_1 = 2",
                 "reissue 4", "the helper function"):
        assert not HISTORY.search(line), line


def test_no_text_tells_how_the_project_was_developed():
    found = []
    for path in project_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, ("say what is true of the code, with its figure and command, not how it was developed:\n"
                       + "\n".join(found))
