"""Assert-style tests (HumanEval's `check(candidate)`, MBPP's asserts): how they run and count.

Two places run them, through this one module:
- the sandbox's judge process (server.py imports this file as a sibling module), where the
  candidate function is an RPC stub: each call goes to the candidate's process and back;
- the trusted parent, for tests that only ever call the candidate with literal arguments
  (`replayable_calls`). There the calls are known before anything runs, so the candidate's
  process answers them all at once (the sandbox's io mode, as for built-in tasks: no judge, no
  round trip per call), and `replay_report` runs the same instrumented test code over the
  recorded answers. The report is the one the judge would have made: same stub, same counting,
  same messages. Such tests are checked to be safe to run here: constants, containers,
  arithmetic, comparisons and a few builtins around at most one call of the candidate per assert.

Stdlib only.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterable
from typing import Any

try:
    from . import codec
except ImportError:  # run beside server.py, outside the package
    import codec  # type: ignore[no-redef]


class CandidateFailed(Exception):
    """The candidate could not answer (it crashed, timed out, or sent something malformed)."""


def describe(e: BaseException) -> str:
    return (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)[:300]


class Stub:
    """Stands in for the submitted function inside the test code: only plain data comes back, so
    no object the submission made ever reaches an `assert`. Subclasses say how a call's reply is
    obtained (`_exchange`) and why none came (`_no_reply`)."""

    def __init__(self) -> None:
        # calls: those answered or failed; attempts: also those refused after the candidate died.
        self.dead, self.calls, self.attempts = "", 0, 0

    def _fail(self, why: str) -> CandidateFailed:
        self.dead = why
        return CandidateFailed(why)

    def _exchange(self, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def _no_reply(self) -> str:
        raise NotImplementedError

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.attempts += 1
        if self.dead:
            raise CandidateFailed(self.dead)
        self.calls += 1
        reply = self._exchange(args, kwargs)
        if reply is None:
            raise self._fail(self._no_reply())
        if not isinstance(reply, dict) or "ok" not in reply:
            raise self._fail("candidate sent a malformed reply")
        if reply["ok"]:
            try:
                return codec.decode(reply.get("value"))
            except Exception:
                raise self._fail("candidate returned malformed data") from None
        if reply.get("kind") in ("timeout", "memory_limit"):
            raise self._fail(reply["kind"])
        # A builtin exception type is re-raised by name, for tests that expect e.g. ValueError.
        exc = getattr(builtins, str(reply.get("exc")), None)
        if not (isinstance(exc, type) and issubclass(exc, Exception)):
            exc = CandidateFailed
        raise exc(str(reply.get("error", "candidate raised"))[:300])


class ReplayStub(Stub):
    """The candidate's answers, recorded in the order the calls were made; `end` says why there
    are no more ("candidate exited", "timeout"), as the judge's stub would have found."""

    def __init__(self, replies: Iterable[Any], end: str) -> None:
        super().__init__()
        self.replies, self.end = iter(replies), end

    def _exchange(self, args: tuple, kwargs: dict) -> Any:
        return next(self.replies, None)

    def _no_reply(self) -> str:
        return self.end


def instrument(test_code: str) -> tuple[Any, int]:
    """Wrap each test statement -- a top-level statement containing `assert` -- so that a failing
    one is recorded and the next still runs (partial credit). Targets the body of `check` when
    the code defines it (HumanEval), else the module body (MBPP's list of asserts)."""
    tree = ast.parse(test_code)
    check = _check_function(tree)
    owner = check if check is not None else tree
    count, body = 0, []
    for stmt in owner.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assert):
                node.test = _truth_tested(node.test)
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            # The new nodes take the statement's place in the source. (Built here rather than
            # parsed, and located here rather than by ast.fix_missing_locations, which walked the
            # whole tree: a problem's first verification spent 1 ms of the parent's CPU on this.)
            at = {k: getattr(stmt, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}

            def record(i: int, outcome: ast.expr, at: dict = at) -> ast.stmt:
                name = ast.Name("__axiom_record__", ast.Load(), **at)
                return ast.Expr(ast.Call(name, [ast.Constant(i, **at), outcome], [], **at), **at)

            handler = ast.ExceptHandler(
                type=ast.Name("BaseException", ast.Load(), **at),
                name="__axiom_e__",
                body=[record(count, ast.Name("__axiom_e__", ast.Load(), **at))],
                **at,
            )
            ok = record(count, ast.Constant(None, **at))
            body.append(ast.Try(body=[stmt, ok], handlers=[handler], orelse=[], finalbody=[], **at))
            count += 1
        else:
            body.append(stmt)
    owner.body = body
    return compile(tree, "<tests>", "exec"), count


def _truth_tested(test: ast.expr) -> ast.expr:
    """`assert f(x)` and `assert not f(x)` test what a call returned for its truth: there the call
    is wrapped in a check that it returned something, so a function that returns None (one
    that does nothing) does not pass `assert not candidate(x)`. Every other assert as it was."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    call = test.operand if negated else test  # type: ignore[attr-defined]
    if not isinstance(call, ast.Call):
        return test
    at = {k: getattr(call, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}
    wrapped = ast.Call(ast.Name("__axiom_returned__", ast.Load(), **at), [call], [], **at)
    if negated:
        test.operand = wrapped  # type: ignore[attr-defined]
        return test
    return wrapped


def _returned(value: Any) -> Any:
    if value is None:
        raise AssertionError("returned None where the test checks a truth value")
    return value


def _check_function(tree: ast.Module) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)


_MISSING = object()


class _Cache(dict):
    """Compiled forms of test code and preludes: the same problems come back every step. Safe to
    share between the parent's verification threads (a value is at worst made twice)."""

    def get_or_make(self, key: str, make: Callable[[str], Any]) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if len(self) > 4096:
                self.clear()
            value = self[key] = make(key)
        return value


_INSTRUMENTED = _Cache()
_COMPILED_PRELUDES = _Cache()
_REPLAYABLE = _Cache()


def run_tests(
    test_code: str, entry_point: str, stub: Stub, prelude: str = "", names: dict[str, Any] | None = None
) -> dict:
    """Run the test code against `stub`; the report says how many tests passed and why others did
    not. The candidate's load status has been checked already. `names` are put in the tests'
    namespace before they run.

    A test statement that passed without the candidate having been called since the previous
    one ended (HumanEval's `assert True` lines, checks of the test's own helpers) is not
    counted, passed or in the total: it would give any submission, one that does nothing
    included, partial credit."""
    outcomes: dict[int, str] = {}
    uncalled: set[int] = set()  # tests that passed without calling the candidate
    attempts_before = [0]

    def record(i: int, exc: BaseException | None) -> None:
        called = stub.attempts > attempts_before[0]
        attempts_before[0] = stub.attempts
        if exc is None and not called:
            uncalled.add(i)
        if exc is None:
            outcomes[i] = ""
        elif isinstance(exc, AssertionError):
            outcomes[i] = "assertion failed" + (f": {str(exc)[:200]}" if str(exc) else "")
        else:
            outcomes[i] = describe(exc)

    try:
        code, total = _INSTRUMENTED.get_or_make(test_code, instrument)
    except SyntaxError as e:
        return {"load": "ok", "internal": f"the test code does not parse: {e}"}
    namespace: dict = {
        "__name__": "__tests__",
        "__axiom_record__": record,
        "__axiom_returned__": _returned,
        "__builtins__": builtins,
    }
    namespace.update(names or {})
    aborted = ""
    try:
        if prelude:
            exec(
                _COMPILED_PRELUDES.get_or_make(prelude, lambda p: compile(p, "<prelude>", "exec")), namespace
            )
        namespace[entry_point] = stub
        exec(code, namespace)
        if callable(namespace.get("check")):
            namespace["check"](stub)
    except BaseException as e:
        aborted = describe(e)
    counted = [i for i in range(total) if i not in uncalled]
    if not counted:  # nothing to count: passing means the tests ran to the end
        counted, outcomes = [0], {0: aborted}
    failures = [outcomes.get(i, aborted or "not reached") for i in counted]
    return {
        "load": "ok",
        "passed": sum(1 for f in failures if not f),
        "total": len(counted),
        "errors": [f for f in failures if f][:5],
        "aborted": aborted,
        "candidate": stub.dead,
    }


def load_failure(status: Any) -> dict | None:
    """The report for a candidate that did not load (None when it did)."""
    if isinstance(status, dict) and status.get("load") == "ok":
        return None
    if not isinstance(status, dict):
        status = {"load": "runtime_error", "error": "malformed status"}
    return {"load": str(status.get("load")), "error": str(status.get("error", ""))[:300]}


# ------------------------------------------------------------------ replay in the trusted parent

# Builtins a replayable test may call, on constants or on the candidate's answer (plain data).
SAFE_FUNCTIONS = frozenset({"abs", "tuple", "list", "set", "frozenset", "sorted", "len", "round", "bool"})
_SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_FUNCTIONS}
# Operators whose work is bounded by their operands (no **, no shifts).
_SAFE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_SAFE_UNARY = (ast.Not, ast.USub, ast.UAdd, ast.Invert)


def _hash_checked(kind: type) -> Callable[..., Any]:
    """`kind` (set or frozenset) built only after codec.check_hashes: in the parent, no time limit
    would stop a set of a million colliding values that the candidate returned as a list."""

    def build(iterable: Iterable[Any] = ()) -> Any:
        items = list(iterable)
        codec.check_hashes(items)
        return kind(items)

    build.__name__ = kind.__name__
    return build


# What the replayed tests call by these names (the tests may only call them: _Calls).
_REPLAY_NAMES = {"set": _hash_checked(set), "frozenset": _hash_checked(frozenset)}


class _NotReplayable(Exception):
    pass


class _Calls:
    """Walks one assert's expression: checks every node is allowed, folds what holds no call of
    the candidate (each must evaluate without error here, so the call is always reached), and
    collects the arguments of the one call there may be."""

    def __init__(self, probe: str) -> None:
        self.probe, self.found = probe, []

    def visit(self, node: ast.expr) -> bool:
        """True if `node` contains the call of the candidate."""
        if isinstance(node, ast.Constant):
            return False
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return self._any(node.elts)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise _NotReplayable("** in a dict")
            return self._any([*node.keys, *node.values])  # type: ignore[list-item]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, _SAFE_UNARY):
            return self.visit(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, _SAFE_BINOPS):
            return self._any([node.left, node.right])
        if isinstance(node, ast.Compare) and len(node.ops) == 1:  # a chain may skip the call
            return self._any([node.left, *node.comparators])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == self.probe:
                if node.keywords or any(self.visit(a) for a in node.args):
                    raise _NotReplayable("keywords, or a call inside the call")
                self.found.append([_constant(a) for a in node.args])
                return True
            if node.func.id in SAFE_FUNCTIONS and all(k.arg for k in node.keywords):  # no **kwargs
                return self._any([*node.args, *(k.value for k in node.keywords)])
        raise _NotReplayable(type(node).__name__)

    def _any(self, nodes: list[ast.expr]) -> bool:
        inside = [self.visit(n) for n in nodes]
        if not any(inside):
            return False  # a constant as a whole: whoever holds it beside the call evaluates it
        for node, has_call in zip(nodes, inside, strict=True):
            if not has_call:
                _constant(node)  # raises _NotReplayable if it would raise in the tests
        return True


def _constant(node: ast.expr) -> Any:
    """The value of an expression of constants (already checked to hold only allowed nodes).
    Literals (most of them) without compiling: ast.literal_eval gives the value eval would."""
    try:
        return ast.literal_eval(node)
    except Exception:  # arithmetic, calls of SAFE_FUNCTIONS, or a literal that fails (eval says)
        pass
    try:
        return eval(compile(ast.Expression(node), "<constant>", "eval"), {"__builtins__": _SAFE_BUILTINS})
    except Exception as e:
        raise _NotReplayable(f"a constant that fails: {e}") from None


def _bound_names(code: str) -> set[str] | None:
    """Every name `code` binds anywhere (None if it does not parse or imports *)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for alias in n.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
    return names


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _assert_calls(stmt: ast.stmt, probe: str) -> list[list[Any]]:
    if isinstance(stmt, ast.Pass) or _is_docstring(stmt):
        return []
    if not isinstance(stmt, ast.Assert) or not (stmt.msg is None or isinstance(stmt.msg, ast.Constant)):
        raise _NotReplayable("a statement other than a plain assert")
    calls = _Calls(probe)
    if not calls.visit(stmt.test):
        _constant(stmt.test)
    if len(calls.found) > 1:
        raise _NotReplayable("more than one call in an assert")
    return calls.found


def _replayable(key: str) -> tuple[list[list[Any]], list[Any]] | None:
    test_code, entry_point, prelude = key.split("\0", 2)
    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError):
        return None
    check = _check_function(tree)
    shadowed = _bound_names(prelude)
    if shadowed is None or shadowed & SAFE_FUNCTIONS:
        return None
    calls: list[list[Any]] = []
    asserts = 0
    try:
        for stmt in tree.body:
            if stmt is check:
                a = check.args
                if (
                    check.decorator_list
                    or len(a.args) != 1
                    or a.posonlyargs
                    or a.kwonlyargs
                    or a.vararg
                    or a.kwarg
                    or a.defaults
                    or a.args[0].arg in SAFE_FUNCTIONS
                ):
                    return None
                for inner in check.body:
                    calls += _assert_calls(inner, a.args[0].arg)
                    asserts += isinstance(inner, ast.Assert)
            elif isinstance(stmt, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id not in SAFE_FUNCTIONS | {entry_point, "check"}
                for t in stmt.targets
            ):
                _Calls("").visit(stmt.value)  # no call of anything but safe builtins
                _constant(stmt.value)
            elif isinstance(stmt, ast.Assert) and check is None:
                calls += _assert_calls(stmt, entry_point)
                asserts += 1
            elif not (isinstance(stmt, ast.Pass) or _is_docstring(stmt)):
                return None
    except _NotReplayable:
        return None
    try:  # the arguments must travel as the judge's would (not `...`, not 101 levels deep)
        encoded = [codec.encode(args) for args in calls]
    except codec.EncodeError:
        return None
    return (calls, encoded) if asserts else None


def _replay_plan(test_code: str, entry_point: str, prelude: str) -> tuple[list[list[Any]], list[Any]] | None:
    if "\0" in test_code or "\0" in entry_point:
        return None
    return _REPLAYABLE.get_or_make(f"{test_code}\0{entry_point}\0{prelude}", _replayable)


def replayable_calls(test_code: str, entry_point: str, prelude: str = "") -> list[list[Any]] | None:
    """The candidate's calls, in order, if `test_code` is replayable: only asserts (in `check` or
    at the top level, as the judge counts them), each calling the candidate at most once, with
    literal arguments, and otherwise only constants, arithmetic, comparisons (not chained) and
    SAFE_FUNCTIONS, which the prelude the judge would run first must not rebind. Else None: the
    tests need the judge."""
    plan = _replay_plan(test_code, entry_point, prelude)
    return None if plan is None else plan[0]


def encoded_replayable_calls(test_code: str, entry_point: str, prelude: str = "") -> list[Any] | None:
    """replayable_calls, each call's arguments codec-encoded as the candidate receives them
    (Sandbox.run_calls with replay and encoded): made once per problem, with the check that they
    can travel, not again for every verification (18 us a HumanEval problem)."""
    plan = _replay_plan(test_code, entry_point, prelude)
    return None if plan is None else plan[1]


def replay_report(test_code: str, entry_point: str, messages: list, end: str) -> dict | None:
    """What the judge would have reported, from an io-mode run of the `replayable_calls`: its
    messages (load status, one answer per call, maybe "done") and why the run ended early, if it
    did ("" when the candidate exited on its own, "timeout" for the monitor's wall clock). None
    where the monitor stopped the run for a reason the judge would never have answered after
    (output or result limits): the verdict then comes from how the candidate died, as it does
    after a judge that did not answer."""
    if end not in ("", "timeout"):
        return None
    if not messages:  # it never said whether it loaded
        if end == "timeout":
            return {"load": "timeout", "error": "loading took too long"}
        return {"load": "runtime_error", "error": "candidate exited while loading"}
    failed = load_failure(messages[0])
    if failed is not None:
        return failed
    replies = [m for m in messages[1:] if not (isinstance(m, dict) and m.get("done"))]
    stub = ReplayStub(replies, "timeout" if end == "timeout" else "candidate exited")
    return run_tests(test_code, entry_point, stub, names=_REPLAY_NAMES)
