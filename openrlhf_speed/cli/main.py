"""`openrlhf-speed` console script: one entry point, one subcommand per job."""

import sys

COMMANDS = {
    "train": ("openrlhf_speed.cli.train", "RL training through OpenRLHF's Ray PPO pipeline (accepts its flags)"),
    "evaluate": ("openrlhf_speed.cli.evaluate", "held-out accuracy of a model folder on a jsonl file, via vLLM"),
    "curves": ("openrlhf_speed.cli.curves", "draw a run's reward, accuracy, qualification and tokens per step to RUN/curves.png"),
    "advise": ("openrlhf_speed.cli.advise", "before a run: screen a sample of the data with the model, say whether SPEED will pay off"),
    "bench": ("openrlhf_speed.bench.run", "time to target accuracy of uniform RLOO, DAPO and SPEED side by side, with plots"),
    "regime-map": ("openrlhf_speed.bench.regime_map", "the published cells side by side: where screening pays, the ceiling, alpha for advise"),
    "figures": ("openrlhf_speed.bench.figures", "check the figures and tables the docs quote against their evidence (--write rewrites them)"),
    "engine-curve": ("openrlhf_speed.cli.engine_curve", "the engine's tokens/s against the sequences it decodes at once (the projection's curve)"),
    "soak": ("openrlhf_speed.bench.soak", "a long run per curriculum, recorded every K steps and checked for growth (make soak)"),
    "scale": ("openrlhf_speed.bench.scale", "a run on a paper-scale prompt set: start-up, steps, checkpoint size, resume"),
    "replay": ("openrlhf_speed.cli.replay", "the requests of a SPEED trace on raw vLLM, all at once (the driver's limit)"),
    "gen-data": ("openrlhf_speed.data.build", "write the embedded arithmetic dataset (train/test jsonl)"),
    "prepare-data": ("openrlhf_speed.data.prepare", "convert local DAPO-17k / DeepScaleR / NuminaMath / MATH500 / AIME / AMC files to jsonl"),
    "proving-ground": ("openrlhf_speed.cli.proving_ground", "build the small proving-ground model and its RL prompts (the benchmark's subject)"),
    "prepare-model": ("openrlhf_speed.cli.prepare_model", "convert the embedded default model to an HF folder"),
    "doctor": ("openrlhf_speed.cli.doctor", "check this node (and a Ray cluster) before a long run: what is missing and how to fix it"),
}

ENTRY = {"openrlhf_speed.data.build": "main_generate"}


def usage() -> str:
    lines = ["usage: openrlhf-speed COMMAND [flags]  (openrlhf-speed COMMAND --help for its flags)", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"openrlhf-speed: unknown command '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    import importlib

    module_name = COMMANDS[name][0]
    module = importlib.import_module(module_name)
    result = getattr(module, ENTRY.get(module_name, "main"))(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
