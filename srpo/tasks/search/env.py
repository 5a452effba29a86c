"""The search environment: tag parsing, retrieval calls with accounting, observations.

An agent searches by writing `<search>query</search>` and answers with `<answer>...</answer>`.
Its generation stops at `</search>` (SamplingParams.stop) so that the results can be inserted
as an observation (`ctx.observe`: loss_mask 0, never trained), delimited as

    <information>
    Query: who founded Veltra?
    [1] Veltra. Veltra is a river port founded by ...
    [2] ...
    </information>

and the agent continues. The workflows (srpo/tasks/search/workflows.py) drive the turns; this module
holds what they share:

  * `parse_turn(text)`: the tags of one generation. A block is well formed when its open tag is
    followed by its own close tag with no other tag in between; every other tag is malformed
    (an unclosed `<search>`, a `<search>` inside a `<search>`, a stray `</answer>`...).
  * `SearchEnv`: the retriever plus the limits (top_k, calls per turn, turn budget, observation
    length); `observation(parsed, stats)` answers one searcher turn, `retrieve` runs a batch
    of queries as ONE retriever call, `information(stats)` formats everything found so far.
  * `SearchStats`: per-episode counts, written into Episode.metadata (keys in `metadata`).

Outcomes of one searcher turn without an answer (`SearchEnv.observation`):
  * malformed tags or an empty query: no call runs; the observation says what was wrong
    (counted in search_invalid, the reason in search_errors);
  * no tag at all: the observation reminds the agent of the protocol (search_invalid);
  * more than max_calls_per_turn queries: the first ones run, the others are listed as not run
    (search_dropped);
  * an observation body longer than max_observation_chars is cut, ending with TRUNCATED
    (search_truncated).
Passage texts are sanitized: tag names the parser reads are removed from them, so a document
cannot inject a `<search>` or an `<answer>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from srpo.tasks.search.documents import Passage, Retriever

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
INFO_OPEN, INFO_CLOSE = "<information>", "</information>"
TRUNCATED = " ...[truncated]"

_TAG = re.compile(r"<(/?)(search|answer)>")
_ANY_TAG = re.compile(r"</?(?:search|answer|information)>", re.IGNORECASE)


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Block:
    """One well-formed `<tag>content</tag>`; start/end: its span in the parsed text."""

    tag: str  # "search" | "answer"
    content: str  # stripped
    start: int
    end: int


@dataclass(frozen=True)
class TurnParse:
    """The tags of one generation.

    blocks: the well-formed blocks, in order. errors: one reason per malformed tag or empty
    block. queries: the non-empty search contents. answer: the content of the first answer
    block (None: no answer block).
    """

    blocks: tuple[Block, ...]
    errors: tuple[str, ...]

    @property
    def queries(self) -> list[str]:
        return [b.content for b in self.blocks if b.tag == "search" and b.content]

    @property
    def answers(self) -> list[Block]:
        return [b for b in self.blocks if b.tag == "answer"]

    @property
    def answer(self) -> str | None:
        answers = self.answers
        return answers[0].content if answers else None


def parse_turn(text: str) -> TurnParse:
    """Well-formed blocks and malformed tags of a generation (see the module doc)."""
    tags = list(_TAG.finditer(text))
    blocks: list[Block] = []
    errors: list[str] = []
    i = 0
    while i < len(tags):
        m = tags[i]
        closing, name = bool(m.group(1)), m.group(2)
        if closing:
            errors.append(f"</{name}> without an opening <{name}>")
            i += 1
            continue
        nxt = tags[i + 1] if i + 1 < len(tags) else None
        if nxt is None:
            errors.append(f"<{name}> is not closed")
        elif nxt.group(1) and nxt.group(2) == name:
            content = text[m.end() : nxt.start()].strip()
            blocks.append(Block(name, content, m.start(), nxt.end()))
            if not content:
                errors.append("empty query" if name == "search" else "empty answer")
            i += 2
            continue
        else:
            errors.append(f"<{name}> is not closed before {nxt.group(0)}")
        i += 1
    return TurnParse(tuple(blocks), tuple(errors))


def sanitize(text: str) -> str:
    """A passage text on one line, without the tags the parser and the reward read."""
    return " ".join(_ANY_TAG.sub("", text).split())


# --------------------------------------------------------------------------- accounting


PLAIN_QUERY_CHARS = 200  # longest query taken from an untagged reply


@dataclass
class SearchStats:
    """Counts of one episode (see `metadata` for the keys written into Episode.metadata)."""

    turns: int = 0  # searcher generations / query-writer outputs parsed
    calls: int = 0  # queries sent to the retriever
    dropped: int = 0  # queries over max_calls_per_turn (not run)
    invalid: int = 0  # turns with malformed tags, an empty query or no action
    truncated: int = 0  # observations cut to max_observation_chars
    budget_exhausted: int = 0  # 1: the turns/rounds ran out without an <answer>
    plain_queries: int = 0  # untagged query-writer replies used as queries (plain_text_fallback)
    errors: list[str] = field(default_factory=list)  # reasons of the invalid turns
    # doc id -> (best rank, first-seen order, passage): everything retrieved in the episode
    found: dict[str, tuple[int, int, Passage]] = field(default_factory=dict)
    # the doc ids of each retrieval step, in order (a searcher turn's call, a search_parallel
    # round's one call; a round that ran no query is an empty step)
    steps: list[frozenset[str]] = field(default_factory=list)

    def add(self, passages: Sequence[Passage]) -> None:
        for p in passages:
            old = self.found.get(p.doc_id)
            if old is None:
                self.found[p.doc_id] = (p.rank, len(self.found), p)
            elif p.rank < old[0]:
                self.found[p.doc_id] = (p.rank, old[1], p)

    def merged(self) -> list[Passage]:
        """Every retrieved document once, by best rank (ties: first retrieved first)."""
        return [p for _, _, p in sorted(self.found.values(), key=lambda v: (v[0], v[1]))]

    def metadata(self, task_metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Episode.metadata entries. Diagnostics, never part of the reward, written only when
        the task lists supporting_doc_ids (G):
          recall_at_k: |G ∩ everything retrieved| / |G|;
          first_step_recall: |G ∩ the first retrieval step's documents| / |G| (0 when no step
              ran), and first_step_complete: 1 when that step alone found all of G (a question
              answerable from the first round's retrieval alone);
          recall_hop<i>: 1 when the i-th supporting document was retrieved at all, for a chain
              question (metadata hops == |G|, G in hop order: the generated world's).
        """
        out: dict[str, Any] = {
            "search_turns": self.turns,
            "search_calls": self.calls,
            "search_dropped": self.dropped,
            "search_invalid": self.invalid,
            "search_truncated": self.truncated,
            "search_budget_exhausted": self.budget_exhausted,
            "search_plain_queries": self.plain_queries,
            "search_errors": list(self.errors),
            "retrieved_docs": len(self.found),
        }
        supporting = task_metadata.get("supporting_doc_ids")
        if supporting:
            out["recall_at_k"] = recall(self.found, supporting)
            first = recall(self.steps[0], supporting) if self.steps else 0.0
            out["first_step_recall"] = first
            out["first_step_complete"] = float(first == 1.0)
            if task_metadata.get("hops") == len(supporting):
                for i, doc_id in enumerate(supporting, 1):
                    out[f"recall_hop{i}"] = float(doc_id in self.found)
        return out


def recall(retrieved_ids: Any, supporting_ids: Sequence[str]) -> float:
    """|supporting ∩ retrieved| / |supporting| (distinct ids)."""
    gold = set(supporting_ids)
    if not gold:
        raise ValueError("recall needs at least one supporting document id")
    return len(gold & set(retrieved_ids)) / len(gold)


def recall_gain(round_ids: Any, earlier_ids: Any, supporting_ids: Sequence[str]) -> float:
    """|supporting ∩ (round - earlier)| / |supporting| (distinct ids): the share of the
    supporting documents that one retrieval returned and no earlier retrieval had. In [0, 1];
    0 for an empty retrieval. Summed over an episode's retrievals it is the episode's recall."""
    gold = set(supporting_ids)
    if not gold:
        raise ValueError("recall_gain needs at least one supporting document id")
    return len(gold & (set(round_ids) - set(earlier_ids))) / len(gold)


# --------------------------------------------------------------------------- the environment


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"SearchEnv.{name} must be an int >= 1, got {value!r}")
    return value


@dataclass
class SearchEnv:
    """A retriever and the limits of the search protocol.

    retriever: anything with `search(queries, k) -> [[Passage]]` (srpo.tasks.search.documents).
    top_k: passages per query. max_calls_per_turn: queries run per generation (the rest are
    dropped with a note). max_turns: generations of a searcher per episode (its turn budget,
    the answering one included). max_observation_chars: longest observation body (between the
    <information> tags); longer ones are cut and end with TRUNCATED.
    """

    retriever: Retriever
    top_k: int = 3
    max_calls_per_turn: int = 1
    max_turns: int = 4
    max_observation_chars: int = 1200
    # Small models rarely write the tags: with this on, a query writer's reply without any tag
    # is itself the query (its first non-empty line, tags removed, at most PLAIN_QUERY_CHARS).
    plain_text_fallback: bool = False

    def __post_init__(self) -> None:
        if not callable(getattr(self.retriever, "search", None)):
            raise TypeError(
                f"SearchEnv.retriever must have search(queries, k), got "
                f"{type(self.retriever).__name__}"
            )
        for name in ("top_k", "max_calls_per_turn", "max_turns", "max_observation_chars"):
            _positive_int(name, getattr(self, name))
        if self.max_observation_chars <= len(TRUNCATED):
            raise ValueError(
                f"SearchEnv.max_observation_chars must exceed {len(TRUNCATED)} (room for the "
                f"truncation marker), got {self.max_observation_chars}"
            )

    def retrieve(self, queries: Sequence[str], stats: SearchStats) -> list[list[Passage]]:
        """Top-k passages of each query, as ONE retriever call (counted, added to stats)."""
        queries = list(queries)
        if not queries:
            stats.steps.append(frozenset())  # a step that ran nothing (a round without a query)
            return []
        results = self.retriever.search(queries, self.top_k)
        if len(results) != len(queries):
            raise ValueError(
                f"retriever {type(self.retriever).__name__} returned {len(results)} result "
                f"lists for {len(queries)} queries"
            )
        results = [list(r)[: self.top_k] for r in results]
        for r in results:
            if not all(isinstance(p, Passage) for p in r):
                raise ValueError(
                    f"retriever {type(self.retriever).__name__} returned a non-Passage result"
                )
        stats.calls += len(queries)
        for r in results:
            stats.add(r)
        stats.steps.append(frozenset(p.doc_id for r in results for p in r))
        return results

    def split_calls(self, parsed: TurnParse, stats: SearchStats) -> tuple[list[str], list[str]]:
        """(queries to run, queries dropped over max_calls_per_turn); counts the dropped."""
        queries = parsed.queries
        run, dropped = queries[: self.max_calls_per_turn], queries[self.max_calls_per_turn :]
        stats.dropped += len(dropped)
        return run, dropped

    def plain_query(self, text: str, parsed: TurnParse, stats: SearchStats) -> str | None:
        """With plain_text_fallback: the query a tagless reply stands for (counted), else None."""
        if not self.plain_text_fallback or parsed.blocks or parsed.errors:
            return None
        line = next((ln for ln in (sanitize(x) for x in text.splitlines()) if ln), "")
        if not line:
            return None
        stats.plain_queries += 1
        return line[:PLAIN_QUERY_CHARS]

    def invalid(self, parsed: TurnParse, stats: SearchStats) -> str | None:
        """Why a turn without an answer is not a valid search action (counted), else None."""
        if parsed.errors:
            reason = "; ".join(parsed.errors)
        elif not parsed.queries:
            reason = "no <search> or <answer> tag"
        else:
            return None
        stats.invalid += 1
        stats.errors.append(reason)
        return reason

    def observation(self, parsed: TurnParse, stats: SearchStats) -> str:
        """The observation answering one searcher turn that gave no answer (module doc)."""
        reason = self.invalid(parsed, stats)
        if reason is not None:
            return self.wrap(
                f"Invalid action: {reason}. Search with <search>query</search> or answer "
                f"with <answer>answer</answer>.",
                stats,
            )
        run, dropped = self.split_calls(parsed, stats)
        sections = [
            f"Query: {q}\n" + format_passages(ps) for q, ps in zip(run, self.retrieve(run, stats))
        ]
        limit = self.max_calls_per_turn
        sections += [
            f"Query: {q}\n(not run: at most {limit} search{'es' if limit > 1 else ''} per turn)"
            for q in dropped
        ]
        return self.wrap("\n".join(sections), stats)

    def information(self, stats: SearchStats) -> str:
        """Everything retrieved so far (dedup by doc id, by best rank) as one observation."""
        return self.wrap(format_passages(stats.merged()), stats)

    def wrap(self, body: str, stats: SearchStats) -> str:
        """`\\n<information>\\nBODY\\n</information>\\n`, BODY cut to the limit (counted)."""
        if len(body) > self.max_observation_chars:
            body = body[: self.max_observation_chars - len(TRUNCATED)] + TRUNCATED
            stats.truncated += 1
        return f"\n{INFO_OPEN}\n{body}\n{INFO_CLOSE}\n"


def format_passages(passages: Sequence[Passage]) -> str:
    """"[1] Title. text" lines (sanitized); "(no results)" when there are none."""
    if not passages:
        return "(no results)"
    lines = []
    for i, p in enumerate(passages, 1):
        title = sanitize(p.title)
        lines.append(f"[{i}] {title + '. ' if title else ''}{sanitize(p.text)}")
    return "\n".join(lines)
