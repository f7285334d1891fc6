"""Rewards: pure functions of (problem, completion, verdict) -> float, and a weighted composite.

Every reward reuses the verifier's judgement (the Verdict, or for Countdown the same answer
analysis the verifier used), so there is one notion of "correct" in the whole system. A composite
reports every component, not only the weighted sum, so training logs show which part moved.

    code_execution   1.0 if every test passes, else partial_scale * passed/total (the original experiments: 0.5)
    binary           1.0 if every test passes, else 0.0
    countdown        1.0 correct, 0.1 answer tags present but wrong, 0.0 no answer (the original experiments)
    countdown_graduated  1.0 correct; 0.7 uses exactly the given numbers but misses the target;
                     0.5 a valid expression over some of the numbers (each at most once);
                     0.3 any valid arithmetic expression; 0.1 tags but no expression; 0.0 none
    format           1.0 if the completion has the task's answer format (a fenced function that
                     defines the entry point; <answer> tags), else 0.0
    length_penalty   base * (0.8 + 0.2 * min(1, target_chars / len(completion))), the original experiments'
                     brevity factor over another reward (`base`, default code_execution)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError
from .types import FORMAT_ERROR, PASSED, Problem, Verdict

RewardFn = Callable[..., float]
REWARDS: dict[str, RewardFn] = {}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    def deco(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn

    return deco


@register_reward("code_execution")
def code_execution(
    problem: Problem, completion: str, verdict: Verdict, full: float = 1.0, partial_scale: float = 0.5
) -> float:
    if verdict.status == PASSED:
        return full
    return partial_scale * verdict.fraction


@register_reward("binary")
def binary(problem: Problem, completion: str, verdict: Verdict) -> float:
    return 1.0 if verdict.status == PASSED else 0.0


def _countdown_answer(problem: Problem, completion: str) -> Any:
    from .tasks.countdown import analyse

    m = problem.metadata
    if "numbers" not in m or "target" not in m:
        raise UserError(f"reward 'countdown' needs a Countdown problem, got task {problem.task!r}")
    return analyse(list(m["numbers"]), int(m["target"]), completion)


@register_reward("countdown")
def countdown(problem: Problem, completion: str, verdict: Verdict, format_score: float = 0.1) -> float:
    a = _countdown_answer(problem, completion)
    if a.correct:
        return 1.0
    return format_score if a.has_answer else 0.0


@register_reward("countdown_graduated")
def countdown_graduated(problem: Problem, completion: str, verdict: Verdict) -> float:
    a = _countdown_answer(problem, completion)
    if a.correct:
        return 1.0
    if not a.has_answer:
        return 0.0
    if not a.parsed:
        return 0.1
    if a.numbers_exact:
        return 0.7
    if a.numbers_subset:
        return 0.5
    return 0.3


@register_reward("or_debug")
def or_debug(problem: Problem, completion: str, verdict: Verdict, format_score: float = 0.1) -> float:
    """The original experiments' rule for model repair: 1.0 for a repair that restores the
    intended optimum; otherwise 0.5 x the diagnosis' overlap with the IIS (|named & IIS| /
    |named | IIS|, in the verdict), at least `format_score` for a readable answer, 0 for none."""
    if problem.task != "or_debug":
        raise UserError(f"reward 'or_debug' needs an or_debug problem, got task {problem.task!r}")
    if verdict.status == PASSED:
        return 1.0
    if verdict.status == FORMAT_ERROR:
        return 0.0
    return max(format_score, 0.5 * verdict.fraction)


@register_reward("format")
def format_reward(problem: Problem, completion: str, verdict: Verdict) -> float:
    from .tasks import get_task

    return 1.0 if get_task(problem.task).follows_format(problem, completion) else 0.0


@register_reward("length_penalty")
def length_penalty(
    problem: Problem, completion: str, verdict: Verdict, base: str = "code_execution", target_chars: int = 200
) -> float:
    if base == "length_penalty" or base not in REWARDS:
        raise UserError(
            f"length_penalty: base must be another reward; choose from: {', '.join(sorted(REWARDS))}"
        )
    value = REWARDS[base](problem, completion, verdict)
    return value * (0.8 + 0.2 * min(1.0, target_chars / max(1, len(completion))))


@dataclass(frozen=True)
class RewardSpec:
    """One weighted component of a composite reward."""

    name: str
    weight: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)


def _name_and_weight(part: str, known: set[str]) -> tuple[str, str]:
    """'name:0.5' -> (name, '0.5'); 'module:function:0.5' -> ('module:function', '0.5');
    'module:function' -> ('module:function', ''). After a known name or a module:function, a
    last field that is no number is a bad weight ('binary:x'), for the caller to refuse."""
    head, colon, tail = part.rpartition(":")
    if not colon:
        return part, ""
    try:
        float(tail)
    except ValueError:
        return (head, tail) if head in known or ":" in head else (part, "")
    return head, tail


def load_reward_function(reference: str) -> RewardFn:
    """A user's reward named `module:function` (importable, or a module in the working
    directory) or `path/to/file.py:function`: a function of (problem, completion, verdict) that
    returns a float, as the built-in rewards are. The module is the user's own code, imported
    as such; one line of error when it cannot be."""
    import importlib
    import importlib.util
    import inspect
    import sys
    from pathlib import Path

    module_name, _, attribute = reference.rpartition(":")
    if not module_name or not attribute.isidentifier():
        raise UserError(f"reward {reference!r}: expected module:function or path/to/file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise UserError(f"reward {reference!r}: no such file {module_name}")
            spec = importlib.util.spec_from_file_location(f"axiom_rl_user_reward_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))  # as `python -m` finds a module beside you
            module = importlib.import_module(module_name)
    except UserError:
        raise
    except Exception as e:  # the user's module failed to import: say where, in one line
        raise UserError(
            f"reward {reference!r}: importing {module_name} failed: {type(e).__name__}: {e}"
        ) from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise UserError(f"reward {reference!r}: {module_name} has no function {attribute!r}")
    try:
        inspect.signature(fn).bind(None, "", None)
    except TypeError:
        raise UserError(
            f"reward {reference!r}: {attribute} must take (problem, completion, verdict), as the built-in rewards do"
        ) from None
    except ValueError:  # a callable without a signature (a builtin): it is tried when called
        pass
    return fn


def parse_reward_specs(text: str | None) -> list[RewardSpec] | None:
    """'code_execution:1.0,format:0.1' -> specs; None or 'auto' -> None (each task's default).
    A name `module:function` or `file.py:function` is a user's reward, imported and registered
    under that name."""
    if text is None or text.strip() in ("", "auto"):
        return None
    from .reward_stage import COMPONENTS  # components that score a batch (reward_stage.py)

    specs = []
    for part in text.split(","):
        name, weight = _name_and_weight(part.strip(), {*REWARDS, *COMPONENTS})
        if ":" in name and name not in REWARDS:
            REWARDS[name] = load_reward_function(name)
        known = {*REWARDS, *COMPONENTS}
        if name not in known:
            raise UserError(f"unknown reward {name!r}; choose from: auto, {', '.join(sorted(known))}")
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UserError(f"reward weight must be a finite number, got {weight!r} in {part!r}")
        if any(s.name == name for s in specs):
            raise UserError(f"reward {name!r} is given twice in {text!r}")
        specs.append(RewardSpec(name, value))
    if all(s.weight == 0 for s in specs):
        raise UserError(f"every reward weight in {text!r} is 0: every reward would be 0 and nothing learnt")
    return specs


def compute_reward(
    problem: Problem, completion: str, verdict: Verdict, specs: Sequence[RewardSpec] | None = None
) -> tuple[float, dict[str, float]]:
    """(weighted sum, every component's unweighted value). `specs=None`: the task's default."""
    if specs is None:
        from .tasks import get_task

        specs = [RewardSpec(get_task(problem.task).default_reward)]
    components = {
        s.name: float(REWARDS[s.name](problem, completion, verdict, **dict(s.params))) for s in specs
    }
    total = sum(s.weight * components[s.name] for s in specs)
    return total, components
