"""Process reward models labelled by the verifier: steps, labels, the model, the components."""

from __future__ import annotations

import json
import random

import pytest
import torch

from axiom_rl.cli import main
from axiom_rl.config import TrainConfig
from axiom_rl.errors import UserError
from axiom_rl.prm.components import OracleSteps
from axiom_rl.prm.evaluation import auc, rerank
from axiom_rl.prm.labels import Labelled, countdown_labels, monte_carlo_labels, read_labels
from axiom_rl.prm.model import ProcessRewardModel, train_prm
from axiom_rl.prm.steps import code_steps, countdown_steps, split_steps
from axiom_rl.sandbox import Sandbox
from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.tasks.countdown import worked_steps
from axiom_rl.types import PASSED, Problem
from axiom_rl.verifier import verify_many

COUNTDOWN = get_task("countdown")


def puzzle(numbers: list[int], target: int) -> Problem:
    return Problem(id=f"cd-{numbers}-{target}", task="countdown", difficulty=1, prompt="",
                   reference_solution=None, metadata={"numbers": numbers, "target": target})  # fmt: skip


def test_worked_steps_follow_the_expression_and_the_steps_style_passes():
    assert worked_steps("(5 + 2) * 3") == ["5+2=7", "7*3=21"]
    assert worked_steps("8 / (6 - 4)") == ["6-4=2", "8/2=4"]
    for p in generate_problems("countdown", 4, 30, seed=1):
        completion = COUNTDOWN.reference_completion(p, "steps")
        assert COUNTDOWN.score(p, completion).status == PASSED
        labels = countdown_labels(p, completion)
        assert labels and all(x == 1.0 for x in labels)  # a reference's every step is sound
        assert len(labels) == len(p.metadata["numbers"])  # n - 1 equations and the answer


def test_countdown_steps_are_the_equations_then_the_answer():
    text = "3 + 4 = 7, and so\n7*2=14\n</think><answer>(3+4)*2</answer>"
    steps = countdown_steps(text)
    assert [s.kind for s in steps] == ["equation", "equation", "answer"]
    assert [text[: s.end].endswith(t) for s, t in zip(steps, ["3 + 4 = 7", "7*2=14", "</answer>"])] == [
        True
    ] * 3
    assert countdown_steps("no steps at all") == []
    assert [s.kind for s in countdown_steps("<answer>1+2")] == ["answer"]  # an unclosed answer is a step
    assert len(countdown_steps("1+1=2\n" * 500)) == 31  # bounded: 31 equations, room for the answer
    assert len(countdown_steps("1+1=2\n" * 500 + "<answer>2</answer>")) <= 32
    with pytest.raises(UserError, match="no step segmentation"):
        split_steps(Problem(id="o", task="propose_countdown", difficulty=1, prompt=""), "x")


def test_countdown_labels_hand_worked():
    """3, 5, 7 -> 22: 5*3=15 is good (15 + 7 = 22 remains); 3+5=8 is a dead end (8 and 7 cannot
    make 22); 15+7=23 is wrong arithmetic; 5*5 uses a 5 twice. After a bad step, every later
    equation is bad; the answer step is the outcome."""
    p = puzzle([3, 5, 7], 22)
    good = "5*3=15\n15+7=22\n</think><answer>5*3+7</answer>"
    assert countdown_labels(p, good) == [1.0, 1.0, 1.0]
    one_of_each = "5*3=15\n15-7=8\n8+14=22\n</think><answer>5*3-7</answer>"  # good, dead end, wrong
    assert countdown_labels(p, one_of_each) == [1.0, 0.0, 0.0, 0.0]
    assert countdown_labels(p, "3+5=8\n8*7=56\n</think><answer>(3+5)*7</answer>") == [0.0, 0.0, 0.0]
    assert countdown_labels(p, "5*3=15\n15+7=23\n</think><answer>5*3+7</answer>") == [1.0, 0.0, 1.0]
    assert countdown_labels(p, "5*5=25\n") == [0.0]  # one 5 given
    assert countdown_labels(puzzle([4, 2, 3], 6), "4/2=2\n2*3=6\n") == [1.0, 1.0]
    assert countdown_labels(puzzle([4, 0, 3], 3), "4/0=0\n") == [0.0]  # division by zero


def test_code_steps_are_the_lines_of_the_function():
    text = "```python\ndef f(xs):\n    total = 0\n\n    for x in xs:\n        total += x\n    return total\n```\nok"
    steps = code_steps(text)
    assert [s.text.strip() for s in steps] == ["total = 0", "for x in xs:", "total += x", "return total"]
    assert all(text[s.end - len(s.text) : s.end] == s.text for s in steps)
    assert code_steps("no code") == []


def test_monte_carlo_labels_from_continuations_that_are_known():
    """The policy stands in as two known continuations: the rest of the reference from its first
    line, and `return None`. From the first step's prefix one in two passes. Verified in the real
    sandbox."""
    problem = generate_problems("fizzbuzz", 1, 1, seed=0)[0]
    reference = get_task(problem.task).reference_completion(problem)
    steps = split_steps(problem, reference)
    assert len(steps) >= 2
    right_tail = reference[steps[0].end :]
    wrong_tail = "\n    return None\n```"

    def sample(prompts, k):
        assert k == 2
        return [[right_tail, wrong_tail] for _ in prompts]

    with Sandbox(workers=1) as sandbox:

        def verify(rows, texts):
            return [v.status == PASSED for v in verify_many(rows, texts, sandbox)]

        soft = monte_carlo_labels([problem], [reference], ["P"], sample, verify, k=2)
        hard = monte_carlo_labels([problem], [reference], ["P"], sample, verify, k=2, hard=True)
    assert soft[0][0] == 0.5 and hard[0][0] == 1.0
    assert len(soft[0]) == len(steps) == len(hard[0])


def test_auc_and_reranking_by_hand():
    assert auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert auc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    assert auc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half
    assert auc([0.3], [True]) is None
    p, q = puzzle([3, 5, 7], 22), puzzle([1, 2, 3], 6)

    def ex(problem, answer, passed):
        return Labelled(problem, f"<answer>{answer}</answer>", (1,), (1.0,), passed)

    examples = [
        ex(p, "1", False),
        ex(p, "1", False),
        ex(p, "5*3+7", True),
        ex(q, "1+2+3", True),
        ex(q, "9", False),
    ]
    scores = [[0.2], [0.3], [0.9], [0.1], [0.8]]  # right on p, wrong on q
    r = rerank(examples, scores, "min")
    assert r.problems == 2
    assert r.single == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert r.best_of_n == 0.5 and r.oracle == 1.0
    assert r.majority == 0.5  # p: "1" twice (wrong); q: a tie, the first (right)


def test_labels_files_are_read_as_hostile_input(tmp_path):
    p = puzzle([3, 5, 7], 22)
    good = Labelled(p, "5*3=15\n", (6,), (1.0,), False).to_dict()
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert read_labels(str(path))[0].labels == (1.0,)
    for bad, message in [
        (dict(good, ends=[99]), "within the completion"),
        (dict(good, labels=[2.0]), r"in \[0, 1\]"),
        (dict(good, ends=[3, 2], labels=[1, 1]), "increasing"),
        (dict(good, problem={"task": "nope"}), "line 1|not a problem|unknown task"),
        ({"x": 1}, "not a step-labels line"),
    ]:
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(UserError, match=message):
            read_labels(str(path))


def variants(problem: Problem) -> list[str]:
    """Four completions of a Countdown problem in the steps style: the reference (every step good),
    its first equation's result off by one (a wrong step, the answer still right), the reference's
    steps with a wrong answer, and the first two numbers added (good or a dead end, as it falls)."""
    reference = COUNTDOWN.reference_completion(problem, "steps")
    first, rest = reference.split("\n", 1)
    head, value = first.rsplit("=", 1)
    a, b = problem.metadata["numbers"][:2]
    return [
        reference,
        f"{head}={int(value) + 1}\n{rest}",
        reference.split("<answer>")[0] + f"<answer>{a}</answer>",
        f"{a}+{b}={a + b}\n</think><answer>{a}+{b}</answer>",
    ]


def write_run(db, name: str, problems: list[Problem]) -> None:
    """An evaluation run in a real results database, its attempts the variants above."""
    from axiom_rl.eval.store import Attempt, ResultsDB

    with ResultsDB(db) as store:
        run = store.start_run(name, "hand-written", {"samples": 4})
        attempts = []
        for p in problems:
            for k, text in enumerate(variants(p)):
                v = COUNTDOWN.score(p, text)
                attempts.append(
                    Attempt(
                        p.id, k, text, float(v.status == PASSED), v.status, v.passed, v.total, len(text), 0.0
                    )
                )
        store.add_batch(run, problems, attempts)


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """Two runs of 24 problems x 4 completions each (train and eval split) in a results database,
    labelled by `prm label`; and the built-in nano model SFT'd a little on the steps style, the PRM's
    backbone."""
    from axiom_rl.config import SFTConfig
    from axiom_rl.train.sft import sft

    root = tmp_path_factory.mktemp("prm")
    sft(SFTConfig(model="tiny", tiny_size="nano", tasks=["countdown"], difficulty="1", steps=40, batch_size=16,
                  lr=3e-3, prompt_style="steps", output_dir=str(root / "sft"), save_every=0))  # fmt: skip
    db = root / "results.db"
    write_run(db, "train-samples", generate_problems("countdown", 1, 24, seed=0, split="train"))
    write_run(db, "held-out", generate_problems("countdown", 1, 24, seed=0, split="eval"))
    for run, name in (("train-samples", "train.jsonl"), ("held-out", "held.jsonl")):
        assert main(["prm", "label", "--db", str(db), "--run", run, "--out", str(root / name)]) == 0
    return root, root / "sft" / "final_model"


def test_prm_label_train_eval_from_the_command_line(labelled_run, capsys):
    root, model = labelled_run
    examples = read_labels(str(root / "train.jsonl"))
    assert len(examples) == 96
    for e in examples:  # the file's labels are the labeller's
        assert list(e.labels) == countdown_labels(e.problem, e.completion)
        assert e.passed == (COUNTDOWN.score(e.problem, e.completion).status == PASSED)
    assert [e.labels[0] for e in examples[:2]] == [1.0, 0.0]  # the reference, the wrong first step
    out = root / "prm-model"
    assert main(["prm", "train", "--model", str(model), "--labels", str(root / "train.jsonl"), "--out", str(out),
                 "--steps", "30", "--batch-size", "16"]) == 0  # fmt: skip
    assert main(["prm", "eval", "--prm", str(out), "--labels", str(root / "held.jsonl"),
                 "--out", str(root / "eval.json")]) == 0  # fmt: skip
    figures = json.loads((root / "eval.json").read_text())
    assert figures["problems"] == 24 and figures["samples_per_problem"] == 4
    assert figures["single"] <= figures["oracle"] and figures["best_of_n_min"] <= figures["oracle"]


def test_a_saved_prm_scores_as_it_did_before_saving(labelled_run, tmp_path):
    root, model = labelled_run
    examples = read_labels(str(root / "train.jsonl"))[:12]
    prm = ProcessRewardModel.from_backbone(str(model), "steps")
    losses = train_prm(prm, examples, steps=5, lr=1e-3, batch_size=4, seed=0)
    assert len(losses) == 5 and all(loss > 0 for loss in losses)
    before = prm.score(
        [e.problem for e in examples], [e.completion for e in examples], [e.ends for e in examples]
    )
    prm.save(str(tmp_path / "prm"))
    again = ProcessRewardModel.load(str(tmp_path / "prm"))
    after = again.score(
        [e.problem for e in examples], [e.completion for e in examples], [e.ends for e in examples]
    )
    assert [len(s) for s in after] == [len(e.ends) for e in examples]
    assert all(x == pytest.approx(y, abs=1e-6) for a, b in zip(before, after) for x, y in zip(a, b))


def test_training_on_separable_labels_learns_them(tmp_path):
    """Steps whose label is whether the equation's result is even: learnable from the text alone;
    after training, the step AUC on the same steps is far above chance."""
    rng = random.Random(0)
    examples = []
    for i in range(64):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        p = puzzle([a, b, 1], 100 + i)
        text = f"{a}+{b}={a + b}\n"
        examples.append(Labelled(p, text, (len(text) - 1,), (float((a + b) % 2 == 0),), False))
    prm = ProcessRewardModel.from_backbone("tiny", "steps", tiny_size="nano")
    train_prm(prm, examples, steps=150, lr=3e-3, batch_size=32, seed=0)
    scores = prm.score(
        [e.problem for e in examples], [e.completion for e in examples], [e.ends for e in examples]
    )
    area = auc([s[0] for s in scores], [e.labels[0] == 1.0 for e in examples])
    assert area is not None and area > 0.8


def test_oracle_steps_as_process_rewards_scale_with_their_weight(tmp_path, monkeypatch):
    """A real CPU run with oracle_steps: the loss's advantages are [n, T], each token's outcome
    advantage plus the weight times the process term (normalising in the group alone would cancel
    any weight)."""
    import axiom_rl.train.grpo as grpo_module
    from axiom_rl.algorithms import compute_advantages, step_advantages
    from axiom_rl.train.grpo import token_ends, train

    seen = []
    real = grpo_module.with_step_credit

    def watched(outcome, scored, tokenizer, g, batch, groups):
        result = real(outcome, scored, tokenizer, g, batch, groups)
        seen.append((scored, tokenizer, batch, result))
        return result

    monkeypatch.setattr(grpo_module, "with_step_credit", watched)
    train(TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=2, prompts_per_step=2,
                      num_generations=4, max_completion_length=24, prompt_style="steps", save_every=0,
                      rewards="countdown:1.0,oracle_steps:0.5", output_dir=str(tmp_path / "run")))  # fmt: skip
    assert seen
    for scored, tokenizer, _, result in seen:
        if not any(s is not None for s in scored.steps):
            continue
        assert scored.step_weight == 0.5
        ends = [
            token_ends(tokenizer, ids, st.ends) if st else []
            for ids, st in zip(scored.rollout.completion_ids, scored.steps)
        ]
        values = [list(st.values) if st else [] for st in scored.steps]
        outcome = compute_advantages(torch.tensor(scored.rewards), 4, "grpo")
        expected = outcome.unsqueeze(1) + 0.5 * step_advantages(ends, values, 4, result.shape[1])
        assert torch.allclose(result, expected.to(result.dtype), atol=1e-5)
        # the oracle's mean step label is logged, not added to the reward
        assert all(r == pytest.approx(c["countdown"]) for r, c in zip(scored.rewards, scored.components))


@pytest.mark.parametrize("groups", ["all", "mixed"])
def test_process_credit_only_in_groups_whose_outcomes_differ(groups):
    """Two groups of two one-step completions, step rewards 1 and 0 in each; group 0's outcomes
    differ (1, 0), group 1's are flat (0, 0). Worked by hand: in a group of rewards (1, 0) GRPO's
    advantages and the normalised step rewards are both ±0.5 / (std 0.7071 + 1e-4) = ±0.70701; a
    step's tokens get the outcome advantage + 0.5 × the step's term, tokens after the last step the
    outcome advantage alone. With groups="mixed" the flat group gets no process term: 0 throughout."""
    from axiom_rl.models.tiny import build_char_tokenizer
    from axiom_rl.reward_stage import StepRewards
    from axiom_rl.rollout import Rollout
    from axiom_rl.train.batch import TokenBatch
    from axiom_rl.train.grpo import Scored, with_step_credit

    tok = build_char_tokenizer()
    texts = ["1+2=3\n", "1+2=4\n", "2+2=4\n", "2+2=5\n"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert [len(i) for i in ids] == [6] * 4  # one token a character
    p = puzzle([1, 2, 3], 3)
    scored = Scored(
        problems=[p, p],
        rollout=Rollout(prompt_ids=[[0]] * 4, completion_ids=ids, texts=texts, finished=[True] * 4),
        verdicts=[], rewards=[1.0, 0.0, 0.0, 0.0], components=[{}] * 4,
        steps=[StepRewards((5,), (v,)) for v in (1.0, 0.0, 1.0, 0.0)], step_weight=0.5,
    )  # fmt: skip
    zeros = torch.zeros(4, 6, dtype=torch.long)
    batch = TokenBatch(zeros, zeros, zeros, zeros, zeros.float())
    outcome = torch.tensor([0.70701, -0.70701, 0.0, 0.0])
    result = with_step_credit(outcome, scored, tok, 2, batch, groups)
    a = 0.70701
    expected = torch.tensor([
        [a + 0.5 * a] * 5 + [a],
        [-a - 0.5 * a] * 5 + [-a],
        [0.5 * a] * 5 + [0.0] if groups == "all" else [0.0] * 6,
        [-0.5 * a] * 5 + [0.0] if groups == "all" else [0.0] * 6,
    ])  # fmt: skip
    assert torch.allclose(result, expected, atol=1e-4)


def test_oracle_steps_modes():
    p = puzzle([3, 5, 7], 22)
    texts = ["5*3=15\n15-7=8\n</think><answer>5*3-7</answer>", "no steps"]
    process = OracleSteps("process").score([p, p], texts, [None, None])
    assert process.steps[0].values == (1.0, 0.0, 0.0) and process.steps[1] is None
    assert not process.adds_to_reward and process.rows[0] == pytest.approx(1 / 3)
    assert OracleSteps("min").score([p, p], texts, [None, None]).rows == [0.0, 0.0]
    assert OracleSteps("mean").score([p], texts[:1], [None]).rows == [pytest.approx(1 / 3)]
    with pytest.raises(UserError, match="mode"):
        OracleSteps("max")


def test_bad_input_is_one_line_and_writes_nothing(labelled_run, tmp_path, capsys):
    root, model = labelled_run
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    cases = [
        ["prm", "train", "--model", str(model), "--labels", str(root / "train.jsonl"), "--out", str(keep)],
        ["prm", "eval", "--prm", str(keep), "--labels", str(root / "held.jsonl")],
        ["prm", "label", "--db", str(root / "results.db"), "--run", "nope", "--out", str(tmp_path / "x.jsonl")],
        ["train", "--model", "tiny", "--task", "countdown", "--rewards", "countdown,prm", "--output-dir", str(tmp_path / "r1")],
        ["train", "--model", "tiny", "--task", "countdown", "--rewards", "countdown,prm", "--prm", str(keep),
         "--output-dir", str(tmp_path / "r2")],
        ["train", "--model", "tiny", "--task", "countdown", "--rewards", "countdown,oracle_steps", "--prm-mode", "max",
         "--output-dir", str(tmp_path / "r3")],
    ]  # fmt: skip
    for argv in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        error = capsys.readouterr().err.strip()
        assert error.startswith("axiom-rl: error:") and "\n" not in error and "Traceback" not in error
    assert (keep / "notes.txt").read_text() == "mine" and sorted(p.name for p in keep.iterdir()) == [
        "notes.txt"
    ]
    assert not any((tmp_path / f"r{i}").exists() for i in (1, 2, 3)) and not (tmp_path / "x.jsonl").exists()


def test_the_run_report_flags_a_process_reward_rising_while_accuracy_falls(tmp_path):
    """report.md says "Reward hacking?" for a run whose PRM reward rises while its accuracy falls,
    and not for one where both rise; training.png is drawn with the process reward beside accuracy."""
    from axiom_rl.report import write_run_report

    def run(name: str, accuracy_end: float) -> str:
        run_dir = tmp_path / name
        run_dir.mkdir()
        rows = []
        for step in range(1, 41):
            t = step / 40
            accuracy = 0.5 + (accuracy_end - 0.5) * t
            rows.append({"step": step, "reward_mean": accuracy, "accuracy": accuracy, "kl": 0.01 * t,
                         "completion_len_mean": 30.0, "zero_std_frac": 0.3, "reward/prm": 0.4 + 0.4 * t})  # fmt: skip
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run_dir / "config.json").write_text(json.dumps({"rewards": "countdown:1.0,prm:0.5", "steps": 40}))
        write_run_report(run_dir)
        assert (run_dir / "training.png").stat().st_size > 10_000
        return (run_dir / "report.md").read_text()

    hacked = run("hacked", accuracy_end=0.3)
    assert "Reward hacking?" in hacked and "`reward/prm`" in hacked
    assert "process reward `reward/prm`" in hacked  # its first and last tenth in the table
    assert "Reward hacking?" not in run("honest", accuracy_end=0.7)


def test_prm_score_scores_each_step_of_each_completion(labelled_run, tmp_path, capsys):
    """`prm score` on a problems file and a completions file: one row per completion, one score per
    step in (0, 1), the same as the model's own scoring; a completion of an unknown problem is one line."""
    _, model = labelled_run
    problems = generate_problems("countdown", 1, 3, seed=5, split="eval")
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in problems))
    texts = [variants(p)[k] for k, p in enumerate(problems)]
    (tmp_path / "completions.jsonl").write_text(
        "".join(json.dumps({"problem_id": p.id, "completion": t}) + "\n" for p, t in zip(problems, texts))
    )
    prm = ProcessRewardModel.from_backbone(str(model), "steps")
    prm.save(str(tmp_path / "prm"))
    out = tmp_path / "scores.jsonl"
    argv = ["prm", "score", "--prm", str(tmp_path / "prm"), str(tmp_path / "problems.jsonl")]
    assert main([*argv, str(tmp_path / "completions.jsonl"), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    expected = prm.score(
        problems, texts, [[s.end for s in split_steps(p, t)] for p, t in zip(problems, texts)]
    )
    assert [r["problem_id"] for r in rows] == [p.id for p in problems]
    for row, scores in zip(rows, expected):
        assert [s["score"] for s in row["steps"]] == pytest.approx(scores, abs=1e-5)
        assert all(0 < s["score"] < 1 for s in row["steps"]) and row["min"] == pytest.approx(
            min(scores), abs=1e-5
        )
    (tmp_path / "bad.jsonl").write_text(json.dumps({"problem_id": "nope", "completion": "x"}) + "\n")
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "bad.jsonl")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
