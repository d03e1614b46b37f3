"""`openrlhf-speed regime-map`: the published cells side by side, where screening pays, and
alpha fitted on them for `advise`.

Each cell is a published benchmark folder (results.json with its runs); its figures are
rebuilt from the runs with the current report code (regime.py), so the map never copies a
figure by hand. Writes regime.json (every row, the fit, the leave-one-cell-out check),
regime.md and regime.png (speedup over `off` against `off`'s zero-variance share, one line
per batch, the ceiling dashed).

The fit: ln(step ratio) = alpha x ln(rho) through the origin, each cell weighted by the
inverse variance of its ln(step ratio) (from its bootstrap interval), the interval widened
by the cells' dispersion when they disagree more than their own intervals say (the Birge
ratio). One fit per batch B, and one over every cell for the record: alpha rises as B falls
towards the critical batch size, so `advise` takes the fit of the measured batch nearest its
run's. curriculum/payoff.ALPHA holds the published per-batch fits; tests/bench check they are
these.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Optional

from openrlhf_speed.bench import evidence, regime

ROOT = Path(__file__).resolve().parents[2]
# (name, results folder, CPU kind): the cells of the map, each a published benchmark. A regime
# cell's first copy has an entry of its own, so a copy published later on another kind (the
# entry with kind None finds it) is `<cell>-<kind>` and never takes over the first one's name.
CELLS = (
    ("v4", "benchmarks/proving-v4/avx512", "avx512"),
    ("v4-avx2", "benchmarks/proving-v4/avx2", "avx2"),
    ("v5", "benchmarks/proving-v5/avx512", "avx512"),
    ("v5", "benchmarks/proving-v5", None),
    ("high-b4", "benchmarks/regime/high-b4/avx2", "avx2"),
    ("high-b4", "benchmarks/regime/high-b4", None),
    ("high", "benchmarks/regime/high/avx2", "avx2"),
    ("high", "benchmarks/regime/high", None),
    ("low", "benchmarks/regime/low/avx2", "avx2"),
    ("low", "benchmarks/regime/low", None),
)

# Folders published beside a cell's kinds that are not a copy of it (`advise`'s predictions).
NOT_KINDS = ("advise",)


def expand(cells=CELLS, root: Path = ROOT) -> list:
    """The cells with their CPU kinds: a kind of None is every kind folder published under it
    that no other entry names (a cell's runs all come from one kind, `--resume` refuses another,
    and the sessions that run a cell do not choose their machine). A copy on a second kind is
    a cell of its own on the map, named `<cell>-<kind>` as v4-avx2 is, so that a figure quoted
    from one copy cannot silently become the other's; the first copy keeps its name by an
    entry of its own."""
    named = {folder for _, folder, kind in cells if kind is not None}
    out = []
    for name, folder, kind in cells:
        if kind is not None:
            out.append((name, folder, kind))
            continue
        if not (root / folder).is_dir():
            continue
        kinds = [k.name for k in sorted((root / folder).iterdir())
                 if k.is_dir() and f"{folder}/{k.name}" not in named and k.name not in NOT_KINDS]
        bare = len(kinds) == 1 and not any(n == name and k is not None for n, _, k in cells)
        out += [(name if bare else f"{name}-{k}", f"{folder}/{k}", k) for k in kinds]
    return out


# A cell enters the map once it plans these curricula and each has MIN_RUNS finished runs (or
# all it plans, if fewer): its rows compare SPEED with both baselines over seeds, and a cell
# published run by run (each sitting publishes, so its evidence outlives the machine) must not
# move the fit half way. A curriculum beyond them (speed_seq) joins its cell's row on the same
# terms, later if its runs come later; the fit does not use it.
MAP_CURRICULA = ("off", "dapo", "speed")
MIN_RUNS = 3


def runs_short(meta: dict, results: dict) -> dict:
    """{curriculum: runs still to finish before it has MIN_RUNS} for each planned curriculum
    short of them, in plan order."""
    from collections import Counter

    from openrlhf_speed.bench.resume import plan_of

    plan, done = plan_of(meta), set(results.get("runs_summary", {}))
    planned, finished = Counter(r["curriculum"] for r in plan), Counter(r["curriculum"] for r in plan if r["key"] in done)
    return {c: min(MIN_RUNS, n) - finished[c] for c, n in planned.items() if finished[c] < min(MIN_RUNS, n)}


def cell_missing(meta: dict, results: dict) -> list:
    """What keeps a published cell off the map: a curriculum of MAP_CURRICULA it does not plan,
    and the runs those it plans still need."""
    from openrlhf_speed.bench.resume import plan_of

    planned, short = {r["curriculum"] for r in plan_of(meta)}, runs_short(meta, results)
    return ([f"curriculum {c}" for c in MAP_CURRICULA if c not in planned]
            + [f"{n} {c} run(s)" for c, n in short.items() if c in MAP_CURRICULA])


def read_cell(folder) -> Optional[tuple]:
    """(bench.json, results.json) of a published cell folder; None when it is not published."""
    path = Path(folder)
    if not (path / "results.json").is_file():
        return None
    return json.loads((path / "bench.json").read_text()), json.loads((path / "results.json").read_text())


def mix_of(meta: dict) -> str:
    """The cell's training data: a regime mix's name, else 'full', the proving ground's whole
    set, so that a figure can name the cells of one mix (`rows[*mix=full]`) and stay true as
    cells of other mixes join its batch."""
    from openrlhf_speed.proving import mixes

    return mixes.mix_of(meta.get("train_data") or "") or "full"


def cell_report(meta: dict, d: dict, folder) -> dict:
    """The cell's report rebuilt from what it published: results.json's settings and target, and
    the runs' records from their metrics.jsonl in folder."""
    from openrlhf_speed.bench import report

    rule = meta.get("target_rule")
    groups = {k: v["curriculum"] for k, v in d["runs_summary"].items()}
    runs = report.load_runs(str(folder), d["runs_summary"])
    return report.build_report(runs, None if rule else d["target_accuracy"], d["settings"], groups=groups, rule=rule)


def load_cell(folder: str) -> Optional[dict]:
    """The report of a published folder; None when the folder is not published yet or not ready
    for the map (`cell_missing`)."""
    cell = read_cell(folder)
    return None if cell is None or cell_missing(*cell) else cell_report(*cell, folder)


def row(name: str, kind: str, report: dict) -> Optional[dict]:
    c = report.get("regime")
    if not c:
        return None
    ratios = (report.get("headline") or {}).get("ratios", {})
    pick = {k: {"measured": v.get("measured"), "projected": v.get("projected_linear")} for k, v in ratios.items()}
    out = {"cell": name, "kind": kind, **c, "speed_over_off": pick.get("speed_over_off"),
           "speed_over_dapo": pick.get("speed_over_dapo")}
    out["share_of_ceiling"] = {k: regime.share_of_ceiling((out["speed_over_off"] or {}).get(k), c["ceiling"].get(k))
                               for k in ("measured", "projected")}
    out["successors"] = successors(report, c, out["speed_over_off"])
    return out


def successors(report: dict, c: dict, speed_over_off: Optional[dict]) -> dict:
    """Each curriculum beside off, uniform, DAPO and SPEED (speed_seq and the like) in a cell:
    its speedups at the headline target, its discarded share and its share of the ceiling,
    and over SPEED the ratio of the two projected speedups (points: the runs are not paired)."""
    out = {}
    for name, per in (c.get("curricula") or {}).items():
        # a baseline run another way (dapo+pace2: DAPO paced) is no successor: the report gives
        # it no speedup, and its figures are the cell's
        if name in (regime.BASE, regime.FILTER, regime.OURS, "uniform") or not evidence.is_ours(name):
            continue
        ratios = (((report.get("headlines") or {}).get(name)) or {}).get("ratios", {})
        pick = {b: {"measured": (ratios.get(f"{name}_over_{b}") or {}).get("measured"),
                    "projected": (ratios.get(f"{name}_over_{b}") or {}).get("projected_linear")}
                for b in (regime.BASE, regime.FILTER)}
        mine, speeds = (pick[regime.BASE]["projected"] or {}), ((speed_over_off or {}).get("projected") or {})
        out[name] = {"over_off": pick[regime.BASE], "over_dapo": pick[regime.FILTER],
                     # a ceiling on either side leaves the ratio of the two without a direction
                     "over_speed_projected": mine["point"] / speeds["point"]
                     if "point" in mine and speeds.get("point") and not (mine.get("at_most") or speeds.get("at_most"))
                     else None,
                     "discarded_share": per["discarded_share"],
                     "engine_rate_vs_speed": regime.rate_over_speed(per, (c.get("curricula") or {}).get(regime.OURS)),
                     "share_of_ceiling": {k: regime.share_of_ceiling(pick[regime.BASE][k], c["ceiling"].get(k))
                                          for k in ("measured", "projected")}}
    return out


def _ln_se(ci: dict) -> Optional[float]:
    if not ci or "low" not in ci or ci["low"] <= 0:
        return None
    return max((math.log(ci["high"]) - math.log(ci["low"])) / 3.92, 1e-3)


def fit_alpha(rows: list) -> Optional[dict]:
    """{'point', 'low', 'high', 'cells', 'birge'} of alpha over the rows with a step ratio
    and rho > 1 (see the module docstring); one such row gives its own alpha; None with none."""
    pts = []
    for r in rows:
        sr, rho = r.get("step_ratio") or {}, r.get("rho") or {}
        se = _ln_se(sr)
        # A ceiling (a SPEED run under the target) bounds the step ratio from above only.
        if "point" not in sr or "point" not in rho or se is None or rho["point"] <= 1.0 or sr.get("at_most"):
            continue
        x, y = math.log(rho["point"]), math.log(sr["point"])
        pts.append((r["cell"], x, y, se))
    if not pts:
        return None
    w = [1.0 / se ** 2 for *_, se in pts]
    sxx = sum(wi * x * x for wi, (_, x, _, _) in zip(w, pts))
    alpha = sum(wi * x * y for wi, (_, x, y, _) in zip(w, pts)) / sxx
    chi2 = sum(wi * (y - alpha * x) ** 2 for wi, (_, x, y, _) in zip(w, pts))
    birge = max(1.0, math.sqrt(chi2 / (len(pts) - 1))) if len(pts) > 1 else 1.0
    se = birge / math.sqrt(sxx)
    return {"point": alpha, "low": alpha - 1.96 * se, "high": alpha + 1.96 * se, "cells": [p[0] for p in pts],
            "birge": birge}


def fit_by_batch(rows: list) -> list:
    """fit_alpha over the cells of each batch B, largest B first, each with its 'batch': what
    `advise` uses (payoff.ALPHA, payoff.alpha_for), since alpha rises as B falls."""
    fits = [(b, fit_alpha([r for r in rows if r["batch"] == b])) for b in sorted({r["batch"] for r in rows}, reverse=True)]
    return [{"batch": b, **f} for b, f in fits if f]


def step_cost(r: dict) -> Optional[float]:
    """SPEED's projected step cost over `off`'s (kappa), from the cell's projected speedup and
    step ratio: speedup = step ratio / kappa."""
    sp, sr = (r.get("speed_over_off") or {}).get("projected") or {}, r.get("step_ratio") or {}
    if "point" not in sp or "point" not in sr or sp.get("at_most") or sr.get("at_most"):
        return None
    return sr["point"] / sp["point"]


def experiment(r: dict) -> str:
    """What a row measures, whatever host ran it: its cell folder without the CPU kind (v4 and
    v4-avx2 are one experiment on two hosts, as are high-b4 and high-b4-avx512-amx)."""
    return str(Path(r["folder"]).parent) if r.get("folder") else r["cell"]


def leave_one_out(rows: list) -> list:
    """For each cell: alpha fitted on the others as `advise` would take it (the fit of the
    measured batch nearest the cell's, payoff.alpha_for), the speedup it predicts there
    (rho^alpha / kappa, the cell's own rho and step cost), against the projected speedup measured.
    "The others" leave out the cell's copies on other hosts too: a copy predicts its twin's
    seeds and mix, which says how well a host reproduces a cell, not how well alpha carries
    to a cell it was not fitted on."""
    from openrlhf_speed.curriculum.payoff import alpha_for

    out = []
    for r in rows:
        fits = {f["batch"]: f for f in fit_by_batch([o for o in rows if experiment(o) != experiment(r)])}
        kappa, sp = step_cost(r), ((r.get("speed_over_off") or {}).get("projected") or {})
        rho = (r.get("rho") or {}).get("point")
        if not fits or kappa is None or not rho or "point" not in sp:
            continue
        others = alpha_for(r["batch"], fits)
        pred = {k: rho ** others[k] / kappa for k in ("point", "low", "high")}
        out.append({"cell": r["cell"], "alpha_others": others, "predicted": pred, "measured": sp["point"],
                    "error": pred["point"] / sp["point"] - 1.0,
                    "contains": pred["low"] <= sp["point"] <= pred["high"]})
    return out


def pending(cells=CELLS, root: Path = ROOT) -> list:
    """(cell, what it lacks) for each cell published but not on the map yet."""
    return build(cells, root)["pending"]


def build(cells=CELLS, root: Path = ROOT) -> dict:
    """The map's rows, alpha fitted on them, the leave-one-out errors, the cells published but
    not ready, and the curricula left out of a mapped cell's row until their runs are in (each
    cell folder read once)."""
    rows, waiting, later = [], [], []
    for name, folder, kind in expand(cells, root):
        cell = read_cell(root / folder)
        if cell is None:
            continue
        missing = cell_missing(*cell)
        if missing:
            waiting.append((name, missing))
            continue
        r = row(name, kind, cell_report(*cell, root / folder))
        if not r:
            continue
        late = {c: n for c, n in runs_short(*cell).items() if c in r["successors"]}
        if late:
            r["successors"] = {c: x for c, x in r["successors"].items() if c not in late}
            later.append((name, late))
        rows.append({**r, "mix": mix_of(cell[0]), "folder": folder})
    return {"rows": rows, "alpha": fit_alpha(rows), "alpha_by_batch": fit_by_batch(rows),
            "leave_one_out": leave_one_out(rows), "pending": waiting, "later": later}


def markdown(m: dict) -> str:
    lines = ["| cell | CPU | B | off's zero-variance share (first steps) | SPEED over off, measured / projected | "
             "over DAPO, measured / projected | steps to target off / SPEED | step ratio | rho | alpha | "
             "ceiling, projected | SPEED's share | SPEED, screenings free | accuracy at off's clock off / DAPO / SPEED |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in m["rows"]:
        so, sd = r["speed_over_off"] or {}, r["speed_over_dapo"] or {}
        steps = {k: [s for s in v if s is not None] for k, v in r["steps_to_target"].items()}
        st = " / ".join(f"{sum(v) / len(v):.0f}" if v else "-" for v in (steps["off"], steps["speed"]))
        acc = r["budget"]["accuracy"]
        share = r["share_of_ceiling"]["projected"]
        lines.append(f"| {r['cell']} | {r['kind']} | {r['batch']} | {r['off_zero_variance_early']:.2f} | "
                     f"{regime.table_ci(so.get('measured'))} / {regime.table_ci(so.get('projected'))} | {regime.table_ci(sd.get('measured'))} / "
                     f"{regime.table_ci(sd.get('projected'))} | {st} | {regime.table_ci(r['step_ratio'])} | {regime.table_ci(r['rho'])} | "
                     f"{regime.table_ci(r['alpha'], '.2f', '')} | {regime.table_ci(r['ceiling'].get('projected'))} | "
                     f"{regime.share_text(share, so.get('projected'))} | {regime.table_ci(r['discards_free'].get('projected'))} | "
                     f"{acc['off']:.3f} / {acc['dapo']:.3f} / {acc['speed']:.3f} |")
    beyond = [(r, name, x) for r in m["rows"] for name, x in (r.get("successors") or {}).items()]
    if beyond:
        lines += ["", "| cell | beyond SPEED | over off, measured / projected | over DAPO, measured / projected | "
                  "over SPEED, projected | discarded share (SPEED's) | share of the ceiling, projected (SPEED's) | "
                  "decode rate over SPEED's |", "|---|---|---|---|---|---|---|---|"]
        for r, name, x in beyond:
            mine, speeds = x["share_of_ceiling"]["projected"], r["share_of_ceiling"]["projected"]
            speed_discards = (r.get("curricula") or {}).get(regime.OURS, {}).get("discarded_share")
            lines.append(
                f"| {r['cell']} | {name} | {regime.table_ci(x['over_off'].get('measured'))} / "
                f"{regime.table_ci(x['over_off'].get('projected'))} | {regime.table_ci(x['over_dapo'].get('measured'))} / "
                f"{regime.table_ci(x['over_dapo'].get('projected'))} | "
                f"{'-' if x['over_speed_projected'] is None else format(x['over_speed_projected'], '.2f') + 'x'} | "
                f"{x['discarded_share']:.2f} ({'-' if speed_discards is None else format(speed_discards, '.2f')}) | "
                f"{regime.share_text(mine, x['over_off'].get('projected'))} "
                f"({regime.share_text(speeds, (r['speed_over_off'] or {}).get('projected'))}) | "
                f"{'-' if x.get('engine_rate_vs_speed') is None else format(x['engine_rate_vs_speed'], '.2f')} |")
    fits = [(f"B = {f['batch']}", f) for f in m.get("alpha_by_batch") or []]
    if m.get("alpha"):
        fits.append(("every cell", m["alpha"]))
    if fits:
        lines += ["", "| alpha fitted on | cells | alpha (95%) | Birge ratio |", "|---|---|---|---|"]
        lines += [f"| {name} | {', '.join(a['cells'])} | {a['point']:.2f} [{a['low']:.2f}-{a['high']:.2f}] | "
                  f"{a['birge']:.2f} |" for name, a in fits]
    if m.get("leave_one_out"):
        lines += ["", "| left out | alpha from the others (their B) | predicted speedup (projected) | measured | error | "
                  "inside |", "|---|---|---|---|---|---|"]
        for x in m["leave_one_out"]:
            a, p = x["alpha_others"], x["predicted"]
            lines.append(f"| {x['cell']} | {a['point']:.2f} [{a['low']:.2f}-{a['high']:.2f}] (B = {a['batch']}) | {p['point']:.2f}x "
                         f"[{p['low']:.2f}-{p['high']:.2f}] | {x['measured']:.2f}x | {x['error']:+.0%} | "
                         f"{'yes' if x['contains'] else 'no'} |")
    return "\n".join(lines)


README_BEGIN = "<!-- regime-map table: openrlhf-speed regime-map --readme README.md -->"
README_END = "<!-- end regime-map table -->"


def readme_table(m: dict) -> str:
    """The README's compact table of the cells (rendered from regime.json, never by hand)."""
    lines = ["| cell | CPU | B | `off`'s zero-variance share | SPEED over `off`, measured / projected | over DAPO, "
             "measured / projected | ceiling, projected | SPEED's share of it |", "|---|---|---|---|---|---|---|---|"]
    for r in m["rows"]:
        so, sd, share = r["speed_over_off"] or {}, r["speed_over_dapo"] or {}, r["share_of_ceiling"]["projected"]
        lines.append(f"| {r['cell']} | {r['kind']} | {r['batch']} | {r['off_zero_variance_early']:.2f} | "
                     f"{regime.table_ci(so.get('measured'))} / {regime.table_ci(so.get('projected'))} | {regime.table_ci(sd.get('measured'))} / "
                     f"{regime.table_ci(sd.get('projected'))} | {regime.table_ci(r['ceiling'].get('projected'))} | "
                     f"{regime.share_text(share, so.get('projected'))} |")
    return "\n".join(lines)


def with_readme_table(text: str, m: dict) -> str:
    """`text` (the README) with the block between the markers replaced by readme_table(m)."""
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"the README has no block between '{README_BEGIN}' and '{README_END}'")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_BEGIN}\n{readme_table(m)}\n{README_END}{tail}"


def _ceilings(ax, points: list, color: str) -> None:
    """A 'v' over each (x, interval) that is an upper bound (a run of the curriculum did not reach)."""
    top = [(x, c["point"]) for x, c in points if c.get("at_most")]
    if top:
        ax.scatter(*zip(*top), marker="v", s=70, color=color, zorder=3)


def _yerr(points: list) -> list:
    """Error bars of (x, cell) points; a cell of one run a curriculum has a point and no interval: no bar."""
    return [[c["point"] - c.get("low", c["point"]) for _, c in points],
            [c.get("high", c["point"]) - c["point"] for _, c in points]]


def plot(m: dict, path: str) -> Optional[str]:
    def speed(r):
        return ((r["speed_over_off"] or {}).get("projected") or {}).get("point")

    # A cell where a SPEED run never reached the target has no SPEED point; its ceiling is still drawn
    # and its label says why SPEED's is missing, so the cell does not silently drop off the map.
    rows = [r for r in m["rows"] if speed(r) or (r["ceiling"].get("projected") or {}).get("point")]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, b in enumerate(sorted({r["batch"] for r in rows})):
        pts = sorted((r["off_zero_variance_early"], r) for r in rows if r["batch"] == b)
        xs = [x for x, _ in pts]
        for j, (key, label, style) in enumerate((("projected", "SPEED", "-o"), ("ceiling", "ceiling", "--s"))):
            cis = [(r["speed_over_off"] or {}).get("projected") if key == "projected" else r["ceiling"].get("projected")
                   for _, r in pts]
            ok = [(x, c) for x, c in zip(xs, cis) if c and "point" in c]
            if ok:
                ax.errorbar([x for x, _ in ok], [c["point"] for _, c in ok],
                            yerr=_yerr(ok),
                            fmt=style, color=f"C{i}", capsize=3, label=f"{label}, B = {b}", alpha=1.0 if j == 0 else 0.6)
                _ceilings(ax, ok, f"C{i}")
        beyond = [(x, name, s["over_off"]["projected"]) for x, r in pts for name, s in (r.get("successors") or {}).items()
                  if (s["over_off"].get("projected") or {}).get("point")]
        for k, name in enumerate(sorted({name for _, name, _ in beyond})):
            mine = [(x, c) for x, n, c in beyond if n == name]
            ax.errorbar([x for x, _ in mine], [c["point"] for _, c in mine],
                        yerr=_yerr(mine),
                        fmt="^:", color=f"C{i}", capsize=3, label=f"{name}, B = {b}", alpha=0.8, markersize=5 + k)
            _ceilings(ax, mine, f"C{i}")
        for x, r in pts:
            y = speed(r) or r["ceiling"]["projected"]["point"]
            why = ("" if not ((r["speed_over_off"] or {}).get("projected") or {}).get("at_most")
                   else "\n(SPEED: at most; a run did not reach)") if speed(r) else "\n(a SPEED run: not reached)"
            ax.annotate(r["cell"] + why, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.set_xlabel("off's zero-variance share of groups at N = 24 (its first steps)")
    ax.set_ylabel("speedup over off to off's final accuracy\n(GPU projection, 95% interval; v = at most)")
    ax.set_title("Where screening pays: SPEED against the ceiling\n(DAPO's kept groups, its discards free)", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="openrlhf-speed regime-map", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="docs/regime", help="folder for regime.md and regime.png")
    p.add_argument("--publish", default="benchmarks/regime/regime.json", help="where regime.json goes")
    p.add_argument("--readme", default=None, help="also rewrite this README's regime-map table block")
    args = p.parse_args(argv)
    m = build()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(os.path.dirname(args.publish) or ".", exist_ok=True)
    with open(args.publish, "w") as f:
        json.dump(m, f, indent=1, default=float)
    text = markdown(m)
    with open(os.path.join(args.out, "regime.md"), "w") as f:
        f.write(text + "\n")
    plot(m, os.path.join(args.out, "regime.png"))
    if args.readme:
        m_json = json.loads(json.dumps(m, default=float))  # the table as the published json renders it
        Path(args.readme).write_text(with_readme_table(Path(args.readme).read_text(), m_json))
    print(text)
    for name, missing in m["pending"]:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        print(f"[regime-map] {name}: published, not on the map yet: it lacks {shown}")
    for name, late in m["later"]:
        print(f"[regime-map] {name}: on the map; its row leaves out "
              + ", ".join(f"{c} until its {n} more run(s)" for c, n in late.items()))
    print(f"[regime-map] {len(m['rows'])} cells; wrote {args.publish}, {args.out}/regime.md, {args.out}/regime.png")
    return 0
