"""benchmarks/time_to_accuracy.py's analysis on made-up runs whose curves are known: the step
curves a_s(t), their mean over seeds, the peer's best, the time an srpo arm takes to reach it,
the accuracy at the peer's total training time, which evaluations are still to run, and the
training clock's marks. Accuracies are multiples of 1/8, so every mean is exact in binary."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

tta = load_benchmark("time_to_accuracy")
clock = sys.modules[tta.TrainingClock.__module__]  # benchmarks/tta/clock.py, as the script imports it

BASE = 0.125  # the base model through math/single: every curve's t = 0
PEER = {0: [(60, 0.25), (120, 0.5), (180, 0.375)], 1: [(65, 0.125), (125, 0.25), (190, 0.625)]}
FAST = {0: [(61, 0.25), (122, 0.5), (200, 0.75)], 1: [(62, 0.5), (121, 0.25), (210, 0.625)]}
SLOW = {0: [(100, 0.25), (150, 0.25)]}


def write_run(root: Path, arm: str, seed: int, marks: list[tuple[float, float]], scored: bool = True) -> Path:
    """A finished run of `arm`: record.json with its marks, and each checkpoint's eval.json
    (accuracy) and eval_time.json (2 s each), unless scored is False (the last one unscored)."""
    run = root / arm / f"seed{seed}"
    record = {"arm": arm, "seed": seed, "eval": {"config": "math/single", "overrides": []}, "policies": ["solver"],
              "marks": [{"tag": f"step{i:05d}", "step": i, "train_seconds": float(t)}
                        for i, (t, _) in enumerate(marks)],
              "train_seconds": float(marks[-1][0]) + 0.5, "startup_seconds": 10.0 + seed, "steps": len(marks)}
    run.mkdir(parents=True)
    (run / "record.json").write_text(json.dumps(record))
    for i, (_, acc) in enumerate(marks):
        if not scored and i == len(marks) - 1:
            continue
        folder = run / "ckpt" / f"step{i:05d}"
        folder.mkdir(parents=True)
        (folder / "eval.json").write_text(json.dumps({"accuracy": acc, "n": 256, "seconds": 2.0}))
        (folder / "eval_time.json").write_text(json.dumps({"wall_seconds": 9.0, "eval_seconds": 2.0}))
    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tta.base_dir(tmp_path, "math/single")
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps({"accuracy": BASE, "n": 256, "seconds": 2.0}))
    for arm, seeds in (("trl_grpo", PEER), ("srpo_single_srpo", FAST), ("srpo_single_grpo", SLOW)):
        for seed, marks in seeds.items():
            write_run(tmp_path, arm, seed, marks)
    return tmp_path


def test_a_run_holds_its_last_checkpoint_accuracy():
    points = [(0.0, BASE), *PEER[0]]
    assert [tta.value_at(points, t) for t in (0, 59.9, 60, 119, 120, 500)] == [BASE, BASE, 0.25, 0.25, 0.5, 0.375]


def test_mean_curve_over_seeds_ends_at_the_earliest_last_checkpoint(root):
    runs = tta.load_runs(root)
    assert tta.mean_curve(runs["trl_grpo"]) == [
        (0.0, 0.125, 0.125, 0.125), (60, 0.1875, 0.125, 0.25), (65, 0.1875, 0.125, 0.25),
        (120, 0.3125, 0.125, 0.5), (125, 0.375, 0.25, 0.5), (180, 0.3125, 0.25, 0.375)]  # 190 is past seed 0's end


def test_comparisons_time_to_the_peers_best_and_accuracy_at_its_total(root):
    rows = {c["arm"]: c for c in tta.analyze(root)["comparisons"]}
    assert set(rows) == {"srpo_single_grpo", "srpo_single_srpo"}  # no run of srpo_default_debate
    fast, slow = rows["srpo_single_srpo"], rows["srpo_single_grpo"]
    assert (fast["peer_best"], fast["peer_best_at"], fast["peer_total"]) == (0.375, 125, 180)
    assert fast["arm_reaches_best_at"] == 62  # (0.25 + 0.5) / 2 from t = 62 on
    assert fast["arm_reaches_best_at_per_seed"] == [122, 62]  # each seed alone: 0.5 at 122, 0.5 at 62
    assert slow["arm_reaches_best_at_per_seed"] == [None]
    assert fast["arm_at_peer_total"] == 0.375  # at 180: seed 0 holds 0.5 (122), seed 1 0.25 (121)
    assert fast["peer_at_peer_total"] == 0.3125
    assert (fast["arm_total"], fast["seeds"]) == (200, {"peer": 2, "arm": 2})
    assert slow["arm_reaches_best_at"] is None  # 0.25 at best
    # seed 0 at the peer's 60, 120, 180: fast holds 0.125 < 0.25, 0.25 < 0.5, 0.5 > 0.375; seed 1 at
    # 65, 125, 190: 0.5 > 0.125, 0.25 = 0.25, 0.25 < 0.625 (its 210 is later)
    assert fast["equal_time_per_seed"] == [
        {"seed": 0, "ahead": 1, "tied": 0, "behind": 2,
         "behind_at": [{"t": 60, "arm": 0.125, "peer": 0.25}, {"t": 120, "arm": 0.25, "peer": 0.5}]},
        {"seed": 1, "ahead": 1, "tied": 1, "behind": 1, "behind_at": [{"t": 190, "arm": 0.25, "peer": 0.625}]}]
    # slow has seed 0 only, ending at 150: the peer's 60 and 120 (0.125 < 0.25, 0.25 < 0.5)
    assert [(s["seed"], s["ahead"], s["tied"], s["behind"]) for s in slow["equal_time_per_seed"]] == [(0, 0, 0, 2)]
    assert (slow["arm_total"], slow["arm_at_peer_total"]) == (150, 0.25)  # ends before 180: its end


def test_times_and_markdown(root):
    result = tta.analyze(root)
    t = result["times"]["trl_grpo"]
    assert (t["seeds"], t["startup_mean"], t["checkpoints"], t["eval_seconds"]) == (2, 10.5, 6, 12.0)
    assert t["train_mean"] == (180.5 + 190.5) / 2
    table = tta.markdown(result)
    assert ("| trl_grpo (2 seeds) | 37.5% (125 s) | srpo_single_srpo (2 seeds) | 62 s | 37.5% at 180 s (31.2%) "
            "| 1/0/2, 1/1/1 |" in table)
    assert ("| trl_grpo (2 seeds) | 37.5% (125 s) | srpo_single_grpo (1 seeds) | not reached "
            "| 25.0% at 180 s (arm ends earlier) (31.2%) | 0/0/2 |" in table)
    # where the equal-time half is lost, seed by seed, with both accuracies
    assert "| trl_grpo | srpo_single_srpo | 0 | 60 s: 12.5% against 25.0%, 120 s: 25.0% against 50.0% |" in table
    assert "| trl_grpo | srpo_single_srpo | 1 | 190 s: 25.0% against 62.5% |" in table


def test_the_lowest_agent_at_the_end_per_seed(root):
    """Runs whose eval.json names each agent's own accuracy: the lowest at the last checkpoint,
    per seed; arms whose runs do not (or hold one agent) get none and no table row."""
    for seed, per_agent in ((0, {"a": 0.5, "b": 0.125, "c": 0.25}), (1, {"a": 0.375, "b": 0.5, "c": 0.625})):
        write_run(root, "srpo_trio_srpo", seed, [(60, 0.25), (120, 0.5)])
        last = root / "srpo_trio_srpo" / f"seed{seed}" / "ckpt" / "step00001" / "eval.json"
        last.write_text(json.dumps({**json.loads(last.read_text()), "per_agent": per_agent}))
    result = tta.analyze(root)
    assert result["times"]["srpo_trio_srpo"]["lowest_agent_end"] == [0.125, 0.375]
    assert result["times"]["trl_grpo"]["lowest_agent_end"] is None
    assert "| srpo_trio_srpo | 12.5%, 37.5% | 25.0% |" in tta.markdown(result)
    assert "| trl_grpo | " not in tta.markdown(result).split("lowest agent")[1]


def test_shards_split_the_evaluations_without_overlap():
    jobs = list(range(7))
    assert tta.shard(jobs, None) == jobs
    assert tta.shard(jobs, "1/2") == [0, 2, 4, 6] and tta.shard(jobs, "2/2") == [1, 3, 5]
    for bad in ("0/2", "3/2", "2", "a/b"):
        with pytest.raises(SystemExit, match="--shard"):
            tta.shard(jobs, bad)


def test_shards_started_apart_do_not_overlap(tmp_path, monkeypatch):
    """An evaluator that starts after another has finished a job still takes only its own share:
    shards are cut from the whole list, done jobs included (cut from the pending list, a job done
    in between shifts every later job to the other shard's parity)."""
    write_run(tmp_path, "srpo_single_srpo", 0, [(60, 0.5), (120, 0.5), (180, 0.5), (240, 0.5)], scored=False)
    for i in range(3):  # write_run scored all but the last checkpoint: none scored
        (tmp_path / f"srpo_single_srpo/seed0/ckpt/step{i:05d}/eval.json").unlink()
    ran = []

    def fake_eval(cmd, **kwargs):  # `srpo eval` stand-in: records the folder, writes its eval.json
        out = Path(cmd[-1])
        ran.append(out.parent)
        out.write_text(json.dumps({"accuracy": 0.5, "n": 8, "seconds": 1.0}))

    monkeypatch.setattr(tta.subprocess, "run", fake_eval)
    monkeypatch.setattr(tta, "eval_command", lambda config, overrides, adapters, threads, out: ["srpo", str(out)])
    args = types.SimpleNamespace(root=str(tmp_path), threads=1)
    tta.cmd_evaluate(types.SimpleNamespace(**vars(args), shard="1/2"))  # the base, checkpoints 1 and 3
    first = list(ran)
    ran.clear()
    tta.cmd_evaluate(types.SimpleNamespace(**vars(args), shard="2/2"))  # then checkpoints 0 and 2
    names = [f.relative_to(tmp_path).as_posix() for f in first + ran]
    assert names == ["_base/single", "srpo_single_srpo/seed0/ckpt/step00001", "srpo_single_srpo/seed0/ckpt/step00003",
                     "srpo_single_srpo/seed0/ckpt/step00000", "srpo_single_srpo/seed0/ckpt/step00002"]
    assert tta.eval_jobs(tmp_path) == []


def test_a_run_with_an_unscored_checkpoint_waits_for_evaluate(root):
    write_run(root, "srpo_default_debate", 0, [(60, 0.5), (120, 0.75)], scored=False)
    assert "srpo_default_debate" not in tta.load_runs(root)
    jobs = tta.eval_jobs(root)
    assert [(j[0].relative_to(root).as_posix(), sorted(j[3])) for j in jobs] == [
        ("srpo_default_debate/seed0/ckpt/step00001", ["solver"])]


def test_eval_jobs_start_with_each_configs_base_model(tmp_path):
    write_run(tmp_path, "srpo_single_srpo", 0, [(60, 0.5)], scored=False)
    jobs = tta.eval_jobs(tmp_path)
    assert [(j[0].relative_to(tmp_path).as_posix(), j[1], j[3]) for j in jobs] == [
        ("_base/single", "math/single", {}),
        ("srpo_single_srpo/seed0/ckpt/step00000", "math/single",
         {"solver": tmp_path / "srpo_single_srpo/seed0/ckpt/step00000/solver"})]


def test_eval_command_loads_each_policys_adapter():
    cmd = tta.eval_command("benchmarks/tta/srpo_trio.yaml", ["model.name=tiny"],
                           {"agent_a": Path("c/agent_a"), "agent_b": Path("c/agent_b")}, 1, Path("c/eval.json"))
    assert cmd[1:] == ["-m", "srpo.cli", "eval", "benchmarks/tta/srpo_trio.yaml", "model.name=tiny",
                       'policies.lora.init={"agent_a": "c/agent_a", "agent_b": "c/agent_b"}', "train.threads=1",
                       "--out", "c/eval.json"]


def test_clock_saves_at_marks_with_the_clock_paused(monkeypatch):
    """The clock starts at wall 0; steps end at wall 25, 65, 70, 200, 230; each save takes 5 s of
    wall time, which the training clock does not count."""
    now = {"t": 0.0}
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(perf_counter=lambda: now["t"]))
    saved = []

    def save(tag):
        saved.append(tag)
        now["t"] += 5.0

    c = clock.TrainingClock(every=60, budget=200, save=save, started=-12.0)
    c.start()
    stops = []
    for step, wall in enumerate((25, 65, 70, 200, 230), start=1):
        now["t"] = wall
        stops.append(c.after_step(step))
    # T at each step end: 25; 65 (a save, 5 s paused); 70 - 5 = 65; 200 - 5 = 195 (crossed 120 and 180:
    # one save, next mark 240); 230 - 10 = 220 >= the budget (a save, stop)
    assert saved == ["step00002", "step00004", "step00005"]
    marks = [(m["step"], m["train_seconds"], m["save_seconds"]) for m in c.marks]
    assert marks == [(2, 65, 5), (4, 195, 5), (5, 220, 5)]
    assert stops == [False, False, False, False, True]
    assert c.startup_seconds == 12.0
    assert c.record()["save_seconds"] == 15.0


def test_runs_of_one_config_with_other_shapes_refuse_one_root(tmp_path):
    write_run(tmp_path, "srpo_single_srpo", 0, [(60, 0.5)])
    run = write_run(tmp_path, "srpo_single_grpo", 0, [(60, 0.5)])
    record = json.loads((run / "record.json").read_text())
    record["eval"]["overrides"] = ["model.name=tiny"]
    (run / "record.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="keep each --model in its own --root"):
        tta.eval_jobs(tmp_path)


def test_an_empty_root_analyzes_to_empty_tables(tmp_path):
    result = tta.analyze(tmp_path)
    assert (result["comparisons"], result["times"], result["curves"]) == ([], {}, {})


def test_phase_timer_counts_nested_calls_once(monkeypatch):
    """Wall clock: step() runs 0-10 s; inside it generate() 0-4 s, which calls score() 1-3 s,
    then update() 4-9 s. Exclusive phases: generation 4 - 2 = 2, scoring 2, update 5, and the
    step's own 10 - 4 - 5 = 1 in `step`; other = training seconds 12 minus 10."""
    now = {"t": 0.0}
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(perf_counter=lambda: now["t"]))

    class Trainer:
        def at(self, t):
            now["t"] = t

        def score(self):
            self.at(2), self.at(3)

        def generate(self):
            self.at(1)
            self.score()
            self.at(4)
            return "completions"

        def update(self):
            self.at(5), self.at(9)

        def step(self):
            assert self.generate() == "completions"  # the wrapper returns what the method returns
            self.update()
            self.at(10)

    trainer, phases = Trainer(), clock.PhaseTimer()
    for method, phase in (("step", "step"), ("generate", "generation"), ("score", "scoring"), ("update", "update")):
        phases.wrap(trainer, method, phase)
    trainer.step()
    record = phases.record(train_seconds=12.0)
    assert record["phases"] == {"step": 1.0, "generation": 2.0, "scoring": 2.0, "update": 5.0, "other": 2.0}
    assert record["phase_calls"] == {"step": 1, "generation": 1, "scoring": 1, "update": 1}


def test_phase_timer_closes_a_call_that_raises(monkeypatch):
    now = {"t": 0.0}
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(perf_counter=lambda: now["t"]))

    class Trainer:
        def generate(self):
            now["t"] = 2.0
            raise RuntimeError("stop")

    trainer, phases = Trainer(), clock.PhaseTimer()
    phases.wrap(trainer, "generate", "generation")
    with pytest.raises(RuntimeError, match="stop"):
        trainer.generate()
    assert phases.record(5.0)["phases"] == {"generation": 2.0, "other": 3.0}


def test_srpo_phases_sum_the_runs_phase_log_and_the_table_shows_them(root, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "time/rollout": 30.0, "time/sets": 0.25, "time/advantages": 0.25, "time/old_logprobs": 0.5,
             "time/update": 20.0, "reward/mean": 0.5},
            {"step": 2, "time/rollout": 10.0, "time/update": 9.0}]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    phases = tta.srpo_phases(metrics, train_seconds=71.0)
    assert phases == {"rollout": 40.0, "sets_advantages": 0.5, "old_logprobs": 0.5, "update": 29.0, "other": 1.0}
    for seed in (0, 1):  # a peer's record holds its phases (the peer scripts' PhaseTimer)
        path = root / "trl_grpo" / f"seed{seed}" / "record.json"
        record = json.loads(path.read_text())
        record["phases"] = {"generation": 90.0 + 10 * seed, "scoring": 5.0, "forward": 40.0, "backward": 40.0,
                            "other": record["train_seconds"] - 175.0 - 10 * seed}
        path.write_text(json.dumps(record))
    result = tta.analyze(root)
    assert result["times"]["trl_grpo"]["phases"]["generation"] == 95.0
    assert result["times"]["srpo_single_srpo"]["phases"] is None  # its runs have no phase record
    table = tta.markdown(result)
    # train mean 185.5 s: rollout 95 + 5 = 100 (54%), update 80 (43%), other 185.5 - 180 = 5.5 (3%)
    assert "| trl_grpo | 100.0 s (54%) | 80.0 s (43%) | 5.5 s (3%) |" in table
    assert "| srpo_single_srpo | - | - | - | no phase record |" in table


def test_fixed_times_compare_the_seeds_of_both_sides_with_welch_intervals(root):
    """At 60, 120, 180 s (240 is past the peer's end, 180): each side's a_s(t) and the Welch
    interval of the difference of means, checked against the formula written out."""
    from scipy import stats

    fast = {c["arm"]: c for c in tta.analyze(root)["comparisons"]}["srpo_single_srpo"]
    rows = fast["at_fixed_times"]
    assert [r["t"] for r in rows] == [60.0, 120.0, 180.0]
    # at 60 s both srpo seeds still hold the base (first marks at 61, 62); the peer 0.25 and the base
    assert (rows[0]["arm"], rows[0]["peer"], rows[0]["diff"]) == ([BASE, BASE], [0.25, BASE], -0.0625)
    assert rows[0]["ci_low"] < rows[0]["diff"] < rows[0]["ci_high"]
    a, b = rows[1]["arm"], rows[1]["peer"]
    assert (a, b, rows[1]["diff"]) == ([0.25, 0.5], [0.5, 0.125], 0.0625)
    va, vb = 0.03125 / 2, 0.0703125 / 2  # sample variance / n on each side
    df = (va + vb) ** 2 / (va ** 2 + vb ** 2)  # Welch-Satterthwaite, n - 1 = 1 on both sides
    half = stats.t.ppf(0.975, df) * (va + vb) ** 0.5
    assert rows[1]["ci_low"] == pytest.approx(0.0625 - half) and rows[1]["ci_high"] == pytest.approx(0.0625 + half)
    assert rows[1]["p"] == pytest.approx(2 * stats.t.sf(0.0625 / (va + vb) ** 0.5, df))
    assert (rows[2]["arm"], rows[2]["peer"]) == ([0.5, 0.25], [0.375, 0.25])
    # one seed on a side: the means and their difference, no interval
    slow = {c["arm"]: c for c in tta.analyze(root)["comparisons"]}["srpo_single_grpo"]
    assert [r["t"] for r in slow["at_fixed_times"]] == [60.0, 120.0]  # the slow arm ends at 150
    assert slow["at_fixed_times"][1]["arm"] == [0.25] and slow["at_fixed_times"][1]["ci_low"] is None
    assert "| trl_grpo | srpo_single_srpo | 120 s | 37.5% | 31.2% | +6.2 [" in tta.markdown(tta.analyze(root))


def test_verdicts_reads_h1_to_h3_with_holm_and_names_each():
    """H1, H2 from at_fixed_times at 120 s and 300 s, H3 from lowest_agent_end against the baseline:
    a clear lead is supported, a clear deficit refuted, a noisy tie undecided."""
    analysis = {"comparisons": [{"arm": "srpo_trio_grpo_own", "at_fixed_times": [
        {"t": 120.0, "arm": [0.30, 0.31, 0.29, 0.30, 0.32], "peer": [0.20, 0.21, 0.19, 0.20, 0.22]},
        {"t": 300.0, "arm": [0.30, 0.10, 0.35, 0.15, 0.25], "peer": [0.20, 0.30, 0.15, 0.28, 0.22]}]}],
        "times": {"srpo_trio_grpo_own": {"lowest_agent_end": [0.05, 0.06, 0.04, 0.05, 0.07]}}}
    lines = tta.verdicts(analysis, "srpo_trio_grpo_own", [0.30, 0.31, 0.29, 0.32, 0.30], "baseline")
    assert lines[0].startswith("H1: +10.0 [") and lines[0].endswith(": supported")
    assert lines[1].startswith("H2: +0.0 [") and lines[1].endswith(": undecided")
    assert lines[2].startswith("H3: -25.0 [") and lines[2].endswith(": refuted")
    assert lines[3] == ("lowest debater at the end, seeds 0-4: [5.0, 6.0, 4.0, 5.0, 7.0] "
                        "baseline: [30.0, 31.0, 29.0, 32.0, 30.0]")


def test_verdicts_print_a_p_near_the_threshold_with_three_significant_digits():
    """The before-marks study's H1 (problems right of 256 at 120 s): one-sided p 0.0496, the
    largest of the three, so Holm leaves it; it must read as below 0.05 beside "supported"."""
    arm, peer = [x / 256 for x in (90, 87, 84, 98, 104)], [x / 256 for x in (87, 98, 60, 53, 75)]
    analysis = {"comparisons": [{"arm": "srpo_trio_grpo_own_2draws", "at_fixed_times": [
        {"t": 120.0, "arm": arm, "peer": peer},
        {"t": 300.0, "arm": [0.40, 0.41, 0.39, 0.40, 0.42], "peer": [0.20, 0.21, 0.19, 0.20, 0.22]}]}],
        "times": {"srpo_trio_grpo_own_2draws": {"lowest_agent_end": [0.30, 0.31, 0.29, 0.30, 0.32]}}}
    lines = tta.verdicts(analysis, "srpo_trio_grpo_own_2draws", [0.05, 0.06, 0.04, 0.05, 0.07], "baseline")
    assert tta.welch_one_sided(arm, peer)[3] == pytest.approx(0.0496, abs=5e-5)
    assert lines[0] == "H1: +7.0 [-1.8, +15.9] one-sided p 0.0496 Holm 0.0496: supported"


def test_verdicts_h3_at_120_tests_the_arms_runs_at_120_s_against_the_baseline():
    """The 2-draws plan's H3: the arm's accuracies at 120 s (the same values H1 uses) against a
    fixed baseline; H1 and H2 unchanged; a baseline of the wrong length is refused by name."""
    analysis = {"comparisons": [{"arm": "srpo_trio_grpo_own_2draws", "at_fixed_times": [
        {"t": 120.0, "arm": [0.40, 0.41, 0.39, 0.40, 0.42], "peer": [0.20, 0.21, 0.19, 0.20, 0.22]},
        {"t": 300.0, "arm": [0.30, 0.10, 0.35, 0.15, 0.25], "peer": [0.20, 0.30, 0.15, 0.28, 0.22]}]}],
        "times": {"srpo_trio_grpo_own_2draws": {"lowest_agent_end": None}}}
    lines = tta.verdicts(analysis, "srpo_trio_grpo_own_2draws", [0.30, 0.31, 0.29, 0.32, 0.30], "earlier",
                         h3="at-120")
    assert lines[0].startswith("H1: +20.0 [") and lines[0].endswith(": supported")
    assert lines[1].startswith("H2: +0.0 [") and lines[1].endswith(": undecided")
    d, low, high, p = tta.welch_one_sided([0.40, 0.41, 0.39, 0.40, 0.42], [0.30, 0.31, 0.29, 0.32, 0.30])
    assert lines[2].startswith(f"H3: {100 * d:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]")
    assert d == pytest.approx(0.10) and lines[2].endswith(": supported")
    assert lines[3] == ("accuracy at 120 s, seeds 0-4: [40.0, 41.0, 39.0, 40.0, 42.0] "
                        "earlier: [30.0, 31.0, 29.0, 32.0, 30.0]")
    with pytest.raises(ValueError, match="4 baseline values"):
        tta.verdicts(analysis, "srpo_trio_grpo_own_2draws", [0.3] * 4, "earlier", h3="at-120")
    with pytest.raises(ValueError, match="unknown H3 measure"):
        tta.verdicts(analysis, "srpo_trio_grpo_own_2draws", [0.3] * 5, "earlier", h3="median")


def fake_time(monkeypatch) -> dict:
    now = {"t": 0.0}
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(perf_counter=lambda: now["t"]))
    return now


def test_clock_before_marks_hold_the_last_state_before_each_nominal_time(monkeypatch):
    """"before" mode: every step's state is saved (5 s each, paused) as the pending checkpoint and
    the one before is discarded; a step end past k * 60 (or the budget) makes the pending one the
    mark, "at" the nominal time it stands for. Steps end at wall 25, 50, 80, 100, 230, 260, 340."""
    now = fake_time(monkeypatch)
    saved, discarded = [], []

    def save(tag):
        saved.append(tag)
        now["t"] += 5.0

    c = clock.TrainingClock(every=60, budget=300, save=save, marks="before", discard=discarded.append)
    c.start()
    stops = []
    for step, wall in enumerate((25, 50, 80, 100, 230, 260, 340), start=1):
        now["t"] = wall
        stops.append(c.after_step(step))
    # T: 25; 50 - 5 = 45; 80 - 10 = 70 (past 60: step 2, T 45, is the mark at 60); 100 - 15 = 85;
    # 230 - 20 = 210 (past 120 and 180: step 4 stands for both, "at" the later); 260 - 25 = 235;
    # 340 - 30 = 310 >= the budget: step 6 is the mark at 300, nothing saved after it, stop
    assert saved == [f"step{i:05d}" for i in range(1, 7)]
    assert discarded == ["step00001", "step00003", "step00005"]
    assert [(m["step"], m["train_seconds"], m["at"]) for m in c.marks] == [(2, 45, 60), (4, 85, 180), (6, 235, 300)]
    assert stops == [False] * 6 + [True]
    record = c.record()
    assert record["save_seconds"] == 30.0 and record["mark_mode"] == "before"
    c.finish()  # after the budget: nothing more
    assert len(c.marks) == 3


def test_clock_finish_keeps_the_last_state_when_the_data_runs_out(monkeypatch):
    """A trainer whose data ends before the budget: "after" saves its state then, "before" makes
    the pending save the mark, standing for the time the trainer stopped."""
    now = fake_time(monkeypatch)
    after = clock.TrainingClock(every=60, budget=300, save=lambda tag: None)
    after.start()
    now["t"] = 30.0
    assert after.after_step(1) is False and after.marks == []
    now["t"] = 40.0
    after.finish()
    assert [(m["step"], m["train_seconds"]) for m in after.marks] == [(1, 40.0)]
    now["t"] = 70.0
    after.after_step(2)  # a mark at 60 s: step 2 is saved
    now["t"] = 75.0
    after.finish()  # its last state is that mark already: no second save of step 2
    assert [m["step"] for m in after.marks] == [1, 2]

    now["t"] = 0.0
    before = clock.TrainingClock(every=60, budget=300, save=lambda tag: None, marks="before", discard=lambda tag: None)
    before.start()
    now["t"] = 30.0
    before.after_step(1)
    now["t"] = 40.0
    before.finish()
    assert [(m["step"], m["train_seconds"], m["at"]) for m in before.marks] == [(1, 30.0, 40.0)]


def test_clock_refuses_an_unknown_mode_and_before_without_discard():
    with pytest.raises(ValueError, match="unknown mark mode 'middle'"):
        clock.TrainingClock(every=60, budget=300, save=lambda tag: None, marks="middle")
    with pytest.raises(ValueError, match="give discard"):
        clock.TrainingClock(every=60, budget=300, save=lambda tag: None, marks="before")


def test_before_marks_compare_both_sides_at_the_nominal_times(tmp_path):
    """Runs with "before" marks: the checks are the nominal times (60, 120 s), a run ends at its
    last nominal time (not at its mark's earlier T), and seed by seed each side is read at each
    check time with the state it held then."""
    base = tta.base_dir(tmp_path, "math/single")
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps({"accuracy": BASE, "n": 256, "seconds": 2.0}))
    for arm, marks in (("trl_grpo", [(58, 60, 0.25), (115, 120, 0.5)]),
                       ("srpo_single_srpo", [(50, 60, 0.375), (118, 120, 0.375)])):
        run = write_run(tmp_path, arm, 0, [(t, acc) for t, _, acc in marks])
        record = json.loads((run / "record.json").read_text())
        for mark, (_, at, _) in zip(record["marks"], marks):
            mark["at"] = float(at)
        (run / "record.json").write_text(json.dumps(record))
    runs = tta.load_runs(tmp_path)
    assert runs["trl_grpo"][0]["checks"] == [60.0, 120.0] and runs["trl_grpo"][0]["end"] == 120.0
    assert tta.arm_end(runs["trl_grpo"]) == 120.0
    assert tta.mean_curve(runs["trl_grpo"])[-1] == (120.0, 0.5, 0.5, 0.5)
    row = tta.compare(runs, "trl_grpo", "srpo_single_srpo")
    # at 60 s: 0.375 against 0.25 (ahead); at 120 s: 0.375 against 0.5 (behind); the arm reads
    # its 118 s mark at 120 s although the peer's mark is at 115 s
    assert row["equal_time_per_seed"] == [{"seed": 0, "ahead": 1, "tied": 0, "behind": 1,
                                           "behind_at": [{"t": 120.0, "arm": 0.375, "peer": 0.5}]}]
    assert [r["t"] for r in row["at_fixed_times"]] == [60.0, 120.0]
    assert row["peer_total"] == 120.0 and row["arm_at_peer_total"] == 0.375


def test_run_lr_reaches_every_side_and_is_absent_by_default():
    """`run --lr X` replaces srpo's train.lr and passes --lr X to a peer script; without it each
    side keeps its own (no override, no flag)."""
    arm = tta.ARMS["srpo_trio_grpo_own_2draws"]
    with_lr = tta.srpo_overrides(arm, "smollm2", 0, 2, Path("out"), 8e-4)
    assert with_lr[-1] == "train.lr=0.0008" and with_lr[:len(arm.overrides)] == list(arm.overrides)
    assert not any(o.startswith("train.lr=") for o in tta.srpo_overrides(arm, "smollm2", 0, 2, Path("out")))
    from srpo.config import load_config
    assert load_config(arm.config, with_lr).train.lr == pytest.approx(8e-4)
    parser_args = ["run", "--arm", "comlrl_magrpo", "--peer-python", "py", "--marks", "before", "--lr", "8e-4"]
    args = tta.build_parser().parse_args(parser_args)
    command = tta.peer_command(tta.ARMS["comlrl_magrpo"], args, Path("m"), Path("t.json"), Path("o"))
    assert command[command.index("--lr") + 1] == "0.0008" and command[command.index("--marks") + 1] == "before"
    default = tta.build_parser().parse_args(parser_args[:-2])
    assert default.lr is None
    assert "--lr" not in tta.peer_command(tta.ARMS["comlrl_magrpo"], default, Path("m"), Path("t.json"), Path("o"))
