"""Feasible models from a few classic families, with named constraints.

Each generator picks a feasible point first and builds the constraints around it, so the model
it returns always has a solution (the tests solve every one). `size` grows with difficulty;
`integer` makes the decision variables integers (a MIP).

    production      maximize profit; resource capacities, minimum and maximum output
    blending        minimize cost; a fixed total, nutrient requirements, availabilities
    transportation  minimize shipping cost; supplies and demands
    assignment      minimize cost; every task done once, every worker at most once (MIP)
    knapsack        maximize value; weight and volume limits, a minimum count (MIP)
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .model import Constraint, LinearModel


def _model(
    sense: str, objective: dict[str, float], constraints: list[Constraint], integer: bool
) -> LinearModel:
    variables = tuple(objective)
    return LinearModel(
        sense=sense,
        objective=tuple(objective.items()),
        variables=variables,
        integers=frozenset(variables) if integer else frozenset(),
        constraints=tuple(constraints),
    )


def production(rng: random.Random, size: int, integer: bool) -> LinearModel:
    products = [f"p{i + 1}" for i in range(size)]
    resources = [f"r{j + 1}" for j in range(max(2, size - 1))]
    point = {p: rng.randint(2, 12) for p in products}
    constraints = []
    for r in resources:
        use = {p: rng.randint(1, 6) for p in products}
        cap = sum(use[p] * point[p] for p in products) + rng.randint(0, 15)
        constraints.append(Constraint(f"cap_{r}", tuple(use.items()), "<=", cap))
    for p in rng.sample(products, max(1, size // 2)):
        constraints.append(Constraint(f"min_{p}", ((p, 1.0),), ">=", rng.randint(1, point[p])))
    for p in rng.sample(products, max(1, size // 2)):
        constraints.append(Constraint(f"max_{p}", ((p, 1.0),), "<=", point[p] + rng.randint(0, 8)))
    profit = {p: float(rng.randint(2, 20)) for p in products}
    return _model("maximize", profit, _as_floats(constraints), integer)


def blending(rng: random.Random, size: int, integer: bool) -> LinearModel:
    ingredients = [f"b{i + 1}" for i in range(size)]
    nutrients = [f"n{j + 1}" for j in range(max(2, size - 1))]
    total = 10 * rng.randint(5, 10)
    weights = [rng.random() + 0.2 for _ in ingredients]
    point = {b: round(total * w / sum(weights)) for b, w in zip(ingredients, weights, strict=True)}
    point[ingredients[0]] += total - sum(point.values())
    constraints = [Constraint("total", tuple((b, 1.0) for b in ingredients), "=", total)]
    for n in nutrients:
        content = {b: rng.randint(0, 9) for b in ingredients}
        content[rng.choice(ingredients)] = rng.randint(3, 9)  # every nutrient comes from somewhere
        level = sum(content[b] * point[b] for b in ingredients)
        constraints.append(
            Constraint(f"need_{n}", tuple(content.items()), ">=", int(level * rng.uniform(0.6, 0.95)))
        )
    for b in rng.sample(ingredients, max(1, size // 2)):
        constraints.append(Constraint(f"avail_{b}", ((b, 1.0),), "<=", point[b] + rng.randint(2, 20)))
    cost = {b: float(rng.randint(1, 20)) for b in ingredients}
    return _model("minimize", cost, _as_floats(constraints), integer)


def transportation(rng: random.Random, size: int, integer: bool) -> LinearModel:
    sources = [f"s{i + 1}" for i in range(max(2, size // 2 + 1))]
    sinks = [f"d{j + 1}" for j in range(max(2, (size + 1) // 2 + 1))]
    supply = {s: rng.randint(10, 40) for s in sources}
    room = sum(supply.values())
    demand = {d: rng.randint(5, max(6, room // len(sinks) - 2)) for d in sinks}
    while sum(demand.values()) > room:  # keep total demand within total supply
        d = max(demand, key=lambda k: demand[k])
        demand[d] -= 1
    routes = {f"{s}{d}": (s, d) for s in sources for d in sinks}
    constraints = [
        Constraint(f"supply_{s}", tuple((v, 1.0) for v, (a, _) in routes.items() if a == s), "<=", supply[s])
        for s in sources
    ]
    constraints += [
        Constraint(f"demand_{d}", tuple((v, 1.0) for v, (_, b) in routes.items() if b == d), ">=", demand[d])
        for d in sinks
    ]
    cost = {v: float(rng.randint(1, 15)) for v in routes}
    return _model("minimize", cost, _as_floats(constraints), integer)


def assignment(rng: random.Random, size: int, integer: bool) -> LinearModel:
    n = max(2, min(size, 5))
    workers, tasks = [f"w{i + 1}" for i in range(n)], [f"t{j + 1}" for j in range(n)]
    pairs = {f"{w}{t}": (w, t) for w in workers for t in tasks}
    constraints = [
        Constraint(f"do_{t}", tuple((v, 1.0) for v, (_, b) in pairs.items() if b == t), "=", 1) for t in tasks
    ]
    constraints += [
        Constraint(f"busy_{w}", tuple((v, 1.0) for v, (a, _) in pairs.items() if a == w), "<=", 1)
        for w in workers
    ]
    cost = {v: float(rng.randint(1, 20)) for v in pairs}
    return _model("minimize", cost, _as_floats(constraints), integer=True)


def knapsack(rng: random.Random, size: int, integer: bool) -> LinearModel:
    items = [f"k{i + 1}" for i in range(size + 2)]
    weight = {k: rng.randint(2, 15) for k in items}
    volume = {k: rng.randint(1, 10) for k in items}
    chosen = rng.sample(items, max(2, len(items) // 2))
    constraints = [
        Constraint(
            "weight", tuple(weight.items()), "<=", sum(weight[k] for k in chosen) + rng.randint(0, 10)
        ),
        Constraint("volume", tuple(volume.items()), "<=", sum(volume[k] for k in chosen) + rng.randint(0, 8)),
        Constraint("count", tuple((k, 1.0) for k in items), ">=", rng.randint(1, len(chosen))),
    ]
    constraints += [Constraint(f"one_{k}", ((k, 1.0),), "<=", 1) for k in items]
    value = {k: float(rng.randint(3, 30)) for k in items}
    return _model("maximize", value, _as_floats(constraints), integer=True)


def _as_floats(constraints: list[Constraint]) -> list[Constraint]:
    """Coefficients and right-hand sides as floats: a model generated in memory and the same model
    read back from JSON are equal. Zero coefficients are left out (as LP text would)."""
    return [
        Constraint(c.name, tuple((v, float(a)) for v, a in c.terms if a != 0), c.sense, float(c.rhs))
        for c in constraints
    ]


FAMILIES: dict[str, Callable[[random.Random, int, bool], LinearModel]] = {
    "production": production,
    "blending": blending,
    "transportation": transportation,
    "assignment": assignment,
    "knapsack": knapsack,
}
LP_FAMILIES = ("production", "blending", "transportation")
