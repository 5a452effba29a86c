"""What both peer scripts of benchmarks/time_to_accuracy.py share (they run in their own
environments, ../trl-venv and ../comlrl-venv, never in .venv).

- The training reward: srpo's own `MathReward` (correct = 1, else 0; math-verify on the
  extracted answer), read from this checkout (not installed: only its pure-Python task modules
  and `srpo.objective`, which needs torch, are imported), so every side trains on the same
  reward as srpo's `task.reward: {correct_weight: 1.0, format_weight: 0.0}`; for several agents,
  that reward of srpo's majority vote over their answers (`vote_winner`).
- The tasks file the driver writes: a JSON list of {task_id, answer, messages, text}, the
  training pool in srpo's order (messages: the chat turns srpo conditions its agent on; text:
  them rendered by the model's chat template with the generation prompt).
- The command-line options both take (`peer_arguments`), and writing a side's record and its
  versions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: srpo's reward is read from here


def peer_arguments(description: str, bf16_help: str) -> argparse.ArgumentParser:
    """The options every peer script takes (the driver passes them); a peer adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="a Hugging Face model folder")
    p.add_argument("--tasks", required=True, help="the driver's tasks file (peer_common.read_tasks)")
    p.add_argument("--out", required=True, help="folder for ckpt/<tag>/<policy>/ and peer.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, required=True, help="training seconds")
    p.add_argument("--every", type=float, default=60.0, help="training seconds between checkpoints")
    p.add_argument("--marks", choices=("after", "before"), default="after",
                   help="which step a checkpoint holds (clock.py's mark modes)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=float, default=32.0)
    p.add_argument("--bf16", choices=("auto", "on", "off"), default="auto", help=bf16_help)
    return p


def checkpoint_discarder(out: str | Path):
    """discard(tag) for the clock: deletes out/ckpt/<tag> (a pending save the clock replaced)."""
    return lambda tag: shutil.rmtree(Path(out) / "ckpt" / tag)


def math_reward():
    """(task_id, answer, text) -> 1.0 / 0.0: srpo's MathReward with the default job's weights."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from srpo.tasks.math.rewards import MathReward
    from srpo.types import Task

    reward = MathReward(correct_weight=1.0, format_weight=0.0, format_rule="any")

    def score(task_id: str, answer: str, text: str) -> float:
        return reward(Task(task_id=task_id, prompt="", answer=answer), text).total

    return score


def answer_key(text: str) -> str | None:
    """The final answer a text states, whitespace-removed, or None: srpo's math answer key
    (srpo.tasks.math.pack.answer_key), what its majority vote compares."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from srpo.tasks.math.answers import extract_answer

    found = extract_answer(text)
    return None if found is None else "".join(found.split())


def vote_winner(texts: list[str]) -> str:
    """srpo's majority vote (srpo.workflows.voting.majority): the text carrying the most common
    stated answer; ties go to the answer given first; texts stating none do not vote; if none
    states one, the first text."""
    keys = [answer_key(t) for t in texts]
    counts: dict[str, int] = {}
    for k in keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return texts[0]
    best = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == best)
    return texts[keys.index(winner)]


def read_tasks(path: str | Path) -> list[dict]:
    """The driver's tasks file (module doc)."""
    tasks = json.loads(Path(path).read_text())
    if not tasks or not all({"task_id", "answer", "messages", "text"} <= set(t) for t in tasks):
        raise SystemExit(f"{path}: expected a non-empty list of {{task_id, answer, messages, text}}")
    return tasks


def versions(*packages: str) -> dict[str, str | None]:
    """Installed version of each package (None when absent), and the Python."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def bf16_supported() -> bool:
    """The CPU computes bfloat16 natively (AVX-512 BF16 / AMX), as srpo's `model.dtype: auto` asks."""
    import torch

    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def write_record(out_dir: Path, record: dict) -> Path:
    path = out_dir / "peer.json"
    path.write_text(json.dumps(record, indent=1))
    return path
