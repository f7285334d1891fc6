"""A completion split into reasoning steps, per task: where each step ends in the text.

Countdown: each equation `a op b = c` written before the answer (inside <think>, or before
<answer> when the think tag is left open), then the answer itself as the last step. Text between
equations belongs to no step; prose without equations gives the answer alone. The "steps" prompt
style has the model write one equation a line (tasks/countdown.py).

Code: growing prefixes of the function: each non-blank line after the `def` line of the
completion's code (up to its closing fence) is a step, ending where the line ends.

or_debug: the lines of its answer, when the answer can be read (tasks/or_debug/answer.py): the
diagnosis (`conflict: ...`) and each repair line, in the order written. An answer that cannot be
read has no steps (its verdict is a format error).

A completion is the policy's text: patterns are bounded, at most MAX_STEPS steps are read and
only the first MAX_SCANNED characters are searched (or_debug's answer is read by its own bounded
parser: at most MAX_ANSWER_CHARS characters and MAX_ACTIONS repairs, found in linear time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from ..types import Problem

MAX_STEPS = 32
MAX_SCANNED = 8000
# Bounded repeats: `\d+` before a failing match would rescan a long run of digits from each position.
EQUATION = re.compile(r"(-?\d{1,9}) {0,3}([-+*/]) {0,3}(-?\d{1,9}) {0,3}= {0,3}(-?\d{1,12})")
ANSWER_OPEN, ANSWER_CLOSE, THINK_CLOSE = "<answer>", "</answer>", "</think>"


@dataclass(frozen=True)
class Step:
    """One step: its text, where it ends in the completion (a character offset), and its kind."""

    text: str
    end: int
    kind: str  # "equation", "answer", "line", "diagnosis" or "repair"


def countdown_steps(completion: str) -> list[Step]:
    text = completion[:MAX_SCANNED]
    answer_at = text.find(ANSWER_OPEN)
    think_end = text.find(THINK_CLOSE)
    if think_end < 0 or (0 <= answer_at < think_end):
        think_end = answer_at if answer_at >= 0 else len(text)
    steps = [Step(m[0], m.end(), "equation") for m in EQUATION.finditer(text, 0, think_end)][: MAX_STEPS - 1]
    if answer_at >= 0:
        close = text.find(ANSWER_CLOSE, answer_at)
        end = close + len(ANSWER_CLOSE) if close >= 0 else len(text)
        steps.append(Step(text[answer_at:end], end, "answer"))
    return steps


def code_steps(completion: str) -> list[Step]:
    text = completion[:MAX_SCANNED]
    steps: list[Step] = []
    in_function = False
    pos = 0
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        body = line.rstrip("\r\n")
        if not in_function:
            in_function = body.lstrip().startswith("def ")
            continue
        if body.strip().startswith("```"):
            break
        if body.strip():
            steps.append(Step(body, start + len(body), "line"))
            if len(steps) == MAX_STEPS:
                break
    return steps


def or_debug_steps(completion: str) -> list[Step]:
    from ..tags import answer_body_span
    from ..tasks.or_debug.answer import is_conflict_line, parse_answer
    from ..tasks.or_debug.model import ModelError

    span = answer_body_span(completion)  # where parse_answer reads
    try:
        parse_answer(completion)  # the same reading the labels and the verdict make
    except ModelError:
        return []
    start, end = span or (0, 0)
    steps: list[Step] = []
    pos = start
    for line in completion[start:end].splitlines(keepends=True):
        line_start, pos = pos, pos + len(line)
        text = line.strip()
        if text:
            kind = "diagnosis" if is_conflict_line(text) else "repair"
            steps.append(Step(text, line_start + len(line.rstrip()), kind))
    return steps


# the tasks with a segmentation of their own; every code task is split by code_steps
SEGMENTATIONS = {"countdown": countdown_steps, "or_debug": or_debug_steps}


def has_steps(task: str) -> bool:
    """Whether completions of `task` can be split into steps."""
    from ..tasks import get_task
    from ..tasks.base import CodeTask

    return task in SEGMENTATIONS or isinstance(get_task(task), CodeTask)


def split_steps(problem: Problem, completion: str) -> list[Step]:
    """The completion's steps, by its problem's task; UserError for a task without a segmentation."""
    if problem.task in SEGMENTATIONS:
        return SEGMENTATIONS[problem.task](completion)
    if has_steps(problem.task):
        return code_steps(completion)
    raise UserError(
        f"task {problem.task!r} has no step segmentation (countdown, or_debug and the code tasks have one)"
    )
