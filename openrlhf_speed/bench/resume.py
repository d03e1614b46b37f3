"""`bench --resume`: which earlier benchmark a command may go on with. Its runs are compared
with the new ones, so everything that makes two runs comparable must match; only curricula
may be added."""

from __future__ import annotations

import json
import os


RESUME_KEYS = ("settings", "model", "target", "target_rule", "driver_steps", "versions")


def check_resumable(meta_path: str, meta: dict) -> dict:
    """--resume only goes on with the same benchmark: its runs are compared with the new ones.
    It may add curricula (the rows a benchmark left out, e.g. speed@8 beside speed): the old
    runs keep their seeds, and the target or its rule, fixed on uniform before any run, stays.
    Returns the bench.json to write when curricula were added, None when it stays as it is."""
    if not os.path.isfile(meta_path):
        raise SystemExit(f"openrlhf-speed bench: error: --resume: {meta_path} does not exist, so there is no "
                         "benchmark to go on with in this --out folder; run without --resume to start one")
    with open(meta_path) as f:
        old = json.load(f)
    now = {**json.loads(json.dumps(meta)), "settings": comparable_settings(meta.get("settings"))}
    then = {**old, "settings": comparable_settings(old.get("settings"))}
    changed = [key for key in RESUME_KEYS if now.get(key) != then.get(key)]
    used, would = then["settings"]["schedule"], now["settings"]["schedule"]
    if "settings" in changed and used != would:
        changed[changed.index("settings")] = (f"settings (its runs used --speed.schedule {used}, these would use "
                                              f"{would}: add `-- --speed.schedule {used}`)")
    if "versions" in changed:
        # Most often another CPU: say which field, or a user cannot tell a package from a machine.
        was, now_v = then.get("versions") or {}, now.get("versions") or {}
        fields = [f"{k}: {was.get(k)!r} then, {now_v.get(k)!r} now" for k in sorted(set(was) | set(now_v))
                  if was.get(k) != now_v.get(k)]
        changed[changed.index("versions")] = f"versions ({'; '.join(fields)})"
    old_plan, new_plan = plan_of(old), json.loads(json.dumps(meta["plan"]))
    dropped = [c for c in old.get("curricula", []) if c not in meta["curricula"]]
    if not dropped and any(r not in new_plan for r in old_plan):
        changed.append("runs or seed")
    if changed or dropped:
        what = ", ".join(changed + ([f"curricula (leaves out {', '.join(dropped)})"] if dropped else []))
        raise SystemExit(f"openrlhf-speed bench: error: --resume: {what} differ from {meta_path}'s "
                         "(its runs would not compare with the new ones); pass the flags of its command: "
                         f"{old.get('command')}, or use another --out")
    added = [c for c in meta["curricula"] if c not in old.get("curricula", [])]
    if not added:
        return None
    print(f"[bench] --resume adds {', '.join(added)} to the benchmark in {os.path.dirname(meta_path) or '.'}",
          flush=True)
    commands = old.get("commands") or [old.get("command")]
    return {**old, "curricula": meta["curricula"], "plan": new_plan, "command": meta["command"],
            "commands": commands + [meta["command"]]}


def comparable_settings(settings) -> dict:
    """Settings as --resume compares them: by the schedule the runs used, whether auto chose it
    or `-- --speed.schedule` named it. A bench.json without `schedule` was written while the
    flag's default was overlap: its runs used what its flags named, else overlap."""
    from openrlhf_speed.bench.commands import flag_value

    s = dict(settings or {})
    passed = list(s.pop("train_args", None) or [])
    s.setdefault("schedule", flag_value(passed, "--speed.schedule") or "overlap")
    rest, skip = [], False
    for a in passed:
        if skip or a.startswith("--speed.schedule="):
            skip = False
            continue
        skip = a == "--speed.schedule"
        if not skip:
            rest.append(a)
    if rest:
        s["train_args"] = rest
    return s


def plan_of(meta: dict) -> list:
    """The runs a bench.json names; folders from before --runs have one run per curriculum."""
    if meta.get("plan"):
        return meta["plan"]
    return [{"key": c, "curriculum": c, "run": 1, "runs": 1, "seed": None} for c in meta["curricula"]]
