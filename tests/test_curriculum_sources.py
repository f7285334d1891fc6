"""The sources that follow the model's success (sources/curriculum.py): their arithmetic by hand,
determinism under a seed, exact resume, no starvation, and a real CPU run resumed bit for bit."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from test_sources import TIMING, Anything, Lowercase, run_config

from axiom_rl.errors import UserError
from axiom_rl.sources import Outcome, SourceContext, make_source
from axiom_rl.sources.curriculum import InformativeReplay
from axiom_rl.tasks import register_task
from axiom_rl.tasks.registry import TASKS as TASK_REGISTRY
from axiom_rl.train.grpo import train
from axiom_rl.types import PASSED, WRONG_ANSWER, Problem, Verdict

TASKS = ("test_anything", "test_lowercase")


@pytest.fixture(scope="module", autouse=True)
def tasks():
    for cls in (Lowercase, Anything):
        register_task(cls)
    yield
    for name in TASKS:
        TASK_REGISTRY.pop(name, None)


def outcome(task: str, difficulty: int, passed: int, of: int = 4) -> Outcome:
    """A problem of `task` at `difficulty` whose `passed` of `of` completions passed."""
    verdicts = tuple(Verdict(PASSED if i < passed else WRONG_ANSWER, 0, 1) for i in range(of))
    problem = Problem(id=f"{task}-{difficulty}", task=task, difficulty=difficulty, prompt="")
    return Outcome(problem, ("",) * of, verdicts, tuple(float(v.ok) for v in verdicts))


def scored(problem: Problem, *rewards: float) -> Outcome:
    """`problem`'s group, with these rewards (a reward of 1 passed)."""
    verdicts = tuple(Verdict(PASSED if r == 1.0 else WRONG_ANSWER, 0, 1) for r in rewards)
    return Outcome(problem, ("",) * len(rewards), verdicts, rewards)


def test_learnability_weighs_pairs_by_p_times_one_minus_p_with_a_floor():
    source = make_source(
        {"name": "learnability", "decay": 0.5, "floor": 0.01}, SourceContext(TASKS, (1, 2), seed=1)
    )
    assert source.weights() == [0.25] * 4  # the prior 0.5 everywhere: all alike
    # test_anything/1: passes 4 of 4 twice: 0.5 -> 0.75 -> 0.875; test_lowercase/2 fails 0 of 4
    # once: 0.5 -> 0.25; test_anything/2 passes 2 of 4: stays 0.5
    source.observe(
        [outcome("test_anything", 1, 4), outcome("test_lowercase", 2, 0), outcome("test_anything", 2, 2)]
    )
    source.observe([outcome("test_anything", 1, 4)])
    assert source.estimates == {
        "test_anything/1": 0.875, "test_anything/2": 0.5, "test_lowercase/1": 0.5, "test_lowercase/2": 0.25,
    }  # fmt: skip
    # p(1 - p): 0.875 * 0.125 = 0.109375, 0.25, 0.25, 0.25 * 0.75 = 0.1875
    assert source.weights() == pytest.approx([0.109375, 0.25, 0.25, 0.1875])
    for _ in range(20):  # always solved: its weight falls to the floor, never below
        source.observe([outcome("test_anything", 1, 4)])
    assert source.weights()[0] == 0.01
    shares = source.metrics()
    assert sum(v for k, v in shares.items() if k.startswith("share/")) == pytest.approx(1.0)
    assert shares["pass_rate/test_lowercase/2"] == 0.25


def test_learnability_draws_in_proportion_and_starves_nothing():
    source = make_source({"name": "learnability", "floor": 0.02}, SourceContext(TASKS, (1, 2), seed=2))
    for _ in range(40):  # test_anything/1 always solved, test_lowercase/1 never: both at the floor
        source.observe([outcome("test_anything", 1, 4), outcome("test_lowercase", 1, 0)])
    drawn = Counter(f"{p.task}/{p.difficulty}" for p in source.next_batch(4000))
    weights = dict(
        zip(("test_anything/1", "test_anything/2", "test_lowercase/1", "test_lowercase/2"), source.weights())
    )
    total = sum(weights.values())
    for key, weight in weights.items():
        assert drawn[key] > 0, key  # the floor: nothing starves
        assert drawn[key] / 4000 == pytest.approx(weight / total, abs=0.02), key


def test_informative_replay_keeps_what_split_its_group_and_draws_it_by_variance():
    replay = InformativeReplay(size=2, uses=2)
    a, b, c, d = (Problem(id=name, task="test_anything", difficulty=1, prompt="") for name in "abcd")
    replay.observe(scored(a, 1.0, 0.0, 0.0, 0.0))  # variance 3/16
    replay.observe(scored(b, 1.0, 1.0, 0.0, 0.0))  # 1/4
    replay.observe(scored(c, 0.0, 0.0, 0.0, 0.0))  # all alike: nothing to learn, not kept
    assert [(e["problem"].id, e["variance"]) for e in replay.entries] == [("a", 0.1875), ("b", 0.25)]
    replay.observe(scored(d, 0.0, 0.0, 0.0, 1.0))  # 3/16 too: over size, the oldest weakest (a) goes
    assert [e["problem"].id for e in replay.entries] == ["b", "d"]
    rng = random.Random(0)
    assert sorted(p.id for p in replay.draw(rng, 5)) == ["b", "d"]  # distinct, at most what it holds
    replay.observe(scored(b, 0.0, 0.0, 0.0, 0.0))  # came back all alike: leaves
    replay.observe(scored(d, 1.0, 0.0, 1.0, 0.0))  # still splits: stays, its variance now 1/4
    assert [(e["problem"].id, e["variance"], e["drawn"]) for e in replay.entries] == [("d", 0.25, 1)]
    assert [p.id for p in replay.draw(rng, 1)] == ["d"]
    replay.observe(scored(d, 1.0, 0.0, 1.0, 0.0))  # drawn `uses` times: leaves, however it did
    assert replay.entries == []
    # drawn in proportion to variance: 1/4 against 1/16
    counts: Counter = Counter()
    for _ in range(4000):
        replay.entries = [
            {"problem": a, "variance": 0.25, "drawn": 0},
            {"problem": b, "variance": 0.0625, "drawn": 0},
        ]
        counts.update(p.id for p in replay.draw(rng, 1))
    assert counts["a"] / 4000 == pytest.approx(0.8, abs=0.02)


def test_learnability_with_replay_mixes_the_buffer_in_and_keeps_its_estimates_on_fresh_problems():
    source = make_source({"name": "learnability", "replay": 0.5, "buffer": 64, "uses": 100},
                         SourceContext(TASKS, (1, 2), seed=3))  # fmt: skip
    first = source.next_batch(8)
    assert source.metrics()["replay/drawn"] == 0.0  # nothing seen yet: all fresh
    source.observe([scored(p, 1.0, 0.0) for p in first])  # every group split: all kept
    assert source.metrics()["replay/buffer"] == 8.0
    estimates = dict(source.estimates)
    again, drawn = 0, 0
    for _ in range(50):
        batch = source.next_batch(8)
        replayed = [p for p in batch if p.id in {q.id for q in first}]
        again, drawn = again + len(replayed), drawn + len(batch)
        source.observe([scored(p, 0.0, 1.0) for p in replayed])  # still split: they stay
    assert again / drawn == pytest.approx(0.5, abs=0.06)
    assert source.estimates == estimates  # replayed problems' outcomes leave the pairs' estimates alone
    fresh = [p for p in source.next_batch(8) if p.id not in {q.id for q in first}]
    source.observe([scored(fresh[0], 0.0, 0.0)])
    assert source.estimates != estimates  # a fresh problem's do move them


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "learnability"},
        {"name": "learnability", "replay": 0.5, "buffer": 4, "uses": 2},
        {"name": "adaptive", "window": 2},
        {"name": "schedule", "every": 4},
    ],
)
def test_a_curriculum_source_is_deterministic_and_resumes_exactly(spec):
    context = SourceContext(TASKS, (1, 2, 3), seed=5)
    first, second = make_source(spec, context), make_source(spec, context)

    def feed(source, batch):  # results that depend on the problems, as a model's would
        source.observe([outcome(p.task, p.difficulty, int(p.id[-1]) % 5) for p in batch])

    for _ in range(3):
        a, b = first.next_batch(6), second.next_batch(6)
        assert [p.id for p in a] == [p.id for p in b]
        feed(first, a)
        feed(second, b)
    restored = make_source(spec, context)
    restored.load_state_dict(json.loads(json.dumps(first.state_dict())))  # JSON, as checkpointed
    for _ in range(3):
        a, b = first.next_batch(6), restored.next_batch(6)
        assert [p.id for p in a] == [p.id for p in b]
        feed(first, a)
        feed(restored, b)
    assert restored.state_dict() == first.state_dict() and restored.metrics() == first.metrics()
    ranks = [make_source(spec, SourceContext(TASKS, (1, 2, 3), seed=5, rank=r, world=2)) for r in (0, 1)]
    drawn = [{p.id for p in rank.next_batch(30)} for rank in ranks]
    assert not drawn[0] & drawn[1]  # data-parallel ranks draw disjoint problems


def test_adaptive_moves_a_task_through_the_band_on_a_synthetic_sequence():
    source = make_source(
        {"name": "adaptive", "low": 0.3, "high": 0.7, "window": 2}, SourceContext(TASKS, (1, 2, 3), seed=0)
    )
    level = lambda: source.metrics()["difficulty/test_lowercase"]  # noqa: E731
    assert level() == 1.0 and {p.difficulty for p in source.next_batch(10)} == {1}
    source.observe([outcome("test_lowercase", 1, 4)])  # one of a window of two: no decision yet
    assert level() == 1.0 and source.metrics()["window_pass_rate/test_lowercase"] == 1.0
    source.observe([outcome("test_lowercase", 1, 3)])  # mean (1 + 0.75) / 2 = 0.875 > 0.7: up
    assert level() == 2.0 and "window_pass_rate/test_lowercase" not in source.metrics()
    source.observe([outcome("test_lowercase", 1, 0), outcome("test_lowercase", 1, 0)])  # stale level: ignored
    assert level() == 2.0
    source.observe([outcome("test_lowercase", 2, 2), outcome("test_lowercase", 2, 2)])  # 0.5: in the band
    assert level() == 2.0
    source.observe([outcome("test_lowercase", 2, 1), outcome("test_lowercase", 2, 1)])  # 0.25 < 0.3: down
    assert level() == 1.0
    source.observe([outcome("test_lowercase", 1, 0)] * 2)  # below the band at the easiest: stays
    assert level() == 1.0
    for difficulty in (1, 2, 3):  # solved at every level: climbs to the hardest and stays
        source.observe([outcome("test_lowercase", difficulty, 4)] * 2)
    assert level() == 3.0 and source.metrics()["difficulty/test_anything"] == 1.0  # tasks apart
    drawn = source.next_batch(40)
    assert {p.difficulty for p in drawn if p.task == "test_lowercase"} == {3}
    assert {p.difficulty for p in drawn if p.task == "test_anything"} == {1}


def test_schedule_ramps_the_difficulties_easiest_first():
    source = make_source({"name": "schedule", "every": 3}, SourceContext(TASKS, (3, 1, 2), seed=0))
    assert [p.difficulty for p in source.next_batch(11)] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3]
    assert source.metrics() == {"difficulty": 3.0}


def test_curriculum_sources_refuse_bad_parameters_in_one_line():
    context = SourceContext(TASKS, (1, 2), seed=0)
    problems = (Problem(id="p", task="test_lowercase", difficulty=1, prompt="x"),)
    for spec, message in (
        ({"name": "learnability", "decay": 1.0}, "decay must be in [0, 1)"),
        ({"name": "learnability", "floor": 0}, "floor must be in (0, 0.25]"),
        ({"name": "adaptive", "low": 0.8, "high": 0.5}, "band must satisfy 0 <= low < high <= 1"),
        ({"name": "adaptive", "window": 0}, "window must be >= 1"),
        ({"name": "adaptive", "start": 7}, "start 7 is not one of the run's difficulties [1, 2]"),
        ({"name": "adaptive", "rate": 1}, "problem source 'adaptive' does not take rate"),
        ({"name": "schedule", "every": 0}, "schedule's every must be >= 1"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            make_source(spec, context)
    with pytest.raises(UserError, match="not with --problems-file"):
        make_source({"name": "learnability"}, SourceContext(TASKS, (1,), problems=problems))


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "learnability", "decay": 0.5},
        {"name": "learnability", "replay": 0.5},
        {"name": "adaptive", "window": 2},
    ],
)
def test_a_curriculum_source_drives_a_real_run_resumed_bit_for_bit(tmp_path: Path, spec):
    """Killed after 2 of 4 steps and resumed: the same metrics, the source's figures among them, as
    a run that went straight through."""
    options = dict(steps=4, source=spec, difficulty="1-2")
    train(run_config(tmp_path, **options, output_dir=str(tmp_path / "a")))
    train(run_config(tmp_path, **dict(options, steps=2), output_dir=str(tmp_path / "b")))
    train(run_config(tmp_path, **options, output_dir=str(tmp_path / "b"), resume=True))

    def untimed(path: Path) -> list[dict]:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [{k: v for k, v in r.items() if not TIMING.search(k)} for r in rows]

    straight = untimed(tmp_path / "a/metrics.jsonl")
    assert untimed(tmp_path / "b/metrics.jsonl") == straight
    figures = {k for row in straight for k in row if k.startswith("source/")}
    wanted = (
        "source/share/test_lowercase/2"
        if spec["name"] == "learnability"
        else "source/difficulty/test_lowercase"
    )
    assert wanted in figures
