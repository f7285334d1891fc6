"""From a problem to the exact text the model continues: plain or through a chat template.

plain:  task.render(problem) + "\\n" + task.response_prefix(problem)
chat:   tokenizer.apply_chat_template([user turn], add_generation_prompt=True) + prefix
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..types import Problem
from .base import PROMPT_STYLES
from .registry import get_task

CHAT_MODES = ("auto", "on", "off")


def uses_chat(tokenizer: Any, chat: str) -> bool:
    if chat not in CHAT_MODES:
        raise UserError(f"chat_template must be one of {', '.join(CHAT_MODES)}, got {chat!r}")
    has = bool(getattr(tokenizer, "chat_template", None))
    if chat == "on" and not has:
        raise UserError("chat_template=on, but the tokenizer has no chat template")
    return chat == "on" or (chat == "auto" and has)


def format_prompt(problem: Problem, tokenizer: Any = None, style: str = "full", chat: str = "auto") -> str:
    if style not in PROMPT_STYLES:
        raise UserError(f"prompt style must be one of {', '.join(PROMPT_STYLES)}, got {style!r}")
    task = get_task(problem.task)
    user = task.render(problem, style)
    prefix = task.response_prefix(problem, style)
    if tokenizer is not None and uses_chat(tokenizer, chat):
        head = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return head + prefix
    return user + ("" if user.endswith("\n") else "\n") + prefix
