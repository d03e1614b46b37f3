"""Figures quoted in README.md and docs/*.md, rebuilt from the evidence they come from.

A quoted figure is written between two HTML comments, invisible where the Markdown renders:

    <!--fig benchmarks/proving-v5/avx512/results.json headline.ratios.speed_over_dapo.measured|ci-->1.19x [1.04-1.39]<!--/fig-->

The first word names the evidence file (a published results.json, soak.json, an advise JSON,
the regime map's regime.json), relative to the repository. The second is where the figure is
in it, a dotted path (`rows[cell=v5]` picks the list item whose `cell` is `v5`, `runs[0]` the
first), or `final:<curriculum>` for a results.json curriculum's final accuracy as every report
computes it (the mean over its runs of each run's last two evaluations). After `|` comes how
it is printed:

    ci[:SPEC[:UNIT]]   a figure and its interval as the tables print it: 1.19x [1.04-1.39]
    range[:SPEC]       min-max of a list, nulls left out: 73-78
    SPEC               a Python format spec: .4f, .0%, ,.0f

A marker right after a backtick is an example (as in docs/testing.md), not a figure.
`check(text)` returns every marker whose text differs from its rebuild, or whose source does
not give one; tests/docs/test_figures.py runs it over the README and docs/ in `make test`. The
published results.json files are themselves rebuilt from their runs by `bench --report_only`
(tests/bench), so a marked figure is tied to the runs. The regime-map table is generated whole
(`regime-map --readme`)."""

import json
import math
import os
import re

MARK = re.compile(r"(?<!`)<!--fig (\S+) (\S+?)-->(.*?)<!--/fig-->", re.S)
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[([^=\]]+)=([^\]]+)\]")


class FigureError(ValueError):
    """A marker whose source or path gives no figure."""


def _walk(data, path: str):
    for name, index, key, value in _STEP.findall(path):
        if name:
            if not isinstance(data, dict) or name not in data:
                raise FigureError(f"no key {name!r}")
            data = data[name]
        elif index:
            data = data[int(index)]
        else:
            picked = [item for item in data if str(item.get(key)) == value]
            if len(picked) != 1:
                raise FigureError(f"{len(picked)} items with {key}={value}")
            data = picked[0]
    return data


def _final(results: dict, curriculum: str) -> float:
    from openrlhf_speed.bench import levels

    groups = {k: v["curriculum"] for k, v in results["runs_summary"].items()}  # as the report grouped them
    anchor = levels.base_final(results["runs"], groups, base=curriculum)
    if anchor is None:
        raise FigureError(f"no runs of {curriculum!r} with evaluations")
    return anchor["final"]


def _print(value, how: str) -> str:
    kind, _, rest = how.partition(":")
    if kind == "ci":
        from openrlhf_speed.bench import regime

        spec, _, unit = rest.partition(":")
        if not isinstance(value, dict) or "point" not in value:
            raise FigureError("not a figure with an interval")
        return regime.format_ci(value, spec or ".2f", unit if rest.count(":") else "x")
    if kind == "range":
        values = [v for v in value if v is not None]
        if not values:
            raise FigureError("an empty list")
        spec = rest or ".0f"
        return f"{min(values):{spec}}-{max(values):{spec}}"
    if isinstance(value, float) and math.isnan(value):
        raise FigureError("NaN")
    return format(value, how)


def rebuild(source: str, key: str, root: str = ".") -> str:
    """The printed figure `key` of the evidence file `source`; FigureError when there is none."""
    path = os.path.join(root, source)
    if not os.path.isfile(path):
        raise FigureError(f"{source} does not exist")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    where, _, how = key.partition("|")
    value = _final(data, where.split(":", 1)[1]) if where.startswith("final:") else _walk(data, where)
    return _print(value, how)


def check(text: str, root: str = ".") -> list:
    """(source, key, printed, rebuilt or the error) for each marker that does not hold."""
    wrong = []
    for source, key, printed in MARK.findall(text):
        try:
            rebuilt = rebuild(source, key, root)
        except (FigureError, KeyError, IndexError, TypeError, ValueError) as e:
            rebuilt = f"error: {e}"
        if rebuilt != printed:
            wrong.append((source, key, printed, rebuilt))
    return wrong

