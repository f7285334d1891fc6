"""Importers for real benchmarks: HumanEval and MBPP JSONL files -> Problems.

Both keep their own assert-style tests (`test_code`), which run in the sandbox's judge process
while the candidate answers over RPC (sandbox/server.py). Imported problems have difficulty 0
("unrated"); their tasks, `humaneval` and `mbpp`, score but do not generate.

HumanEval (Chen et al. 2021, arXiv:2107.03374): the original `prompt` (imports, helpers, the
function stub with its docstring) becomes `metadata.prelude`: it is put in front of the
candidate's code, so helpers defined there are available, and a completion that only writes the
function body is read as the continuation of the stub (the upstream convention). The judge runs
the prompt too, since some tests call its helpers (HumanEval/32 calls `poly`).

MBPP (Austin et al. 2021, arXiv:2108.07732): the prompt is the paper's ("You are an expert Python
programmer, and here is your task: ... Your code should pass these tests:"), so the tests are
visible, as upstream. The entry point is the function the first assert calls. Two tasks (367,
927) build tree arguments in `test_setup_code` with the reference's `Node` class: for those the
trees travel to the candidate as attribute objects. Upstream runs code, set-up and tests as one
program, so tests may use the reference's imports and classes: the judge runs the reference
module first (the candidate's function then replaces the reference's under the entry point).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import read_jsonl
from ..sandbox.pool import Limits
from ..types import Problem, Verdict
from .base import Task
from .registry import register_task

_FENCE_INSTRUCTION = "Reply with the complete function in a single ```python code block."


class ImportedCodeTask(Task):
    generatable = False
    runs_code = True
    min_difficulty = 0
    max_difficulty = 0
    # Benchmark problems get more room than ours: MBPP 123's reference spends ~4.4 CPU-seconds in
    # one call (amicable numbers below 9999, quadratic) on a Zen 3 core under Python 3.11, and
    # timed out at 8 s on a slower host under Python 3.13. 16 s leaves room for a host 3x slower.
    default_limits = Limits(call_timeout=16.0, cpu_s=32.0)

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        from ..verifier import score_code

        return score_code(problem, completion, sandbox=sandbox, limits=limits or self.default_limits)


@register_task
class HumanEvalTask(ImportedCodeTask):
    name = "humaneval"
    category = "benchmark"
    description = (
        "OpenAI HumanEval (164 problems); import with `axiom-rl problems import --format humaneval`."
    )


@register_task
class MBPPTask(ImportedCodeTask):
    name = "mbpp"
    category = "benchmark"
    description = "Google MBPP (974 problems); import with `axiom-rl problems import --format mbpp`."


def _rows(path: str | Path, required: tuple[str, ...], what: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line in read_jsonl(path):
        if line.error:
            raise UserError(f"{path}:{line.lineno}: {line.error}")
        if not isinstance(line.value, dict):
            raise UserError(f"{path}:{line.lineno}: expected a JSON object")
        missing = [k for k in required if k not in line.value]
        if missing:
            raise UserError(f"{path}:{line.lineno}: not a {what} record (missing {', '.join(missing)})")
        rows.append((line.lineno, line.value))
    if not rows:
        raise UserError(f"{path}: no records")
    return rows


def _signature(prompt: str, entry_point: str) -> str | None:
    m = re.search(
        rf"^def {re.escape(entry_point)}\s*\(.*?\)\s*(->\s*[^:]+)?:", prompt, re.MULTILINE | re.DOTALL
    )
    return " ".join(m.group(0).rstrip(":").split()) if m else None


def import_humaneval(path: str | Path) -> list[Problem]:
    problems = []
    for _, r in _rows(path, ("task_id", "prompt", "canonical_solution", "test", "entry_point"), "HumanEval"):
        prompt = r["prompt"]
        problems.append(
            Problem(
                id=str(r["task_id"]),
                task="humaneval",
                difficulty=0,
                prompt=f"Complete the following Python function. {_FENCE_INSTRUCTION}\n\n```python\n{prompt}```",
                entry_point=r["entry_point"],
                signature=_signature(prompt, r["entry_point"]),
                test_code=r["test"],
                reference_solution=prompt + r["canonical_solution"],
                metadata={
                    "prelude": prompt,
                    "judge_prelude": prompt,
                    "source": "HumanEval",
                    "task_id": r["task_id"],
                },
            )
        )
    return problems


_CALLED = re.compile(
    r"assert\s*\(?\s*(?:not\s+)?\(?\s*(?:set|sorted|math\.isclose|abs|round|tuple|list)?\s*\(?\s*([A-Za-z_]\w*)\s*\("
)


def mbpp_entry_point(tests: list[str], code: str) -> str:
    """The function the tests call: the first name called in the first assert that the code defines."""
    defined = set(re.findall(r"^\s*def\s+([A-Za-z_]\w*)", code, re.MULTILINE))
    for test in tests:
        for name in re.findall(r"([A-Za-z_]\w*)\s*\(", test):
            if name in defined:
                return name
    m = _CALLED.search(tests[0]) if tests else None
    if m:
        return m.group(1)
    raise ValueError("cannot tell which function the tests call")


def mbpp_problem_id(task_id: int) -> str:
    """The id an imported MBPP problem gets from its task_id (11 -> 'MBPP/11')."""
    return f"MBPP/{task_id}"


def import_mbpp(path: str | Path, include_challenge: bool = False) -> list[Problem]:
    problems = []
    for lineno, r in _rows(path, ("task_id", "text", "code", "test_list"), "MBPP"):
        code = str(r["code"]).replace("\r\n", "\n")
        tests = [str(t).replace("\r\n", "\n") for t in r["test_list"]]
        if include_challenge:
            tests += [str(t).replace("\r\n", "\n") for t in r.get("challenge_test_list") or []]
        setup = str(r.get("test_setup_code") or "").replace("\r\n", "\n")
        try:
            entry = mbpp_entry_point(tests, code)
        except ValueError as e:
            raise UserError(f"{path}:{lineno}: {e}") from None
        shown = "\n".join(r["test_list"])
        task_id = int(r["task_id"])
        problems.append(
            Problem(
                id=mbpp_problem_id(task_id),
                task="mbpp",
                difficulty=0,
                prompt=(
                    f"You are an expert Python programmer, and here is your task: {r['text']} "
                    f"Your code should pass these tests:\n\n{shown}\n\n{_FENCE_INSTRUCTION}"
                ),
                entry_point=entry,
                test_code="\n".join(tests) + "\n",
                reference_solution=code,
                metadata={
                    # Upstream runs code, set-up and asserts as one program, so tests may use the
                    # reference's imports and classes (596: sys; 601: Pair): the judge runs it too.
                    "judge_prelude": f"{code}\n{setup}\n",
                    "source": "MBPP",
                    "task_id": task_id,
                    # Upstream (mbpp/README.md): 11-510 are the test set, the rest for training/prompting.
                    "split": "test" if 11 <= task_id <= 510 else "train",
                },
            )
        )
    return problems


IMPORTERS = {"humaneval": import_humaneval, "mbpp": import_mbpp}


def import_file(fmt: str, path: str | Path, **options: Any) -> list[Problem]:
    if fmt not in IMPORTERS:
        raise UserError(f"unknown format {fmt!r}; choose from: {', '.join(IMPORTERS)}")
    return IMPORTERS[fmt](path, **options)
