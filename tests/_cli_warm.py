"""What the fork server of tests/_cli.py imports before it forks: `openrlhf-speed train`'s
imports in its order (compat's shims first, then OpenRLHF, our seams and Ray), nothing run.
`train` installs the seams itself in each child, as the console script does."""

from openrlhf_speed import compat

compat.install()

import openrlhf.cli.train_ppo_ray  # noqa: E402,F401
import openrlhf.trainer.ppo_trainer  # noqa: E402,F401
import openrlhf.utils.config  # noqa: E402,F401
import ray  # noqa: E402,F401

import openrlhf_speed.cli.train  # noqa: E402,F401
from openrlhf_speed.rollout import actor, engine, trainer  # noqa: E402,F401
