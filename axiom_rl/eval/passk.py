"""The unbiased pass@k estimator of Chen et al. (2021, "Evaluating Large Language Models Trained
on Code", arXiv:2107.03374): with n samples of which c are correct,

    pass@k = 1 - C(n - c, k) / C(n, k)

computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms the huge binomials.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(samples: Iterable[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems given (n, c) for each."""
    values = [pass_at_k(n, c, k) for n, c in samples]
    return sum(values) / len(values) if values else 0.0
