"""A study spec: settings x methods x seeds, each cell one training run with the same budget.

    name: cpu-main
    output: results/cpu-main            # where cells, tables and plots go
    config: srpo/presets/math/parallel.yaml  # base config of every setting (a setting may name its own)
    common: {train.steps: 12, eval.size: 128}   # dotted keys applied to every cell
    settings:                           # rows: what is trained (workflow x task)
      math-parallel: {config: srpo/presets/math/parallel.yaml, set: {workflow.params.k: 3}}
    methods:                            # columns: how it is trained
      srpo: {set: {train.method: srpo}}
      grpo: {set: {train.method: grpo}}
    seeds: [0, 1, 2]                    # sets `seed` (sampling, LoRA init, workflow draws)
    reference: srpo                     # the method the others are compared with, item by item
    base_eval: true                     # evaluate the untrained model once per (setting, seed)
    report: {metrics: [reward/mean, clip/all/frac]}   # per-step metrics tabulated and plotted
    quick:                              # `--quick`: a smoke-sized variant of the same study
      output: results/cpu-main-quick
      seeds: [0]
      common: {train.steps: 2}          # applied after `common`

A cell's config is: its setting's config file, then `common`, then the setting's `set`, then
the method's `set`, then `seed`. Equal budgets follow from that order: a method may change only
how the rollouts are used, never how many there are (keys under `sampling`, `group_size`,
`train.steps`, `train.tasks_per_step`, `task` and `workflow` are refused in a method's `set`).
Paths are relative to the working directory (run studies from the repository root).

Two optional parts make a study of several blocks (the testbed mechanism study,
studies/testbed_mechanism/spec.yaml):

    levels:                             # a second row axis, crossed with the settings
      r4: {set: {train.epochs: 2, train.minibatches: 2}}
    blocks:                             # run in this order; each its own cross, seed-major
      stress: {settings: [k4], levels: [r1, r4], methods: [srpo, grpo], seeds: 0-19,
               common: {train.steps: 10}}   # applied after the study's `common`
    record: series                      # what a cell leaves (below)

With blocks, a cell is block x setting x level x method x seed, its config: the setting's file,
`common`, the block's `common`, the setting's `set`, the level's `set`, the method's `set`, then
`seed`. `record` says what a finished cell leaves: `evaluation` (the default: a training run
and its held-out evaluation, cells/.../seed<k>/result.json; srpo_lab.study.runner) or `series` (a
short training run's per-step series of `report.metrics`, one compact record
cells/.../seed<k>.json; srpo_lab.study.series), for studies of many short runs that evaluate
nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from srpo.config import Config, ConfigError, check_file_name, from_dict, set_dotted, to_dict
from srpo.config.yaml_reader import load_yaml, read_config_text

# Budget-defining keys: a method that changed them would not get the same rollouts and tokens.
BUDGET_KEYS = ("sampling", "group_size", "train.steps", "train.tasks_per_step", "task", "workflow",
               "agents", "model", "policies", "eval", "rollout")
SPEC_KEYS = {"name", "description", "output", "config", "common", "settings", "methods", "seeds",
             "reference", "base_eval", "report", "quick", "levels", "blocks", "record"}
BLOCK_KEYS = {"settings", "levels", "methods", "seeds", "common"}
RECORD_KINDS = ("evaluation", "series")
QUICK_KEYS = {"output", "seeds", "common", "settings", "methods"}


@dataclass(frozen=True)
class Variant:
    """A named set of config values (a setting or a method)."""

    name: str
    values: dict[str, Any]  # dotted key -> value
    config: str | None = None  # settings only: their own base config file


@dataclass(frozen=True)
class Block:
    """One cross of a study: its settings x levels x methods x seeds (names of the spec's
    variants), run seed-major, with its own `common` values after the study's."""

    name: str | None  # None: the one implicit block of a study without `blocks`
    settings: tuple[str, ...]
    levels: tuple[str | None, ...]  # (None,): no level axis
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    common: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudySpec:
    name: str
    output: Path
    settings: tuple[Variant, ...]
    methods: tuple[Variant, ...]
    seeds: tuple[int, ...]  # every seed of the study (with blocks: of any block)
    config: str | None = None
    common: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    base_eval: bool = True
    report_metrics: tuple[str, ...] = ("reward/mean",)
    description: str = ""
    levels: tuple[Variant, ...] = ()
    explicit_blocks: tuple[Block, ...] = ()  # empty: one block of everything
    record: str = "evaluation"  # RECORD_KINDS

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The blocks in run order; a study without `blocks` is one block of everything."""
        if self.explicit_blocks:
            return self.explicit_blocks
        return (Block(None, tuple(s.name for s in self.settings), (None,), tuple(m.name for m in self.methods),
                      self.seeds),)

    def block(self, name: str | None) -> Block:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"unknown block {name!r} (known: {', '.join(str(b.name) for b in self.blocks)})")

    def level(self, name: str) -> Variant:
        return _by_name(self.levels, name, "level")

    def setting(self, name: str) -> Variant:
        return _by_name(self.settings, name, "setting")

    def method(self, name: str) -> Variant:
        return _by_name(self.methods, name, "method")

    def _layers(self, setting: str, method: str | None, block: str | None,
                level: str | None) -> list[tuple[str, dict[str, Any]]]:
        """(where, dotted values) in the order they apply to a cell."""
        layers = [("common", self.common)]
        if block is not None:
            layers.append((f"block {block}", self.block(block).common))
        layers.append((f"setting {setting}", self.setting(setting).values))
        if level is not None and method is not None:  # a base cell evaluates the untrained model
            layers.append((f"level {level}", self.level(level).values))
        if method is not None:
            layers.append((f"method {method}", self.method(method).values))
        return layers

    def cell_inputs(self, setting: str, method: str | None, seed: int, *, block: str | None = None,
                    level: str | None = None) -> dict[str, Any]:
        """What the spec says about one cell: its setting's config file (the text), `common`, the
        setting's and the method's values, the seed and whether the base is evaluated apart
        (and its block's `common` and its level's values, for the cells that have them).
        Its hash identifies a finished cell (srpo_lab.study.runner): a change of the spec or of the
        setting's file reruns the cell; a change of srpo's code does not (each result records
        the code it ran with), so a study resumed after a release that adds config fields keeps
        its finished cells."""
        s = self.setting(setting)
        base_file = s.config or self.config
        text = Path(base_file).read_text() if base_file and Path(base_file).is_file() else None
        inputs = {"config_file": base_file, "config_text": text, "common": self.common,
                  "setting": s.values, "method": None if method is None else self.method(method).values,
                  "seed": seed, "base_eval": self.base_eval}
        if block is not None:
            inputs["block_common"] = self.block(block).common
        if level is not None:
            inputs["level"] = self.level(level).values
        return inputs

    def config_file(self, setting: str) -> str:
        """The base config file of a setting (its own, else the spec's); an error if neither."""
        base_file = self.setting(setting).config or self.config
        if base_file is None:
            raise ConfigError(f"study {self.name}: setting {setting!r} has no config file and the spec names none")
        if not Path(base_file).is_file():
            raise ConfigError(f"study {self.name}: setting {setting!r}: config file {base_file!r} does not exist")
        return base_file

    def cell_overrides(self, setting: str, method: str | None, seed: int, run_dir: Path, *,
                       block: str | None = None, level: str | None = None) -> tuple[str, list[str]]:
        """(config file, `key=value` overrides) of one cell, as `srpo train FILE OVERRIDES...`
        would take them: every layer's values (a later layer's value replaces an earlier one's),
        then seed and output_dir. A series record keeps them, to say how the run was made."""
        values: dict[str, Any] = {}
        for _, layer in self._layers(setting, method, block, level):
            values.update(layer)
        values["seed"] = seed
        values["output_dir"] = str(run_dir)
        return self.config_file(setting), [f"{k}={_override_value(v)}" for k, v in values.items()]

    def cell_config(self, setting: str, method: str | None, seed: int, run_dir: Path, *,
                    block: str | None = None, level: str | None = None) -> Config:
        """The complete, validated config of one cell (method None: the untrained base model)."""
        path = Path(self.config_file(setting))
        data = load_yaml(read_config_text(path), f"config file {str(path)!r}") or {}
        if not isinstance(data, dict):
            raise ConfigError(f"study {self.name}: {path} must hold a mapping")
        data = to_dict(from_dict(Config, data))  # defaults filled in, so dotted keys always land
        for where, values in self._layers(setting, method, block, level):
            for key, value in values.items():
                set_dotted(data, key.split("."), value, where=f"study {self.name}, {where}, key {key!r}")
        data["seed"] = seed
        if method is not None and self.base_eval:
            data["eval"]["before"] = False  # the base cell evaluates the untrained model once
        data["output_dir"] = str(run_dir)
        data["resume"] = False
        try:
            return from_dict(Config, data)
        except ConfigError as e:
            where = "/".join(x for x in (block, setting, level, method or "base") if x is not None)
            raise ConfigError(f"study {self.name}, cell {where}/seed{seed}: {e}") from e


def _override_value(value: Any) -> str:
    """A value as the command line's `key=value` takes it (YAML flow style for mappings)."""
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def _by_name(items: tuple[Variant, ...], name: str, what: str) -> Variant:
    for v in items:
        if v.name == name:
            return v
    raise KeyError(f"unknown {what} {name!r} (known: {', '.join(v.name for v in items)})")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _variants(raw: Any, where: str, *, allow_config: bool) -> tuple[Variant, ...]:
    raw = _mapping(raw, where)
    if not raw:
        raise ConfigError(f"{where} must name at least one entry")
    out = []
    for name, body in raw.items():
        body = _mapping(body, f"{where}.{name}")
        allowed = {"set", "config"} if allow_config else {"set"}
        unknown = set(body) - allowed
        if unknown:
            raise ConfigError(f"{where}.{name}: unknown key(s) {sorted(unknown)} (allowed: {sorted(allowed)})")
        values = _mapping(body.get("set"), f"{where}.{name}.set")
        check_file_name(f"{where}.{name}", str(name))  # it names a folder of the study's cells
        out.append(Variant(str(name), values, body.get("config")))
    return tuple(out)


def _check_method_budget(methods: tuple[Variant, ...]) -> None:
    for m in methods:
        for key in m.values:
            for budget in BUDGET_KEYS:
                if key == budget or key.startswith(budget + "."):
                    raise ConfigError(
                        f"method {m.name!r} sets {key!r}: methods may not change the rollout budget "
                        f"({', '.join(BUDGET_KEYS)}); put it in `common` or a setting"
                    )


def _seeds(raw: Any, where: str) -> tuple[int, ...]:
    """[0, 1, 2], or "0-19" (both ends included)."""
    if isinstance(raw, str):
        lo, sep, hi = raw.partition("-")
        if not (sep and lo.strip().isdigit() and hi.strip().isdigit() and int(lo) <= int(hi)):
            raise ConfigError(f"{where} must be a list of integers or a range 'A-B', got {raw!r}")
        return tuple(range(int(lo), int(hi) + 1))
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) for s in raw):
        raise ConfigError(f"{where} must be a non-empty list of integers, got {raw!r}")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"{where} has duplicates: {raw}")
    return tuple(raw)


def _pick(items: tuple[Variant, ...], names: Any, where: str) -> tuple[Variant, ...]:
    if names is None:
        return items
    if not isinstance(names, list) or not names:
        raise ConfigError(f"{where} must be a non-empty list of names")
    known = {v.name: v for v in items}
    missing = [n for n in names if n not in known]
    if missing:
        raise ConfigError(f"{where} names unknown entries {missing} (known: {sorted(known)})")
    return tuple(known[n] for n in names)


def _names(raw: Any, known: tuple[Variant, ...], where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where} must be a non-empty list of names")
    names = {v.name for v in known}
    missing = [n for n in raw if n not in names]
    if missing:
        raise ConfigError(f"{where} names unknown entries {missing} (known: {sorted(names)})")
    return tuple(str(n) for n in raw)


def _blocks(raw: Any, settings, levels, methods, seeds: tuple[int, ...] | None) -> tuple[Block, ...]:
    out = []
    for name, body in _mapping(raw, "blocks").items():
        where = f"blocks.{name}"
        body = _mapping(body, where)
        unknown = set(body) - BLOCK_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(BLOCK_KEYS)})")
        check_file_name(where, str(name))  # it names a folder of the study's cells
        if "seeds" not in body and seeds is None:
            raise ConfigError(f"{where} needs `seeds` (the spec has no top-level `seeds`)")
        if "levels" in body and not levels:
            raise ConfigError(f"{where} names levels, but the spec defines no `levels`")
        out.append(Block(
            name=str(name),
            settings=_names(body["settings"], settings, f"{where}.settings") if "settings" in body
            else tuple(v.name for v in settings),
            levels=_names(body["levels"], levels, f"{where}.levels") if "levels" in body
            else (tuple(v.name for v in levels) or (None,)),
            methods=_names(body["methods"], methods, f"{where}.methods") if "methods" in body
            else tuple(v.name for v in methods),
            seeds=_seeds(body["seeds"], f"{where}.seeds") if "seeds" in body else seeds,
            common=_mapping(body.get("common"), f"{where}.common"),
        ))
    if not out:
        raise ConfigError("blocks must name at least one entry")
    return tuple(out)


def parse_spec(data: Any, *, quick: bool = False, source: str = "spec") -> StudySpec:
    data = _mapping(data, source)
    unknown = set(data) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {sorted(unknown)} (known: {sorted(SPEC_KEYS)})")
    required = ("name", "output", "settings", "methods") + (() if "blocks" in data else ("seeds",))
    for key in required:
        if key not in data:
            raise ConfigError(f"{source}: missing required key {key!r}")
    record = data.get("record", "evaluation")
    if record not in RECORD_KINDS:
        raise ConfigError(f"{source}: record must be one of {list(RECORD_KINDS)}, got {record!r}")
    settings = _variants(data["settings"], "settings", allow_config=True)
    methods = _variants(data["methods"], "methods", allow_config=False)
    levels = _variants(data["levels"], "levels", allow_config=False) if "levels" in data else ()
    _check_method_budget(methods)
    report = _mapping(data.get("report"), "report")
    if set(report) - {"metrics"}:
        raise ConfigError(f"report: unknown key(s) {sorted(set(report) - {'metrics'})} (known: ['metrics'])")
    top_seeds = _seeds(data["seeds"], "seeds") if "seeds" in data else None
    blocks = _blocks(data["blocks"], settings, levels, methods, top_seeds) if "blocks" in data else ()
    if levels and not blocks:
        raise ConfigError(f"{source}: `levels` are crossed in blocks; name them under `blocks`")
    if blocks and record != "series":
        raise ConfigError(f"{source}: `blocks` and `levels` are for `record: series` studies (the "
                          "evaluation report tabulates settings x methods)")
    # a series study trains and evaluates nothing apart
    if record == "series" and (data.get("base_eval") or data.get("reference") is not None):
        raise ConfigError(f"{source}: a `record: series` study has no evaluations: "
                          "`base_eval` and `reference` do not apply")
    spec = StudySpec(
        name=str(data["name"]),
        output=Path(str(data["output"])),
        settings=settings,
        methods=methods,
        seeds=top_seeds if top_seeds is not None else tuple(sorted({k for b in blocks for k in b.seeds})),
        config=data.get("config"),
        common=_mapping(data.get("common"), "common"),
        reference=data.get("reference"),
        base_eval=bool(data.get("base_eval", record == "evaluation")),
        report_metrics=tuple(report.get("metrics", ("reward/mean",))),
        description=str(data.get("description", "")),
        levels=levels,
        explicit_blocks=blocks,
        record=record,
    )
    if spec.reference is not None:
        spec.method(spec.reference)  # raises on an unknown name
    if quick:
        q = _mapping(data.get("quick"), "quick")
        if not q:
            raise ConfigError(f"{source} has no `quick` section")
        if blocks:
            raise ConfigError(f"{source}: `quick` is not supported with `blocks` (write a smaller spec)")
        if set(q) - QUICK_KEYS:
            raise ConfigError(f"quick: unknown key(s) {sorted(set(q) - QUICK_KEYS)} (known: {sorted(QUICK_KEYS)})")
        if "output" not in q:
            raise ConfigError("quick: needs its own `output` (never mix smoke cells with the study's)")
        methods = _pick(spec.methods, q.get("methods"), "quick.methods")
        spec = dataclasses.replace(
            spec,
            name=f"{spec.name}-quick",
            output=Path(str(q["output"])),
            seeds=_seeds(q["seeds"], "quick.seeds") if "seeds" in q else spec.seeds,
            common={**spec.common, **_mapping(q.get("common"), "quick.common")},
            settings=_pick(spec.settings, q.get("settings"), "quick.settings"),
            methods=methods,
            reference=spec.reference if spec.reference in {m.name for m in methods} else None,
        )
    return spec


def load_spec(path: str | Path, *, quick: bool = False) -> StudySpec:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"study spec {str(path)!r} does not exist")
    data = load_yaml(read_config_text(path), f"study spec {str(path)!r}")  # bounded, one line
    return parse_spec(data, quick=quick, source=str(path))
