"""One srpo_sync training step of verl 0.9.1's own V1 trainer, driven on CPU, through Ray and a
real TransferQueue; the per-mini-batch gradient equals srpo's own set loss.

Runs for real (verl's code): Ray (local, 2 CPUs) and TransferQueue (controller + one storage
unit as Ray actors); AgentLoopWorkerTQ as a Ray actor (import verl there registers srpo's plugin
through the entry point) running SrpoWorkflowAgentLoop (parallel-3 + aggregator, srpo's math
reward, the srpo config file named by verl's agent-loop config file) and its
_agent_loop_postprocess into TransferQueue; verl's ReplayBuffer.sample; SrpoSyncTrainer's
__init__, _setup (its srpo part), _balance_batch (with verl's upsample_batch_to_divisible_size
padding rows), verl's own _compute_old_log_prob, _compute_advantage (srpo's hook around verl's),
_update_actor; the worker side (ActorRolloutRefWorker.update_actor / compute_log_prob ->
TrainingWorker.train_mini_batch / infer_batch -> BaseEngine.train_batch -> FSDPEngine's
forward_backward_batch with verl's make_iterator / prepare_micro_batches -> set_ppo_loss ->
verl's ppo_loss -> the registered srpo policy loss).

Faked (cpu_stack.py says why for each): the LLM server (a scripted server with verl's generate
signature), the model (a bigram LM in float64, no HF weights), the engine's model / ranks /
optimizer (BigramEngine: records each mini-batch's gradient instead of stepping), the worker
group (verl's WorkerGroup with in-process workers instead of GPU Ray actors; arguments still go
through ray.put), torch.distributed (one-process gloo group).

The reference is independent of verl: rows read back from TransferQueue, srpo's
set_relative_advantages on their set rewards, the bigram model's log-probs, and
srpo.setwise_policy_loss over exactly the sets of each optimizer mini-batch. A control with every
advantage scaled by 1.1 must fail the same comparison.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
import torch

# "verl.trainer": a submodule only the real verl package has
pytest.importorskip("verl.trainer")
ray = pytest.importorskip("ray")
tq = pytest.importorskip("transfer_queue")

import cpu_stack
import ray.cloudpickle
import verl_helpers
from cpu_stack import BigramLM, InProcessWorkerGroup, build_actor_workers, registered_bigram_engine
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils import tensordict_utils as tu
from verl_helpers import ScriptedServer, verl_config

import srpo
from srpo.integrations.verl import fields
from srpo.integrations.verl.episode import task_to_row
from srpo.integrations.verl.trainer import SrpoSyncTrainer
from srpo.models import build_byte_tokenizer
from srpo.types import Task

PROMPTS, SESSIONS, SOLVERS = 3, 4, 3  # 3 prompts x 4 sessions x (3 solvers + 1 aggregator) = 48 rows
CLIP_LOW, CLIP_HIGH = 0.01, 0.013  # verl_config's clip range
TOL = 1e-12  # float64 gradients; measured differences are ~1e-17


class MajorityScript:
    """The scripted LLM. The k-th call with a given solver prompt answers 4 when k is even, 5 when
    odd, so the 12 solver calls of a task give six 4s and six 5s whatever order the sessions run
    in; the aggregator answers its solutions' majority. A session's reward is 1 iff two of its
    three solvers said 4, so at most three of four sessions are right (that takes 8 fours) and at
    most three wrong: every prompt group has both rewards, hence non-zero advantages. Each reply
    ends in a few letters drawn from (prompt, k), so every row has its own response tokens (a
    bigram model would otherwise give rows of different prompts identical log-probs)."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def __call__(self, text: str) -> str:
        k = self.counts.get(text, 0)
        self.counts[text] = k + 1
        rng = random.Random(f"{text}#{k}")  # str seeds are stable across processes
        tail = " " + "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 10)))
        if "You compare" in text:
            fours, fives = text.count("boxed{4}"), text.count("boxed{5}")
            return ("so \\boxed{4}" if fours > fives else "so \\boxed{5}") + tail
        return ("I think \\boxed{4}" if k % 2 == 0 else "maybe \\boxed{5}") + tail


@dataclass
class Stack:
    tmp: str
    model_path: str
    agent_loop_path: str
    tokenizer: object
    agent_worker: object  # Ray actor handle of AgentLoopWorkerTQ


def _overrides(model_path: str, agent_loop_path: str) -> list[str]:
    """verl_config overrides shared by the agent-loop worker and every trainer."""
    return [
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.rollout.n={SESSIONS}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_path}",
        "data.max_prompt_length=1024",
        "data.max_response_length=64",
        "trainer.v1.trainer_mode=srpo_sync",
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Local Ray, TransferQueue, a one-process gloo group, the tiny model folder, the agent-loop
    config files and the agent-loop worker actor; all torn down after the module."""
    tmp = str(tmp_path_factory.mktemp("verl_cpu"))
    tok = build_byte_tokenizer()
    model_path = cpu_stack.write_tiny_model_folder(os.path.join(tmp, "model"), tok)
    srpo_cfg = os.path.join(tmp, "workflow.yaml")
    with open(srpo_cfg, "w") as f:
        f.write("agents:\n  solver: {system_prompt: 'Solve.'}\n"
                "  aggregator: {system_prompt: 'You compare solutions.'}\n"
                f"workflow: {{name: parallel, params: {{k: {SOLVERS}}}}}\nsampling: {{max_new_tokens: 32}}\n")
    agent_loop_path = os.path.join(tmp, "agent_loop.yaml")
    with open(agent_loop_path, "w") as f:  # as recipes/verl/agent_loop.yaml registers it
        f.write("- name: srpo_workflow\n"
                "  _target_: srpo.integrations.verl.agent_loop.SrpoWorkflowAgentLoop\n"
                f"  srpo_config: {srpo_cfg}\n")

    started_ray = not ray.is_initialized()
    if started_ray:  # HF_HUB_OFFLINE: the actor loads the model folder, never the hub
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"VERL_LOGGING_LEVEL": "WARN", "HF_HUB_OFFLINE": "1"}})
    started_pg = not torch.distributed.is_initialized()
    actor = None
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        if started_pg:
            torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
        # the scripted server and its script travel to the actor by value: the actor's process
        # cannot import the test directory
        ray.cloudpickle.register_pickle_by_value(verl_helpers)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        config = verl_config(*_overrides(model_path, agent_loop_path))
        server = ScriptedServer(tok, MajorityScript(), logprob=-0.5)
        # num_cpus=0: the 2 logical CPUs are held by the TransferQueue controller and storage unit
        actor = AgentLoopWorkerTQ.options(num_cpus=0).remote(config, server)
        ray.get(actor.__ray_ready__.remote())
        yield Stack(tmp=tmp, model_path=model_path, agent_loop_path=agent_loop_path, tokenizer=tok,
                    agent_worker=actor)
    finally:
        if actor is not None:
            ray.kill(actor)
        tq.close()
        if started_pg and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        if started_ray:
            ray.shutdown()


# --------------------------------------------------------------------------- the step

def _rollout(stack: Stack, global_steps: int) -> list[str]:
    """What PPOTrainer._next_train_batch / _submit_batch_to_rollout do: dataset rows (as
    recipes/verl/prepare_data.py writes them) with fresh uids, prompt tags in TransferQueue, then
    AgentLoopWorkerTQ.generate_sequences on the Ray actor; waits for every prompt to finish."""
    tasks = [Task(task_id=f"t{i}", prompt=f"Problem {i}: what is {i} + {4 - i}?", answer="4") for i in range(PROMPTS)]
    rows = [task_to_row(t, data_source="cpu_test", index=i) for i, t in enumerate(tasks)]
    batch = {k: np.array([r[k] for r in rows], dtype=object) for k in rows[0]}
    batch["raw_prompt"] = np.array([r["prompt"] for r in rows], dtype=object)
    batch["index"] = np.arange(len(rows))
    uids = [uuid.uuid4().hex for _ in rows]  # verl: str(uuid4()); '_' would break its keys
    batch["uid"] = np.array(uids, dtype=object)
    td = tu.get_tensordict(batch)
    tu.assign_non_tensor_data(td, "global_steps", global_steps)
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": global_steps} for _ in uids])
    ray.get(stack.agent_worker.generate_sequences.remote(td))
    deadline = time.time() + 60
    while True:
        tags = tq.kv_list("train")["train"]
        status = [tags[u]["status"] for u in uids]
        if all(s in ("finished", "failure") for s in status):
            break
        assert time.time() < deadline, f"rollout did not finish: {status}"
        time.sleep(0.05)
    assert status == ["finished"] * PROMPTS
    return uids


def _trainer(stack: Stack, *, dp: int, micro: int, mini_batches: int):
    config = verl_config(
        *_overrides(stack.model_path, stack.agent_loop_path),
        f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS // mini_batches}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
    )
    trainer = SrpoSyncTrainer(config)  # verl's PPOTrainer.__init__ (replay buffer, ...) for real
    trainer.tokenizer = stack.tokenizer
    trainer.global_steps = 1
    workers = build_actor_workers(config.actor_rollout_ref, dp)
    trainer.actor_rollout_wg = InProcessWorkerGroup(workers)
    # srpo's _setup on top of verl's: verl's part builds Ray resource pools (GPUs), so only it is
    # skipped; srpo's part installs set_ppo_loss on every worker through the worker group
    saved = PPOTrainer._setup
    PPOTrainer._setup = lambda self: None
    try:
        trainer._setup()
    finally:
        PPOTrainer._setup = saved
    return trainer, workers


@dataclass
class StepResult:
    rows: dict  # key -> row record read back from TransferQueue (real rows only)
    layout: object
    metrics: dict
    grads: list  # per optimizer mini-batch: the gradient averaged over ranks
    micro_batches: list  # per rank: what each micro-batch held
    W0: torch.Tensor
    W: torch.Tensor
    keys: list


def _run_step(stack: Stack, *, dp: int, micro: int, mini_batches: int, seed: int) -> StepResult:
    uids = _rollout(stack, global_steps=1)
    with registered_bigram_engine():
        cpu_stack.BigramEngine.vocab_size = len(stack.tokenizer)
        cpu_stack.BigramEngine.seed = seed
        trainer, workers = _trainer(stack, dp=dp, micro=micro, mini_batches=mini_batches)
    assert all(isinstance(w.actor.engine, cpu_stack.BigramEngine) for w in workers)
    assert all(w.actor.loss_fn.func.__name__ == "set_ppo_loss" for w in workers)
    metrics: dict = {}
    batch, _ = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=PROMPTS)
    assert {k.split("_")[0] for k in batch.keys} == set(uids)
    batch = trainer._balance_batch(batch, metrics)
    engines = [w.actor.engine for w in workers]
    W0 = engines[0].module.W.detach().clone()
    assert all(torch.equal(e.module.W, W0) for e in engines)  # every rank starts from the same W
    batch = trainer._compute_old_log_prob(batch, metrics)  # verl's, through the workers at W0
    batch = trainer._compute_advantage(batch, metrics)
    g = torch.Generator().manual_seed(seed + 1)
    # the policy moved since the rollout: set ratios leave the clip range (0.99, 1.013) for
    # about half the sets, so the comparison covers clipped (no gradient) and unclipped sets
    W = W0 + 0.2 * torch.randn(W0.shape, generator=g, dtype=W0.dtype)
    for e in engines:
        e.set_weights(W)
    batch = trainer._update_actor(batch, metrics)
    real = [k for k, t in zip(batch.keys, batch.tags) if not t.get("is_padding", False)]
    data = tq.kv_batch_get(keys=real, partition_id="train", select_fields=[
        "prompts", "responses", "response_mask", "loss_mask", "input_ids", "position_ids", "rm_scores",
        "extra_fields", "uid", "session_id", "old_log_probs", "advantages", fields.SET_INDEX])
    rows = {}
    for i, key in enumerate(real):
        ex = data["extra_fields"][i]
        rows[key] = {
            "prompt": data["prompts"][i].tolist(), "response": data["responses"][i].tolist(),
            "mask": data["response_mask"][i].tolist(), "loss_mask": data["loss_mask"][i].tolist(),
            "input_ids": data["input_ids"][i].tolist(), "position_ids": data["position_ids"][i].tolist(),
            "rm_scores": data["rm_scores"][i].tolist(), "extra": ex, "uid": str(data["uid"][i]),
            "session": int(data["session_id"][i]), "old": data["old_log_probs"][i],
            "adv": data["advantages"][i], "set_index": int(data[fields.SET_INDEX][i]),
            "id": (str(data["uid"][i]), int(data["session_id"][i]), int(ex[fields.SET]), int(ex[fields.MEMBER])),
        }
    k = trainer.srpo_layout.num_mini_batches
    assert all(len(e.step_grads) == k for e in engines)  # one optimizer step per mini-batch per rank
    grads = [sum(e.step_grads[j] for e in engines) / dp for j in range(k)]  # FSDP: mean over ranks
    result = StepResult(rows=rows, layout=trainer.srpo_layout, metrics=metrics, grads=grads,
                        micro_batches=[e.micro_batches for e in engines], W0=W0, W=W, keys=list(batch.keys))
    tq.kv_clear(keys=list(batch.keys), partition_id="train")
    return result


# --------------------------------------------------------------------------- the reference

def _set_key(row) -> tuple:
    return row["id"][:3]


def _reference_advantages(rows: dict) -> dict:
    """srpo.set_relative_advantages over the sets of the rows (grouped by prompt uid, std
    scale), as float32 like the verl estimator's output."""
    sets: dict = {}
    for r in rows.values():
        sets.setdefault(_set_key(r), (r["uid"], float(r["extra"][fields.SET_REWARD])))
    keys = sorted(sets)
    uids = sorted({u for u, _ in sets.values()})
    group = torch.tensor([uids.index(sets[s][0]) for s in keys])
    reward = torch.tensor([sets[s][1] for s in keys], dtype=torch.float64)
    adv = srpo.set_relative_advantages(reward, group).to(torch.float32).to(torch.float64)
    return dict(zip(keys, adv.tolist()))


def _reference_grad(rows: list, W: torch.Tensor, W0: torch.Tensor, adv: dict,
                    scale: float = 1.0) -> tuple[torch.Tensor, float]:
    """Gradient w.r.t. W of srpo.setwise_policy_loss over exactly these rows' sets (advantages
    times `scale`), and the share of those sets whose clip binds."""
    model0, model = BigramLM(W0.shape[0]), BigramLM(W.shape[0])
    with torch.no_grad():
        model0.W.copy_(W0)
        model.W.copy_(W)
    width = max(len(r["response"]) for r in rows)
    old = torch.zeros(len(rows), width, dtype=torch.float64)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    lps = []
    for i, r in enumerate(rows):
        n = len(r["response"])
        lps.append(model.response_log_probs(r["prompt"], r["response"]))
        with torch.no_grad():
            old[i, :n] = model0.response_log_probs(r["prompt"], r["response"])
        mask[i, :n] = torch.tensor(r["mask"], dtype=torch.bool)
    lp = torch.stack([torch.cat([x, torch.zeros(width - len(x), dtype=x.dtype)]) for x in lps])
    set_keys = sorted({_set_key(r) for r in rows})
    local = torch.tensor([set_keys.index(_set_key(r)) for r in rows])
    advantages = torch.tensor([adv[s] * scale for s in set_keys], dtype=torch.float64)
    loss, metrics = srpo.setwise_policy_loss(lp, old, mask, local, advantages, clip_low=CLIP_LOW, clip_high=CLIP_HIGH)
    (grad,) = torch.autograd.grad(loss, model.W)
    return grad, metrics["clip/all/frac"]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _assert_equal_grads(got: list, ref: list) -> None:
    for j, (a, b) in enumerate(zip(got, ref)):
        d = _max_diff(a, b)
        assert d <= TOL, f"mini-batch {j}: max |grad - srpo grad| = {d:.3e} > {TOL:.0e}"


# --------------------------------------------------------------------------- the test

REPORT: dict = {}


@pytest.mark.parametrize("dp,micro,mini_batches", [(2, 4, 1), (2, 5, 3), (4, 3, 1)])
def test_srpo_sync_step_on_cpu_equals_srpo_set_loss(stack, dp, micro, mini_batches):
    res = _run_step(stack, dp=dp, micro=micro, mini_batches=mini_batches, seed=dp * 10 + micro)
    rows = res.rows
    # --- the agent loop's rows, as verl's _agent_loop_postprocess stored them
    assert len(rows) == PROMPTS * SESSIONS * (SOLVERS + 1)
    sessions: dict = {}
    for key, r in rows.items():
        uid, session, index = key.rsplit("_", 2)
        assert (uid, int(session)) == (r["uid"], r["session"])
        sessions.setdefault((uid, int(session)), []).append((int(index), r))
    for members in sessions.values():
        members.sort(key=lambda x: x[0])
        ex = [r["extra"] for _, r in members]
        assert [(e[fields.SET], e[fields.SET_SIZE], e[fields.MEMBER], e[fields.EVENT]) for e in ex] == (
            [(0, SOLVERS, j, "solve") for j in range(SOLVERS)] + [(1, 1, 0, "aggregate")])
        reward = members[-1][1]["rm_scores"][-1]
        for _, r in members:  # verl copies the final output's reward to every output
            assert r["rm_scores"][-1] == reward == r["extra"][fields.SET_REWARD]
            assert r["input_ids"] == r["prompt"] + r["response"] and r["loss_mask"] == r["mask"]
            assert r["position_ids"] == list(range(len(r["input_ids"])))
    group_rewards = {}
    for (uid, _), members in sessions.items():
        group_rewards.setdefault(uid, set()).add(members[-1][1]["rm_scores"][-1])
    assert all(v == {0.0, 1.0} for v in group_rewards.values()), group_rewards

    # --- old log-probs (verl's _compute_old_log_prob through the workers) and advantages
    adv = _reference_advantages(rows)
    model0 = BigramLM(res.W0.shape[0])
    with torch.no_grad():
        model0.W.copy_(res.W0)
        for r in rows.values():
            ref_old = model0.response_log_probs(r["prompt"], r["response"])
            assert _max_diff(r["old"].to(torch.float64), ref_old) <= TOL
            n = len(r["response"])
            assert r["adv"].shape == (n,)
            assert torch.equal(r["adv"].to(torch.float64),
                               torch.tensor(r["mask"], dtype=torch.float64) * adv[_set_key(r)])
    assert any(a != 0.0 for a in adv.values())

    # --- the layout: padding only where slots are not full, and no set split by verl's cuts
    lay = res.layout
    assert res.metrics["srpo/layout/padding_rows"] == lay.num_padding
    pad_keys = [k for k in res.keys if k not in rows]
    assert len(pad_keys) == lay.num_padding and all(k.startswith("pad") for k in pad_keys)
    if micro == 5:
        assert lay.num_padding > 0  # 3+1+1 and 3+pad+pad slots of 5
    where: dict = {}
    seen = []
    for rank, mbs in enumerate(res.micro_batches):
        assert len(mbs) == lay.num_mini_batches * lay.slots_per_rank
        for n_mb, mb in enumerate(mbs):
            assert len(mb["rows"]) == micro
            for rid in mb["rows"]:
                if rid is not None:
                    seen.append(rid)
                    s = rid[:3]
                    assert where.setdefault(s, (rank, n_mb, mb["step"])) == (rank, n_mb, mb["step"]), f"set {s} split"
    assert sorted(seen) == sorted(r["id"] for r in rows.values())  # every row trained once
    assert set(where) == set(adv)
    step_of_group: dict = {}
    for s, (_, _, step) in where.items():
        assert step_of_group.setdefault(s[0], step) == step, "a prompt group spans two mini-batches"

    # --- the gradient of each optimizer mini-batch equals srpo's set loss over its sets
    by_step = [[r for r in rows.values() if where[_set_key(r)][2] == j] for j in range(lay.num_mini_batches)]
    assert all(by_step)
    ref, clip_fracs = zip(*[_reference_grad(rs, res.W, res.W0, adv) for rs in by_step])
    assert all(float(g.abs().max()) > 1e-6 for g in ref)
    diffs = [_max_diff(a, b) for a, b in zip(res.grads, ref)]
    _assert_equal_grads(res.grads, ref)
    assert all(0.0 < frac < 1.0 for frac in clip_fracs)  # some sets clipped (no gradient), some not
    # the set loss ran on the workers and its metrics reached the trainer, named as verl's own
    # trainer names them (one "actor/" prefix). Their values are not compared: each simulated
    # rank all-gathers metrics over a one-process group, so they cover rank 0 only.
    assert "actor/pg_loss" in res.metrics and not any(k.startswith("actor/actor/") for k in res.metrics)
    assert "actor/srpo/clip/all/frac" in res.metrics and "actor/srpo/ratio/k3/mean" in res.metrics

    # --- negative control: every advantage x 1.1 must fail the same comparison
    bad = [_reference_grad(rs, res.W, res.W0, adv, scale=1.1)[0] for rs in by_step]
    with pytest.raises(AssertionError, match="max \\|grad - srpo grad\\|"):
        _assert_equal_grads(res.grads, bad)
    REPORT[(dp, micro, mini_batches)] = {
        "max_grad_diff": max(diffs),
        "control_diff": max(_max_diff(a, b) for a, b in zip(res.grads, bad)),
        "grad_scale": max(float(g.abs().max()) for g in ref),
        "padding_rows": lay.num_padding,
        "mini_batches": lay.num_mini_batches,
    }
    print(f"\n[dp={dp} micro={micro} k={mini_batches}] {REPORT[(dp, micro, mini_batches)]}")


def test_srpo_plugin_registered_in_the_ray_worker(stack):
    """The Ray actor imported verl, and verl loaded srpo's plugin through the entry point."""

    def registered(_self):
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
        from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

        return (
            "srpo" in ADV_ESTIMATOR_REGISTRY,
            "srpo" in POLICY_LOSS_REGISTRY,
            get_trainer_cls("srpo_sync").__name__,
            os.getpid(),
        )

    adv, loss, trainer_cls, pid = ray.get(stack.agent_worker.__ray_call__.remote(registered))
    assert (adv, loss, trainer_cls) == (True, True, "SrpoSyncTrainer") and pid != os.getpid()
