"""`axiom-rl prm label`: an evaluation run's completions, split into steps and labelled.

Countdown's and or_debug's steps get exact labels (the solver's, for or_debug); code's,
Monte-Carlo labels from a policy (its continuations sampled with the rollout backends, verified in
the sandbox)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UserError
from ..types import PASSED, Problem
from .labels import EXACTLY_LABELLED, Labelled, exact_labels, monte_carlo_labels
from .steps import has_steps, split_steps

# (problems, completions) -> one label per step, per completion
CodeLabeller = Callable[[Sequence[Problem], Sequence[str]], list[list[float]]]


def label_run(store: Any, run_name: str, code_labeller: CodeLabeller | None = None) -> list[Labelled]:
    """Every attempt of the run `run_name` in an eval database (eval.store.ResultsDB), labelled."""
    run = store.require_run(run_name)
    attempts = store.attempts(run)
    if not attempts:
        raise UserError(f"run {run_name!r} has no attempts")
    without = sorted({a["task"] for a in attempts if not has_steps(a["task"])})
    if without:
        raise UserError(
            f"run {run_name!r} has attempts of tasks without a step segmentation: {', '.join(without)} "
            "(countdown, or_debug and the code tasks have one)"
        )
    problems = {pid: store.problem(pid) for pid in {a["problem_id"] for a in attempts}}
    code = [a for a in attempts if a["task"] not in EXACTLY_LABELLED]
    if code and code_labeller is None:
        raise UserError(
            "code steps are labelled by sampling continuations of each step from a policy: give --model"
        )
    code_labels = iter(
        code_labeller([problems[a["problem_id"]] for a in code], [a["completion"] for a in code])
        if code and code_labeller
        else []
    )
    out = []
    for a in attempts:
        problem, completion = problems[a["problem_id"]], a["completion"]
        steps = split_steps(problem, completion)
        labels = exact_labels(problem, completion, steps)
        if labels is None:
            labels = next(code_labels)
        ends = tuple(s.end for s in steps)
        out.append(
            Labelled(problem, completion, ends, tuple(labels), a["status"] == PASSED, int(a["sample"]))
        )
    return out


def policy_labeller(
    model: str,
    prompt_style: str,
    continuations: int,
    hard: bool,
    temperature: float,
    max_tokens: int,
    workers: int | None = None,
) -> CodeLabeller:
    """Monte-Carlo labels with `model` as the policy: from each step's prefix, `continuations`
    samples of at most `max_tokens` tokens, each verified in a sandbox."""
    import torch

    from ..models.load import load_model_and_tokenizer
    from ..rollout import get_backend
    from ..sandbox import Sandbox
    from ..tasks import get_task
    from ..tasks.prompts import format_prompt
    from ..verifier import verify_many

    net, tokenizer = load_model_and_tokenizer(model, torch.float32)
    net.eval()
    backend = get_backend("auto", net)

    def label(problems: Sequence[Problem], completions: Sequence[str]) -> list[list[float]]:
        prompts = [format_prompt(p, tokenizer, prompt_style) for p in problems]
        stops = tuple(sorted({s for p in problems for s in get_task(p.task).stop_strings}))

        def sample(texts: Sequence[str], k: int) -> list[list[str]]:
            out: list[list[str]] = []
            for start in range(0, len(texts), 32):
                chunk = texts[start : start + 32]
                with torch.no_grad():
                    rollout = backend.generate(
                        net, tokenizer, chunk, k, max_tokens, temperature, 1.0, stops, 4096
                    )
                out.extend(rollout.texts[i * k : (i + 1) * k] for i in range(len(chunk)))
            return out

        with Sandbox(workers=workers) as sandbox:

            def verify(rows: Sequence[Problem], texts: Sequence[str]) -> list[bool]:
                return [v.status == PASSED for v in verify_many(rows, texts, sandbox)]

            return monte_carlo_labels(problems, completions, prompts, sample, verify, continuations, hard)

    return label
