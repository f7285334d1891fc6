"""How good a process reward model is, against the verifier: step-level AUC, and best-of-N
reranking accuracy beside a single sample, majority vote and the oracle (any sample right)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..tags import answer_body
from ..tasks.countdown import extract_answer
from ..verifier import extract_code
from .components import aggregate
from .labels import Labelled


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: the chance a random good step scores above a random bad one (ties
    count half); None without both kinds. Mann-Whitney's U over average ranks, O(n log n)."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    positive_ranks = sum(r for r, y in zip(ranks, labels) if y)
    return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives)


def final_answer(example: Labelled) -> str:
    """What majority vote counts as the same answer: Countdown's answer, or_debug's answer body, a
    program's code, without whitespace ("" when there is none: all such count as one answer)."""
    if example.problem.task == "countdown":
        found = extract_answer(example.completion)
    elif example.problem.task == "or_debug":
        found = answer_body(example.completion)
    else:
        found = extract_code(example.completion, example.problem.entry_point)
    return "".join((found or "").split())


@dataclass(frozen=True)
class Reranking:
    problems: int
    samples_per_problem: float
    single: float  # the mean accuracy of one sample
    best_of_n: float  # the sample the PRM scores highest (aggregate of its steps)
    majority: float  # the most frequent final answer
    oracle: float  # any sample right


def rerank(
    examples: Sequence[Labelled], step_scores: Sequence[Sequence[float]], how: str = "min"
) -> Reranking:
    """Best-of-N over each problem's samples (the examples with its id), choosing the highest
    `how` (min, mean, last) of the PRM's step scores; ties go to the first sample."""
    by_problem: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        by_problem[e.problem.id].append(i)
    single, best, majority, oracle = [], [], [], []
    for rows in by_problem.values():
        single.append(statistics.fmean(examples[i].passed for i in rows))
        chosen = max(rows, key=lambda i: (aggregate(step_scores[i], how) if step_scores[i] else 0.0, -i))
        best.append(float(examples[chosen].passed))
        votes = Counter(final_answer(examples[i]) for i in rows)
        top = votes.most_common(1)[0][0]
        majority.append(float(examples[next(i for i in rows if final_answer(examples[i]) == top)].passed))
        oracle.append(float(any(examples[i].passed for i in rows)))
    return Reranking(len(by_problem), len(examples) / max(1, len(by_problem)), statistics.fmean(single),
                     statistics.fmean(best), statistics.fmean(majority), statistics.fmean(oracle))  # fmt: skip
