"""verl 0.9.1's own actor worker stack on one CPU, for tests/verl_integration/test_verl_trainer_on_cpu.py.

verl 0.9.1 cannot run a training step on a CPU: it has no CPU platform (it falls back to
"nvidia", so `get_device_name()` is "cuda" here), its training engines are registered for
cuda / npu only, RayWorkerGroup asks Ray for GPUs, and its rollout servers are vLLM / SGLang /
TRT-LLM. This module supplies the few stand-ins that let verl's own code run around them:

real (verl's code, unchanged):
    ActorRolloutRefWorker.__init__ / init_model / set_loss_fn / compute_log_prob / update_actor,
    TrainingWorker.__init__ / reset / train_mini_batch / train_batch / infer_batch,
    BaseEngine.train_batch / infer_batch, FSDPEngine.forward_backward_batch (verl's micro-batch
    loop: prepare_micro_batches, one backward per micro-batch, postprocess_batch_func), the
    engine's train/eval mode contexts, the `register` / tqbridge decorators (KVBatchMeta <->
    TensorDict through the real TransferQueue), WorkerGroup._bind_worker_method and Ray's
    func_generator, the nd-compute dispatch / collect functions (KVBatchMeta.chunk per dp rank,
    ray.put of each rank's share), EngineRegistry, HFModelConfig.

stand-ins (and why):
    write_tiny_model_folder
                     a model folder with a 1-layer Qwen2 config.json and srpo's byte tokenizer,
                     no weights: HFModelConfig (tokenizer, hf_config) loads from it offline.
    BigramLM         the "model": log p(x_{t+1} | x_t) = log_softmax(W[x_t]), W a V x V float64
                     parameter; log-probs over prompt+response tokens in verl's no-padding
                     layout (position t holds the label x_{t+1}, rolled as verl does). A real
                     differentiable model whose gradient mixes all rows, so any misplaced row,
                     advantage or normalizer changes it.
    BigramEngine     a subclass of verl's FSDPEngine registered in verl's EngineRegistry for
                     (language_model, fsdp, device "cpu"), a slot verl 0.9.1 leaves empty
                     (VERL_ENGINE_DEVICE=cpu selects it). It keeps FSDPEngine's own
                     forward_backward_batch and mode contexts and replaces what needs a GPU
                     or a sharded HF module: __init__/initialize (BigramLM instead of FSDP),
                     forward_step (BigramLM's log-probs instead of the HF forward; same output
                     dict and loss call as FSDPEngineWithLMHead.forward_step), the dp rank /
                     size (each in-process worker is one simulated rank; torch.distributed is a
                     one-process gloo group), optimizer_step (records the mini-batch's gradient
                     and does not change W, so every mini-batch and rank is taken at the same
                     W and a reference can be computed; FSDP would average gradients over ranks
                     and step), no-sync, offload; and, while its forward_backward_batch runs,
                     the get_device_id of verl's fsdp module answers "cpu" (verl would ask
                     torch.cuda for the current device).
    InProcessWorkerGroup
                     verl's WorkerGroup with the workers as objects in this process instead of
                     Ray actors on GPUs (RayWorkerGroup needs GPU resources): verl's own
                     func_generator and dispatch/collect functions run; each call's arguments go
                     through ray.put / ray.get as they would to a Ray actor, and results come
                     back through ray.put, so what crosses the boundary must serialize.
    cpu_rank_env     the env vars (RANK, WORLD_SIZE, MASTER_*) Ray would give each worker.
    worker.actor.device_name = "cpu": TrainingWorker sets it from get_device_name(), "cuda" on
                     a machine without a GPU (verl's platform fallback), and uses it for one
                     torch.tensor(loss list, device=...) in _postprocess_output; and
    worker.actor.flops_counter = None: the MFU metric asks torch.cuda for the GPU's peak FLOPs.

What this does NOT exercise: FSDP sharding and its gradient all-reduce over ranks (the test
averages the simulated ranks' gradients itself, as FSDP would), NCCL, the HF model forward, a
real optimizer step, the training workers as Ray actors (RayWorkerGroup), metrics all-gathered
over real ranks (each simulated rank gathers over a one-process group), GPU memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import ray
import torch
import verl.workers.engine.fsdp.transformer_impl as fsdp_impl
from torch import nn
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.base import func_generator
from verl.utils import tensordict_utils as tu
from verl.workers.engine import EngineRegistry
from verl.workers.engine.base import BaseEngineCtx
from verl.workers.engine.utils import detach_tree

MODEL_TYPE, BACKEND, DEVICE = "language_model", "fsdp", "cpu"


# --------------------------------------------------------------------------- model folder

def write_tiny_model_folder(path: str, tokenizer: Any) -> str:
    """A model folder HFModelConfig can load offline: the tokenizer and a 1-layer Qwen2 config
    (no weights; BigramEngine does not build the HF model)."""
    from transformers import Qwen2Config

    os.makedirs(path, exist_ok=True)
    tokenizer.save_pretrained(path)
    Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(path)
    return path


# --------------------------------------------------------------------------- model

class BigramLM(nn.Module):
    """log p(x_{t+1} | x_t) = log_softmax(W[x_t])[x_{t+1}], W: [V, V] float64."""

    def __init__(self, vocab_size: int, seed: int = 0, scale: float = 0.5):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = nn.Parameter(scale * torch.randn(vocab_size, vocab_size, generator=g, dtype=torch.float64))

    def sequence_log_probs(self, ids: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position t of one sequence: log-prob of the next token (the label rolled by one,
        as verl's engines roll input_ids; the last position's label wraps) and the entropy."""
        logp = torch.log_softmax(self.W[ids] / temperature, dim=-1)
        labels = torch.roll(ids, shifts=-1)
        lp = logp.gather(1, labels.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        return lp, entropy

    def response_log_probs(self, prompt: list[int], response: list[int]) -> torch.Tensor:
        """Log-probs of the response tokens given everything before them (the reference)."""
        ids = torch.tensor(list(prompt) + list(response), dtype=torch.long)
        lp, _ = self.sequence_log_probs(ids)
        return lp[len(prompt) - 1: len(prompt) - 1 + len(response)]


# --------------------------------------------------------------------------- engine

class BigramEngine(fsdp_impl.FSDPEngine):
    """verl's FSDPEngine with the model, ranks and optimizer replaced (module doc). Every engine
    instance builds the same W (same seed), as every FSDP rank loads the same checkpoint."""

    vocab_size: int = 0  # set by the test before the workers are built
    seed: int = 0

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config, **kwargs):
        self.model_config = model_config
        self.engine_config = engine_config
        self.optimizer_config = optimizer_config
        self.checkpoint_config = checkpoint_config
        self.mode = None
        self.rank = int(os.environ["RANK"])  # one simulated dp rank per in-process worker
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.ulysses_sequence_parallel_size = 1
        self.ulysses_device_mesh = None
        self.ulysses_parallel_group = None
        self.use_ulysses_sp = False
        self.pad_to_length = False
        self._is_offload_param = False
        self._is_offload_optimizer = False
        self.module: BigramLM | None = None
        self.step_grads: list[torch.Tensor] = []  # one per optimizer step (mini-batch)
        self.micro_batches: list[dict] = []  # what each trained micro-batch held

    # --- building and state
    def initialize(self):
        self.module = BigramLM(self.vocab_size, seed=self.seed)

    def set_weights(self, W: torch.Tensor) -> None:
        with torch.no_grad():
            self.module.W.copy_(W)

    def is_mp_src_rank_with_outputs(self):
        return True

    def get_data_parallel_rank(self):
        return self.rank

    def get_data_parallel_size(self):
        return self.world_size

    def get_data_parallel_group(self):
        # the one-process gloo group: FSDPEngine.forward_backward_batch all-reduces the token
        # count over it (a sum over this rank only; the set loss does not use it)
        return torch.distributed.group.WORLD

    @contextlib.contextmanager
    def _gradient_sync_context(self, *, is_last_micro_batch: bool):
        yield  # FSDP's no_sync only defers communication; there is none here

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True):
        pass

    def train_mode(self, **kwargs):
        return _ModeCtx(self, "train", **kwargs)

    def eval_mode(self, **kwargs):
        return _ModeCtx(self, "eval", **kwargs)

    # --- optimizer: record, do not step
    def optimizer_zero_grad(self):
        self.module.W.grad = None

    def optimizer_step(self):
        g = self.module.W.grad
        g = torch.zeros_like(self.module.W) if g is None else g.detach().clone()
        self.step_grads.append(g)
        return torch.linalg.vector_norm(g)

    def lr_scheduler_step(self):
        return 0.0

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        """FSDPEngine's own loop, with its module's get_device_id answering "cpu" meanwhile:
        it moves the token count there, and verl's platform fallback would ask torch.cuda."""
        saved = fsdp_impl.get_device_id
        fsdp_impl.get_device_id = lambda: "cpu"
        try:
            return super().forward_backward_batch(data, loss_function, forward_only=forward_only)
        finally:
            fsdp_impl.get_device_id = saved

    # --- forward (mirrors FSDPEngineWithLMHead.forward_step's contract)
    def forward_step(self, micro_batch, loss_function, forward_only):
        temperature = float(tu.get_non_tensor_data(data=micro_batch, key="temperature", default=1.0))
        calculate_entropy = bool(tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False))
        lps, ents = [], []
        for ids in micro_batch["input_ids"].unbind():
            lp, ent = self.module.sequence_log_probs(ids, temperature)
            lps.append(lp)
            ents.append(ent)
        model_output = {"log_probs": torch.nested.as_nested_tensor(lps, layout=torch.jagged)}
        if calculate_entropy:
            model_output["entropy"] = torch.nested.as_nested_tensor(ents, layout=torch.jagged)
        if not forward_only:
            self.micro_batches.append({
                "step": len(self.step_grads),
                "rows": row_ids(micro_batch),
                "set_index": micro_batch["srpo_set_index"].tolist(),
            })
        if loss_function is not None:
            loss, metrics = loss_function(model_output=model_output, data=micro_batch,
                                          dp_group=self.get_data_parallel_group())
        else:
            loss, metrics = torch.tensor(1.0), {}
        return loss, {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}


class _ModeCtx(BaseEngineCtx):
    """verl's BaseEngineCtx (offload decisions) plus module.train()/eval(); FSDP's contexts add
    Ulysses groups and resharding, which a one-process module does not have."""

    def __enter__(self):
        super().__enter__()
        getattr(self.engine.module, self.mode)()

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self.mode == "train" and (self.zero_grad_on_exit or exc_type is not None):
            self.engine.optimizer_zero_grad()
        super().__exit__(exc_type, exc_val, exc_tb)


def row_ids(td) -> list[tuple]:
    """(uid, session_id, srpo_set, srpo_member) of each row of a worker TensorDict; padding rows
    (srpo_set_index -1) give None."""
    uids = _listed(td["uid"])
    sessions = _listed(td["session_id"])
    extras = _listed(td["extra_fields"])
    set_index = td["srpo_set_index"].tolist() if "srpo_set_index" in td else [0] * len(uids)
    out = []
    for u, s, e, si in zip(uids, sessions, extras, set_index):
        out.append(None if si < 0 else (str(u), int(s), int(e["srpo_set"]), int(e["srpo_member"])))
    return out


def _listed(v) -> list:
    if hasattr(v, "tolist"):
        v = v.tolist()
    return list(v)


@contextlib.contextmanager
def registered_bigram_engine() -> Iterator[None]:
    """Registers BigramEngine for (language_model, fsdp, cpu) and selects device cpu for engine
    lookup (VERL_ENGINE_DEVICE, verl's own override); both undone on exit."""
    EngineRegistry.register(model_type=MODEL_TYPE, backend=BACKEND, device=DEVICE)(BigramEngine)
    old = os.environ.get("VERL_ENGINE_DEVICE")
    os.environ["VERL_ENGINE_DEVICE"] = DEVICE
    try:
        yield
    finally:
        EngineRegistry._engines[MODEL_TYPE][BACKEND].pop(DEVICE, None)
        if old is None:
            os.environ.pop("VERL_ENGINE_DEVICE", None)
        else:
            os.environ["VERL_ENGINE_DEVICE"] = old


# --------------------------------------------------------------------------- workers

_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "REDIS_STORE_SERVER_HOST")


@contextlib.contextmanager
def cpu_rank_env(rank: int, world_size: int) -> Iterator[None]:
    """The env vars verl's Worker.__init__ reads (Ray sets them per worker); restored on exit."""
    saved = {k: os.environ.get(k) for k in _RANK_ENV}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_actor_workers(actor_rollout_ref_config, dp_size: int) -> list:
    """dp_size of verl's ActorRolloutRefWorker(role="actor"), each through verl's own __init__ and
    init_model (the actor's TrainingWorker with the engine EngineRegistry picks for cpu)."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    workers = []
    for rank in range(dp_size):
        with cpu_rank_env(rank, dp_size):
            w = ActorRolloutRefWorker(config=actor_rollout_ref_config, role="actor")
            w.init_model()
        w.actor.device_name = "cpu"  # get_device_name() is "cuda" without a GPU (module doc)
        w.actor.flops_counter = None  # the MFU estimate asks torch.cuda for the GPU's peak FLOPs
        workers.append(w)
    return workers


class InProcessWorkerGroup(WorkerGroup):
    """verl's WorkerGroup over in-process workers (module doc): the methods bound are the
    workers' @register methods, with verl's dispatch / collect functions and Ray's func_generator."""

    def __init__(self, workers: list):
        super().__init__(resource_pool=None)
        self._workers = list(workers)
        self._bind_worker_method(type(self._workers[0]), func_generator)

    def _is_worker_alive(self, worker):
        return True

    def execute_all(self, method_name: str, *args, **kwargs):
        # RayWorkerGroup.execute_all_async: list arguments of world_size entries are per worker
        n = len(self._workers)
        per_worker = all(isinstance(a, list) and len(a) == n for a in args) and all(
            isinstance(v, list) and len(v) == n for v in kwargs.values())
        out = []
        for i, worker in enumerate(self._workers):
            a = [a[i] for a in args] if per_worker else list(args)
            k = {key: v[i] for key, v in kwargs.items()} if per_worker else dict(kwargs)
            # what a Ray actor call does to its arguments: serialize, resolve ObjectRefs
            a = [_through_ray(x) for x in a]
            k = {key: _through_ray(v) for key, v in k.items()}
            out.append(ray.put(getattr(worker, method_name)(*a, **k)))
        return out

    def execute_rank_zero(self, method_name: str, *args, **kwargs):
        return self.execute_all(method_name, *args, **kwargs)[:1]


def _through_ray(x):
    return ray.get(x) if isinstance(x, ray.ObjectRef) else ray.get(ray.put(x))
