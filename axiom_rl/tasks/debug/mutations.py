"""Mutation operators over a function's AST: the bugs the saboteur injects into known-good code.

    off_by_one         a range() bound or a subscript index moved by one
    flip_comparison    a comparison reversed (< and >, <= and >=, == and !=, in and not in) or
                       made strict / not strict (< and <=, > and >=)
    swap_min_max       min() called where max() was, or the reverse
    swap_add_sub       + where - was, or the reverse (augmented assignments too)
    drop_base_case     an `if ...: return ...` without an else removed
    wrong_initial      the constant an assignment starts a variable at changed (0 and 1, n and
                       n + 1, True and False, inf and 0), inside a list literal too
    wrong_variable     a variable read where another of the function's variables was

Each operator lists a node's edits: (what it does, how to apply it to that node). `mutants` makes
every single-edit mutant of a source, deterministically (the AST's walk order, then the operator's
order): the same source always gives the same list. Nothing is run here; which mutants are real
bugs is for the sandbox to say (saboteur.py). Mutants are made from trusted reference solutions,
but a mutant may loop forever or raise: never run one outside the sandbox.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

Edit = tuple[str, Callable[[ast.AST], None]]  # (description, apply to the copy's node in place)


@dataclass(frozen=True)
class Mutant:
    """One injected bug: the operator, where it acted and what it did, and the mutated source."""

    operator: str
    description: str  # "line 4: range(n) -> range(n + 1)"
    source: str


def _int_value(node: ast.expr) -> int | None:
    """The value of an int literal, negative ones too (-1 parses as a unary minus)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    return None


def _plus(node: ast.expr, delta: int) -> ast.expr:
    """`node + delta`, folded as a person would write it: 3 -> 4, -1 -> 0, j - 1 -> j, i -> i + 1."""
    value = _int_value(node)
    if value is not None:
        return (
            ast.Constant(value + delta)
            if value + delta >= 0
            else ast.UnaryOp(ast.USub(), ast.Constant(-value - delta))
        )
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add | ast.Sub)
        and _int_value(node.right) is not None
    ):
        offset = (1 if isinstance(node.op, ast.Add) else -1) * _int_value(node.right) + delta  # type: ignore[operator]
        if offset == 0:
            return copy.deepcopy(node.left)
        return ast.BinOp(
            copy.deepcopy(node.left), ast.Add() if offset > 0 else ast.Sub(), ast.Constant(abs(offset))
        )
    return ast.BinOp(
        left=copy.deepcopy(node), op=ast.Add() if delta > 0 else ast.Sub(), right=ast.Constant(abs(delta))
    )


def _line(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}"


def off_by_one(node: ast.AST) -> list[Edit]:
    edits: list[Edit] = []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        for i, arg in enumerate(node.args[:2]):  # start and stop, not the step
            for delta in (1, -1):

                def apply(n: ast.AST, i: int = i, delta: int = delta) -> None:
                    n.args[i] = _plus(n.args[i], delta)  # type: ignore[attr-defined]

                new = ast.unparse(_plus(arg, delta))
                edits.append((f"{_line(node)}: range bound {ast.unparse(arg)} -> {new}", apply))
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice | ast.Tuple):
        for delta in (1, -1):

            def apply(n: ast.AST, delta: int = delta) -> None:
                n.slice = _plus(n.slice, delta)  # type: ignore[attr-defined]

            new = ast.unparse(_plus(node.slice, delta))
            edits.append((f"{_line(node)}: index {ast.unparse(node.slice)} -> {new}", apply))
    return edits


_REVERSED: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.Gt, ast.LtE),
    ast.Gt: (ast.Lt, ast.GtE),
    ast.LtE: (ast.GtE, ast.Lt),
    ast.GtE: (ast.LtE, ast.Gt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_SYMBOL = {ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.In: "in", ast.NotIn: "not in"}  # fmt: skip


def flip_comparison(node: ast.AST) -> list[Edit]:
    if not isinstance(node, ast.Compare):
        return []
    edits: list[Edit] = []
    for i, op in enumerate(node.ops):
        for new in _REVERSED.get(type(op), ()):

            def apply(n: ast.AST, i: int = i, new: type = new) -> None:
                n.ops[i] = new()  # type: ignore[attr-defined]

            edits.append((f"{_line(node)}: {_SYMBOL[type(op)]} -> {_SYMBOL[new]}", apply))
    return edits


def swap_min_max(node: ast.AST) -> list[Edit]:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
        other = "max" if node.func.id == "min" else "min"

        def apply(n: ast.AST) -> None:
            n.func.id = other  # type: ignore[attr-defined]

        return [(f"{_line(node)}: {node.func.id}() -> {other}()", apply)]
    return []


def swap_add_sub(node: ast.AST) -> list[Edit]:
    if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.Add | ast.Sub):
        old, new = ("+", "-") if isinstance(node.op, ast.Add) else ("-", "+")

        def apply(n: ast.AST) -> None:
            n.op = ast.Sub() if isinstance(n.op, ast.Add) else ast.Add()  # type: ignore[attr-defined]

        return [(f"{_line(node)}: {old} -> {new}", apply)]
    return []


def _returns(statements: Sequence[ast.stmt]) -> bool:
    return bool(statements) and isinstance(statements[-1], ast.Return)


def drop_base_case(node: ast.AST) -> list[Edit]:
    edits: list[Edit] = []
    body = getattr(node, "body", None)
    if not isinstance(body, list):
        return edits
    for i, statement in enumerate(body):
        if (
            isinstance(statement, ast.If)
            and not statement.orelse
            and _returns(statement.body)
            and len(body) > 1
        ):

            def apply(n: ast.AST, i: int = i) -> None:
                del n.body[i]  # type: ignore[attr-defined]

            edits.append((f"{_line(statement)}: `if {ast.unparse(statement.test)}: return` removed", apply))
    return edits


def _changed_constant(value: object) -> object | None:
    if type(value) is bool:
        return not value
    if type(value) is int:
        return 1 if value == 0 else 0 if value == 1 else value + 1
    if type(value) is float:
        return 0.0 if value != 0.0 else 1.0
    return None


def _is_inf(node: ast.expr) -> bool:
    """float('inf') or float('-inf'), the usual start of a running minimum or maximum."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
        and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).lstrip("+-") == "inf"
    )  # fmt: skip


def _initial_sites(value: ast.expr, path: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], ast.expr]]:
    """The constants an assigned value is built from: itself, a list/tuple literal's items, and
    the list of `[0] * n`; each with its path of element indices from the value."""
    if isinstance(value, ast.Constant) or _is_inf(value):
        yield path, value
    elif isinstance(value, ast.List | ast.Tuple):
        for i, element in enumerate(value.elts):
            yield from _initial_sites(element, (*path, i))
    elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult) and isinstance(value.left, ast.List):
        yield from _initial_sites(value.left, (*path, -1))


def _replace_at(value: ast.expr, path: tuple[int, ...], new: ast.expr) -> ast.expr:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if head == -1:
        value.left = _replace_at(value.left, rest, new)  # type: ignore[attr-defined]
    else:
        value.elts[head] = _replace_at(value.elts[head], rest, new)  # type: ignore[attr-defined]
    return value


def wrong_initial(node: ast.AST) -> list[Edit]:
    if not isinstance(node, ast.Assign):
        return []
    edits: list[Edit] = []
    for path, site in _initial_sites(node.value):
        if _is_inf(site):
            new: ast.expr = ast.Constant(0)
        else:
            changed = _changed_constant(site.value)  # type: ignore[attr-defined]
            if changed is None:
                continue
            new = ast.Constant(changed)

        def apply(n: ast.AST, path: tuple[int, ...] = path, new: ast.expr = new) -> None:
            n.value = _replace_at(n.value, path, copy.deepcopy(new))  # type: ignore[attr-defined]

        edits.append((f"{_line(node)}: initial {ast.unparse(site)} -> {ast.unparse(new)}", apply))
    return edits


def _variables(tree: ast.AST) -> list[str]:
    """The function's own variables: its parameters and every name it assigns, sorted."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return sorted(n for n in names if not hasattr(builtins, n))


def wrong_variable_edits(variables: Sequence[str]) -> Callable[[ast.AST], list[Edit]]:
    """The wrong_variable operator for a function with these variables: a read of one replaced
    by a read of each other."""

    def wrong_variable(node: ast.AST) -> list[Edit]:
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in variables):
            return []
        edits: list[Edit] = []
        for other in variables:
            if other != node.id:

                def apply(n: ast.AST, other: str = other) -> None:
                    n.id = other  # type: ignore[attr-defined]

                edits.append((f"{_line(node)}: {node.id} -> {other}", apply))
        return edits

    return wrong_variable


OPERATORS = (
    "off_by_one", "flip_comparison", "swap_min_max", "swap_add_sub", "drop_base_case", "wrong_initial",
    "wrong_variable",
)  # fmt: skip


def _operator(name: str, tree: ast.AST) -> Callable[[ast.AST], list[Edit]]:
    if name == "wrong_variable":
        return wrong_variable_edits(_variables(tree))
    return {"off_by_one": off_by_one, "flip_comparison": flip_comparison, "swap_min_max": swap_min_max,
            "swap_add_sub": swap_add_sub, "drop_base_case": drop_base_case,
            "wrong_initial": wrong_initial}[name]  # fmt: skip


def mutants(source: str, operators: Sequence[str] = OPERATORS) -> list[Mutant]:
    """Every single-edit mutant of `source` by these operators, in a fixed order, each source
    once (an edit that changes nothing, or repeats another's source, is left out). Raises
    ValueError for an unknown operator or a source that does not parse."""
    unknown = [o for o in operators if o not in OPERATORS]
    if unknown:
        raise ValueError(
            f"unknown mutation operator(s) {', '.join(unknown)}; choose from: {', '.join(OPERATORS)}"
        )
    tree = ast.parse(source)
    original = ast.unparse(tree)
    nodes = list(ast.walk(tree))
    seen = {original}
    found: list[Mutant] = []
    for name in operators:
        operator = _operator(name, tree)
        for index, node in enumerate(nodes):
            for description, apply in operator(node):
                changed = copy.deepcopy(tree)
                apply(list(ast.walk(changed))[index])
                text = ast.unparse(ast.fix_missing_locations(changed))
                if text not in seen:
                    seen.add(text)
                    found.append(Mutant(name, description, text + "\n"))
    return found
