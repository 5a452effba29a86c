"""Multi-agent workflows: state machines whose transitions record the active set they consumed.

Write a new one in one file (docs/workflows.md): a class with `name`, `description`, `agents`
and a `run(task, ctx)` generator that yields `Request`s, records `ctx.transition(event, outputs)`
and returns `ctx.score(final_output)`.
"""

from srpo.workflows.base import (
    Continue,
    EpisodeContext,
    Output,
    Request,
    RewardFailure,
    Workflow,
    check_template,
)
from srpo.workflows.debate import Debate
from srpo.workflows.mixed import Mixed
from srpo.workflows.parallel import ParallelAggregate
from srpo.workflows.pipeline import Pipeline
from srpo.workflows.planner import PlannerWorkers, parse_plan
from srpo.workflows.registry import build_workflow, list_workflows, register_workflow
from srpo.workflows.routed import Routed, RouteError, parse_route
from srpo.workflows.single import SingleAgent
from srpo.workflows.voting import majority

__all__ = [
    "Continue",
    "Debate",
    "EpisodeContext",
    "Mixed",
    "Output",
    "ParallelAggregate",
    "Pipeline",
    "PlannerWorkers",
    "Request",
    "RewardFailure",
    "RouteError",
    "Routed",
    "SingleAgent",
    "Workflow",
    "build_workflow",
    "check_template",
    "list_workflows",
    "majority",
    "parse_plan",
    "parse_route",
    "register_workflow",
]
