"""docs/task-packs.md, "A pack and its workflow in one file": the pack file, its config and the
test the page tells users to copy, taken verbatim and run (the workflow declares
`default_agents` and votes with the pack's answer key through `ctx.answer_key`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "docs" / "task-packs.md").read_text(encoding="utf-8")
    section = text.split("## A pack and its workflow in one file", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_the_docs_pack_its_config_and_its_test_run(tmp_path, monkeypatch):
    (pack, user_test), (config,) = _blocks("python"), _blocks("yaml")
    (tmp_path / "count_pack.py").write_text(pack)
    (tmp_path / "count.yaml").write_text(config)
    monkeypatch.chdir(tmp_path)  # the config names count_pack.py relative to the working directory
    namespace: dict = {}
    exec(compile(user_test, "test_count_pack.py", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert tests
    for test in tests:
        test()


def test_the_docs_default_agents_reach_the_agent(tmp_path, monkeypatch):
    """What the page says of `default_agents`: the role gets the workflow's prompt and sampling,
    and a config override of one sampling field keeps the rest."""
    from srpo.build import build_agents
    from srpo.config import load_config

    (pack, _), (config,) = _blocks("python"), _blocks("yaml")
    (tmp_path / "count_pack.py").write_text(pack)
    (tmp_path / "count.yaml").write_text(config)
    monkeypatch.chdir(tmp_path)
    counter = build_agents(load_config("count.yaml"))["counter"]
    assert counter.system_prompt == "You count letters. Reply with a number."
    assert counter.sampling.max_new_tokens == 8
    changed = build_agents(load_config("count.yaml", ["agents.counter.sampling.max_new_tokens=16"]))
    assert changed["counter"].sampling.max_new_tokens == 16
    assert changed["counter"].system_prompt == "You count letters. Reply with a number."
