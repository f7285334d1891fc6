"""or_debug: diagnose and repair an infeasible optimization model (LP or MIP).

A problem is a feasible model from one of the families (families.py) that the saboteur made
infeasible (sabotage.py). Stored with it: the infeasible model, the original optimum, the
constraints of an irreducible infeasible subsystem (IIS) of each sabotage -- the "conflict" -- and
the undo of each sabotage (the reference repair).

Scoring (the original experiments' rule): the answer's repair -- one change per mistake, as the
prompt says how many there are -- is applied and the model solved in a solver worker
(worker.py). Feasible with an optimum within solve.OBJECTIVE_TOLERANCE of the original model's ->
passed. Otherwise the verdict says how much of the conflict the answer named
(passed/total = |named & IIS| / |named | IIS|): wrong_fix (all of it, the repair wrong),
partial_diagnosis (some), wrong_diagnosis (none); format_error when the answer cannot be read,
timeout when the repaired model makes the solver run out of time. The `or_debug` reward turns
that into 1.0 / 0.5 x overlap / a small format score.

Difficulty 1-10: the model's size grows with it; from 4 the integer families (assignment,
knapsack) join and production can be a MIP; from 8 there are two independent conflicts to find
and repair.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from ...types import (
    FORMAT_ERROR,
    PARTIAL_DIAGNOSIS,
    PASSED,
    RUNTIME_ERROR,
    TIMEOUT,
    WRONG_DIAGNOSIS,
    WRONG_FIX,
    Problem,
    Verdict,
)
from ..base import Task
from ..registry import register_task
from .answer import RepairAnswer, apply_actions, jaccard, parse_action, parse_answer
from .families import FAMILIES, LP_FAMILIES
from .model import LinearModel, ModelError
from .sabotage import sabotage
from .solve import OPTIMAL, TIME_LIMIT, find_iis, same_optimum, solve_model
from .worker import CRASHED, solver_pool

SOLVE_TIME_LIMIT_S = 2.0  # a repaired model is as small as the problem's; the original solves in ms

FULL_PROMPT = """\
The optimization model below, in LP format, has no feasible solution: {mistakes} made in it.
Find the constraints that conflict, and repair the model so that it has the optimum its author
intended.

{model}

Answer in <answer> </answer> tags. First a line naming the conflicting constraints:
conflict: NAME, NAME, ...
then one line per mistake, each one of:
replace NAME: <the constraint's new form, e.g. 2 x1 + 3 x2 <= 40>
remove NAME
add NAME: <a new constraint>"""
MISTAKES = {1: "one mistake was", 2: "two mistakes were"}
FULL_PREFIX = "Let me find the conflict.\n<think>"
COMPACT_PREFIX = "<answer>"


def difficulty_params(difficulty: int) -> tuple[int, tuple[str, ...], int]:
    """(size, families drawn from, how many conflicts) for a difficulty 1-10."""
    size = 2 + (difficulty - 1) // 2  # 2,2,3,3,4,4,5,5,6,6
    families = LP_FAMILIES if difficulty <= 3 else tuple(FAMILIES)
    return size, families, 1 if difficulty <= 7 else 2


@dataclass(frozen=True)
class Judgement:
    """What an answer amounts to; every or_debug verdict and reward is computed from this."""

    answer: RepairAnswer | None
    error: str = ""  # why the answer could not be read or applied
    named: int = 0  # |named & conflict|
    union: int = 0  # |named | conflict|
    solve_status: str = ""  # of the repaired model, when the repair applied
    objective: float | None = None


@register_task
class ORDebug(Task):
    name = "or_debug"
    category = "optimization"
    description = "Diagnose and repair an infeasible LP/MIP model; checked by solving it (HiGHS)."
    stop_strings = ("</answer>",)
    default_reward = "or_debug"

    # ------------------------------------------------------------------------------ generating

    def _draw_model(self, rng: random.Random, difficulty: int) -> tuple[str, LinearModel]:
        size, families, _ = difficulty_params(difficulty)
        family = rng.choice(families)
        integer = family in ("assignment", "knapsack") or (
            family == "production" and difficulty >= 6 and rng.random() < 0.5
        )
        return family, FAMILIES[family](rng, size, integer)

    def draft_key(self, stream: str, difficulty: int) -> str:
        return self._draw_model(random.Random(stream), difficulty)[1].compact_text()

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        _, _, conflicts = difficulty_params(difficulty)
        while True:  # a model with too few tight spots for the saboteur is drawn again
            family, original = self._draw_model(rng, difficulty)
            solved = solve_model(original)
            if solved.status != OPTIMAL or solved.objective is None:
                continue
            try:
                problem = self._sabotaged(rng, difficulty, family, original, solved.objective, conflicts)
            except RuntimeError:
                continue
            return problem

    def _sabotaged(self, rng: random.Random, difficulty: int, family: str, original: LinearModel,
                   objective: float, conflicts: int) -> Problem:  # fmt: skip
        done, broken, conflict = [], original, set()
        touched: set[str] = set()
        for _ in range(conflicts):
            s = sabotage(rng, original, avoid=touched)
            touched.add(s.name)
            done.append(s)
            conflict.update(find_iis(original.with_constraint(s.changed)))
            broken = broken.with_constraint(s.changed)
        if solve_model(broken).status == OPTIMAL:  # two sabotages that cancel out
            raise RuntimeError("the sabotages cancel")
        undo = [s.undo_line() for s in done]
        metadata = {
            "family": family,
            "model": broken.to_dict(),
            "objective": objective,
            "conflict": sorted(conflict),
            "sabotage": [s.to_dict() for s in done],
            "undo_compact": [s.undo_line(compact=True) for s in done],
        }
        return Problem(
            id=f"or_debug-d{difficulty}",
            task=self.name,
            difficulty=difficulty,
            prompt=FULL_PROMPT.format(model=broken.lp_text(), mistakes=MISTAKES[len(done)]),
            reference_solution="\n".join([f"conflict: {', '.join(sorted(conflict))}", *undo]),
            metadata=metadata,
        )

    def check_problem(self, problem: Problem) -> None:
        m = problem.metadata
        try:
            model = LinearModel.from_dict(m.get("model"))
        except ModelError as e:
            raise ValueError(f"an or_debug problem's metadata.model: {e}") from None
        objective = m.get("objective")
        if (
            isinstance(objective, bool)
            or not isinstance(objective, (int, float))
            or not math.isfinite(objective)
        ):
            raise ValueError("an or_debug problem needs metadata.objective: the original model's optimum")
        conflict = m.get("conflict")
        names = {c.name for c in model.constraints}
        if not isinstance(conflict, list) or not conflict or not set(conflict) <= names:
            raise ValueError("an or_debug problem needs metadata.conflict: names of the model's constraints")

    # ------------------------------------------------------------------------------ prompts

    def model_of(self, problem: Problem) -> LinearModel:
        return LinearModel.from_dict(problem.metadata["model"])

    def render(self, problem: Problem, style: str = "full") -> str:
        if style != "full":  # compact, or steps (none of its own)
            return self.model_of(problem).compact_text() + "\n"
        return problem.prompt

    def response_prefix(self, problem: Problem, style: str = "full") -> str:
        return FULL_PREFIX if style == "full" else COMPACT_PREFIX

    def content_key(self, problem: Problem) -> str:
        """The model before its sabotage: problems made from one model are one content, in one
        split (and the generator can tell a draw's split before it sabotages: draft_key)."""
        model = self.model_of(problem)
        undo = [s.get("undo") for s in problem.metadata.get("sabotage") or () if isinstance(s, dict)]
        actions = [parse_action(line.strip()) if isinstance(line, str) else None for line in undo]
        try:
            if all(actions):
                model = apply_actions(model, tuple(a for a in actions if a))
        except ModelError:  # a problem from a file, without a usable undo: the model as shown
            pass
        return model.compact_text()

    def reference_completion(self, problem: Problem, style: str = "full") -> str:
        conflict = problem.metadata["conflict"]
        if style != "full":
            lines = [f"conflict:{','.join(conflict)}", *problem.metadata["undo_compact"]]
            return "\n".join(lines) + "</answer>"
        return (
            " The constraints that cannot hold together are "
            f"{', '.join(conflict)}.</think>\n<answer>\n{problem.reference_solution}\n</answer>"
        )

    def follows_format(self, problem: Problem, completion: str) -> bool:
        try:
            parse_answer(completion)
        except ModelError:
            return False
        return True

    # ------------------------------------------------------------------------------ scoring

    def judge(self, problem: Problem, completion: str, solver: Any = None) -> Judgement:
        """Read the answer, apply its repair and solve the result (in a solver worker)."""
        try:
            answer = parse_answer(completion)
        except ModelError as e:
            return Judgement(None, error=str(e))
        conflict = problem.metadata["conflict"]
        named, union = jaccard(answer.conflict, conflict)
        mistakes = len(problem.metadata.get("sabotage") or ()) or 1
        if len(answer.actions) > mistakes:
            # Without this, dropping every constraint near the conflict would pass wherever the
            # ones that did not bind at the optimum are among them.
            why = f"{len(answer.actions)} changes for {mistakes} mistake{'s' * (mistakes > 1)}"
            return Judgement(answer, error=why, named=named, union=union)
        try:
            repaired = apply_actions(self.model_of(problem), answer.actions)
        except ModelError as e:
            return Judgement(answer, error=str(e), named=named, union=union)
        reply = (solver or solver_pool()).solve(repaired, SOLVE_TIME_LIMIT_S)
        return Judgement(answer, reply.detail, named, union, reply.status, reply.objective)

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        j = self.judge(problem, completion)
        if j.answer is None:
            return Verdict(FORMAT_ERROR, 0, 1, detail=j.error)
        target = float(problem.metadata["objective"])
        if j.solve_status == OPTIMAL and j.objective is not None:
            if same_optimum(j.objective, target):
                return Verdict(PASSED, max(1, j.union), max(1, j.union))
            why = f"feasible, but the optimum is {j.objective:.6g}, not the intended {target:.6g}"
        elif j.solve_status == TIME_LIMIT:
            return Verdict(TIMEOUT, j.named, max(1, j.union), detail=j.error or "the solver ran out of time")
        elif j.solve_status == CRASHED:
            return Verdict(RUNTIME_ERROR, j.named, max(1, j.union), detail=j.error)
        else:
            why = j.error or f"the repaired model is {j.solve_status.replace('_', ' ')}"
        if j.named == 0:
            status = WRONG_DIAGNOSIS
        elif j.named < j.union:
            status = PARTIAL_DIAGNOSIS
        else:
            status = WRONG_FIX
        detail = f"named {j.named} of the {len(problem.metadata['conflict'])} conflicting constraints; {why}"
        return Verdict(status, j.named, max(1, j.union), detail=detail)
