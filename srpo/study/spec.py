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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo.config import Config, ConfigError, check_file_name, from_dict, set_dotted, to_dict
from srpo.config.yaml_reader import load_yaml, read_config_text

# Budget-defining keys: a method that changed them would not get the same rollouts and tokens.
BUDGET_KEYS = ("sampling", "group_size", "train.steps", "train.tasks_per_step", "task", "workflow",
               "agents", "model", "policies", "eval", "rollout")
SPEC_KEYS = {"name", "description", "output", "config", "common", "settings", "methods", "seeds",
             "reference", "base_eval", "report", "quick"}
QUICK_KEYS = {"output", "seeds", "common", "settings", "methods"}


@dataclass(frozen=True)
class Variant:
    """A named set of config values (a setting or a method)."""

    name: str
    values: dict[str, Any]  # dotted key -> value
    config: str | None = None  # settings only: their own base config file


@dataclass(frozen=True)
class StudySpec:
    name: str
    output: Path
    settings: tuple[Variant, ...]
    methods: tuple[Variant, ...]
    seeds: tuple[int, ...]
    config: str | None = None
    common: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    base_eval: bool = True
    report_metrics: tuple[str, ...] = ("reward/mean",)
    description: str = ""

    def setting(self, name: str) -> Variant:
        return _by_name(self.settings, name, "setting")

    def method(self, name: str) -> Variant:
        return _by_name(self.methods, name, "method")

    def cell_inputs(self, setting: str, method: str | None, seed: int) -> dict[str, Any]:
        """What the spec says about one cell: its setting's config file (the text), `common`, the
        setting's and the method's values, the seed and whether the base is evaluated apart.
        Its hash identifies a finished cell (srpo.study.runner): a change of the spec or of the
        setting's file reruns the cell; a change of srpo's code does not (each result records
        the code it ran with), so a study resumed after a release that adds config fields keeps
        its finished cells."""
        s = self.setting(setting)
        base_file = s.config or self.config
        text = Path(base_file).read_text() if base_file and Path(base_file).is_file() else None
        return {"config_file": base_file, "config_text": text, "common": self.common,
                "setting": s.values, "method": None if method is None else self.method(method).values,
                "seed": seed, "base_eval": self.base_eval}

    def cell_config(self, setting: str, method: str | None, seed: int, run_dir: Path) -> Config:
        """The complete, validated config of one cell (method None: the untrained base model)."""
        s = self.setting(setting)
        base_file = s.config or self.config
        if base_file is None:
            raise ConfigError(f"study {self.name}: setting {setting!r} has no config file and the spec names none")
        path = Path(base_file)
        if not path.is_file():
            raise ConfigError(f"study {self.name}: setting {setting!r}: config file {base_file!r} does not exist")
        data = load_yaml(read_config_text(path), f"config file {str(path)!r}") or {}
        if not isinstance(data, dict):
            raise ConfigError(f"study {self.name}: {base_file} must hold a mapping")
        data = to_dict(from_dict(Config, data))  # defaults filled in, so dotted keys always land
        layers = [("common", self.common), (f"setting {setting}", s.values)]
        if method is not None:
            layers.append((f"method {method}", self.method(method).values))
        for where, values in layers:
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
            raise ConfigError(f"study {self.name}, cell {setting}/{method or 'base'}/seed{seed}: {e}") from e


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


def parse_spec(data: Any, *, quick: bool = False, source: str = "spec") -> StudySpec:
    data = _mapping(data, source)
    unknown = set(data) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {sorted(unknown)} (known: {sorted(SPEC_KEYS)})")
    for key in ("name", "output", "settings", "methods", "seeds"):
        if key not in data:
            raise ConfigError(f"{source}: missing required key {key!r}")
    settings = _variants(data["settings"], "settings", allow_config=True)
    methods = _variants(data["methods"], "methods", allow_config=False)
    _check_method_budget(methods)
    report = _mapping(data.get("report"), "report")
    if set(report) - {"metrics"}:
        raise ConfigError(f"report: unknown key(s) {sorted(set(report) - {'metrics'})} (known: ['metrics'])")
    spec = StudySpec(
        name=str(data["name"]),
        output=Path(str(data["output"])),
        settings=settings,
        methods=methods,
        seeds=_seeds(data["seeds"], "seeds"),
        config=data.get("config"),
        common=_mapping(data.get("common"), "common"),
        reference=data.get("reference"),
        base_eval=bool(data.get("base_eval", True)),
        report_metrics=tuple(report.get("metrics", ("reward/mean",))),
        description=str(data.get("description", "")),
    )
    if spec.reference is not None:
        spec.method(spec.reference)  # raises on an unknown name
    if quick:
        q = _mapping(data.get("quick"), "quick")
        if not q:
            raise ConfigError(f"{source} has no `quick` section")
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
