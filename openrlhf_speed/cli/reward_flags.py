"""Flags of the SPEED driver's reward guard (rewards/guard.py), kept in their own group so
they merge independently of cli/flags.py's other groups."""

from openrlhf_speed.rewards.guard import DEFAULT_MAX_ERROR_RATE, DEFAULT_RETRIES, MIN_SCORED


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(text)
    return value


def _retries(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def add_reward_guard_arguments(parser) -> None:
    g = parser.add_argument_group("SPEED reward guard (--speed.reward_*)")
    g.add_argument(
        "--speed.reward_max_error_rate", type=_rate, default=DEFAULT_MAX_ERROR_RATE,
        help="Stop the run when more than this fraction (0 to 1) of the responses scored so far got no valid reward "
        f"(the reward function raised, returned NaN/inf, or reported an error), checked from {MIN_SCORED} scored "
        "responses on. Such responses are regenerated, never trained on; counted as reward/errors.",
    )
    g.add_argument(
        "--speed.reward_retries", type=_retries, default=DEFAULT_RETRIES,
        help="How many times a response without a valid reward is regenerated before the run stops, naming the "
        "prompt row (a failure that repeats for one prompt is systematic: a bad label or a reward function bug).",
    )
