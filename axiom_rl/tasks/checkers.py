"""Named checkers for problems where more than one answer is right.

A checker is `f(args, expected, output) -> (ok, why)`: `args` are the test's inputs, `expected`
is one right answer computed by the reference, `output` is what the candidate returned, already
decoded into plain data in the trusted parent. Checkers run on untrusted data, so they must not
raise or loop on anything odd: every one is wrapped by `run_checker`, which turns an exception
into a rejection.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

Checker = Callable[[Sequence[Any], Any, Any], tuple[bool, str]]
CHECKERS: dict[str, Checker] = {}


def register_checker(name: str) -> Callable[[Checker], Checker]:
    def deco(fn: Checker) -> Checker:
        CHECKERS[name] = fn
        return fn

    return deco


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def outputs_equal(expected: Any, output: Any) -> bool:
    """Equality on JSON-shaped data: tuples and lists are the same, bool is not int, floats close.

    Both sides are plain data (the sandbox only returns JSON-like values), so there is no user
    `__eq__` to fool this.
    """
    if isinstance(expected, bool) or isinstance(output, bool):
        return type(expected) is type(output) and expected == output
    if isinstance(expected, float) or isinstance(output, float):
        if not isinstance(expected, (int, float)) or not isinstance(output, (int, float)):
            return False
        return abs(expected - output) <= 1e-9 * max(1.0, abs(expected))
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(output, (list, tuple))
            and len(expected) == len(output)
            and all(outputs_equal(e, o) for e, o in zip(expected, output))
        )
    if isinstance(expected, dict):
        return (
            isinstance(output, dict)
            and expected.keys() == output.keys()
            and all(outputs_equal(expected[k], output[k]) for k in expected)
        )
    return type(expected) is type(output) and expected == output


@register_checker("any_order")
def any_order(args: Sequence[Any], expected: Any, output: Any) -> tuple[bool, str]:
    """The same elements as `expected`, in any order (a multiset of whole elements)."""
    if not isinstance(output, list):
        return False, f"expected a list, got {type(output).__name__}"
    if Counter(_canon(x) for x in output) != Counter(_canon(x) for x in expected):
        return False, "elements differ from the expected ones"
    return True, ""


@register_checker("any_order_nested")
def any_order_nested(args: Sequence[Any], expected: Any, output: Any) -> tuple[bool, str]:
    """A list of lists where neither the outer nor the inner order matters (combinations)."""
    if not isinstance(output, list) or not all(isinstance(x, list) for x in output):
        return False, "expected a list of lists"
    try:
        got = Counter(_canon(sorted(x)) for x in output)
    except TypeError:
        return False, "inner lists hold values that cannot be compared"
    if got != Counter(_canon(sorted(x)) for x in expected):
        return False, "combinations differ from the expected ones"
    return True, ""


@register_checker("topological_order")
def topological_order(args: Sequence[Any], expected: Any, output: Any) -> tuple[bool, str]:
    """A permutation of 0..n-1 with every edge u->v placing u before v; [] iff there is a cycle."""
    n, edges = args[0], args[1]
    if not isinstance(output, list) or not all(type(x) is int for x in output):
        return False, "expected a list of node numbers"
    if expected == []:
        return (output == []), "the graph has a cycle, so the answer is []"
    if sorted(output) != list(range(n)):
        return False, f"not an ordering of all {n} nodes"
    pos = {node: i for i, node in enumerate(output)}
    for u, v in edges:
        if pos[u] > pos[v]:
            return False, f"edge {u}->{v} is violated"
    return True, ""


@register_checker("longest_palindrome")
def longest_palindrome(args: Sequence[Any], expected: Any, output: Any) -> tuple[bool, str]:
    """A substring of s that reads the same backwards, as long as the longest one."""
    s = args[0]
    if not isinstance(output, str):
        return False, f"expected a string, got {type(output).__name__}"
    if output not in s:
        return False, "not a substring of the input"
    if output != output[::-1]:
        return False, "not a palindrome"
    if len(output) != len(expected):
        return False, f"length {len(output)}, but the longest is {len(expected)}"
    return True, ""


def run_checker(name: str | None, args: Sequence[Any], expected: Any, output: Any) -> tuple[bool, str]:
    """Judge one output; exact equality when `name` is None. Never raises."""
    if name is not None and name not in CHECKERS:
        return False, f"unknown checker {name!r}"
    try:
        if name is None:
            return (True, "") if outputs_equal(expected, output) else (False, "wrong answer")
        return CHECKERS[name](args, expected, output)
    except Exception as e:  # untrusted output made the checker fail: that is a rejection
        return False, f"checker rejected the output ({type(e).__name__})"
