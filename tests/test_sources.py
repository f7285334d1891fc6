"""Problem sources: the protocol, the built-in two, and the example of docs/training.md driving
real CPU runs of the trainer (the built-in tiny model), resumed bit for bit."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from axiom_rl.config import TrainConfig
from axiom_rl.errors import UserError
from axiom_rl.sources import SOURCES, Outcome, Source, SourceContext, make_source, outcomes
from axiom_rl.tasks import Task, register_task
from axiom_rl.tasks.registry import TASKS
from axiom_rl.train.grpo import train
from axiom_rl.types import PASSED, WRONG_ANSWER, Problem, Verdict

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"
TIMING = re.compile(r"^time_|tokens_per_s$")


class _Letters(Task):
    """Reward varies even for random text: how many of its first 8 characters are `kind`."""

    category = "test"
    description = "Write eight characters of a kind."
    kind = str.islower

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        return Problem(id=f"{self.name}-{rng.randint(0, 10**9)}", task=self.name, difficulty=difficulty,
                       prompt=f"{self.name} {rng.randint(0, 10**9)}\n")  # fmt: skip

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        n = min(8, sum(type(self).kind(c) for c in completion))
        return Verdict(PASSED if n == 8 else WRONG_ANSWER, n, 8)


class Lowercase(_Letters):
    name = "test_lowercase"


class Anything(_Letters):
    """Passes whatever is written: the task a weakest-task source leaves once it has seen it."""

    name = "test_anything"
    kind = staticmethod(lambda c: True)

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        return Verdict(PASSED, 8, 8)


@pytest.fixture(scope="module", autouse=True)
def tasks_and_the_documented_source():
    for cls in (Lowercase, Anything):
        register_task(cls)
    # The example of docs/training.md, run as it is written there.
    section = DOCS.read_text().split("### Writing a problem source", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    yield namespace["WeakestTask"]
    for name in ("test_lowercase", "test_anything"):
        TASKS.pop(name, None)
    for name in ("weakest_task", "recording"):
        SOURCES.pop(name, None)


def run_config(tmp_path: Path, **overrides) -> TrainConfig:
    values = dict(
        model="tiny", tiny_size="nano", tasks=["test_anything", "test_lowercase"], steps=3,
        prompts_per_step=2, num_generations=4, max_completion_length=12, lr=1e-3,
        output_dir=str(tmp_path / "run"), save_every=0,
    )  # fmt: skip
    values.update(overrides)
    return TrainConfig(**values)


def test_a_source_sees_every_verdict_and_serves_what_the_model_fails(
    tmp_path, tasks_and_the_documented_source
):
    """The documented source in a real 3-step run: it serves the first task (none seen yet), sees
    it pass every time, and from then on serves only the task the model fails. `observe` gets
    every completion's verdict, the same ones metrics.jsonl counts."""
    seen: list[list[Outcome]] = []

    class Recording(tasks_and_the_documented_source):
        def observe(self, results):
            seen.append(list(results))
            super().observe(results)

    SOURCES["recording"] = Recording
    result = train(run_config(tmp_path, source={"name": "recording", "smoothing": 0.5}))
    assert len(seen) == 3  # one rollout a step
    served = [[o.problem.task for o in step] for step in seen]
    assert served == [["test_anything"] * 2, ["test_lowercase"] * 2, ["test_lowercase"] * 2]
    for outcomes_of_step, row in zip(seen, result.metrics, strict=True):
        verdicts = [v for o in outcomes_of_step for v in o.verdicts]
        assert all(len(o.verdicts) == len(o.completions) == len(o.rewards) == 4 for o in outcomes_of_step)
        statuses = Counter(v.status for v in verdicts)
        assert statuses == {k.removeprefix("status/"): v for k, v in row.items() if k.startswith("status/")}
        assert sum(r for o in outcomes_of_step for r in o.rewards) == pytest.approx(row["reward_mean"] * 8)
    last = result.metrics[-1]
    # Two problems seen, every completion passed: 0 -> 0.5 -> 0.75 (smoothing 0.5 each).
    assert last["source/pass_rate/test_anything"] == 0.75
    assert last["source/pass_rate/test_lowercase"] < 0.5
    config = json.loads((tmp_path / "run/config.json").read_text())
    assert config["source"] == {"name": "recording", "smoothing": 0.5}


def test_a_stateful_source_and_the_kalman_baseline_resume_bit_for_bit(tmp_path):
    """Killed after 2 of 4 steps and resumed: the same metrics as a run that went straight through,
    the source's state (pass rates, problems drawn) restored from the checkpoint."""
    options = dict(steps=4, source={"name": "weakest_task"}, advantage="krpo", krpo_key="task")
    straight = train(run_config(tmp_path, **options, output_dir=str(tmp_path / "a")))
    train(run_config(tmp_path, **dict(options, steps=2), output_dir=str(tmp_path / "b")))
    resumed = train(run_config(tmp_path, **options, output_dir=str(tmp_path / "b"), resume=True))
    assert [r["step"] for r in resumed.metrics] == [3, 4]

    def untimed(path: Path) -> list[dict]:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [{k: v for k, v in r.items() if not TIMING.search(k)} for r in rows]

    assert untimed(tmp_path / "b/metrics.jsonl") == untimed(tmp_path / "a/metrics.jsonl")
    assert any(r["grad_norm"] > 0 for r in straight.metrics)  # real updates were compared
    state = json.loads((tmp_path / "b/checkpoints/step-4/trainer_state.json").read_text())
    (source_state,) = state["sources"]
    assert source_state["drawn"] == 8 and set(source_state["pass_rate"]) == {
        "test_anything",
        "test_lowercase",
    }


def test_the_built_in_sources_and_their_errors():
    context = SourceContext(("test_lowercase",), (1, 2), seed=3)
    uniform = make_source({}, context)
    assert uniform.name == "uniform" and len(uniform.next_batch(5)) == 5
    again = make_source({"name": "uniform"}, context)
    again.load_state_dict(json.loads(json.dumps(uniform.state_dict())))  # JSON, as checkpointed
    assert [p.id for p in again.next_batch(4)] == [p.id for p in uniform.next_batch(4)]
    problems = tuple(Problem(id=f"p{i}", task="test_lowercase", difficulty=1, prompt="x") for i in range(3))
    on_file = make_source({}, SourceContext(("test_lowercase",), (1,), problems=problems))
    assert on_file.name == "file" and sorted(p.id for p in on_file.next_batch(3)) == ["p0", "p1", "p2"]
    for spec, message in (
        (
            {"name": "nope"},
            "unknown problem source 'nope'; choose from: adaptive, failures, file, ",
        ),
        ({"name": "uniform", "rate": 1}, "problem source 'uniform' does not take rate; it takes: nothing"),
        ({"name": "file"}, "problem source 'file' needs --problems-file"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            make_source(spec, context)
    with pytest.raises(UserError, match="not with --problems-file"):
        make_source({"name": "uniform"}, SourceContext(("test_lowercase",), (1,), problems=problems))


def test_a_bad_source_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(UserError, match="unknown problem source 'nope'"):
        train(run_config(tmp_path, source={"name": "nope"}))
    assert not (tmp_path / "run").exists()


def test_outcomes_split_rows_into_groups_and_say_their_pass_rate():
    problems = [Problem(id=f"p{i}", task="t", difficulty=1, prompt="") for i in range(2)]
    verdicts = [Verdict(PASSED, 1, 1), Verdict(WRONG_ANSWER, 0, 1)] * 2
    found = outcomes(problems, ["a", "b", "c", "d"], verdicts, [1.0, 0.0, 1.0, 0.0])
    assert [o.problem.id for o in found] == ["p0", "p1"] and found[1].completions == ("c", "d")
    assert [o.pass_rate for o in found] == [0.5, 0.5]
    with pytest.raises(ValueError, match="do not split"):
        outcomes(problems, ["a", "b", "c"], verdicts[:3], [0.0] * 3)
    assert Source(SourceContext(("t",), (1,))).metrics() == {}


def test_a_source_and_its_parameters_from_the_command_line(tmp_path, capsys):
    from axiom_rl.cli import main
    from axiom_rl.config import source_from_text

    assert source_from_text("failures:file=f.jsonl,fresh=0.25") == {
        "name": "failures",
        "file": "f.jsonl",
        "fresh": 0.25,
    }
    assert source_from_text(" learnability : floor=1e-3, decay=1 ") == {
        "name": "learnability",
        "floor": 1e-3,
        "decay": 1,
    }
    code = main(["train", "--model", "tiny", "--tiny-size", "nano", "--difficulty", "1-2", "--steps", "1",
                 "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "4",
                 "--source", "schedule:every=3", "--output-dir", str(tmp_path / "run")])  # fmt: skip
    assert code == 0
    capsys.readouterr()
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["source"] == {"name": "schedule", "every": 3}
    for given, message in (
        ("schedule:every", "--source schedule: expected key=value, got 'every'"),
        (":every=3", "--source: expected NAME or NAME:key=value"),
        ("schedule:pace=3", "problem source 'schedule' does not take pace; it takes: every"),
    ):
        code = main(["train", "--model", "tiny", "--source", given, "--output-dir", str(tmp_path / "bad")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1
        assert not (tmp_path / "bad").exists()
