"""Backtracking: N-Queens, permutations, combination sum."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any

from ..base import CodeTask
from ..registry import register_task


def n_queens(n):
    count = 0
    cols, diag1, diag2 = set(), set(), set()

    def place(row):
        nonlocal count
        if row == n:
            count += 1
            return
        for c in range(n):
            if c in cols or row - c in diag1 or row + c in diag2:
                continue
            cols.add(c)
            diag1.add(row - c)
            diag2.add(row + c)
            place(row + 1)
            cols.remove(c)
            diag1.remove(row - c)
            diag2.remove(row + c)

    place(0)
    return count


_n_queens_count = functools.cache(n_queens)


@register_task
class NQueens(CodeTask):
    name = "n_queens"
    category = "backtracking"
    description = "Number of ways to place n non-attacking queens on an n x n board."
    signature = "def n_queens(n: int) -> int"
    statement = (
        "Return the number of ways to place n queens on an n x n chessboard so that no two queens "
        "share a row, a column or a diagonal. For n = 0 there is exactly one (empty) placement."
    )
    solution = n_queens
    default_num_tests = 6  # the input space is small; keep tests distinct

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        # The input space is tiny: even difficulty 1 must leave 5+ values beside 2 examples.
        return [rng.randint(0, min(10, 5 + difficulty))]

    def expected(self, args: Sequence[Any]) -> Any:
        # The reference, once per n: n = 10 takes ~0.1 s in Python, and every problem has 8 tests
        # over 11 possible values (300 problems of difficulties 1-10 took 26 s to generate).
        return _n_queens_count(*args)

    def edge_args(self, difficulty: int) -> list[list]:
        return [[0], [1], [2], [3]]


def permutations(nums):
    if len(nums) <= 1:
        return [list(nums)]
    out = []
    for i, x in enumerate(nums):
        for rest in permutations(nums[:i] + nums[i + 1 :]):
            out.append([x, *rest])
    return out


@register_task
class Permutations(CodeTask):
    name = "permutations"
    category = "backtracking"
    description = "All orderings of a list of distinct integers (any order)."
    signature = "def permutations(nums: list[int]) -> list[list[int]]"
    statement = (
        "Return every permutation of `nums` (its elements are distinct), as a list of lists. The "
        "permutations may be listed in any order. The empty list has one permutation: []."
    )
    solution = permutations
    checker = "any_order"

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        k = rng.randint(1, min(7, 1 + (difficulty + 1) // 2))
        return [rng.sample(range(-9, 10), k)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[]], [[1]], [[0, 1]]]


def combination_sum(candidates, target):
    out = []
    cands = sorted(candidates)

    def search(start, remaining, chosen):
        if remaining == 0:
            out.append(list(chosen))
            return
        for i in range(start, len(cands)):
            if cands[i] > remaining:
                break
            chosen.append(cands[i])
            search(i, remaining - cands[i], chosen)
            chosen.pop()

    search(0, target, [])
    return out


@register_task
class CombinationSum(CodeTask):
    name = "combination_sum"
    category = "backtracking"
    description = "All multisets of candidates (reusable) summing to a target."
    signature = "def combination_sum(candidates: list[int], target: int) -> list[list[int]]"
    statement = (
        "`candidates` are distinct positive integers, each usable any number of times. Return all "
        "distinct combinations that sum to `target` (target >= 1), each as a list. Neither the order "
        "of the combinations nor the order inside a combination matters."
    )
    solution = combination_sum
    checker = "any_order_nested"

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        k = rng.randint(1, 2 + difficulty // 2)
        cands = sorted(rng.sample(range(2, 6 + difficulty), k))
        return [cands, rng.randint(1, 6 + 2 * difficulty)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[2], 1], [[2, 3, 6, 7], 7], [[2, 3, 5], 8], [[1], 3]]
