"""Basics: warm-up functions whose difficulty is mostly input size and edge cases."""

from __future__ import annotations

import random

from ..base import CodeTask, rand_str
from ..registry import register_task


def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out


@register_task
class FizzBuzz(CodeTask):
    name = "fizzbuzz"
    category = "basics"
    description = "The classic: numbers 1..n with Fizz, Buzz and FizzBuzz."
    signature = "def fizzbuzz(n: int) -> list[str]"
    statement = (
        'Return a list of strings for the numbers 1 to n: "Fizz" for multiples of 3, "Buzz" for '
        'multiples of 5, "FizzBuzz" for multiples of both, and the number itself otherwise. '
        "For n < 1 return an empty list."
    )
    solution = fizzbuzz

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        return [rng.randint(1, 4 + 12 * difficulty)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[0], [1], [15], [-3]]


def reverse_words(s):
    return " ".join(reversed(s.split()))


@register_task
class ReverseWords(CodeTask):
    name = "reverse_words"
    category = "basics"
    description = "Reverse the order of words, collapsing runs of spaces."
    signature = "def reverse_words(s: str) -> str"
    statement = (
        "Return the words of `s` in reverse order, separated by single spaces. Words are maximal "
        "runs of non-space characters; leading, trailing and repeated spaces are dropped."
    )
    solution = reverse_words

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        words = [rand_str(rng, rng.randint(1, 2 + difficulty)) for _ in range(rng.randint(1, 1 + difficulty))]
        if difficulty <= 2:
            return [" ".join(words)]
        # Higher difficulties add ragged spacing around and between words.
        gaps = [" " * rng.randint(1, 1 + difficulty // 3) for _ in words]
        return [
            " " * rng.randint(0, 2)
            + "".join(w + g for w, g in zip(words, gaps)).rstrip()
            + " " * rng.randint(0, 2)
        ]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[""], ["   "], ["one"], ["  two  words "]]


def is_palindrome(s):
    cleaned = [c.lower() for c in s if c.isalnum()]
    return cleaned == cleaned[::-1]


@register_task
class IsPalindrome(CodeTask):
    name = "is_palindrome"
    category = "basics"
    description = "Palindrome test over letters and digits, ignoring case."
    signature = "def is_palindrome(s: str) -> bool"
    statement = (
        "Return True if `s` reads the same forwards and backwards when only letters and digits are "
        "kept and case is ignored, else False. The empty string is a palindrome."
    )
    solution = is_palindrome

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        half = rand_str(
            rng, rng.randint(1, 2 + 2 * difficulty), "abcab12" if difficulty < 4 else "abcdefXYZ019"
        )
        word = half + (rng.choice(half) if rng.random() < 0.5 else "") + half[::-1]
        if rng.random() < 0.5:  # break it half the time
            i = rng.randrange(len(word))
            word = word[:i] + rng.choice("qz7") + word[i + 1 :]
        if difficulty >= 4:  # mixed case and punctuation that must be ignored
            word = "".join(c.upper() if rng.random() < 0.3 else c for c in word)
            for _ in range(difficulty // 2):
                i = rng.randrange(len(word) + 1)
                word = word[:i] + rng.choice(" ,.!-:") + word[i:]
        return [word]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[""], ["a"], ["ab"], [".,!"], ["A man, a plan, a canal: Panama"]]


def int_to_roman(num):
    table = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ]
    out = []
    for value, letters in table:
        count, num = divmod(num, value)
        out.append(letters * count)
    return "".join(out)


@register_task
class IntToRoman(CodeTask):
    name = "int_to_roman"
    category = "basics"
    description = "Integers 1-3999 as Roman numerals (subtractive notation)."
    signature = "def int_to_roman(num: int) -> str"
    statement = (
        "Return the Roman numeral for `num` (1 <= num <= 3999), using the subtractive forms "
        "IV, IX, XL, XC, CD and CM."
    )
    solution = int_to_roman

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        top = [10, 20, 50, 100, 400, 1000, 2000, 3000, 3500, 3999][difficulty - 1]
        return [rng.randint(1, top)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[1], [4], [9], [40], [90], [400], [900], [3999], [1994]][: 3 + difficulty]
