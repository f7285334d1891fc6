"""The built-in tiny model and its tokenizer: what a user loading them with plain transformers gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from axiom_rl.errors import UserError
from axiom_rl.models.load import PROXY_VARIABLES, load_model_and_tokenizer, read_model_card
from axiom_rl.models.tiny import TINY_SIZES, build_char_tokenizer, build_tiny_model

TEXTS = ["10 19 -> 10\n<answer>", "def f(x):\n\treturn  x  # two spaces", "héllo – ünïcode ✓", "", "   \n\n"]


def test_tokenizer_round_trips_every_text_exactly():
    tok = build_char_tokenizer()
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    assert len(tok("abc 12+3", add_special_tokens=False)["input_ids"]) == 8  # one token per ASCII character


def test_saved_model_and_tokenizer_reload_as_the_same_thing(tmp_path):
    # AutoTokenizer loads a tokenizer saved beside a qwen2 model as a Qwen2Tokenizer, which rebuilds
    # the pre-tokenizer: a plain character vocabulary lost every space there. It must not.
    model, tok = build_tiny_model("nano", seed=1)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        assert (
            again(text, add_special_tokens=False)["input_ids"]
            == tok(text, add_special_tokens=False)["input_ids"]
        ), text
        assert again.decode(again(text, add_special_tokens=False)["input_ids"]) == text
    assert (again.eos_token_id, again.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))


def _saved_without(tmp_path, *fields: str):
    """The nano model saved as a local model directory whose tokenizer config lacks `fields`."""
    model, tok = build_tiny_model("nano", seed=1)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    for name in fields:
        config.pop(name)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tok


def test_a_tokenizer_without_a_pad_token_pads_with_eos(tmp_path):
    """Without a pad token in its config, a Qwen2Tokenizer adds '<|endoftext|>' as a new token, one
    past the model's embeddings: every batch then failed with an IndexError. EOS pads instead, and
    training and evaluation run."""
    tok = _saved_without(tmp_path, "pad_token")
    assert AutoTokenizer.from_pretrained(tmp_path).pad_token_id == len(tok)  # the made-up token
    net, loaded = load_model_and_tokenizer(str(tmp_path), torch.float32)
    assert loaded.pad_token_id == loaded.eos_token_id == tok.eos_token_id
    assert max(loaded.pad_token_id, loaded.eos_token_id) < net.get_input_embeddings().num_embeddings
    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    cfg = TrainConfig(model=str(tmp_path), steps=1, prompts_per_step=2, num_generations=2,
                      max_completion_length=8, output_dir=str(tmp_path / "run"), save_every=0)  # fmt: skip
    assert train(cfg, say=lambda m: None).steps == 1


def test_a_tokenizer_whose_eos_the_model_lacks_is_a_user_error(tmp_path):
    _saved_without(tmp_path, "eos_token")
    with pytest.raises(UserError, match="no end-of-sequence token that the model knows"):
        load_model_and_tokenizer(str(tmp_path), torch.float32)


def test_a_model_directory_without_tokenizer_files_is_a_user_error(tmp_path):
    """transformers builds an empty tokenizer where a directory has none: every prompt became
    no tokens and generation failed with an IndexError deep in the decode loop."""
    net, _ = build_tiny_model("nano")
    net.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="its tokenizer encodes text to no tokens"):
        load_model_and_tokenizer(str(tmp_path), torch.float32)


def test_a_checkpoints_model_directory_loads_as_a_model(tmp_path):
    """A checkpoint's model/ holds the tokenizer and the model card too: eval and --model take
    it as they take final_model (with the same prompt format)."""
    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    cfg = TrainConfig(model="tiny", tiny_size="nano", steps=2, prompts_per_step=1, num_generations=2,
                      max_completion_length=8, output_dir=str(tmp_path / "run"), save_every=1)  # fmt: skip
    train(cfg, say=lambda m: None)
    net, tok = load_model_and_tokenizer(str(tmp_path / "run/checkpoints/step-1/model"), torch.float32)
    final, final_tok = load_model_and_tokenizer(str(tmp_path / "run/final_model"), torch.float32)
    text = "Use 3, 5 and 7 to make 22."
    assert tok(text).input_ids == final_tok(text).input_ids and tok.eos_token_id == final_tok.eos_token_id
    assert {k: v.shape for k, v in net.state_dict().items()} == {
        k: v.shape for k, v in final.state_dict().items()
    }
    card = read_model_card(str(tmp_path / "run/checkpoints/step-1/model"))
    assert card == read_model_card(str(tmp_path / "run/final_model")) and card["tasks"] == ["countdown"]


@pytest.mark.parametrize(
    "size, low, high", [("nano", 0.1e6, 0.2e6), ("micro", 0.7e6, 0.9e6), ("tiny", 2.9e6, 3.1e6)]
)
def test_sizes(size, low, high):
    assert size in TINY_SIZES
    assert low < sum(p.numel() for p in build_tiny_model(size)[0].parameters()) < high


def test_same_seed_same_weights():
    a, _ = build_tiny_model("nano", seed=4)
    b, _ = build_tiny_model("nano", seed=4)
    c, _ = build_tiny_model("nano", seed=5)
    assert all((x == y).all() for x, y in zip(a.parameters(), b.parameters()))
    assert any((x != y).any() for x, y in zip(a.parameters(), c.parameters()))


def _tiny_decoder(family: str):
    """A small random Llama, Mistral or Qwen3: the gated-MLP families beside Qwen2."""
    import transformers

    name = {"llama": "Llama", "mistral": "Mistral", "qwen3": "Qwen3"}[family]
    extra = {"mistral": {"sliding_window": None}, "qwen3": {"head_dim": 8}}.get(family, {})
    cfg = getattr(transformers, f"{name}Config")(
        vocab_size=64, hidden_size=32, intermediate_size=88, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **extra,
    )  # fmt: skip
    return getattr(transformers, f"{name}ForCausalLM")(cfg)


def _forward_backward(model, ids):
    """Logits, every parameter's gradient, and the bytes of distinct storages kept for backward."""
    import torch

    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids).logits
    logits.float().log_softmax(-1).mean().backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    return logits.detach(), grads, sum(kept.values())


def _lora_on_down_proj(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["down_proj", "q_proj"]))
    with torch.no_grad():  # a fresh adapter's B is 0: make its gradients and output matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05)
    return model


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama", "mistral", "qwen2-lora"])
def test_lean_mlp_keeps_fewer_tensors_and_changes_no_number(family, matmul_backend):
    """Two [rows, tokens, intermediate] tensors fewer per layer, silu(gate) and the product
    down_proj reads; with a LoRA layer on down_proj the product stays that layer's input, so one.
    With either matmul library: the lean MLP calls the one the linear layers call."""
    import copy

    from axiom_rl.speed.activation_memory import lean_mlp_activations
    from axiom_rl.speed.cpu_matmul import route_linear_layers

    torch.manual_seed(0)
    model = build_tiny_model("micro", seed=3)[0] if family.startswith("qwen2") else _tiny_decoder(family)
    if family == "qwen2-lora":
        model = _lora_on_down_proj(model)
    routed = route_linear_layers(model)
    assert (routed > 0) == (matmul_backend == "onednn")
    lean = copy.deepcopy(model)
    layers = model.config.num_hidden_layers
    assert lean_mlp_activations(lean) == layers
    ids = torch.randint(0, 60, (3, 17))
    logits, grads, kept = _forward_backward(model, ids)
    lean_logits, lean_grads, lean_kept = _forward_backward(lean, ids)
    assert torch.equal(logits, lean_logits)
    assert grads.keys() == lean_grads.keys()
    assert all(torch.equal(grads[n], lean_grads[n]) for n in grads if grads[n] is not None)
    fewer = 1 if family == "qwen2-lora" else 2
    assert kept - lean_kept == layers * fewer * 3 * 17 * model.config.intermediate_size * 4


def test_lean_mlp_leaves_other_architectures_and_replaced_forwards_alone():
    from transformers import GPT2Config, GPT2LMHeadModel

    from axiom_rl.speed.activation_memory import lean_mlp_activations

    assert (
        lean_mlp_activations(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))) == 0
    )
    model = build_tiny_model("nano", seed=0)[0]
    assert lean_mlp_activations(model) == model.config.num_hidden_layers
    assert lean_mlp_activations(model) == 0  # a forward already replaced is left as it is


def test_lean_mlp_under_gradient_checkpointing_gives_the_same_gradients(matmul_backend):
    import copy

    import torch

    from axiom_rl.speed.activation_memory import lean_mlp_activations
    from axiom_rl.speed.cpu_matmul import route_linear_layers

    model = build_tiny_model("micro", seed=4)[0].train()
    route_linear_layers(model)
    lean = copy.deepcopy(model)
    lean.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert lean_mlp_activations(lean) == model.config.num_hidden_layers
    ids = torch.randint(0, 60, (2, 21))
    _, grads, _ = _forward_backward(model, ids)
    _, lean_grads, _ = _forward_backward(lean, ids)
    assert all(torch.equal(grads[n], lean_grads[n]) for n in grads)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "axiom_rl", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_hub_name_loads_from_the_local_cache_when_the_hub_cannot_be_reached(tmp_path):
    """A machine without a network (a cluster node, this one) with the model in its Hugging Face
    cache: the name loads from the cache at once. Without the check, huggingface_hub retried each
    file five times first (about 30 s each, with a warning per retry); a name that is not cached
    is one line and exit code 2."""
    snapshot = tmp_path / "hf/hub/models--axiom-test--nano/snapshots" / ("0" * 40)
    model, tok = build_tiny_model("nano", seed=1)
    model.save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs/main").write_text("0" * 40)
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_ENDPOINT": "https://huggingface.invalid",  # .invalid never resolves (RFC 6761)
    }
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *PROXY_VARIABLES):
        env.pop(name, None)
    db = tmp_path / "eval.db"
    args = ("eval", "--task", "countdown", "--count", "2", "--max-completion-length", "4", "--db", str(db))
    cached = _cli(*args, "--model", "axiom-test/nano", env=env)
    assert cached.returncode == 0, cached.stderr
    assert "Retrying" not in cached.stderr and db.exists()

    missing = _cli(*args, "--model", "axiom-test/absent", env=env)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert (
        "huggingface.invalid does not resolve" in missing.stderr
        and "not in the local cache" in missing.stderr
    )


def test_a_llama_model_trains_through_the_fast_decode_loop(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    _, tok = build_tiny_model("nano")
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model_dir = tmp_path / "llama"
    LlamaForCausalLM(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    run = tmp_path / "run"
    result = train(
        TrainConfig(model=str(model_dir), finetune="lora", tasks=["countdown"], steps=2, prompts_per_step=2,
                    num_generations=2, max_completion_length=8, output_dir=str(run), save_every=0),
        say=lambda m: None,
    )  # fmt: skip
    assert result.steps == 2 and "rollout backend fast" in (run / "train.log").read_text()


def test_a_model_of_another_architecture_trains_and_evaluates(tmp_path):
    """A model the fast decode loop does not take (a Llama with biases on its attention: the loop
    adds no o_proj bias), so the rollouts go through transformers' generate, trains with full
    fine-tuning and with LoRA, and the adapter it saves evaluates, merged onto that directory."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from axiom_rl.config import EvalConfig, TrainConfig
    from axiom_rl.eval.evaluate import evaluate
    from axiom_rl.rollout import get_backend
    from axiom_rl.train.grpo import train

    _, tok = build_tiny_model("nano")
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        attention_bias=True,
    )  # fmt: skip
    model_dir = tmp_path / "llama"
    LlamaForCausalLM(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    assert get_backend("auto", LlamaForCausalLM(cfg)).name == "hf"
    for finetune in ("full", "lora"):
        run = tmp_path / finetune
        result = train(
            TrainConfig(model=str(model_dir), finetune=finetune, tasks=["countdown"], steps=2, prompts_per_step=2,
                        num_generations=2, max_completion_length=8, output_dir=str(run), save_every=0),
            say=lambda m: None,
        )  # fmt: skip
        assert result.steps == 2 and "rollout backend hf" in (run / "train.log").read_text()
    assert (tmp_path / "lora/final_model/adapter_config.json").exists()  # an adapter naming the directory
    _, summary = evaluate(
        EvalConfig(model=str(tmp_path / "lora/final_model"), tasks=["countdown"], count=3,
                   max_completion_length=8, db=str(tmp_path / "r.db")),
    )  # fmt: skip
    assert sum(row["attempts"] for row in summary) == 3


def test_a_truncated_weight_file_is_one_line(tmp_path, capsys):
    """safetensors' error for a file cut short is no OSError: it came out as a traceback."""
    from axiom_rl.cli import main
    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    run = tmp_path / "run"
    train(TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=1, prompts_per_step=1,
                      num_generations=2, max_completion_length=2, save_every=0, output_dir=str(run)),
          say=lambda _: None)  # fmt: skip
    weights = run / "final_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code = main(["eval", "--model", str(run / "final_model"), "--task", "countdown", "--count", "1",
                 "--max-completion-length", "2", "--db", str(tmp_path / "r.db")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "a weight file is damaged or truncated" in err
