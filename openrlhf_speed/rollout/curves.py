"""`curves.png`: a run's reward, held-out accuracy, qualification rate and tokens per step,
against step, from its metrics records (rollout/run_summary.py's `run_records`).

Written by the trainer at each checkpoint, by `openrlhf-speed train` at the end, and by
`openrlhf-speed curves RUN` on demand. A panel whose figure the run did not record (no
evaluation, uniform's NaN qualification) says so instead of staying blank. The PNG is drawn
in memory and then written whole (run_summary.write_atomic), so a full disk never leaves
a torn image behind.
"""

import io
import math

from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.run_summary import write_atomic

# (panel title, [(metric key, line label)], y axis 0..1); the x axis is the step.
PANELS = [
    ("reward (trained batch mean)", [("rollout/reward_mean", "reward")], False),
    ("held-out accuracy (+-2 SE)", [("eval_accuracy", "accuracy")], True),
    ("qualification rate", [("speed/qualification_rate", "qualified / screened")], True),
    ("tokens per step", [("speed/tokens_generated", "generated"), ("speed/tokens_trained", "trained"),
                         ("speed/tokens_discarded", "discarded")], False),
]


def series(records: list, key: str) -> tuple:
    """(steps, values, 2 SE or None per point) of `key`: evaluation records for the accuracy,
    step records otherwise; non-finite values are left out."""
    event = "eval" if key == "eval_accuracy" else "step"
    xs, ys, err = [], [], []
    for r in records:
        v = r.get(key)
        if r.get("event") != event or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        xs.append(r["step"])
        ys.append(v)
        n = r.get("eval_num_samples") if event == "eval" else None
        err.append(2 * math.sqrt(v * (1 - v) / n) if n and 0 <= v <= 1 else None)
    return xs, ys, err


def render_png(records: list, title: str) -> bytes:
    """The four panels side by side, as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(16, 3.8))
    FigureCanvasAgg(fig)
    for ax, (name, lines, unit) in zip(fig.subplots(1, len(PANELS)), PANELS):
        drawn = False
        for key, label in lines:
            xs, ys, err = series(records, key)
            if not xs:
                continue
            drawn = True
            if any(e is not None for e in err):  # accuracy: +-2 binomial standard errors
                ax.errorbar(xs, ys, yerr=[e or 0.0 for e in err], marker="o", ms=4, capsize=3, label=label)
            else:
                ax.plot(xs, ys, marker="o", ms=3, label=label)
        if not drawn:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes, color="gray")
        elif len(lines) > 1:
            ax.legend(fontsize=8)
        if unit:
            ax.set_ylim(0, 1)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def write_curves(records: list, path: str, title: str) -> str:
    """Draw `records` to `path` (DiskFullError on a full disk); returns `path`."""
    write_atomic(path, render_png(records, title), "the run's curves")
    return path


def redraw(records: list, path: str, title: str) -> None:
    """write_curves for a run (at a checkpoint, at its end): a full disk raises DiskFullError as
    every write of the run does; any other failure is a warning, the picture is never the run's end."""
    try:
        write_curves(records, path, title)
    except DiskFullError:
        raise
    except Exception as e:  # noqa: BLE001 -- matplotlib missing or failing: the run's results stand
        print(f"[openrlhf-speed] WARNING could not draw {path}: {type(e).__name__}: {e}", flush=True)
