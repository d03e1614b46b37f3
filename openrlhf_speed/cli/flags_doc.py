"""docs/flags.md, generated from the parsers themselves, so the reference cannot drift.

    python -m openrlhf_speed.cli.flags_doc > docs/flags.md     # regenerate
    python -m openrlhf_speed.cli.flags_doc --check             # exit 1 when docs/flags.md is stale

The train parser is OpenRLHF's own (built inside `openrlhf.cli.train_ppo_ray`'s `__main__`
block, so it cannot be imported as a function): we run that module as `openrlhf-speed train`
does, add our groups, and stop it at `parse_args`. A flag is the project's when our groups
added it or changed it (`--ds.param_dtype` gains `auto` and `fp32`); OpenRLHF's others are
listed by name at the end. Every other subcommand is found through `cli/main.py`'s
`COMMANDS` and its parser is caught the same way (its entry point is called with `--help`
and stopped at `parse_args`), so a new subcommand appears here without an edit.
"""

import argparse
import contextlib
import difflib
import functools
import importlib
import os
import runpy
import sys

DOC_PATH = os.path.join("docs", "flags.md")
UNTITLED = ("options", "optional arguments")  # argparse's default group, OpenRLHF's flags
REGENERATE = ".venv/bin/python -m openrlhf_speed.cli.flags_doc > docs/flags.md"


class _Caught(BaseException):
    """Raised from a patched `parse_args` with the parser in hand (BaseException: some entry
    points catch SystemExit or Exception around their parsing)."""

    def __init__(self, parser):
        super().__init__()
        self.parser = parser


def _catch_parser(run, before=None) -> argparse.ArgumentParser | None:
    """Calls `run()` with `ArgumentParser.parse_args`/`parse_known_args` replaced by a catch."""
    originals = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

    def caught(parser, *args, **kwargs):
        if before is not None:
            before(parser)
        raise _Caught(parser)

    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = caught
    try:
        run()
    except _Caught as c:
        return c.parser
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = originals
    return None


def _signature(action) -> tuple:
    return (tuple(action.option_strings), action.help, repr(action.default), repr(action.choices))


@functools.lru_cache(maxsize=1)
def train_parser() -> tuple[argparse.ArgumentParser, frozenset]:
    """OpenRLHF's train parser with our groups, and the ids of the actions our groups added
    or changed. Its imports' log lines (DeepSpeed's accelerator warning) go to stderr, so that
    stdout is the document alone."""
    from openrlhf_speed.cli import flags
    from openrlhf_speed.compat import flash_attn_fallback

    flash_attn_fallback.install()  # OpenRLHF imports flash_attn at load time
    before = {}

    def add_ours(parser):
        before.update({id(a): _signature(a) for a in parser._actions})
        flags.add_arguments(parser)

    saved_argv = sys.argv
    sys.argv = ["openrlhf-speed train"]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            parser = _catch_parser(
                lambda: runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=False), add_ours)
    finally:
        sys.argv = saved_argv
    ours = frozenset(id(a) for a in parser._actions if before.get(id(a)) != _signature(a))
    return parser, ours


def _commands() -> dict:
    from openrlhf_speed.cli import main

    return main.COMMANDS


@functools.lru_cache(maxsize=1)
def command_parsers() -> dict:
    """{subcommand: parser} for every subcommand but train, caught from its entry point."""
    from openrlhf_speed.cli import main

    parsers = {}
    for name, (module_name, _) in _commands().items():
        if name == "train":
            continue
        module = importlib.import_module(module_name)
        entry = getattr(module, main.ENTRY.get(module_name, "main"))
        with contextlib.redirect_stdout(sys.stderr):
            parser = _catch_parser(lambda: entry(["--help"]))
        if parser is None:
            raise RuntimeError(f"openrlhf-speed {name}: {module_name} parsed no flags through argparse; "
                               "flags_doc cannot list its flags")
        parsers[name] = parser
    return parsers


def _walk(parser, prefix: str):
    """(name, parser) for a parser and its sub-actions' parsers (`proving-ground build`)."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _walk(sub, f"{prefix} {sub_name}")


def all_option_strings() -> set[str]:
    """Every `--flag` any `openrlhf-speed` command accepts (OpenRLHF's train flags included)."""
    parsers = [train_parser()[0], *command_parsers().values()]
    return {opt for p in parsers for _, sub in _walk(p, "") for a in sub._actions for opt in a.option_strings}


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action) -> str:
    if action.default is None or action.default is argparse.SUPPRESS:
        return ""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "on" if action.default else "off"
    if isinstance(action.default, (list, tuple)):
        return "`" + " ".join(map(str, action.default)) + "`" if action.default else ""
    return f"`{action.default}`" if str(action.default) != "" else '`""`'


def _help(parser, action) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return _cell(text)


def _row(parser, action) -> str:
    flag = ", ".join(f"`{o}`" for o in action.option_strings)
    return f"| {flag} | {_cell(_default(action))} | {_help(parser, action)} |"


def _table(parser, actions) -> list[str]:
    rows = [_row(parser, a) for a in actions if a.option_strings and a.help is not argparse.SUPPRESS
            and "--help" not in a.option_strings]
    return ["| flag | default | meaning |", "|---|---|---|", *rows] if rows else ["(no flags)"]


def _train_section() -> list[str]:
    parser, ours = train_parser()
    out = ["## `openrlhf-speed train`", "",
           "Every flag of OpenRLHF 0.11.2's `train_ppo_ray` keeps its name, default and meaning. "
           "The tables below are the flags this project adds or changes, by group; OpenRLHF's "
           "other flags are listed by name after them (`openrlhf-speed train --help` prints their help).", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if id(a) in ours]
        if actions:
            title = "OpenRLHF's flags that this project changes" if group.title in UNTITLED else group.title
            out += [f"### {title}", "", *_table(parser, actions), ""]
    theirs = sorted(o for a in parser._actions if id(a) not in ours for o in a.option_strings
                    if o.startswith("--") and o != "--help")
    out += ["### OpenRLHF's own flags", "", ", ".join(f"`{o}`" for o in theirs), ""]
    return out


def _command_section(name: str, parser) -> list[str]:
    out = []
    for sub_name, sub in _walk(parser, f"openrlhf-speed {name}"):
        description = _cell((sub.description or "").strip().split("\n\n")[0])
        out += [f"## `{sub_name}`", ""]
        if description:
            out += [description, ""]
        out += [*_table(sub, sub._actions), ""]
    return out


def render() -> str:
    out = ["# Flags", "",
           "Generated from the parsers by `python -m openrlhf_speed.cli.flags_doc`; do not edit by hand. "
           f"Regenerate with `{REGENERATE}`; `tests/docs` fails when this file is out of date.", ""]
    out += _train_section()
    for name, parser in command_parsers().items():
        out += _command_section(name, parser)
    return "\n".join(out).rstrip("\n") + "\n"


def check(path: str = DOC_PATH) -> tuple[bool, str]:
    """(up to date, a short diff) of `path` against the parsers."""
    expected = render()
    try:
        with open(path, encoding="utf-8") as f:
            actual = f.read()
    except FileNotFoundError:
        return False, f"{path} does not exist"
    if actual == expected:
        return True, ""
    diff = difflib.unified_diff(actual.splitlines(), expected.splitlines(), path, "parsers", lineterm="", n=0)
    return False, "\n".join(list(diff)[:40])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m openrlhf_speed.cli.flags_doc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", nargs="?", const=DOC_PATH, default=None, metavar="PATH",
                   help=f"compare PATH (default {DOC_PATH}) with the parsers instead of printing; exit 1 when it differs")
    args = p.parse_args(argv)
    if args.check is None:
        sys.stdout.write(render())
        return 0
    ok, diff = check(args.check)
    if ok:
        print(f"{args.check} is up to date")
        return 0
    print(f"{args.check} is out of date; regenerate it with: {REGENERATE}\n{diff}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
