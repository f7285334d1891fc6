"""Step traces of a repair, labelled by the solver: what a process reward model learns from.

An answer is split into steps: its diagnosis (the `conflict:` line), then each repair line,
applied one after another. After each repair line the model is solved again, and when it is
still infeasible its IIS found again (in a solver worker: the answer is hostile input). Labels
follow the original experiments' rules (Phase 2.2):

    1.0  the step makes the model feasible at the intended optimum, or shrinks its IIS
    0.5  the diagnosis names at least one constraint of the conflict
    0.0  otherwise (a step that leaves the IIS as large, or makes the model feasible with
         another optimum: the original rule's OPTIMAL -> 1.0 is kept only at the intended optimum,
         as the verdict does)

With two mistakes, undoing the first can leave an IIS of the second that is no smaller than the
first's: that step is labelled 0 by the size rule although it was right. The rule is the original
experiments'; a model trained on these labels inherits that blind spot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...types import Problem
from .answer import apply_actions, jaccard, parse_answer
from .model import LinearModel, ModelError
from .solve import INFEASIBLE, OPTIMAL, same_optimum

IIS_TIME_LIMIT_S = 2.0


@dataclass(frozen=True)
class Step:
    text: str  # the answer's line
    label: float
    status: str = ""  # the model's solve status after the step ("" for the diagnosis)
    iis_size: int | None = None  # constraints in an IIS after the step; 0 when feasible

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "label": self.label, "status": self.status, "iis_size": self.iis_size}


def repair_trace(problem: Problem, completion: str, solver: Any = None) -> list[Step] | None:
    """The labelled steps of `completion`'s answer, or None when it cannot be read."""
    from .worker import solver_pool

    solver = solver or solver_pool()
    try:
        answer = parse_answer(completion)
    except ModelError:
        return None
    named, _ = jaccard(answer.conflict, problem.metadata["conflict"])
    steps = [Step(f"conflict: {', '.join(answer.conflict)}", 0.5 if named else 0.0)]
    model = LinearModel.from_dict(problem.metadata["model"])
    before = solver.solve(model, IIS_TIME_LIMIT_S, iis=True)
    size = len(before.iis) if before.iis is not None else None
    target = float(problem.metadata["objective"])
    for action in answer.actions:
        try:
            model = apply_actions(model, (action,))
        except ModelError as e:
            steps.append(Step(action.line(), 0.0, f"not applied: {e}"[:120], size))
            continue
        reply = solver.solve(model, IIS_TIME_LIMIT_S, iis=True)
        if reply.status == OPTIMAL and reply.objective is not None:
            steps.append(
                Step(action.line(), 1.0 if same_optimum(reply.objective, target) else 0.0, reply.status, 0)
            )
            size = 0
        elif reply.status == INFEASIBLE and reply.iis is not None:
            shrank = size is not None and len(reply.iis) < size
            steps.append(Step(action.line(), 1.0 if shrank else 0.0, reply.status, len(reply.iis)))
            size = len(reply.iis)
        else:  # unbounded, out of time, crashed
            steps.append(Step(action.line(), 0.0, reply.status, None))
            size = None
    return steps
