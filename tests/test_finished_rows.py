"""The decode loop leaves rows that have finished out of its token step (rollout/fast.py's
_Decoding): every row's tokens, its recorded linear outputs and the training pass that replays
them are the same bits as when every row decodes to the end, with fewer rows computed."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from test_native_decode import (  # noqa: F401 (a fixture)
    needs_compiler,
    own_kernels,
    skip_without_panel_kernel,
)
from test_replay import PROMPTS, pass_with

from axiom_rl.models.load import load_policy
from axiom_rl.rollout.fast import FastBackend, _Decoding
from axiom_rl.speed import Speed, native
from axiom_rl.train.batch import build_batch

# Rows end where they sample any of these characters: a random model's completions then end at
# lengths from 1 token to the budget (the tiny model's vocabulary is characters).
STOPS = list("aeiou0123")


def rollout(
    policy, drop: bool, decode: str = "auto", g: int = 8, new_tokens: int = 40, spare=None, speed=None
):
    backend = FastBackend(speed=dataclasses.replace(speed or Speed(), drop_finished_rows=drop))
    backend.decode = decode
    backend.record_linear_outputs = True
    backend.recycle(spare)
    torch.manual_seed(7)
    out = backend.generate(policy.model, policy.tokenizer, PROMPTS, g, new_tokens, 1.0, 1.0, STOPS, 64)
    return out, backend.last_row_steps


@needs_compiler
def test_rows_that_finished_leave_the_step_and_every_token_stays_the_same(own_kernels):  # noqa: F811
    skip_without_panel_kernel()  # the kernel whose sums do not depend on the rows beside them
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=4)
    speed = Speed(decode_own_kernels=own_kernels)
    every, every_rows = rollout(policy, drop=False, speed=speed)
    dropping, dropping_rows = rollout(policy, drop=True, speed=speed)
    lengths = sorted(len(c) for c in every.completion_ids)
    assert lengths[0] < lengths[-1] // 4 and any(every.finished)  # lengths that vary: rows to drop
    assert dropping.completion_ids == every.completion_ids
    assert (dropping.texts, dropping.finished) == (every.texts, every.finished)
    steps = max(lengths) - 1  # token steps after the prefill
    assert every_rows == len(every.completion_ids) * steps
    assert dropping_rows < 0.75 * every_rows
    # Never fewer than the rows that had not ended when each step ran, and in whole shares of the
    # threads (at most a share's worth of finished rows more).
    going = [sum(1 for n in lengths if n > t) for t in range(steps)]
    unit = native.split_unit(SimpleNamespace(linear=native.linear_panels), own_kernels=own_kernels)
    assert sum(going) <= dropping_rows <= sum(min(len(lengths), -(-n // unit) * unit) for n in going)


def test_the_python_step_computes_every_row_to_the_end():
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=4)
    every, every_rows = rollout(policy, drop=False, decode="python", new_tokens=16)
    dropping, dropping_rows = rollout(policy, drop=True, decode="python", new_tokens=16)
    assert dropping.completion_ids == every.completion_ids and dropping_rows == every_rows


@needs_compiler
def test_a_finished_row_s_record_holds_its_completion_and_the_training_pass_is_the_same(own_kernels):  # noqa: F811
    skip_without_panel_kernel()
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=5)
    speed = Speed(decode_own_kernels=own_kernels)
    every, _ = rollout(policy, drop=False, speed=speed)
    buffers = every.linear_outputs
    full = dataclasses.replace(
        buffers,
        layers=[[t.clone() for t in layer] for layer in buffers.layers],
        logits=buffers.logits.clone(),
        fed=buffers.fed.clone(),
    )
    for t in buffers.flat():
        t.fill_(3.0)  # an earlier rollout's values, where the dropping one does not write
    dropping, _ = rollout(policy, drop=True, spare=buffers, speed=speed)
    record = dropping.linear_outputs
    assert record.flat()[0] is buffers.flat()[0]  # the buffers were reused
    assert record.steps == full.steps and torch.equal(record.fed, full.fed)
    left = 0
    for whole, dropped in zip(full.flat(), record.flat()):
        for row, completion in enumerate(every.completion_ids):
            real = min(len(completion), record.steps)  # every token the row fed
            assert torch.equal(dropped[row, :real], whole[row, :real])
            # Past its end, the steps a row still ran in (to fill a thread's share), then what the
            # buffers held.
            tail = dropped[row, real : record.steps]
            ran = int((tail != 3.0).any(-1).sum())
            assert torch.equal(tail[:ran], whole[row, real : real + ran]) and (tail[ran:] == 3.0).all()
            left += ran < len(tail)
    assert left  # some rows left the step

    # The training pass that replays each record: the same log-probs and gradients, bit for bit.
    batch = build_batch(every.prompt_ids, every.completion_ids, policy.tokenizer.pad_token_id, policy.device)
    logprobs, grads = pass_with(policy, batch, full)
    replayed_logprobs, replayed_grads = pass_with(policy, batch, record)
    real = batch.completion_mask > 0
    assert torch.equal(replayed_logprobs[real], logprobs[real])
    assert replayed_grads.keys() == grads.keys() and grads
    assert all(torch.equal(replayed_grads[name], grad) for name, grad in grads.items())


def test_the_rows_kept_are_those_going_on_and_enough_finished_ones_for_whole_shares():
    rows = _Decoding(16, unit=8)
    done = torch.zeros(16, dtype=torch.bool)
    done[[1, 5]] = True  # 14 going on: 16 rows, rounded up to shares of 8
    assert rows.to_keep(done, 2) is None
    done[[2, 3, 4, 9, 11, 12]] = True  # 8 going on: a share of 8 for each of the two threads
    kept = rows.to_keep(done, 8)
    assert kept is not None and kept.tolist() == [0, 6, 7, 8, 10, 13, 14, 15]
    rows.keep(kept)
    assert rows.count == 8 and torch.equal(rows.computed, kept)

    done[[0, 6, 7]] = True  # 5 going on: rounded up to 8 again, so nothing to leave out
    assert rows.to_keep(done, 11) is None

    rows = _Decoding(16, unit=4)
    done = torch.zeros(16, dtype=torch.bool)
    done[[1, 2, 3, 4, 5]] = True  # 11 going on, and a finished row to make 12
    kept = rows.to_keep(done, 5)
    assert kept is not None and kept.tolist() == [0, 1, *range(6, 16)]
    rows.keep(kept)
    done[[0, 6, 7, 8]] = True  # 7 going on, and one of the finished rows the step still computes
    assert rows.to_keep(done, 9).tolist() == [0, *range(9, 16)]  # not 2-5, already left out

    one = _Decoding(16, unit=1)  # a step that does not split its rows: just the rows going on
    assert one.to_keep(done, 9).tolist() == list(range(9, 16))


@needs_compiler
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_sampling_some_rows_gives_them_the_tokens_and_draws_of_sampling_every_row(temperature, top_p):
    logits = torch.randn(12, 40, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([1, 4, 5, 11])
    others = torch.tensor([r for r in range(12) if r not in rows.tolist()])
    every_out, some_out = torch.full((12, 3), -7), torch.full((12, 3), -7)
    torch.manual_seed(3)
    every = native.sample_next(logits.clone(), 0, None, temperature, top_p, every_out, 1)
    next_every = torch.rand(1)
    torch.manual_seed(3)
    some = native.sample_next(logits[rows].clone(), 0, None, temperature, top_p, some_out, 1, rows)
    next_some = torch.rand(1)
    assert torch.equal(some[rows], every[rows]) and torch.equal(some_out[rows, 1], every_out[rows, 1])
    assert (some[others] == -7).all() and (some_out[others] == -7).all()  # untouched: the loop's padding
    assert torch.equal(next_some, next_every)  # the generator moved alike
    with pytest.raises(RuntimeError, match="increasing order"):
        native.sample_next(logits[rows].clone(), 0, None, 1.0, 1.0, some_out, 1, rows.flip(0))
