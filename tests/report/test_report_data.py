"""What a run keeps for its report (episodes per step, evaluation episodes), the report's data and
HTML, the non-interactive log, and the errors on a missing or damaged run directory."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter

import pytest
from report_helpers import STEPS, SmokeRun, make_smoke_run

from srpo.cli import main
from srpo.record import episodes_log
from srpo.record.report import ReportError, collect_run, write_report
from srpo.types import ActiveSet, Episode, Member, Task


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> SmokeRun:
    return make_smoke_run(tmp_path_factory)


def _episodes(run_dir, step):
    return episodes_log.read_records(episodes_log.step_file(run_dir, step))


def test_every_step_keeps_its_episodes_with_the_update_of_each_active_set(smoke_run):
    rows = smoke_run.train_rows()
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [s for _, s in episodes_log.step_files(smoke_run.run_dir)] == list(range(1, STEPS + 1))
    computed = clipped = 0
    for row in rows:
        eps = _episodes(smoke_run.run_dir, row["step"])
        assert len(eps) == row["rollout/episodes"]  # 4 tasks x G 2, all kept (limit 256)
        sizes = Counter(t["size"] for e in eps for t in e["transitions"])
        assert sum(sizes.values()) == row["sets/all/count"]
        for k, n in sizes.items():
            assert row[f"sets/k{k}/count"] == n
        for e in eps:
            assert sum(e["reward_components"].values()) == pytest.approx(e["reward"])
            for t in e["transitions"]:
                assert t["skipped"] == (t["advantage"] == 0.0)  # SRPO leaves out exactly the A = 0 sets
                assert (t["log_ratio"] is None) == t["skipped"] == (t["clipped"] is None)
                for m in t["members"]:
                    assert m["prompt"].startswith("<|im_start|>") and m["num_tokens"] >= 1
                    assert m["agent"] and m["policy"] == "shared" and m["stop_reason"] in ("eos", "length")
                if not t["skipped"]:
                    computed += 1
                    clipped += t["clipped"] > 0
        assert len({e["workflow"] for e in eps}) >= 1
    # the update is off-policy (2 epochs x 2 minibatches): sets moved, and their log-ratios are
    # those of the last epoch that computed them
    assert computed > 0
    moved = [t["log_ratio"] for r in rows for e in _episodes(smoke_run.run_dir, r["step"])
             for t in e["transitions"] if t["log_ratio"] is not None]
    assert any(abs(x) > 0 for x in moved)
    # the logged clip fraction is non-zero exactly when some kept set was clipped
    assert (clipped > 0) == any(r["clip/all/frac"] > 0 for r in rows)


def test_evaluation_episodes_are_kept_beside_their_results(smoke_run):
    for label in ("before", "after"):
        result = json.loads((smoke_run.run_dir / "eval" / f"{label}.json").read_text())
        eps = episodes_log.read_records(smoke_run.run_dir / "eval" / f"{label}.episodes.jsonl.gz")
        assert [e["task_id"] for e in eps] == result["task_ids"]
        assert all("advantage" not in t for e in eps for t in e["transitions"])


def test_report_data_matches_the_run(smoke_run):
    data = collect_run(smoke_run.run_dir)
    rows = smoke_run.train_rows()
    assert data["metrics"]["steps"] == [r["step"] for r in rows]
    assert data["metrics"]["series"]["loss"] == pytest.approx([r["loss"] for r in rows])
    assert len(data["episodes"]) == sum(r["rollout/episodes"] for r in rows)
    assert data["budget"]["steps_done"] == STEPS and data["budget"]["workflow"] == "mixed"
    ev = data["evaluation"]
    assert [r["name"] for r in ev["runs"]] == ["before", "after"]  # in run order
    assert ev["paired"]["n"] == len(ev["problems"]) == 8
    gained = sum(not p["before"]["correct"] and p["after"]["correct"] for p in ev["problems"])
    assert ev["paired"]["gained"] == gained
    assert all(p["question"] and p["after"]["answers"] for p in ev["problems"])


def test_the_report_is_one_self_contained_file(smoke_run):
    html = (smoke_run.run_dir / "report.html").read_text()  # written by srpo train at the end
    assert "report: " in smoke_run.stdout
    # nothing is loaded from elsewhere: no script, stylesheet or image by URL (the browser test
    # also checks that opening it requests nothing)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html, re.IGNORECASE)
    # the embedded data is the run's, and no model output can end the data element early
    blob = html.split('<script type="application/json" id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in blob
    assert len(json.loads(blob)["episodes"]) == sum(r["rollout/episodes"] for r in smoke_run.train_rows())


def test_non_interactive_log_has_one_line_a_step_and_no_control_characters(smoke_run):
    out, err = smoke_run.stdout, smoke_run.stderr
    step_lines = [x for x in out.splitlines() if x.startswith("step ")]
    assert [x.split()[1] for x in step_lines] == [f"{i}/{STEPS}" for i in range(1, STEPS + 1)]
    # no bar redraws: no carriage return, escape or other control character (tabs aside)
    for name, text in (("stdout", out), ("stderr", err)):
        bad = sorted(
            {hex(ord(c)) for c in text if ord(c) < 32 and c not in "\n\t"} | ({"0x7f"} if "\x7f" in text else set())
        )
        assert not bad, f"{name} holds control characters {bad}"
    # the base model's evaluation says it started (minutes on the default job) and what it found
    assert "evaluating (before): 8 held-out problems ..." in out and out.count("[eval before]") == 1


def _member(agent: str) -> Member:
    return Member(agent=agent, policy="p", prompt_ids=[1, 2], response_ids=[3], loss_mask=[1], text="x")


def test_a_step_keeps_whole_task_groups_up_to_the_limit():
    eps = [
        Episode(Task(f"t{t}", "q"), "w", [ActiveSet((_member("a"),), "e", f"t{t}")], 0.0)
        for t in range(3)
        for _ in range(4)
    ]  # 3 tasks x G 4, task-major
    assert episodes_log.kept_episodes(eps, None) == list(range(12))
    assert episodes_log.kept_episodes(eps, 9) == list(range(8))  # 2 whole groups; a third would be 12
    assert episodes_log.kept_episodes(eps, 3) == []
    recs = episodes_log.episode_records(eps, step=1, prompt_text=lambda m: "P" * 10_000, keep=[5])
    assert recs[0]["index"] == 5 and recs[0]["task_id"] == "t1"
    prompt = recs[0]["transitions"][0]["members"][0]["prompt"]
    assert prompt.startswith("P" * episodes_log.MAX_TEXT_CHARS) and prompt.endswith("characters]")


def test_a_resumed_run_drops_the_episodes_of_steps_it_redoes(tmp_path):
    for s in (1, 2, 3):
        episodes_log.write_records(episodes_log.step_file(tmp_path, s), [])
    assert episodes_log.drop_steps_after(tmp_path, 1) == 2
    assert [s for _, s in episodes_log.step_files(tmp_path)] == [1]


def test_missing_or_damaged_run_directories_are_named(tmp_path, smoke_run, capsys):
    with pytest.raises(ReportError, match="no run directory at"):
        collect_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="has no config.yaml: not a run directory"):
        collect_run(tmp_path / "empty")
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "srpo report: no run directory at" in capsys.readouterr().err

    run = tmp_path / "copy"
    shutil.copytree(smoke_run.run_dir, run, ignore=shutil.ignore_patterns("checkpoints"))
    bad = episodes_log.step_file(run, 2)
    bad.write_bytes(bad.read_bytes()[:40])  # a truncated gzip file
    with pytest.raises(ReportError, match=r"step-000002\.jsonl\.gz is not a readable gzip JSONL file"):
        collect_run(run)
    with gzip.open(bad, "wt") as f:
        f.write('{"step": 2}\n')
    with pytest.raises(ReportError, match=r"step-000002\.jsonl\.gz: line 1 is not an episode record"):
        collect_run(run)
    bad.unlink()
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + "{oops\n")
    with pytest.raises(ReportError, match=r"metrics\.jsonl: line \d+ is not valid JSON"):
        write_report(run)
    (run / "metrics.jsonl").unlink()
    with pytest.raises(ReportError, match="has no metrics.jsonl"):
        collect_run(run)


def test_the_report_carries_the_drift_warnings_of_its_metrics_log(smoke_run, tmp_path):
    """A copy of the real run whose log's cut share climbs past 75% from step 2: the report's
    data holds the warning the console would have printed, recomputed from metrics.jsonl."""
    run = tmp_path / "run"
    shutil.copytree(smoke_run.run_dir, run, ignore=shutil.ignore_patterns(".srpo.lock"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    shares = iter([0.5, 0.8, 0.9])
    for r in rows:
        if "loss" in r:
            r["rollout/stop/length"] = next(shares)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    warnings = collect_run(run)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("warning: step 2: 80% of the training outputs were cut")
    # the unmodified run: exactly what the trainer's own function finds in its rows
    from srpo.record.drift import drift_warnings

    assert collect_run(smoke_run.run_dir)["warnings"] == [w.line() for w in drift_warnings(smoke_run.train_rows())]
