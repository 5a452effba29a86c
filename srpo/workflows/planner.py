"""Planner + workers: the planner splits the task, the workers' outputs are merged as one set.

The planner's plan drives the "plan" transition (size 1). Each worker gets one numbered
subtask of the plan; their outputs are merged together into the final answer, one transition:
the "work" set (size = number of workers). With `merger` set, a merger agent reads them and
writes the final answer ("merge", size 1); without, the merge is the concatenation of the
workers' texts in order and its final answer (the last one stated) is scored.

Plan parsing: lines starting "1." / "1)" / "Step 1:" are subtasks, in order. A plan with fewer
subtasks than workers is a parse fallback: the remaining workers get the whole problem
(counted in episode.metadata["plan_fallback"]).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from srpo.types import Task
from srpo.workflows.base import EpisodeContext, GenericRoles, Request, WorkflowRun, check_template
from srpo.workflows.parallel import numbered

PLAN_PROMPT = (
    "Problem: {question}\n\nSplit the work into {n} numbered subtasks (\"1. ...\"), one per "
    "line, for {n} workers. The last subtask must state the final answer."
)
WORK_PROMPT = (
    "Problem: {question}\n\nPlan:\n{plan}\n\nYour subtask: {subtask}\n\nDo your subtask. If it "
    "gives the final answer, write it as \\boxed{{answer}}."
)
MERGE_PROMPT = (
    "Problem: {question}\n\n{results}\n\nCombine the workers' results and give the final answer "
    "as \\boxed{{answer}}."
)
WHOLE_TASK = "solve the whole problem"

_STEP = re.compile(r"^\s*(?:step\s*)?(\d+)\s*[.):]\s*(\S.*)$", re.IGNORECASE)


def parse_plan(text: str) -> list[str]:
    """The numbered subtasks of a plan, in order of appearance."""
    return [m.group(2).strip() for line in text.splitlines() if (m := _STEP.match(line))]


@dataclass
class PlannerWorkers(GenericRoles):
    """Transitions: "plan" {planner}, "work" {workers} (+ "merge" {merger} when set)."""

    planner: str = "planner"
    workers: list[str] = field(default_factory=lambda: ["worker", "worker"])
    merger: str | None = None
    plan_prompt: str = PLAN_PROMPT
    work_prompt: str = WORK_PROMPT
    merge_prompt: str = MERGE_PROMPT

    name = "planner"
    description = (
        "a planner splits the task, workers solve the parts, merged as one set "
        "('plan' 1, 'work' n)"
    )

    def __post_init__(self) -> None:
        self.workers = list(self.workers)
        if not self.workers:
            raise ValueError("planner.workers must name at least one agent")
        check_template(self.plan_prompt, ["question", "n"], where="planner.plan_prompt")
        check_template(
            self.work_prompt, ["question", "plan", "subtask"], where="planner.work_prompt"
        )
        check_template(self.merge_prompt, ["question", "results"], where="planner.merge_prompt")

    @property
    def agents(self) -> tuple[str, ...]:
        extra = (self.merger,) if self.merger else ()
        return tuple(dict.fromkeys([self.planner, *self.workers, *extra]))

    def run(self, task: Task, ctx: EpisodeContext) -> WorkflowRun:
        q = task.prompt
        n = len(self.workers)
        plan = yield Request(self.planner, self.plan_prompt.format(question=q, n=n))
        ctx.transition("plan", [plan])
        steps = parse_plan(plan.text)
        ctx.metadata["plan_steps"] = len(steps)
        ctx.metadata["plan_fallback"] = int(len(steps) < n)
        # More steps than workers: the last worker takes the rest.
        subtasks = steps[: n - 1] + ["; ".join(steps[n - 1 :])] if len(steps) >= n else (
            steps + [WHOLE_TASK] * (n - len(steps))
        )
        results = yield [
            Request(w, self.work_prompt.format(question=q, plan=plan.text, subtask=s))
            for w, s in zip(self.workers, subtasks)
        ]
        ctx.transition("work", results)
        if self.merger is None:
            merged = "\n\n".join(r.text for r in results)
            return ctx.score(merged, agent="+".join(self.workers) + " (merged)")
        final = yield Request(
            self.merger,
            self.merge_prompt.format(question=q, results=numbered([r.text for r in results],
                                                                  "Worker")),
        )
        ctx.transition("merge", [final])
        return ctx.score(final)
