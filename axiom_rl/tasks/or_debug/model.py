"""A small linear (or mixed-integer) model with named constraints, its text forms, and a strict
reader of constraint lines.

The model is what the or_debug task shows, stores and solves. It is kept as plain data
(`to_dict`/`from_dict`, checked field by field: a problem file is anyone's to write) and written
as CPLEX LP text for the prompt. Nothing here ever hands text to the solver's own file reader:
constraint lines a model writes are read by `parse_constraint` (a bounded, whitelisted grammar)
into numbers, and the solver is given numbers.

Variables are non-negative; an upper limit on a variable is an ordinary named constraint
(`max_p1: p1 <= 40`), so every limit a repair may touch has a name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

SENSES = ("<=", ">=", "=")
# Bounds on what a model read from a file (or a repair a model wrote) may hold: far beyond any
# generated difficulty, small enough that a solve stays cheap.
MAX_VARIABLES = 200
MAX_CONSTRAINTS = 200
MAX_TERMS = 200
MAX_LINE_CHARS = 2000
MAX_MAGNITUDE = 1e9
NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_]{0,31}"
_NAME = re.compile(NAME_PATTERN)
_NUMBER = r"\d{1,12}(?:\.\d{1,9})?"
# One term: sign, optional coefficient (optionally followed by '*'), variable name.
_TERM = re.compile(rf"\s*([+-]?)\s*({_NUMBER})?\s*\*?\s*({NAME_PATTERN})\s*")
_CONSTRAINT = re.compile(rf"^(.*?)(<=|>=|=<|=>|=)\s*([+-]?\s*{_NUMBER})\s*$")


class ModelError(ValueError):
    """A model or a constraint line that does not follow the format (the message says where)."""


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{what} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ModelError(f"{what} must be finite and at most {MAX_MAGNITUDE:g} in size")
    return float(value)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ModelError(f"{what} must be a name of letters, digits and _ (a letter first, up to 32)")
    return value


def format_number(value: float) -> str:
    """Integers without a decimal point; others with up to 6 significant decimals."""
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def format_terms(terms: tuple[tuple[str, float], ...], compact: bool = False) -> str:
    sep = "" if compact else " "
    parts: list[str] = []
    for i, (var, coef) in enumerate(terms):
        sign = "-" if coef < 0 else "+"
        magnitude = abs(coef)
        body = var if magnitude == 1 else f"{format_number(magnitude)}{sep}{var}"
        if i == 0:
            parts.append(f"-{body}" if sign == "-" else body)
        else:
            parts.append(f"{sign}{sep}{body}")
    return sep.join(parts) if parts else "0"


@dataclass(frozen=True)
class Constraint:
    name: str
    terms: tuple[tuple[str, float], ...]  # (variable, coefficient), each variable once
    sense: str  # one of SENSES
    rhs: float

    def text(self, compact: bool = False) -> str:
        sep = "" if compact else " "
        return f"{self.name}:{sep}{format_terms(self.terms, compact)}{sep}{self.sense}{sep}{format_number(self.rhs)}"

    def bounds(self) -> tuple[float, float]:
        """(lower, upper) of the row, with infinities for the open side."""
        if self.sense == "<=":
            return -math.inf, self.rhs
        if self.sense == ">=":
            return self.rhs, math.inf
        return self.rhs, self.rhs


@dataclass(frozen=True)
class LinearModel:
    """min or max c.x subject to named linear constraints, x >= 0, some x integer."""

    sense: str  # "minimize" or "maximize"
    objective: tuple[tuple[str, float], ...]
    variables: tuple[str, ...]
    integers: frozenset[str]
    constraints: tuple[Constraint, ...]

    @property
    def is_mip(self) -> bool:
        return bool(self.integers)

    def constraint(self, name: str) -> Constraint | None:
        return next((c for c in self.constraints if c.name == name), None)

    def without(self, names: set[str] | frozenset[str]) -> LinearModel:
        return replace(self, constraints=tuple(c for c in self.constraints if c.name not in names))

    def with_constraint(self, new: Constraint) -> LinearModel:
        """`new` in place of the constraint of its name, or appended when there is none."""
        if self.constraint(new.name) is None:
            return replace(self, constraints=(*self.constraints, new))
        return replace(self, constraints=tuple(new if c.name == new.name else c for c in self.constraints))

    # ------------------------------------------------------------------------------ text forms

    def lp_text(self) -> str:
        """The model in CPLEX LP format (what HiGHS, Gurobi, CPLEX and GLPK all read)."""
        lines = ["Maximize" if self.sense == "maximize" else "Minimize"]
        lines.append(f" obj: {format_terms(self.objective)}")
        lines.append("Subject To")
        lines += [f" {c.text()}" for c in self.constraints]
        continuous = [v for v in self.variables if v not in self.integers]
        if continuous:
            lines.append("Bounds")
            lines += [f" {v} >= 0" for v in continuous]
        if self.integers:
            lines.append("General")
            lines.append(" " + " ".join(v for v in self.variables if v in self.integers))
        lines.append("End")
        return "\n".join(lines)

    def compact_text(self) -> str:
        """A short form for the built-in character-level model: one constraint per line."""
        lines = [f"{'max' if self.sense == 'maximize' else 'min'} {format_terms(self.objective, True)}"]
        lines += [c.text(compact=True) for c in self.constraints]
        if self.integers:
            lines.append("int " + " ".join(v for v in self.variables if v in self.integers))
        return "\n".join(lines)

    # ------------------------------------------------------------------------------ plain data

    def to_dict(self) -> dict[str, Any]:
        return {
            "sense": self.sense,
            "objective": [[v, c] for v, c in self.objective],
            "variables": list(self.variables),
            "integers": [v for v in self.variables if v in self.integers],
            "constraints": [
                {"name": c.name, "terms": [[v, a] for v, a in c.terms], "sense": c.sense, "rhs": c.rhs}
                for c in self.constraints
            ],
        }

    @classmethod
    def from_dict(cls, data: Any) -> LinearModel:
        """A model from plain data, every field checked (a file is anyone's to write)."""
        if not isinstance(data, dict):
            raise ModelError("a model must be an object")
        sense = data.get("sense")
        if sense not in ("minimize", "maximize"):
            raise ModelError("a model's sense must be 'minimize' or 'maximize'")
        variables = data.get("variables")
        if not isinstance(variables, list) or not 1 <= len(variables) <= MAX_VARIABLES:
            raise ModelError(f"a model needs 1-{MAX_VARIABLES} variables")
        names = tuple(_name(v, "a variable") for v in variables)
        if len(set(names)) != len(names):
            raise ModelError("a variable is listed twice")
        known = set(names)
        integers = data.get("integers", [])
        if not isinstance(integers, list) or not set(integers) <= known:
            raise ModelError("a model's integers must be some of its variables")
        rows = data.get("constraints")
        if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_CONSTRAINTS:
            raise ModelError(f"a model needs 1-{MAX_CONSTRAINTS} constraints")
        constraints = []
        for row in rows:
            if not isinstance(row, dict):
                raise ModelError("a constraint must be an object")
            name = _name(row.get("name"), "a constraint's name")
            if row.get("sense") not in SENSES:
                raise ModelError(f"constraint {name}: sense must be one of {', '.join(SENSES)}")
            terms = _terms(row.get("terms"), known, f"constraint {name}")
            constraints.append(
                Constraint(name, terms, row["sense"], _number(row.get("rhs"), f"{name}'s rhs"))
            )
        if len({c.name for c in constraints}) != len(constraints):
            raise ModelError("two constraints have the same name")
        return cls(
            sense=sense,
            objective=_terms(data.get("objective"), known, "the objective"),
            variables=names,
            integers=frozenset(integers),
            constraints=tuple(constraints),
        )


def _terms(value: Any, known: set[str], what: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TERMS:
        raise ModelError(f"{what} needs 1-{MAX_TERMS} terms")
    terms = []
    for term in value:
        if not isinstance(term, list) or len(term) != 2 or term[0] not in known:
            raise ModelError(f"{what}: each term is [variable, coefficient] over the model's variables")
        terms.append((term[0], _number(term[1], f"{what}'s coefficient of {term[0]}")))
    if len({v for v, _ in terms}) != len(terms):
        raise ModelError(f"{what} names a variable twice")
    return tuple(terms)


def parse_constraint(name: str, text: str, variables: set[str] | frozenset[str]) -> Constraint:
    """`2 x1 + 3x2 - x3 <= 40` (over `variables`) -> a Constraint named `name`.

    Whitelisted and bounded: terms of an optional sign, an optional decimal coefficient and a
    known variable; one of <= >= = (=< and => too); a decimal right-hand side. A variable named
    twice has its coefficients added, as LP readers do."""
    if len(text) > MAX_LINE_CHARS:
        raise ModelError(f"constraint {name} is longer than {MAX_LINE_CHARS} characters")
    m = _CONSTRAINT.match(text)
    if not m:
        raise ModelError(f"constraint {name}: expected terms, then <=, >= or =, then a number")
    lhs, sense, rhs = m.group(1), {"=<": "<=", "=>": ">="}.get(m.group(2), m.group(2)), m.group(3)
    coefficients: dict[str, float] = {}
    position = 0
    while position < len(lhs):
        term = _TERM.match(lhs, position)
        if not term or term.end() == position:
            raise ModelError(f"constraint {name}: cannot read {lhs[position : position + 20].strip()!r}")
        if position > 0 and not term.group(1):
            raise ModelError(f"constraint {name}: terms must be joined by + or -")
        sign, coefficient, variable = term.groups()
        if variable not in variables:
            raise ModelError(f"constraint {name}: the model has no variable {variable!r}")
        value = float(coefficient) if coefficient else 1.0
        coefficients[variable] = coefficients.get(variable, 0.0) + (-value if sign == "-" else value)
        if len(coefficients) > MAX_TERMS:
            raise ModelError(f"constraint {name} has more than {MAX_TERMS} terms")
        position = term.end()
    if not coefficients:
        raise ModelError(f"constraint {name} has no terms")
    terms = tuple((v, _number(c, f"{name}'s coefficient of {v}")) for v, c in coefficients.items() if c != 0)
    if not terms:
        raise ModelError(f"constraint {name}: every coefficient is 0")
    return Constraint(name, terms, sense, _number(float(rhs.replace(" ", "")), f"{name}'s rhs"))
