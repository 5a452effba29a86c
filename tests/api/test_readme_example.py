"""The README's Python example runs as printed: on the tiny model in the fast suite (the model
argument is the one substitution), and exactly verbatim on SmolLM2 in the slow one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

# SRPOTrainer registers workflows process-wide: undo this file's registrations (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("workflows_registered_here_stay_here")


README = Path(__file__).resolve().parents[2] / "README.md"
START, END = "<!-- python-api-example:start -->", "<!-- python-api-example:end -->"
MODEL = 'model="smollm2"'


def readme_example() -> str:
    """The ```python block between the README's example markers."""
    text = README.read_text()
    assert text.count(START) == 1 and text.count(END) == 1, "the README needs one example block"
    block = text.split(START, 1)[1].split(END, 1)[0]
    found = re.fullmatch(r"\s*```python\n(.*?)```\s*", block, re.S)
    assert found, "the example block holds one ```python fenced block"
    return found.group(1)


def run_example(source: str, workdir: Path, monkeypatch) -> dict:
    """exec the example in `workdir` (its output_dir is relative); its namespace."""
    monkeypatch.chdir(workdir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the example sets no threads; the test machine's cores are shared
    namespace: dict = {"__name__": "readme_example"}
    try:
        exec(compile(source, str(README), "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
    return namespace


def check_result(namespace: dict) -> None:
    result = namespace["result"]
    run = Path(result.run_dir)
    if not run.is_absolute():
        run = Path.cwd() / run
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, result.steps_done + 1))
    assert result.steps_done >= 1
    assert result.before is not None and result.after is not None
    assert result.before.n == result.after.n > 0
    for label in ("before", "after"):
        saved = json.loads((run / "eval" / f"{label}.json").read_text())
        assert saved["n"] == result.before.n and 0.0 <= saved["accuracy"] <= 1.0


def test_the_example_is_short_and_uses_the_api():
    source = readme_example()
    assert len(source.strip().splitlines()) <= 15
    assert "SRPOTrainer(" in source and ".train()" in source
    assert source.count(MODEL) == 1


def test_the_readme_example_runs_on_the_tiny_model(tmp_path, monkeypatch):
    source = readme_example()
    assert source.count(MODEL) == 1  # the one substitution
    namespace = run_example(source.replace(MODEL, 'model="tiny"'), tmp_path, monkeypatch)
    assert namespace["trainer"].config.model.name == "tiny"
    check_result(namespace)


@pytest.mark.slow
def test_the_readme_example_runs_verbatim(tmp_path, monkeypatch):
    """SmolLM2 with LoRA, exactly as printed (a few minutes on two CPU cores)."""
    namespace = run_example(readme_example(), tmp_path, monkeypatch)
    assert namespace["trainer"].config.model.name == "smollm2"
    check_result(namespace)
