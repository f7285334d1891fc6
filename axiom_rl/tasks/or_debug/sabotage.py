"""The saboteur: make a feasible model infeasible in a known way, and remember how to undo it.

    tighten      a right-hand side moved past what the other constraints allow
    flip         <= turned into >= (or the reverse)
    coefficient  one coefficient multiplied or divided by a large factor
    conflict     a new constraint ("policy_k") that the others contradict

Every sabotage is checked by solving: one that leaves the model feasible is not used. Each
carries its undo, the repair line a reference answer writes (`replace NAME: <original>` or
`remove NAME`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .model import Constraint, LinearModel
from .solve import OPTIMAL, is_infeasible, solve_model

KINDS = ("tighten", "flip", "coefficient", "conflict")


@dataclass(frozen=True)
class Sabotage:
    kind: str
    name: str  # the constraint changed or added
    original: Constraint | None  # None for an added constraint
    changed: Constraint

    def undo_line(self, compact: bool = False) -> str:
        if self.original is None:
            return f"remove {self.name}"
        return f"replace {self.original.text(compact)}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "constraint": self.name, "undo": self.undo_line()}


def _tighten(rng: random.Random, c: Constraint) -> Constraint | None:
    if c.rhs == 0:
        return None
    if c.sense == "<=":
        rhs = math.floor(c.rhs * rng.uniform(0.05, 0.5))
    elif c.sense == ">=":
        rhs = math.ceil(c.rhs * rng.uniform(1.5, 4.0)) + 1
    else:
        rhs = math.ceil(c.rhs * rng.choice((rng.uniform(1.5, 3.0), rng.uniform(0.1, 0.5))))
    return None if rhs == c.rhs else replace(c, rhs=float(rhs))


def _flip(rng: random.Random, c: Constraint) -> Constraint | None:
    flipped = {"<=": ">=", ">=": "<="}.get(c.sense)
    return None if flipped is None else replace(c, sense=flipped)


def _coefficient(rng: random.Random, c: Constraint) -> Constraint | None:
    i = rng.randrange(len(c.terms))
    var, coef = c.terms[i]
    factor = rng.randint(4, 12)
    # Larger coefficients make <= rows tighter; smaller ones make >= rows harder to meet.
    new = coef * factor if c.sense != ">=" else max(1.0, math.floor(coef / factor))
    if new == coef:
        return None
    terms = (*c.terms[:i], (var, float(new)), *c.terms[i + 1 :])
    return replace(c, terms=terms)


def _conflict(rng: random.Random, model: LinearModel, name: str) -> Constraint | None:
    """`name: x_a + x_b >= v` with v above the most x_a + x_b can be in `model`."""
    chosen = rng.sample(model.variables, min(len(model.variables), rng.randint(1, 2)))
    terms = tuple((v, 1.0) for v in chosen)
    most = solve_model(replace(model, sense="maximize", objective=terms))
    if most.status != OPTIMAL or most.objective is None:
        return None
    return Constraint(name, terms, ">=", float(math.floor(most.objective * rng.uniform(1.2, 2.0)) + 1))


def _attempts(
    rng: random.Random, model: LinearModel, kind: str, avoid: set[str]
) -> Iterator[tuple[Constraint | None, Constraint | None]]:
    """(original, changed) pairs to try for one kind: each constraint once, in a random order;
    three draws of an added constraint."""
    if kind == "conflict":
        name = next(f"policy_{k}" for k in range(1, 100) if model.constraint(f"policy_{k}") is None)
        for _ in range(3):
            yield None, _conflict(rng, model, name)
        return
    change = {"tighten": _tighten, "flip": _flip, "coefficient": _coefficient}[kind]
    order = [c for c in model.constraints if c.name not in avoid]
    rng.shuffle(order)
    for original in order:
        yield original, change(rng, original)


def sabotage(
    rng: random.Random, model: LinearModel, avoid: set[str], kinds: tuple[str, ...] = KINDS
) -> Sabotage:
    """One sabotage of `model` (feasible) that makes it infeasible, touching no constraint in
    `avoid`. A kind is drawn, then tried on the constraints in a random order (each once); a kind
    that makes no constraint infeasible is dropped and another drawn. RuntimeError when none does."""
    left = list(kinds)
    while left:
        kind = rng.choice(left)
        left.remove(kind)
        for original, changed in _attempts(rng, model, kind, avoid):
            if (
                changed is not None
                and changed.name not in avoid
                and is_infeasible(model.with_constraint(changed))
            ):
                return Sabotage(kind, changed.name, original, changed)
    raise RuntimeError("no sabotage made the model infeasible")
