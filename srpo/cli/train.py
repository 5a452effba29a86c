"""`srpo train`, `srpo eval` and `srpo plot`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from srpo.config.presets import PRESETS_DIR

DEFAULT_CONFIG = PRESETS_DIR / "default.yaml"


def _resolve_config(path: str | None) -> Path:
    """No CONFIG: the built-in default job. A run directory: its saved config.yaml."""
    if path is None:
        return DEFAULT_CONFIG
    p = Path(path)
    if p.is_dir():
        if not (p / "config.yaml").is_file():
            # the command's one line, exit status 2 (its caller's ValueError answer)
            raise ValueError(f"{p} is a directory without config.yaml (not a run directory)")
        return p / "config.yaml"
    return p


def _split_args(config: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """argparse cannot tell `srpo train key=value` (no CONFIG) from `srpo train CONFIG`."""
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *overrides]
    return config, overrides


def _workflow_error(command: str, error: Exception) -> int:
    """A workflow's error as one line (exit 1); anything else, or SRPO_DEBUG set, re-raises."""
    import os

    from srpo.rollout.runner import workflow_error_line

    line = workflow_error_line(error)
    if line is None or os.environ.get("SRPO_DEBUG"):
        raise error
    print(f"{command}: {line} (SRPO_DEBUG=1 shows the traceback)", file=sys.stderr)
    return 1


def _disk_full_line(error: BaseException, run_dir: Path) -> str | None:
    """One line for a full disk anywhere in a run (None if `error` is not one): the file, what is
    intact, and how to go on. Checkpoint saves already name the newest intact checkpoint; an
    export, the report or any other file of the run gets that hint here."""
    from srpo.disk import as_disk_full
    from srpo.record.checkpoint import CHECKPOINTS_DIR, disk_full_hint

    error = as_disk_full(error, run_dir)  # a writer srpo does not wrap (logs, plots): the run dir
    if error is None:
        return None
    if error.path.is_relative_to(run_dir / CHECKPOINTS_DIR):
        return str(error)
    hint = disk_full_hint(run_dir)
    if error.path.name == "report.html":
        hint += f" (or, as training is complete, `srpo report {run_dir}` writes just the report)"
    return str(error.with_hint(f"{error.hint}; {hint}" if error.hint else hint))


def _stopped_line(trainer, interrupt) -> str:
    """Where an interrupted run stopped and the command that continues it (exactly: a resumed
    run's metrics equal an uninterrupted run's)."""
    import shlex

    from srpo.record.checkpoint import latest_checkpoint

    run_dir, steps = trainer.run_dir, trainer.cfg.train.steps
    try:
        ckpt = latest_checkpoint(run_dir)
    except Exception:
        ckpt = None
    where = f"from its checkpoint {ckpt.name}" if ckpt is not None else "from step 0 (no checkpoint yet)"
    after = " (training done; its final evaluation, report or export unfinished)" if trainer.step >= steps else ""
    again = (f"srpo train {shlex.quote(str(run_dir))} resume=true" if (run_dir / "config.yaml").is_file()
             else "the same command with resume=true")
    return (f"stopped by {interrupt.name} at step {trainer.step} of {steps}{after}; it continues {where}; "
            f"resume with: {again}")


def _cmd_train(args: argparse.Namespace) -> int:
    from srpo.cli.interrupts import Interrupted, interrupt_behind
    from srpo.config import ConfigError, load_config
    from srpo.record.accuracy import paired_comparison
    from srpo.record.checkpoint import CheckpointError
    from srpo.train.trainer import Trainer

    config, overrides = _split_args(args.config, args.overrides)
    if args.workflow:  # as `workflow.name=...`, before the other overrides (a later one still wins)
        overrides = [f"workflow.name={args.workflow}", *overrides]
    cfg = None
    try:
        cfg = load_config(_resolve_config(config), overrides)
        start = time.perf_counter()
        trainer = Trainer(cfg)
    except (ConfigError, ValueError, FileNotFoundError, CheckpointError) as e:
        # bad settings and unusable checkpoints are refused before any work: one line, no traceback
        print(f"srpo train: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk already at the start (the run directory's lock, config.yaml)
        if cfg is None or (line := _disk_full_line(e, Path(cfg.output_dir))) is None:
            raise
        print(f"srpo train: {line}", file=sys.stderr)
        return 1
    except Interrupted as e:  # SIGINT / SIGTERM (srpo.cli.interrupts); the lock is released
        print(f"srpo train: stopped by {e.name} during start-up, before any step: run the same command "
              f"again", file=sys.stderr)
        return e.exit_code
    try:
        result = trainer.train()
    except Interrupted as e:  # train() released the lock and removed its temporary files on the way
        if trainer.dist.is_main:
            print(f"srpo train: {_stopped_line(trainer, e)}", file=sys.stderr)
        return e.exit_code
    except CheckpointError as e:  # a checkpoint that does not fit the model: nothing was written
        print(f"srpo train: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if (interrupt := interrupt_behind(e)) is not None:  # a signal inside a C++ writer (interrupts.py)
            if trainer.dist.is_main:
                print(f"srpo train: {_stopped_line(trainer, interrupt)}", file=sys.stderr)
            return interrupt.exit_code
        # a full disk (exit 1, like a failed workflow: the settings were fine) in one line
        if (line := _disk_full_line(e, trainer.run_dir)) is not None:
            print(f"srpo train: {line}", file=sys.stderr)
            return 1
        return _workflow_error("srpo train", e)
    if not trainer.dist.is_main:  # data-parallel runs: rank 0 reports
        return 0
    wall = time.perf_counter() - start
    print(f"run directory: {result.run_dir}  ({result.steps_done} steps, {wall:.0f} s)")
    if result.before and result.after:
        c = paired_comparison(result.before.correct, result.after.correct)
        print(f"held-out accuracy ({c.n} problems, greedy): before {result.before.summary()}")
        print(f"                                          after  {result.after.summary()}")
        print(f"paired difference {100 * c.diff.estimate:+.1f} points (95% CI {100 * c.diff.low:+.1f} "
              f"to {100 * c.diff.high:+.1f}); {c.gained} gained, {c.lost} lost; McNemar p = {c.p_value:.3g}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from srpo.build import build_rollout, load_tasks, task_pack
    from srpo.cli.destination import check_destination
    from srpo.config import ConfigError, load_config
    from srpo.record.checkpoint import CheckpointError
    from srpo.record.evaluate import evaluate, write_eval_json

    config, overrides = _split_args(args.config, args.overrides)
    try:
        if args.out:  # before any work: the files are written at the end
            check_destination(args.out)
            check_destination(eval_episodes_path(args.out))
        path = _resolve_config(config)
        cfg = load_config(path, overrides)
        if cfg.train.threads:  # the same CPU threads as training: same numbers as its evaluation
            import torch

            torch.set_num_threads(cfg.train.threads)
        policies = None
        if path.name == "config.yaml":  # a run directory: say which weights are evaluated
            policies, what = _run_policies(path.parent, cfg, trust_export=args.trust_export)
            print(what, flush=True)
        runner, workflow = build_rollout(cfg, workflow=args.workflow, policies=policies)
        # the same held-out tasks as the trainer's evaluation (eval.size) unless --n says otherwise
        tasks = load_tasks(cfg.task, split="heldout", limit=args.n if args.n is not None else (cfg.eval.size or None))
        if not tasks:
            raise ValueError(f"no held-out task to evaluate: task.heldout_size is {cfg.task.heldout_size}"
                             + (f" and --n {args.n}" if args.n is not None else "")
                             + "; set task.heldout_size (and eval.size or --n) to 1 or more")
        from srpo.train.preflight import check_question_lengths  # before any rollout, as training

        check_question_lengths(tasks, runner.backend.policies, cfg.sampling.max_new_tokens, "heldout")
    except (ConfigError, ValueError, FileNotFoundError, CheckpointError) as e:
        print(f"srpo eval: {e}", file=sys.stderr)
        return 2
    from srpo.record.progress import RunProgress

    with RunProgress() as progress, progress.bar("eval", total=len(tasks), transient=True) as bar:
        def on_progress(done: int, total: int, correct: int) -> None:
            bar.update(completed=done, info=f"accuracy so far {100 * correct / done:.1f}% ({correct}/{done})")
        try:
            result, episodes = evaluate(runner, workflow, tasks, seed=cfg.seed,
                                        success_component=cfg.eval.success_component
                                        or task_pack(cfg).success_component,
                                        batch_tasks=cfg.eval.batch_tasks, on_progress=on_progress,
                                        temperatures=cfg.eval.temperatures)
        except Exception as e:
            return _workflow_error("srpo eval", e)
    if args.out:
        write_eval_json(args.out, result, label="eval", config=str(path))
        # the episodes beside it, in the training evaluations' format (the report's answers, and
        # what a study reads from a base model's evaluation besides its accuracy)
        from srpo.record import episodes_log

        prompt_text = episodes_log.prompt_decoder(runner.backend.policies)
        episodes_log.write_records(eval_episodes_path(args.out),
                                   episodes_log.episode_records(episodes, step=0, prompt_text=prompt_text))
    print(result.summary())
    for agent, acc in sorted(result.per_agent.items()):
        print(f"  agent {agent}: {100 * acc:.1f}% of its answers correct")
    return 0


def eval_episodes_path(out: str | Path) -> Path:
    """`srpo eval --out X.json` writes its episodes to X.episodes.jsonl.gz."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".json") + ".episodes.jsonl.gz")


def _run_policies(run_dir: Path, cfg, trust_export: bool = False):
    """(policies, what is evaluated) for a run directory: its exported policies (checksums
    checked), else its newest complete checkpoint, else the untrained initial policies, said so.
    trust_export: evaluate an export that has no checksum manifest (made by another tool)."""
    from srpo.build import build_policies
    from srpo.record.checkpoint import EXPORT_MANIFEST, latest_checkpoint, load_checkpoint_policies
    from srpo.record.policies import checkpointed_models

    export = run_dir / "export"
    if export.is_dir():
        policies, verified = _exported_policies(export, cfg, trust_export)
        note = ("checksums verified" if verified else
                f"checksums NOT checked: no {EXPORT_MANIFEST}, evaluated as --trust-export asks")
        return policies, f"evaluating the trained policies exported in {export} ({note})"
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None:
        policies = build_policies(cfg.model, cfg.policies, cfg.device)
        load_checkpoint_policies(ckpt, checkpointed_models(policies))
        return policies, f"evaluating the policies of checkpoint {ckpt} ({run_dir} has no export/)"
    return None, (f"{run_dir} has neither export/ nor a complete checkpoint: evaluating the UNTRAINED "
                  f"initial policies of its config")


def _exported_policies(export_dir: Path, cfg, trust_export: bool = False):
    """A run's trained policies from RUN/export/<policy> (LoRA adapters come merged), one model
    per policy name, so any policy layout evaluates the same way. Each folder is checked against
    its manifest first; one without a manifest is refused unless trust_export."""
    from srpo.models.precision import resolve_dtype
    from srpo.record.checkpoint import verify_export
    from srpo.rollout.policies import PolicySet

    models = {}
    verified = True
    for name in cfg.policies.names:
        folder = export_dir / name
        if not folder.is_dir():
            raise FileNotFoundError(f"{export_dir} has no exported policy {name!r}")
        # raises on a damaged file or a missing manifest, naming it
        verified = verify_export(folder, allow_missing_manifest=trust_export) and verified
        models[name] = _load_export(folder, cfg.device)
    if len(models) == 1:
        (name, (model, tok)), = models.items()
        policies = PolicySet.shared(model, tok, name=name)
    else:
        policies = PolicySet.separate(models)
    policies.compute_dtype = resolve_dtype(cfg.model.dtype, cfg.device)  # evaluated as trained
    return policies, verified


def _load_export(folder: Path, device: str):
    """(model, tokenizer) of an exported folder. What transformers cannot load (a config or
    weights it refuses, which checksums of another tool's export do not rule out) is one
    CorruptCheckpointError naming the folder, not its traceback."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from srpo.record.checkpoint import CorruptCheckpointError

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).to(device).eval()
        return model, AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise CorruptCheckpointError(f"{folder} cannot be loaded as a Hugging Face model: {first}") from None


def _cmd_plot(args: argparse.Namespace) -> int:
    from srpo.cli.destination import check_destination
    from srpo.record.plots import PLOTS_DIR, plot_run

    run_dir = Path(args.run_dir)
    try:
        if not run_dir.is_dir():
            raise FileNotFoundError(f"no run directory at {run_dir}")
        check_destination(run_dir / PLOTS_DIR / "reward.png", "the plot")  # e.g. a read-only run
        paths = plot_run(run_dir)
    except (ValueError, FileNotFoundError) as e:  # no run or no log; a damaged line (named)
        print(f"srpo plot: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def add_train_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a multi-agent system (no CONFIG: the built-in default job)")
    p.add_argument("config", nargs="?", help="YAML preset (srpo/presets/*.yaml); default: the built-in CPU job")
    p.add_argument("overrides", nargs="*",
                   help="key=value overrides, anywhere on the line, e.g. train.steps=4 output_dir=runs/x")
    p.add_argument("--workflow", help="train another workflow than the configured one (a name or file.py:Class); "
                                      "it starts from its own params, as a workflow.name=... override does")
    p.set_defaults(handler=_cmd_train)

    p = sub.add_parser("eval", help="held-out accuracy of a config or a run directory, per workflow and agent")
    p.add_argument("config", nargs="?", help="YAML preset or a run directory")
    p.add_argument("overrides", nargs="*", help="key=value overrides (anywhere on the line, also after options)")
    p.add_argument("--workflow", help="evaluate another workflow than the configured one")
    p.add_argument("--n", type=int, default=None,
                   help="number of held-out tasks (default: eval.size, else task.heldout_size)")
    p.add_argument("--out", help="also write the result, with per-task correctness, as JSON here "
                                 "(X.json), and the episodes beside it (X.episodes.jsonl.gz)")
    p.add_argument("--trust-export", action="store_true",
                   help="evaluate RUN/export/<policy> folders that have no checksum manifest "
                        "(srpo_export.json), e.g. exported by another tool; their files are then NOT "
                        "checked (without this flag such a folder is an error)")
    p.set_defaults(handler=_cmd_eval)

    p = sub.add_parser("plot", help="write RUN_DIR/plots/*.png from RUN_DIR/metrics.jsonl")
    p.add_argument("run_dir")
    p.set_defaults(handler=_cmd_plot)
