"""Our problems, verifier and rewards from other trainers: TRL's GRPOTrainer (a real run),
verl's custom reward function, and the Hugging Face / parquet exports they read."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from axiom_rl.cli import main
from axiom_rl.integrations.hf_datasets import to_dataset
from axiom_rl.integrations.scoring import completion_text, problem_from_json
from axiom_rl.integrations.trl import VerifiedReward
from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.verify_files import verify_files

BROKEN = "```python\ndef edit_distance(a, b):\n    return abs(len(a) - len(b))\n```"


def verified_rewards(tmp_path, problems, completions) -> list[float]:
    """What `axiom-rl verify` gives these completions (its library call, files and all)."""
    (tmp_path / "p.jsonl").write_text(
        "".join(p.to_json() + "\n" for p in {p.id: p for p in problems}.values())
    )
    (tmp_path / "c.jsonl").write_text(
        "".join(
            json.dumps({"problem_id": p.id, "completion": c}) + "\n" for p, c in zip(problems, completions)
        )
    )
    report = verify_files(tmp_path / "p.jsonl", tmp_path / "c.jsonl")
    assert not report.errors
    return [row["reward"] for row in report.results]


def test_the_trl_reward_is_the_verifiers_reward_plain_and_conversational(tmp_path):
    problems = generate_problems("edit_distance", 3, 3) + generate_problems("countdown", 2, 3)
    completions = [get_task(p.task).reference_completion(p) for p in problems]
    completions += [BROKEN] * 3 + ["<answer> 1 + 2 </answer>", "no answer", "<answer>(</answer>"]
    problems = problems + problems
    expected = verified_rewards(tmp_path, problems, completions)
    assert expected[:6] == [1.0] * 6 and 0 < expected[6] < 1 and expected[9] == pytest.approx(0.1)
    column = [p.to_json() for p in problems]
    logged = {}
    with VerifiedReward() as reward:
        plain = reward(
            prompts=[""] * 12,
            completions=completions,
            completion_ids=None,
            problem=column,
            log_metric=lambda name, value: logged.__setitem__(name, value),
            task=[p.task for p in problems],
        )
        chat = reward(
            completions=[[{"role": "assistant", "content": c}] for c in completions], problem=column
        )
        as_async = reward.as_async()
        assert inspect.iscoroutinefunction(as_async) and as_async.__name__ == "axiom_rl"  # what TRL checks
        awaited = asyncio.run(as_async(prompts=[""] * 12, completions=completions, problem=column))
    assert plain == pytest.approx(expected, abs=1e-6) and chat == plain and awaited == plain
    assert logged["axiom_rl/pass_rate"] == pytest.approx(6 / 12)


def test_a_bad_problem_column_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="not JSON"):
        problem_from_json("{not json")
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        problem_from_json(json.dumps({"id": "x", "task": "nope", "difficulty": 1, "prompt": "p"}))
    with pytest.raises(ValueError, match="list of messages"):
        completion_text(3)
    with VerifiedReward() as reward, pytest.raises(ValueError, match="no 'problem' column"):
        reward(prompts=["p"], completions=["c"])


def test_the_hf_export_loads_back_and_feeds_the_reward(tmp_path, capsys):
    from datasets import load_from_disk

    out = tmp_path / "ds"
    assert (
        main(
            [
                "problems",
                "export",
                "--task",
                "countdown,edit_distance",
                "--difficulty",
                "1-2",
                "--count",
                "2",
                "--format",
                "hf",
                "--conversational",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    dataset = load_from_disk(str(out))
    assert len(dataset) == 8 and dataset[0]["prompt"][0]["role"] == "user"
    problems = [problem_from_json(text) for text in dataset["problem"]]
    assert [p.id for p in problems] == dataset["problem_id"]
    with VerifiedReward() as reward:
        assert (
            reward(
                completions=[get_task(p.task).reference_completion(p) for p in problems],
                problem=dataset["problem"],
            )
            == [1.0] * 8
        )
    capsys.readouterr()
    assert main(["problems", "export", "--task", "countdown", "--format", "hf", "--out", str(out)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert len(load_from_disk(str(out))) == 8  # the first export is intact


def test_verl_compute_score_reads_the_parquet_export(tmp_path):
    import pyarrow.parquet as pq

    from axiom_rl.integrations.verl import compute_score

    he = tmp_path / "p.jsonl"
    problems = generate_problems("coin_change", 2, 3) + generate_problems("countdown", 1, 2)
    he.write_text("".join(p.to_json() + "\n" for p in problems))
    assert (
        main(
            [
                "problems",
                "export",
                "--problems-file",
                str(he),
                "--format",
                "verl",
                "--out",
                str(tmp_path / "t.parquet"),
            ]
        )
        == 0
    )
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert [r["data_source"] for r in rows] == ["axiom_rl/coin_change"] * 3 + ["axiom_rl/countdown"] * 2
    completions = [get_task(p.task).reference_completion(p) for p in problems]
    completions[1] = "```python\ndef coin_change(coins, amount):\n    return -1\n```"
    expected = verified_rewards(tmp_path, problems, completions)
    scores = [
        compute_score(r["data_source"], c, r["reward_model"]["ground_truth"], r["extra_info"])
        for r, c in zip(rows, completions)
    ]
    assert [s["score"] for s in scores] == pytest.approx(expected, abs=1e-6)
    assert [s["acc"] for s in scores] == [1.0, 0.0, 1.0, 1.0, 1.0]


def test_trl_grpo_trains_two_steps_on_our_dataset_with_our_rewards(tmp_path):
    """A real GRPOTrainer run: 2 steps on CPU, rewards from our reward function; the completions
    it scored, verified again by `verify`, give the rewards TRL logged."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from axiom_rl import SFTConfig, train_sft

    # the built-in model, taught the answer format first, so that rewards differ
    model = train_sft(
        SFTConfig(
            model="tiny",
            tiny_size="nano",
            tasks=["countdown"],
            steps=80,
            batch_size=32,
            lr=3e-3,
            output_dir=str(tmp_path / "sft"),
        ),
        say=lambda *a, **k: None,
    )
    problems = generate_problems("countdown", 1, 8)
    seen: list[tuple[list[str], list[str], list[float]]] = []

    class Recorded(VerifiedReward):
        def __call__(self, completions=(), problem=None, **kwargs):
            rewards = super().__call__(completions=completions, problem=problem, **kwargs)
            seen.append((list(problem), list(completions), rewards))
            return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=24,
        max_steps=2,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        beta=0.0,
        seed=0,
    )
    with Recorded() as reward:
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=[reward],
            args=args,
            train_dataset=to_dataset(problems, style="compact"),
            processing_class=AutoTokenizer.from_pretrained(model),
        )
        trainer.train()
    logged = [h["rewards/axiom_rl/mean"] for h in trainer.state.log_history if "rewards/axiom_rl/mean" in h]
    assert len(seen) == 2 and len(logged) == 2
    for (column, completions, rewards), mean in zip(seen, logged):
        problems_seen = [problem_from_json(text) for text in column]
        assert rewards == pytest.approx(verified_rewards(tmp_path, problems_seen, completions), abs=1e-6)
        assert mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
    assert len({r for _, _, rewards in seen for r in rewards}) > 1  # rewards differ: a test that could fail


def test_the_verifiers_environment_loads_through_verifiers_and_scores_as_verify_does(tmp_path):
    """Loaded by its id as prime-rl and vf-eval load an environment; each task scored on a trace
    holding the agent's reply, as verifiers' own validate and debug commands build one."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage

    env = vf.load_environment(
        vf.SingleAgentEnvConfig(
            taskset={
                "id": "axiom-rl-verifiers",
                "tasks": "countdown,edit_distance",
                "difficulty": "2",
                "count": 3,
            }
        )
    )
    tasks = list(env.taskset)
    problems = [problem_from_json(t.data.problem) for t in tasks]
    assert [p.id for p in problems] == [p.id for p in generate_problems("countdown", 2, 3)] + [
        p.id for p in generate_problems("edit_distance", 2, 3)
    ]
    assert tasks[0].data.prompt[0].content == get_task("countdown").render(problems[0])
    replies = [get_task(p.task).reference_completion(p) for p in problems]
    replies[1], replies[4] = "<answer> 1 + 1 </answer>", BROKEN
    expected = verified_rewards(tmp_path, problems, replies)

    async def score(task, reply):
        trace = Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=vf.AgentConfig(), name="test", trainable=False),
            nodes=[MessageNode(message=AssistantMessage(content=reply), sampled=True)],
        )
        await task.score(trace)
        return trace.reward, trace.metrics["passed"], await task.validate(None)

    results = [asyncio.run(score(t, r)) for t, r in zip(tasks, replies)]
    assert [r for r, _, _ in results] == pytest.approx(expected, abs=1e-6)
    assert [m for _, m, _ in results] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert all(valid for _, _, valid in results)  # each reference solution passes its tests
