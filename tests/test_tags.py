"""Tagged spans of model output: the same answers as the patterns they replace, in linear time."""

from __future__ import annotations

import random
import re
import time

import pytest

from axiom_rl.tags import fenced_blocks, tagged_bodies, without_spans
from axiom_rl.tasks.countdown import analyse, extract_answer
from axiom_rl.verifier import extract_code, strip_thinking

# The patterns as they were: right on every text, quadratic on some.
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)

PIECES = ["<answer>", "</answer>", "<think>", "</think>", "```", "```python", "```py x", "\n", " ", "a", "1 + 2", "`", "<", ">", "\t"]  # fmt: skip


def random_texts(n: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))


def test_the_same_spans_as_the_patterns_they_replace():
    for text in random_texts(20_000):
        assert tagged_bodies(text, "<answer>", "</answer>") == ANSWER.findall(text), repr(text)
        assert without_spans(text, "<think>", "</think>") == THINK.sub("", text), repr(text)
        assert fenced_blocks(text) == FENCE.findall(text), repr(text)


@pytest.mark.parametrize(
    "text",
    [
        "<answer>" * 200_000,
        "<think>" * 200_000,
        "```" * 200_000,
        "```\n" + "```" * 200_000,
        "<answer>" * 100_000 + "</answer>",
    ],
    ids=["answer", "think", "fence", "fence-then-line", "answer-closed-at-the-end"],
)
def test_unclosed_tags_by_the_hundred_thousand_are_read_at_once(text):
    """The patterns took 6 s for 8,000 unclosed <answer> tags (quadratic): 200,000 would take an
    hour. Every reader of a completion goes through these."""
    start = time.perf_counter()
    extract_answer(text)
    analyse([1, 2, 3], 6, text)
    strip_thinking(text)
    extract_code(text, "f")
    assert time.perf_counter() - start < 2.0
