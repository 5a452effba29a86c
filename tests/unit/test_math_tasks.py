"""srpo.tasks.math: reasoning-gym splits, loaders, answer extraction, scoring, rewards."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest

from srpo.tasks.math import (
    MathReward,
    RewardError,
    extract,
    extract_answer,
    load_gsm8k,
    load_math500,
    math_splits,
    normalize_question,
    parse_number,
    reasoning_gym_score,
    reasoning_gym_tasks,
    score_answer,
    scoring,
    scoring_stats,
)
from srpo.types import Task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"
ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


# ---------------------------------------------------------------- reasoning-gym tasks


def test_reasoning_gym_tasks_are_deterministic_by_seed():
    a = reasoning_gym_tasks("basic_arithmetic", size=30, seed=7, split="train", config=ONE_DIGIT)
    b = reasoning_gym_tasks("basic_arithmetic", size=30, seed=7, split="train", config=ONE_DIGIT)
    c = reasoning_gym_tasks("basic_arithmetic", size=30, seed=8, split="train", config=ONE_DIGIT)
    assert a == b
    assert [t.prompt for t in a] != [t.prompt for t in c]
    assert len({t.task_id for t in a}) == 30
    assert a[0].source == "reasoning_gym/basic_arithmetic"
    assert a[0].metadata["rg_entry"]["question"] == a[0].prompt


def test_task_ids_are_stable_and_distinguish_configs():
    plain = reasoning_gym_tasks("chain_sum", size=3, seed=0, split="train")
    hard = reasoning_gym_tasks("chain_sum", size=3, seed=0, split="train",
                               config={"min_digits": 3, "max_digits": 3})
    assert [t.task_id for t in plain] == [f"rg/chain_sum/train/0/{i}" for i in range(3)]
    # Same name, seed and index but another difficulty: ids must not collide (group keys).
    assert not {t.task_id for t in plain} & {t.task_id for t in hard}


def test_math_splits_disjoint_on_one_digit_arithmetic():
    train, heldout = math_splits("basic_arithmetic", train_size=500, heldout_size=200, seed=0,
                                 config=ONE_DIGIT)
    assert len(train) == 500 and len(heldout) == 200
    train_q = {normalize_question(t.prompt) for t in train}
    heldout_q = {normalize_question(t.prompt) for t in heldout}
    assert not train_q & heldout_q
    assert len(train_q) == 500 and len(heldout_q) == 200  # no repeats inside a split either
    assert all(t.metadata["split"] == "train" for t in train)
    assert all(t.metadata["split"] == "heldout" for t in heldout)
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    # Without the exclusion the space is small enough that the splits would share questions.
    raw = reasoning_gym_tasks("basic_arithmetic", size=500, seed=0, split="train",
                              config=ONE_DIGIT, unique=False)
    assert {normalize_question(t.prompt) for t in raw} & heldout_q


def test_math_splits_are_deterministic():
    a = math_splits("chain_sum", train_size=20, heldout_size=10, seed=3)
    b = math_splits("chain_sum", train_size=20, heldout_size=10, seed=3)
    assert a == b


def test_a_composite_mixes_kinds_each_scored_by_its_own_dataset():
    mix = {"datasets": [{"name": "basic_arithmetic", "config": ONE_DIGIT},
                        {"name": "letter_counting", "weight": 1, "config": {"min_words": 5, "max_words": 10}}]}
    train, heldout = math_splits("composite", train_size=40, heldout_size=20, seed=0, config=mix)
    assert not {normalize_question(t.prompt) for t in train} & {normalize_question(t.prompt) for t in heldout}
    kinds = {t.metadata["kind"] for t in train + heldout}
    assert kinds == {"basic_arithmetic", "letter_counting"}
    for t in heldout:
        if t.metadata["kind"] == "letter_counting":
            assert t.prompt.startswith("How many times does the letter")
        else:
            assert t.prompt.startswith("Calculate")
        # the member dataset scores it (the config's mappings rebuilt into reasoning-gym's specs)
        assert reasoning_gym_score(t, t.answer) == 1.0 and reasoning_gym_score(t, "x") == 0.0
    # an episode line names the task's kind (the route tables of a routed run read it)
    from srpo.rollout.episode_lines import episode_to_dict
    from srpo.types import Episode
    line = episode_to_dict(Episode(task=heldout[0], workflow="single", transitions=[], reward=0.0))
    assert line["task_kind"] == heldout[0].metadata["kind"]
    plain = Task(task_id="t", prompt="p", answer="1")
    assert "task_kind" not in episode_to_dict(Episode(task=plain, workflow="single", transitions=[], reward=0.0))
    # a task of one dataset is of that dataset's kind
    assert reasoning_gym_tasks("chain_sum", size=1, seed=0)[0].metadata["kind"] == "chain_sum"
    with pytest.raises(ValueError, match=r"composite' needs difficulty.datasets"):
        reasoning_gym_tasks("composite", size=1, seed=0, config={})
    with pytest.raises(ValueError, match=r"composite datasets\[0\] must be a mapping with name"):
        reasoning_gym_tasks("composite", size=1, seed=0, config={"datasets": [{"nme": "chain_sum"}]})
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'chain_sun'"):
        reasoning_gym_tasks("composite", size=1, seed=0, config={"datasets": [{"name": "chain_sun"}]})


def test_too_small_question_space_raises():
    # chain_sum with two 1-digit terms has 200 distinct questions (10 * 10 * {+, -}).
    config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    with pytest.raises(ValueError, match="too small"):
        math_splits("chain_sum", train_size=100, heldout_size=150, seed=0, config=config)


def test_unknown_name_and_bad_config():
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'basic_arithmatic'") as e:
        reasoning_gym_tasks("basic_arithmatic", size=1, seed=0, split="train")
    assert "basic_arithmetic" in str(e.value)
    with pytest.raises(ValueError, match="invalid config"):
        reasoning_gym_tasks("basic_arithmetic", size=1, seed=0, config={"no_such_knob": 1})
    with pytest.raises(ValueError, match="must not set 'seed'"):
        reasoning_gym_tasks("basic_arithmetic", size=1, seed=0, config={"seed": 1})
    with pytest.raises(ValueError, match="split must be one of"):
        reasoning_gym_tasks("basic_arithmetic", size=1, seed=0, split="test")


def test_hex_golds_of_bitwise_arithmetic_score_only_their_value():
    # before the fix a reply "0" scored correct on every hex gold (found by screening tasks)
    reward = MathReward()
    for task in reasoning_gym_tasks("bitwise_arithmetic", size=20, seed=1, split="heldout"):
        value = int(task.answer, 16)
        assert reward(task, task.answer).components["correct"] == 1.0, task.answer
        assert reward(task, f"The answer is {value}.").components["correct"] == 1.0
        assert reward(task, "0").components["correct"] == float(value == 0), task.answer
        assert reward(task, hex(value + 1)).components["correct"] == 0.0


@pytest.mark.parametrize("name", ["basic_arithmetic", "chain_sum", "gsm_symbolic"])
def test_gold_answers_score_correct_and_wrong_answers_do_not(name):
    tasks = reasoning_gym_tasks(name, size=50, seed=1, split="heldout")
    reward = MathReward(format_rule="boxed")
    for task in tasks:
        gold = task.answer
        result = reward(task, f"Working... so the result is \\boxed{{{gold}}}")
        assert result.components == {"correct": 1.0, "format": 1.0}, (task.task_id, gold)
        # Same verdict through math-verify itself, not only the numeric fast path.
        assert score_answer(gold, gold, fast_path=False).correct, (task.task_id, gold)
        wrong = str(int(Decimal(gold)) + 1)
        assert not score_answer(gold, wrong).correct
        assert reward(task, f"\\boxed{{{wrong}}}").components["correct"] == 0.0
    assert reasoning_gym_score(tasks[0], tasks[0].answer) == 1.0


# ---------------------------------------------------------------- loaders


def test_load_gsm8k_fixture():
    tasks = load_gsm8k(FIXTURES / "gsm8k.jsonl")
    assert [t.answer for t in tasks] == ["7", "6000", "-5"]  # after ####, commas removed
    assert [t.task_id for t in tasks] == ["gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2"]
    assert tasks[0].prompt.startswith("Mia has 3 boxes")
    assert "####" in tasks[0].metadata["solution"]
    assert tasks[1].source == "gsm8k"
    assert len(load_gsm8k(FIXTURES / "gsm8k.jsonl", limit=2)) == 2


def test_load_math500_fixture():
    tasks = load_math500(FIXTURES / "math500.jsonl")
    assert [t.answer for t in tasks] == ["\\frac{1}{2}", "\\sqrt{2}", "1024"]
    assert tasks[0].task_id == "math500/test/prealgebra/1.json"
    assert tasks[1].metadata["subject"] == "Algebra" and tasks[1].metadata["level"] == 2
    assert "boxed" in tasks[2].metadata["solution"]
    reward = MathReward()
    assert reward(tasks[0], "so it is \\boxed{0.5}").components["correct"] == 1.0


def test_load_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed: parquet loading untested")
    pq = pytest.importorskip("pyarrow.parquet")
    records = [json.loads(line) for line in (FIXTURES / "math500.jsonl").read_text().splitlines()]
    path = tmp_path / "math500.parquet"
    pq.write_table(pa.Table.from_pylist(records), path)
    tasks = load_math500(path)
    from_jsonl = load_math500(FIXTURES / "math500.jsonl")
    assert [(t.task_id, t.prompt, t.answer) for t in tasks] == [
        (t.task_id, t.prompt, t.answer) for t in from_jsonl
    ]
    assert tasks[0].metadata["record"].endswith("math500.parquet:record 0")
    assert tasks[1].metadata["level"] == 2 and isinstance(tasks[1].metadata["level"], int)

    gsm = [{"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}, {"question": "q"}]
    bad = tmp_path / "gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist(gsm), bad)
    with pytest.raises(ValueError, match=r"record 1: record is missing required field 'answer'"):
        load_gsm8k(bad)


def test_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_gsm8k(tmp_path / "absent.jsonl")

    missing = tmp_path / "gsm8k.jsonl"
    missing.write_text(
        json.dumps({"question": "a?", "answer": "#### 1"}) + "\n\n"
        + json.dumps({"question": "b?"}) + "\n"
    )
    with pytest.raises(
        ValueError, match=r"gsm8k.jsonl:line 3: record is missing required field 'answer'"
    ):
        load_gsm8k(missing)

    no_final = tmp_path / "nofinal.jsonl"
    no_final.write_text(json.dumps({"question": "a?", "answer": "it is 4"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: field 'answer' has no final answer after"):
        load_gsm8k(no_final)

    broken = tmp_path / "math.jsonl"
    broken.write_text('{"problem": "p", "answer": "1"}\n{not json\n')
    with pytest.raises(ValueError, match=r"math.jsonl:line 2: invalid JSON"):
        load_math500(broken)

    no_problem = tmp_path / "m.jsonl"
    no_problem.write_text(json.dumps({"answer": "1"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: record is missing required field 'problem'"):
        load_math500(no_problem)

    with pytest.raises(ValueError, match="unsupported file type"):
        (tmp_path / "x.csv").write_text("a,b\n")
        load_gsm8k(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="exactly one of"):
        load_gsm8k()
    with pytest.raises(ValueError, match="exactly one of"):
        load_gsm8k(FIXTURES / "gsm8k.jsonl", hub_id="openai/gsm8k")


def test_hub_loading_is_opt_in(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(hub_id, config, split):
        calls.append((hub_id, config, split))
        return [{"question": "2 + 2?", "answer": "2 + 2 = 4\n#### 4"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    load_gsm8k(FIXTURES / "gsm8k.jsonl")
    assert calls == []  # a local path never touches the hub
    tasks = load_gsm8k(hub_id="openai/gsm8k", split="test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert tasks[0].answer == "4"


# ---------------------------------------------------------------- answer extraction


@pytest.mark.parametrize(
    "text, answer, method",
    [
        (r"so \boxed{\frac{1}{2}} is it", r"\frac{1}{2}", "boxed"),
        (r"first \boxed{3}, then corrected to \boxed{5}.", "5", "boxed"),
        (r"\boxed{\boxed{7}}", "7", "boxed"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}", "boxed"),
        (r"done: \boxed{7} and then \boxed{12", "7", "boxed"),  # unclosed box: cut off
        (r"\fbox{9}", "9", "boxed"),
        (r"\boxed{} so the answer is 4", "4", "answer"),  # an empty box does not count
        ("The answer is 42.", "42", "answer"),
        ("The answer is 42. Let me double-check with 13.", "42", "answer"),
        ("**Answer:** 17", "17", "answer"),
        ("Answer: **-3.5**", "-3.5", "answer"),
        ("The final answer is: $x = 2$.", "$x = 2$", "answer"),
        ("Answer: 3\nWait, no. The answer is 4", "4", "answer"),
        ("work\n#### 1,234", "1,234", "answer"),
        ("the total is 1,234 dollars", "1234", "number"),
        ("it costs $1,234.50 in all", "1234.50", "number"),
        ("from 3-4", "4", "number"),  # a binary minus is not a sign
        ("x = -5", "-5", "number"),
        ("y=\u22127", "-7", "number"),  # unicode minus
        ("the list 1, 2, 3", "3", "number"),
        ("about .5 of it", ".5", "number"),
        ("step2 gives 10.", "10", "number"),
        ("(0xa3b8 >> 0x2) is 0x28ee", "0x28ee", "number"),  # hex literal, not its "0"
        ("so -0x3f.", "-0x3f", "number"),
        # scientific notation is one number (reasoning-gym number_format), not its exponent "01"
        ("The largest is 4.592700000000000e+01", "4.592700000000000e+01", "number"),
        ("-6.0E-02.", "-6.0E-02", "number"),
        ("5eggs and 3e", "3", "number"),  # no exponent digits: not an exponent
    ],
)
def test_extraction(text, answer, method):
    found = extract(text)
    assert found is not None and (found.text, found.method) == (answer, method)
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text", ["", "no numbers at all", r"\boxed{", "answer:"])
def test_extraction_none(text):
    assert extract_answer(text) is None


@pytest.mark.parametrize(
    "text, value",
    [("$1,234$", Decimal(1234)), ("\\$5", Decimal(5)), (" -0.5 ", Decimal("-0.5")),
     ("3.", Decimal(3)), (".5", Decimal("0.5")), ("10%", None), ("1,23", None),
     ("x=2", None), ("\\frac{1}{2}", None), (None, None),
     ("0x217e", Decimal(8574)), ("-0x3", Decimal(-3)), ("0X1F", Decimal(31)), ("0xg", None),
     ("4.5927e+01", Decimal("45.927")), ("-1E3", Decimal(-1000)), (".5e1", Decimal(5)),
     ("1e", None), ("1e+", None)],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


# ---------------------------------------------------------------- scoring


@pytest.mark.parametrize(
    "gold, pred, correct",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{1}{2}", "\\frac{2}{4}", True),
        ("2", "$x=2$", True),
        ("\\sqrt{2}", "\\sqrt 2", True),
        ("\\frac{1}{2}", "\\frac{1}{3}", False),
        ("1234", "1,234", True),
        ("3", "3.0", True),
        ("3", "4", False),
        ("0.333", "0.3333", False),
        # a hex gold was read by math-verify as 0 * x * ..., equal to a reply "0"
        ("0x217e", "0", False),
        ("0x217e", "0x217E", True),
        ("0x217e", "8574", True),
        ("45.927", "4.592700000000000e+01", True),  # number_format's answers, copied from its question
        ("45.927", "4.5927e+00", False),
        ("-0x3", "-0x3", True),
    ],
)
def test_score_answer(gold, pred, correct):
    result = score_answer(gold, pred)
    assert result.correct is correct and not result.timed_out


def test_numeric_fast_path_skips_math_verify(monkeypatch):
    class Boom:
        def compare(self, gold, pred, timeout_s):
            raise AssertionError("math-verify must not be called for plain numbers")

    monkeypatch.setattr(scoring, "_verifier", Boom())
    assert score_answer("1234", "1,234").method == "numeric"
    assert score_answer("-5", "-5.0").correct
    assert not score_answer("7", "8").correct
    assert score_answer("7", None).method == "none"


def _slow_check(gold: str, pred: str) -> bool:  # module level: the child imports it by name
    time.sleep(60)
    return True  # would be "correct" if we waited


def _runaway_check(gold: str, pred: str) -> bool:
    """One long C call holding the GIL, like sympy's gcd of huge integers: a thread running it
    could not be stopped, and would starve the caller's thread."""
    return math.gcd(3 ** 30_000_000 + 1, 2 ** 40_000_000 + 3) > 0


def _broken_check(gold: str, pred: str) -> bool:
    raise RuntimeError("sympy exploded")


@pytest.fixture
def verifier(monkeypatch):
    """score_answer's child process running a check of the test's choice; killed after."""
    made = []

    def use(check):
        v = scoring.MathVerifyProcess(f"{__name__}:{check.__name__}")
        monkeypatch.setattr(scoring, "_verifier", v)
        made.append(v)
        return v

    yield use
    for v in made:
        v.stop()


def test_timeout_reports_timed_out_not_correct(verifier):
    v = verifier(_slow_check)
    before = scoring_stats()["timeouts"]
    result = score_answer("\\frac{1}{2}", "0.5", timeout_s=0.5)
    assert result.timed_out and not result.correct and result.method == "timeout"
    assert scoring_stats()["timeouts"] == before + 1
    assert not v.alive()  # the overrunning child was killed, not left running

    task = Task("t/slow", "q", answer="\\frac{1}{2}")
    rr = MathReward(timeout_s=0.5)(task, "\\boxed{0.5}")
    assert rr.timed_out and rr.components["correct"] == 0.0 and rr.total == 0.0


def test_a_runaway_check_is_killed_and_the_next_check_gets_a_new_process(verifier):
    v = verifier(_runaway_check)
    starts = scoring_stats()["verifier_starts"]
    start = time.monotonic()
    assert score_answer("\\frac{1}{2}", "0.5", timeout_s=1.0).timed_out
    # the caller got its answer at the timeout (not when the gcd ends: minutes), and nothing
    # of the check is left running in this process or beside it
    assert time.monotonic() - start < 30 and not v.alive()
    v.check = "srpo.tasks.math.scoring:_math_verify_equal"
    assert score_answer("\\frac{1}{2}", "0.5", timeout_s=30).correct
    assert scoring_stats()["verifier_starts"] == starts + 2


def test_a_script_without_a_main_guard_is_not_run_again_by_the_checker(tmp_path):
    # a spawned multiprocessing child would import the caller's main script again
    script = tmp_path / "unguarded.py"
    script.write_text("from srpo.tasks.math import score_answer\n"
                      "print('script ran')\n"
                      "print('correct', score_answer('\\\\frac{1}{2}', '0.5').correct)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["script ran", "correct True"]


def test_scoring_is_thread_safe():
    pairs = [("\\frac{1}{2}", "0.5"), ("\\sqrt{8}", "2\\sqrt{2}"), ("\\frac{1}{2}", "\\frac{1}{3}"),
             ("2", "$x=2$"), ("\\pi", "3.14159265")] * 4
    serial = [score_answer(g, p).correct for g, p in pairs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda gp: score_answer(*gp).correct, pairs))
    assert threaded == serial
    assert serial[:4] == [True, True, False, True]


# ---------------------------------------------------------------- rewards


def test_reward_components_and_format_rules():
    task = Task("t/1", "2 + 5?", answer="7")
    bonus = MathReward(correct_weight=1.0, format_weight=0.1, format_rule="boxed")
    boxed = bonus(task, "2 + 5 = \\boxed{7}")
    assert boxed.components == {"correct": 1.0, "format": 1.0}
    assert math.isclose(boxed.total, 1.1)
    assert math.isclose(sum(boxed.weighted_components().values()), boxed.total)
    assert (boxed.extracted, boxed.method, boxed.timed_out) == ("7", "boxed", False)

    bare = bonus(task, "2 + 5 = 7")
    assert bare.components == {"correct": 1.0, "format": 0.0} and bare.total == 1.0
    assert MathReward(format_rule="explicit")(task, "The answer is 7").components["format"] == 1.0
    assert MathReward(format_rule="explicit")(task, "it is 7").components["format"] == 0.0
    assert MathReward(format_rule="any")(task, "it is 7").components["format"] == 1.0
    # strict: a right answer outside the requested format earns nothing.
    assert MathReward(format_rule="boxed", strict=True)(task, "it is 7").total == 0.0

    nothing = bonus(task, "I do not know")
    assert nothing.components == {"correct": 0.0, "format": 0.0} and nothing.extracted is None
    wrong = bonus(task, "\\boxed{8}")
    assert wrong.components == {"correct": 0.0, "format": 1.0} and math.isclose(wrong.total, 0.1)


@pytest.mark.parametrize("text, formatted, correct", [
    ("7", True, True), (" 7. ", True, True), ("-7", True, False), ("1,234", True, False),
    ("The answer is 7.", False, True), ("it is 7", False, True), ("7 apples", False, True),
    ("2 + 5 = 7", False, True), ("\\boxed{7}", False, True), ("", False, False), ("seven", False, False),
])
def test_bare_format_rule_asks_for_nothing_but_the_number(text, formatted, correct):
    task = Task("t/1", "2 + 5?", answer="7")
    result = MathReward(correct_weight=1.0, format_weight=0.1, format_rule="bare")(task, text)
    # correctness does not depend on the format (strict is off): "it is 7" is still right
    assert result.components == {"correct": float(correct), "format": float(formatted)}
    assert math.isclose(result.total, float(correct) + 0.1 * float(formatted))


def test_reward_rejects_bad_settings():
    with pytest.raises(ValueError, match="finite"):
        MathReward(correct_weight=float("nan"))
    with pytest.raises(ValueError, match="format_rule"):
        MathReward(format_rule="xml")


def test_reward_errors_name_the_task(verifier):
    reward = MathReward()
    with pytest.raises(RewardError, match="'t/no-gold'.*no gold answer"):
        reward(Task("t/no-gold", "q", answer=None), "\\boxed{1}")
    with pytest.raises(RewardError, match="'t/bytes'.*TypeError"):
        reward(Task("t/bytes", "q", answer="1"), b"\\boxed{1}")

    verifier(_broken_check)
    with pytest.raises(RewardError, match="'t/latex'.*RuntimeError: sympy exploded") as e:
        reward(Task("t/latex", "q", answer="\\frac{1}{2}"), "\\boxed{\\frac{2}{4}}")
    assert e.value.task_id == "t/latex"


def test_reward_from_worker_threads():
    tasks = [Task(f"t/{i}", "q", answer=a) for i, a in enumerate(["\\frac{1}{2}", "3", "x+1"])]
    texts = ["\\boxed{0.5}", "the answer is 3", "\\boxed{1+x}"]
    reward = MathReward()
    results: list = [None] * 3

    def work(i: int) -> None:
        results[i] = reward(tasks[i], texts[i]).total

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [1.0, 1.0, 1.0]
