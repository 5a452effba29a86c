"""Writes the testbed presets of this folder (run from the repository root after editing):

    python scripts/generate_testbed_presets.py

Each preset gives every (set size, round, slot) its own role and its own tiny model, which is
what the cover task needs (docs/testbed.md: a shared policy does not learn to tell slots apart).
The role lists are long, so they are generated; tests/testbed check the files match this script.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parents[1] / "srpo" / "presets" / "testbed"

PRESETS = {  # file stem: (set sizes, rounds, what it is)
    "cover": ((4,), 1, "the default instance: sets of 4, one round"),
    "k1": ((1,), 1, "sets of 1"),
    "k2": ((2,), 1, "sets of 2"),
    "k4": ((4,), 1, "sets of 4"),
    "k8": ((8,), 1, "sets of 8"),
    "k16": ((16,), 1, "sets of 16"),
    "mixed": ((1, 2, 4, 8, 16), 1, "one task of each set size 1-16 in every batch"),
    "rounds": ((4,), 3, "sets of 4, three rounds, each round's set credited with its own coverage"),
}


def preset(set_sizes: tuple[int, ...], rounds: int) -> dict:
    roles = [f"player_{k}_{r}_{i}" for k in set_sizes for r in range(rounds) for i in range(k)]
    return {
        "model": {"name": "tiny", "tokenizer": "bytes", "hidden_size": 64, "num_layers": 2,
                  "init_seed": 0},
        "policies": {"kind": "separate", "names": roles},
        "agents": {r: {"policy": r} for r in roles},
        "workflow": {"name": "cover", "params": {"credit": "transition", "per_slot": True,
                                                 "set_sizes": list(set_sizes), "rounds": rounds}},
        "task": {"name": "testbed",
                 "testbed": {"set_sizes": list(set_sizes), "rounds": rounds, "alphabet_factor": 2},
                 "train_size": len(set_sizes), "heldout_size": 0},
        "sampling": {"temperature": 1.0, "max_new_tokens": 1},
        "group_size": 8,
        "seed": 0,
        "train": {"method": "srpo", "steps": 60, "tasks_per_step": len(set_sizes), "lr": 1.0e-2,
                  "micro_batch_tokens": 16384, "threads": 1},
        "eval": {"before": False, "after": False, "size": 0},
        "checkpoint": {"export": False, "plots": False, "tensorboard": False},
        "output_dir": "runs/testbed-{time}",
    }


def render(stem: str) -> str:
    set_sizes, rounds, what = PRESETS[stem]
    head = (f"# Testbed preset ({what}); written by scripts/generate_testbed_presets.py, edit that.\n"
            f"# Cover tasks played by tiny random models, one per role (docs/testbed.md).\n")
    return head + yaml.safe_dump(preset(set_sizes, rounds), sort_keys=False, width=100)


if __name__ == "__main__":
    for stem in PRESETS:
        (HERE / f"{stem}.yaml").write_text(render(stem))
        print(f"wrote {HERE / f'{stem}.yaml'}")
