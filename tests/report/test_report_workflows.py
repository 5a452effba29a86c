"""The episodes log and the report for every built-in workflow, mixed and routed batches, search
episodes and a user workflow loaded from a file: scripted agents (no model), one step each."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from report_helpers import REPO, open_report

from srpo.batch import build_flat_batch
from srpo.models import build_byte_tokenizer
from srpo.objective import get_method, prepare_step
from srpo.objective.methods import SetUpdateState
from srpo.record import episodes_log
from srpo.record.episodes_log import UpdateRecord
from srpo.record.report import collect_run, write_report
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.tasks.math import MathReward
from srpo.tasks.search.documents import Passage
from srpo.tasks.search.env import SearchEnv
from srpo.tasks.search.rewards import SearchReward
from srpo.types import Task
from srpo.workflows import build_workflow

TOK = build_byte_tokenizer()
ROLES = ("solver", "verifier", "reviser", "aggregator", "debater", "planner", "worker", "router",
         "arithmetic_expert", "algebra_expert", "checker", "searcher", "query_writer", "answerer")
MATH = ["single", "pipeline", "parallel", "debate", "planner", "mixed", "routed"]
SEARCH = ["search_single", "search_parallel", "search_planner", "search_routed"]


class OneDocRetriever:
    """Every query finds the one document that answers it."""

    def search(self, queries, k):
        return [[Passage("marr", "Ilsa Marr", "Ilsa Marr was a shipwright born in Kessel.", 1.0, 0)]
                for _ in queries]


def script(req) -> str:
    """Math roles answer 4 (with a varied format, so rewards differ); search roles search once,
    then answer."""
    seen = TOK.decode(list(req.prompt_ids))
    if req.agent == "router":
        return "search" if "search" in seen.split("assistant")[0] and "direct" in seen else "algebra_expert, checker"
    if req.agent == "planner":
        return "1. find the founder\n2. find where she was born"
    if req.agent in ("searcher", "query_writer"):  # its response so far: after the prompt
        so_far = seen.rpartition("<|im_start|>assistant\n")[2]
        return "<answer>Kessel</answer>" if "<information>" in so_far else "<search>Ilsa Marr born</search>"
    if req.agent == "answerer":
        return "<answer>Kessel</answer>"
    return "so \\boxed{4}" if len(seen) % 2 else "4"


def run_workflow(name: str, tmp_path: Path):
    agents = [
        AgentSpec(
            r,
            system_prompt=f"You are the {r}.",
            sampling=SamplingParams(
                max_new_tokens=48, stop=("</search>",) if r in ("searcher", "query_writer") else ()
            ),
        )
        for r in ROLES
    ]
    backend = ScriptedBackend(PolicySet.scripted(TOK, ("shared",)), script, logprob=-1.0)
    if name in SEARCH:
        wf = build_workflow(name).with_environment(SearchEnv(OneDocRetriever(), top_k=1, max_turns=3))
        reward = SearchReward(em_weight=1.0, f1_weight=0.0, format_weight=0.1)
        tasks = [Task(f"q{i}", f"Where was Ilsa Marr born? ({i})", "Kessel") for i in range(2)]
    else:
        wf = build_workflow(name) if name != "critic" else _critic_loop(tmp_path)
        reward = MathReward(correct_weight=1.0, format_weight=0.5, format_rule="any")
        tasks = [Task(f"t{i}", f"What is {i} + 4 - {i}?", "4") for i in range(2)]
    return RolloutRunner(agents, backend, reward, seed=0).run(tasks, wf, group_size=2).episodes


def _critic_loop(tmp_path: Path):
    """The user workflow of docs/workflows.md, loaded from its file."""
    text = (REPO / "docs" / "workflows.md").read_text().split("## Writing a workflow in one file", 1)[1]
    path = tmp_path / "critic_loop.py"
    path.write_text(re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1))
    return build_workflow(f"{path}:CriticLoop")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory whose step i holds the episodes of workflow i (with a made-up update)."""
    tmp = tmp_path_factory.mktemp("workflows")
    run = tmp / "run"
    rows = []
    spec = get_method("srpo")
    for step, name in enumerate(MATH + SEARCH + ["critic"], start=1):
        eps = run_workflow(name, tmp)
        batch, metrics = prepare_step(spec, build_flat_batch(eps, 0), None)
        record = UpdateRecord(batch.num_sets)
        s = batch.num_sets
        record.add(range(s), SetUpdateState(torch.linspace(-0.1, 0.1, s), (torch.arange(s) % 2).float(), torch.ones(s)))
        skipped = (batch.set_advantages == 0).tolist()
        recs = episodes_log.episode_records(
            eps, step=step, prompt_text=lambda m: TOK.decode(m.prompt_ids), batch=batch, update=record, skipped=skipped
        )
        episodes_log.write_records(episodes_log.step_file(run, step), recs)
        rows.append({"step": step, "loss": 0.0, "rollout/episodes": float(len(eps)), **metrics})
    (run / "config.yaml").write_text(yaml.safe_dump({"workflow": {"name": "several"}, "train": {"steps": len(rows)}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_report(run)
    return run


def test_every_workflow_keeps_its_transitions_and_members(run_dir):
    data = collect_run(run_dir)
    by_step = {s: [e for e in data["episodes"] if e["step"] == s] for s in data["metrics"]["steps"]}
    names = MATH + SEARCH + ["critic"]
    for step, name in enumerate(names, start=1):
        eps = by_step[step]
        assert len(eps) == 4
        workflows = {e["workflow"] for e in eps}
        assert workflows == ({"critic_loop"} if name == "critic" else workflows if name == "mixed" else {name})
        row = next(
            r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["step"] == step
        )
        sizes = Counter(t["size"] for e in eps for t in e["transitions"])
        assert {f"sets/k{k}/count": float(n) for k, n in sizes.items()} == {
            k: v for k, v in row.items() if re.fullmatch(r"sets/k\d+/count", k)
        }
        for e in eps:
            for t in e["transitions"]:
                assert t["size"] == len(t["members"]) and t["skipped"] == (t["advantage"] == 0.0)
                assert all(m["prompt"] and m["agent"] in ROLES for m in t["members"])
    mixed = by_step[names.index("mixed") + 1]
    assert {e["metadata"].get("mixed_from") for e in mixed} == {"mixed"}
    routed = by_step[names.index("routed") + 1]
    assert {t["event"] for e in routed for t in e["transitions"]} >= {"route", "experts"}
    search = by_step[names.index("search_single") + 1]
    text = search[0]["transitions"][0]["members"][0]["text"]  # one searcher member spans its turns
    assert "<search>Ilsa Marr born</search>" in text and "<information>" in text and "<answer>Kessel</answer>" in text
    assert search[0]["reward_components"]["em"] == 1.0


def test_the_report_shows_search_turns_marked_and_every_workflow_without_error(run_dir):
    names = MATH + SEARCH + ["critic"]
    with open_report(run_dir / "report.html") as page:
        assert page.errors == [] and page.requests == []
        for step, _name in enumerate(names, start=1):
            page.select_option("#f-step", str(step))
            assert int(page.locator("#ep-counts").get_attribute("data-episodes")) == 4
            page.locator("#ep-list tbody tr").first.click()
            assert page.locator("#ep-detail .transition").count() >= 1
        page.select_option("#f-step", str(names.index("search_single") + 1))
        member = page.locator("#ep-detail .member").first
        assert member.locator(".tag-search").first.inner_text() == "<search>Ilsa Marr born</search>"
        assert "shipwright born in Kessel" in member.locator(".tag-info").first.inner_text()
        assert member.locator(".tag-answer").first.inner_text() == "<answer>Kessel</answer>"
        page.select_option("#f-step", "")
        page.select_option("#f-workflow", "critic_loop")  # the user workflow, loaded from a file
        assert int(page.locator("#ep-counts").get_attribute("data-episodes")) == 4
        assert page.errors == []
