"""The search workflows with a scripted policy: active sets, rewards (EM / F1 / format),
observation tokens masked out of the loss, every bad case of the search protocol, config /
build of a search run, and `srpo rollout` end to end on a tiny random model."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from test_search_env import DOCS, KeywordRetriever

from srpo.batch import build_flat_batch
from srpo.models import build_byte_tokenizer
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.rollout.runner import rollout_metrics
from srpo.tasks.search.env import SearchEnv, SearchStats, parse_turn
from srpo.tasks.search.rewards import SearchReward
from srpo.types import Task
from srpo.workflows import build_workflow

ROOT = Path(__file__).resolve().parents[2]
TOK = build_byte_tokenizer()
STOP = ("</search>",)
# em 1, f1 0, format 0.1: a correct, well-formatted answer gives {"em": 1, "f1": 0, "format": 0.1}
REWARD = SearchReward(em_weight=1.0, f1_weight=0.0, format_weight=0.1)
FULL = {"em": 1.0, "f1": 0.0, "cover": 0.0, "format": 0.1}
NONE = {"em": 0.0, "f1": 0.0, "cover": 0.0, "format": 0.0}


def make_tasks(n=2):
    return [Task(f"q{i}", f"Where was the founder of Veltra born? ({i})", "Kessel",
                 metadata={"supporting_doc_ids": ["veltra", "marr"], "hops": 2})
            for i in range(n)]


def seen(req) -> str:
    """Everything the agent is conditioned on (prompt + its response so far)."""
    return TOK.decode(list(req.prompt_ids))


def so_far(req) -> str:
    """The agent's response so far (generations and observations), without the prompt."""
    return seen(req).rpartition("<|im_start|>assistant\n")[2]


def two_hop(req) -> str:
    """A searcher that looks up the founder, then the founder's birthplace, then answers."""
    s = so_far(req)
    if "shipwright" in s:
        return "<answer>Kessel</answer>"
    if "<information>" in s:
        return "<search>Ilsa Marr born</search>"
    return "<search>Veltra founded</search>"


def runner_for(script, *, stop=STOP, logprob=-1.0, max_new_tokens=96):
    agents = [AgentSpec(r, system_prompt=f"You are the {r}.",
                        sampling=SamplingParams(max_new_tokens=max_new_tokens, stop=stop))
              for r in ("searcher", "query_writer", "answerer", "planner", "router")]
    backend = ScriptedBackend(PolicySet.scripted(TOK, ("shared",)), script, logprob=logprob)
    # the definition's sets: an invalid writer is not consumed (train.unconsumed: singleton)
    return RolloutRunner(agents, backend, REWARD, unconsumed="singleton"), backend


def search_env(**kw):
    return SearchEnv(KeywordRetriever(), **{"top_k": 2, "max_turns": 4, **kw})


def run(name, script, params=None, *, env=None, group_size=2, n=2, **runner_kw):
    runner, backend = runner_for(script, **runner_kw)
    env = env or search_env()
    wf = build_workflow(name, params or {}).with_environment(env)
    result = runner.run(make_tasks(n), wf, group_size=group_size)
    return result, backend, env


# --------------------------------------------------------------------------- search_single


def test_search_single_one_member_spans_the_turns_with_observations_masked():
    result, backend, env = run("search_single", two_hop)
    eps = result.episodes
    # expected turns and observations, recomputed with the environment's own functions
    gens = ["<search>Veltra founded</search>", "<search>Ilsa Marr born</search>",
            "<answer>Kessel</answer>"]
    probe = SearchEnv(KeywordRetriever(), top_k=2)
    obs = [probe.observation(parse_turn(g), SearchStats()) for g in gens[:2]]
    ids = lambda t: TOK(t, add_special_tokens=False)["input_ids"]
    g1, o1, g2, o2, g3 = ids(gens[0]), ids(obs[0]), ids(gens[1]), ids(obs[1]), ids(gens[2])
    g3 = g3 + [TOK.eos_token_id]  # the answer turn ends at eos; the searches at "</search>"
    for e in eps:
        assert [(s.event, s.agents) for s in e.transitions] == [("search", ("searcher",))]
        (m,) = e.transitions[0].members
        assert m.response_ids == g1 + o1 + g2 + o2 + g3
        # loss_mask is 0 exactly on the inserted observation tokens
        assert m.loss_mask == ([1] * len(g1) + [0] * len(o1) + [1] * len(g2) + [0] * len(o2)
                               + [1] * len(g3))
        assert m.sampling_logprobs == [-1.0 if k else 0.0 for k in m.loss_mask]
        assert m.stop_reason == "eos"
        assert e.reward_components == pytest.approx(FULL) and e.reward == pytest.approx(1.1)
        md = e.metadata
        assert (md["search_turns"], md["search_calls"], md["search_invalid"],
                md["search_budget_exhausted"]) == (3, 2, 0, 0)
        assert md["recall_at_k"] == 1.0 and md["extracted_answer"] == "Kessel"
        assert (md["score_em"], md["score_f1"], md["score_format"]) == (1.0, 1.0, 1.0)
    # 3 rounds, each one batched call over the 4 episodes; one retriever call per search turn
    assert backend.calls == [("shared", ["searcher"] * 4)] * 3
    assert len(env.retriever.calls) == 8
    batch = build_flat_batch(eps, pad_token_id=TOK.pad_token_id)
    assert batch.response_mask[0].tolist()[: len(m.loss_mask)] == [bool(x) for x in m.loss_mask]


def test_turn_budget_exhausted_without_an_answer():
    result, _, _ = run("search_single", lambda r: "<search>Veltra founded</search>",
                       {"max_turns": 3}, n=1, group_size=1)
    (e,) = result.episodes
    assert e.reward_components == NONE and e.reward == 0.0
    md = e.metadata
    # 3 generations; the searches of turns 1 and 2 ran, the last one had no turn left to read it
    assert (md["search_turns"], md["search_calls"], md["search_budget_exhausted"]) == (3, 2, 1)
    assert md["extracted_answer"] is None
    (m,) = e.transitions[0].members
    assert m.text.count("<information>") == 2 and m.stop_reason == "stop"


@pytest.mark.parametrize("first,reason", [
    ("<search>Veltra founded", "<search> is not closed"),  # unclosed, then eos
    ("<search>Veltra <search>founded</search>", "<search> is not closed before <search>"),
    ("<search> </search>", "empty query"),
    ("I am not sure.", "no <search> or <answer> tag"),
])
def test_malformed_turn_gets_a_note_and_costs_the_format(first, reason):
    def script(req):
        return "<answer>Kessel</answer>" if "Invalid action" in so_far(req) else first

    result, _, env = run("search_single", script, n=1, group_size=1)
    (e,) = result.episodes
    assert env.retriever.calls == []  # the malformed turn ran no search
    assert e.metadata["search_invalid"] == 1 and e.metadata["search_errors"] == [reason]
    (m,) = e.transitions[0].members
    assert f"<information>\nInvalid action: {reason}." in m.text
    # the answer is right, but the trajectory broke the protocol: format 0 (except "no tag",
    # which is plain text and no protocol error)
    fmt = 0.1 if reason.startswith("no <search>") else 0.0
    assert e.reward_components == pytest.approx({"em": 1.0, "f1": 0.0, "cover": 0.0, "format": fmt})


def test_too_many_calls_in_one_turn_are_dropped_with_a_note():
    def script(req):
        if "<information>" in so_far(req):
            return "<answer>Kessel</answer>"
        return "<search>Veltra</search><search>Ilsa Marr</search><search>Kessel</search>"

    # no stop string: the searcher may write several searches in one generation
    result, _, env = run("search_single", script, env=search_env(max_calls_per_turn=2),
                         stop=(), n=1, group_size=1)
    (e,) = result.episodes
    assert env.retriever.calls == [["Veltra", "Ilsa Marr"]]
    assert e.metadata["search_dropped"] == 1 and e.metadata["search_calls"] == 2
    assert "Query: Kessel\n(not run: at most 2 searches per turn)" in e.transitions[0].members[0].text


def test_overlong_observation_is_truncated_and_counted():
    result, _, _ = run("search_single", two_hop, env=search_env(max_observation_chars=40),
                       n=1, group_size=1)
    (e,) = result.episodes
    assert e.metadata["search_truncated"] == 3  # every observation (turns 1-3 of 4)
    # the truncated observations hide "shipwright": the searcher never answers
    assert e.metadata["search_budget_exhausted"] == 1 and e.reward == 0.0
    assert "...[truncated]\n</information>" in e.transitions[0].members[0].text


def test_a_search_workflow_without_environment_says_how_to_get_one():
    runner, _ = runner_for(two_hop)
    with pytest.raises(ValueError, match="has no search environment: run it with task.name: search"):
        runner.run(make_tasks(1), build_workflow("search_single"))
    with pytest.raises(ValueError, match="search_single.env must be a SearchEnv"):
        build_workflow("search_single", {"env": {"top_k": 3}})


# --------------------------------------------------------------------------- search_parallel


def parallel_script(req):
    s = seen(req)
    if req.agent == "query_writer":
        # round 2 (the answerer asked for the birthplace): look up the founder
        return "<search>Ilsa Marr born</search>" if "birthplace" in s else "<search>Veltra</search>"
    if "shipwright" in s:
        return "<answer>Kessel</answer>"
    return "Missing: the founder's birthplace."


def test_search_parallel_k_writers_form_one_set_and_one_retrieval_per_round():
    result, backend, env = run("search_parallel", parallel_script, {"k": 3, "rounds": 3})
    for e in result.episodes:
        assert [(s.event, s.agents) for s in e.transitions] == [
            ("query-1", ("query_writer",) * 3), ("read-1", ("answerer",)),
            ("query-2", ("query_writer",) * 3), ("read-2", ("answerer",)),
        ]
        assert [s.size for s in e.transitions] == [3, 1, 3, 1]
        assert e.reward_components == pytest.approx(FULL)
        md = e.metadata
        assert (md["search_rounds"], md["search_calls"], md["search_budget_exhausted"]) == (2, 6, 0)
        assert md["recall_at_k"] == 1.0
        for s in e.transitions:
            for m in s.members:
                assert m.loss_mask == [1] * len(m.response_ids)  # no observation in these
    # one retriever call per round and episode, with the k writers' queries together
    assert env.retriever.calls[:2] == [["Veltra"] * 3, ["Veltra"] * 3]
    assert len(env.retriever.calls) == 4 * 2
    # the round-2 answerer read the merged results: dedup by doc id, best rank first
    # (round 1: veltra rank 0; round 2: marr rank 0, veltra rank 1 -> veltra, marr)
    assert backend.calls == [("shared", ["query_writer"] * 12), ("shared", ["answerer"] * 4)] * 2


def test_search_parallel_reads_merged_results_and_answers_at_the_last_round():
    prompts = []

    def script(req):
        if req.agent == "answerer":
            prompts.append(seen(req))
            return "no idea"  # never answers
        return "<search>Ilsa Marr born</search>"

    result, _, _ = run("search_parallel", script, {"k": 2, "rounds": 2}, n=1, group_size=1)
    (e,) = result.episodes
    assert e.reward_components == NONE and e.metadata["search_budget_exhausted"] == 1
    # merged: each document once, best rank first, even though both writers retrieved them
    assert prompts[0].count("[1] Ilsa Marr.") == 1 and "[2] Veltra." in prompts[0]
    assert "another search round follows" in prompts[0]
    assert "Reply with the answer as <answer>" in prompts[1]  # the last round must answer


def test_search_parallel_round_one_prompt_and_read_instructions_are_settings():
    writer_prompts, reader_prompts = [], []

    def script(req):
        if req.agent == "answerer":
            reader_prompts.append(seen(req))
            return "no idea"
        writer_prompts.append(seen(req))
        return "<search>Ilsa Marr born</search>"

    params = {"k": 2, "rounds": 2, "first_query_prompt": "FIRST: {question}",
              "more_instruction": "MORE-NOW", "final_instruction": "FINAL-NOW"}
    run("search_parallel", script, params, n=1, group_size=1)
    assert len(writer_prompts) == 4 and len(reader_prompts) == 2
    # round 1 (two writers) reads first_query_prompt; round 2 falls back to query_prompt
    assert all("FIRST: Where was the founder" in p for p in writer_prompts[:2])
    assert not any("FIRST:" in p for p in writer_prompts[2:])
    assert "MORE-NOW" in reader_prompts[0] and "FINAL-NOW" not in reader_prompts[0]
    assert "FINAL-NOW" in reader_prompts[1] and "MORE-NOW" not in reader_prompts[1]


def test_search_parallel_first_query_prompt_may_only_name_the_question():
    with pytest.raises(ValueError, match="first_query_prompt.*found"):
        build_workflow("search_parallel", {"first_query_prompt": "{question} {found}"})


def test_search_parallel_invalid_queries_are_counted_and_not_consumed():
    writes = iter(["<search>Veltra</search>", "Veltra?"])  # the first writer's is valid

    def script(req):
        return "<answer>Kessel</answer>" if req.agent == "answerer" else next(writes)

    result, _, env = run("search_parallel", script, {"k": 2, "rounds": 1}, n=1, group_size=1)
    (e,) = result.episodes
    # the retrieval ran the first writer's query only: the set "query-1" is that writer; the
    # second's output is a singleton of its own, credited the unconsumed reward (0)
    assert env.retriever.calls == [["Veltra"]]
    assert [(s.event, s.size, s.reward) for s in e.transitions] == [
        ("query-1", 1, None), ("query-1:unconsumed", 1, 0.0), ("read-1", 1, None)]
    assert e.transitions[1].members[0].text == "Veltra?"
    assert e.metadata["search_invalid"] == 1 and e.metadata["search_calls"] == 1

    result, _, env = run("search_parallel", lambda req: "<answer>Kessel</answer>"
                         if req.agent == "answerer" else "Veltra?", {"k": 2}, n=1, group_size=1)
    (e,) = result.episodes  # no writer valid: no query set, two singletons
    assert [(s.event, s.size) for s in e.transitions[:2]] == [("query-1:unconsumed", 1)] * 2
    assert env.retriever.calls == [] and e.metadata["search_invalid"] == 2


# --------------------------------------------------------------------------- search_planner


def planner_script(req):
    if req.agent == "planner":
        return "1. Who founded Veltra?\n2. Where was the founder born?"
    if req.agent == "answerer":
        return "<answer>Kessel</answer>" if "shipwright" in seen(req) else "<answer>?</answer>"
    return two_hop(req)


def test_search_planner_plan_search_answer():
    prompts = []

    def script(req):
        if req.agent in ("searcher", "answerer"):
            prompts.append((req.agent, seen(req)))
        return planner_script(req)

    result, _, _ = run("search_planner", script)
    for e in result.episodes:
        assert [(s.event, s.agents) for s in e.transitions] == [
            ("plan", ("planner",)), ("search", ("searcher",)), ("answer", ("answerer",))]
        assert e.reward_components == pytest.approx(FULL)
        assert e.metadata["plan_steps"] == 2 and e.metadata["plan_fallback"] == 0
        assert e.metadata["answer_agent"] == "answerer" and e.metadata["search_calls"] == 2
        (m,) = e.transitions[1].members
        assert 0 in m.loss_mask  # the searcher's observations are masked
    searcher_prompt = next(p for a, p in prompts if a == "searcher")
    assert "1. Who founded Veltra?\n2. Where was the founder born?" in searcher_prompt
    answerer_prompt = next(p for a, p in prompts if a == "answerer")
    assert "Searcher's findings: Kessel" in answerer_prompt
    # everything retrieved, merged: veltra (rank 0 in search 1), marr (rank 0 in search 2)
    assert "[1] Veltra. Veltra is" in answerer_prompt and "[2] Ilsa Marr. Ilsa" in answerer_prompt


def test_search_planner_without_numbered_steps_falls_back_to_the_question():
    def script(req):
        return "just search it" if req.agent == "planner" else planner_script(req)

    result, _, _ = run("search_planner", script, n=1, group_size=1)
    (e,) = result.episodes
    assert e.metadata["plan_fallback"] == 1 and e.reward_components == pytest.approx(FULL)


# --------------------------------------------------------------------------- search_routed


def routed(route):
    def script(req):
        if req.agent == "router":
            return route
        if req.agent == "query_writer":
            return "<search>Ilsa Marr born</search>"
        if req.agent == "answerer":
            return "<answer>Kessel</answer>" if "shipwright" in seen(req) else "<answer>Ostmark</answer>"
        return two_hop(req)
    return script


@pytest.mark.parametrize("route,events,comps,invalid", [
    ("direct", [("route", 1), ("answer", 1)], NONE | {"format": 0.1}, 0),  # wrong from memory
    (" search ", [("route", 1), ("search", 1)], NONE, 0),  # 2 turns: 1 search, no answer
    ("parallel", [("route", 1), ("query-1", 3), ("read-1", 1)], FULL, 0),
    ("Parallel", [("route", 1), ("search", 1)], NONE, 1),  # case matters: invalid
    ("", [("route", 1), ("search", 1)], NONE, 1),
])
def test_search_routed(route, events, comps, invalid):
    result, _, _ = run("search_routed", routed(route))
    for e in result.episodes:
        assert [(s.event, s.size) for s in e.transitions] == events
        penalty = -0.5 if invalid else 0.0
        assert e.reward_components == pytest.approx({**comps, "route_penalty": penalty})
        assert e.metadata["route_invalid"] == invalid
        assert e.metadata["route"] == route.strip() if not invalid else "search"
    m = rollout_metrics(result.episodes)
    assert m["episode/route_invalid"] == invalid and m["reward/route_penalty"] == pytest.approx(
        -0.5 * invalid)


def test_search_routed_single_route_searches_once_then_must_answer():
    result, _, _ = run("search_routed", routed("search"), n=1, group_size=1)
    (e,) = result.episodes
    # search_turns = 2: the 2-hop searcher searched once, then its second search had no turn
    assert e.metadata["search_calls"] == 1 and e.metadata["search_budget_exhausted"] == 1
    assert "route_error" not in e.metadata


def test_search_routed_rejects_bad_params():
    with pytest.raises(ValueError, match="fallback must be one of"):
        build_workflow("search_routed", {"fallback": "all"})


# --------------------------------------------------------------------------- config / build / CLI

SMOKE = str(ROOT / "srpo" / "presets" / "search_smoke.yaml")


def run_cli(argv):
    from srpo.cli.rollout import add_rollout_commands

    parser = argparse.ArgumentParser(prog="srpo")
    add_rollout_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_search_config_builds_tasks_reward_agents_and_env():
    from srpo.build import build_agents, build_reward, load_tasks
    from srpo.config import load_config
    from srpo.tasks.search.pack import build_search_env

    cfg = load_config(SMOKE, ["task.search.top_k=2", "task.search.f1_weight=0.5"])
    assert cfg.task.name == "search" and cfg.task.search.corpus == "world"
    tasks = load_tasks(cfg.task, limit=3)
    assert tasks == load_tasks(cfg.task)[:3]  # a prefix of the split
    for t in tasks:
        assert t.answer and t.metadata["supporting_doc_ids"] and t.metadata["hops"] in (1, 2, 3)
    reward = build_reward(cfg.task)
    assert isinstance(reward, SearchReward)
    assert reward.weights == {"em": 1.0, "f1": 0.5, "cover": 0.0, "format": 0.1}
    agents = build_agents(cfg)
    assert agents["searcher"].sampling.stop == ("</search>",) and agents["answerer"].sampling.stop == ()
    env = build_search_env(cfg.task)
    assert (env.top_k, env.max_turns, env.max_observation_chars) == (2, 3, 600)
    # the BM25 retriever over the world finds a question's first supporting document
    hits = env.retriever.search([tasks[0].prompt], 3)[0]
    assert tasks[0].metadata["supporting_doc_ids"][0] in [p.doc_id for p in hits]


@pytest.mark.parametrize("override,message", [
    ("task.search.corpus=books", "task.search.corpus must be one of"),
    ("task.search.retriever=tfidf", "task.search.retriever must be one of"),
    ("task.search.top_k=0", "task.search.top_k must be > 0"),
    ("task.search.corpus=jsonl", "needs corpus_path and questions_path"),
    ("task.reward.format_weight=0.5",  # math's reward is not a setting of the search pack
     r"unknown key\(s\) \['task.reward'\]; known keys of task \(task pack 'search'\)"),
])
def test_search_config_errors_name_the_key(override, message):
    from srpo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, [override])


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def jsonl_task(tmp_path, docs=DOCS):
    corpus = write_jsonl(tmp_path / "corpus.jsonl",
                         [{"id": d.doc_id, "title": d.title, "text": d.text} for d in docs])
    questions = write_jsonl(tmp_path / "questions.jsonl", [
        {"id": f"q{i}", "question": f"Where was Ilsa Marr born? ({i})", "golden_answers": ["Kessel"]}
        for i in range(5)])
    return [f"task.search.corpus_path={corpus}", f"task.search.questions_path={questions}",
            "task.search.corpus=jsonl", "task.search.questions_format=nq",
            "task.train_size=3", "task.heldout_size=2", "train.tasks_per_step=1", "eval.size=1"]


def test_jsonl_corpus_and_questions(tmp_path):
    from srpo.build import load_tasks
    from srpo.config import load_config
    from srpo.tasks.search.pack import build_search_env

    cfg = load_config(SMOKE, jsonl_task(tmp_path))
    # as for math files: held-out = the first heldout_size questions, train = the rest
    assert [t.task_id for t in load_tasks(cfg.task, split="heldout")] == ["nq/q0", "nq/q1"]
    assert [t.task_id for t in load_tasks(cfg.task)] == ["nq/q2", "nq/q3", "nq/q4"]
    env = build_search_env(cfg.task)
    assert env.retriever.search(["Ilsa Marr born"], 1)[0][0].doc_id == "marr"  # BM25
    # a prebuilt index (`srpo index`) is loaded and checked against the corpus
    from srpo.tasks.search.retrieval import build_index

    build_index(DOCS, tmp_path / "idx")
    env = build_search_env(load_config(SMOKE, [*jsonl_task(tmp_path),
                                               f"task.search.index_dir={tmp_path / 'idx'}"]).task)
    assert env.retriever.search(["Ilsa Marr born"], 1)[0][0].doc_id == "marr"
    with pytest.raises(ValueError, match="different corpus"):
        build_search_env(load_config(SMOKE, [*jsonl_task(tmp_path, DOCS[:3]),
                                             f"task.search.index_dir={tmp_path / 'idx'}"]).task)


def test_empty_corpus_is_an_error_at_build_time(tmp_path, capsys):
    from srpo.build import build_rollout
    from srpo.config import load_config

    overrides = jsonl_task(tmp_path, docs=[])
    with pytest.raises(ValueError, match="empty corpus"):
        build_rollout(load_config(SMOKE, overrides))
    code = run_cli(["rollout", SMOKE, *overrides, "--n", "1", "--out", str(tmp_path / "x.jsonl")])
    assert code == 2 and "empty corpus" in capsys.readouterr().err


def test_a_search_workflow_needs_a_search_task(capsys, tmp_path):
    code = run_cli(["rollout", str(ROOT / "srpo" / "presets" / "smoke.yaml"), "--workflow",
                    "search_single", "--n", "1", "--out", str(tmp_path / "x.jsonl")])
    assert code == 2
    err = capsys.readouterr().err
    assert "workflow 'search_single' needs an environment, which task pack 'math'" in err
    assert "packs that provide one: ['search']" in err


@pytest.mark.parametrize("workflow,events", [
    ("search_single", ["search"]),
    ("search_parallel", ["query-1", "read-1"]),  # k = 2 writers, 1 round
])
def test_srpo_rollout_on_a_tiny_random_model(tmp_path, capsys, workflow, events):
    out = tmp_path / "eps.jsonl"
    params = "{rounds: 1, k: 2}" if workflow == "search_parallel" else "{}"
    code = run_cli(["rollout", SMOKE, "sampling.max_new_tokens=6", "task.search.max_turns=2",
                    f"workflow.name={workflow}", f"workflow.params={params}", "--n", "2",
                    "--out", str(out), "--with-ids"])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 * 2
    for r in records:
        # a random model's writers rarely write a valid query: those the retrieval ran none of
        # are singletons of "query-1:unconsumed" (the transition they were produced for)
        sources = [t.get("unconsumed_from") or t["event"] for t in r["transitions"]]
        assert r["workflow"] == workflow and list(dict.fromkeys(sources)) == events
        assert all(t["event"] == f'{t["unconsumed_from"]}:unconsumed' and t["size"] == 1
                   for t in r["transitions"] if "unconsumed_from" in t)
        assert set(r["reward_components"]) == {"em", "f1", "cover", "format"}
        assert "recall_at_k" in r["metadata"] and r["metadata"]["search_budget_exhausted"] in (0, 1)
        for t in r["transitions"]:
            for m in t["members"]:
                # byte tokens: the masked tokens are exactly the observations' bytes
                obs = re.findall(r"\n<information>\n.*?\n</information>\n", m["text"], re.DOTALL)
                assert m["loss_mask"].count(0) == sum(len(o.encode()) for o in obs)
    assert f"of workflow {workflow!r}" in capsys.readouterr().out


def test_held_out_evaluation_scores_search_answers_by_exact_match():
    """evaluate() reads a search episode's "em" component (math rewards say "correct")."""
    from srpo.record.evaluate import evaluate

    def half_right(req):  # q0 answered right, q1 wrong
        if req.agent == "query_writer":
            return "<search>Veltra</search>"
        return "<answer>Kessel</answer>" if "(0)" in seen(req) else "<answer>Dorn</answer>"

    runner, _ = runner_for(half_right)
    wf = build_workflow("search_parallel", {"k": 2, "rounds": 1}).with_environment(search_env())
    result, _ = evaluate(runner, wf, make_tasks(2))
    assert result.correct == [True, False] and result.task_ids == ["q0", "q1"]
    assert result.accuracy.estimate == 0.5
    assert result.per_agent == {"answerer": 0.5, "query_writer": 0.0}


def test_plain_text_fallback_turns_tagless_replies_into_queries_and_answers():
    def tagless(req):
        if req.agent == "query_writer":
            return "Veltra founded\nand more words"
        return "Kessel"

    env = search_env(plain_text_fallback=True)
    runner, _ = runner_for(tagless)
    runner.reward_fn = SearchReward(em_weight=1.0, f1_weight=0.0, format_weight=0.1, plain_text_fallback=True)
    wf = build_workflow("search_parallel", {"k": 2, "rounds": 1}).with_environment(env)
    (e,) = runner.run(make_tasks(1), wf, group_size=1).episodes
    assert env.retriever.calls == [["Veltra founded", "Veltra founded"]]  # first line only
    md = e.metadata
    assert (md["search_plain_queries"], md["search_invalid"], md["search_calls"]) == (2, 0, 2)
    # no tag: no format
    assert e.reward_components == pytest.approx({"em": 1.0, "f1": 0.0, "cover": 0.0, "format": 0.0})

    # without the fallback the same replies are invalid and score nothing
    env = search_env()
    runner, _ = runner_for(tagless)
    wf = build_workflow("search_parallel", {"k": 2, "rounds": 1}).with_environment(env)
    (e,) = runner.run(make_tasks(1), wf, group_size=1).episodes
    assert env.retriever.calls == [] and e.metadata["search_invalid"] == 2
    assert e.reward_components == NONE


def test_plain_text_fallback_never_overrides_tags():
    from srpo.tasks.search.rewards import extract_answer

    assert extract_answer("<answer>Kessel</answer>", plain_text_fallback=True) == ("Kessel", True)
    assert extract_answer("Kessel, I think", plain_text_fallback=True) == ("Kessel, I think", False)
    assert extract_answer("<search>x</search> Kessel", plain_text_fallback=True) == (None, False)
    assert extract_answer("\n  \n", plain_text_fallback=True) == (None, False)
    assert extract_answer("Kessel") == (None, False)


def test_cover_component_credits_answers_that_contain_the_gold_and_can_define_success():
    from srpo.record.evaluate import evaluate

    def wordy(req):
        if req.agent == "query_writer":
            return "<search>Veltra</search>"
        return "<answer>The founder was born in Kessel.</answer>" if "(0)" in seen(req) else "<answer>Dorn</answer>"

    runner, _ = runner_for(wordy)
    runner.reward_fn = SearchReward(em_weight=0.0, f1_weight=0.0, format_weight=0.1, cover_weight=1.0)
    wf = build_workflow("search_parallel", {"k": 2, "rounds": 1}).with_environment(search_env())
    (e0, e1) = runner.run(make_tasks(2), wf, group_size=1).episodes
    assert e0.reward_components == pytest.approx({"em": 0.0, "f1": 0.0, "cover": 1.0, "format": 0.1})
    assert e0.metadata["score_em"] == 0.0 and e0.metadata["score_cover"] == 1.0
    assert e1.reward_components["cover"] == 0.0
    result, _ = evaluate(runner, wf, make_tasks(2), success_component="cover")
    assert result.correct == [True, False]
    result, _ = evaluate(runner, wf, make_tasks(2))  # default success: em (weight 0 here)
    assert result.correct == [False, False]
    with pytest.raises(ValueError, match="not a reward component"):
        evaluate(runner, wf, make_tasks(2), success_component="bleu")


def test_score_metadata_reads_an_untagged_answer_as_the_reward_does():
    """With plain_text_fallback the reward reads an untagged reply's first line; the episode's
    score_* metadata must read it the same way (it once scored the tags only: cover 0 while the
    reward's cover was 1)."""

    def plain(req):
        if req.agent == "query_writer":
            return "Veltra founder"
        return "It was Kessel.\nmore text"

    runner, _ = runner_for(plain)
    runner.reward_fn = SearchReward(
        em_weight=1.0, f1_weight=1.0, format_weight=0.1, cover_weight=1.0, plain_text_fallback=True
    )
    wf = build_workflow("search_parallel", {"k": 2, "rounds": 1}).with_environment(search_env(plain_text_fallback=True))
    (ep,) = runner.run(make_tasks(1), wf, group_size=1).episodes
    # normalized "it was kessel" has 3 tokens, one shared: precision 1/3, recall 1
    f1 = 2 * (1 / 3) * 1 / (1 / 3 + 1)
    assert ep.reward_components == pytest.approx({"em": 0.0, "f1": f1, "cover": 1.0, "format": 0.0})
    md = ep.metadata
    assert (md["score_em"], md["score_cover"], md["score_format"]) == (0.0, 1.0, 0.0)
    assert md["score_f1"] == pytest.approx(f1)


def test_an_empty_question_in_a_search_file_is_refused_before_any_model(tmp_path, monkeypatch):
    """The search pack's preflight check reads the questions file: a blank question is named
    with its file and line before any model is built or any index made."""
    import srpo.build
    from srpo.config import load_config
    from srpo.train.preflight import preflight

    overrides = jsonl_task(tmp_path)
    questions = tmp_path / "questions.jsonl"
    lines = questions.read_text().splitlines()
    lines[2] = json.dumps({"id": "q2", "question": "  ", "golden_answers": ["Kessel"]})
    questions.write_text("\n".join(lines) + "\n")

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built before the questions file was checked")

    monkeypatch.setattr(srpo.build, "build_policies", no_model)
    cfg = load_config(SMOKE, [*overrides, f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=rf"{questions}:line 3: required field 'question' is empty"):
        preflight(cfg)
