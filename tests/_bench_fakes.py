"""Stand-ins for the bench's train subprocess, shared by the bench tests that drive
`bench.run.main` without training: a small prompt file pair and a run that writes the log a
finished run leaves (step-0 and step-1 evaluations)."""

import json


def _data(tmp_path):
    rows = [json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) for i in range(40)]
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text("\n".join(rows) + "\n")
    return ["--prompt_data", str(tmp_path / "train.jsonl"), "--eval_data", str(tmp_path / "test.jsonl")]


def _fake_train(trained: list, fail_on=None):
    """A run that logs step 0 and step 1 evaluations; `fail_on` (a run folder name) exits 1."""
    def run_logged(cmd, log_path, key):
        trained.append(key)
        if key == fail_on:
            return 1
        metrics = log_path.replace("train.log", "metrics.jsonl")
        with open(metrics, "w") as f:
            f.write(json.dumps({"event": "eval", "step": 0, "train_wall_s": 0.0, "eval_accuracy": 0.3}) + "\n")
            f.write(json.dumps({"event": "step", "step": 1, "train_wall_s": 10.0}) + "\n")
            f.write(json.dumps({"event": "eval", "step": 1, "train_wall_s": 10.0, "eval_accuracy": 0.5}) + "\n")
        return 0
    return run_logged
