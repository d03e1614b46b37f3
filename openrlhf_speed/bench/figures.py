"""Figures quoted in README.md and docs/*.md, rebuilt from the evidence they come from.

A quoted figure is written between two HTML comments, invisible where the Markdown renders:

    <!--fig benchmarks/proving-v5/avx512/results.json headline.ratios.speed_over_dapo.measured|ci-->1.19x [1.04-1.39]<!--/fig-->

The first word names the evidence file (a published results.json, soak.json, an advise JSON,
the regime map's regime.json), relative to the repository. The second is where the figure is
in it, a dotted path (`rows[cell=v5]` picks the list item whose `cell` is `v5`, `runs[0]` the
first), or `final:<curriculum>` for a results.json curriculum's final accuracy as every report
computes it (the mean over its runs of each run's last two evaluations). After `|` comes how
it is printed. `[*]` (every item of a list or a dict's values) or `[*curriculum=dapo]` (every
item with that field) maps the rest of the path over the items and gives a list, for:

    ci[:SPEC[:UNIT]]   a figure and its interval as the tables print it: 1.19x [1.04-1.39]
    range[:SPEC]       min-max of a list, nulls and NaNs left out: 73-78, or 43-48% with .0%;
                       of figures with intervals, their points (those not measured left out)
    mean[:SPEC]        the mean of a list, nulls and NaNs left out
    duration           seconds as a run summary prints them: 12m 12s
    SPEC               a Python format spec: .4f, .0%, ,.0f

A marker right after a backtick is an example (as in docs/testing.md), not a figure. A whole
table is marked `<!--table SOURCE NAME-->` ... `<!--/table-->` and built by bench/doc_tables.py.
`check(text)` returns every marker whose text differs from its rebuild, or whose source does
not give one; tests/docs/test_figures.py runs it over the README and docs/ in `make test`, and
`openrlhf-speed figures FILE...` from the shell (`--write` rewrites them from the evidence).
The published results.json files are themselves rebuilt from their runs by `bench
--report_only` (tests/bench), so a marked figure is tied to the runs. The regime-map table is
generated whole (`regime-map --readme`)."""

import json
import os
import re

from openrlhf_speed.curriculum.payoff import is_nan

MARK = re.compile(r"(?<!`)<!--fig (\S+) (\S+?)-->(.*?)<!--/fig-->", re.S)
TABLE = re.compile(r"(?<!`)(<!--table (\S+) (\S+?)-->\n)(.*?)(<!--/table-->)", re.S)
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[(\*?)([^=\]]*)=?([^\]]*)\]")


class FigureError(ValueError):
    """A marker whose source or path gives no figure."""


def _walk(data, path):
    steps = _STEP.findall(path) if isinstance(path, str) else path
    for i, (name, index, every, key, value) in enumerate(steps):
        if name:
            if not isinstance(data, dict) or name not in data:
                raise FigureError(f"no key {name!r}")
            data = data[name]
        elif index:
            data = data[int(index)]
        else:
            items = list(data.values()) if isinstance(data, dict) else data
            picked = [item for item in items if not key or str(item.get(key)) == value]
            if every:  # [*] or [*key=value]: the rest of the path on each item, a list
                return [_walk(item, steps[i + 1:]) for item in picked]
            if len(picked) != 1:
                raise FigureError(f"{len(picked)} items with {key}={value}")
            data = picked[0]
    return data


def _final(results: dict, curriculum: str) -> float:
    """levels.base_final's 'final' of a curriculum: the mean over its runs of each run's last two evaluations."""
    finals = [s.get("final_accuracy_last_two", float("nan")) for s in results["runs_summary"].values()
              if s["curriculum"] == curriculum]
    if not finals or any(is_nan(x) for x in finals):
        raise FigureError(f"no runs of {curriculum!r} with evaluations")
    return sum(finals) / len(finals)


def _print(value, how: str) -> str:
    kind, _, rest = how.partition(":")
    if kind == "ci":
        from openrlhf_speed.bench import regime

        spec, _, unit = rest.partition(":")
        if not isinstance(value, dict) or "point" not in value:
            raise FigureError("not a figure with an interval")
        return regime.format_ci(value, spec or ".2f", unit if rest.count(":") else "x")
    if kind in ("range", "mean"):
        values = [v.get("point") if isinstance(v, dict) else v for v in value]  # a figure with an interval
        values = [v for v in values if v is not None and not is_nan(v)]
        if not values:
            raise FigureError("an empty list")
        spec = rest or ".0f"
        if kind == "mean":
            return format(sum(values) / len(values), spec)
        low = format(min(values), spec)
        return f"{low[:-1] if spec.endswith('%') else low}-{max(values):{spec}}"
    if kind == "duration":  # a clock as run summaries print it: 12m 12s
        from openrlhf_speed.rollout.run_summary import format_duration

        return format_duration(value)
    if is_nan(value):
        raise FigureError("NaN")
    return format(value, how)


def _load(source: str, root: str):
    path = os.path.join(root, source)
    if not os.path.isfile(path):
        raise FigureError(f"{source} does not exist")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def rebuild(source: str, key: str, root: str = ".") -> str:
    """The printed figure `key` of the evidence file `source`; FigureError when there is none."""
    data = _load(source, root)
    where, _, how = key.partition("|")
    value = _final(data, where.split(":", 1)[1]) if where.startswith("final:") else _walk(data, where)
    return _print(value, how)


def rebuild_table(source: str, name: str, root: str = ".") -> str:
    """The table `name` (doc_tables.TABLES) of the results.json `source`, its lines ending in newlines."""
    from openrlhf_speed.bench import doc_tables

    if name not in doc_tables.TABLES:
        raise FigureError(f"no table {name!r}; there are {', '.join(doc_tables.TABLES)}")
    return "".join(line + "\n" for line in doc_tables.TABLES[name](_load(source, root)))


# What a marker whose evidence gives no figure raises: FigureError (a ValueError), or what a path
# that walks off the evidence's shape raises. check() reports it, write() names the marker.
NO_FIGURE = (KeyError, IndexError, TypeError, ValueError)


def _safely(build, *args) -> str:
    try:
        return build(*args)
    except NO_FIGURE as e:
        return f"error: {e}"


def check(text: str, root: str = ".") -> list:
    """(source, key, printed, rebuilt or the error) for each marker that does not hold."""
    wrong = []
    for source, key, printed in MARK.findall(text):
        rebuilt = _safely(rebuild, source, key, root)
        if rebuilt != printed:
            wrong.append((source, key, printed, rebuilt))
    for _, source, name, printed, _ in TABLE.findall(text):
        rebuilt = _safely(rebuild_table, source, name, root)
        if rebuilt != printed:
            wrong.append((source, name, printed, rebuilt))
    return wrong


def write(text: str, root: str = ".") -> str:
    """`text` with every marked figure and table rebuilt; FigureError names the first that has none."""
    def named(marker, build, *args):
        try:
            return build(*args)
        except NO_FIGURE as e:
            raise FigureError(f"{marker}: {e}") from e

    def figure(m):
        return f"<!--fig {m[1]} {m[2]}-->{named(f'<!--fig {m[1]} {m[2]}-->', rebuild, m[1], m[2], root)}<!--/fig-->"

    def table(m):
        return m[1] + named(m[1].strip(), rebuild_table, m[2], m[3], root) + m[5]

    return TABLE.sub(table, MARK.sub(figure, text))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="openrlhf-speed figures",
                                     description="check (or --write) the marked figures and tables of Markdown files")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--write", action="store_true", help="rewrite them from their evidence instead of checking")
    parser.add_argument("--root", default=".", help="the repository the sources are relative to")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if args.write:
            try:
                new = write(text, args.root)
            except FigureError as e:  # all or nothing: a file half rewritten would hide the marker
                failed += 1
                print(f"{path}: {e}; the file is left as it was (fix the marker or its evidence)")
                continue
            if new != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                print(f"{path}: rewritten")
            continue
        for source, key, printed, rebuilt in check(text, args.root):
            failed += 1
            print(f"{path}: {source} {key}: printed {printed!r}, evidence gives {rebuilt!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

