"""Plain data across the sandbox boundary, as JSON with a few tags.

Untrusted code returns values; only *data* may come back: None, bool, int, float (nan and inf
included), str, bytes, complex, list, tuple, dict, set, frozenset, nested. A subclass of one of
these (a namedtuple, a Counter, an int with a lying `__eq__`) is converted to its base type by
the base type's own C-level methods, so nothing the code defined survives the trip: the trusted
side compares real ints and lists, never objects with user-defined `__eq__`.

Objects with attributes (a tree `Node`) and builtin types (`int`) may travel only *into* the
sandbox, as arguments built by trusted test code (MBPP does both); the untrusted side rebuilds
objects by class name. Decoding on the trusted side refuses them (`allow_objects=False`).

Stdlib only: this module is imported by the sandbox server before any untrusted code runs.
"""

from __future__ import annotations

import base64
import builtins
import json
import math
from collections import Counter
from typing import Any

MAX_DEPTH = 100
MAX_ITEMS = 1_000_000
# Distinct values that may share one hash in a set or dict built on the trusted side.
MAX_SAME_HASH = 64


class EncodeError(Exception):
    """The value is not plain data, or is too large or too deep."""


class _Budget:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items = 0


def _float(x: float) -> Any:
    if math.isnan(x):
        return {"$f": "nan"}
    if math.isinf(x):
        return {"$f": "inf" if x > 0 else "-inf"}
    return x


def encode(
    value: Any, allow_objects: bool = False, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS
) -> Any:
    """`value` as a JSON-able structure; raises EncodeError for anything that is not plain data."""
    budget = _Budget()
    return _enc(value, 0, budget, allow_objects, max_depth, max_items, set())


_SCALARS = (str, bool, type(None))


def _enc(v: Any, depth: int, b: _Budget, objs: bool, max_depth: int, max_items: int, active: set[int]) -> Any:
    t = type(v)
    if t in _SCALARS or (t is int and -(2**63) <= v < 2**63):  # the common case, first
        b.items += 1
        if b.items > max_items:
            raise EncodeError(f"value has more than {max_items} elements")
        return v
    if depth > max_depth:
        raise EncodeError(f"value is nested more than {max_depth} levels deep")
    b.items += 1
    if b.items > max_items:
        raise EncodeError(f"value has more than {max_items} elements")
    # Exact types first (the common case), then subclasses through the base type's methods.
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(2**63) <= v < 2**63 else {"$i": str(v)}
    if t is float:
        return _float(v)
    if isinstance(v, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(v)
    if isinstance(v, int):
        return _enc(int.__index__(v), depth, b, objs, max_depth, max_items, active)
    if isinstance(v, float):
        return _float(float.__float__(v))
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, (bytes, bytearray)):
        return {"$b": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, complex):
        c = complex.__complex__(v) if hasattr(complex, "__complex__") else complex(v.real, v.imag)
        return {"$c": [_float(c.real), _float(c.imag)]}
    key = id(v)
    if key in active:
        raise EncodeError("value contains a reference cycle")
    active.add(key)
    try:
        d = depth + 1
        if isinstance(v, tuple):
            return {"$t": [_enc(x, d, b, objs, max_depth, max_items, active) for x in tuple.__iter__(v)]}
        if isinstance(v, list):
            return [_enc(x, d, b, objs, max_depth, max_items, active) for x in list.__iter__(v)]
        if isinstance(v, dict):
            return {
                "$d": [
                    [
                        _enc(k, d, b, objs, max_depth, max_items, active),
                        _enc(x, d, b, objs, max_depth, max_items, active),
                    ]
                    for k, x in dict.items(v)
                ]
            }
        if isinstance(v, frozenset):
            return {"$fs": [_enc(x, d, b, objs, max_depth, max_items, active) for x in frozenset.__iter__(v)]}
        if isinstance(v, set):
            return {"$s": [_enc(x, d, b, objs, max_depth, max_items, active) for x in set.__iter__(v)]}
        if objs and isinstance(v, type) and getattr(builtins, v.__name__, None) is v:
            return {"$type": v.__name__}  # e.g. MBPP 533 passes `int` as an argument
        if objs and hasattr(v, "__dict__") and not callable(v):
            attrs = {str(k): _enc(x, d, b, objs, max_depth, max_items, active) for k, x in vars(v).items()}
            return {"$o": type(v).__name__, "a": attrs}
    finally:
        active.discard(key)
    raise EncodeError(f"returned a {t.__name__}, which is not plain data")


def check_hashes(items: list[Any]) -> None:
    """Raise ValueError if more than MAX_SAME_HASH distinct values in `items` share one hash.

    Building a set or dict of n such values takes O(n²): a million ints that are multiples of
    2**61 - 1 (every one hashes to 0) would hold the trusted side for hours, where no time limit
    applies. Equal values cost one probe each and are allowed; so are a few collisions, which
    plain data does have (hash(-1) == hash(-2)). Unhashable values raise TypeError, as set() would.
    """
    counts = Counter(map(hash, items))  # keyed by hash values, which hash to themselves
    if not counts or max(counts.values()) <= MAX_SAME_HASH:
        return
    heavy: dict[int, list[Any]] = {h: [] for h, n in counts.items() if n > MAX_SAME_HASH}
    for x in items:
        same = heavy.get(hash(x))
        if same is None or any(x == y for y in same):
            continue
        if len(same) == MAX_SAME_HASH:
            raise ValueError(f"more than {MAX_SAME_HASH} distinct values with one hash")
        same.append(x)


def decode(data: Any, allow_objects: bool = False, classes: dict[str, Any] | None = None) -> Any:
    """Inverse of `encode`. Raises ValueError on anything malformed (untrusted input)."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(x, allow_objects, classes) for x in data]
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise ValueError("malformed value")
    (tag, body), *rest = data.items()
    if tag == "$t" and isinstance(body, list):
        return tuple(decode(x, allow_objects, classes) for x in body)
    if tag == "$d" and isinstance(body, list):
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in body):
            raise ValueError("malformed dict")
        keys = [decode(k, allow_objects, classes) for k, _ in body]
        check_hashes(keys)
        return dict(zip(keys, (decode(v, allow_objects, classes) for _, v in body)))
    if tag in ("$s", "$fs") and isinstance(body, list):
        items = [decode(x, allow_objects, classes) for x in body]
        check_hashes(items)
        return set(items) if tag == "$s" else frozenset(items)
    if tag == "$f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "$i" and isinstance(body, str):
        return int(body)
    if tag == "$b" and isinstance(body, str):
        return base64.b64decode(body)
    if tag == "$c" and isinstance(body, list) and len(body) == 2:
        return complex(decode(body[0]), decode(body[1]))
    if tag == "$type" and allow_objects and isinstance(body, str):
        found = getattr(builtins, body, None)
        if isinstance(found, type):
            return found
    if tag == "$o" and allow_objects and isinstance(body, str) and rest and rest[0][0] == "a":
        cls = (classes or {}).get(body)
        obj = cls.__new__(cls) if isinstance(cls, type) else _Record()
        for k, x in rest[0][1].items():
            setattr(obj, k, decode(x, allow_objects, classes))
        return obj
    raise ValueError(f"unknown tag {tag!r}")


class _Record:
    """Stand-in for an argument object whose class the candidate did not define."""


def dumps(value: Any, allow_objects: bool = False) -> str:
    return json.dumps(encode(value, allow_objects), separators=(",", ":"), allow_nan=False)


def loads(text: str | bytes, allow_objects: bool = False, classes: dict[str, Any] | None = None) -> Any:
    return decode(json.loads(text), allow_objects, classes)
