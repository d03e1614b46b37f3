"""A SpeedSamplesGenerator without OpenRLHF's strategy, dataloader or Ray engines, for tests
that drive its dispatch and collect code against fake engines (tests/rollout)."""

import time

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.rewards.guard import RewardGuard
from openrlhf_speed.rollout.speed_generator import COUNTS, SpeedSamplesGenerator


def bare_generator(prompts: list, labels: list, config: SpeedConfig, engines: list, args, trace=None):
    """The driver state SpeedSamplesGenerator.__init__ sets (keep the two in step), on the
    given prompts, scheduler config, engines and args; no tokenizer is sent."""
    g = SpeedSamplesGenerator.__new__(SpeedSamplesGenerator)
    g.prompts, g.labels, g.args, g.tokenizer = prompts, labels, args, None
    g.scheduler = Scheduler(num_prompts=len(prompts), config=config)
    g.vllm_engines, g._engine_load, g._pending = engines, [0] * len(engines), {}
    g.policy_version, g.overhead_s, g.reward_guard = 0, 0.0, RewardGuard()
    g._counts, g._trace = dict.fromkeys(COUNTS, 0.0), trace  # trace: a rollout.trace.TraceFile
    g.max_steps, g._kwargs, g.last_metrics = None, {}, {}
    return g


def done_at_once(delay_s: float):
    """A ray.wait for fake engines whose requests are all done: the first `num_returns`
    after `delay_s` seconds (the time a real wait yields to other threads)."""
    def wait(refs, num_returns=1, timeout=None):
        time.sleep(delay_s)
        refs = list(refs)
        return refs[:num_returns], refs[num_returns:]
    return wait
