"""Screen 2-hop search recipes on the base model: greedy held-out episodes, what each hop found.

Each variant is the search job (`search/world`) on 2-hop questions of the generated world with
a few overrides (prompts, demonstrations, writers, retrieval depth). The base model is
evaluated greedily with `srpo eval --n N --out`, and the episodes are summarized:

    em                   exact match (the job's success measure)
    recall_hop1/2        the share of questions whose hop-1 / hop-2 document was retrieved
    first_step_complete  the share answerable from the first round's retrieval alone
    rounds               mean rounds used; tagged: answers in <answer> tags
    bridge_in_note       after round 1, the answerer's note names the bridge entity (the
                         name the second hop needs), among episodes with a second round
    bridge_queried       a round-2 query holds the bridge entity's name (same denominator)

Each round's writer set is also compared with each writer alone (set_docs_per_round: supporting
documents the set's one retrieval found; writer_docs_per_round: what one writer's own queries
find, averaged over the set's writers (one writer alone); best_writer_docs_per_round: the most
any one writer's own queries find; set_beats_best_writer: the share of rounds where the set
found more).

Usage (one variant, or all; results and episodes under --out):
    .venv/bin/python studies/search_2hop/screen.py run --variant writer_demos --n 64
    .venv/bin/python studies/search_2hop/screen.py table --out results/bench/search_2hop_<date>/screen
    .venv/bin/python studies/search_2hop/screen.py compare RUN_DIR [--examples 6]
        # a training run's held-out evaluations, before and after (RUN/eval/{before,after}),
        # the same columns, and examples: each round's queries and the answer, before and after
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# demonstrations, about entities that are not in the world (the job's answerer examples use them)
TARVO = ("Tarvo Books. Tarvo Books is a publishing house founded by Lina Oste. "
         "It is headquartered in Kelmor.")
OSTE = "Lina Oste. Lina Oste (born 1950 in Dravik) is a novelist. Oste works for Tarvo Books."
QUESTION_2HOP = "Where was the founder of Tarvo Books born?"
WRITER_DEMOS = [
    [f"Question: {QUESTION_2HOP}\nWrite a search query for this question.", "Tarvo Books"],
    [f"Question: {QUESTION_2HOP}\nFound so far:\n<information>\n[1] {TARVO}\n</information>\n"
     "Missing: where Lina Oste was born.\nWrite a search query for what is missing.", "Lina Oste"],
]
ANSWER_DEMOS = [
    [f"Search results:\n[1] {TARVO}\nQuestion: Who founded Tarvo Books?\n"
     "Reply with only the answer, as <answer>answer</answer>, or say what is missing.",
     "<answer>Lina Oste</answer>"],
    [f"Search results:\n[1] {TARVO}\nQuestion: {QUESTION_2HOP}\n"
     "Reply with only the answer, as <answer>answer</answer>, or say what is missing.",
     "Missing: where Lina Oste was born."],
]
ANSWER_DEMO_FINAL = [
    f"Search results:\n[1] {TARVO}\n[2] {OSTE}\nQuestion: {QUESTION_2HOP}\n"
    "Reply with only the answer, as <answer>answer</answer>.", "<answer>Dravik</answer>"]

TWO_HOP = ["task.search.hops=[2]"]
MISSING = "Say in one line what is missing."
FIXED_ANSWER_DEMOS = [
    [f"Search results:\n[1] {TARVO}\nQuestion: {QUESTION_2HOP}\n{MISSING}", "Missing: where Lina Oste was born."],
    ANSWER_DEMO_FINAL,
]
# round 2's writers without a note: the bridge comes from what was found
WRITER_DEMOS_FOUND = [
    WRITER_DEMOS[0],
    [f"Question: {QUESTION_2HOP}\nFound so far:\n<information>\n[1] {TARVO}\n</information>\n\n"
     "Write a search query for what is missing.", "Lina Oste"],
]
# a second writer role that names the entity and the relation asked ("Lina Oste birthplace")
RELATION_DEMOS = [
    [WRITER_DEMOS[0][0], "Tarvo Books founder"],
    [WRITER_DEMOS[1][0], "Lina Oste birthplace"],
]


def examples(role: str, demos: list) -> str:
    return f"agents.{role}.examples={json.dumps(demos)}"


FIXED = [*TWO_HOP, "workflow.params.between_rounds=note", f"workflow.params.more_instruction={MISSING}",
         examples("query_writer", WRITER_DEMOS), examples("answerer", FIXED_ANSWER_DEMOS)]
VARIANTS: dict[str, list[str]] = {
    # the 1-hop job as shipped, asked 2-hop questions
    "as_is": [*TWO_HOP],
    # + demonstrations for the query writers: the question's entity first, the bridge next
    "writer_demos": [*TWO_HOP, examples("query_writer", WRITER_DEMOS)],
    # + an answerer demonstration that reads two documents and answers with the second hop
    "writer_answer_demos": [*TWO_HOP, examples("query_writer", WRITER_DEMOS),
                            examples("answerer", [*ANSWER_DEMOS, ANSWER_DEMO_FINAL])],
    # two rounds always: the first read only says what is missing, the second answers
    "fixed": FIXED,
    # two rounds, no read between them: round 2's writers see what round 1 found
    "no_note": [*TWO_HOP, "workflow.params.between_rounds=none", examples("query_writer", WRITER_DEMOS_FOUND),
                examples("answerer", [ANSWER_DEMO_FINAL])],
    # the same with the query writers sampling at evaluation (T 0.7), the answerer greedy
    "no_note_sampled": [*TWO_HOP, "workflow.params.between_rounds=none", examples("query_writer", WRITER_DEMOS_FOUND),
                        examples("answerer", [ANSWER_DEMO_FINAL]), "eval.temperatures={query_writer: 0.7}"],
    # the same with two passages per query
    "fixed_top2": [*FIXED, "task.search.top_k=2"],
    # the same with two writer roles of one adapter: the name; the name and the relation
    "fixed_two_roles": [*FIXED, "agents.relation_writer.policy=searcher",
                        "agents.relation_writer.system_prompt=You write one search query as <search>query</search>.",
                        'agents.relation_writer.sampling={stop: ["</search>", "\\n"], max_new_tokens: 16}',
                        examples("relation_writer", RELATION_DEMOS),
                        "workflow.params.writers=[query_writer, relation_writer]"],
}


def run(variant: str, n: int, out: Path, threads: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{variant}.json"
    command = [sys.executable, "-m", "srpo.cli", "eval", "search/world", *VARIANTS[variant],
               f"train.threads={threads}", "--n", str(n), "--out", str(target)]
    t0 = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    print(f"{variant}: {time.perf_counter() - t0:.0f} s", flush=True)


def writer_queries(env, text: str) -> list[str]:
    """The queries the environment ran for one writer output (its parse, or the plain-text
    fallback), as search_parallel reads them."""
    from srpo.tasks.search.env import SearchStats, parse_turn

    parsed = parse_turn(text)
    if parsed.errors or not parsed.queries:
        plain = env.plain_query(text, parsed, SearchStats())
        return [] if plain is None else [plain]
    return parsed.queries[: env.max_calls_per_turn]


def summarize(path: Path, tasks: dict, env) -> dict:
    """The variant's episodes -> the table's columns (module doc). Each round's writer set is
    compared with each writer alone: the supporting documents the set's one retrieval finds
    against those the writer's own queries find (the same retriever and top_k)."""
    with gzip.open(path, "rt") as f:
        episodes = [json.loads(line) for line in f]
    md = [e["metadata"] for e in episodes]

    def mean(key: str) -> float:
        return statistics.fmean(float(m.get(key, 0.0)) for m in md)

    note_hits = query_hits = second = 0
    rounds = set_more = 0  # writer sets, and those whose set found a supporting doc no one writer alone did
    set_found = alone_found = one_found = 0.0
    for e in episodes:
        task = tasks[e["task_id"]]
        gold = set(task.metadata["supporting_doc_ids"])
        for t in e["transitions"]:
            if not t["event"].startswith("query-") or t["event"].endswith(":unconsumed"):
                continue
            per_writer = []
            for m in t["members"]:
                queries = writer_queries(env, m["text"])
                found = {p.doc_id for ps in env.retriever.search(queries, env.top_k) for p in ps} if queries else set()
                per_writer.append(found & gold)
            together = set().union(*per_writer)
            rounds += 1
            set_found += len(together)
            alone_found += max(len(f) for f in per_writer)
            one_found += statistics.fmean(len(f) for f in per_writer)  # one writer alone, on average
            set_more += len(together) > max(len(f) for f in per_writer)
        reads = [t for t in e["transitions"] if t["event"] == "read-1"]
        queries2 = [t for t in e["transitions"] if t["event"] == "query-2"]
        if not queries2:
            continue
        second += 1
        names = [b.lower() for b in task.metadata["bridge_entities"]]
        note = reads[0]["members"][0]["text"].lower() if reads else ""
        note_hits += any(b in note for b in names)
        query_hits += any(b in m["text"].lower() for t in queries2 for m in t["members"] for b in names)
    return {"n": len(episodes), "em": mean("score_em"), "recall_hop1": mean("recall_hop1"),
            "recall_hop2": mean("recall_hop2"), "first_step_complete": mean("first_step_complete"),
            "rounds": mean("search_rounds"), "tagged": mean("score_format"),
            "second_round": second / len(episodes),
            "bridge_in_note": note_hits / second if second else None,
            "bridge_queried": query_hits / second if second else None,
            "set_docs_per_round": set_found / rounds if rounds else None,
            "writer_docs_per_round": one_found / rounds if rounds else None,
            "best_writer_docs_per_round": alone_found / rounds if rounds else None,
            "set_beats_best_writer": set_more / rounds if rounds else None}


def variant_tasks_and_env(variant: str, n: int):
    """The first n held-out questions (id -> task) and the search environment of a variant."""
    sys.path.insert(0, str(ROOT))
    from srpo.build import load_tasks
    from srpo.config import load_config
    from srpo.tasks.search.pack import build_search_env

    cfg = load_config("search/world", VARIANTS[variant], check_machine=False)
    tasks = {t.task_id: t for t in load_tasks(cfg.task, split="heldout", limit=n)}
    return tasks, build_search_env(cfg.task)


COLUMNS = ["n", "em", "recall_hop1", "recall_hop2", "first_step_complete", "rounds", "tagged",
           "second_round", "bridge_in_note", "bridge_queried", "set_docs_per_round",
           "writer_docs_per_round", "best_writer_docs_per_round", "set_beats_best_writer"]


def cells(row: dict) -> list[str]:
    return ["-" if row[c] is None else f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c])
            for c in COLUMNS]


def table(out: Path, n: int) -> None:
    rows = {}
    for variant in VARIANTS:
        path = out / f"{variant}.episodes.jsonl.gz"
        if path.is_file():
            rows[variant] = summarize(path, *variant_tasks_and_env(variant, n))
    lines = ["| variant | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for variant, row in rows.items():
        lines.append(f"| {variant} | " + " | ".join(cells(row)) + " |")
    text = "\n".join(lines)
    (out / "table.md").write_text(text + "\n")
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    print(text)


def config_tasks_and_env(cfg):
    """Every held-out question of a loaded config (id -> task) and its search environment."""
    from srpo.build import load_tasks
    from srpo.tasks.search.pack import build_search_env

    return {t.task_id: t for t in load_tasks(cfg.task, split="heldout")}, build_search_env(cfg.task)


def episode_lines(e: dict) -> list[str]:
    return [f"{t['event']}: " + " | ".join(repr(m["text"][:60]) for m in t["members"]) for t in e["transitions"]]


def compare(run_dir: Path, n_examples: int) -> None:
    """Before/after table of a training run's held-out evaluations, and examples."""
    sys.path.insert(0, str(ROOT))
    from srpo.config import load_config

    cfg = load_config(run_dir / "config.yaml", check_machine=False)
    tasks, env = config_tasks_and_env(cfg)
    paths = {label: run_dir / "eval" / f"{label}.episodes.jsonl.gz" for label in ("before", "after")}
    rows = {label: summarize(path, tasks, env) for label, path in paths.items() if path.is_file()}
    lines = ["| eval | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for label, row in rows.items():
        lines.append(f"| {label} | " + " | ".join(cells(row)) + " |")
    print("\n".join(lines))
    if len(rows) < 2:
        return
    episodes = {}
    for label, path in paths.items():
        with gzip.open(path, "rt") as f:
            episodes[label] = {e["task_id"]: e for e in map(json.loads, f)}
    # examples: questions solved after and not before first, then the rest, in held-out order
    ids = [i for i in episodes["after"] if i in episodes["before"]]
    ids.sort(key=lambda i: -(episodes["after"][i]["metadata"].get("score_em", 0)
                             - episodes["before"][i]["metadata"].get("score_em", 0)))
    for task_id in ids[:n_examples]:
        task = tasks[task_id]
        print(f"\n{task.prompt} (gold {task.answer}; bridge {', '.join(task.metadata.get('bridge_entities', []))})")
        for label in ("before", "after"):
            print(f"  {label}:")
            for line in episode_lines(episodes[label][task_id]):
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--variant", choices=[*VARIANTS, "all"], default="all")
    t = sub.add_parser("table")
    for s in (r, t):
        s.add_argument("--n", type=int, default=64)
        s.add_argument("--out", type=Path, default=ROOT / "runs" / "search_2hop_screen")
    r.add_argument("--threads", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("run_dir", type=Path)
    c.add_argument("--examples", type=int, default=6)
    args = parser.parse_args()
    if args.command == "compare":
        compare(args.run_dir, args.examples)
        return
    if args.command == "run":
        for variant in VARIANTS if args.variant == "all" else [args.variant]:
            if not (args.out / f"{variant}.json").is_file():
                run(variant, args.n, args.out, args.threads)
        table(args.out, args.n)
    else:
        table(args.out, args.n)


if __name__ == "__main__":
    main()
