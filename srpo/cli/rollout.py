"""`srpo rollout` and `srpo workflows` (registered on the main parser by srpo.cli).

    srpo rollout CONFIG [key=value ...] [--workflow NAME] --n N --out FILE.jsonl
    srpo workflows

Each subparser gets a `handler(args) -> int` default (the process exit code): 0 on success,
2 for a bad config / name / argument (the message names it), 1 when a reward fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def add_rollout_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `rollout` and `workflows` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "rollout",
        help="run a workflow on tasks and write one episode per line (JSONL)",
        description=(
            "Run the configured multi-agent workflow on the first N tasks of a split, with "
            "group_size rollouts per task, and write one episode per line: task_id, workflow, "
            "reward, and every transition with the active set (members) it consumed."
        ),
    )
    p.add_argument("config", help="YAML config, e.g. srpo/presets/smoke.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides, anywhere on the line (also after --n, --out), e.g. "
                   "sampling.temperature=0.7 group_size=2")
    p.add_argument("--workflow", help="run this workflow instead of the configured one "
                   "(with its default parameters); see `srpo workflows`")
    p.add_argument("--n", type=int, required=True,
                   help="number of tasks; each gets group_size rollouts (episodes = N x G)")
    p.add_argument("--out", required=True, help="output file (.jsonl)")
    p.add_argument("--split", choices=("train", "heldout"), default="train",
                   help="task split (default: train)")
    p.add_argument("--with-ids", action="store_true",
                   help="also write token ids and loss masks of every member")
    p.set_defaults(handler=rollout_command)

    w = subparsers.add_parser("workflows", help="list the built-in workflows",
                              description="List the registered workflows, one line each.")
    w.set_defaults(handler=workflows_command)

    k = subparsers.add_parser("packs", help="list the installed task packs (task.name)",
                              description="List the installed task packs, one line each.")
    k.set_defaults(handler=packs_command)


def packs_command(args: argparse.Namespace) -> int:
    from srpo.packs import load_all_packs

    packs = load_all_packs()
    width = max(len(p.name) for p in packs)
    for pack in packs:
        print(f"{pack.name:<{width}}  {pack.description}")
    return 0


def workflows_command(args: argparse.Namespace) -> int:
    from srpo.workflows.registry import list_workflows

    items = list_workflows()  # the built-ins and the installed task packs' (search_*, cover)
    width = max(len(n) for n, _ in items)
    for name, description in items:
        print(f"{name:<{width}}  {description}")
    return 0


def _error(message: str, code: int) -> int:
    print(f"srpo rollout: {message}", file=sys.stderr)  # every command: "srpo <command>: <problem>"
    return code


def rollout_command(args: argparse.Namespace) -> int:
    import torch

    from srpo.build import build_rollout, build_workflow_from, load_tasks
    from srpo.cli.destination import check_destination
    from srpo.config import load_config
    from srpo.rollout.episode_lines import write_jsonl
    from srpo.rollout.runner import rollout_metrics, workflow_error_line

    try:
        check_destination(args.out)  # before any work: a file written only at the end
        cfg = load_config(args.config, args.overrides)
        build_workflow_from(cfg, args.workflow)  # fail on a bad name before loading anything
        tasks = load_tasks(cfg.task, split=args.split, limit=args.n)
        runner, workflow = build_rollout(cfg, workflow=args.workflow)
        from srpo.train.preflight import check_question_lengths  # before any rollout, as training

        check_question_lengths(tasks, runner.backend.policies, cfg.sampling.max_new_tokens, args.split)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        return _error(str(e), 2)
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    try:
        result = runner.run(tasks, workflow, group_size=cfg.group_size)
    except Exception as e:  # a workflow's error: one line (SRPO_DEBUG=1: the traceback)
        line = workflow_error_line(e)
        if line is None or os.environ.get("SRPO_DEBUG"):
            raise
        return _error(f"{line} (SRPO_DEBUG=1 shows the traceback)", 1)
    n = write_jsonl(result.episodes, args.out, with_ids=args.with_ids)
    m = rollout_metrics(result.episodes)
    sizes = ", ".join(
        f"{k.split('_')[1]}: {int(v)}" for k, v in m.items() if k.startswith("sets/size_")
    )
    print(
        f"wrote {n} episodes ({len(tasks)} tasks x {cfg.group_size}) of workflow "
        f"{workflow.name!r} to {args.out}\n"
        f"  reward mean {m['reward/mean']:.3f} (std {m['reward/std']:.3f}); "
        f"sets by size {{{sizes}}}"
        f"\n  {int(result.stats['generated_tokens'])} tokens generated in "
        f"{time.perf_counter() - start:.1f} s ({result.stats['tokens_per_s']:.0f} tok/s, "
        f"{int(result.stats['generate_calls'])} generate calls)"
    )
    invalid = [e.metadata["route_invalid"] for e in result.episodes if "route_invalid" in e.metadata]
    if invalid:  # the routed workflows record 0/1 per episode
        print(f"  invalid router choices: {int(sum(invalid))}")
    return 0
