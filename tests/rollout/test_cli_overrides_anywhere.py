"""`key=value` overrides are accepted anywhere on the command line, also after options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo.cli import build_parser, main, parse_args

SMOKE = str(Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml")


def test_overrides_after_options_join_the_others_in_order():
    args = parse_args(build_parser(), ["rollout", SMOKE, "group_size=1", "--n", "2", "--out", "x.jsonl",
                                       "sampling.max_new_tokens=3", "group_size=2"])
    assert args.n == 2 and args.out == "x.jsonl"
    # in the order given: the later group_size=2 wins when the config is loaded
    assert args.overrides == ["group_size=1", "sampling.max_new_tokens=3", "group_size=2"]
    args = parse_args(build_parser(), ["eval", "--n", "3", SMOKE, "eval.size=4", "--out", "e.json", "seed=1"])
    assert (args.config, args.n, args.overrides) == (SMOKE, 3, ["eval.size=4", "seed=1"])


@pytest.mark.parametrize("argv", [["rollout", SMOKE, "--n", "1", "--out", "x", "--bogus"],
                                  ["rollout", SMOKE, "--n", "1", "--out", "x", "notanoverride"],
                                  ["methods", "train.steps=3"]])  # `methods` takes no overrides
def test_other_stray_words_are_still_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(build_parser(), argv)
    assert e.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_rollout_applies_an_override_given_after_the_options(tmp_path):
    out = tmp_path / "eps.jsonl"
    assert main(["rollout", SMOKE, "--n", "1", "--out", str(out), "sampling.max_new_tokens=3",
                 "group_size=3", "workflow.name=single", "workflow.params={}"]) == 0
    eps = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(eps) == 3  # 1 task x group_size 3 (the override after --out)
    assert all(m["num_tokens"] <= 3 for e in eps for t in e["transitions"] for m in t["members"])
