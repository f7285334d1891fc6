"""From a completion to a Verdict: extract the code, run it in the sandbox, compare in the parent.

`extract_code` finds the program in raw model text; `score_code` runs it against a problem's
hidden tests (or its assert-style test code) and judges the results here, in the trusted process:
expected outputs never enter the sandbox. `verify_many` scores a batch with one thread per
sandbox worker; `PendingVerdicts` does the same in the background, row by row as a rollout's
completions finish (the trainer's overlap_verification). Tasks call `score_code` from their
`score` method (tasks/base.py).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import reprlib
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .sandbox import Limits, RunResult, Sandbox, decode_value, default_sandbox, judging, usable_cpus
from .tags import fenced_blocks, without_spans
from .tasks.checkers import run_checker
from .types import (
    INTERNAL_ERROR,
    MEMORY_LIMIT,
    NO_CODE,
    PASSED,
    RUNTIME_ERROR,
    SYNTAX_ERROR,
    TIMEOUT,
    WRONG_ANSWER,
    Problem,
    TestResult,
    Verdict,
)

_CODE_LANGS = {"", "python", "py", "python3", "py3"}
# The functions a program defines, at any depth: `def NAME(` with only whitespace (and `async`)
# before it on its line. One pattern for every entry point (a pattern per entry point was
# compiled, 0.05 ms, twice a verification once a set of problems had more entry points than the
# re module caches: 512; MBPP has 974), and one that starts with a literal, which the re module
# finds fast, its line checked after: a pattern anchored at every line start took 8-12 us a
# program, twice a verification; this takes 2.
_DEF = re.compile(r"def\s+([^\W\d]\w*)\s*\(")
_ONLY_SPACE_BEFORE_DEF = re.compile(r"\s*(?:async\s+)?\Z")
_CODE_START = re.compile(r"^(def |async def |class |import |from |@)", re.MULTILINE)
DETAIL_CHARS = 300


def strip_thinking(text: str) -> str:
    """Drop <think>...</think> sections, and everything up to a closing tag the prompt opened."""
    text = without_spans(text, "<think>", "</think>")
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


def extract_code(completion: str, entry_point: str | None = None) -> str | None:
    """The program in a completion, or None when there is none.

    Fenced blocks first (```python, ```py or bare ```; an unterminated last fence runs to the
    end): the last block defining `entry_point`, else the last code block. Without fences: the
    whole text if it parses as Python, else the text from its first line that starts Python code
    (def, class, import, from, @) to the end.
    """
    text = strip_thinking(completion)
    blocks = [(lang.lower(), body) for lang, body in fenced_blocks(text)]
    code_blocks = [body for lang, body in blocks if lang in _CODE_LANGS and body.strip()]
    if code_blocks:
        if entry_point:
            defining = [b for b in code_blocks if _defines(b, entry_point)]
            if defining:
                return defining[-1]
        return code_blocks[-1]
    if blocks:  # only non-Python fences (```text ...): no code
        return None
    if _parses(text) and _CODE_START.search(text):
        return text  # bare code, module-level constants and all
    m = _CODE_START.search(text)
    return text[m.start() :] if m else None


# Completions are parsed here only to locate code; their warnings (invalid escapes...) are not ours.
for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape("<completion>"))


def _parses(text: str) -> bool:
    # Parsing (not running) untrusted text is safe here: the parser bounds nesting itself.
    try:
        ast.parse(text, filename="<completion>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def has_fenced_function(completion: str, entry_point: str | None) -> bool:
    """A fenced Python block (outside <think>) that parses and defines `entry_point` as a function
    (any block if None). Parsed, not matched: `def f(` inside a string literal defines nothing."""
    text = strip_thinking(completion)
    for lang, body in fenced_blocks(text):
        if lang.lower() not in _CODE_LANGS:
            continue
        if entry_point is None or (_defines(body, entry_point) and _defines_function(body, entry_point)):
            return True
    return False


def _defines_function(code: str, entry_point: str) -> bool:
    """`code` parses, and defines a function named `entry_point` (at any depth)."""
    try:
        tree = ast.parse(code, filename="<completion>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point
        for node in ast.walk(tree)
    )


def _defines(code: str, entry_point: str) -> bool:
    if entry_point not in code:  # most bodies that continue a prompt: nothing to search
        return False
    for m in _DEF.finditer(code):
        start = m.start()
        if m.group(1) == entry_point and _ONLY_SPACE_BEFORE_DEF.match(
            code, code.rfind("\n", 0, start) + 1, start
        ):
            return True
    return False


def build_program(problem: Problem, completion: str) -> str | None:
    """The program to run for `completion`, or None if it holds no code.

    Problems imported with a `prelude` (HumanEval's prompt: imports, helpers, the stub of the
    function) get it prepended, so helpers defined there are available. A completion that does
    not define the entry point is read as the body that continues the prelude (the HumanEval
    convention for raw completions).
    """
    prelude = str(problem.metadata.get("prelude") or "")
    code = extract_code(completion, problem.entry_point)
    ep = problem.entry_point or ""
    if prelude and (code is None or not _defines(code, ep)):
        body = code if code is not None else completion
        if not body.strip():
            return None
        return prelude + body
    if code is None:
        return None
    if not prelude or code.startswith(prelude):  # a full program that already carries it
        return code
    return f"{prelude}\n{code}"


def score_code(
    problem: Problem, completion: str, sandbox: Sandbox | None = None, limits: Limits | None = None
) -> Verdict:
    """Run `completion` against `problem`'s tests in the sandbox; judge the results here."""
    sandbox = sandbox or default_sandbox()
    program = build_program(problem, completion)
    if program is None:
        return Verdict(NO_CODE, 0, _total(problem), detail="no code found in the completion")
    if problem.test_code:
        return _judge_assert_run(_run_assert_tests(problem, program, sandbox, limits))
    if problem.tests is None or problem.entry_point is None:
        return Verdict(INTERNAL_ERROR, detail=f"problem {problem.id} has neither tests nor test code")
    run = sandbox.run_calls(program, problem.entry_point, [list(t.args) for t in problem.tests], limits)
    return _judge_io_run(problem, run)


def _run_assert_tests(problem: Problem, program: str, sandbox: Sandbox, limits: Limits | None) -> RunResult:
    """Assert-style tests, with the report the judge makes as the run's one message.

    Tests that only call the candidate with literal arguments (most of HumanEval and MBPP) are
    replayed here over the answers of one io-mode run, with no judge process and no round trip
    per call; the report is the judge's own (judging.py). The others go to the judge."""
    entry_point, test_code = problem.entry_point or "", problem.test_code or ""
    prelude = str(problem.metadata.get("judge_prelude") or "")
    calls = judging.encoded_replayable_calls(test_code, entry_point, prelude)
    if calls is None:
        return sandbox.run_tests(program, entry_point, test_code, prelude, limits)
    run = sandbox.run_calls(program, entry_point, calls, limits, replay=True, encoded=True)
    if run.internal_error:
        return run
    report = judging.replay_report(test_code, entry_point, run.messages, run.reason)
    return dataclasses.replace(run, messages=[] if report is None else [report])


def _total(problem: Problem) -> int:
    return len(problem.tests) if problem.tests else 1


_LOAD_STATUS = {"syntax_error": SYNTAX_ERROR, "timeout": TIMEOUT, "memory_limit": MEMORY_LIMIT}
_KIND_STATUS = {"timeout": TIMEOUT, "memory_limit": MEMORY_LIMIT, "runtime_error": RUNTIME_ERROR}


def death(run: RunResult) -> tuple[str, str]:
    """Why a candidate stopped before reporting everything: (status, detail)."""
    sig = (run.exit or {}).get("signal")
    if run.reason == "timeout" or sig == 24:  # 24 = SIGXCPU: RLIMIT_CPU reached
        return TIMEOUT, "time limit exceeded"
    if run.reason == "output_limit":
        return RUNTIME_ERROR, "output limit exceeded"
    if run.reason in ("result_limit", "protocol"):
        return RUNTIME_ERROR, "results too large or malformed" + (f" ({run.why})" if run.why else "")
    if sig == 25:  # SIGXFSZ
        return RUNTIME_ERROR, "file size limit exceeded"
    if sig == 9:
        return MEMORY_LIMIT, "killed (out of memory)"
    if sig is not None:
        return RUNTIME_ERROR, f"killed by signal {sig}"
    return RUNTIME_ERROR, "exited before finishing the tests"


def _judge_io_run(problem: Problem, run: RunResult) -> Verdict:
    tests = problem.tests or ()
    total = len(tests)
    if run.internal_error:
        return Verdict(INTERNAL_ERROR, 0, total, run.wall_s, run.internal_error)
    messages = [m for m in run.messages if isinstance(m, dict)]
    load = messages[0] if messages else None
    if load is None or "load" not in load:
        status, why = death(run)
        return Verdict(status, 0, total, run.wall_s, why)
    if load["load"] != "ok":
        status = _LOAD_STATUS.get(load["load"], RUNTIME_ERROR)
        return Verdict(status, 0, total, run.wall_s, str(load.get("error", ""))[:DETAIL_CHARS])
    by_index: dict[int, dict[str, Any]] = {}
    for m in messages[1:]:
        i = m.get("i")
        if isinstance(i, int) and 0 <= i < total and i not in by_index:
            by_index[i] = m
    results: list[TestResult] = []
    first_failure: tuple[str, str] | None = None
    for i, test in enumerate(tests):
        m = by_index.get(i)
        if m is None:
            status, why = death(run)
            ok, detail = False, why
        elif m.get("ok"):
            try:
                value = decode_value(m.get("value"))
            except ValueError as e:
                ok, detail, status = False, str(e), RUNTIME_ERROR
            else:
                ok, why = run_checker(problem.checker, list(test.args), test.expected, value)
                status, detail = WRONG_ANSWER, "" if ok else f"{why}; got {_short(value)}"
        else:
            ok, status = False, _KIND_STATUS.get(str(m.get("kind")), RUNTIME_ERROR)
            detail = str(m.get("error", ""))
        results.append(TestResult(ok, detail[:DETAIL_CHARS]))
        if not ok and first_failure is None:
            first_failure = (status, f"test {i + 1}: {detail}"[:DETAIL_CHARS])
    passed = sum(r.passed for r in results)
    if first_failure is None:
        return Verdict(PASSED, passed, total, run.wall_s, "", tuple(results))
    return Verdict(first_failure[0], passed, total, run.wall_s, first_failure[1], tuple(results))


def _judge_assert_run(run: RunResult) -> Verdict:
    if run.internal_error:
        return Verdict(INTERNAL_ERROR, 0, 1, run.wall_s, run.internal_error)
    report = run.messages[0] if run.messages and isinstance(run.messages[0], dict) else None
    if report is None:  # (a judge that crashed is the pool's internal_error: Sandbox._run)
        status, why = death(run)
        return Verdict(status, 0, 1, run.wall_s, why)
    if report.get("internal"):
        return Verdict(INTERNAL_ERROR, 0, 1, run.wall_s, str(report["internal"])[:DETAIL_CHARS])
    if report.get("load") != "ok":
        status = _LOAD_STATUS.get(str(report.get("load")), RUNTIME_ERROR)
        return Verdict(status, 0, 1, run.wall_s, str(report.get("error", ""))[:DETAIL_CHARS])
    total = int(report.get("total", 1))
    passed = int(report.get("passed", 0))
    errors = [str(e) for e in report.get("errors", [])]
    results = tuple(TestResult(True) for _ in range(passed)) + tuple(
        TestResult(False, e[:DETAIL_CHARS]) for e in errors
    )
    if passed == total:
        return Verdict(PASSED, passed, total, run.wall_s, "", results)
    dead = str(report.get("candidate") or "")
    first = errors[0] if errors else str(report.get("aborted") or "failed")
    if dead in ("timeout", "memory_limit"):
        status = TIMEOUT if dead == "timeout" else MEMORY_LIMIT
    elif first.startswith("assertion failed") and not dead:
        status = WRONG_ANSWER
    else:
        status = RUNTIME_ERROR
    return Verdict(status, passed, total, run.wall_s, first[:DETAIL_CHARS], results)


# A candidate's value as the verdict's detail shows it: bounded before it is written out, since
# a value of a million items (or a string of megabytes) would cost the trusted process the
# whole text first.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 3, 60, 60
for _attr in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_SHORT_REPR, _attr, 8)
_SHORT_REPR.maxlong = 40


def _short(value: Any) -> str:
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


OVERLAP_CHOICES = ("auto", "on", "off")


def overlaps_verification(choice: str, device_type: str) -> bool:
    """`--overlap-verification` resolved for a model on `device_type` ("cpu", "cuda"): auto is on
    on a GPU, whose host cores are free while it computes. On a CPU the sandbox and the model
    share the cores: on 2, training steps whose 16 completions all ran in the sandbox took
    1.08-1.16x as long overlapped (benchmarks/overlap_verification.py)."""
    if choice == "auto":
        return device_type == "cuda"
    return choice == "on"


def sandbox_workers(requested: int | None, overlap: bool, processes: int = 1) -> int:
    """Sandbox slots: those asked for, else one per core this process may use (the cores shared
    among `processes` on the machine), one fewer beside the model (overlap): that core is the
    thread's that drives it."""
    if requested is not None:
        return requested
    return max(1, len(usable_cpus()) // processes - int(overlap))


def verify_many(
    problems: Sequence[Problem],
    completions: Sequence[str],
    sandbox: Sandbox | None = None,
    timeout: float | None = None,
    progress: Any = None,
) -> list[Verdict]:
    """Score completions[i] against problems[i], `sandbox.workers` at a time.

    Each problem's task decides how it is scored (Countdown needs no sandbox) and with which
    limits; `timeout` (CPU seconds per submission) overrides them. `progress`, if given, is
    called once per finished item.
    """
    if len(problems) != len(completions):
        raise ValueError("problems and completions differ in length")
    with PendingVerdicts(problems, sandbox, timeout, progress) as pending:
        for i, completion in enumerate(completions):
            pending.submit(i, completion)
        return pending.result()


class BatchVerification:
    """The verdicts of one batch of rows (`problems`): verified in the background as each row's
    completion arrives (`background`, with a sandbox: hand on_finished to the rollout), else all at
    once when asked for, in the sandbox, on sandbox services (`remote`: an
    integrations.remote.RemoteVerifier), or in this process where no task runs code (no sandbox)."""

    def __init__(
        self,
        problems: Sequence[Problem],
        sandbox: Sandbox | None,
        timeout: float | None,
        background: bool,
        remote: Any = None,
    ) -> None:
        self.problems, self.sandbox, self.timeout, self.remote = list(problems), sandbox, timeout, remote
        self._pending = (
            PendingVerdicts(self.problems, sandbox, timeout)
            if background and sandbox is not None and remote is None
            else None
        )

    @property
    def on_finished(self) -> Callable[[int, str], None] | None:
        """What verifies row i's completion as it arrives; None when they are verified at the end."""
        return self._pending.submit if self._pending is not None else None

    def verdicts(self, completions: Sequence[str]) -> list[Verdict]:
        """completions[i]'s verdict against problems[i] (waiting for those under way)."""
        if self._pending is not None:
            return self._pending.result()
        if self.remote is not None:
            return self.remote.verify(self.problems, completions, timeout=self.timeout)
        if self.sandbox is not None:
            return verify_many(self.problems, completions, self.sandbox, timeout=self.timeout)
        from .tasks import get_task

        return [get_task(p.task).score(p, text) for p, text in zip(self.problems, completions)]

    def discard(self) -> None:
        """Give up (an error on the way): start no more verification, end the threads."""
        if self._pending is not None:
            self._pending.cancel()


class PendingVerdicts:
    """Verifications that run in the background while the caller goes on, one per row of
    `problems`: `submit(i, completion)` as each completion is ready (a rollout's rows as they
    finish), `result()` to wait for them all. Its threads keep `sandbox.workers` jobs running at
    once; the verdicts are those verify_many gives, whatever the order of submission.
    Use it as a context manager, or call result(): either way its threads end."""

    def __init__(
        self,
        problems: Sequence[Problem],
        sandbox: Sandbox | None = None,
        timeout: float | None = None,
        progress: Any = None,
    ) -> None:
        from .tasks import get_task

        self.problems, self.timeout, self.progress = list(problems), timeout, progress
        # No sandbox to start where no task runs code (Countdown, or_debug): a thread per core.
        runs_code = any(get_task(name).runs_code for name in {p.task for p in self.problems})
        self.sandbox = sandbox or (default_sandbox() if runs_code else None)
        workers = self.sandbox.workers if self.sandbox else len(usable_cpus())
        self._futures: list[Future[Verdict] | None] = [None] * len(self.problems)
        self._pool = ThreadPoolExecutor(max_workers=workers)

    def submit(self, i: int, completion: str) -> None:
        """Start verifying row i's completion (each row once)."""
        if self._futures[i] is not None:
            raise ValueError(f"row {i} was submitted twice")
        self._futures[i] = self._pool.submit(self._score, i, completion)

    def result(self) -> list[Verdict]:
        """Every row's verdict, once all have been submitted and scored."""
        missing = [i for i, f in enumerate(self._futures) if f is None]
        if missing:
            raise ValueError(f"rows never submitted for verification: {missing[:10]}")
        try:
            return [f.result() for f in self._futures if f is not None]
        finally:
            self._pool.shutdown()

    def __enter__(self) -> PendingVerdicts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def cancel(self) -> None:
        """Start nothing more (an error on the way), wait for what runs, end the threads."""
        for f in self._futures:
            if f is not None:
                f.cancel()
        self._pool.shutdown()

    def _score(self, i: int, completion: str) -> Verdict:
        from .tasks import get_task

        problem = self.problems[i]
        task = get_task(problem.task)
        limits = None
        if self.timeout is not None and task.runs_code:
            limits = (getattr(task, "default_limits", None) or self.sandbox.limits).with_timeout(self.timeout)
        try:
            verdict = task.score(problem, completion, sandbox=self.sandbox, limits=limits)
        except Exception as e:  # a bug of ours must not be learned from as a zero reward
            verdict = Verdict(
                INTERNAL_ERROR,
                0,
                _total(problem),
                detail=f"verifier error: {type(e).__name__}: {e}"[:DETAIL_CHARS],
            )
        if self.progress is not None:
            self.progress()
        return verdict
