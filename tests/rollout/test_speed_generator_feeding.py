"""While the actor trains, the SPEED driver's feeding thread keeps the engines busy
(`--speed.feed_during_training`): a finished screening gets its continuation at once, new
prompts are screened until the next batch is on its way, and drain() stops the thread before the
weight sync with nothing left in flight. Drives the real Scheduler and generator code with a
fake engine whose requests finish at once, and Ray's wait/get replaced: no Ray or vLLM runs."""

import threading
import time
from types import SimpleNamespace as NS

import pytest
import ray
import torch

from _bare_generator import bare_generator, done_at_once
from openrlhf_speed.curriculum import SpeedConfig
from openrlhf_speed.rollout.speed_generator import EngineDiedError

KWARGS = {"max_new_tokens": 8, "temperature": 1.0, "max_len": 64}


class FakeEngine:
    """Every request is done as soon as it is sent; prompt p's responses alternate right and
    wrong when p is even (so its screening qualifies) and are all wrong when p is odd."""

    def __init__(self):
        self.sent = {}  # ref -> (prompt index, n)
        self.lock = threading.Lock()
        self.generate_responses = NS(remote=self._generate)
        self.fail = False

    def _generate(self, prompt, num_samples, **kw):
        with self.lock:
            ref = f"ref{len(self.sent)}"
            self.sent[ref] = (int(prompt.split()[1]), num_samples)
        return ref

    def outputs(self, ref):
        if self.fail:
            raise ray.exceptions.RayActorError()
        prompt, n = self.sent[ref]
        return [{"reward": float(prompt % 2 == 0 and i % 2 == 0), "length": 3} for i in range(n)]


@pytest.fixture
def gen(monkeypatch):
    engine = FakeEngine()
    g = bare_generator([f"Q {i}" for i in range(40)], ["x"] * 40,
                       SpeedConfig(n_samples_per_prompt=6, n_init=2, batch_prompts=2, max_inflight_prompts=4),
                       [engine], NS(algo=NS(advantage=NS(is_correction_level="off")),
                                    ckpt=NS(path="/ckpt", load_enable=False)))
    monkeypatch.setattr(ray, "get", engine.outputs)
    monkeypatch.setattr(ray, "wait", done_at_once(0.002))
    g._process_response_into_experience = lambda o, **kw: NS(
        rewards=torch.tensor([o["reward"]]), response_length=torch.tensor([o["length"]]), info={})
    return g


def wait_until(condition, seconds=10.0):
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    return condition()


def test_feeding_continues_screenings_and_refills_the_window_while_the_actor_trains(gen):
    batch, *_ = gen.generate_samples(**KWARGS)
    assert len(batch) == 2 * 6  # B groups of N
    sent_by_the_step = len(gen.vllm_engines[0].sent)

    gen.start_feeding()
    # New prompts start until B groups are complete or being completed, not up to the buffer
    # bound (ready + in flight < max_inflight + B = 6): that would train them a sync later.
    assert wait_until(lambda: gen.scheduler.buffer_len >= 2 and not gen._pending)
    sent_when_done = len(gen.vllm_engines[0].sent)
    time.sleep(0.2)
    assert len(gen.vllm_engines[0].sent) == sent_when_done  # idle, the next batch being complete
    assert 2 <= gen.scheduler.buffer_len < 6
    assert gen._feeder.is_alive()  # it waits for the drain, not for the work to run out
    drained_s = gen.drain()
    assert gen._feeder is None and not gen._pending and drained_s < 5
    sent = list(gen.vllm_engines[0].sent.values())[sent_by_the_step:]  # (prompt, n): screenings 2, continuations 4
    continued = [p for p, n in sent if n == 4]
    assert continued and all(p % 2 == 0 for p in continued)  # the qualified (even) prompts, without a step
    counts = gen.pop_counts()
    assert counts["driver/responses_fed"] == sum(n for _, n in sent)
    assert counts["driver/feed_s"] > 0

    before = len(gen.vllm_engines[0].sent)
    batch, *_ = gen.generate_samples(**KWARGS)  # from the buffer the feeding filled: no engine waited for
    assert len(batch) == 12 and gen.pop_counts()["driver/wait_s"] == 0
    assert len(gen.vllm_engines[0].sent) == before  # a full batch is taken before anything is sent
    assert gen.state_dict()["scheduler"]  # drained: a checkpoint may be taken


def test_state_dict_is_refused_while_feeding(gen):
    gen.generate_samples(**KWARGS)
    gen.start_feeding()
    with pytest.raises(RuntimeError, match="call drain"):
        gen.state_dict()
    gen.drain()


def test_an_engine_failure_in_the_feeding_thread_stops_the_run_at_the_drain(gen):
    gen.generate_samples(**KWARGS)
    gen.vllm_engines[0].fail = True
    gen.start_feeding()
    assert wait_until(lambda: not gen._feeder.is_alive())  # the thread ends at the error
    with pytest.raises(EngineDiedError, match="vLLM engine 0"):
        gen.drain()
    assert gen._feeder is None


def test_no_feeding_after_the_last_step(gen):
    gen.max_steps = 1
    gen.generate_samples(**KWARGS)
    gen.start_feeding()
    assert gen._feeder is None


@pytest.mark.parametrize("flag", ["on", "off"])
def test_the_trainer_feeds_during_training_only_when_the_flag_is_on_and_drains_before_the_sync(flag):
    """rollout/trainer.py: start_feeding before OpenRLHF's train_step (experience, training,
    weight sync), drain in broadcast_to_vllm before the sync."""
    from openrlhf_speed.rollout.trainer import make_trainer_class

    calls = []

    class Upstream:  # OpenRLHF's train_step: experience and training, then the weight sync
        def train_step(self, rollout_samples, global_step):
            calls.append("train")
            self.broadcast_to_vllm()
            return {}, global_step + 1

        def broadcast_to_vllm(self):
            calls.append("sync")

    generator = NS(start_feeding=lambda: calls.append("feed"), drain=lambda: calls.append("drain") or 0.0,
                   last_metrics={}, policy_version=0)
    trainer_class = make_trainer_class(NS(__ray_actor_class__=Upstream)).__ray_actor_class__
    trainer = trainer_class.__new__(trainer_class)
    trainer.args = NS(train=NS(generation_only=False), reward=NS(model_name_or_path=None),
                      speed=NS(feed_during_training=flag), check=NS(weight_sync=False))
    trainer.speed, trainer.samples_generator, trainer.vllm_engines = True, generator, [object()]
    status, step = trainer.train_step([NS(rewards=torch.tensor([1.0]), info={})], global_step=3)
    assert step == 4 and generator.policy_version == 1
    assert calls == (["feed"] if flag == "on" else []) + ["train", "drain", "sync"]


@pytest.mark.parametrize("schedule", ["overlap", "serial"])
def test_a_serial_schedule_collects_the_work_in_flight_before_the_step(gen, schedule, monkeypatch):
    """`--speed.schedule serial`: nothing generates beside the step's experience making and
    training; what was in flight is buffered for the next step, none of it lost."""
    def one_at_a_time(refs, num_returns=1, timeout=None):  # engines finish in turn, not all at once
        refs = list(refs)
        return ([], refs) if timeout == 0 else (refs[:num_returns], refs[num_returns:])

    monkeypatch.setattr(ray, "wait", one_at_a_time)
    gen.args.speed = NS(schedule=schedule)
    batch, *_ = gen.generate_samples(**KWARGS)
    assert len(batch) == 2 * 6
    collected = gen.last_metrics["driver/collect_before_step_s"]
    if schedule == "overlap":  # the window (4 prompts) runs ahead of the batch (2): work is left in flight
        assert gen._pending and collected == 0.0
        gen.drain()  # the weight sync's drain collects it instead
    else:
        assert not gen._pending and collected >= 0.0
        assert gen.drain() < 1.0  # nothing left for the weight sync's drain
    buffered = gen.scheduler.buffer_len + gen.scheduler.inflight_prompts
    assert buffered > 0  # the next prompts' work is kept in both schedules
    batch, *_ = gen.generate_samples(**KWARGS)
    assert len(batch) == 12



def test_a_step_redraws_its_progress_bar_a_few_times_not_once_per_request(gen, capsys):
    """In a log file every redraw of the batch bar is a line: at 7B scale a step collects
    thousands of requests, so the bar is redrawn by time, not per request."""
    gen.generate_samples(**KWARGS)
    assert len(gen.vllm_engines[0].sent) >= 6
    assert capsys.readouterr().err.count("SPEED batch") <= 3


def test_the_end_of_the_curriculum_is_reported_once(gen, capsys):
    """OpenRLHF asks for samples once more per remaining --train.num_episodes after the last step."""
    gen.max_steps = 1
    assert gen.generate_samples(**KWARGS)[0]
    gen.drain()
    for _ in range(3):
        assert gen.generate_samples(**KWARGS) == ([], None, 0, True)
    assert capsys.readouterr().out.count("curriculum finished") == 1
