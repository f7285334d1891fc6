"""Reading a repair answer strictly, and applying it to a model.

The answer is the body of the last <answer>...</answer>: one line naming the conflicting
constraints, then at most MAX_ACTIONS repair lines.

    conflict: cap_r1, min_p2
    replace cap_r1: 2 p1 + 3 p2 <= 40      the constraint of that name, in its new form
    remove policy_1                        drop the constraint of that name
    add extra_1: p1 + p2 >= 3              a new constraint (a name the model does not use)

Anything else is a format error. Nothing is evaluated: names are matched against the model and
constraint lines go through model.parse_constraint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...tags import answer_body
from .model import NAME_PATTERN, Constraint, LinearModel, ModelError, parse_constraint

MAX_ACTIONS = 4
MAX_ANSWER_CHARS = 8000
# The names after "conflict:" are split on commas and spaces, then each matched on its own: one
# pattern over the whole list (names with optional separators) backtracks exponentially on a
# long run of letters that does not end as a name would.
_CONFLICT = re.compile(r"^conflicts?\s*:(.*)$", re.IGNORECASE)
_NAME = re.compile(NAME_PATTERN)
_REMOVE = re.compile(rf"^remove\s+({NAME_PATTERN})$")
_REPLACE_OR_ADD = re.compile(rf"^(replace|add)\s+({NAME_PATTERN})\s*:\s*(.+)$")


@dataclass(frozen=True)
class Action:
    verb: str  # "replace", "remove" or "add"
    name: str
    text: str = ""  # the constraint's form, for replace and add

    def line(self) -> str:
        return f"remove {self.name}" if self.verb == "remove" else f"{self.verb} {self.name}: {self.text}"


@dataclass(frozen=True)
class RepairAnswer:
    conflict: tuple[str, ...]
    actions: tuple[Action, ...]


def parse_action(line: str) -> Action | None:
    """One repair line (stripped) as an Action, or None when it is not one."""
    if m := _REMOVE.match(line):
        return Action("remove", m.group(1))
    if m := _REPLACE_OR_ADD.match(line):
        return Action(m.group(1), m.group(2), m.group(3).strip())
    return None


def is_conflict_line(line: str) -> bool:
    """Whether a stripped answer line is the diagnosis (`conflict: ...`)."""
    return _CONFLICT.match(line) is not None


def parse_answer(completion: str) -> RepairAnswer:
    """The answer in `completion`, or ModelError saying what does not follow the format."""
    body = answer_body(completion)
    if body is None:
        raise ModelError("no <answer>...</answer> found")
    if len(body) > MAX_ANSWER_CHARS:
        raise ModelError(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
    conflict: tuple[str, ...] | None = None
    actions: list[Action] = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _CONFLICT.match(line):
            if conflict is not None:
                raise ModelError("the conflict is named twice")
            names = [n for n in re.split(r"[\s,]+", m.group(1)) if n]
            if not all(_NAME.fullmatch(n) for n in names):
                raise ModelError(f"cannot read the line {line[:60]!r} (names are letters, digits and _)")
            conflict = tuple(dict.fromkeys(names))
        elif action := parse_action(line):
            actions.append(action)
        else:
            raise ModelError(f"cannot read the line {line[:60]!r}")
        if len(actions) > MAX_ACTIONS:
            raise ModelError(f"more than {MAX_ACTIONS} repair lines")
    if conflict is None:
        raise ModelError("no 'conflict:' line")
    return RepairAnswer(conflict, tuple(actions))


def apply_actions(model: LinearModel, actions: tuple[Action, ...]) -> LinearModel:
    """`model` with the repair applied, or ModelError naming the first action that cannot be."""
    variables = frozenset(model.variables)
    for action in actions:
        exists = model.constraint(action.name) is not None
        if action.verb == "remove":
            if not exists:
                raise ModelError(f"remove {action.name}: the model has no constraint {action.name}")
            if len(model.constraints) == 1:
                raise ModelError("the repair removes every constraint")
            model = model.without({action.name})
            continue
        if action.verb == "replace" and not exists:
            raise ModelError(f"replace {action.name}: the model has no constraint {action.name}")
        if action.verb == "add" and exists:
            raise ModelError(f"add {action.name}: the model already has a constraint {action.name}")
        new: Constraint = parse_constraint(action.name, action.text, variables)
        model = model.with_constraint(new)
    return model


def jaccard(named: tuple[str, ...] | set[str], truth: tuple[str, ...] | set[str]) -> tuple[int, int]:
    """(|named & truth|, |named | truth|): the diagnosis' overlap with the IIS, as a fraction's
    parts. Naming every constraint does not score: the union grows with each wrong name."""
    a, b = set(named), set(truth)
    return len(a & b), len(a | b)
