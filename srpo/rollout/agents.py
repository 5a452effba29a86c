"""Agents (roles) and their sampling settings.

An agent is a role in a workflow: a name, the policy that generates for it, a system prompt and a
template for its user turn. Several agents may share one policy (roles differ only by prompt),
or each may have its own (separate models, or one LoRA adapter per role).

    solver = AgentSpec("solver", policy="shared", system_prompt="You solve math problems.")
    solver.messages("What is 2+3?")
    # [{"role": "system", "content": "You solve math problems."},
    #  {"role": "user", "content": "What is 2+3?"}]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from srpo.types import Message, check_template

# The lowest temperature above 0: below it, logits / temperature make the sampled distribution
# one-hot to float32 precision for any real logit gap (greedy in all but name, with log-probs the
# trainer divides by it again) and overflow float32 near 1e-37; use 0 for greedy decoding
MIN_TEMPERATURE = 1e-3


@dataclass(frozen=True)
class SamplingParams:
    """How one generation is sampled.

    Sampling applies, in order: temperature, top-k, top-p (the order HF generate uses), then
    samples from the resulting distribution. temperature == 0 means greedy decoding.
    """

    temperature: float = 1.0  # softmax temperature; 0 = greedy (argmax), else >= MIN_TEMPERATURE
    top_k: int = 0  # keep the k most likely tokens; 0 = no top-k filtering
    top_p: float = 1.0  # nucleus sampling mass in (0, 1]; 1 = no top-p filtering
    max_new_tokens: int = 64  # generation budget per request (the eos token counts)
    # stop strings: generation ends right after the token that completes the first of them
    # (kept in the response, stop_reason "stop"), e.g. ("</search>",) so a tool can answer
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.stop, (list, tuple)) or not all(
            isinstance(s, str) and s for s in self.stop
        ):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))  # hashable: sampling groups batches
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature!r}")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(
                f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE} (below it sampling is "
                f"greedy in all but name, and logits / temperature overflow near 1e-37), got "
                f"{self.temperature!r}"
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if (
            isinstance(self.max_new_tokens, bool)
            or not isinstance(self.max_new_tokens, int)
            or self.max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **overrides: Any) -> SamplingParams:
        """A copy with some fields changed; unknown names raise ValueError naming them."""
        known = set(self.__dataclass_fields__)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown sampling setting(s) {unknown}; known: {sorted(known)}")
        return SamplingParams(**{**{k: getattr(self, k) for k in known}, **overrides})


@dataclass(frozen=True)
class AgentSpec:
    """One role.

    name: the role name workflows refer to, e.g. "solver", "aggregator".
    policy: the policy (shared model, separate model or LoRA adapter name) that generates for it.
    system_prompt: its system turn; "" = no system turn (the tokenizer's chat template decides
        what that means: SmolLM2's inserts its default system prompt).
    template: format string of its user turn; `{input}` is replaced by what the workflow asks.
    sampling: this role's sampling settings.
    examples: few-shot demonstrations, ((user, assistant), ...): chat turns put after the system
        turn and before the request, shown verbatim (the template is not applied to them). A
        small model follows a reply format it has seen answered far more often than one it is
        only told about (docs/search.md measures it). They are prompt, never trained on.
    """

    name: str
    policy: str = "shared"
    system_prompt: str = ""
    template: str = "{input}"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    examples: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"agent name must be a non-empty string, got {self.name!r}")
        if not self.policy or not isinstance(self.policy, str):
            raise ValueError(f"agent {self.name!r}: policy must be a non-empty string")
        check_template(self.template, ["input"], where=f"agent {self.name!r}")
        examples = tuple(tuple(pair) if isinstance(pair, (list, tuple)) else pair
                         for pair in self.examples)
        for i, pair in enumerate(examples):
            if not (isinstance(pair, tuple) and len(pair) == 2
                    and all(isinstance(text, str) and text.strip() for text in pair)):
                raise ValueError(
                    f"agent {self.name!r}: examples[{i}] must be a pair of non-empty strings "
                    f"[user, assistant], got {pair!r}"
                )
        object.__setattr__(self, "examples", examples)

    def messages(self, request: str | Sequence[Mapping[str, str]]) -> list[Message]:
        """The full chat this agent is conditioned on for a workflow request.

        request: a string (the content of one user turn), or a list of chat turns; the template
        is applied to the content of the last user turn, the examples' turns go before the
        request, and the system prompt is put first:
            [system] + [user_1, assistant_1, ...] + request turns
        """
        if isinstance(request, str):
            turns: list[Message] = [{"role": "user", "content": request}]
        else:
            turns = [dict(t) for t in request]
            for t in turns:
                if set(t) != {"role", "content"} or not all(isinstance(v, str) for v in t.values()):
                    raise ValueError(
                        f"agent {self.name!r}: a chat turn must be "
                        f"{{'role': str, 'content': str}}, got {t!r}"
                    )
            if any(t["role"] == "system" for t in turns):
                raise ValueError(
                    f"agent {self.name!r}: requests must not carry a system turn; the agent's "
                    f"system_prompt provides it"
                )
        users = [i for i, t in enumerate(turns) if t["role"] == "user"]
        if not users:
            raise ValueError(f"agent {self.name!r}: the request has no user turn")
        last = users[-1]
        content = self.template.format(input=turns[last]["content"])
        turns[last] = {"role": "user", "content": content}
        shown = [{"role": role, "content": text}
                 for pair in self.examples for role, text in zip(("user", "assistant"), pair)]
        turns = shown + turns
        if self.system_prompt:
            turns.insert(0, {"role": "system", "content": self.system_prompt})
        return turns


def check_agent_names(
    wanted: Sequence[str], agents: Mapping[str, AgentSpec], *, where: str
) -> None:
    """Raise ValueError naming every unknown agent name and the known ones."""
    unknown = sorted({a for a in wanted if a not in agents})
    if unknown:
        raise ValueError(
            f"{where}: unknown agent(s) {unknown}; known agents: {sorted(agents)}"
        )
