"""search_parallel's per-transition credit (`credit: retrieval`): each query-r set is rewarded by
what its own retrieval found (recall gain over the supporting documents), the read-r sets and
the episode keep the outcome; hand-computed rewards, the default left unchanged, the error for
tasks without supporting documents, SRPO's set advantages against MAGRPO's episode-level ones,
and the study config (loads, and a 1-task rollout runs on the tiny model)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pytest
from test_search_env import KeywordRetriever

from srpo.batch import build_flat_batch
from srpo.models import build_byte_tokenizer
from srpo.objective import get_method
from srpo.objective.methods import step_advantages
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.rollout.runner import rollout_metrics
from srpo.tasks.search.env import SearchEnv, recall_gain
from srpo.tasks.search.rewards import SearchReward
from srpo.types import Task
from srpo.workflows import build_workflow

ROOT = Path(__file__).resolve().parents[2]
TOK = build_byte_tokenizer()
REWARD = SearchReward(em_weight=1.0, f1_weight=0.0, format_weight=0.1)
ROLES = ("writer_a", "writer_b", "answerer")
GOLD = ["veltra", "marr"]  # the 2-hop chain: Veltra (founded by Ilsa Marr) -> Ilsa Marr (born in Kessel)


def task(task_id="q", supporting=GOLD):
    metadata = {"hops": 2} if supporting is None else {"supporting_doc_ids": supporting, "hops": 2}
    return Task(task_id, "Where was the founder of Veltra born?", "Kessel", metadata=metadata)


def script(round1, round2, answer):
    """Two writers (distinct roles, so each slot can write its own query) and an answerer that
    asks for a second round, then answers `answer`. round1/round2: (writer_a's, writer_b's)."""

    def respond(req):
        prompt = TOK.decode(list(req.prompt_ids))
        if req.agent == "answerer":
            return "Missing: the birthplace." if "another search round follows" in prompt else answer
        first = "Still missing: everything" in prompt
        return (round1 if first else round2)[ROLES.index(req.agent)]

    return respond


# Episode "found": round 1 finds a new supporting document (veltra: gain 1/2); round 2 finds only
# one it already had (veltra again) and a non-supporting one (ostmark): gain 0. Answers right.
FOUND = script(("<search>Veltra</search>", "<search>Veltra</search>"),
               ("<search>Veltra</search>", "<search>Ostmark</search>"), "<answer>Kessel</answer>")
# Episode "late": round 1 is invalid (no tag, no retrieval: gain 0); round 2 finds both
# (Ilsa Marr born -> marr, veltra; Kessel copper -> kessel, marr): gain 2/2. Answers wrong.
LATE = script(("Veltra?", "I would search."),
              ("<search>Ilsa Marr born</search>", "<search>Kessel copper</search>"),
              "<answer>Dorn</answer>")


def episode(respond, params=None, tasks=None):
    agents = [AgentSpec(r, system_prompt=f"You are {r}.",
                        sampling=SamplingParams(max_new_tokens=64, stop=("</search>",)))
              for r in ROLES]
    backend = ScriptedBackend(PolicySet.scripted(TOK, ("shared",)), respond, logprob=-1.0)
    # the definition's sets: an invalid writer is not consumed (train.unconsumed: singleton)
    runner = RolloutRunner(agents, backend, REWARD, unconsumed="singleton")
    env = SearchEnv(KeywordRetriever(), top_k=2)
    wf = build_workflow("search_parallel", {"writers": ["writer_a", "writer_b"], "rounds": 2,
                                            **(params or {})}).with_environment(env)
    (ep,) = runner.run(tasks or [task()], wf, group_size=1).episodes
    return ep, backend, env


RETRIEVAL = {"credit": "retrieval"}


def test_recall_gain_counts_only_new_supporting_documents():
    assert recall_gain({"veltra"}, set(), GOLD) == 0.5
    assert recall_gain({"veltra", "ostmark"}, {"veltra"}, GOLD) == 0.0
    assert recall_gain(set(), {"veltra"}, GOLD) == 0.0
    assert recall_gain({"marr", "veltra", "kessel"}, set(), GOLD) == 1.0
    with pytest.raises(ValueError, match="at least one supporting"):
        recall_gain({"veltra"}, set(), [])


def test_query_sets_get_their_retrievals_credit_and_reads_keep_the_outcome():
    found, _, env = episode(FOUND, RETRIEVAL)
    assert env.retriever.calls == [["Veltra", "Veltra"], ["Veltra", "Ostmark"]]
    assert [(s.event, s.size) for s in found.transitions] == [
        ("query-1", 2), ("read-1", 1), ("query-2", 2), ("read-2", 1)]
    assert [s.reward for s in found.transitions] == [0.5, None, 0.0, None]
    assert found.reward == pytest.approx(1.1)  # em 1 + format 0.1: the outcome is unchanged
    assert found.set_returns() == pytest.approx([0.5, 1.1, 0.0, 1.1])
    md = found.metadata
    assert (md["retrieval_credit_r1"], md["retrieval_credit_r2"]) == (0.5, 0.0)
    assert md["retrieval_credit_total"] == 0.5 == md["recall_at_k"]

    late, _, env = episode(LATE, RETRIEVAL)
    assert env.retriever.calls == [["Ilsa Marr born", "Kessel copper"]]  # round 1 ran nothing
    assert late.metadata["search_invalid"] == 2
    # round 1 ran no query: neither writer was consumed; each is a singleton credited the
    # unconsumed reward (0), and no "query-1" set exists
    assert [(s.event, s.size, s.reward) for s in late.transitions] == [
        ("query-1:unconsumed", 1, 0.0), ("query-1:unconsumed", 1, 0.0), ("read-1", 1, None),
        ("query-2", 2, 1.0), ("read-2", 1, None)]
    assert late.reward == pytest.approx(0.1)  # wrong answer, well formatted
    assert late.set_returns() == pytest.approx([0.0, 0.0, 0.1, 1.0, 0.1])
    assert late.metadata["retrieval_credit_total"] == 1.0 == late.metadata["recall_at_k"]

    m = rollout_metrics([found, late])
    assert m["episode/retrieval_credit_r1"] == 0.25 and m["episode/retrieval_credit_r2"] == 0.5


def test_hit_weight_credits_any_supporting_hit():
    # credit = 0.75 * gain + 0.25 * hit
    found, _, _ = episode(FOUND, {**RETRIEVAL, "credit_hit_weight": 0.25})
    assert [s.reward for s in found.transitions] == [0.625, None, 0.25, None]
    late, _, _ = episode(LATE, {**RETRIEVAL, "credit_hit_weight": 0.25})
    assert [s.reward for s in late.transitions] == [0.0, 0.0, None, 1.0, None]
    assert late.metadata["retrieval_credit_total"] == 1.0


def test_a_round_that_answers_early_credits_only_the_rounds_that_ran():
    early = script(("<search>Veltra</search>", "<search>Ilsa Marr born</search>"), ("x", "x"),
                   "<answer>Kessel</answer>")

    def answers_at_once(req):
        return "<answer>Kessel</answer>" if req.agent == "answerer" else early(req)

    ep, _, _ = episode(answers_at_once, RETRIEVAL)
    assert [(s.event, s.reward) for s in ep.transitions] == [("query-1", 1.0), ("read-1", None)]
    assert "retrieval_credit_r2" not in ep.metadata and ep.metadata["retrieval_credit_total"] == 1.0


def test_between_rounds_note_and_none_run_every_round():
    writers = script(("<search>Veltra</search>", "<search>Veltra</search>"),
                     ("<search>Ilsa Marr born</search>", "<search>Kessel copper</search>"), None)
    prompts = []

    def always_answers(req):  # the answerer answers whenever it reads, even after round 1
        prompts.append((req.agent, TOK.decode(list(req.prompt_ids))))
        return "<answer>Kessel</answer>" if req.agent == "answerer" else writers(req)

    early, _, _ = episode(always_answers, RETRIEVAL)  # answer_or_note: round 1's answer ends it
    assert [(s.event, s.reward) for s in early.transitions] == [("query-1", 0.5), ("read-1", None)]
    for between, events in (("note", ["query-1", "read-1", "query-2", "read-2"]),
                            ("none", ["query-1", "query-2", "read-2"])):
        prompts.clear()
        ep, _, env = episode(always_answers, {**RETRIEVAL, "between_rounds": between})
        # round 1 finds veltra (1/2), round 2 marr (1/2); the last read answers
        assert [s.event for s in ep.transitions] == events
        assert [s.reward for s in ep.transitions if s.event.startswith("query")] == [0.5, 0.5]
        assert env.retriever.calls == [["Veltra", "Veltra"], ["Ilsa Marr born", "Kessel copper"]]
        assert ep.reward == pytest.approx(1.1) and ep.metadata["search_rounds"] == 2
        assert ep.metadata["search_budget_exhausted"] == 0
        round2 = [p for agent, p in prompts if agent.startswith("writer")][2:]
        # note: the first read's whole reply is the note; none: no read, an empty note
        note = "<answer>Kessel</answer>" if between == "note" else ""
        assert len(round2) == 2 and all(f"Still missing: {note}\n" in p for p in round2)
        assert all("Veltra is a river port" in p for p in round2)  # what round 1 found
        assert [agent for agent, _ in prompts].count("answerer") == len(events) - 2
    with pytest.raises(ValueError, match="between_rounds must be one of"):
        build_workflow("search_parallel", {"between_rounds": "never"})


def test_default_credit_is_the_episode_outcome_and_nothing_else_changes():
    for respond in (FOUND, LATE):
        default, _, _ = episode(respond)
        credited, _, _ = episode(respond, RETRIEVAL)
        # every consumed set gets the outcome; LATE's two invalid round-1 writers were not
        # consumed (singletons credited the unconsumed reward, 0)
        consumed = [s.consumed for s in default.transitions]
        assert consumed == ([True] * 4 if respond is FOUND else [False, False, True, True, True])
        assert [s.reward for s in default.transitions] == [None if c else 0.0 for c in consumed]
        assert default.set_returns() == [default.reward if c else 0.0 for c in consumed]
        assert not any(k.startswith("retrieval_credit") for k in default.metadata)
        # the same episode otherwise: outcome, components, members, other metadata
        assert (default.reward, default.reward_components) == (credited.reward,
                                                               credited.reward_components)
        assert [(s.event, s.turn, s.members) for s in default.transitions] == [
            (s.event, s.turn, s.members) for s in credited.transitions]
        assert default.metadata == {k: v for k, v in credited.metadata.items()
                                    if not k.startswith("retrieval_credit")}


@pytest.mark.parametrize("supporting", [None, []])
def test_retrieval_credit_needs_supporting_documents(supporting):
    with pytest.raises(ValueError, match=r"search_parallel.credit='retrieval' needs the task's "
                                         r"supporting documents, but task 'nq/7' has no"):
        episode(FOUND, RETRIEVAL, tasks=[task("nq/7", supporting)])
    ep, _, _ = episode(FOUND, tasks=[task("nq/7", supporting)])  # the default needs none
    assert ep.reward == pytest.approx(1.1)


@pytest.mark.parametrize("params,message", [
    ({"credit": "set"}, r"search_parallel.credit must be one of \['episode', 'retrieval'\]"),
    ({"credit": "retrieval", "credit_hit_weight": 1.5}, "must be a number in \\[0, 1\\]"),
    ({"credit": "retrieval", "credit_hit_weight": True}, "must be a number in \\[0, 1\\]"),
    ({"credit_hit_weight": 0.1}, "applies only with credit: retrieval"),
])
def test_bad_credit_params_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        build_workflow("search_parallel", params)


def _advantages(credit):
    """SRPO's and MAGRPO's per-set advantages for the two episodes as one task's group."""
    eps = [episode(FOUND, {"credit": credit})[0], episode(LATE, {"credit": credit})[0]]
    batch = build_flat_batch(eps, pad_token_id=TOK.pad_token_id)
    # LATE's round 1 ran no query: its two writers are singletons, not a "query-1" set
    assert batch.set_event == ("query-1", "read-1", "query-2", "read-2", "query-1:unconsumed",
                               "query-1:unconsumed", "read-1", "query-2", "read-2")
    return (step_advantages(get_method("srpo"), batch).set.tolist(),
            step_advantages(get_method("magrpo"), batch).set.tolist(), batch)


def test_srpo_set_advantages_follow_the_retrieval_credit_where_magrpo_follows_the_episode():
    srpo, magrpo, batch = _advantages("retrieval")
    returns = [0.5, 1.1, 0.0, 1.1, 0.0, 0.0, 0.1, 1.0, 0.1]  # found's sets, then late's
    assert batch.set_reward.tolist() == pytest.approx(returns)
    # SRPO: one group (the task) of 9 sets: (R_S - mean) / (unbiased std + eps)
    mean, std = statistics.fmean(returns), statistics.stdev(returns)
    assert srpo == pytest.approx([(r - mean) / (std + 1e-6) for r in returns], abs=1e-5)
    # MAGRPO: the episode's value on each of its sets (its unconsumed singletons too: episode
    # credit), episodes [1.1, 0.1] -> +-0.5 / std
    a2 = 0.5 / (statistics.stdev([1.1, 0.1]) + 1e-6)
    assert magrpo == pytest.approx([a2] * 4 + [-a2] * 5, abs=1e-5)
    # the query sets' signs differ: found's round 2 (nothing new) is pushed down, late's
    # round 2 (both documents) up, though their episodes won and lost
    assert srpo[2] < 0 < magrpo[2] and magrpo[7] < 0 < srpo[7]

    # with the default credit, SRPO's set advantages carry the episode's sign on every set
    srpo, magrpo, _ = _advantages("episode")
    assert all(a * b > 0 for a, b in zip(srpo, magrpo))


# --------------------------------------------------------------------------- the study config

CREDIT_CONFIG = ROOT / "studies" / "configs" / "search_parallel_credit.yaml"
TINY = ["model.name=tiny", "model.tokenizer=bytes", "model.hidden_size=64", "model.num_layers=2",
        "model.init_seed=0", "sampling.max_new_tokens=6", "task.train_size=4",
        "task.heldout_size=2", "group_size=2"]


def test_the_study_config_loads_with_retrieval_credit_on_two_hop_questions():
    from srpo.build import load_tasks
    from srpo.config import load_config

    cfg = load_config(str(CREDIT_CONFIG))
    assert cfg.workflow.name == "search_parallel"
    params = cfg.workflow.params
    assert params["credit"] == "retrieval" and params["rounds"] == 2 and params["k"] in (2, 3)
    assert cfg.task.search.hops == [2]
    for t in load_tasks(cfg.task, limit=4):
        assert t.metadata["hops"] == 2 and len(t.metadata["supporting_doc_ids"]) == 2


def test_a_one_task_rollout_of_the_study_config_runs_on_the_tiny_model(tmp_path, capsys):
    from srpo.cli.rollout import add_rollout_commands

    parser = argparse.ArgumentParser(prog="srpo")
    add_rollout_commands(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "eps.jsonl"
    args = parser.parse_args(["rollout", str(CREDIT_CONFIG), *TINY, "--n", "1", "--out", str(out)])
    assert args.handler(args) == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        md = r["metadata"]
        query_sets = [t for t in r["transitions"] if t["event"].startswith("query-")]
        assert query_sets and all(0.0 <= t["return"] <= 1.0 for t in query_sets)
        assert [t["return"] for t in query_sets] == [
            md[f"retrieval_credit_r{i}"] for i in range(1, len(query_sets) + 1)]
        assert all(t["return"] == r["reward"] for t in r["transitions"]
                   if t["event"].startswith("read-"))


def test_in_set_keeps_an_invalid_round_as_one_set_with_its_retrieval_credit():
    """train.unconsumed: in_set (the default): LATE's round 1, where neither writer's query ran,
    stays one "query-1" set of 2 credited its retrieval's 0, as before consumed sets."""
    agents = [AgentSpec(r, system_prompt=f"You are {r}.",
                        sampling=SamplingParams(max_new_tokens=64, stop=("</search>",)))
              for r in ROLES]
    backend = ScriptedBackend(PolicySet.scripted(TOK, ("shared",)), LATE, logprob=-1.0)
    runner = RolloutRunner(agents, backend, REWARD)
    env = SearchEnv(KeywordRetriever(), top_k=2)
    wf = build_workflow("search_parallel", {"writers": ["writer_a", "writer_b"], "rounds": 2,
                                            **RETRIEVAL}).with_environment(env)
    (late,) = runner.run([task()], wf, group_size=1).episodes
    assert [(s.event, s.size, s.reward) for s in late.transitions] == [
        ("query-1", 2, 0.0), ("read-1", 1, None), ("query-2", 2, 1.0), ("read-2", 1, None)]
