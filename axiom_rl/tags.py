"""Tagged spans of model output (<think>...</think>, <answer>...</answer>, ``` fences), found in
time linear in the text's length.

The patterns these replace (`<answer>(.*?)</answer>`) rescanned the rest of the text from every
opening tag that had no closing one: 8,000 unclosed `<answer>` tags took 6 s to read, and a
completion is the policy's to write. Here every search starts where the last one ended.
"""

from __future__ import annotations

import re

_FENCE_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")


def tagged_spans(text: str, opening: str, closing: str) -> list[tuple[int, int]]:
    """(start, end) of each `opening`...`closing` span, the tags included, left to right and not
    overlapping: each ends at the first `closing` after its `opening`. An `opening` with no
    `closing` after it ends the search."""
    spans, pos = [], 0
    while (start := text.find(opening, pos)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break
        pos = end + len(closing)
        spans.append((start, pos))
    return spans


def tagged_bodies(text: str, opening: str, closing: str) -> list[str]:
    """What each `opening`...`closing` span holds between its tags (see tagged_spans)."""
    return [
        text[start + len(opening) : end - len(closing)] for start, end in tagged_spans(text, opening, closing)
    ]


def answer_body_span(
    text: str, opening: str = "<answer>", closing: str = "</answer>"
) -> tuple[int, int] | None:
    """(start, end) of answer_body's text in `text`, or None when it has none."""
    spans = tagged_spans(text, opening, closing)
    if spans:
        start, end = spans[-1]
        return start + len(opening), end - len(closing)
    if closing in text and opening not in text:
        return 0, text.find(closing)
    return None


def answer_body(text: str, opening: str = "<answer>", closing: str = "</answer>") -> str | None:
    """The last `opening`...`closing` body as written. If the prompt opened the tag (a closing
    tag but no opening one), the text before the first `closing`. Else None."""
    span = answer_body_span(text, opening, closing)
    return None if span is None else text[span[0] : span[1]]


def without_spans(text: str, opening: str, closing: str) -> str:
    """`text` less every `opening`...`closing` span (see tagged_spans)."""
    pieces, pos = [], 0
    for start, end in tagged_spans(text, opening, closing):
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each ``` fenced block: the language is the run of letters, digits and
    `_+-` after the opening fence (what follows it on that line is ignored), the body runs from the
    next line to the next fence, or to the end of the text for an unterminated last block."""
    blocks, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:  # no line follows: no fence from here on opens a block
            break
        lang = _FENCE_LANG.match(text, start + 3, newline)
        end = text.find("```", newline + 1)
        blocks.append((lang[1] if lang else "", text[newline + 1 : end if end >= 0 else len(text)]))
        if end < 0:
            break
        pos = end + 3
    return blocks
