"""The rollout's recorded linear outputs (speed/replay.py): the C++ decode step records what each
linear layer of the training model computes for the fed-back tokens; the first training pass that
replays them gives the plain pass's log-probs and gradients to float32 rounding; a record that does
not fit a batch is not replayed; the trainer records and replays in its first update only."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_native_decode import (  # noqa: F401 (a fixture)
    needs_compiler,
    own_kernels,
    skip_without_panel_kernel,
)

from axiom_rl.config import TrainConfig
from axiom_rl.models.load import load_policy
from axiom_rl.rollout.fast import FastBackend
from axiom_rl.speed import Speed, native, replay
from axiom_rl.train import grpo
from axiom_rl.train.batch import build_batch, completion_logprobs

PROMPTS = ["def add(a, b):", "Count: 3 4 7 -> ", "x"]


def recorded_rollout(policy, new_tokens=24, stop_strings=(), own=True):
    backend = FastBackend(speed=Speed(decode_own_kernels=own))
    backend.record_linear_outputs = True
    torch.manual_seed(0)
    rollout = backend.generate(
        policy.model, policy.tokenizer, PROMPTS, 4, new_tokens, 1.0, 1.0, list(stop_strings), 64
    )
    batch = build_batch(
        rollout.prompt_ids, rollout.completion_ids, policy.tokenizer.pad_token_id, policy.device
    )
    return rollout, batch


def pass_with(policy, batch, recorded):
    """Log-probs [N, T] and parameter gradients of the training pass, replaying `recorded` or not."""
    model = policy.model
    model.train()
    model.zero_grad(set_to_none=True)
    logprobs, _ = completion_logprobs(model, batch, 0.7, share_prompts=True, recorded=recorded)
    (logprobs * batch.completion_mask).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), grads


@needs_compiler
def test_the_decode_step_records_what_each_linear_layer_of_the_training_pass_computes(own_kernels):  # noqa: F811
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=1)
    assert native.op() is not None
    rollout, batch = recorded_rollout(policy, own=own_kernels)
    record = rollout.linear_outputs
    length = batch.completion_length - 1
    assert record is not None and record.steps >= length
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        module.register_forward_hook(lambda m, args, out, name=name: seen.__setitem__(name, out.detach()))
        for name, module in policy.model.named_modules()
        if isinstance(module, torch.nn.Linear)
        or name.endswith(".mlp")  # the lean MLP multiplies by down itself
    ]
    try:
        with torch.no_grad():
            pass_with_no_grad = completion_logprobs(policy.model.eval(), batch, 1.0, share_prompts=True)
    finally:
        for hook in hooks:
            hook.remove()
    assert pass_with_no_grad[0].isfinite().all()
    real = batch.completion_mask[:, :length] > 0
    layers = policy.model.model.layers
    for i, records in enumerate(record.layers):
        for (part, name), recorded in zip(replay.PROJECTIONS, records):
            # the completion pass ran last, so the hook holds its output, [N, T - 1, width]
            computed = seen[
                f"model.layers.{i}.mlp" if name == "down_proj" else f"model.layers.{i}.{part}.{name}"
            ]
            assert computed.shape == recorded[:, :length].shape, (i, name)
            torch.testing.assert_close(recorded[:, :length][real], computed[real], rtol=1e-4, atol=1e-5)
        assert layers[i].self_attn.q_proj.bias is not None  # Qwen2: the record holds q, k, v with biases
    torch.testing.assert_close(record.logits[:, :length][real], seen["lm_head"][real], rtol=1e-4, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize(
    "finetune,targets", [("full", ""), ("lora", "q_proj,v_proj"), ("lora", "all-linear")]
)
def test_a_replayed_pass_gives_the_plain_pass_s_log_probs_and_gradients(finetune, targets):
    """LoRA layers replay as LoRA layers (the record holds the folded weight's output; A's
    product runs), the others as plain Linear layers: on q and v only, and on every layer (the
    MLP then multiplies by a LoRA down projection, not in the lean MLP's own product)."""
    policy = load_policy(
        "tiny",
        device="cpu",
        need_reference=False,
        seed=2,
        finetune=finetune,
        lora_target_modules=targets or "all-linear",
    )
    rollout, batch = recorded_rollout(policy, stop_strings=["\n"])
    record = rollout.linear_outputs
    replayed = replay.replay_map(policy.model, record, batch.completion_ids, batch.completion_mask)
    layers = len(record.layers)
    assert len(replayed) == 7 * layers + 1
    plain_logprobs, plain_grads = pass_with(policy, batch, None)
    logprobs, grads = pass_with(policy, batch, record)
    real = batch.completion_mask > 0
    torch.testing.assert_close(logprobs[real], plain_logprobs[real], rtol=0, atol=1e-5)
    assert grads.keys() == plain_grads.keys() and grads
    for name, grad in grads.items():  # each parameter's gradient, to float32 rounding of its size
        assert (grad - plain_grads[name]).norm() <= 1e-5 * plain_grads[name].norm(), name
    # and the modules' own forwards are back afterwards
    assert all("forward" not in vars(m) or m.forward.__name__ != "partial" for m in policy.model.modules())
    assert not replay._replaying


@needs_compiler
def test_a_record_that_does_not_fit_the_batch_is_not_replayed():
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=3)
    rollout, batch = recorded_rollout(policy, new_tokens=12)
    record = rollout.linear_outputs
    ids, mask = batch.completion_ids.clone(), batch.completion_mask
    assert replay.replay_map(policy.model, record, ids, mask)
    ids[0, 3] = (ids[0, 3] + 1) % 50  # a token the rollout did not feed, at a real position
    assert replay.replay_map(policy.model, record, ids, mask) == {}
    longer = torch.cat([batch.completion_ids, batch.completion_ids[:, :2]], dim=1)  # more than recorded
    assert replay.replay_map(policy.model, record, longer, torch.ones_like(longer, dtype=torch.float32)) == {}
    assert replay.replay_map(policy.model, record.rows(slice(0, 4)), batch.completion_ids, mask) == {}


def test_a_record_too_large_drops_the_logits_first_then_everything(monkeypatch):
    widths = replay.record_widths(64, 32, 64, 128)
    per_row_step = 4 * 2 * sum(widths)  # two layers
    monkeypatch.setattr(replay, "MAX_BYTES", 3 * 5 * (per_row_step + 4 * 100))
    assert replay.allocate(3, 5, 2, widths, 100, torch.device("cpu")).logits is not None
    monkeypatch.setattr(replay, "MAX_BYTES", 3 * 5 * per_row_step)
    without = replay.allocate(3, 5, 2, widths, 100, torch.device("cpu"))
    assert without.logits is None and [t.shape[-1] for t in without.layers[1]] == widths
    monkeypatch.setattr(replay, "MAX_BYTES", 3 * 5 * per_row_step - 1)
    assert replay.allocate(3, 5, 2, widths, 100, torch.device("cpu")) is None


def test_a_replayed_layer_refuses_a_record_of_another_shape():
    linear = torch.nn.Linear(4, 3)
    with (
        replay.replaying({linear: torch.zeros(2, 5, 3)}),
        pytest.raises(RuntimeError, match="recorded output"),
    ):
        linear(torch.zeros(2, 4, 4))
    assert "forward" not in vars(linear)  # restored even so
    assert linear(torch.zeros(2, 4)).shape == (2, 3)


@needs_compiler
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_the_trainer_replays_the_rollout_in_its_first_update_only(tmp_path, monkeypatch, micro_batches):
    replayed_sizes = []
    real_replaying = replay.replaying

    def counting(outputs):
        replayed_sizes.append(len(outputs))
        return real_replaying(outputs)

    monkeypatch.setattr(replay, "replaying", counting)
    cfg = TrainConfig(
        model="tiny", tiny_size="nano", device="cpu", steps=2, prompts_per_step=2, num_generations=2, max_completion_length=8,
        num_iterations=2, gradient_accumulation_steps=micro_batches, output_dir=str(tmp_path / "run"), seed=0,
    )  # fmt: skip
    result = grpo.train(cfg, say=lambda _: None)
    assert result.steps == 2
    # One rollout, then the reference's and the old policy's passes (nothing to replay) and two
    # updates, each pass a call per micro-batch: the first update replays every layer and the
    # head, each micro-batch its own rows, the second computes them.
    layers = load_policy(
        "tiny", tiny_size="nano", device="cpu", need_reference=False
    ).model.config.num_hidden_layers
    k = micro_batches
    assert replayed_sizes == [0] * 2 * k + [7 * layers + 1] * k + [0] * k


@needs_compiler
def test_a_recycled_record_is_written_again_by_the_next_rollout_of_its_shape():
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=4)

    def rollout(backend, seed):
        torch.manual_seed(seed)
        return backend.generate(policy.model, policy.tokenizer, PROMPTS, 2, 12, 1.0, 1.0, [], 64)

    backend, fresh = FastBackend(min_new_tokens=12), FastBackend(min_new_tokens=12)  # forced length
    backend.record_linear_outputs = fresh.record_linear_outputs = True
    first = rollout(backend, 0).linear_outputs
    backend.recycle(first)
    second, expected = rollout(backend, 1), rollout(fresh, 1)
    assert second.linear_outputs.layers[0][0].data_ptr() == first.layers[0][0].data_ptr()
    assert second.completion_ids == expected.completion_ids
    for got, want in zip(second.linear_outputs.flat(), expected.linear_outputs.flat()):
        assert torch.equal(got, want)
    assert torch.equal(second.linear_outputs.fed, expected.linear_outputs.fed)
    # a record of another shape is not reused
    backend.recycle(second.linear_outputs)
    torch.manual_seed(2)
    other = backend.generate(policy.model, policy.tokenizer, PROMPTS[:2], 2, 12, 1.0, 1.0, [], 64)
    assert other.linear_outputs.layers[0][0].shape[0] == 4 != first.layers[0][0].shape[0]


@needs_compiler
def test_the_kernel_s_streamed_record_holds_the_bits_of_copying_the_outputs_afterwards(monkeypatch):
    """The linear kernel writes the record as it computes each output, where the record's rows
    are 64-byte aligned; elsewhere the step copies each output into it afterwards. Buffers one
    float off that alignment take the second way: both records hold the same bits."""
    skip_without_panel_kernel()
    policy = load_policy("tiny", device="cpu", need_reference=False, seed=5)
    allocate = replay.allocate

    def misaligned(*args, **kwargs):
        record = allocate(*args, **kwargs)

        def shifted(t):
            spare = torch.empty(t.numel() + 1, dtype=t.dtype)
            return spare[1:].view(t.shape)

        return replay.LinearOutputs(
            [[shifted(t) for t in layer] for layer in record.layers],
            None if record.logits is None else shifted(record.logits),
            record.fed,
        )

    def rollout():
        backend = FastBackend(min_new_tokens=10)
        backend.record_linear_outputs = True
        torch.manual_seed(3)
        return backend.generate(policy.model, policy.tokenizer, PROMPTS, 4, 10, 1.0, 1.0, [], 64)

    streamed = rollout()
    monkeypatch.setattr(replay, "allocate", misaligned)
    copied = rollout()
    assert copied.linear_outputs.layers[0][0].data_ptr() % 64 != 0
    assert streamed.linear_outputs.layers[0][0].data_ptr() % 64 == 0
    assert streamed.completion_ids == copied.completion_ids
    for got, want in zip(streamed.linear_outputs.flat(), copied.linear_outputs.flat()):
        assert torch.equal(got[:, : streamed.linear_outputs.steps], want[:, : copied.linear_outputs.steps])


@needs_compiler
def test_a_trainer_that_runs_every_row_s_prompt_records_nothing(tmp_path, monkeypatch):
    """The replay serves the completions' pass of shared prompts only: without it, no record."""
    allocations = []
    real_allocate = replay.allocate
    monkeypatch.setattr(replay, "allocate", lambda *a, **k: allocations.append(a) or real_allocate(*a, **k))
    cfg = TrainConfig(
        model="tiny", tiny_size="nano", device="cpu", steps=1, prompts_per_step=2, num_generations=2, max_completion_length=8,
        output_dir=str(tmp_path / "unshared"), seed=0, speed={"share_prompt_passes": False},
    )  # fmt: skip
    assert grpo.train(cfg, say=lambda _: None).steps == 1
    assert allocations == []
    shared = dataclasses.replace(cfg, output_dir=str(tmp_path / "shared"), speed={})  # the CPU's default
    assert grpo.train(shared, say=lambda _: None).steps == 1
    assert len(allocations) == 1
    no_replay = dataclasses.replace(
        cfg, output_dir=str(tmp_path / "no-replay"), speed={"replay_linear_outputs": False}
    )
    assert grpo.train(no_replay, say=lambda _: None).steps == 1
    assert len(allocations) == 1  # Speed.replay_linear_outputs off: nothing recorded either
