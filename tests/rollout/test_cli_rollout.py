"""`srpo rollout` and `srpo workflows`, through a parser built like srpo.cli builds its own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from srpo.cli.rollout import add_rollout_commands
from srpo.workflows import list_workflows

SMOKE = str(Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml")


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="srpo")
    sub = parser.add_subparsers(dest="command", required=True)
    add_rollout_commands(sub)
    args = parser.parse_args(argv)
    return args.handler(args)


def test_workflows_lists_every_builtin_with_a_description(capsys):
    assert run_cli(["workflows"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(list_workflows())
    for (name, description), line in zip(list_workflows(), lines):
        assert line.split()[0] == name and line.endswith(description)


def test_rollout_writes_one_episode_a_line(tmp_path, capsys):
    out = tmp_path / "sub" / "eps.jsonl"
    code = run_cli(["rollout", SMOKE, "group_size=3", "sampling.max_new_tokens=4",
                    "--n", "2", "--out", str(out)])
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 * 3
    for r in records:
        assert r["workflow"] == "parallel" and isinstance(r["reward"], float)
        assert [t["event"] for t in r["transitions"]] == ["solve", "aggregate"]
        assert [len(t["members"]) for t in r["transitions"]] == [3, 1]
        for t in r["transitions"]:
            for m in t["members"]:
                assert set(m) >= {"agent", "text", "num_tokens"} and 1 <= m["num_tokens"] <= 4
    assert [r["task_id"] for r in records][:3] == [records[0]["task_id"]] * 3
    assert "wrote 6 episodes (2 tasks x 3)" in capsys.readouterr().out


def test_rollout_other_workflow_and_ids(tmp_path, capsys):
    out = tmp_path / "eps.jsonl"
    code = run_cli(["rollout", SMOKE, "sampling.max_new_tokens=3", "--workflow", "routed",
                    "--n", "1", "--out", str(out), "--with-ids", "--split", "heldout"])
    assert code == 0
    (first, second) = [json.loads(line) for line in out.read_text().splitlines()]
    assert first["workflow"] == "routed" and "/heldout/" in first["task_id"]
    assert first["metadata"]["route_invalid"] == 1  # a random model does not route validly
    member = first["transitions"][0]["members"][0]
    assert len(member["response_ids"]) == len(member["loss_mask"]) == member["num_tokens"]
    assert "invalid router choices: 2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--workflow", "paralel"], "unknown workflow 'paralel'; did you mean 'parallel'? known workflows"),
        (["sampling.temprature=1"], "unknown key(s) ['sampling.temprature']"),
        (["workflow.params={aggregator: judge}"], "needs agent(s) ['judge']"),
        (["--n", "999"], "asked for 999 train tasks"),
    ],
)
def test_rollout_bad_input_exits_2_with_a_message(tmp_path, capsys, argv, message):
    positional = [a for a in argv if "=" in a and not a.startswith("--")]
    options = [a for a in argv if a not in positional]
    if "--n" not in options:
        options += ["--n", "1"]
    code = run_cli(["rollout", SMOKE, *positional, *options, "--out", str(tmp_path / "x.jsonl")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("srpo rollout: ") and message in err
    assert not (tmp_path / "x.jsonl").exists()


def test_missing_config_file(tmp_path, capsys):
    code = run_cli(["rollout", str(tmp_path / "none.yaml"), "--n", "1", "--out", str(tmp_path / "x")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_a_full_disk_in_any_command_is_one_line_and_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    """srpo.cli.main's floor for every command (rollout here): exit 1, one line naming the file;
    the rollout file is written temp-then-rename, so nothing half-written stays."""
    import errno
    import os

    from srpo.cli import main

    def full(fd):  # the write lands in the page cache; the disk says no when it is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "eps.jsonl"
    code = main(["rollout", SMOKE, "group_size=2", "sampling.max_new_tokens=3", "--n", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert len(err.splitlines()) == 1 and f"the disk is full (No space left on device) while writing {out}" in err, err
    assert list(tmp_path.iterdir()) == []
