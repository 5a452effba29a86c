"""The testbed's cover tasks and workflow: symbols, coverage, tasks, set rewards, errors."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from srpo.config import ConfigError, load_config
from srpo.models import build_byte_tokenizer
from srpo.rollout import AgentSpec, PolicySet, RolloutRunner, SamplingParams, ScriptedBackend
from srpo.tasks.testbed import Cover, CoverReward, CoverSpec, cover_tasks, coverage, token_symbol
from srpo.tasks.testbed.tasks import FIRST_ORDINARY_ID

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "srpo" / "presets" / "testbed"


def test_a_token_names_its_symbol_modulo_the_alphabet_and_special_tokens_name_none():
    assert [token_symbol(t, 8) for t in (0, 1, 2)] == [None, None, None]
    assert [token_symbol(t, 8) for t in (3, 4, 10, 11, 12, 258)] == [0, 1, 7, 0, 1, (258 - 3) % 8]


def test_coverage_counts_distinct_target_symbols_hit():
    assert coverage([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert coverage([0, 0, 0, 0], [0, 1, 2, 3]) == 0.25  # duplicates add nothing
    assert coverage([5, 6, None, 1], [0, 1, 2, 3]) == 0.25
    assert coverage([None], [3]) == 0.0
    with pytest.raises(ValueError, match="at least one symbol"):
        coverage([1], [])


def test_tasks_are_deterministic_with_distinct_targets_inside_their_alphabet():
    spec = CoverSpec(set_sizes=(1, 4, 16), rounds=2, alphabet_factor=2)
    tasks = cover_tasks(spec, 6, seed=3)
    assert tasks == cover_tasks(spec, 6, seed=3)
    assert tasks != cover_tasks(spec, 6, seed=4)
    assert [t.metadata["k"] for t in tasks] == [1, 4, 16, 1, 4, 16]
    for t in tasks:
        k, m = t.metadata["k"], t.metadata["alphabet"]
        assert m == 2 * k and len(t.metadata["targets"]) == 2
        for target in t.metadata["targets"]:
            assert len(set(target)) == k and all(0 <= s < m for s in target)
    assert {t.task_id for t in cover_tasks(spec, 3, split="heldout")}.isdisjoint(t.task_id for t in tasks)


def test_chance_coverage_of_a_uniform_policy_is_about_one_half_at_every_set_size():
    """E[R_S] = 1 - (1 - 1/m)^k for members drawing ordinary tokens uniformly (a random model
    is close to that): checked by simulation against the formula, m = 2k."""
    rng = random.Random(0)
    for k in (1, 2, 4, 8, 16):
        m, target = 2 * k, list(range(k))
        draws = [coverage([token_symbol(rng.randrange(FIRST_ORDINARY_ID, 259), m) for _ in range(k)], target)
                 for _ in range(4000)]
        expected = 1 - (1 - 1 / m) ** k
        assert 0.39 <= expected <= 0.5
        assert abs(sum(draws) / len(draws) - expected) < 0.03


@pytest.mark.parametrize("bad, match", [
    (dict(set_sizes=()), "at least one set size"),
    (dict(set_sizes=(0,)), "ints >= 1"),
    (dict(rounds=0), "rounds"),
    (dict(set_sizes=(32,), alphabet_factor=2), "exceeds the 62 printable symbols"),
])
def test_a_bad_spec_is_refused_with_its_reason(bad, match):
    with pytest.raises(ValueError, match=match):
        CoverSpec(**bad)


def test_a_bad_testbed_config_names_the_key():
    with pytest.raises(ConfigError, match="task.testbed: .*ints >= 1"):
        load_config(str(PRESETS / "k4.yaml"), ["task.testbed.set_sizes=[0]"], check_machine=False)
    with pytest.raises(ConfigError, match="task.name"):
        load_config(str(PRESETS / "k4.yaml"), ["task.name=cover"], check_machine=False)


def test_the_reward_slot_refuses_to_score_a_text():
    task = cover_tasks(CoverSpec(), 1)[0]
    with pytest.raises(ValueError, match="cover-train-0.*computed per active set"):
        CoverReward()(task, "A")


# ---------------------------------------------------------------- the workflow, scripted


def _runner(script, agents):
    tok = build_byte_tokenizer()
    backend = ScriptedBackend(PolicySet.scripted(tok, ("shared",)), script)
    specs = [AgentSpec(a, policy="shared", sampling=SamplingParams(max_new_tokens=1)) for a in agents]
    return RolloutRunner(specs, backend, CoverReward(), seed=0)


def _slot(req) -> int:
    return int(req.messages[-1]["content"].rsplit("slot ", 1)[1])


def test_each_round_is_one_set_credited_with_its_own_coverage():
    """Three rounds of k = 2; the players name target[0] and target[0] in round 0 (a duplicate:
    0.5), target[0] and target[1] in round 1 (1.0), two special tokens in round 2 (0.0)."""
    wf = Cover(per_slot=True, set_sizes=[2], rounds=3, credit="transition")
    task = cover_tasks(CoverSpec(set_sizes=(2,), rounds=3), 1)[0]
    targets = task.metadata["targets"]

    def script(req):
        round_ = int(req.messages[-1]["content"].split("round ")[1].split()[0])
        if round_ == 2:
            return [2]  # eos: no symbol
        symbol = targets[round_][0 if round_ == 0 else _slot(req)]
        return [FIRST_ORDINARY_ID + symbol]

    ep = _runner(script, wf.agents).run([task], wf, group_size=1).episodes[0]
    assert [s.event for s in ep.transitions] == ["round-0", "round-1", "round-2"]
    assert [s.size for s in ep.transitions] == [2, 2, 2]
    assert [s.agents for s in ep.transitions][1] == ("player_2_1_0", "player_2_1_1")
    assert ep.set_returns() == [0.5, 1.0, 0.0]
    assert math.isclose(ep.reward, 0.5) and ep.reward_components == {"cover": 0.5}
    assert ep.metadata["coverage"] == [0.5, 1.0, 0.0]

    wf_episode = Cover(per_slot=True, set_sizes=[2], rounds=3, credit="episode")
    ep = _runner(script, wf_episode.agents).run([task], wf_episode, group_size=1).episodes[0]
    assert ep.set_returns() == [0.5, 0.5, 0.5]


def test_a_shared_role_plays_every_slot():
    wf = Cover()
    assert wf.agents == ("player",)
    task = cover_tasks(CoverSpec(set_sizes=(3,)), 1)[0]
    ep = _runner(lambda req: [FIRST_ORDINARY_ID + _slot(req)], wf.agents).run([task], wf, group_size=1).episodes[0]
    assert ep.transitions[0].agents == ("player",) * 3
    assert ep.reward == coverage([0, 1, 2], task.metadata["targets"][0])


def test_workflow_errors_name_the_mismatch():
    with pytest.raises(ValueError, match="credit"):
        Cover(credit="set")
    with pytest.raises(ValueError, match="per_slot needs cover.set_sizes"):
        Cover(per_slot=True)
    wf = Cover(per_slot=True, set_sizes=[4])
    task = cover_tasks(CoverSpec(set_sizes=(2,)), 1)[0]
    with pytest.raises(ValueError, match="k=2.*cover.set_sizes"):
        _runner(lambda req: [3], wf.agents).run([task], wf, group_size=1)


def test_the_presets_are_what_the_generator_writes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate", REPO / "scripts" / "generate_testbed_presets.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for stem in gen.PRESETS:
        assert (PRESETS / f"{stem}.yaml").read_text() == gen.render(stem), "run scripts/generate_testbed_presets.py"
        cfg = load_config(str(PRESETS / f"{stem}.yaml"), check_machine=False)
        assert cfg.task.testbed.set_sizes == cfg.workflow.params["set_sizes"]
