"""Every JSONL file srpo writes reads back whole, whatever characters a model generated.

The characters that broke it: U+0085, U+2028 and U+2029, which JSON leaves raw and
str.splitlines() splits at (a plain run failed at its report); NUL and the other control
characters (JSON escapes them); a lone surrogate (valid in a Python str and as a JSON escape, not
encodable as UTF-8). Each writer / reader pair is checked with all of them in one string.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from srpo.jsonl import dumps_line, escape_unsafe, loads_lines, split_lines
from srpo.record import episodes_log
from srpo.record.metrics_log import MetricsLogger, read_metrics
from srpo.record.report.render import data_json
from srpo.rollout.episode_lines import write_jsonl
from srpo.tasks.search.corpus import corpus_hash, read_corpus_jsonl, write_corpus_jsonl
from srpo.tasks.search.documents import Document
from srpo.types import ActiveSet, Episode, Member, Task
from srpo_lab.study.runner import read_metrics as study_read_metrics

# each one alone, and all together beside ordinary and non-ASCII text
HOSTILE = ["\x85", "\u2028", "\u2029", "\x00", "\ud800", "\udfff", "\x0b\x0c\x1c\x1d\x1e", "\r\n"]
ALL = "a" + "b".join(HOSTILE) + " é ✓ 😀"
TEXTS = [*HOSTILE, ALL]


@pytest.mark.parametrize("text", TEXTS, ids=[f"U+{ord(t[0]):04X}" for t in TEXTS])
def test_a_line_holds_any_string_and_reads_back_identical(text):
    line = dumps_line({"text": text, text: 1})
    assert line.endswith("\n") and line.count("\n") == 1
    assert len(line[:-1].splitlines()) == 1  # no reader, however it splits lines, cuts it
    line.encode("utf-8")  # a lone surrogate would raise here if written raw
    (back,) = loads_lines(line, "x")
    assert back == {"text": text, text: 1}


def test_ordinary_text_stays_readable_utf8_not_escaped():
    assert dumps_line({"t": "é ✓"}) == '{"t": "é ✓"}\n'


def test_escapes_apply_only_inside_strings_so_the_json_stays_valid():
    raw = json.dumps(["\u2028", {"\x85": "\ud800"}], ensure_ascii=False)
    assert json.loads(escape_unsafe(raw)) == ["\u2028", {"\x85": "\ud800"}]


def test_a_file_of_an_older_srpo_with_raw_separators_reads_back():
    """Files written before the fix hold U+2028 etc. raw inside strings: only "\\n" ends a line."""
    old = json.dumps({"t": "x\u2028y\x85z"}, ensure_ascii=False) + "\n" + '{"t": 2}\n'
    assert loads_lines(old, "old") == [{"t": "x\u2028y\x85z"}, {"t": 2}]
    assert split_lines(old) == (old.split("\n")[:2], "")


def test_a_line_that_is_not_json_is_named_with_its_number():
    with pytest.raises(ValueError, match=r"f\.jsonl: line 2 is not valid JSON"):
        loads_lines('{"a": 1}\n{oops\n', "f.jsonl")


def _episode(text: str) -> Episode:
    # what a model generates may hold any character (a lone surrogate too); a task's own text
    # may not (srpo.types.Task refuses one), so the odd text goes where generations go
    task = Task(task_id="t0", prompt="q", answer="a")
    member = Member(agent="solver", policy="shared", prompt_ids=[1], response_ids=[2, 3],
                    loss_mask=[1, 1], text=text)
    return Episode(task=task, workflow="single",
                   transitions=[ActiveSet(members=(member,), event="solve", task_id="t0")],
                   reward=1.0, metadata={"note": text})


def test_episodes_log_round_trip(tmp_path):
    recs = [{"step": 1, "transitions": [{"members": [{"text": t}]}], "question": t} for t in TEXTS]
    path = episodes_log.write_records(tmp_path / "step-000001.jsonl.gz", recs)
    assert episodes_log.read_records(path) == recs
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == len(TEXTS)


def test_rollout_file_round_trip(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    assert write_jsonl([_episode(t) for t in TEXTS], path) == len(TEXTS)
    back = loads_lines(path.read_text(encoding="utf-8"), str(path))
    assert [r["transitions"][0]["members"][0]["text"] for r in back] == TEXTS
    assert [r["metadata"]["note"] for r in back] == TEXTS
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(TEXTS)


def test_corpus_round_trip_and_hash(tmp_path):
    docs = [Document(doc_id=f"d{i}", title=t, text=f"text {t}") for i, t in enumerate(TEXTS)]
    path = write_corpus_jsonl(docs, tmp_path / "corpus.jsonl")
    assert read_corpus_jsonl(path) == docs
    assert corpus_hash(docs) == corpus_hash(read_corpus_jsonl(path))


def test_metrics_round_trip_with_hostile_metric_names(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        for i, t in enumerate(TEXTS):
            log.log(i, {f"agent/{t}/reward": float(i)})
    rows = read_metrics(tmp_path)
    assert [r[f"agent/{t}/reward"] for r, t in zip(rows, TEXTS)] == list(map(float, range(len(TEXTS))))
    assert study_read_metrics(tmp_path / "metrics.jsonl") == [
        {"step": i, f"agent/{t}/reward": float(i)} for i, t in enumerate(TEXTS)]
    with MetricsLogger(tmp_path, tensorboard=False) as log:  # reopening parses it again
        assert log.resume(3) == len(TEXTS) - 4
    assert len(read_metrics(tmp_path)) == 4


def test_report_data_embeds_any_string():
    text = data_json({"t": ALL, "s": "</script><!--"})
    assert "<" not in text and "\u2028" not in text and "\x85" not in text
    text.encode("utf-8")
    assert json.loads(text) == {"t": ALL, "s": "</script><!--"}


def test_an_episodes_file_damaged_mid_stream_is_one_line_from_srpo_report(tmp_path, capsys):
    from srpo.cli import main
    from srpo.config import load_config
    from srpo.train.trainer import Trainer

    run = tmp_path / "run"
    Trainer(
        load_config(
            str(Path(__file__).resolve().parents[2] / "srpo" / "presets" / "smoke.yaml"),
            [
                f"output_dir={run}",
                "train.steps=2",
                "eval.size=0",
                "train.threads=1",
                "checkpoint.plots=false",
                "checkpoint.tensorboard=false",
                "checkpoint.export=false",
            ],
        )
    ).train()
    path = episodes_log.step_file(run, 1)
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 32):  # deflate damage inside the stream, not the header
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path} is not a readable gzip JSONL file" in err, err
