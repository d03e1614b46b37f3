"""What the trainer (rollout/trainer.py) prints and writes around upstream's loop, driven with a
stand-in upstream class, without Ray or OpenRLHF:

- after the SPEED curriculum's last batch (`--train.max_steps`), the progress bars of the
  remaining `--train.num_episodes` print nothing, and upstream's `tqdm` is back afterwards;
- a full disk under the trace's first lines, written while the trainer is constructed, is
  raised by the first method OpenRLHF calls (a task error: one line from cli/train.py), not
  by the construction (Ray's "Exception raised in creation task" traceback);
- a full disk when a log file is opened is the same one-line DiskFullError as under a write,
  and a run log in a folder that does not exist yet gets its folder;
- each checkpoint redraws the run folder's curves.png from the run log.
"""

import contextlib
import errno
import json
import sys
import types
from types import SimpleNamespace

import pytest
from tqdm import tqdm

from openrlhf_speed.rollout import trace as trace_module
from openrlhf_speed.rollout import trainer as trainer_module
from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.trace import TraceFile, open_append
from openrlhf_speed.rollout.trainer import episode_bars, make_trainer_class

UPSTREAM = '''
from tqdm import tqdm


class Upstream:
    def __init__(self, *args, **kwargs):
        self.args = kwargs["args"]
        self.strategy = self.prompts_dataloader = self.eval_dataloader = self.tokenizer = self.vllm_engines = None

    def get_max_steps(self):
        return 12

    def fit(self, global_step=0):
        # OpenRLHF's loop: a bar per episode, the generator's batches in each.
        self.disabled = []  # each bar's state as drawn (close() disables every bar)
        for episode in range(3):
            bar = tqdm(range(4), desc=f"Episode [{episode + 1}/3]")
            self.disabled.append(bar.disable)
            self.samples_generator.steps += 4
            bar.update(4)
            bar.close()

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        pass
'''


@pytest.fixture
def trainer_class(monkeypatch):
    module = types.ModuleType("fake_ppo_trainer")
    exec(UPSTREAM, module.__dict__)
    monkeypatch.setitem(sys.modules, "fake_ppo_trainer", module)
    cls = make_trainer_class(SimpleNamespace(__ray_actor_class__=module.Upstream)).__ray_actor_class__
    return cls, module


def flags(**over):
    args = SimpleNamespace(
        check=SimpleNamespace(weight_sync=False), eval=SimpleNamespace(at_start=False),
        train=SimpleNamespace(generation_only=False, max_steps=4), speed=SimpleNamespace(trace_path=None),
        log=SimpleNamespace(jsonl=None), ckpt=SimpleNamespace(path="/nonexistent/ckpt", save_steps=2))
    for k, v in over.items():
        setattr(args, k, v)
    return args


class Generator:
    """The SPEED driver as the bars see it: its step limit and its scheduler's end."""

    def __init__(self, max_steps):
        self.steps, self.max_steps = 0, max_steps
        self.scheduler = SimpleNamespace(exhausted=False)

    def step_limit_reached(self):
        return self.steps >= self.max_steps


def test_a_bar_after_the_last_batch_prints_nothing(capsys):
    bar = episode_bars(lambda: True)(range(4), desc="Episode [2/3]")
    assert bar.disable
    bar.update(4)
    bar.close()
    assert "Episode" not in capsys.readouterr().err
    bar = episode_bars(lambda: False)(range(4), desc="Episode [1/3]")
    bar.close()
    assert "Episode [1/3]" in capsys.readouterr().err


def test_no_bar_for_the_episodes_after_max_steps(trainer_class, capsys):
    cls, module = trainer_class
    t = cls.__new__(cls)
    t.args, t.speed, t.samples_generator = flags(), True, Generator(max_steps=4)
    t._restore_curriculum = lambda: None
    t.fit()
    assert t.disabled == [False, True, True]
    err = capsys.readouterr().err
    assert "Episode [1/3]" in err and "Episode [2/3]" not in err and "Episode [3/3]" not in err
    assert module.tqdm is tqdm  # upstream's own again


def test_without_the_curriculum_every_episode_keeps_its_bar(trainer_class):
    cls, _ = trainer_class
    t = cls.__new__(cls)
    t.args, t.speed, t.samples_generator = flags(), False, Generator(max_steps=0)
    t.fit()
    assert t.disabled == [False, False, False]


def test_a_full_disk_under_the_traces_first_lines_waits_for_the_first_call(trainer_class, monkeypatch):
    cls, _ = trainer_class
    full = DiskFullError("disk full while writing the trace /r/trace.jsonl: 0.0 MB is free in /r")

    def generator(*args, **kwargs):
        raise full

    fake = types.ModuleType("openrlhf_speed.rollout.speed_generator")
    fake.SpeedSamplesGenerator = generator
    monkeypatch.setitem(sys.modules, "openrlhf_speed.rollout.speed_generator", fake)
    monkeypatch.setattr(trainer_module, "speed_config", lambda args: object())
    t = cls(args=flags())  # the construction itself succeeds
    with pytest.raises(DiskFullError) as err:
        t.get_max_steps()
    assert err.value is full


def test_other_construction_errors_are_not_deferred(trainer_class, monkeypatch):
    cls, _ = trainer_class
    fake = types.ModuleType("openrlhf_speed.rollout.speed_generator")
    fake.SpeedSamplesGenerator = lambda *a, **k: (_ for _ in ()).throw(ValueError("bad prompts"))
    monkeypatch.setitem(sys.modules, "openrlhf_speed.rollout.speed_generator", fake)
    monkeypatch.setattr(trainer_module, "speed_config", lambda args: object())
    with pytest.raises(ValueError, match="bad prompts"):
        cls(args=flags())


def test_without_trouble_get_max_steps_is_upstreams(trainer_class):
    cls, _ = trainer_class
    assert cls(args=flags(speed=SimpleNamespace(strategy="off"))).get_max_steps() == 12


def enospc_on_open(monkeypatch):
    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(trace_module, "open", full, raising=False)


def test_opening_the_trace_on_a_full_disk_is_one_line(tmp_path, monkeypatch):
    enospc_on_open(monkeypatch)
    with pytest.raises(DiskFullError) as err:
        TraceFile(str(tmp_path / "trace.jsonl"))
    message = str(err.value)
    assert message.startswith(f"disk full while writing the trace {tmp_path / 'trace.jsonl'}: ")
    assert "nothing was written to it" in message and "\n" not in message


def test_opening_the_run_log_on_a_full_disk_is_one_line(tmp_path, monkeypatch, trainer_class):
    cls, _ = trainer_class
    t = cls.__new__(cls)
    t.args = flags(log=SimpleNamespace(jsonl=str(tmp_path / "metrics.jsonl")))
    enospc_on_open(monkeypatch)
    with pytest.raises(DiskFullError, match=r"^disk full while writing the run log \(--log.jsonl\) "):
        t._log_jsonl({"event": "step", "step": 1})


def test_other_open_errors_stay_what_they_are(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises((FileExistsError, NotADirectoryError)):  # a file where its folder should be
        open_append(str(tmp_path / "file" / "trace.jsonl"), "the trace")


def test_the_run_log_makes_its_folder(tmp_path, trainer_class):
    cls, _ = trainer_class
    t = cls.__new__(cls)
    path = tmp_path / "run" / "metrics.jsonl"
    t.args = flags(log=SimpleNamespace(jsonl=str(path)))
    t._log_jsonl({"event": "eval", "step": 0, "eval_accuracy": 0.25, "eval_num_samples": 40})
    assert json.loads(path.read_text()) == {"event": "eval", "step": 0, "eval_accuracy": 0.25,
                                            "eval_num_samples": 40.0}


def test_a_checkpoint_redraws_the_curves(tmp_path, trainer_class, monkeypatch):
    cls, _ = trainer_class
    t = cls.__new__(cls)
    t.args, t.speed = flags(log=SimpleNamespace(jsonl=str(tmp_path / "metrics.jsonl"))), False
    t.args.ckpt.path = str(tmp_path / "ckpt")
    monkeypatch.setattr(cls, "_checkpoint_write", lambda self, tag, step: contextlib.nullcontext())
    t.save_logs_and_checkpoints(1, {"rollout/reward_mean": 0.5})
    assert not (tmp_path / "curves.png").exists()  # step 1 saves no checkpoint (--ckpt.save_steps 2)
    t.save_logs_and_checkpoints(2, {"rollout/reward_mean": 0.6})
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
