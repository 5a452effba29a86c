"""SRPOTrainer: srpo's trainer in the shape of TRL's GRPOTrainer.

    trainer = SRPOTrainer(model="smollm2", workflow="debate", reward_funcs=correct,
                          train_dataset=rows, eval_dataset=heldout, method="srpo",
                          args=SRPOConfig(steps=20, lora=True, output_dir="runs/debate"))
    result = trainer.train()     # TrainResult: run_dir, steps_done, before, after, history

Everything becomes one srpo Config (`trainer.config`, written to RUN/config.yaml), run by
srpo.train.trainer.Trainer exactly as `srpo train` runs a config file: the arguments only
choose its keys (model.*, workflow.*, task.*, train.method, and SRPOConfig's fields) and, for
Python objects, register them where the config can name them (a workflow class or instance in
the workflow registry, the datasets and reward functions as a task pack). Every argument is
checked here, before any model is loaded; train() loads and trains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from srpo.api.args import (
    ConfigDraft,
    SRPOConfig,
    apply_config_overrides,
    apply_fields,
    base_config,
    check_args,
)
from srpo.api.model import is_model_object, model_name, model_policies, model_record
from srpo.api.rewards import reward_functions
from srpo.api.tasks import dataset_pack, dataset_row, dataset_tasks, pack_task_row, with_reward
from srpo.api.workflow import WorkflowChoice, workflow_choice
from srpo.config import Config
from srpo.objective.methods import METHODS
from srpo.packs import TaskPack, agent_defaults, get_pack, register_pack
from srpo.train.trainer import Trainer, TrainResult


class SRPOTrainer:
    """Train a multi-agent workflow with SRPO (or a baseline method) from Python objects.

    model: "tiny" | "smollm2" | a local Hugging Face model folder | a transformers
        PreTrainedModel (with processing_class= its tokenizer). None: the base config's model.
    reward_funcs: one reward function, a list (summed, weighted by args.reward_weights) or
        {component name: function}; the two signatures are srpo.api.rewards'. Required with
        a dataset; None otherwise: the config's task pack's own reward.
    args: an SRPOConfig (or a srpo Config). None: srpo's defaults.
    train_dataset / eval_dataset: rows (a list of dicts or a datasets.Dataset) with a prompt
        and an answer (srpo.api.tasks). None: the tasks of the config's task pack.
    processing_class / tokenizer: the tokenizer of a model object (TRL's two names for it).
    workflow: a registered name ("single", "parallel", "debate", ...; `srpo workflows`), a
        Workflow class or an instance (srpo.api.workflow). None: the base config's workflow.
    workflow_params: the workflow's parameters (with a name or a class).
    method: a method of srpo.objective.methods.METHODS ("srpo", "grpo", "dapo", ...), as
        args.method (give it in one of the two). None: the base config's ("srpo").
    answer_key: with a dataset, (text) -> the final answer a text states, normalized, or None:
        what majority votes compare (debate, voting); default: the whole text.
    """

    def __init__(self, model: Any = None, reward_funcs: Any = None,
                 args: SRPOConfig | Config | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, *, workflow: Any = None,
                 workflow_params: Mapping[str, Any] | None = None, method: str | None = None,
                 tokenizer: Any = None, answer_key: Callable[[str], str | None] | None = None):
        self.args = args = check_args(args)
        draft = ConfigDraft(base_config(args.config))
        apply_fields(draft, args)
        if method is not None:
            if method not in METHODS:
                raise ValueError(f"method: unknown method {method!r}; known methods: {sorted(METHODS)}")
            draft.set("train.method", method, "method")
        self._workflow = self._choose_workflow(draft, workflow, workflow_params)
        self._pack = self._task_pack(draft, reward_funcs, train_dataset, eval_dataset, answer_key)
        if self._workflow is not None:
            self._define_roles(draft, self._workflow.build())
        self._model, self._tokenizer = self._choose_model(draft, model, processing_class, tokenizer)
        apply_config_overrides(draft, args.overrides)
        self.config: Config = draft.build()  # what train() runs (RUN/config.yaml)

    # ------------------------------------------------------------------ one argument each

    @staticmethod
    def _choose_workflow(draft: ConfigDraft, workflow: Any,
                         params: Mapping[str, Any] | None) -> WorkflowChoice | None:
        if workflow is None and params is None:
            return None  # the base config's workflow, as it is
        if workflow is None:  # params for the base config's workflow
            workflow = draft.data["workflow"]["name"]
        choice = workflow_choice(workflow, params)
        choice.build()  # an unknown name or parameter fails now, naming the argument
        draft.set("workflow", {"name": choice.name, "params": choice.params}, "workflow")
        return choice

    def _task_pack(self, draft: ConfigDraft, reward_funcs: Any, train_dataset: Any,
                   eval_dataset: Any, answer_key: Any) -> TaskPack | None:
        """The task pack the arguments make (registered), with the config's task section set."""
        weights = self.args.reward_weights
        if reward_funcs is None and weights is not None:
            raise ValueError("args.reward_weights needs reward_funcs (one weight per function)")
        if answer_key is not None and (train_dataset is None or not callable(answer_key)):
            raise ValueError("answer_key: a callable (text) -> answer, only with a train_dataset "
                             "(a config's task pack has its own)")
        if train_dataset is None and eval_dataset is not None:
            raise ValueError("eval_dataset needs a train_dataset (or neither: the config's task pack)")
        if train_dataset is None:
            if reward_funcs is None:
                return None  # the config's task pack, as it is
            reward = reward_functions(reward_funcs, weights, pack_task_row)
            pack = register_pack(with_reward(get_pack(draft.data["task"]["name"]), reward))
            draft.set("task.name", pack.name, "reward_funcs")
            draft.reset("eval.success_component", None)  # the new reward's first component
            return pack
        if reward_funcs is None:
            raise ValueError("reward_funcs: tasks given as train_dataset need a reward function, "
                             "e.g. def reward(completion: str, task: dict) -> float")
        train = dataset_tasks(train_dataset, "train_dataset", "train")
        heldout = dataset_tasks(eval_dataset, "eval_dataset", "eval") if eval_dataset is not None else []
        reward = reward_functions(reward_funcs, weights, dataset_row)
        pack = register_pack(dataset_pack(train, heldout, reward, answer_key))
        split_seed = draft.data["task"].get("seed", 0)
        draft.set("task", {"name": pack.name, "train_size": len(train),
                           "heldout_size": len(heldout), "seed": split_seed}, "train_dataset")
        draft.reset("eval.success_component", None)
        if not heldout:
            if self.args.eval_size:
                raise ValueError(f"args.eval_size ({self.args.eval_size}) needs an eval_dataset")
            if self.args.eval_size is None:
                draft.set("eval.size", 0, "eval_dataset")  # no held-out tasks: no evaluation
        return pack

    def _define_roles(self, draft: ConfigDraft, workflow: Any) -> None:
        """Every role the workflow declares exists: one that neither the workflow's
        `default_agents`, the task pack's prompts nor the config define gets the plain defaults
        (no system turn, the template "{input}"), as a config would with `agents.<role>: {}`."""
        pack = self._pack or get_pack(draft.data["task"]["name"])
        defined = {*agent_defaults(workflow, pack), *draft.data.get("agents", {})}
        for role in workflow.agents:
            if role not in defined:
                draft.reset(f"agents.{role}", {})

    @staticmethod
    def _choose_model(draft: ConfigDraft, model: Any, processing_class: Any,
                      tokenizer: Any) -> tuple[Any, Any]:
        """(model object, tokenizer), or (None, None) for a model the trainer builds by name."""
        if processing_class is not None and tokenizer is not None:
            raise ValueError("processing_class and tokenizer name the same thing: give one")
        tokenizer = processing_class if processing_class is not None else tokenizer
        if model is None:
            if tokenizer is not None:
                raise ValueError("processing_class / tokenizer: only with a model object (model=)")
            return None, None
        if not is_model_object(model):
            draft.set("model.name", model_name(model, tokenizer), "model")
            return None, None
        if tokenizer is None:
            raise ValueError("processing_class: a model object needs its tokenizer (pass "
                             "processing_class=tokenizer, or tokenizer=tokenizer)")
        for key, value in model_record(model).items():
            draft.set(f"model.{key}", value, "model")
        return model, tokenizer

    # ------------------------------------------------------------------ running

    def train(self) -> TrainResult:
        """Load the model(s) and train; returns TrainResult (run_dir, steps_done, before / after:
        the held-out EvalResults, None without held-out tasks; history: each step's metrics)."""
        if self._pack is not None:  # another trainer of this process may have taken the name since
            register_pack(self._pack)
        if self._workflow is not None:
            self._workflow.register()
        policies = None
        if self._model is not None:
            policies = model_policies(self._model, self._tokenizer, self.config)
        return Trainer(self.config, policies=policies).train()
