"""SRPOTrainer's arguments: what each becomes in the config, and the error each bad one gets
(naming the argument) before any model is loaded. No training here (test_api_training.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from srpo.api import FIELD_KEYS, RewardFunctionError, SRPOConfig, SRPOTrainer
from srpo.api.workflow import INSTANCE_SUFFIX
from srpo.config import Config, ConfigError, load_config, to_dict
from srpo.models import build_tiny_model
from srpo.packs import get_pack
from srpo.workflows.base import Request

# SRPOTrainer registers workflows process-wide: undo this file's registrations (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("workflows_registered_here_stay_here")


ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "level": i % 3} for i in range(8)]
HELDOUT = [{"prompt": f"What is {i} + 2?", "answer": i + 2} for i in range(3)]


def exact(completion: str, task: dict) -> float:
    return float(completion.strip() == task["answer"])


def trainer(**kwargs) -> SRPOTrainer:
    kwargs.setdefault("reward_funcs", exact)
    kwargs.setdefault("train_dataset", ROWS)
    return SRPOTrainer(**kwargs)


def reward_of(t: SRPOTrainer):
    """The run's reward function, as the rollouts call it: (task, final text) -> components."""
    return get_pack(t.config.task.name).make_reward(t.config.task)


# --------------------------------------------------------------------------- args -> config


def test_without_arguments_the_config_is_srpos_default():
    assert to_dict(SRPOTrainer().config) == to_dict(Config())


def test_a_preset_as_base_is_kept_where_no_argument_sets_a_key():
    assert to_dict(SRPOTrainer(args=SRPOConfig(config="smoke")).config) == \
        to_dict(load_config("smoke", check_machine=False))
    cfg = load_config("smoke", check_machine=False)
    assert to_dict(SRPOTrainer(args=cfg).config) == to_dict(cfg)  # a Config as args


def test_every_field_sets_its_config_key():
    args = SRPOConfig(output_dir="runs/x", method="grpo", steps=3, lr=1e-4, group_size=3,
                      tasks_per_step=2, seed=5, eval_size=2, method_settings={"clip_low": 0.1},
                      max_new_tokens=16, temperature=0.5, lora=True, lora_rank=4, lora_alpha=8.0,
                      device="cpu", threads=1)
    data = to_dict(trainer(args=args, eval_dataset=HELDOUT).config)
    for name, key in FIELD_KEYS.items():
        value = data
        for part in key.split("."):
            value = value[part]
        expected = {"lora": "lora"}.get(name, getattr(args, name))
        assert value == expected, name
    unmapped = {f.name for f in dataclasses.fields(SRPOConfig)} - set(FIELD_KEYS)
    assert unmapped == {"reward_weights", "overrides", "config"}


def test_lora_false_trains_the_whole_model():
    assert trainer(args=SRPOConfig(lora=False, config="smoke")).config.policies.kind == "shared"


def test_overrides_set_any_key_as_python_values_or_command_line_text():
    a = trainer(args=SRPOConfig(overrides={"train.epochs": 2, "agents.solver.system_prompt": "Add."}))
    b = trainer(args=SRPOConfig(overrides=["train.epochs=2", "agents.solver.system_prompt=Add."]))
    for t in (a, b):
        assert t.config.train.epochs == 2 and t.config.agents["solver"].system_prompt == "Add."


def test_a_key_given_twice_is_refused():
    with pytest.raises(ValueError, match=r"args.overrides\['train.steps'\] sets train.steps, which "
                                         r"args.steps already sets"):
        trainer(args=SRPOConfig(steps=3, overrides={"train.steps": 4}))
    with pytest.raises(ValueError, match="method sets train.method, which args.method already sets"):
        trainer(args=SRPOConfig(method="grpo"), method="srpo")
    with pytest.raises(ValueError, match=r"args.overrides\['workflow.params.k'\] sets .* which workflow"):
        trainer(workflow="parallel", args=SRPOConfig(overrides={"workflow.params.k": 2}))


def test_a_bad_value_names_the_argument_and_the_key():
    with pytest.raises(ConfigError, match=r"^args.steps: train.steps must be > 0, got 0"):
        trainer(args=SRPOConfig(steps=0))
    with pytest.raises(ConfigError, match=r"^args.lr: train.lr must be in \(0, 1\]"):
        trainer(args=SRPOConfig(lr=3.0))
    with pytest.raises(ConfigError, match=r"args.tasks_per_step / train_dataset: train.tasks_per_step "
                                          r"\(9\) exceeds task.train_size \(8\)"):
        trainer(args=SRPOConfig(tasks_per_step=9))
    with pytest.raises(ConfigError, match=r"args.eval_size / train_dataset: eval.size \(5\) exceeds "
                                          r"task.heldout_size \(3\)"):
        trainer(eval_dataset=HELDOUT, args=SRPOConfig(eval_size=5))
    with pytest.raises(ConfigError, match=r"args.overrides\['train.epochs'\]: train.epochs"):
        trainer(args=SRPOConfig(overrides={"train.epochs": "two"}))
    with pytest.raises(ConfigError, match=r"args.overrides\['train.epoch'\]: .*train.epoch"):
        trainer(args=SRPOConfig(overrides={"train.epoch": 2}))
    with pytest.raises(ConfigError, match="args.config: config file 'no/such.yaml' does not exist"):
        SRPOTrainer(args=SRPOConfig(config="no/such.yaml"))
    with pytest.raises(TypeError, match="args must be an srpo.SRPOConfig"):
        SRPOTrainer(args={"steps": 2})
    with pytest.raises(TypeError, match="args.lora must be True or False"):
        SRPOTrainer(args=SRPOConfig(lora="yes"))


def test_method():
    assert trainer(method="dapo").config.train.method == "dapo"
    with pytest.raises(ValueError, match=r"method: unknown method 'ppo'; known methods: \[.*'grpo'"):
        trainer(method="ppo")
    with pytest.raises(ConfigError, match="^args.method: train.method"):
        trainer(args=SRPOConfig(method="ppo"))


# --------------------------------------------------------------------------- workflow


class Checked:
    """A two-role workflow: a solver answers, a checker reads it and gives the final answer."""

    name = "checked-test"
    description = "a solver answers, a checker gives the final answer"

    def __init__(self, rounds: int = 1):
        self.rounds = rounds

    @property
    def agents(self) -> tuple[str, ...]:
        return ("solver", "checker")

    def run(self, task, ctx):
        answer = yield Request("solver", task.prompt)
        ctx.transition("solve", [answer])
        final = yield Request("checker", f"{task.prompt}\nProposed: {answer.text}\nFinal answer:")
        ctx.transition("check", [final])
        return ctx.score(final)


def test_a_workflow_name_with_params():
    t = trainer(workflow="debate", workflow_params={"rounds": 3})
    assert t.config.workflow.name == "debate" and t.config.workflow.params == {"rounds": 3}


def test_an_unknown_workflow_name_or_parameter_is_named():
    with pytest.raises(ValueError, match=r"^workflow: unknown workflow 'debait'; did you mean 'debate'\? "
                                         r"known workflows: \[.*'debate'"):
        trainer(workflow="debait")
    with pytest.raises(ValueError, match=r"^workflow_params: workflow 'debate' has no parameter\(s\) \['k'\]"):
        trainer(workflow="debate", workflow_params={"k": 2})


def test_a_workflow_class_is_registered_under_its_name_and_its_roles_exist():
    t = trainer(workflow=Checked, workflow_params={"rounds": 2})
    assert t.config.workflow.name == "checked-test" and t.config.workflow.params == {"rounds": 2}
    assert set(t.config.agents) == {"solver", "checker"}  # no defaults anywhere: plain roles


def test_a_workflow_instance_runs_as_it_is():
    flow = Checked(rounds=3)
    t = trainer(workflow=flow)
    assert t.config.workflow.name == "checked-test" + INSTANCE_SUFFIX
    assert t._workflow.build() is flow
    with pytest.raises(ValueError, match="^workflow_params: the workflow is given as an instance"):
        trainer(workflow=flow, workflow_params={"rounds": 1})


def test_what_is_not_a_workflow_is_refused_saying_what_it_lacks():
    class NoRun:
        name = "no-run"
        description = "has no run"
        agents = ("solver",)

    class Nameless:
        agents = ("solver",)

        def run(self, task, ctx):
            yield Request("solver", task.prompt)

    with pytest.raises(TypeError, match=r"^workflow: a NoRun object is not a srpo workflow: no "
                                        r"run\(task, ctx\) method"):
        trainer(workflow=NoRun())
    with pytest.raises(TypeError, match=r"the class NoRun is not a srpo workflow: no run\(task, ctx\)"):
        trainer(workflow=NoRun)
    with pytest.raises(TypeError, match=r"a Nameless object is not a srpo workflow: no 'name' \(a "
                                        r"non-empty string\), no 'description'"):
        trainer(workflow=Nameless())
    with pytest.raises(TypeError, match="the function exact is not a srpo workflow"):
        trainer(workflow=exact)
    with pytest.raises(TypeError, match="a int object is not a srpo workflow: no 'name'.*no 'agents'"):
        trainer(workflow=3)


def test_a_workflow_class_may_not_take_a_built_in_name():
    class Parallel(Checked):
        name = "parallel"

    with pytest.raises(ValueError, match="the class Parallel is named 'parallel', which is registered "
                                         "already for 'ParallelAggregate'"):
        trainer(workflow=Parallel)


# --------------------------------------------------------------------------- tasks


def test_rows_become_tasks_of_a_pack_named_by_their_content():
    t = trainer(eval_dataset=HELDOUT)
    task = t.config.task
    assert (task.train_size, task.heldout_size) == (8, 3) and task.name.startswith("python-tasks-")
    pack = get_pack(task.name)
    train = pack.load_tasks(task, "train", 8)
    assert [x.task_id for x in train[:2]] == ["train-0", "train-1"]
    assert train[1].prompt == "What is 1 + 1?" and train[1].answer == "2"
    assert train[1].metadata == ROWS[1]  # every key reaches the workflow and the reward
    assert pack.load_tasks(task, "heldout", 3)[2].answer == "4"  # a number made text
    assert trainer(eval_dataset=HELDOUT).config.task.name == task.name  # same tasks, same name
    assert trainer(train_dataset=ROWS[:7]).config.task.name != task.name


def test_a_datasets_dataset_gives_the_same_tasks_as_its_list():
    datasets = pytest.importorskip("datasets")
    t = trainer(train_dataset=datasets.Dataset.from_list(ROWS),
                eval_dataset=datasets.Dataset.from_list(HELDOUT))
    assert to_dict(t.config) == to_dict(trainer(eval_dataset=HELDOUT).config)
    with pytest.raises(TypeError, match=r"train_dataset is a mapping .*pass one split, e.g. ds\['train'\]"):
        trainer(train_dataset=datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}))


def test_other_prompt_and_answer_keys_and_task_ids():
    rows = [{"question": "2+2?", "solution": 4, "task_id": "q1"}, {"question": "3+3?", "solution": 6, "task_id": "q2"}]
    t = trainer(train_dataset=rows, args=SRPOConfig(tasks_per_step=2))
    tasks = get_pack(t.config.task.name).load_tasks(t.config.task, "train", 2)
    assert [(x.task_id, x.prompt, x.answer) for x in tasks] == [("q1", "2+2?", "4"), ("q2", "3+3?", "6")]


def test_a_dataset_without_its_prompt_key_is_refused_naming_the_row():
    with pytest.raises(ValueError, match=r"train_dataset\[0\] has no prompt key: a row needs one of "
                                         r"\['prompt', 'question', 'input'\].*\['answer', 'text'\]"):
        trainer(train_dataset=[{"text": "2+2?", "answer": "4"}])
    with pytest.raises(ValueError, match=r"eval_dataset\[1\] has no 'prompt' key"):
        trainer(eval_dataset=[{"prompt": "1+1?"}, {"question": "2+2?"}])


@pytest.mark.parametrize("rows, error, message", [
    ([], ValueError, r"train_dataset is empty"),
    ("2+2?", TypeError, r"train_dataset must be a list of dicts or a datasets.Dataset, got str"),
    ([("2+2?", "4")], TypeError, r"train_dataset\[0\] must be a dict"),
    ([{"prompt": [{"role": "user", "content": "2+2?"}]}], TypeError, r"train_dataset\[0\]\['prompt'\] is a list"),
    ([{"prompt": "  "}], ValueError, r"train_dataset\[0\]\['prompt'\] must be non-empty text"),
    ([{"prompt": "a", "answer": ["4"]}], TypeError, r"train_dataset\[0\]\['answer'\] must be text or a number"),
    ([{"prompt": "a", "task_id": 1}, {"prompt": "b", "task_id": "1"}], ValueError,
     r"train_dataset\[1\]: task_id '1' repeats"),
])
def test_bad_rows(rows, error, message):
    with pytest.raises(error, match=message):
        trainer(train_dataset=rows)


def test_without_an_eval_dataset_there_is_no_held_out_evaluation():
    assert trainer().config.eval.size == 0
    with pytest.raises(ValueError, match=r"args.eval_size \(4\) needs an eval_dataset"):
        trainer(args=SRPOConfig(eval_size=4))
    with pytest.raises(ValueError, match="eval_dataset needs a train_dataset"):
        SRPOTrainer(eval_dataset=HELDOUT, reward_funcs=exact)
    with pytest.raises(ValueError, match="reward_funcs: tasks given as train_dataset need a reward"):
        SRPOTrainer(train_dataset=ROWS)


# --------------------------------------------------------------------------- rewards


def test_a_reward_sees_the_final_text_and_the_row():
    seen = []

    def spy(completion, task):
        seen.append((completion, task))
        return 0.5

    t = trainer(reward_funcs=spy)
    task = get_pack(t.config.task.name).load_tasks(t.config.task, "train", 2)[1]
    assert reward_of(t)(task, "2") == {"spy": 0.5}
    assert seen == [("2", ROWS[1])]
    assert t.config.eval.success_component is None and get_pack(t.config.task.name).success_component == "spy"


def test_several_rewards_are_weighted_components_and_trls_batched_form_is_accepted():
    def trl_style(prompts, completions, answer, **kwargs):  # TRL: lists, one per completion
        assert prompts == ["What is 1 + 1?"] and kwargs["level"] == [1]
        return [float(c == a) for c, a in zip(completions, answer)]

    t = trainer(reward_funcs=[exact, trl_style, lambda c, task: len(c)],
                args=SRPOConfig(reward_weights=[1.0, 2.0, 0.1]))
    task = get_pack(t.config.task.name).load_tasks(t.config.task, "train", 2)[1]
    assert reward_of(t)(task, "2") == {"exact": 1.0, "trl_style": 2.0, "reward_2": pytest.approx(0.1)}
    named = trainer(reward_funcs={"right": exact, "short": lambda c, task: -len(c)})
    assert reward_of(named)(task, "22") == {"right": 0.0, "short": -2.0}


@pytest.mark.parametrize("value, message", [
    (math.nan, r"reward_funcs \('bad'\) returned nan: a reward must be a finite number"),
    ("1", r"reward_funcs \('bad'\) returned '1' \(str\), not a number"),
    (None, r"returned None \(NoneType\), not a number"),
    (True, r"returned True \(bool\), not a number"),
])
def test_a_reward_that_returns_no_finite_number_is_an_error_naming_it(value, message):
    def bad(completion, task):
        return value

    t = trainer(reward_funcs=bad)
    task = get_pack(t.config.task.name).load_tasks(t.config.task, "train", 1)[0]
    with pytest.raises(RewardFunctionError, match=message):
        reward_of(t)(task, "x")


def test_a_reward_that_raises_is_an_error_naming_it():
    def broken(completion, task):
        return 1 / 0

    t = trainer(reward_funcs=[exact, broken])
    task = get_pack(t.config.task.name).load_tasks(t.config.task, "train", 1)[0]
    with pytest.raises(RewardFunctionError, match=r"reward_funcs\[1\] \('broken'\) raised "
                                                  r"ZeroDivisionError: division by zero"):
        reward_of(t)(task, "x")


def test_bad_reward_funcs_are_refused_before_any_rollout():
    with pytest.raises(TypeError, match=r"reward_funcs \('reward'\) must take \(completion: str, task: "
                                        r"dict\) -> float, or TRL's"):
        trainer(reward_funcs=lambda one: 0.0)
    with pytest.raises(TypeError, match="reward_funcs must be a callable"):
        trainer(reward_funcs="exact")
    with pytest.raises(ValueError, match="reward_funcs is empty"):
        trainer(reward_funcs=[])
    with pytest.raises(ValueError, match=r"args.reward_weights has 1 weight\(s\) for 2 reward"):
        trainer(reward_funcs=[exact, exact], args=SRPOConfig(reward_weights=[1.0]))
    with pytest.raises(ValueError, match="args.reward_weights needs reward_funcs"):
        SRPOTrainer(args=SRPOConfig(reward_weights=[1.0]))


def test_a_reward_for_a_config_task_pack_replaces_its_reward_only():
    t = SRPOTrainer(args=SRPOConfig(config="smoke"), reward_funcs=exact)
    assert t.config.task.name == "math+python-reward"
    assert t.config.task.model_dump() == {**load_config("smoke", check_machine=False).task.model_dump(),
                                          "name": "math+python-reward"}
    math_task = get_pack("math").load_tasks(t.config.task, "train", 1)[0]
    assert reward_of(t)(math_task, math_task.answer) == {"exact": 1.0}


# --------------------------------------------------------------------------- model


def test_model_names_and_folders(tmp_path):
    assert trainer(model="smollm2").config.model.name == "smollm2"
    with pytest.raises(ValueError, match="model 'HuggingFaceTB/SmolLM2-135M' is neither a model srpo "
                                         "knows nor an existing folder.*from_pretrained"):
        trainer(model="HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(ValueError, match="is a folder without config.json"):
        trainer(model=tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert trainer(model=tmp_path).config.model.name == str(tmp_path.resolve())
    with pytest.raises(TypeError, match="model must be 'tiny', 'smollm2', a local"):
        trainer(model=42)
    with pytest.raises(ValueError, match="processing_class / tokenizer: only with a model object"):
        trainer(model="tiny", processing_class=object())


def test_a_pretrained_model_object_needs_its_tokenizer_and_is_recorded():
    model, tok = build_tiny_model()
    with pytest.raises(ValueError, match="processing_class: a model object needs its tokenizer"):
        trainer(model=model)
    with pytest.raises(ValueError, match="processing_class and tokenizer name the same thing"):
        trainer(model=model, processing_class=tok, tokenizer=tok)
    for t in (trainer(model=model, processing_class=tok), trainer(model=model, tokenizer=tok)):
        assert t.config.model.name == "LlamaForCausalLM" and t.config.model.dtype == "float32"


def test_the_trainer_reads_no_model_before_train(monkeypatch):
    import srpo.build

    monkeypatch.setattr(srpo.build, "build_model", lambda *a, **k: pytest.fail("a model was built"))
    t = trainer(model="smollm2", workflow="parallel")
    assert t.config.model.name == "smollm2"
