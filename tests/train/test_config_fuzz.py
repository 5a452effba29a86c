"""Bad configs are answered in one line, at once (issue 29): every case below, a config file or
`key=value` overrides, makes `srpo train` exit with status 2 and print exactly one line on
stderr that names the dotted key (or the file, for what is wrong with the file as a whole:
size, alias bomb, nesting, emptiness, encoding, a duplicate key), within seconds and without
a traceback. A few cases run as real subprocesses (the command a user types); the rest run
`srpo.cli.main` in-process, the same code without the interpreter's start-up. Then unit tests
of the bounded YAML loader (srpo.config.yaml_reader) and of the generic finite-float rule."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from srpo.cli import main
from srpo.config import Config, ConfigError, load_config, parse_override, yaml_reader
from srpo.config.errors import _declared, _is_section
from srpo.config.yaml_reader import MAX_DEPTH, load_yaml

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "srpo" / "presets" / "smoke.yaml"
GSM8K = ROOT / "tests" / "fixtures" / "math" / "gsm8k.jsonl"

# A refusal costs the interpreter's start (python + torch imports: ~2-4 s here, more on a busy
# machine) plus milliseconds; before these checks the alias bomb took 55 s and a MemoryError.
SUBPROCESS_SECONDS = 15
IN_PROCESS_SECONDS = 5


# --------------------------------------------------------------------------- bad files


def bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs: each anchor a list of `width` aliases of the one before (9**9 values
    expanded, about 1 KB written)."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def smoke_with(text: str) -> str:
    """The smoke config with more YAML appended (a problem inside an otherwise good file)."""
    return SMOKE.read_text() + text


def task_file_with_an_empty_question(tmp_path: Path) -> Path:
    records = [json.loads(line) for line in GSM8K.read_text().splitlines()]
    records[1]["question"] = "   "
    path = tmp_path / "gsm8k_blank.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


HUGE = "a 50 MB file with one unknown key"  # written to disk in write_config, never held whole

# id -> (file content: text, bytes, HUGE or None for the smoke config; overrides; what the line names)
FILE_CASES = {
    "alias bomb": (bomb(), [], r"config file '.*c\.yaml': holds more than 100000 values once its aliases"),
    "100000 nested brackets": ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", [],
                               r"config file '.*c\.yaml': nested deeper than 64 levels"),
    "50 MB file with one unknown key": (HUGE, [], r"config file '.*c\.yaml' is larger than 1 MiB"),
    "duplicate section": (smoke_with("train:\n  lr: 1.0e-4\n"), [],
                          r"config file '.*c\.yaml': duplicate key 'train' at line \d+ and line \d+"),
    "duplicate nested key": ("train:\n  lr: 1.0e-3\n  steps: 1\n  lr: 1.0e-4\n", [],
                             r"config file '.*c\.yaml': duplicate key 'train\.lr' at line 2 and line 4"),
    "empty file": ("# nothing but a comment\n\n", [], r"config file '.*c\.yaml' is empty"),
    "non-UTF-8 file": ("model:\n  name: tiny  # caf\xe9\n".encode("latin-1"), [],
                       r"config file '.*c\.yaml' is not UTF-8 text"),
    "YAML syntax error": ("train: [1, 2\n", [], r"config file '.*c\.yaml' is not valid YAML: .*line 2"),
    "a list at top level": ("- train\n", [], r"config file '.*c\.yaml' must hold a mapping at top level"),
    "override value bomb": (None, ["workflow.params={a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "
                                   + ", ".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]"
                                               for p, c in zip("abcdefg", "bcdefgh")) + "}"],
                            r"override workflow\.params: holds more than 100000 values"),
}

OVERRIDE_CASES = {
    "grad_clip nan": (["train.grad_clip=.nan"], r"train\.grad_clip must be a finite number, got nan"),
    "weight_decay nan": (["train.weight_decay=.nan"], r"train\.weight_decay must be a finite number"),
    "kl_beta inf": (["train.kl_beta=.inf"], r"train\.kl_beta must be a finite number, got inf"),
    "entropy_alpha nan": (["train.entropy_alpha=.nan"], r"train\.entropy_alpha must be a finite number"),
    "lr inf": (["train.lr=.inf"], r"train\.lr must be a finite number, got inf"),
    "lr 1e300": (["train.lr=1e300"], r"train\.lr must be in \(0, 1\]"),
    "policy_lr negative": (["train.policy_lr={shared: -1.0}"], r"train\.policy_lr\.shared must be in \(0, 1\]"),
    "policy_lr of no policy": (["train.policy_lr={ghost: 1.0e-4}"], r"train\.policy_lr\.ghost: unknown policy 'ghost'"),
    "seed -1": (["seed=-1"], r"seed must be in \[0, 2\*\*32 - 1\]"),
    "device foo": (["device=foo"], r"device must be 'cpu', 'cuda', 'cuda:N' .* got 'foo'"),
    "device cuda:x": (["device=cuda:x"], r"device must be .* got 'cuda:x'"),
    "success_component nosuch": (["eval.success_component=nosuch"],
                                 r"eval\.success_component must be a reward component of task pack 'math': "
                                 r"one of \['correct', 'format'\]"),
    "model.name not a model folder": (["model.name=../../../../etc"], r"model\.name '\.\./\.\./\.\./\.\./etc' is not"),
    "model.name unknown": (["model.name=gpt2"], r"model\.name 'gpt2' is not a known model name nor an existing folder"),
    "agent no workflow declares": (["agents.solvr.system_prompt=hi"],
                                   r"agents\.solvr: no workflow declares an agent 'solvr'; did you mean "
                                   r"'solver'\? workflow 'parallel' declares \['aggregator', 'solver'\]"),
    "unknown top-level key": (["trian.steps=1"], r"unknown key\(s\) \['trian'\]"),
    "wrong type": (["train.steps=abc"], r"train\.steps must be an integer, got str 'abc'"),
    "negative steps": (["train.steps=-1"], r"train\.steps must be > 0, got -1"),
    # issue 55: nothing unbounded, nothing silently accepted
    "train_size 1e9": (["task.train_size=1000000000"],
                       r"task\.train_size must be <= 1000000 \(a split is generated or read whole"),
    "heldout_size 1e9": (["task.heldout_size=1000000000"], r"task\.heldout_size must be <= 1000000"),
    "group_size 1e9": (["group_size=1000000000"],
                       r"group_size \(1000000000\) x train\.tasks_per_step \(4\) = 4000000000 rollouts "
                       r"a step exceeds the cap of 1000000 \(a documented bound"),
    "output_dir empty": (["output_dir="], r"output_dir is empty: the run would write its files into "
                                          r"the working directory"),
    "reward timeout_s -1": (["task.reward.timeout_s=-1"],
                            r"task\.reward\.timeout_s must be in \(0, 3600\] seconds \(or null"),
    "reward timeout_s 1e308": (["task.reward.timeout_s=1e308"], r"task\.reward\.timeout_s must be in \(0, 3600\]"),
    "reward weights 1e308": (["task.reward.correct_weight=1e308", "task.reward.format_weight=1e308"],
                             r"task\.reward\.correct_weight \+ task\.reward\.format_weight must be finite"),
    "temperature 1e-30": (["sampling.temperature=1e-30"],
                          r"sampling: temperature must be 0 \(greedy\) or >= 0\.001 .* got 1e-30"),
    "agent temperature 1e-30": (["agents.solver.sampling={temperature: 0.00001}"],
                                r"agents\.solver\.sampling: temperature must be 0 \(greedy\) or >= 0\.001"),
}

# issue 55, section 3: damaged or foreign values named by their key
OVERRIDE_CASES.update({
    "template attribute access": (["agents.solver.template={input.x}"],
                                  r"agents\.solver\.template: bad template '\{input\.x\}': \{input\.x\} is "
                                  r"not one of its fields; it may use \['input'\]"),
    "template indexing": (["agents.solver.template={input[0]}"], r"agents\.solver\.template: bad template"),
    "min_digits 5000": (["task.difficulty.min_digits=5000", "task.difficulty.max_digits=5000"],
                        r"task\.difficulty\.min_digits must be <= 4300 .* got 5000"),
    "system_prompt lone surrogate": (["agents.solver.system_prompt=a\ud800"],
                                     r"agents\.solver\.system_prompt: holds a lone surrogate \(U\+D800\)"),
})

# the few cases that run as the command a user types (the rest run in-process)
SUBPROCESS_CASES = ["alias bomb", "100000 nested brackets", "duplicate nested key", "device foo",
                    "agent no workflow declares", "train_size 1e9"]


def write_config(tmp_path: Path, content: str | bytes | None) -> Path:
    if content is None:
        return SMOKE
    path = tmp_path / "c.yaml"
    if content is HUGE:  # only 1 MiB + 1 byte of it may be read
        with path.open("w") as f:
            f.write("train:\n  steps: 1\nbogus: '")
            f.write("x" * (50 * 1024 * 1024))
            f.write("'\n")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def case_args(case: str, tmp_path: Path) -> tuple[list[str], str]:
    """The command line (after `srpo`) of a case and the pattern its one line must match."""
    if case in FILE_CASES:
        content, overrides, pattern = FILE_CASES[case]
        config = write_config(tmp_path, content)
    else:
        (overrides, pattern), config = OVERRIDE_CASES[case], SMOKE
    return ["train", str(config), f"output_dir={tmp_path / 'run'}", "train.steps=1", *overrides], pattern


def assert_one_line(err: str, pattern: str, elapsed: float, limit: float) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), err
    assert lines[0].startswith("srpo train: "), lines[0]
    assert "Traceback" not in err
    assert re.search(pattern, lines[0]), lines[0]
    assert elapsed < limit, f"{elapsed:.1f} s: {lines[0]}"


ALL_CASES = [*FILE_CASES, *OVERRIDE_CASES, "empty question in a task file"]


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c not in SUBPROCESS_CASES])
def test_a_bad_config_is_one_line_and_exit_2_in_process(case, tmp_path, capsys):
    if case == "empty question in a task file":
        path = task_file_with_an_empty_question(tmp_path)
        args = ["train", str(SMOKE), f"output_dir={tmp_path / 'run'}", "task.source=gsm8k",
                f"task.path={path}", "task.train_size=1", "task.heldout_size=1",
                "train.tasks_per_step=1", "eval.size=1"]
        pattern = r"gsm8k_blank\.jsonl:line 2: required field 'question' is empty"
    else:
        args, pattern = case_args(case, tmp_path)
    start = time.perf_counter()
    code = main(args)
    elapsed = time.perf_counter() - start
    assert code == 2
    assert_one_line(capsys.readouterr().err, pattern, elapsed, IN_PROCESS_SECONDS)
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_a_bad_config_is_one_line_and_exit_2_from_the_command_line(case, tmp_path):
    args, pattern = case_args(case, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SRPO_DEBUG", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "srpo.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert_one_line(proc.stderr, pattern, elapsed, SUBPROCESS_SECONDS)


# --------------------------------------------------------------------------- the loader


def test_a_duplicate_key_is_named_with_its_path_and_both_lines_at_any_depth():
    with pytest.raises(ConfigError, match=r"^f: duplicate key 'a\.b\[0\]\.c' at line 3 and line 4;"):
        load_yaml("a:\n  b:\n    - c: 1\n      c: 2\n", "f")
    with pytest.raises(ConfigError, match=r"^f: duplicate key 'x\.k' at line 1 and line 1;"):
        load_yaml("x: {k: 1, k: 2}\n", "f")  # a flow mapping on one line
    with pytest.raises(ConfigError, match=r"^f: duplicate key 'a' at line 1 and line 3;"):
        load_yaml("a: 1\nb: 2\na: 3\n", "f")


def test_a_merge_key_may_be_overridden_and_aliases_within_the_budget_load():
    text = ("defaults: &d {temperature: 0.7, max_new_tokens: 8}\n"
            "solver:\n  <<: *d\n  temperature: 1.0\n"
            "aggregator: {sampling: *d}\n"
            "many: &m [1, 2, 3]\nmore: [*m, *m, *m]\n")
    data = load_yaml(text, "f")
    assert data == yaml.safe_load(text)
    assert data["solver"] == {"temperature": 1.0, "max_new_tokens": 8}


def test_a_config_file_that_uses_anchors_loads(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(smoke_with("agents:\n  solver: {sampling: &s {temperature: 0.7}}\n"
                               "  aggregator: {sampling: *s}\n"))
    cfg = load_config(path, check_machine=False)
    assert cfg.agents["aggregator"].sampling == {"temperature": 0.7} == cfg.agents["solver"].sampling


def test_the_size_bound_is_exact_at_its_edge(monkeypatch):
    monkeypatch.setattr(yaml_reader, "MAX_NODES", 50)  # the rule, without parsing 100,000 values
    # the top mapping, the key "x" and the list are 3 nodes
    assert len(load_yaml(f"x: [{', '.join(['1'] * 47)}]\n", "f")["x"]) == 47
    with pytest.raises(ConfigError, match="holds more than 50 values"):
        load_yaml(f"x: [{', '.join(['1'] * 48)}]\n", "f")
    assert load_yaml("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [*a, *a, *a]\n", "f")["b"][2][9] == 10
    with pytest.raises(ConfigError, match="holds more than 50 values once its aliases"):
        load_yaml("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [*a, *a, *a, *a]\n", "f")


def test_the_depth_bound_is_exact_at_its_edge():
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # the top mapping is a level too
    assert load_yaml(f"x: {nested}\n", "f") is not None
    with pytest.raises(ConfigError, match="nested deeper than 64 levels"):
        load_yaml(f"x: [{nested}]\n", "f")
    with pytest.raises(ConfigError, match="nested deeper than 64 levels with its aliases expanded"):
        load_yaml(f"a: &a {'[' * 40}{']' * 40}\nb: {'[' * 30}*a{']' * 30}\n", "f")


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"^f: a recursive alias"):
        load_yaml("a: &a [1, *a]\n", "f")


def test_an_override_value_goes_through_the_same_loader():
    assert parse_override("workflow.params={k: &k 3, j: *k}", Config) == (["workflow", "params"], {"k": 3, "j": 3})
    with pytest.raises(ConfigError, match=r"^override workflow\.params: duplicate key 'k'"):
        parse_override("workflow.params={k: 1, k: 2}", Config)
    with pytest.raises(ConfigError, match=r"^override train\.adam_betas is not valid YAML: .*\(line 1, column"):
        parse_override("train.adam_betas=[0.9,", Config)


def test_the_projects_yaml_files_read_as_plain_yaml_reads_them():
    files = subprocess.run(["git", "ls-files", "srpo/presets/*.yaml", "srpo/presets/*.yaml",
                            "benchmarks/*.yaml", "recipes/*.yaml"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 20
    for name in files:
        text = (ROOT / name).read_text()
        assert load_yaml(text, name) == yaml.safe_load(text), name


def test_a_config_error_is_one_line():
    assert str(ConfigError("a\n  b\n\nc")) == "a b c"


# --------------------------------------------------------------------------- finite floats


def float_keys(cls=Config, prefix=""):
    """The dotted key of every float field of the schema's sections (pack settings aside)."""
    for name, field in cls.model_fields.items():
        tp = _declared(field.annotation)
        key = f"{prefix}{name}"
        if _is_section(tp):
            yield from float_keys(tp, key + ".")
        elif tp is float:
            yield key


def test_the_schema_has_float_fields_to_check():
    assert {"train.lr", "train.grad_clip", "sampling.temperature", "policies.lora.alpha"} <= set(float_keys())


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_every_float_field_refuses_nan_and_inf_by_name(value):
    for key in [*float_keys(), "task.reward.correct_weight", "task.reward.timeout_s"]:
        with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')} must be a finite number"):
            load_config(SMOKE, [f"{key}={value}"], check_machine=False)
