"""Checks of the user's inputs that run in the driver right after parsing, before Ray or
anything else starts (and in `--dry_run`): value ranges of flags, the prompt and eval
datasets, the reward file, the optimizer steps a training step makes, and the flags
`--train.generation_only` cannot be combined with.

Why here: without them a bad dataset failed 50-90 s later as a traceback from a Ray actor
(a bare StopIteration for an empty file), and `--rollout.temperature -1` passed
`--dry_run`. Each check raises ValueError with one line per problem, naming the flag, the
file, the line and the key; cli/flags.py turns it into a clean exit.
"""

import ast
import math
import os

from openrlhf_speed.data import check_cache
from openrlhf_speed.data.folders import FILE_EXTENSIONS, load_dataset_rows
from openrlhf_speed.data.loader import TOO_LONG, DatasetError
from openrlhf_speed.data.loader import prompt_limit as loader_prompt_limit

# (flag, lower bound, lower bound allowed, upper bound or None, why); None values are not checked.
RANGES = (
    ("rollout.temperature", 0.0, False, None, "0 makes all responses of a group identical"),
    ("eval.temperature", 0.0, True, None, "sampling temperature"),
    ("rollout.top_p", 0.0, False, 1.0, "a probability mass"),
    ("rollout.batch_size", 1, True, None, "prompts per training step"),
    ("rollout.micro_batch_size", 1, True, None, "samples per forward pass"),
    ("rollout.n_samples_per_prompt", 1, True, None, "responses per prompt"),
    ("rollout.max_new_tokens", 1, True, None, "response length"),
    ("data.max_len", 1, True, None, "prompt + response length"),
    ("data.max_samples", 1, True, None, "prompts read from the dataset"),
    ("train.batch_size", 1, True, None, "samples per optimizer step"),
    ("train.micro_batch_size", 1, True, None, "samples per forward/backward pass"),
    ("train.max_epochs", 1, True, None, "passes over each rollout batch"),
    ("train.num_episodes", 1, True, None, "passes over the dataset"),
    ("eval.n_samples_per_prompt", 1, True, None, "responses per eval prompt"),
    ("actor.adam.lr", 0.0, False, None, "learning rate"),
    ("critic.adam.lr", 0.0, True, None, "learning rate"),
    ("actor.eps_clip", 0.0, True, None, "PPO clip range"),
    ("algo.kl.init_coef", 0.0, True, None, "KL coefficient"),
    ("vllm.num_engines", 0, True, None, "vLLM engines"),
    ("vllm.tensor_parallel_size", 1, True, None, "GPUs per engine"),
    ("vllm.gpu_memory_utilization", 0.0, False, 1.0, "a share of GPU memory"),
)


def _get(args, dotted):
    for part in dotted.split("."):
        args = getattr(args, part, None)
    return args


def range_errors(args) -> list:
    """One line per flag whose value is outside its range."""
    errors = []
    for flag, low, low_ok, high, why in RANGES:
        value = _get(args, flag)
        if value is None or not isinstance(value, (int, float)):
            continue
        bad_low = value < low or (value == low and not low_ok) or (isinstance(value, float) and math.isnan(value))
        if bad_low or (high is not None and value > high):
            span = f"{'>=' if low_ok else '>'} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            errors.append(f"--{flag} {value:g} is out of range: must be {span} ({why})")
    ckpt = getattr(args, "ckpt", None)
    if ckpt is not None and ckpt.save_steps != -1 and ckpt.max_num < 2:
        errors.append(f"--ckpt.max_num {ckpt.max_num} is out of range: must be >= 2 while checkpoints are saved "
                      "(OpenRLHF deletes the older checkpoints before it writes the next one, so with 1 a full disk, "
                      "a crash or a damaged file during that save leaves none to resume from)")
    return errors


def optimizer_steps(args) -> float:
    """Optimizer steps per training step, from OpenRLHF's batch flags (see rollout/trainer.py)."""
    samples = args.rollout.batch_size * args.rollout.n_samples_per_prompt
    return samples / args.train.batch_size * args.train.max_epochs


def optimizer_steps_note(args) -> str:
    steps = optimizer_steps(args)
    b, n, t, e = (args.rollout.batch_size, args.rollout.n_samples_per_prompt, args.train.batch_size,
                  args.train.max_epochs)
    text = (f"optimizer steps per training step: {steps:g} = --rollout.batch_size {b} x "
            f"--rollout.n_samples_per_prompt {n} / --train.batch_size {t} x --train.max_epochs {e}")
    if steps > 1:
        text += (f". WARNING: more than one: steps after the first train on samples of an older policy; "
                 f"for one, set --train.batch_size {b * n} and --train.max_epochs 1")
    return text


def _local_files(spec: str) -> list:
    """The local paths of a comma-separated OpenRLHF dataset spec (the @data_dir part dropped)."""
    return [part.split("@")[0].strip() for part in spec.split(",") if part.strip()]


def _looks_local(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or os.path.splitext(path)[1].lower() in FILE_EXTENSIONS


def prompt_limit(args) -> tuple:
    """(tokens a prompt may have, why) for these flags (data/loader.py)."""
    return loader_prompt_limit(args.data.max_len, getattr(args.rollout, "max_new_tokens", None))


def _tokenizer(args):
    """The actor's tokenizer from local files, or (None, why not): prompt lengths are then not checked."""
    path = getattr(args.actor, "model_name_or_path", None) if hasattr(args, "actor") else None
    if not path:
        return None, "no model named"
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True, local_files_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure only skips the length count, said in a note
        return None, f"its tokenizer could not be loaded from local files ({type(e).__name__})"
    # A folder with a config but no tokenizer files can still give a tokenizer, without a
    # chat template: counting chat prompts with it would raise, so they are not counted.
    if getattr(getattr(args, "data", None), "apply_chat_template", False) and not getattr(tokenizer, "chat_template", None):
        return None, "its tokenizer has no chat template"
    return tokenizer, None


def _length_checks(args, role: str, tokenizer) -> dict:
    """The keyword arguments of data/folders.py's loaders that count over-long prompts."""
    if tokenizer is None or role != "--data.prompt_dataset":
        return {}
    return {"max_prompt_tokens": prompt_limit(args)[0], "tokenizer": tokenizer,
            "apply_chat_template": bool(getattr(args.data, "apply_chat_template", False)),
            "input_template": getattr(args.data, "input_template", None)}


def too_long_note(args, role: str, path: str, report) -> str:
    n = report.dropped.get(TOO_LONG, 0)
    limit, why = prompt_limit(args)
    rows = ", ".join(map(str, report.lines[TOO_LONG])) + (", ..." if n > len(report.lines[TOO_LONG]) else "")
    fate = ("the SPEED driver skips them, never sends them, and counts them (speed/prompts_too_long)"
            if getattr(getattr(args, "speed", None), "strategy", "speed") != "off" else
            "--speed.strategy off: OpenRLHF's generator truncates them from the left, keeping the last tokens")
    return (f"{role} {path}: {n} of {report.lines_read} prompts are longer than {limit} tokens after the chat "
            f"template and tokenizer (the prompt limit, {why}; rows {rows}): {fate}; shorten them or raise "
            "--data.max_len to train on them")


def duplicates_note(role: str, path: str, report) -> str:
    rows = ", ".join(map(str, report.duplicate_lines)) + (", ..." if report.duplicates > len(report.duplicate_lines)
                                                          else "")
    return (f"WARNING {role} {path}: {report.duplicates} duplicate prompts ({report.repeated_prompts} prompt"
            f"{'s' if report.repeated_prompts > 1 else ''} repeated, one {report.most_repeats} times; repeats at rows "
            f"{rows}): each row is a prompt "
            "of its own for SPEED, so a prompt in k rows is screened k times per epoch, may train as k groups of "
            "one batch, and its pass rate and history (--speed.strategy greso, speed_bayes) are kept per row, not "
            "pooled; remove the duplicates to avoid that")


def check_dataset(spec, args, need_rows: int, role: str, tokenizer=None) -> tuple:
    """(errors, notes) of a dataset spec: every local file or folder read with data/folders.py and its
    rows checked (data/loader.py); notes count the prompts over the limit and the duplicates."""
    if not spec:
        return [], []
    errors, notes, total, checked = [], [], 0, False
    for path in _local_files(spec):
        path = os.path.expanduser(path)
        if not os.path.exists(path):
            if _looks_local(path):
                errors.append(f"{role} {path}: no such file or folder")
            continue
        if not os.path.isdir(path) and os.path.splitext(path)[1].lower() not in FILE_EXTENSIONS:
            continue  # a .py loading script: left to OpenRLHF's loader
        label_key = args.data.label_key
        try:
            rows, report = load_dataset_rows(
                path, split=getattr(args.data, "prompt_split", "train") or "train",
                input_key=args.data.input_key, label_key=label_key or args.data.input_key, skip_hint=None,
                **_length_checks(args, role, tokenizer))
        except DatasetError as e:
            errors.append(f"{role} {e}".replace("(input_key/label_key; ", "(").replace(" in training)", ")"))
            continue
        if label_key is None and args.reward.remote_url:
            errors.append(f"{role} {path}: --data.label_key is not set, so every label would be empty and "
                          f"the reward ({args.reward.remote_url}) would score nothing; name the answer key "
                          f"(keys in the first row: {', '.join(map(repr, rows[0]))})")
            continue
        if report.dropped.get(TOO_LONG):
            notes.append(too_long_note(args, role, path, report))
        if report.duplicates and role == "--data.prompt_dataset":
            notes.append(duplicates_note(role, path, report))
        total += len(rows)
        checked = True
    rows = min(total, args.data.max_samples or total)
    if checked and not errors and need_rows and rows < need_rows:
        errors.append(f"{role} {spec}: only {rows} usable prompts, fewer than --rollout.batch_size {need_rows}: "
                      "no training batch can form; lower --rollout.batch_size or add prompts")
    return errors, notes


def dataset_errors(spec, args, need_rows: int, role: str) -> list:
    """check_dataset's errors only (no tokenizer: prompt lengths are not counted)."""
    return check_dataset(spec, args, need_rows, role)[0]


def reward_file_errors(path) -> list:
    """A `--reward.remote_url` .py file must parse and define `reward_func` (read, not run)."""
    if not path or not str(path).endswith(".py"):
        return []
    if not os.path.isfile(path):
        return [f"--reward.remote_url {path}: no such file"]
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except SyntaxError as e:
        return [f"--reward.remote_url {path}, line {e.lineno}: syntax error: {e.msg}"]
    except UnicodeDecodeError:
        return [f"--reward.remote_url {path}: not UTF-8 text"]
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    if "reward_func" not in names:
        return [f"--reward.remote_url {path}: defines no top-level reward_func(queries, prompts, labels), "
                "which OpenRLHF calls; define it"]
    return []


def input_errors(args) -> list:
    """Dataset, eval dataset and reward file problems, one line each (no prompt-length count)."""
    errors = dataset_errors(args.data.prompt_dataset, args, args.rollout.batch_size, "--data.prompt_dataset")
    errors += dataset_errors(args.eval.dataset, args, 0, "--eval.dataset")
    return errors + reward_file_errors(args.reward.remote_url)


def input_checks(args) -> tuple:
    """(errors, notes) of the datasets and the reward file, with the actor's tokenizer: notes say how
    many prompts are over the prompt limit (and what happens to them) and how many are duplicates."""
    local = [p for p in _local_files(args.data.prompt_dataset or "") if os.path.exists(os.path.expanduser(p))]
    dry_run = getattr(args, "dry_run", False)  # a dry run always reads the rows, and keeps no record
    reused = None if dry_run else check_cache.reused_check(args, local)
    if reused is not None:  # a rerun of the same command: the rows were read when it first started
        errors, notes = [], reused + [f"--data.prompt_dataset unchanged since the run's first start checked it (size "
                                      f"and modification time, the same flags): rows not read again"]
    else:
        tokenizer, why_not = _tokenizer(args) if local else (None, None)
        errors, notes = check_dataset(args.data.prompt_dataset, args, args.rollout.batch_size,
                                      "--data.prompt_dataset", tokenizer)
        if why_not:
            notes.append(f"--data.prompt_dataset: prompt lengths not checked against the prompt limit: {why_not}")
        if local and not errors and not dry_run:
            check_cache.save_check(args, local, notes)
    errors += dataset_errors(args.eval.dataset, args, 0, "--eval.dataset")
    return errors + reward_file_errors(args.reward.remote_url), notes


def generation_only_errors(args) -> list:
    """`--train.generation_only` (the SPEED driver measured apart from training, rollout/trainer.py)
    with the flags that contradict it, one line each saying why."""
    if not getattr(args.train, "generation_only", False):
        return []
    errors, limit = [], args.train.max_steps
    if args.speed.strategy == "off":
        # Supporting it would mean a second generation-only path without a trace to replay.
        errors.append("--train.generation_only measures the SPEED driver (its --speed.trace_path is what the replay "
                      "reads); --speed.strategy off is OpenRLHF's own generator. Use --speed.strategy uniform for "
                      "plain groups of N through the driver")
    if args.ckpt.load_enable:
        errors.append("--train.generation_only with --ckpt.load_enable: a generation-only run trains nothing, so it "
                      "has nothing to resume and measures from a fresh start; drop --ckpt.load_enable")
    save = args.ckpt.save_steps
    if save > 0 and (limit is None or save <= limit):
        errors.append(f"--train.generation_only with --ckpt.save_steps {save}: saving the curriculum needs every "
                      "request collected first (a drain), which would stop the stream being measured, and the actor "
                      "never changes; set --ckpt.save_steps -1 (or above --train.max_steps)")
    every = args.eval.steps
    if args.eval.at_start or (args.eval.dataset and every > 0 and (limit is None or every <= limit)):
        errors.append("--train.generation_only with evaluation (--eval.at_start, --eval.steps): evaluation shares the "
                      "engines with the pre-fetched requests, whose tokens would then count without the seconds they "
                      "took; drop --eval.at_start and --eval.steps")
    if args.check.weight_sync:
        errors.append("--check.weight_sync checks every weight sync; --train.generation_only makes none: drop it")
    return errors
