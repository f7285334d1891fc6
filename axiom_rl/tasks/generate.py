"""Deterministic problem sets with disjoint train and eval splits.

Ids are stable: the same task, difficulty, seed, split and index give the same id and the same
content, whatever else is generated alongside. Problem `i` draws from its own random stream
seeded by a string (Python's `random.Random(str)` hashes it with SHA-512, independent of
PYTHONHASHSEED), so no problem depends on how many come before it.

Splits are a property of *content*, not of the seed: a problem belongs to `eval` when the hash
of its task's `content_key` falls in the eval bucket (EVAL_PERCENT of the hash space), else to
`train`. The generator redraws until it hits the requested split, so no eval problem's content
can appear in train at any seed. Within one (task, difficulty, seed, split) set, duplicates are
redrawn too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator

from ..errors import UserError
from ..types import Problem
from .base import Task
from .registry import get_task

SPLITS = ("train", "eval")
EVAL_PERCENT = 20
MAX_DRAWS = 400  # per problem; a task whose space is too small for the request fails loudly


def split_of(task: Task, problem: Problem) -> str:
    return split_of_key(task, task.content_key(problem))


def split_of_key(task: Task, key: str) -> str:
    digest = hashlib.sha256(f"{task.split_name()}\0{key}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 100 < EVAL_PERCENT else "train"


def parse_range(text: str, name: str = "difficulty") -> tuple[int, int]:
    """'3-7' -> (3, 7); '5' -> (5, 5). `name` is the option, for the error."""
    lo, sep, hi = str(text).partition("-")
    try:
        a, b = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise UserError(f"{name} must be D or A-B (such as 1-10), got {text!r}") from None
    if a > b:
        raise UserError(f"{name} range {text!r} is empty")
    return a, b


def problem_id(task: str, difficulty: int, seed: int, index: int, split: str) -> str:
    # Train ids follow DESIGN.md (edit_distance-d5-s0-0003); eval ids carry an "e".
    return f"{task}-d{difficulty}-s{seed}-{'e' if split == 'eval' else ''}{index:04d}"


def check_difficulty(task: Task, difficulty: int) -> None:
    if not task.min_difficulty <= difficulty <= task.max_difficulty:
        raise UserError(
            f"difficulty {difficulty} is out of range for task {task.name!r} "
            f"(allowed: {task.min_difficulty}-{task.max_difficulty})"
        )


def iter_problems(
    task: str | Task, difficulty: int, seed: int = 0, split: str = "train", unique: bool = True
) -> Iterator[Problem]:
    """The endless (task, difficulty, seed, split) sequence, problem 0 first.

    unique=False lets content repeat (training streams: a small problem space, such as Countdown
    at difficulty 1 with ~12,000 train puzzles, would otherwise run dry); the split still holds.
    """
    task = get_task(task) if isinstance(task, str) else task
    if not task.generatable:
        raise UserError(
            f"task {task.name!r} has no generator; its problems come from `axiom-rl problems import`"
        )
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose from: {', '.join(SPLITS)}")
    check_difficulty(task, difficulty)
    seen: set[str] = set()
    for index in itertools.count():
        for draw in range(MAX_DRAWS):
            stream = f"axiom-rl/{task.name}/d{difficulty}/s{seed}/{split}/{index}/{draw}"
            # A draw that will land in the other split (or repeat one) is known before it is
            # made, for tasks that can tell: or_debug's draws cost solves, and 4 in 5 land in train.
            draft = task.draft_key(stream, difficulty)
            if draft is not None and (split_of_key(task, draft) != split or (unique and draft in seen)):
                continue
            problem = task.generate(random.Random(stream), difficulty)
            key = task.content_key(problem)
            if (not unique or key not in seen) and split_of(task, problem) == split:
                if unique:
                    seen.add(key)
                break
        else:
            raise UserError(
                f"task {task.name!r} at difficulty {difficulty} ran out of distinct {split} problems "
                f"after {index} (ask for fewer)"
            )
        yield dataclasses.replace(problem, id=problem_id(task.name, difficulty, seed, index, split))


def generate_problems(
    task: str | Task,
    difficulty: int,
    count: int,
    seed: int = 0,
    split: str = "train",
    start: int = 0,
) -> list[Problem]:
    """Problems `start .. start+count-1` of the (task, difficulty, seed, split) sequence."""
    if count < 0:
        raise UserError(f"count must be >= 0, got {count}")
    return list(itertools.islice(iter_problems(task, difficulty, seed, split), start, start + count))


def generate_mixed(
    tasks: Iterable[str], difficulties: Iterable[int], count: int, seed: int = 0, split: str = "train"
) -> list[Problem]:
    """`count` problems for every (task, difficulty) pair, tasks in the order given."""
    diffs = list(difficulties)
    return [p for t in tasks for d in diffs for p in generate_problems(t, d, count, seed=seed, split=split)]
