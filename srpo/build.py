"""From a Config to running objects: models, policies, agents, backend (the one
rollout.backend names), runner, tasks.

    runner, workflow = build_rollout(cfg)            # loads the model(s)
    tasks = load_tasks(cfg.task, split="train", limit=8)   # from the task pack of task.name
    result = runner.run(tasks, workflow, group_size=cfg.group_size)
"""

from __future__ import annotations

from typing import Any

from srpo.config import Config, ConfigError, ModelConfig, PoliciesConfig, TaskConfig
from srpo.models.precision import TORCH_DTYPES, resolve_dtype
from srpo.packs import TaskPack, agent_defaults, get_pack, load_all_packs
from srpo.rollout.agents import AgentSpec, SamplingParams
from srpo.rollout.backends import get_backend
from srpo.rollout.policies import PolicySet
from srpo.rollout.runner import RolloutRunner
from srpo.types import Task
from srpo.workflows.base import Workflow
from srpo.workflows.registry import build_workflow


def build_model(cfg: ModelConfig, device: str = "cpu", key: str = "model.name", *,
                weights: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for a model section; nothing is downloaded. key: the section's
    name key, for messages (policies.models.<name>.name for a separate policy's model).
    weights: the dtype its weights are stored in ("bfloat16" only for a frozen LoRA base:
    trainable weights stay float32, srpo.models.precision)."""
    dtype = TORCH_DTYPES[weights]
    if cfg.name == "tiny":
        from srpo.models import build_tiny_model

        model, tok = build_tiny_model(
            cfg.arch, tokenizer=cfg.tokenizer, hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers, seed=cfg.init_seed, dtype=dtype,
        )
    elif cfg.name == "smollm2":
        from srpo.models import load_smollm2

        model, tok = load_smollm2(dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from srpo.models.tokenizers import set_pad_token_of_folder

        check_model_source(cfg, key)
        # the tokenizer first: a bad one fails before the weights are read
        tok = set_pad_token_of_folder(AutoTokenizer.from_pretrained(cfg.name, local_files_only=True))
        model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=dtype, local_files_only=True)
    if cfg.attn_implementation != "auto":
        try:
            model.set_attn_implementation(cfg.attn_implementation)
        except (ImportError, ValueError) as e:  # e.g. flash_attention_2 without its package or GPU
            raise ConfigError(f"model.attn_implementation {cfg.attn_implementation!r} cannot be "
                              f"used for {cfg.name!r} here: {e}") from e
    return model.to(device), tok


def check_model_source(cfg: ModelConfig, key: str = "model.name") -> None:
    """A model name is "tiny", "smollm2" or a local Hugging Face model folder (one holding
    config.json): nothing is downloaded, and a folder that is no model (`../../etc`) would
    otherwise fail deep in transformers with a message that never names the key."""
    from pathlib import Path

    if cfg.name in ("tiny", "smollm2"):
        return
    folder = Path(cfg.name)
    problem = ("is not a model folder (it has no config.json)" if folder.is_dir()
               else "is not a known model name nor an existing folder")
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"{key} {cfg.name!r} {problem}: it must be 'tiny', 'smollm2' or a local Hugging "
            f"Face model folder (config.json, weights, tokenizer; nothing is downloaded)"
        )


def build_policies(model_cfg: ModelConfig, cfg: PoliciesConfig, device: str = "cpu") -> PolicySet:
    """The policies of a config, computing in the precision model.dtype resolves to on `device`
    (srpo.models.precision): float32 weights for whatever trains; a LoRA base in bfloat16 when
    the compute is."""
    compute = resolve_dtype(model_cfg.dtype, device)
    if cfg.kind == "shared":
        model, tok = build_model(model_cfg, device)
        policies = PolicySet.shared(model, tok, name=cfg.names[0])
    elif cfg.kind == "separate":
        policies = PolicySet.separate(
            {n: build_model(cfg.models[n], device, f"policies.models.{n}.name") if n in cfg.models
             else build_model(model_cfg, device) for n in cfg.names}
        )
    else:
        model, tok = build_model(model_cfg, device, weights=compute)  # the frozen base
        lora = cfg.lora
        policies = PolicySet.lora(
            model, tok, cfg.names, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
            target_modules=lora.target_modules,
        )
        for name, folder in lora.init.items():
            policies.load_adapter(name, folder)
    policies.compute_dtype = compute
    return policies


def task_pack(cfg: Config | TaskConfig) -> TaskPack:
    """The task pack a config selects (task.name); loading it registers its workflows."""
    task = cfg.task if isinstance(cfg, Config) else cfg
    return get_pack(task.name)


def build_agents(cfg: Config, workflow: Workflow | None = None) -> dict[str, AgentSpec]:
    """Every agent the workflow may ask for, plus every configured one.

    An agent's fields come, lowest first, from the workflow's `default_agents`, the task pack's
    `agents` (its prompts for those roles) and the config's `agents.<name>` (field by field; a
    `sampling` mapping overlays the defaults' key by key). An agent whose policy is not given
    uses the policy "shared" when policies.names has it, else the only one there is (with
    several, the config must name it).
    workflow: default: the configured one.
    """
    if workflow is None:
        workflow = build_workflow_from(cfg)
    check_configured_agents(cfg, workflow)
    defaults = agent_defaults(workflow, task_pack(cfg))
    base = SamplingParams(**cfg.sampling.model_dump())
    agents = {}
    for name in dict.fromkeys([*defaults, *cfg.agents]):
        fields = dict(defaults.get(name, {}))
        sampling = dict(fields.pop("sampling", {}))
        configured = cfg.agents.get(name)
        if configured is not None:
            given = {k: getattr(configured, k)
                     for k in ("policy", "system_prompt", "template", "examples")}
            fields.update({k: v for k, v in given.items() if v is not None})
            if "examples" in fields:
                fields["examples"] = tuple(tuple(pair) for pair in fields["examples"])
            sampling.update(configured.sampling)
        policy = fields.pop("policy", None)
        if policy is None and "shared" in cfg.policies.names:
            policy = "shared"
        elif policy is None:
            if len(cfg.policies.names) != 1:
                raise ValueError(
                    f"agents.{name}.policy is not set and policies.names has several policies "
                    f"{cfg.policies.names}: say which one generates for agent {name!r}"
                )
            policy = cfg.policies.names[0]
        elif policy not in cfg.policies.names:
            raise ValueError(f"agents.{name}.policy: unknown policy {policy!r}; known policies "
                             f"(policies.names): {cfg.policies.names}")
        try:
            agents[name] = AgentSpec(name=name, policy=policy, sampling=base.replace(**sampling),
                                     **fields)
        except (TypeError, ValueError) as e:
            raise ValueError(f"agents.{name}: {e}") from e
    unknown = sorted(set(cfg.eval.temperatures) - set(agents))
    if unknown:  # before any model loads: the evaluation would refuse them later
        raise ValueError(f"eval.temperatures names {unknown}, not agents of this run (its agents: {sorted(agents)})")
    return agents


def check_configured_agents(cfg: Config, workflow: Workflow) -> None:
    """Every `agents.<name>` is a role some workflow declares: a misspelt one (`agents.solvr`)
    would otherwise be built, never asked for, and the role meant would run on its defaults.

    A role of another workflow is accepted (a preset may configure the roles of several
    workflows and be run with `--workflow`, as srpo/presets/search_smoke.yaml is); only a name that
    neither this workflow, any registered one (with its default params) nor the task pack's
    prompts know is refused."""
    declared = set(workflow.agents)
    extra = [name for name in cfg.agents if name not in declared]
    if not extra:
        return
    known = _known_roles(task_pack(cfg))
    unknown = [name for name in extra if name not in known]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"agents.{unknown[0]}: no workflow declares an agent {unknown[0]!r}; {hint}workflow "
            f"{workflow.name!r} declares {sorted(declared)} (roles of other workflows: "
            f"{sorted(known - declared)})"
        )


def _known_roles(pack: TaskPack) -> set[str]:
    """The roles of every registered workflow (default params) and of the pack's prompts."""
    from srpo.workflows.registry import list_workflows

    load_all_packs()  # their workflows join the registry
    roles = set(pack.agents)
    for name, _ in list_workflows():
        try:
            roles.update(build_workflow(name).agents)
        except (TypeError, ValueError):  # a workflow that needs params: its roles are the config's
            continue
    return roles


def build_reward(cfg: TaskConfig) -> Any:
    """The task pack's reward function for this task config."""
    return task_pack(cfg).make_reward(cfg)


def load_tasks(cfg: TaskConfig, *, split: str = "train", limit: int | None = None) -> list[Task]:
    """The first `limit` tasks (default: the whole split) of `split` ("train" | "heldout"),
    from the task pack cfg.name selects. A prefix is a prefix of the full split."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    size = cfg.train_size if split == "train" else cfg.heldout_size
    if limit is not None:
        if limit < 1:
            raise ValueError(f"the number of tasks must be >= 1, got {limit}")
        if limit > size:
            raise ValueError(
                f"asked for {limit} {split} tasks but task.{split}_size is {size}; raise it"
            )
        size = limit
    return task_pack(cfg).load_tasks(cfg, split, size)


def bind_environment(workflow: Workflow, cfg: Config) -> Workflow:
    """A workflow that defines `with_environment(env)` (the protocol's optional hook, e.g. the
    search workflows' retriever) gets the environment the task pack builds from the config."""
    bind = getattr(workflow, "with_environment", None)
    if bind is None:
        return workflow
    pack = task_pack(cfg)
    if pack.make_environment is None:
        providers = [p.name for p in load_all_packs() if p.make_environment is not None]
        raise ValueError(
            f"workflow {workflow.name!r} needs an environment, which task pack {pack.name!r} "
            f"(task.name) does not provide; packs that provide one: {providers}"
        )
    return bind(pack.make_environment(cfg.task))


def build_workflow_from(cfg: Config, name: str | None = None) -> Workflow:
    """The configured workflow; with `name` (e.g. the CLI's --workflow) that one instead, with
    the configured params only if it is the configured workflow."""
    task_pack(cfg)  # a pack given by file registers its workflows when it is loaded
    if name is None or name == cfg.workflow.name:
        return build_workflow(cfg.workflow.name, cfg.workflow.params)
    return build_workflow(name)


def build_backend(cfg: Config, policies: PolicySet) -> Any:
    """The generation backend rollout.backend names (srpo.rollout.backends), over
    these policies, built from the config (its own section rollout.<backend>)."""
    return get_backend(cfg.rollout.backend).build(cfg, policies)


def build_rollout(cfg: Config, *, workflow: str | None = None,
                  policies: PolicySet | None = None) -> tuple[RolloutRunner, Workflow]:
    """(runner, workflow) for a config. The workflow is built first so that a bad name fails
    before any model is loaded; `policies` reuses already loaded models (the trainer's)."""
    wf = bind_environment(build_workflow_from(cfg, workflow), cfg)
    agents = build_agents(cfg, wf)
    missing = sorted(set(wf.agents) - set(agents))
    if missing:
        raise ValueError(
            f"workflow {wf.name!r} needs agent(s) {missing}, which the config does not define; "
            f"configured agents: {sorted(agents)}"
        )
    if policies is None:
        policies = build_policies(cfg.model, cfg.policies, cfg.device)
    backend = build_backend(cfg, policies)
    pack = task_pack(cfg)
    runner = RolloutRunner(agents, backend, pack.make_reward(cfg.task), seed=cfg.seed,
                           answer_key=pack.answer_key,
                           overlong_penalty=cfg.train.overlong_penalty,
                           cut_answers=cfg.train.cut_answers,
                           unconsumed=cfg.train.unconsumed,
                           unconsumed_reward=cfg.train.unconsumed_reward)
    return runner, wf
