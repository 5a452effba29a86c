"""Time to accuracy: srpo against TRL and CoMLRL, held-out accuracy over training seconds.

Every arm trains SmolLM2-135M-Instruct + LoRA (r 16, alpha 32, dropout 0, all linear layers)
from the same start (the base model, adapters at B = 0) on the same task, reasoning-gym
basic_arithmetic (2 terms, 1 digit; srpo's train split of 2,000 problems, its held-out 256
disjoint from it), with the same training reward (srpo's MathReward: 1 when the stated answer
is right) and the same answer budget (24 tokens), each trainer at its own best documented
settings for this task. Each run saves its LoRA adapters (peft layout) at every ~60 s of its
own training time, with the training clock paused while saving (benchmarks/tta/clock.py), and
stops at its budget. Afterwards ONE evaluator scores every saved checkpoint of every arm:
`srpo eval` with the adapters loaded (`policies.lora.init`), greedy, on the same 256 held-out
problems with the same scorer, through the srpo workflow that matches the arm's setting. So
decoding and scoring are identical for every side, and evaluation time is excluded from
training time by construction (it is reported on its own, as is each run's start-up: imports,
model load and trainer construction, up to the first step).

Arms (`ARMS`) and their settings:

  vs TRL (single agent; evaluated through srpo's `single` workflow, math/single's prompt):
    trl_grpo             TRL 1.16 GRPOTrainer in ../trl-venv (benchmarks/tta/trl_peer.py): its
                         own loading, generation and loss; TRL's defaults (loss_type dapo,
                         scale_rewards group, beta 0, epsilon 0.2, bf16 where the CPU has it)
                         except lr 4e-4 constant (its 1e-6 is a full fine-tuning rate; 4e-4 is
                         the LoRA rate measured best on this task), gradient checkpointing off
                         (its default on only trades time for memory a 135M model does not
                         need) and mask_truncated_completions on (DAPO's practice TRL documents;
                         srpo's cut_answers: none). 6 prompts x 4 completions a step, T = 1.0.
    srpo_single_grpo     `srpo train math/single train.method=grpo`
    srpo_single_srpo     `srpo train math/single` (method srpo)
    srpo_default_debate  `srpo train` (the default job: a debate of 3 copies of one adapter, one
                         round, a majority vote), evaluated through its own debate
  vs CoMLRL (3 agents answering together, one joint reward; evaluated through the debate of 3
  separate adapters, benchmarks/tta/srpo_trio.yaml):
    comlrl_magrpo        CoMLRL 1.4.3 MAGRPO in ../comlrl-venv (benchmarks/tta/comlrl_peer.py):
                         3 agents, a model and an adapter each, one turn, rewarded by srpo's
                         majority vote of their answers; MAGRPOConfig's defaults (4 samples,
                         T 0.6, top_p 0.6, top_k 50, an update every 2 prompts) except lr 4e-4
                         (its 5e-6 is a full fine-tuning rate), 24 new tokens, its own
                         evaluation off, base weights in bf16 where the CPU has it
    srpo_trio_magrpo     `srpo train benchmarks/tta/srpo_trio.yaml train.method=magrpo`
    srpo_trio_srpo       the same with method srpo
    srpo_trio_magrpo_2tasks, srpo_trio_srpo_2tasks
                         the same two with train.tasks_per_step=2 (an update every 2 tasks, as
                         CoMLRL's every 2 prompts; 6 drawn at once, 2 informative kept)
    srpo_trio_srpo_mb2   the trio (method srpo, 6 tasks a step) with train.minibatches=2: each
                         step's update split into 2 optimizer steps of whole sets, the second's
                         ratio against the rollout policy (an old-log-prob pass is added)
    srpo_trio_srpo_consumed
                         the trio (method srpo, 6 tasks a step) with train.unconsumed=singleton:
                         an answer cut by the token budget, which the vote leaves out, is a set
                         of its own credited 0 instead of sharing the vote's advantage
                         (docs/algorithms.md, "Consumed sets")
    srpo_trio_srpo_debaters
                         srpo_trio_srpo_consumed with workflow.params.credit=debaters: the vote's
                         set (still one set, one advantage) credited the mean of its members' own
                         rewards instead of the vote's, so an outvoted wrong answer lowers it
    srpo_trio_grpo_own   the trio with train.method=grpo workflow.params.credit=own: per-debater
                         credit, each answer its own transition credited its own correctness
                         (GRPO groups by task and agent); the method that gained most in the
                         debate credit study (docs/results.md, "Credit in debate", D2)
    srpo_trio_grpo_own_2draws
                         srpo_trio_grpo_own with train.dynamic_sampling_max_draws=2: 12 tasks
                         rolled out a step instead of 18 (with this credit about half the drawn
                         tasks are informative; a short step is scaled as the default recipe's)
  Why 3 agents against CoMLRL (its own examples mostly use 2): with 2 debaters srpo's vote
  breaks every disagreement toward the first debater, so the debate's accuracy would read one
  agent alone; with 3, CoMLRL's joint reward, the episode reward both srpo methods train on
  (method magrpo's advantage unit is the episode) and the evaluated accuracy are one quantity,
  the correctness of the majority answer.
  srpo arms run the preset as shipped (the default recipe: bf16 where the CPU has it, dynamic
  sampling, lr 4e-4, cut answers out of the reward), with train.steps raised so the budget ends
  them, no evaluation, checkpoint, plot or report during training (the benchmark's evaluator
  does it), and train.threads as given.

Against TRL the srpo arms are evaluated through their own workflows: single for both single
arms (as TRL's checkpoints), the default job's debate of 3 for srpo_default_debate, so that row
compares the default job's system with TRL's single agent, as the issue asks.

Which step a "60 s" checkpoint holds (`run --marks`, benchmarks/tta/clock.py; every side the
same): `after` (the default, every study up to 2026-12-08) the first step to end at or past each
multiple of 60 s, so a mark lies up to one step past it and, until a side's first mark, the
comparison holds the base model although the side had trained for a minute; `before` the last
step to end before it (every step's state is saved, the clock paused, and all but the marks
discarded), so each mark is the state its side actually had at 60, 120, ... s and the seed by
seed comparison reads both sides at those nominal times.

`run --lr X` replaces the learning rate on any side (srpo's train.lr, the peers' --lr; without it
every side runs at 4e-4); the record's settings name the rate a run trained with. Runs at
different rates go into different --root folders: `analyze` groups runs by arm.

What `analyze` reports (definitions; a checkpoint lies at a step end, off its nominal time by up
to one step, and the curves use each mark's own training seconds):

    a_s(t)   seed s's accuracy at training second t: that of its last checkpoint at or before t
             (the base model's at t = 0)
    m(t)     an arm's mean over its seeds, (1/S) sum_s a_s(t), for t up to T_arm, the earliest
             last checkpoint of its seeds; the plot draws m(t) as steps with the band
             [min_s a_s(t), max_s a_s(t)]
    B        a peer's best held-out accuracy, max_t m_peer(t), and when it reached it
    table    per peer and srpo arm: the first t with m_arm(t) >= B ("not reached" within T_arm;
             also per seed in analysis.json), and m_arm(T_peer), the arm's accuracy at the
             peer's total training time (at T_arm if the arm ended first, said so); then per
             arm its mean start-up, training seconds, steps and the evaluation seconds of all
             its checkpoints, and where its training seconds went (phases, below)
    fixed    per peer and srpo arm, at t = 60, 120, 180, 240, 300 s (those every run of both
             reaches): each side's a_s(t) over its seeds, the difference of the means (arm -
             peer) with a Welch 95% interval and p (the seeds of the two sides are independent
             runs, not pairs; analysis.json `at_fixed_times`)
    phases   seconds per phase of each run's training time, mean over seeds: srpo's own phase
             log (metrics.jsonl `time/*`: rollout = generation + workflow + scoring,
             old_logprobs, sets_advantages, update = forward + backward + optimizer); the peers
             time their trainers' own methods (tta/clock.py PhaseTimer, exclusive of nested
             calls; trl_peer.py and comlrl_peer.py name them); `other` is the rest of the
             training seconds (the trainer's loop, what no wrapped method covers)

Layout under --root (default runs/time_to_accuracy, which git ignores: checkpoints are large;
`analyze --out results/bench/time_to_accuracy_<date>` writes the small files worth keeping):

    <arm>/seed<S>/record.json           one run: marks (tag, step, train_seconds, save_seconds;
                                        "before" marks also at: the nominal time), mark_mode,
                                        start-up, training seconds, phases, settings, versions,
                                        commit
    <arm>/seed<S>/ckpt/<tag>/<policy>/  the adapters at one mark (peft layout)
    <arm>/seed<S>/ckpt/<tag>/eval.json  its evaluation (`srpo eval --out`), and eval_time.json
    _base/<config>/eval.json            the base model through that workflow: every curve's t = 0
    _models/tiny                        the tiny model's folder the peers load (--model tiny)

Commands (one run at a time, nothing else on the machine; 2 threads on this 2-core machine):

    bash scripts/peer_envs.sh                                  # ../trl-venv, ../comlrl-venv
    .venv/bin/python benchmarks/time_to_accuracy.py run --arm srpo_single_srpo --seed 0 --budget 600
    .venv/bin/python benchmarks/time_to_accuracy.py run --arm trl_grpo --seed 0 --budget 600 \\
        --peer-python ../trl-venv/bin/python
    .venv/bin/python benchmarks/time_to_accuracy.py evaluate    # every checkpoint not yet scored
    .venv/bin/python benchmarks/time_to_accuracy.py analyze --out results/bench/time_to_accuracy_<date>
    .venv/bin/python benchmarks/time_to_accuracy.py verdicts --out results/bench/time_to_accuracy_<date> \\
        --arm A --h3-baseline 9,32,4,0,56 --baseline-name "..." [--h3 at-120]   # a plan's H1-H3

`--model tiny` runs the whole chain on srpo's tiny random model (seconds; the slow test).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # an srpo run's start-up is measured from here (imports included)

import argparse  # noqa: E402 (after the start-up clock)
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NamedTuple  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "tta"))
from clock import MARK_MODES, BudgetReached, TrainingClock  # noqa: E402 (benchmarks/tta/)
from peer_common import checkpoint_discarder  # noqa: E402 (benchmarks/tta/; the standard library only)
from provenance import provenance  # noqa: E402

DEFAULT_ROOT = "runs/time_to_accuracy"
TRIO = "benchmarks/tta/srpo_trio.yaml"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}


class Arm(NamedTuple):
    """side: who trains ("srpo" in this process, "trl" / "comlrl" in their own environment);
    config: the srpo config srpo trains with and every side is evaluated through;
    overrides: srpo's training overrides; policies: the adapters a checkpoint holds."""

    side: str
    config: str
    policies: tuple[str, ...]
    overrides: tuple[str, ...] = ()


ARMS = {
    "trl_grpo": Arm("trl", "math/single", ("solver",)),
    "srpo_single_grpo": Arm("srpo", "math/single", ("solver",), ("train.method=grpo",)),
    "srpo_single_srpo": Arm("srpo", "math/single", ("solver",), ("train.method=srpo",)),
    "srpo_default_debate": Arm("srpo", "default", ("debater",)),
    "comlrl_magrpo": Arm("comlrl", TRIO, ("agent_a", "agent_b", "agent_c")),
    "srpo_trio_magrpo": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"), ("train.method=magrpo",)),
    "srpo_trio_srpo": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"), ("train.method=srpo",)),
    # the trio with smaller, more frequent updates: 2 tasks a step (CoMLRL updates every 2 prompts)
    # instead of 6, so about 9 s a step instead of 22 on a 2-core machine without AMX
    "srpo_trio_magrpo_2tasks": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                                   ("train.method=magrpo", "train.tasks_per_step=2")),
    "srpo_trio_srpo_2tasks": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                                 ("train.method=srpo", "train.tasks_per_step=2")),
    # the shipped trio with its update split into 2 optimizer steps of whole sets (PPO's
    # mini-batches): about as many optimizer steps a second as CoMLRL (28 in 300 s against 14)
    "srpo_trio_srpo_mb2": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                              ("train.method=srpo", "train.minibatches=2")),
    # the shipped trio with consumed sets: a cut answer the vote did not read is its own set,
    # credited 0, so a debater that rambles past the budget is not credited with the vote's wins
    # (in the 5-seed runs of 2026-12-07 one debater of three did so on 4 of 5 seeds)
    "srpo_trio_srpo_consumed": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                                   ("train.method=srpo", "train.unconsumed=singleton")),
    # consumed sets, and the set credited its members' mean own reward (debate credit "debaters"):
    # with the vote's credit, a debater the two others outvote is credited their win, and with
    # consumed sets one or two debaters of three still collapsed on 4 of 5 seeds (2026-12-07, late)
    "srpo_trio_srpo_debaters": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                                   ("train.method=srpo", "train.unconsumed=singleton",
                                    "workflow.params.credit=debaters")),
    # per-debater credit (GRPO, each answer credited its own correctness): in the debate credit
    # study it gained more than SRPO's set credit (D2, 20 task-seed pairs, Holm p 0.033), and with
    # every credit that shares the vote's outcome one or two debaters of three collapsed here
    "srpo_trio_grpo_own": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                              ("train.method=grpo", "workflow.params.credit=own")),
    # the same with 2 draws of 6 tasks a step instead of 3: in its 5-seed runs (2026-12-07, night)
    # 48% of the drawn tasks were informative and 44 of 81 steps needed 2 draws, 36 needed 3;
    # rollout was 70% of training time and a step about 19 s against CoMLRL's 12
    "srpo_trio_grpo_own_2draws": Arm("srpo", TRIO, ("agent_a", "agent_b", "agent_c"),
                                     ("train.method=grpo", "workflow.params.credit=own",
                                      "train.dynamic_sampling_max_draws=2")),
}
# each peer and the srpo arms it is compared with
COMPARISONS = {
    "trl_grpo": ("srpo_single_grpo", "srpo_single_srpo", "srpo_default_debate"),
    "comlrl_magrpo": ("srpo_trio_magrpo", "srpo_trio_srpo", "srpo_trio_magrpo_2tasks", "srpo_trio_srpo_2tasks",
                      "srpo_trio_srpo_mb2", "srpo_trio_srpo_consumed",
                      "srpo_trio_srpo_debaters", "srpo_trio_grpo_own",
                      "srpo_trio_grpo_own_2draws"),
}
# the fixed training seconds at which `analyze` compares each arm's seeds with its peer's (Welch)
FIXED_TIMES = (60.0, 120.0, 180.0, 240.0, 300.0)
PEER_SCRIPTS = {"trl": HERE / "tta" / "trl_peer.py", "comlrl": HERE / "tta" / "comlrl_peer.py"}

# srpo overrides of each model choice, for training and evaluation alike; the tiny model is a
# random 2-layer llama with SmolLM2's tokenizer (so the peers load it as they load SmolLM2)
MODEL_OVERRIDES = {
    "smollm2": (),
    "tiny": ("model.name=tiny", "model.arch=llama", "model.tokenizer=smollm2", "model.hidden_size=64",
             "model.num_layers=2", "model.init_seed=0", "model.dtype=float32", "task.train_size=64",
             "task.heldout_size=8", "eval.size=8", "sampling.max_new_tokens=8", "train.tasks_per_step=2",
             "train.dynamic_sampling=false"),
}
# the peers' matching shapes for the tiny model (8 new tokens, 2 prompts a step, float32)
PEER_MODEL_ARGS = {"smollm2": (), "tiny": ("--max-new-tokens", "8", "--bf16", "off")}
PEER_TINY_EXTRA = {"trl": ("--prompts-per-step", "2"), "comlrl": ()}
# what a training run of the benchmark leaves out: the evaluator does all of it afterwards
QUIET = ("eval.before=false", "eval.after=false", "eval.every=0", "checkpoint.every=0",
         "checkpoint.export=false", "checkpoint.plots=false", "checkpoint.tensorboard=false",
         "checkpoint.report=false", "train.steps=1000000")


# --------------------------------------------------------------------------- run: srpo side


def srpo_overrides(arm: Arm, model: str, seed: int, threads: int, run_dir: Path,
                   lr: float | None = None) -> list[str]:
    """The overrides of an srpo training run of `arm` (the arm's, the model's, QUIET; `lr`, when
    given, replaces the config's train.lr)."""
    return [*arm.overrides, *MODEL_OVERRIDES[model], *QUIET, f"seed={seed}", f"train.threads={threads}",
            f"output_dir={run_dir}", *([f"train.lr={lr}"] if lr is not None else [])]


def save_adapters(policies, folder: Path) -> None:
    """Each LoRA policy's adapter in peft's layout, folder/<policy>/{adapter_config.json,
    adapter_model.safetensors} (keys without the adapter name: what policies.lora.init loads)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    for name in policies.names:
        policy = policies[name]
        config = policy.model.peft_config[policy.adapter].to_dict()
        config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}  # sets are not JSON
        tensors = {k: v.detach().cpu().contiguous()
                   for k, v in get_peft_model_state_dict(policy.model, adapter_name=policy.adapter).items()}
        out = folder / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "adapter_config.json").write_text(json.dumps(config, indent=1, default=str))
        save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})


def run_srpo(arm: Arm, args: argparse.Namespace, run_dir: Path) -> dict:
    """One srpo training run until `budget` training seconds, checkpointing at the marks."""
    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    cfg = load_config(arm.config, srpo_overrides(arm, args.model, args.seed, args.threads, run_dir / "srpo_run",
                                                 args.lr))
    trainer = Trainer(cfg)
    clock = TrainingClock(args.every, args.budget, lambda tag: save_adapters(trainer.policies, run_dir / "ckpt" / tag),
                          started=STARTED, marks=args.marks, discard=checkpoint_discarder(run_dir))
    record_step = trainer.recorder.step

    def step(number: int, *a, **kw):  # after the step's own record: a checkpoint at a mark
        record_step(number, *a, **kw)
        if clock.after_step(number):
            raise BudgetReached

    trainer.recorder.step = step
    clock.start()
    with contextlib.suppress(BudgetReached):  # the budget ends training, as a stop would
        trainer.train()
    clock.finish()  # the steps ran out before the budget: the last state is a checkpoint too
    t = cfg.train
    phases = srpo_phases(run_dir / "srpo_run" / "metrics.jsonl", clock.seconds())
    settings = {"config": arm.config, "overrides": list(arm.overrides), "method": t.method, "lr": t.lr,
                "tasks_per_step": t.tasks_per_step, "group_size": cfg.group_size, "dtype": cfg.model.dtype,
                "max_new_tokens": cfg.sampling.max_new_tokens, "threads": t.threads}
    return {**clock.record(), "phases": phases, "settings": settings, "versions": srpo_versions()}


# srpo's phase log (metrics.jsonl, `time/<phase>` of every step) -> the benchmark's phase names
SRPO_PHASES = {"time/rollout": "rollout", "time/old_logprobs": "old_logprobs", "time/sets": "sets_advantages",
               "time/advantages": "sets_advantages", "time/update": "update"}


def srpo_phases(metrics: Path, train_seconds: float) -> dict[str, float]:
    """Seconds per phase of an srpo run, summed over its steps from its own phase log: rollout
    (generation, the workflow and scoring), old_logprobs, sets_advantages, update (forward,
    backward, optimizer); other = the training seconds minus those (the loop, the step records,
    a step the budget cut short)."""
    phases: dict[str, float] = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        for key, phase in SRPO_PHASES.items():
            if key in row:
                phases[phase] = phases.get(phase, 0.0) + row[key]
    phases["other"] = train_seconds - sum(phases.values())
    return phases


def srpo_versions() -> dict:
    from importlib import metadata

    return {"python": sys.version.split()[0],
            **{p: metadata.version(p) for p in ("srpo", "torch", "transformers", "peft")}}


# --------------------------------------------------------------------------- run: peer side


def model_folder(model: str, root: Path) -> Path:
    """The Hugging Face folder a peer loads: srpo's converted SmolLM2, or the tiny model saved once
    under root/_models/tiny (the very weights srpo builds for model.name=tiny, init_seed 0)."""
    if model == "smollm2":
        from srpo.models import smollm2_path

        return smollm2_path()
    folder = root / "_models" / "tiny"
    if not (folder / "config.json").is_file():
        from srpo.models import build_tiny_model

        tiny, tok = build_tiny_model("llama", tokenizer="smollm2", hidden_size=64, num_layers=2, seed=0)
        tiny.save_pretrained(folder)
        tok.save_pretrained(folder)
    return folder


def task_records(config: str, model: str, model_dir: Path) -> list[dict]:
    """The training pool of `config` as the peers get it: {task_id, answer, messages, text}, the
    chat of the workflow's first agent for the task (its system prompt, its template around the
    workflow's first prompt) and that chat rendered by the model's template (srpo's rendering)."""
    from transformers import AutoTokenizer

    from srpo.build import build_agents, build_workflow_from, load_tasks
    from srpo.config import load_config

    cfg = load_config(config, list(MODEL_OVERRIDES[model]), check_machine=False)
    workflow = build_workflow_from(cfg)
    agent = build_agents(cfg, workflow)[workflow.agents[0]]
    prompt = getattr(workflow, "prompt", None) or workflow.first_prompt  # single / debate
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    out = []
    for task in load_tasks(cfg.task, split="train"):
        messages = agent.messages(prompt.format(question=task.prompt))
        out.append({"task_id": task.task_id, "answer": str(task.answer), "messages": messages,
                    "text": tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)})
    return out


def run_peer(arm: Arm, args: argparse.Namespace, run_dir: Path) -> dict:
    """One peer run in its own environment; returns its record (peer.json)."""
    if not args.peer_python:
        raise SystemExit(f"--peer-python is required for {arm.side} (its environment: bash scripts/peer_envs.sh)")
    root = Path(args.root)
    model_dir = model_folder(args.model, root)
    tasks = run_dir / "tasks.json"
    tasks.write_text(json.dumps(task_records(arm.config, args.model, model_dir)))
    subprocess.run(peer_command(arm, args, model_dir, tasks, run_dir), check=True, env=child_env(args.threads))
    return json.loads((run_dir / "peer.json").read_text())


def peer_command(arm: Arm, args: argparse.Namespace, model_dir: Path, tasks: Path, run_dir: Path) -> list[str]:
    """The peer script's command line for one run (its own environment's python)."""
    return [args.peer_python, str(PEER_SCRIPTS[arm.side]), "--model", str(model_dir), "--tasks", str(tasks),
            "--out", str(run_dir), "--seed", str(args.seed), "--budget", str(args.budget),
            "--every", str(args.every), "--marks", args.marks, "--threads", str(args.threads),
            *(["--lr", str(args.lr)] if args.lr is not None else []), *PEER_MODEL_ARGS[args.model],
            *(PEER_TINY_EXTRA[arm.side] if args.model == "tiny" else ())]


def child_env(threads: int) -> dict:
    return {**os.environ, **OFFLINE, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def cmd_run(args: argparse.Namespace) -> None:
    arm = ARMS[args.arm]
    run_dir = Path(args.root) / args.arm / f"seed{args.seed}"
    if (run_dir / "record.json").exists():
        raise SystemExit(f"{run_dir}/record.json exists: this run is done (remove the folder to run it again)")
    run_dir.mkdir(parents=True, exist_ok=True)
    code = provenance()  # the code this run ran, taken when it starts
    result = run_srpo(arm, args, run_dir) if arm.side == "srpo" else run_peer(arm, args, run_dir)
    record = {"arm": args.arm, "side": arm.side, "seed": args.seed, "model": args.model,
              "budget_seconds": args.budget, "every_seconds": args.every, "threads": args.threads,
              "eval": {"config": arm.config, "overrides": list(MODEL_OVERRIDES[args.model])},
              "policies": list(arm.policies), **result, "wall_seconds": time.perf_counter() - STARTED, **code}
    (run_dir / "record.json").write_text(json.dumps(record, indent=1))
    print(f"{args.arm} seed {args.seed}: {record['steps']} steps, {record['train_seconds']:.1f} s training, "
          f"{len(record['marks'])} checkpoints, start-up {record['startup_seconds']:.1f} s -> {run_dir}")


# --------------------------------------------------------------------------- evaluate


def base_dir(root: Path, config: str) -> Path:
    """Where the base model's evaluation through `config` lives."""
    return root / "_base" / Path(config).with_suffix("").name


def scored(folder: Path) -> bool:
    """Whether the checkpoint (or base) in folder has its evaluation."""
    return (folder / "eval.json").is_file()


def eval_jobs(root: Path, done: bool = False) -> list[tuple[Path, str, list[str], dict[str, Path]]]:
    """(folder, config, overrides, adapters) of every evaluation not yet done (done=True: those
    done too): the base model once per evaluation config, and every checkpoint of every run."""
    jobs, bases = [], {}
    for record_path in sorted(root.glob("*/seed*/record.json")):
        record = json.loads(record_path.read_text())
        config, overrides = record["eval"]["config"], record["eval"]["overrides"]
        if bases.setdefault(base_dir(root, config), (config, overrides)) != (config, overrides):
            # one base evaluation per config: runs of one root share the model and task shape
            raise SystemExit(f"{record_path}: evaluated with {overrides}, another run of {config} under {root} "
                             f"with {bases[base_dir(root, config)][1]}: keep each --model in its own --root")
        for mark in record["marks"]:
            folder = record_path.parent / "ckpt" / mark["tag"]
            jobs.append((folder, config, overrides, {p: folder / p for p in record["policies"]}))
    jobs = [(folder, config, overrides, {}) for folder, (config, overrides) in bases.items()] + jobs
    return [job for job in jobs if done or not scored(job[0])]


def eval_command(config: str, overrides: list[str], adapters: dict[str, Path], threads: int, out: Path) -> list[str]:
    """`srpo eval` of `config` with the adapters loaded (none: the base model), greedy, the
    config's held-out problems (eval.size), written to out."""
    init = [f"policies.lora.init={json.dumps({p: str(f) for p, f in adapters.items()})}"] if adapters else []
    return [sys.executable, "-m", "srpo.cli", "eval", config, *overrides, *init, f"train.threads={threads}",
            "--out", str(out)]


def shard(jobs: list, spec: str | None) -> list:
    """The jobs of shard "K/N" (K in 1..N): every N-th job from the K-th, so N evaluators side by
    side split the work; None: all of them."""
    if spec is None:
        return jobs
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--shard must be K/N (e.g. 1/2), got {spec!r}") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {spec}: K must be in 1..N")
    return jobs[k - 1 :: n]


def cmd_evaluate(args: argparse.Namespace) -> None:
    root = Path(args.root)
    # shard the whole list, done jobs included, then skip the done ones: evaluators started at
    # different moments (one finishing a job before another starts) still split it without overlap
    jobs = [job for job in shard(eval_jobs(root, done=True), args.shard) if not scored(job[0])]
    print(f"{len(jobs)} evaluations to run under {root}" + (f" (shard {args.shard})" if args.shard else ""))
    for folder, config, overrides, adapters in jobs:
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        subprocess.run(eval_command(config, overrides, adapters, args.threads, folder / "eval.json"), check=True,
                       env=child_env(args.threads), cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        result = json.loads((folder / "eval.json").read_text())
        (folder / "eval_time.json").write_text(json.dumps({"wall_seconds": wall, "eval_seconds": result["seconds"]}))
        print(f"  {folder.relative_to(root)}: {100 * result['accuracy']:.1f}% of {result['n']} "
              f"({result['seconds']:.1f} s evaluating, {wall:.1f} s with start-up)", flush=True)


# --------------------------------------------------------------------------- analyze


def load_runs(root: Path) -> dict[str, list[dict]]:
    """arm -> its runs, each {seed, points: [(train_seconds, accuracy)] from t = 0 (the base
    model) on, checks: the times the run's checkpoints stand for (a "before" mark's nominal
    "at", else its own training seconds), end: the last of them, total: training seconds,
    startup, eval_seconds, agents_end: each agent's own held-out accuracy at the last checkpoint
    (eval.json's per_agent; None where it has none)}; only runs whose every checkpoint is scored."""
    runs: dict[str, list[dict]] = {}
    for record_path in sorted(root.glob("*/seed*/record.json")):
        record = json.loads(record_path.read_text())
        base = base_dir(root, record["eval"]["config"]) / "eval.json"
        folders = [record_path.parent / "ckpt" / m["tag"] for m in record["marks"]]
        if not base.is_file() or not all(scored(f) for f in folders):
            continue
        evals = [json.loads((f / "eval.json").read_text()) for f in folders]
        points = [(0.0, json.loads(base.read_text())["accuracy"])]
        points += [(m["train_seconds"], e["accuracy"]) for m, e in zip(record["marks"], evals)]
        eval_seconds = sum(json.loads((f / "eval_time.json").read_text())["eval_seconds"]
                           for f in folders if (f / "eval_time.json").is_file())
        agents_end = evals[-1].get("per_agent") if evals else None
        phases = record.get("phases")
        metrics = record_path.parent / "srpo_run" / "metrics.jsonl"
        if phases is None and record.get("side") == "srpo" and metrics.is_file():  # a run from before phases
            phases = srpo_phases(metrics, record["train_seconds"])
        checks = [m.get("at", m["train_seconds"]) for m in record["marks"]]
        runs.setdefault(record["arm"], []).append({
            "seed": record["seed"], "points": points, "checks": checks, "end": checks[-1] if checks else 0.0,
            "total": record["train_seconds"],
            "startup": record["startup_seconds"], "eval_seconds": eval_seconds, "steps": record["steps"],
            "phases": phases, "agents_end": agents_end})
    return runs


def value_at(points: list[tuple[float, float]], t: float) -> float:
    """a(t): the accuracy of the last checkpoint saved at or before training second t (a run
    has learned, by t, what its latest checkpoint holds)."""
    return [a for s, a in points if s <= t][-1]


def arm_end(runs: list[dict]) -> float:
    """T_arm: the training seconds every seed of the arm has a checkpoint for (the earliest
    last mark; a "before" mark stands for its nominal time), the end of its mean curve."""
    return min(r.get("end", r["points"][-1][0]) for r in runs)


def mean_curve(runs: list[dict]) -> list[tuple[float, float, float, float]]:
    """(t, mean, min, max) over seeds of a_s(t), at every checkpoint time t <= T_arm of any seed
    (the step function's corners): m(t) = (1/S) sum_s a_s(t)."""
    end = arm_end(runs)
    times = sorted({s for r in runs for s, _ in r["points"] if s <= end} | {end})
    out = []
    for t in times:
        values = [value_at(r["points"], t) for r in runs]
        out.append((t, statistics.fmean(values), min(values), max(values)))
    return out


def time_to_reach(runs: list[dict], target: float) -> float | None:
    """The first t of the mean curve with m(t) >= target (None: not within T_arm)."""
    return next((t for t, m, _, _ in mean_curve(runs) if m >= target - 1e-12), None)


def seed_times_to_reach(runs: list[dict], target: float) -> list[float | None]:
    """Per seed s, the first checkpoint time with a_s(t) >= target (None: never), in seed order."""
    return [next((t for t, a in r["points"] if a >= target - 1e-12), None) for r in runs]


def accuracy_at(runs: list[dict], t: float) -> float:
    """m(min(t, T_arm)): the mean curve at training second t (at its end if it ends earlier)."""
    t = min(t, arm_end(runs))
    return statistics.fmean(value_at(r["points"], t) for r in runs)


def equal_time_per_seed(peer_runs: list[dict], arm_runs: list[dict]) -> list[dict]:
    """Seed by seed (the same seed number on both sides), at every checkpoint time t of the
    peer's run after t = 0 and up to the end of both runs: is the arm's a_s(t) above, equal to or
    below the peer's a_s(t)? Per seed: {seed, ahead, tied, behind (counts), behind_at: [{t, arm,
    peer}] (where it is behind, both accuracies)}. With "before" marks the times are the nominal
    ones (60, 120, ... s), where each side holds the state it had."""
    arm_by_seed = {r["seed"]: r for r in arm_runs}
    out = []
    for peer in peer_runs:
        arm = arm_by_seed.get(peer["seed"])
        if arm is None:
            continue
        end = min(peer.get("end", peer["points"][-1][0]), arm.get("end", arm["points"][-1][0]))
        counts = {"ahead": 0, "tied": 0, "behind": 0}
        behind_at = []
        for t in peer.get("checks", [s for s, _ in peer["points"][1:]]):
            if t > end:
                break
            a_arm, a_peer = value_at(arm["points"], t), value_at(peer["points"], t)
            counts["ahead" if a_arm > a_peer else "tied" if a_arm == a_peer else "behind"] += 1
            if a_arm < a_peer:
                behind_at.append({"t": t, "arm": a_arm, "peer": a_peer})
        out.append({"seed": peer["seed"], **counts, "behind_at": behind_at})
    return out


def at_fixed_times(peer_runs: list[dict], arm_runs: list[dict], times=FIXED_TIMES) -> list[dict]:
    """At each fixed training second t that every run of both sides reaches: the seeds' a_s(t) on
    each side, their means, and the difference arm - peer with a Welch 95% interval (the two
    sides' seeds are independent runs, not pairs). {t, arm, peer, diff, ci_low, ci_high, p}."""
    from scipy import stats

    end = min(arm_end(peer_runs), arm_end(arm_runs))
    out = []
    for t in times:
        if t > end + 1e-9:
            break
        a = [value_at(r["points"], t) for r in arm_runs]
        b = [value_at(r["points"], t) for r in peer_runs]
        diff = statistics.fmean(a) - statistics.fmean(b)
        row = {"t": t, "arm": a, "peer": b, "diff": diff, "ci_low": None, "ci_high": None, "p": None}
        # Welch's test needs 2 seeds a side and some spread (all seeds equal on both sides: no interval)
        if len(a) > 1 and len(b) > 1 and statistics.variance(a) + statistics.variance(b) > 0:
            welch = stats.ttest_ind(a, b, equal_var=False)
            ci = welch.confidence_interval(0.95)
            row.update(ci_low=float(ci.low), ci_high=float(ci.high), p=float(welch.pvalue))
        out.append(row)
    return out


def compare(runs: dict[str, list[dict]], peer: str, arm: str) -> dict:
    """Against peer P: its best mean accuracy B = max_t m_P(t) (and when, t_B), the arm's time to
    reach B, and both means at P's total training time T_P = T_arm(P)."""
    curve = mean_curve(runs[peer])
    t_best, best = max(((t, m) for t, m, _, _ in curve), key=lambda x: (x[1], -x[0]))
    t_peer = arm_end(runs[peer])
    return {"peer": peer, "arm": arm, "peer_best": best, "peer_best_at": t_best, "peer_total": t_peer,
            "arm_reaches_best_at": time_to_reach(runs[arm], best),
            "arm_reaches_best_at_per_seed": seed_times_to_reach(runs[arm], best), "arm_total": arm_end(runs[arm]),
            "arm_at_peer_total": accuracy_at(runs[arm], t_peer), "peer_at_peer_total": accuracy_at(runs[peer], t_peer),
            "equal_time_per_seed": equal_time_per_seed(runs[peer], runs[arm]),
            "at_fixed_times": at_fixed_times(runs[peer], runs[arm]),
            "seeds": {"peer": len(runs[peer]), "arm": len(runs[arm])}}


# each side's phases (trl_peer.py, comlrl_peer.py, srpo_phases) in the table's three columns
PHASE_COLUMNS = {
    "rollout": ("rollout", "generation", "scoring", "rollout_rest", "old_logprobs", "sets_advantages"),
    "update": ("update", "forward", "backward", "backward_optimizer"),
    "other": ("other",),
}


def phase_means(runs: list[dict]) -> dict[str, float] | None:
    """An arm's seconds per phase, mean over its seeds (None when a run has no phase record)."""
    if any(r["phases"] is None for r in runs):
        return None
    names = sorted({p for r in runs for p in r["phases"]})
    return {p: statistics.fmean(r["phases"].get(p, 0.0) for r in runs) for p in names}


def lowest_agent_end(runs: list[dict]) -> list[float] | None:
    """Per run (seed order), the lowest of its agents' own held-out accuracies at its last
    checkpoint: where a vote's member falls apart from the vote (a debater the two others
    outvote). None unless every run has two or more agents scored."""
    if not runs or any(not r.get("agents_end") or len(r["agents_end"]) < 2 for r in runs):
        return None
    return [min(r["agents_end"].values()) for r in runs]


def analyze(root: Path) -> dict:
    """Every comparison whose peer and arm have scored runs, and each arm's times."""
    runs = load_runs(root)
    rows = [compare(runs, peer, arm) for peer, arms in COMPARISONS.items() if peer in runs
            for arm in arms if arm in runs]
    times = {arm: {"seeds": len(rs), "startup_mean": statistics.fmean(r["startup"] for r in rs),
                   "train_mean": statistics.fmean(r["total"] for r in rs),
                   "eval_seconds": sum(r["eval_seconds"] for r in rs),
                   "checkpoints": sum(len(r["points"]) - 1 for r in rs),
                   "steps_mean": statistics.fmean(r["steps"] for r in rs),
                   "phases": phase_means(rs), "lowest_agent_end": lowest_agent_end(rs)}
             for arm, rs in sorted(runs.items())}
    return {"comparisons": rows, "times": times,
            "curves": {arm: mean_curve(rs) for arm, rs in runs.items()}}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _sec(x: float | None) -> str:
    return "not reached" if x is None else f"{x:.0f} s"


def markdown(result: dict) -> str:
    """The comparison table and the times table."""
    lines = ["| peer | peer's best (at) | srpo arm | time to the peer's best | at the peer's total time "
             "(peer there) | at the peer's checkpoints, seed by seed: ahead / tied / behind |",
             "|---|---|---|---|---|---|"]
    for c in result["comparisons"]:
        short = " (arm ends earlier)" if c["arm_total"] < c["peer_total"] else ""
        seeds = ", ".join(f"{s['ahead']}/{s['tied']}/{s['behind']}" for s in c["equal_time_per_seed"]) or "-"
        lines.append(f"| {c['peer']} ({c['seeds']['peer']} seeds) | {_pct(c['peer_best'])} ({_sec(c['peer_best_at'])}) "
                     f"| {c['arm']} ({c['seeds']['arm']} seeds) | {_sec(c['arm_reaches_best_at'])} "
                     f"| {_pct(c['arm_at_peer_total'])} at {_sec(c['peer_total'])}{short} "
                     f"({_pct(c['peer_at_peer_total'])}) | {seeds} |")
    behind = [(c, s) for c in result["comparisons"] for s in c["equal_time_per_seed"] if s.get("behind_at")]
    if behind:  # where the equal-time half is lost, seed by seed
        lines += ["", "| peer | srpo arm | seed | behind at (training seconds: arm against peer) |",
                  "|---|---|---|---|"]
        for c, s in behind:
            lines.append(f"| {c['peer']} | {c['arm']} | {s['seed']} | " + ", ".join(
                f"{b['t']:.0f} s: {_pct(b['arm'])} against {_pct(b['peer'])}" for b in s["behind_at"]) + " |")
    lines += ["", "| peer | srpo arm | t | arm (mean of seeds) | peer | arm - peer [Welch 95% CI] | p |",
              "|---|---|---|---|---|---|---|"]
    for c in result["comparisons"]:
        for row in c.get("at_fixed_times", []):
            ci = "" if row["ci_low"] is None else f" [{100 * row['ci_low']:+.1f}, {100 * row['ci_high']:+.1f}]"
            p = "-" if row["p"] is None else f"{row['p']:.2g}"
            lines.append(f"| {c['peer']} | {c['arm']} | {row['t']:.0f} s | {_pct(statistics.fmean(row['arm']))} "
                         f"| {_pct(statistics.fmean(row['peer']))} | {100 * row['diff']:+.1f}{ci} | {p} |")
    lines += ["", "| arm | seeds | start-up (mean) | training (mean) | steps (mean) | checkpoints | evaluation (all) |",
              "|---|---|---|---|---|---|---|"]
    for arm, t in result["times"].items():
        lines.append(f"| {arm} | {t['seeds']} | {t['startup_mean']:.1f} s | {t['train_mean']:.1f} s | "
                     f"{t['steps_mean']:.1f} | {t['checkpoints']} | {t['eval_seconds']:.1f} s |")
    lines += ["", "| arm | rollout (generation, scoring, old log-probs, advantages) | update (forward, backward, "
              "optimizer) | other | the phases, mean seconds |", "|---|---|---|---|---|"]
    for arm, t in result["times"].items():
        phases = t.get("phases")
        if not phases:
            lines.append(f"| {arm} | - | - | - | no phase record |")
            continue
        total = t["train_mean"]
        cols = [sum(phases.get(p, 0.0) for p in names) for names in PHASE_COLUMNS.values()]
        detail = ", ".join(f"{p} {v:.1f}" for p, v in phases.items())
        lines.append(f"| {arm} | " + " | ".join(f"{c:.1f} s ({100 * c / total:.0f}%)" for c in cols)
                     + f" | {detail} |")
    lowest = {arm: t["lowest_agent_end"] for arm, t in result["times"].items() if t.get("lowest_agent_end")}
    if lowest:
        lines += ["", "| arm | the lowest agent's own held-out accuracy at the last checkpoint, per seed | mean |",
                  "|---|---|---|"]
        for arm, values in lowest.items():
            lines.append(f"| {arm} | {', '.join(_pct(v) for v in values)} | {_pct(statistics.fmean(values))} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Per peer, its mean curve and its arms' (steps: a run holds its last checkpoint's
    accuracy), each with the seeds' band (min to max over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [(peer, arms) for peer, arms in COMPARISONS.items() if peer in result["curves"]]
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(6.5 * max(1, len(groups)), 4.5), squeeze=False)
    for ax, (peer, arms) in zip(axes[0], groups):
        for arm in (peer, *arms):
            curve = result["curves"].get(arm)
            if not curve:
                continue
            t, mean, low, high = zip(*curve)
            line, = ax.step(t, [100 * m for m in mean], where="post", label=arm)
            ax.fill_between(t, [100 * v for v in low], [100 * v for v in high], step="post", alpha=0.2,
                            color=line.get_color())
        ax.set_xlabel("training seconds (evaluation and start-up excluded)")
        ax.set_ylabel("held-out accuracy, %")
        ax.set_title(f"against {peer}")
        ax.legend(fontsize=8)
    fig.suptitle("greedy held-out accuracy, mean of seeds (band: min to max over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_analyze(args: argparse.Namespace) -> None:
    root, out = Path(args.root), Path(args.out or args.root)
    out.mkdir(parents=True, exist_ok=True)
    result = analyze(root)
    (out / "analysis.json").write_text(json.dumps({**result, "written_by": provenance()}, indent=1))
    (out / "table.md").write_text(markdown(result))
    if result["curves"]:
        plot(result, out / "curves.png")
    print(markdown(result))
    png = f", {out / 'curves.png'}" if result["curves"] else ""
    print(f"written: {out / 'table.md'}, {out / 'analysis.json'}{png}")


def welch_one_sided(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """mean(a) - mean(b), its Welch 95% interval, and the one-sided p of 'a above b'."""
    from scipy import stats

    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    p = stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
    return statistics.fmean(a) - statistics.fmean(b), float(ci.low), float(ci.high), float(p)


# H3's two forms: what of the arm's runs is tested against the fixed baseline
H3_MEASURES = {
    # results/bench/time_to_accuracy_2026-12-07_consumed and _own: each run's lowest agent at the end
    "lowest-agent-end": "lowest debater at the end",
    # results/bench/time_to_accuracy_2026-12-08_2draws: each run's accuracy at 120 training seconds
    "at-120": "accuracy at 120 s",
}


def verdicts(analysis: dict, arm: str, h3_baseline: list[float], baseline_name: str,
             h3: str = "lowest-agent-end") -> list[str]:
    """The plans' H1-H3 (results/bench/time_to_accuracy_2026-12-07_consumed/PLAN.md and later):
    H1, H2 the arm's seeds against the peer's at 120 s and 300 s (`at_fixed_times`); H3 the arm's
    runs against a fixed baseline's (another session's arm), measured as `h3` says: each run's
    lowest agent at its last checkpoint (`lowest-agent-end`) or each run's accuracy at 120 s
    (`at-120`). One-sided Welch p, Holm over the three: supported when Holm p < 0.05 with the
    difference positive, refuted when the 95% interval lies wholly below 0, else undecided.
    Returns the printed lines."""
    from srpo_lab.stats import holm

    if h3 not in H3_MEASURES:
        raise ValueError(f"unknown H3 measure {h3!r}; known: {sorted(H3_MEASURES)}")
    comparison = next(c for c in analysis["comparisons"] if c["arm"] == arm)
    at = {row["t"]: row for row in comparison["at_fixed_times"]}
    measured = analysis["times"][arm]["lowest_agent_end"] if h3 == "lowest-agent-end" else at[120.0]["arm"]
    if measured is None or len(measured) != len(h3_baseline):
        raise ValueError(f"H3: {len(measured or [])} runs of {arm} against {len(h3_baseline)} baseline values; "
                         "the plan pairs them seed for seed in count")
    tests = {"H1": welch_one_sided(at[120.0]["arm"], at[120.0]["peer"]),
             "H2": welch_one_sided(at[300.0]["arm"], at[300.0]["peer"]),
             "H3": welch_one_sided(measured, h3_baseline)}
    adjusted = dict(zip(tests, holm([t[3] for t in tests.values()])))
    lines = []
    for name, (d, low, high, p) in tests.items():
        verdict = "supported" if adjusted[name] < 0.05 and d > 0 else "refuted" if high < 0 else "undecided"
        # three significant digits: a p of 0.0496 must not print as 0.050 beside "supported"
        lines.append(f"{name}: {100 * d:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] one-sided p {p:.3g} "
                     f"Holm {adjusted[name]:.3g}: {verdict}")
    lines.append(f"{H3_MEASURES[h3]}, seeds 0-{len(measured) - 1}: {[round(100 * x, 1) for x in measured]} "
                 f"{baseline_name}: {[round(100 * x, 1) for x in h3_baseline]}")
    return lines


def cmd_verdicts(args: argparse.Namespace) -> None:
    folder = Path(args.out)
    analysis = json.loads((folder / "analysis.json").read_text())
    baseline = [int(k) / args.heldout for k in args.h3_baseline.split(",")]
    lines = verdicts(analysis, args.arm, baseline, args.baseline_name, args.h3)
    (folder / "verdicts.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The subcommands run, evaluate, analyze and verdicts, with their options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one arm x seed x budget: its checkpoints and record.json")
    r.add_argument("--arm", required=True, choices=sorted(ARMS))
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--budget", type=float, default=600.0, help="training seconds")
    r.add_argument("--every", type=float, default=60.0, help="training seconds between checkpoints")
    r.add_argument("--marks", choices=MARK_MODES, default="after",
                   help="which step a checkpoint holds (benchmarks/tta/clock.py): the first to end past each "
                        "multiple of --every (after), or the last to end before it (before: a save every step)")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--model", choices=sorted(MODEL_OVERRIDES), default="smollm2")
    r.add_argument("--peer-python", help="the peer environment's python (trl_grpo, comlrl_magrpo)")
    r.add_argument("--lr", type=float, help="the learning rate, on any side (default: the side's own, 4e-4 "
                   "everywhere; srpo's train.lr, the peers' --lr); every record names the one it ran with")
    e = sub.add_parser("evaluate", help="score every checkpoint (and base) not yet scored")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--shard", help="K/N: only every N-th evaluation from the K-th (N evaluators side by side, "
                                   "--threads 1 each)")
    a = sub.add_parser("analyze", help="curves.png, table.md and analysis.json")
    a.add_argument("--out", help="folder for the outputs (default: --root)")
    for s in (r, e, a):
        s.add_argument("--root", default=DEFAULT_ROOT, help="where runs and evaluations live")
    v = sub.add_parser("verdicts", help="a plan's H1-H3 from --out's analysis.json, into its verdicts.txt")
    v.add_argument("--out", required=True, help="the results folder analyze wrote")
    v.add_argument("--arm", required=True, choices=sorted(ARMS))
    v.add_argument("--h3", choices=sorted(H3_MEASURES), default="lowest-agent-end",
                   help="what H3 tests of the arm's runs: the lowest agent at the end, or the accuracy at 120 s")
    v.add_argument("--h3-baseline", "--lowest-baseline", dest="h3_baseline", required=True,
                   help="H3's fixed baseline, per seed, problems right, comma-separated")
    v.add_argument("--baseline-name", required=True, help="what H3's baseline is, for the printed line")
    v.add_argument("--heldout", type=int, default=256, help="held-out problems the counts are out of")
    return p


def main(argv: list[str] | None = None) -> None:
    os.environ.update(OFFLINE)
    args = build_parser().parse_args(argv)
    {"run": cmd_run, "evaluate": cmd_evaluate, "analyze": cmd_analyze, "verdicts": cmd_verdicts}[args.command](args)


if __name__ == "__main__":
    main()
