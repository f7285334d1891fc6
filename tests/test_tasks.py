"""The problem library: registry, determinism, splits, references, checkers, brute-force oracles."""

from __future__ import annotations

import copy
import itertools
import json
import random
from functools import lru_cache

import pytest

from axiom_rl.errors import UserError
from axiom_rl.tasks import CodeTask, all_tasks, generate_problems, get_task, split_of
from axiom_rl.tasks.checkers import CHECKERS, run_checker
from axiom_rl.types import Problem

GENERATED = all_tasks()
CODE_TASKS = [n for n in GENERATED if isinstance(get_task(n), CodeTask)]


def run_reference(problem: Problem) -> list[object]:
    """Execute the problem's reference *source text* (trusted) on every test input."""
    namespace: dict = {}
    exec(problem.reference_solution, namespace)
    fn = namespace[problem.entry_point]
    return [json.loads(json.dumps(fn(*copy.deepcopy(list(t.args))))) for t in problem.tests]


def test_registry_has_the_promised_tasks():
    assert len(GENERATED) >= 21
    seeds = {
        "fizzbuzz",
        "balanced_parentheses",
        "lcs",
        "edit_distance",
        "knapsack_01",
        "coin_change",
        "n_queens",
    }
    assert seeds <= set(GENERATED)
    assert "countdown" in GENERATED
    categories = {get_task(n).category for n in CODE_TASKS}
    assert {"basics", "dp", "graphs", "strings", "backtracking"} <= categories
    for name in GENERATED:
        task = get_task(name)
        assert task.description and task.min_difficulty == 1 and task.max_difficulty == 10


@pytest.mark.parametrize("name", CODE_TASKS)
def test_reference_passes_own_tests_at_every_difficulty(name):
    for difficulty in range(1, 11):
        for problem in generate_problems(name, difficulty, 3, seed=7):
            assert len(problem.tests) >= 5, problem.id
            examples = problem.metadata["examples"]
            assert 1 <= len(examples) <= 2 and problem.signature in problem.prompt
            assert "```python" in problem.prompt
            for test, output in zip(problem.tests, run_reference(problem)):
                ok, why = run_checker(problem.checker, list(test.args), test.expected, output)
                assert ok, (problem.id, test, why)


def test_num_tests_is_configurable():
    problem = generate_problems(get_task("edit_distance", num_tests=12), 5, 1)[0]
    assert len(problem.tests) == 12


def test_ids_and_content_are_stable_and_seeded():
    a = generate_problems("edit_distance", 5, 4, seed=3)
    b = generate_problems("edit_distance", 5, 4, seed=3)
    assert [p.to_json() for p in a] == [p.to_json() for p in b]
    assert a[3].id == "edit_distance-d5-s3-0003"
    # problem i does not depend on how many are generated alongside
    assert generate_problems("edit_distance", 5, 1, seed=3, start=3)[0] == a[3]
    other = generate_problems("edit_distance", 5, 4, seed=4)
    assert [p.prompt for p in a] != [p.prompt for p in other]


def test_json_round_trip_is_lossless():
    for name in GENERATED:
        for p in generate_problems(name, 6, 2, seed=1):
            assert Problem.from_json(p.to_json()) == p


@pytest.mark.parametrize("name", GENERATED)
def test_train_and_eval_share_no_problem(name):
    task = get_task(name)
    train, evals = set(), set()
    for seed in range(3):
        for d in (1, 4, 10):
            train |= {task.content_key(p) for p in generate_problems(name, d, 6, seed=seed, split="train")}
            evals |= {task.content_key(p) for p in generate_problems(name, d, 6, seed=seed, split="eval")}
    assert train and evals
    assert not train & evals
    for p in generate_problems(name, 3, 5, seed=0, split="eval"):
        assert split_of(task, p) == "eval" and "-e" in p.id


def test_difficulty_scales_input_size():
    def size(name, d):
        return sum(len(json.dumps([t.args for t in p.tests])) for p in generate_problems(name, d, 8, seed=0))

    for name in (
        "edit_distance",
        "knapsack_01",
        "shortest_path",
        "max_subarray",
        "word_break",
        "run_length_encoding",
    ):
        assert size(name, 10) > 2 * size(name, 1), name


def test_bad_difficulty_and_unknown_task_are_user_errors():
    with pytest.raises(UserError, match="out of range"):
        generate_problems("lcs", 11, 1)
    with pytest.raises(UserError, match="choose from"):
        generate_problems("no_such_task", 1, 1)
    with pytest.raises(UserError, match="no generator"):
        generate_problems("humaneval", 0, 1)


# ----------------------------------------------------------------- independent oracles (small inputs)


def _edit(a, b):
    @lru_cache(None)
    def go(i, j):
        if i == len(a) or j == len(b):
            return len(a) - i + len(b) - j
        if a[i] == b[j]:
            return go(i + 1, j + 1)
        return 1 + min(go(i + 1, j), go(i, j + 1), go(i + 1, j + 1))

    return go(0, 0)


def _lcs(a, b):
    @lru_cache(None)
    def go(i, j):
        if i == len(a) or j == len(b):
            return 0
        return go(i + 1, j + 1) + 1 if a[i] == b[j] else max(go(i + 1, j), go(i, j + 1))

    return go(0, 0)


def _subsets(xs):
    return itertools.chain.from_iterable(
        itertools.combinations(range(len(xs)), k) for k in range(len(xs) + 1)
    )


def _knapsack(w, v, cap):
    return max(sum(v[i] for i in s) for s in _subsets(w) if sum(w[i] for i in s) <= cap)


def _coins(coins, amount):
    frontier, seen, steps = {0}, {0}, 0
    while frontier:
        if amount in frontier:
            return steps
        frontier = {x + c for x in frontier for c in coins if x + c <= amount} - seen
        seen |= frontier
        steps += 1
    return -1


def _lis(nums):
    best = 0
    for s in _subsets(nums):
        vals = [nums[i] for i in s]
        if all(x < y for x, y in zip(vals, vals[1:])):
            best = max(best, len(vals))
    return best


def _robber(nums):
    return max(sum(nums[i] for i in s) for s in _subsets(nums) if all(b - a > 1 for a, b in zip(s, s[1:])))


def _paths(grid):
    rows, cols = len(grid), len(grid[0])

    @lru_cache(None)
    def go(r, c):
        if r >= rows or c >= cols or grid[r][c] == 1:
            return 0
        return 1 if (r, c) == (rows - 1, cols - 1) else go(r + 1, c) + go(r, c + 1)

    return go(0, 0)


def _word_break(s, words):
    @lru_cache(None)
    def go(i):
        return i == len(s) or any(s.startswith(w, i) and go(i + len(w)) for w in words if w)

    return go(0)


def _bellman_ford(n, edges, src):
    inf = float("inf")
    dist = [inf] * n
    dist[src] = 0
    for _ in range(n):
        for u, v, w in edges:
            dist[v] = min(dist[v], dist[u] + w)
    return [-1 if d == inf else d for d in dist]


def _roman_value(s):
    vals = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    return sum(-vals[a] if vals[a] < vals[b] else vals[a] for a, b in zip(s, s[1:] + "I")) if s else 0


ORACLES = {
    "edit_distance": _edit,
    "lcs": _lcs,
    "knapsack_01": _knapsack,
    "coin_change": _coins,
    "longest_increasing_subsequence": _lis,
    "house_robber": _robber,
    "unique_paths_with_obstacles": _paths,
    "word_break": _word_break,
    "shortest_path": _bellman_ford,
    "subset_sum": lambda nums, t: any(sum(nums[i] for i in s) == t for s in _subsets(nums)),
    "max_subarray": lambda xs: max(sum(xs[i:j]) for i in range(len(xs)) for j in range(i + 1, len(xs) + 1)),
    "n_queens": lambda n: [1, 1, 0, 0, 2, 10, 4, 40, 92, 352, 724][n],
    "substring_search": lambda h, n: h.find(n),
    "is_palindrome": lambda s: (lambda t: t == t[::-1])("".join(c.lower() for c in s if c.isalnum())),
}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_references_agree_with_brute_force(name):
    oracle = ORACLES[name]
    checked = 0
    for d in (1, 2, 3):
        for p in generate_problems(name, d, 6, seed=11):
            for t in p.tests:
                assert t.expected == oracle(*copy.deepcopy(list(t.args))), (p.id, t)
                checked += 1
    assert checked >= 90


def test_int_to_roman_round_trips():
    for p in generate_problems("int_to_roman", 10, 5):
        for t in p.tests:
            assert _roman_value(t.expected) == t.args[0]


# ----------------------------------------------------------------------------------- checkers


def test_every_checker_is_exercised_by_some_task():
    used = {get_task(n).checker for n in CODE_TASKS} - {None}
    assert used == set(CHECKERS)


def test_any_order_checker():
    expected = [[1, 2], [2, 1]]
    assert run_checker("any_order", [[1, 2]], expected, [[2, 1], [1, 2]])[0]
    assert not run_checker("any_order", [[1, 2]], expected, [[1, 2], [1, 2]])[0]  # duplicate, one missing
    assert not run_checker("any_order", [[1, 2]], expected, [[1, 2]])[0]
    assert not run_checker("any_order", [[1, 2]], expected, {"not": "a list"})[0]


def test_any_order_nested_checker():
    expected = [[2, 2, 3], [7]]
    assert run_checker("any_order_nested", [[2, 3, 7], 7], expected, [[7], [3, 2, 2]])[0]
    assert not run_checker("any_order_nested", [[2, 3, 7], 7], expected, [[7], [2, 3]])[0]
    assert not run_checker("any_order_nested", [[2, 3, 7], 7], expected, [[7], [2, 2, 3], [2, 2, 3]])[0]
    assert not run_checker("any_order_nested", [[2, 3, 7], 7], expected, [[7], ["a", 1, None]])[0]


def test_topological_checker_accepts_every_valid_order_and_nothing_else():
    n, edges = 4, [[0, 1], [0, 2], [1, 3], [2, 3]]
    valid = [
        list(p) for p in itertools.permutations(range(4)) if all(p.index(u) < p.index(v) for u, v in edges)
    ]
    assert len(valid) == 2
    for order in itertools.permutations(range(4)):
        ok, _ = run_checker("topological_order", [n, edges], [0, 1, 2, 3], list(order))
        assert ok == (list(order) in valid)
    assert not run_checker("topological_order", [n, edges], [0, 1, 2, 3], [0, 1, 2])[0]
    assert not run_checker("topological_order", [n, edges], [0, 1, 2, 3], [0, 1, 2, 3, 3])[0]
    cyclic = [2, [[0, 1], [1, 0]]]
    assert run_checker("topological_order", cyclic, [], [])[0]
    assert not run_checker("topological_order", cyclic, [], [0, 1])[0]


def test_longest_palindrome_checker():
    args = ["abacdc"]
    assert run_checker("longest_palindrome", args, "aba", "aba")[0]
    assert run_checker("longest_palindrome", args, "aba", "cdc")[0]  # another longest one
    assert not run_checker("longest_palindrome", args, "aba", "ab")[0]
    assert not run_checker("longest_palindrome", args, "aba", "aca")[0]  # not a substring
    assert not run_checker("longest_palindrome", args, "aba", "acd")[0]
    assert not run_checker("longest_palindrome", args, "aba", 3)[0]


def test_checkers_on_generated_alternatives():
    rng = random.Random(0)
    for p in generate_problems("permutations", 6, 5):
        for t in p.tests:
            shuffled = list(t.expected)
            rng.shuffle(shuffled)
            assert run_checker(p.checker, list(t.args), t.expected, shuffled)[0]
            if len(shuffled) > 1:
                assert not run_checker(p.checker, list(t.args), t.expected, shuffled[1:])[0]
    for p in generate_problems("topological_sort", 6, 5):
        for t in p.tests:
            n, edges = t.args
            if t.expected:  # a different valid order: Kahn's algorithm taking the smallest node first
                indeg = [0] * n
                for _, v in edges:
                    indeg[v] += 1
                order, ready = [], sorted(u for u in range(n) if indeg[u] == 0)
                while ready:
                    u = ready.pop(0)
                    order.append(u)
                    for a, b in edges:
                        if a == u:
                            indeg[b] -= 1
                            if indeg[b] == 0:
                                ready = sorted([*ready, b])
                assert run_checker(p.checker, list(t.args), t.expected, order)[0]
                if edges:
                    u, v = edges[0]
                    bad = list(order)
                    i, j = bad.index(u), bad.index(v)
                    bad[i], bad[j] = v, u
                    assert not run_checker(p.checker, list(t.args), t.expected, bad)[0]
