"""Dynamic programming: the original experiments' LCS, edit distance, knapsack and coin change, and more."""

from __future__ import annotations

import random

from ..base import CodeTask, alphabet_for, rand_str
from ..registry import register_task


def lcs(a, b):
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@register_task
class LCS(CodeTask):
    name = "lcs"
    category = "dp"
    description = "Length of the longest common subsequence of two strings."
    signature = "def lcs(a: str, b: str) -> int"
    statement = (
        "Return the length of the longest common subsequence of `a` and `b` (characters in the same "
        "order, not necessarily adjacent)."
    )
    solution = lcs

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(difficulty // 2)
        return [rand_str(rng, rng.randint(0, 3 + 4 * difficulty), alpha) for _ in range(2)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [["", ""], ["abc", ""], ["abc", "abc"], ["abc", "def"], ["abcde", "ace"]]


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


@register_task
class EditDistance(CodeTask):
    name = "edit_distance"
    category = "dp"
    description = "Levenshtein distance: fewest insertions, deletions and substitutions."
    signature = "def edit_distance(a: str, b: str) -> int"
    statement = (
        "Return the minimum number of single-character insertions, deletions or substitutions "
        "needed to turn string `a` into string `b`."
    )
    solution = edit_distance

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(difficulty // 2)
        a = rand_str(rng, rng.randint(0, 3 + 4 * difficulty), alpha)
        if rng.random() < 0.5 and a:  # b as a few edits of a: small distances are the interesting ones
            b = list(a)
            for _ in range(rng.randint(1, 1 + difficulty // 2)):
                i = rng.randrange(len(b) + 1)
                op = rng.choice("ids")
                if op == "i":
                    b.insert(i, rng.choice(alpha))
                elif b and i < len(b):
                    if op == "d":
                        del b[i]
                    else:
                        b[i] = rng.choice(alpha)
            return [a, "".join(b)]
        return [a, rand_str(rng, rng.randint(0, 3 + 4 * difficulty), alpha)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [["", ""], ["", "abc"], ["abc", ""], ["kitten", "sitting"], ["same", "same"]]


def knapsack_01(weights, values, capacity):
    best = [0] * (capacity + 1)
    for w, v in zip(weights, values):
        for c in range(capacity, w - 1, -1):
            best[c] = max(best[c], best[c - w] + v)
    return best[capacity]


@register_task
class Knapsack01(CodeTask):
    name = "knapsack_01"
    category = "dp"
    description = "0/1 knapsack: the most value within a weight capacity."
    signature = "def knapsack_01(weights: list[int], values: list[int], capacity: int) -> int"
    statement = (
        "Item i has weight weights[i] and value values[i]. Each item can be taken at most once. "
        "Return the largest total value of items whose total weight is at most `capacity`."
    )
    solution = knapsack_01

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(1, 2 + 2 * difficulty)
        weights = [rng.randint(1, 3 + 3 * difficulty) for _ in range(n)]
        values = [rng.randint(1, 5 + 5 * difficulty) for _ in range(n)]
        return [weights, values, rng.randint(0, max(1, sum(weights) * 2 // 3))]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[], [], 10], [[5], [10], 4], [[5], [10], 5], [[1, 2, 3], [6, 10, 12], 0]]


def coin_change(coins, amount):
    inf = amount + 1
    best = [0] + [inf] * amount
    for a in range(1, amount + 1):
        for c in coins:
            if c <= a and best[a - c] + 1 < best[a]:
                best[a] = best[a - c] + 1
    return best[amount] if best[amount] <= amount else -1


@register_task
class CoinChange(CodeTask):
    name = "coin_change"
    category = "dp"
    description = "Fewest coins that make an amount (-1 when impossible)."
    signature = "def coin_change(coins: list[int], amount: int) -> int"
    statement = (
        "Given coin denominations `coins` (each usable any number of times), return the fewest "
        "coins whose values sum to `amount`, or -1 if the amount cannot be made. An amount of 0 "
        "needs 0 coins."
    )
    solution = coin_change

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        k = rng.randint(1, 1 + (difficulty + 1) // 2)
        # Greedy-breaking sets like [1, 3, 4] show up because denominations are random.
        coins = sorted(rng.sample(range(1 if rng.random() < 0.6 else 2, 6 + 4 * difficulty), k))
        return [coins, rng.randint(0, 10 + 15 * difficulty)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[1], 0], [[2], 3], [[1, 3, 4], 6], [[5, 10], 3], [[7], 14]]


def longest_increasing_subsequence(nums):
    import bisect

    tails = []
    for x in nums:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)


@register_task
class LongestIncreasingSubsequence(CodeTask):
    name = "longest_increasing_subsequence"
    category = "dp"
    description = "Length of the longest strictly increasing subsequence."
    signature = "def longest_increasing_subsequence(nums: list[int]) -> int"
    statement = (
        "Return the length of the longest strictly increasing subsequence of `nums` (0 for an empty list)."
    )
    solution = longest_increasing_subsequence

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(0, 3 + 5 * difficulty)
        return [[rng.randint(-5 * difficulty, 5 * difficulty) for _ in range(n)]]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[]], [[7]], [[3, 3, 3]], [[5, 4, 3, 2]], [[1, 2, 3, 4]]]


def unique_paths_with_obstacles(grid):
    if not grid or not grid[0]:
        return 0
    cols = len(grid[0])
    ways = [0] * cols
    ways[0] = 1
    for row in grid:
        for j in range(cols):
            if row[j] == 1:
                ways[j] = 0
            elif j > 0:
                ways[j] += ways[j - 1]
    return ways[-1]


@register_task
class UniquePathsWithObstacles(CodeTask):
    name = "unique_paths_with_obstacles"
    category = "dp"
    description = "Count monotone grid paths around obstacles."
    signature = "def unique_paths_with_obstacles(grid: list[list[int]]) -> int"
    statement = (
        "A robot starts at the top-left cell of `grid` and moves only right or down to the "
        "bottom-right cell. Cells with 1 are obstacles, 0 are free. Return the number of distinct "
        "paths (0 if the start or the end is blocked)."
    )
    solution = unique_paths_with_obstacles

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        rows, cols = rng.randint(1, 2 + difficulty), rng.randint(1, 2 + difficulty)
        density = 0.1 + 0.02 * difficulty
        return [[[1 if rng.random() < density else 0 for _ in range(cols)] for _ in range(rows)]]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[[0]]], [[[1]]], [[[0, 0], [0, 0]]], [[[0, 1], [1, 0]]], [[[0, 0, 0], [0, 1, 0], [0, 0, 0]]]]


def word_break(s, words):
    vocab = set(words)
    ok = [True] + [False] * len(s)
    for end in range(1, len(s) + 1):
        for start in range(end):
            if ok[start] and s[start:end] in vocab:
                ok[end] = True
                break
    return ok[len(s)]


@register_task
class WordBreak(CodeTask):
    name = "word_break"
    category = "dp"
    description = "Can a string be split into dictionary words?"
    signature = "def word_break(s: str, words: list[str]) -> bool"
    statement = (
        "Return True if `s` can be split into a sequence of one or more words from `words` (each "
        "word reusable), else False. The empty string can always be split."
    )
    solution = word_break

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(1 + difficulty // 3)
        words = sorted(
            {rand_str(rng, rng.randint(1, 2 + difficulty // 2), alpha) for _ in range(2 + difficulty)}
        )
        s = "".join(rng.choice(words) for _ in range(rng.randint(1, 2 + difficulty)))
        if rng.random() < 0.5:  # perturb so that some instances are unsplittable
            i = rng.randrange(len(s))
            s = s[:i] + rng.choice(alpha) + s[i + 1 :]
        return [s, words]

    def edge_args(self, difficulty: int) -> list[list]:
        return [
            ["", ["a"]],
            ["a", []],
            ["leetcode", ["leet", "code"]],
            ["catsandog", ["cats", "dog", "sand", "and", "cat"]],
        ]


def subset_sum(nums, target):
    reachable = {0}
    for x in nums:
        reachable |= {r + x for r in reachable}
    return target in reachable


@register_task
class SubsetSum(CodeTask):
    name = "subset_sum"
    category = "dp"
    description = "Does some subset of the numbers sum exactly to the target?"
    signature = "def subset_sum(nums: list[int], target: int) -> bool"
    statement = (
        "Return True if some subset of `nums` (possibly empty, each element used at most once) sums "
        "exactly to `target`, else False. Numbers may be negative at higher difficulties."
    )
    solution = subset_sum

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(1, 2 + 2 * difficulty)
        lo = -3 * difficulty if difficulty >= 6 else 1
        nums = [rng.randint(lo, 4 + 4 * difficulty) for _ in range(n)]
        if rng.random() < 0.5:
            target = sum(x for x in nums if rng.random() < 0.5)
        else:
            target = rng.randint(lo, max(lo + 1, sum(abs(x) for x in nums)))
        return [nums, target]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[], 0], [[], 3], [[5], 5], [[2, 4], 5], [[3, 34, 4, 12, 5, 2], 9]]


def max_subarray(nums):
    best = cur = nums[0]
    for x in nums[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best


@register_task
class MaxSubarray(CodeTask):
    name = "max_subarray"
    category = "dp"
    description = "Largest sum of a non-empty contiguous subarray (Kadane)."
    signature = "def max_subarray(nums: list[int]) -> int"
    statement = "Return the largest sum of a non-empty contiguous subarray of `nums` (`nums` is never empty)."
    solution = max_subarray

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(1, 3 + 6 * difficulty)
        return [[rng.randint(-4 - 3 * difficulty, 3 + 2 * difficulty) for _ in range(n)]]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[5]], [[-3]], [[-2, -1, -4]], [[-2, 1, -3, 4, -1, 2, 1, -5, 4]]]


def house_robber(nums):
    take, skip = 0, 0
    for x in nums:
        take, skip = skip + x, max(take, skip)
    return max(take, skip)


@register_task
class HouseRobber(CodeTask):
    name = "house_robber"
    category = "dp"
    description = "Largest sum of non-adjacent elements."
    signature = "def house_robber(nums: list[int]) -> int"
    statement = (
        "Each element of `nums` (all >= 0) is the money in a house on a street. Return the largest "
        "total you can take without taking two adjacent houses (0 for an empty street)."
    )
    solution = house_robber

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        return [[rng.randint(0, 5 + 10 * difficulty) for _ in range(rng.randint(0, 2 + 5 * difficulty))]]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[]], [[4]], [[2, 7, 9, 3, 1]], [[2, 1, 1, 2]]]
