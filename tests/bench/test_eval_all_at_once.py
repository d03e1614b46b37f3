"""An evaluation sends every held-out prompt to the engines in one call, not in chunks of
--rollout.batch_size (OpenRLHF's default, which waits for each chunk), and puts the flag back."""

from types import SimpleNamespace


class FakeGenerator:
    def __init__(self, args):
        self.args, self.chunks = args, []

    def generate_eval_samples(self, **kwargs):  # upstream: chunks of args.rollout.batch_size prompts
        n, size = 10, self.args.rollout.batch_size
        self.chunks = [min(size, n - i) for i in range(0, n, size)]
        return [SimpleNamespace(rewards=[1.0] * c) for c in self.chunks]


class FakeUpstream:
    def evaluate(self, global_step, **kwargs):
        self.samples_generator.generate_eval_samples(**kwargs)
        return {}


def test_evaluation_sends_all_held_out_prompts_at_once():
    from openrlhf_speed.rollout.trainer import make_trainer_class

    cls = make_trainer_class(type("Upstream", (), {"__ray_actor_class__": FakeUpstream})).__ray_actor_class__
    t = cls.__new__(cls)
    args = SimpleNamespace(rollout=SimpleNamespace(batch_size=4), log=SimpleNamespace(jsonl=None))
    t.args, t.samples_generator = args, FakeGenerator(args)
    t.eval_dataloader = SimpleNamespace(dataset=list(range(10)))
    t._clock_start, t._excluded_s = 0.0, 0.0
    logs = t.evaluate(0, n_samples_per_prompt=1)
    assert t.samples_generator.chunks == [10]  # one call with all 10 prompts (was 4, 4, 2)
    assert logs["eval_accuracy"] == 1.0 and args.rollout.batch_size == 4  # the training batch size is back
