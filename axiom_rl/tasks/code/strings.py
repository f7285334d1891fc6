"""String tasks: bracket matching, search, palindromes, run-length encoding."""

from __future__ import annotations

import random

from ..base import CodeTask, alphabet_for, rand_str
from ..registry import register_task


def balanced_parentheses(s):
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif c in pairs and (not stack or stack.pop() != pairs[c]):
            return False
    return not stack


def _balanced(rng: random.Random, pairs: int, kinds: str) -> str:
    if pairs == 0:
        return ""
    inner = rng.randint(0, pairs - 1)
    o = rng.choice(kinds)
    c = {"(": ")", "[": "]", "{": "}"}[o]
    return o + _balanced(rng, inner, kinds) + c + _balanced(rng, pairs - 1 - inner, kinds)


@register_task
class BalancedParentheses(CodeTask):
    name = "balanced_parentheses"
    category = "strings"
    description = "Do the brackets ()[]{} in a string match and nest properly?"
    signature = "def balanced_parentheses(s: str) -> bool"
    statement = (
        "Return True if every bracket in `s` -- (), [] and {} -- is closed by the matching kind in the "
        "right order, else False. Characters other than brackets are ignored."
    )
    solution = balanced_parentheses

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        kinds = "(" if difficulty <= 2 else "([" if difficulty <= 5 else "([{"
        s = _balanced(rng, rng.randint(1, 1 + 2 * difficulty), kinds)
        if rng.random() < 0.5:  # corrupt: swap, drop or insert one bracket
            i = rng.randrange(len(s))
            op = rng.choice(("drop", "swap", "insert"))
            if op == "drop":
                s = s[:i] + s[i + 1 :]
            elif op == "swap":
                s = s[:i] + rng.choice("()[]{}"[: 2 * len(kinds)]) + s[i + 1 :]
            else:
                s = s[:i] + rng.choice(")]}"[: len(kinds)]) + s[i:]
        if difficulty >= 7:  # letters between brackets must be ignored
            s = "".join(ch + (rng.choice("ab ") if rng.random() < 0.2 else "") for ch in s)
        return [s]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[""], ["("], [")("], ["([)]"], ["{[]}"], ["x"]]


def substring_search(haystack, needle):
    if needle == "":
        return 0
    for i in range(len(haystack) - len(needle) + 1):
        if haystack[i : i + len(needle)] == needle:
            return i
    return -1


@register_task
class SubstringSearch(CodeTask):
    name = "substring_search"
    category = "strings"
    description = "Index of the first occurrence of a needle in a haystack (-1 if absent)."
    signature = "def substring_search(haystack: str, needle: str) -> int"
    statement = (
        "Return the index of the first occurrence of `needle` in `haystack`, or -1 if it does not "
        "occur. An empty needle occurs at index 0. Do not use str.find or str.index."
    )
    solution = substring_search

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(difficulty // 2)
        hay = rand_str(rng, rng.randint(1, 4 + 6 * difficulty), alpha)
        if rng.random() < 0.6 and hay:
            i = rng.randrange(len(hay))
            needle = hay[i : i + rng.randint(1, 1 + difficulty)]
        else:
            needle = rand_str(rng, rng.randint(1, 2 + difficulty // 2), alpha)
        return [hay, needle]

    def edge_args(self, difficulty: int) -> list[list]:
        return [["", ""], ["abc", ""], ["", "a"], ["aaa", "aaaa"], ["mississippi", "issip"]]


def longest_palindromic_substring(s):
    best = ""
    for center in range(2 * len(s) - 1):
        lo, hi = center // 2, center // 2 + center % 2
        while lo >= 0 and hi < len(s) and s[lo] == s[hi]:
            lo -= 1
            hi += 1
        if hi - lo - 1 > len(best):
            best = s[lo + 1 : hi]
    return best


@register_task
class LongestPalindromicSubstring(CodeTask):
    name = "longest_palindromic_substring"
    category = "strings"
    description = "A longest palindromic substring (any one of them)."
    signature = "def longest_palindromic_substring(s: str) -> str"
    statement = (
        "Return a longest substring of `s` that reads the same forwards and backwards. If several "
        "have the maximal length, any of them is accepted. For the empty string return ''."
    )
    solution = longest_palindromic_substring
    checker = "longest_palindrome"

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(max(1, difficulty // 2))
        s = rand_str(rng, rng.randint(1, 3 + 4 * difficulty), alpha)
        if rng.random() < 0.5 and len(s) > 2:  # plant a palindrome
            core = rand_str(rng, rng.randint(1, 2 + difficulty // 2), alpha)
            pal = core + core[::-1][rng.randint(0, 1) :]
            i = rng.randrange(len(s))
            s = s[:i] + pal + s[i:]
        return [s]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[""], ["a"], ["ab"], ["abba"], ["abcba"], ["abacdfgdcaba"]]


def run_length_encoding(s):
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(s[i] + str(j - i))
        i = j
    return "".join(out)


@register_task
class RunLengthEncoding(CodeTask):
    name = "run_length_encoding"
    category = "strings"
    description = "Run-length encode a string as character-count pairs."
    signature = "def run_length_encoding(s: str) -> str"
    statement = (
        "Encode `s` by replacing every maximal run of one repeated character with the character "
        "followed by the run's length, e.g. 'aaabcc' -> 'a3b1c2'. The empty string encodes to ''."
    )
    solution = run_length_encoding

    def random_args(self, rng: random.Random, difficulty: int) -> list:
        alpha = alphabet_for(difficulty // 2) + ("0123456789" if difficulty >= 8 else "")
        runs = [
            rng.choice(alpha) * rng.randint(1, 2 + 2 * difficulty)
            for _ in range(rng.randint(1, 1 + difficulty))
        ]
        return ["".join(runs)]

    def edge_args(self, difficulty: int) -> list[list]:
        return [[""], ["a"], ["aaaaaaaaaaaa"], ["abc"], ["a1"]]
