"""Graph tasks: Dijkstra with unreachable nodes, topological order, islands, grid BFS."""

from __future__ import annotations

import random

from ..base import CodeTask
from ..registry import register_task


def shortest_path(n, edges, source):
    import heapq

    adj = [[] for _ in range(n)]
    for u, v, w in edges:
        adj[u].append((v, w))
    dist = [-1] * n
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if dist[u] != -1:
            continue
        dist[u] = d
        for v, w in adj[u]:
            if dist[v] == -1:
                heapq.heappush(heap, (d + w, v))
    return dist


@register_task
class ShortestPath(CodeTask):
    name = "shortest_path"
    category = "graphs"
    description = "Dijkstra: distances from a source in a weighted digraph, -1 if unreachable."
    signature = "def shortest_path(n: int, edges: list[list[int]], source: int) -> list[int]"
    statement = (
        "The graph has nodes 0..n-1 and directed edges [u, v, w] from u to v with weight w >= 0 "
        "(there may be several edges between two nodes). Return a list whose i-th entry is the "
        "length of the shortest path from `source` to node i, or -1 if node i is unreachable."
    )
    solution = shortest_path

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(1, 2 + 2 * difficulty)
        m = rng.randint(0, n * (1 + difficulty // 3))
        edges = [[rng.randrange(n), rng.randrange(n), rng.randint(0, 3 + 3 * difficulty)] for _ in range(m)]
        return [n, edges, rng.randrange(n)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[1, [], 0], [3, [], 1], [2, [[0, 1, 5], [0, 1, 2]], 0], [3, [[0, 1, 0], [1, 2, 0]], 0]]


def topological_sort(n, edges):
    indegree = [0] * n
    adj = [[] for _ in range(n)]
    for u, v in edges:
        adj[u].append(v)
        indegree[v] += 1
    ready = [u for u in range(n) if indegree[u] == 0]
    order = []
    while ready:
        u = ready.pop()
        order.append(u)
        for v in adj[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    return order if len(order) == n else []


@register_task
class TopologicalSort(CodeTask):
    name = "topological_sort"
    category = "graphs"
    description = "Any topological order of a directed graph ([] when it has a cycle)."
    signature = "def topological_sort(n: int, edges: list[list[int]]) -> list[int]"
    statement = (
        "The graph has nodes 0..n-1 and directed edges [u, v] meaning u must come before v. Return "
        "any ordering of all n nodes that respects every edge, or [] if the graph has a cycle."
    )
    solution = topological_sort
    checker = "topological_order"

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        n = rng.randint(1, 2 + 2 * difficulty)
        perm = list(range(n))
        rng.shuffle(perm)
        edges = set()
        for _ in range(rng.randint(0, 2 * n)):
            i, j = sorted(rng.sample(range(n), 2)) if n > 1 else (0, 0)
            if i != j:
                edges.add((perm[i], perm[j]))
        edges = [list(e) for e in sorted(edges)]
        if edges and rng.random() < 0.25:  # a back edge makes a cycle
            u, v = rng.choice(edges)
            edges.append([v, u])
        rng.shuffle(edges)
        return [n, edges]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[1, []], [2, [[0, 1], [1, 0]]], [3, []], [4, [[3, 2], [2, 1], [1, 0]]]]


def num_islands(grid):
    rows = len(grid)
    cols = len(grid[0]) if rows else 0
    seen = [[False] * cols for _ in range(rows)]
    count = 0
    for r in range(rows):
        for c in range(cols):
            if grid[r][c] == 1 and not seen[r][c]:
                count += 1
                stack = [(r, c)]
                seen[r][c] = True
                while stack:
                    y, x = stack.pop()
                    for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                        if 0 <= ny < rows and 0 <= nx < cols and grid[ny][nx] == 1 and not seen[ny][nx]:
                            seen[ny][nx] = True
                            stack.append((ny, nx))
    return count


def _grid(rng: random.Random, difficulty: int, density: float) -> list[list[int]]:
    rows, cols = rng.randint(1, 2 + difficulty), rng.randint(1, 2 + difficulty)
    return [[1 if rng.random() < density else 0 for _ in range(cols)] for _ in range(rows)]


@register_task
class NumIslands(CodeTask):
    name = "num_islands"
    category = "graphs"
    description = "Count 4-connected islands of 1s in a grid."
    signature = "def num_islands(grid: list[list[int]]) -> int"
    statement = (
        "`grid` holds 1 for land and 0 for water. An island is a group of land cells connected "
        "horizontally or vertically. Return the number of islands (0 for an empty grid)."
    )
    solution = num_islands

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        return [_grid(rng, difficulty, rng.uniform(0.3, 0.6))]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[]], [[[0]]], [[[1]]], [[[1, 0, 1], [0, 1, 0], [1, 0, 1]]], [[[1, 1], [1, 1]]]]


def grid_shortest_path(grid):
    from collections import deque

    rows = len(grid)
    cols = len(grid[0]) if rows else 0
    if rows == 0 or cols == 0 or grid[0][0] == 1 or grid[rows - 1][cols - 1] == 1:
        return -1
    dist = {(0, 0): 0}
    queue = deque([(0, 0)])
    while queue:
        y, x = queue.popleft()
        if (y, x) == (rows - 1, cols - 1):
            return dist[(y, x)]
        for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
            if 0 <= ny < rows and 0 <= nx < cols and grid[ny][nx] == 0 and (ny, nx) not in dist:
                dist[(ny, nx)] = dist[(y, x)] + 1
                queue.append((ny, nx))
    return -1


@register_task
class GridShortestPath(CodeTask):
    name = "grid_shortest_path"
    category = "graphs"
    description = "BFS: fewest moves from the top-left to the bottom-right of a grid."
    signature = "def grid_shortest_path(grid: list[list[int]]) -> int"
    statement = (
        "`grid` holds 0 for open cells and 1 for walls. Moving one step up, down, left or right "
        "between open cells, return the fewest moves from the top-left cell to the bottom-right "
        "cell, or -1 if it cannot be reached (or either corner is a wall). A 1x1 open grid needs 0 moves."
    )
    solution = grid_shortest_path

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        return [_grid(rng, difficulty, 0.15 + 0.02 * difficulty)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[[[0]]], [[[1]]], [[[0, 1], [1, 0]]], [[[0, 0, 0], [1, 1, 0], [0, 0, 0]]]]
