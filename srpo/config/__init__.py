"""Typed, validated run configuration: pydantic models loaded from YAML + `key=value` overrides.

    cfg = load_config("srpo/presets/smoke.yaml", ["sampling.temperature=0.7", "group_size=2"])
    cfg.sampling.temperature        # 0.7

Rules (later sections only add models):
  * every section is a pydantic model (`_Section`); every field has a type and a comment saying
    what it is;
  * unknown keys and wrong types raise ConfigError naming the dotted key (and the known keys);
    an int field takes only an int (not a bool, not "3"), a bool only a bool, a str only a str,
    a list field a list or a tuple;
  * a mapping field (e.g. `agents`) given in YAML replaces its default mapping as a whole;
  * overrides are applied after the YAML, on the complete config: `a.b.c=value`, the value
    parsed as YAML (`0.7`, `true`, `[a, b]`, `null`) except for string fields, which take the
    text verbatim; a new key of a mapping field creates an entry (`agents.critic.policy=shared`);
  * a float field also takes a number written as text (`1e-5`, which YAML 1.1 reads as a
    string) and is always finite (no `.nan` / `.inf`); names that become file names (policy
    names) must be plain file names;
  * the YAML of a file and of each override's value is read within bounds (yaml_reader.py:
    1 MiB, 64 levels, 100,000 values with aliases expanded, no duplicate key, not empty);
  * the config is validated once, at construction (from a mapping or with keywords in code),
    and never mutated while running; load_config also checks what the config needs of this
    machine (check_environment: a CUDA device, a writable output_dir).

What pydantic does: the schema. Each section is a `BaseModel` with `extra="forbid"` and strict
types (so no coercion but int -> float), plus two field types of this module: `Float` (a float
that also takes finite number text) and `List[T]` (a list that also takes a tuple). The rules of
a section that involve several fields or other modules (`policies.kind`, templates, method
names, sampling parameters...) are its `model_validator`s, which raise ConfigError themselves.

The package: `schema.py` is the schema (the sections; what the config *is*). `errors.py` turns
pydantic's ValidationError into one ConfigError that names the dotted key. `yaml_reader.py`
reads YAML within the bounds above. `loading.py` reads the YAML file, parses `key=value`
overrides (`parse_override`, `apply_overrides`, `set_dotted`, which need the declared type of a
dotted key to leave string values verbatim), resets the params of a workflow and the settings of
a task pack that an override replaces, and runs the machine checks (`check_environment`), which
Config itself never runs.
"""

from srpo.config.errors import ConfigError
from srpo.config.loading import (
    apply_overrides,
    check_environment,
    from_dict,
    load_config,
    parse_override,
    reset_params_of_a_changed_workflow,
    reset_settings_of_a_changed_task_pack,
    set_dotted,
    to_dict,
)
from srpo.config.paths import InputPath
from srpo.config.schema import (
    GENERIC_TASK_KEYS,
    AgentConfig,
    CheckpointConfig,
    Config,
    EvalConfig,
    Float,
    List,
    LoraSection,
    ModelConfig,
    PoliciesConfig,
    RolloutConfig,
    SamplingConfig,
    TaskConfig,
    TaskSettings,
    TrainConfig,
    WorkflowConfig,
    check_file_name,
    one_of,
    positive,
)

__all__ = [
    "GENERIC_TASK_KEYS", "AgentConfig", "CheckpointConfig", "Config", "ConfigError", "EvalConfig",
    "InputPath",
    "Float", "List", "LoraSection", "ModelConfig", "PoliciesConfig", "RolloutConfig",
    "SamplingConfig", "TaskConfig", "TaskSettings", "TrainConfig", "WorkflowConfig",
    "apply_overrides", "check_environment", "check_file_name", "from_dict", "load_config",
    "one_of", "parse_override", "positive", "reset_params_of_a_changed_workflow",
    "reset_settings_of_a_changed_task_pack", "set_dotted", "to_dict",
]
