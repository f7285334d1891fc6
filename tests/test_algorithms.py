"""The GRPO family, tested three ways: hand-derived values (derivations in comments), slow loop
references against the vectorised functions, and invariants. TRL agreement: test_trl_agreement.py."""

from __future__ import annotations

import math

import pytest
import torch

from axiom_rl.algorithms import (
    ADVANTAGES,
    LOSSES,
    KalmanBaseline,
    compute_advantages,
    policy_loss,
    regroupable,
)
from axiom_rl.algorithms.aggregate import AGGREGATIONS
from axiom_rl.algorithms.kl import KL_ESTIMATORS
from axiom_rl.errors import UserError


@pytest.fixture(autouse=True)
def float64():
    """Exact comparisons need double precision; restore the default for other test modules."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_registries_list_every_variant():
    assert sorted(ADVANTAGES) == ["batch_norm", "dgro", "dr_grpo", "grpo", "krpo", "rloo"]
    assert sorted(LOSSES) == ["bnpo", "dapo", "dgro", "dr_grpo", "grpo", "gspo", "hybrid"]
    assert sorted(AGGREGATIONS) == ["bnpo", "dapo", "dr_grpo", "grpo", "hybrid"]
    assert sorted(KL_ESTIMATORS) == ["k1", "k2", "k3"]


# ---------------------------------------------------------------- advantages: hand-derived values


def test_grpo_hand_derived():
    # groups [1, 0] and [0, 1]: mean 0.5; unbiased std = sqrt((0.25 + 0.25) / 1) = 0.70711
    # advantages = +-0.5 / (0.70711 + 1e-4)
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2, "grpo")
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert torch.allclose(adv, torch.tensor([a, -a, -a, a]))
    # population std = 0.5: +-0.5 / 0.5001
    adv = compute_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2, "grpo", std="population")
    assert torch.allclose(adv, torch.tensor([1, -1, -1, 1]) * 0.5 / 0.5001)


def test_dr_grpo_and_rloo_hand_derived():
    r = torch.tensor([1.0, 0.0, 0.5])
    # dr_grpo: mean 0.5 -> [0.5, -0.5, 0]
    assert torch.allclose(compute_advantages(r, 3, "dr_grpo"), torch.tensor([0.5, -0.5, 0.0]))
    # rloo: 1 - (0 + 0.5)/2 = 0.75;  0 - (1 + 0.5)/2 = -0.75;  0.5 - (1 + 0)/2 = 0
    assert torch.allclose(compute_advantages(r, 3, "rloo"), torch.tensor([0.75, -0.75, 0.0]))


def test_batch_norm_hand_derived():
    # groups [1, 0], [1, 1]: centred [0.5, -0.5, 0, 0]; batch [1, 0, 1, 1]: mean 0.75,
    # unbiased var = (0.0625 + 0.5625 + 0.0625 + 0.0625) / 3 = 0.25 -> std 0.5
    adv = compute_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, "batch_norm")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]) / 0.5001)


def test_dgro_scales_by_beta_reward_and_explores_flat_groups():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    base = compute_advantages(r, 2, "grpo")
    assert torch.allclose(compute_advantages(r, 2, "dgro", beta_reward=2.0), 2 * base)
    g = torch.Generator().manual_seed(0)
    adv = compute_advantages(r, 2, "dgro", explore_std=0.1, generator=g)
    assert torch.allclose(adv[:2], base[:2])  # the informative group is untouched
    assert adv[2:].abs().sum() > 0  # the flat group gets exploration noise...
    g = torch.Generator().manual_seed(0)
    assert torch.equal(
        adv, compute_advantages(r, 2, "dgro", explore_std=0.1, generator=g)
    )  # ...deterministically
    # the paper's form, r - V without the std, and beta_1 cosine-annealed from YAML numbers:
    # 2.0 at step 0, 1.25 half way (2.0 -> 0.5 over 10 steps: 0.5 + 1.5 * (1 + cos(pi / 2)) / 2),
    # 0.5 from step 10 on
    centred = torch.tensor([0.5, -0.5, 0.0, 0.0])
    assert torch.allclose(compute_advantages(r, 2, "dgro", beta_reward=2.0, scale="none"), 2 * centred)
    for step, beta_1 in [(0, 2.0), (5, 1.25), (10, 0.5), (40, 0.5)]:
        adv = compute_advantages(
            r, 2, "dgro", beta_reward=2.0, beta_reward_end=0.5, anneal_steps=10, step=step, scale="none"
        )
        assert torch.allclose(adv, beta_1 * centred), step
    with pytest.raises(UserError, match="scale"):
        compute_advantages(r, 2, "dgro", scale="batch")


def test_krpo_kalman_baseline_hand_derived():
    state = KalmanBaseline(process_noise=1e-3, measurement_noise=1e-2)
    # first visit of "p": x = group mean 0.5, P = 0.01 -> the baseline is the group mean
    adv = compute_advantages(torch.tensor([1.0, 0.0]), 2, "krpo", state=state, keys=["p"])
    assert torch.allclose(adv, torch.tensor([0.5, -0.5]))
    # second visit, group mean z = 1: P- = 0.011, K = 0.011 / 0.021, x = 0.5 + K * 0.5 = 0.76190
    adv = compute_advantages(torch.tensor([1.0, 1.0]), 2, "krpo", state=state, keys=["p"])
    x = 0.5 + (0.011 / 0.021) * 0.5
    assert torch.allclose(adv, torch.tensor([1 - x, 1 - x]))  # all-correct now beats history: positive
    assert state.states["p"][1] == pytest.approx((1 - 0.011 / 0.021) * 0.011)
    restored = KalmanBaseline()
    restored.load_state_dict(state.state_dict())
    assert restored == state


# ---------------------------------------------------------------- advantages: invariants and loops


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "batch_norm", "dgro"])
def test_group_centred_estimators_sum_to_zero_per_group(name):
    g = torch.Generator().manual_seed(1)
    r = torch.rand(6 * 4, generator=g)
    adv = compute_advantages(r, 4, name).view(6, 4)
    assert torch.allclose(adv.sum(1), torch.zeros(6), atol=1e-9)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "batch_norm", "dgro"])
def test_constant_group_gets_zero_advantage_and_is_masked(name):
    r = torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0, 0.5])
    info = compute_advantages(r, 3, name, return_info=True)
    assert torch.equal(info.advantages[:3], torch.zeros(3))
    assert info.zero_variance.tolist() == [True, False]
    assert info.zero_variance_frac == 0.5


def _loop_advantages(name, rewards, g):
    out = []
    groups = [rewards[i : i + g] for i in range(0, len(rewards), g)]
    flat = list(rewards)
    mean_all = sum(flat) / len(flat)
    batch_std = math.sqrt(sum((x - mean_all) ** 2 for x in flat) / (len(flat) - 1))
    for grp in groups:
        m = sum(grp) / g
        sd = math.sqrt(sum((x - m) ** 2 for x in grp) / (g - 1))
        for x in grp:
            if name == "grpo":
                out.append((x - m) / (sd + 1e-4))
            elif name == "dr_grpo":
                out.append(x - m)
            elif name == "rloo":
                out.append(x - (sum(grp) - x) / (g - 1))
            elif name == "batch_norm":
                out.append((x - m) / (batch_std + 1e-4))
            elif name == "dgro":
                out.append(1.5 * (x - m) / (sd + 1e-4))
    return out


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "batch_norm", "dgro"])
def test_advantages_match_a_loop_reference(name):
    g = torch.Generator().manual_seed(2)
    for groups, size in [(1, 2), (5, 4), (8, 8)]:
        r = (torch.rand(groups * size, generator=g) * 3).round() / 3  # ties, like real rewards
        params = {"beta_reward": 1.5} if name == "dgro" else {}
        got = compute_advantages(r, size, name, **params)
        assert torch.allclose(got, torch.tensor(_loop_advantages(name, r.tolist(), size)), atol=1e-9)


def test_krpo_matches_a_loop_reference():
    q, rr = 1e-3, 1e-2
    g = torch.Generator().manual_seed(3)
    keys = ["a", "b", "a", "c", "b", "a"]
    state, loop_state = KalmanBaseline(q, rr), {}
    for step in range(4):
        r = torch.rand(6 * 3, generator=g).round()
        got = compute_advantages(r, 3, "krpo", state=state, keys=keys)
        expected = []
        for gi, key in enumerate(keys):
            grp = r[gi * 3 : gi * 3 + 3].tolist()
            z = sum(grp) / 3
            if key not in loop_state:
                loop_state[key] = (z, rr)
            else:
                x, p = loop_state[key]
                p_pred = p + q
                k = p_pred / (p_pred + rr)
                loop_state[key] = (x + k * (z - x), (1 - k) * p_pred)
            expected += [v - loop_state[key][0] for v in grp]
        assert torch.allclose(got, torch.tensor(expected)), step


def test_advantage_errors_are_clear():
    with pytest.raises(UserError, match="choose from"):
        compute_advantages(torch.zeros(4), 2, "nope")
    with pytest.raises(UserError, match="does not take"):
        compute_advantages(torch.zeros(4), 2, "grpo", beta_reward=2.0)
    with pytest.raises(ValueError, match="groups of 3"):
        compute_advantages(torch.zeros(4), 3, "grpo")


# ---------------------------------------------------------------- losses: hand-derived values


def _one(logp, old, adv, **kw):
    """One sequence: logp [[...]] (one row), old [...] for its tokens, adv [a]."""
    lp = torch.tensor(logp, requires_grad=True)
    loss, metrics = policy_loss(
        lp, torch.tensor([old]), None, torch.tensor(adv), torch.ones_like(lp), beta=0.0, **kw
    )
    return loss, metrics


def test_surrogate_at_ratio_one():
    # two tokens, ratio 1, A = 1: per-token loss -1; grpo: mean over tokens then sequences = -1
    loss, m = _one([[0.0, 0.0]], [0.0, 0.0], [1.0])
    assert loss.item() == pytest.approx(-1.0) and m["clip_frac"] == 0 and m["ratio_mean"] == 1
    # dr_grpo with a budget of 4 tokens: sum -2 / (1 sequence x 4) = -0.5
    loss, _ = _one([[0.0, 0.0]], [0.0, 0.0], [1.0], loss_type="dr_grpo", max_completion_length=4)
    assert loss.item() == pytest.approx(-0.5)


def test_clipping_hand_derived():
    lr = math.log(1.5)  # ratio 1.5 on one token
    # A = +1: min(1.5, clip(1.5, 0.8, 1.2) = 1.2) = 1.2 -> loss -1.2, clipped high
    loss, m = _one([[lr]], [0.0], [1.0])
    assert loss.item() == pytest.approx(-1.2) and m["clip_frac_high"] == 1 and m["clip_frac_low"] == 0
    # A = -1: min(-1.5, -1.2) = -1.5 -> loss 1.5 (pessimistic side: not clipped)
    loss, m = _one([[lr]], [0.0], [-1.0])
    assert loss.item() == pytest.approx(1.5) and m["clip_frac"] == 0
    # clip-higher: eps_high 0.6 lets ratio 1.5 through for A > 0
    loss, _ = _one([[lr]], [0.0], [1.0], clip_eps_high=0.6)
    assert loss.item() == pytest.approx(-1.5)
    # ratio 0.5, A = -1: min(-0.5, clip(0.5) = 0.8 -> -0.8) = -0.8 -> loss 0.8, clipped low
    loss, m = _one([[math.log(0.5)]], [0.0], [-1.0])
    assert loss.item() == pytest.approx(0.8) and m["clip_frac_low"] == 1


def test_dual_clip_hand_derived():
    # ratio 5, A = -1: surrogate loss = -min(-5, -1.2) = 5; dual clip c = 3 caps it at -c*A = 3
    loss, _ = _one([[math.log(5.0)]], [0.0], [-1.0], dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    loss, _ = _one([[math.log(5.0)]], [0.0], [1.0], dual_clip=3.0)  # A > 0: untouched (-1.2)
    assert loss.item() == pytest.approx(-1.2)


def test_kl_estimators_hand_derived():
    lp, ref = torch.tensor([[math.log(2.0)]]), torch.tensor([[0.0]])
    # log_ratio = ref - logp = -ln 2
    assert KL_ESTIMATORS["k1"](lp, ref).item() == pytest.approx(math.log(2))
    assert KL_ESTIMATORS["k2"](lp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert KL_ESTIMATORS["k3"](lp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)  # e^-ln2 + ln2 - 1
    # in the loss: ratio 1, A = 0, beta 0.1 -> loss = 0.1 * k3, and the metric reports k3
    loss, m = policy_loss(lp, lp.clone(), ref, torch.tensor([0.0]), torch.ones(1, 1), beta=0.1)
    assert loss.item() == pytest.approx(0.1 * (0.5 + math.log(2) - 1)) and m["kl"] == pytest.approx(
        0.5 + math.log(2) - 1
    )


def test_gspo_uses_one_ratio_per_sequence():
    # token log-ratios [ln 2, 0] -> sequence ratio exp(mean) = sqrt(2) = 1.414 > 1 + eps
    lp = torch.tensor([[math.log(2.0), 0.0]], requires_grad=True)
    loss, m = policy_loss(
        lp,
        torch.zeros(1, 2),
        None,
        torch.tensor([1.0]),
        torch.ones(1, 2),
        loss_type="gspo",
        beta=0.0,
        clip_eps=0.5,
    )
    assert loss.item() == pytest.approx(-math.sqrt(2))  # unclipped: 1.414 < 1.5
    assert m["ratio_min"] == m["ratio_max"] == pytest.approx(math.sqrt(2))


def test_hybrid_alpha_hand_derived():
    per_token = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    # longest completion 4 tokens -> alpha = 4/512; grpo = mean(1, 1) = 1; dr_grpo = 6 / (2 x 8) = 0.375
    alpha = 4 / 512
    got = AGGREGATIONS["hybrid"](per_token, mask, max_completion_length=8)
    assert got.item() == pytest.approx(alpha * 0.375 + (1 - alpha) * 1.0)
    assert AGGREGATIONS["hybrid"](
        per_token, mask, max_completion_length=8, hybrid_alpha=1.0
    ).item() == pytest.approx(0.375)


def test_dapo_normalises_by_the_generation_batch_tokens():
    per_token, mask = torch.ones(2, 3), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert AGGREGATIONS["dapo"](per_token, mask).item() == pytest.approx(1.0)  # 3 / 3 locally
    assert AGGREGATIONS["dapo"](per_token, mask, num_items=6).item() == pytest.approx(0.5)  # 3 / 6 overall
    assert AGGREGATIONS["bnpo"](per_token, mask, num_items=6).item() == pytest.approx(1.0)  # bnpo stays local


# ---------------------------------------------------------------- losses: invariants


def _token_weights(loss_type):
    """d loss / d logprob per token at ratio 1, beta 0, advantage 1: sequence 0 has 1 token, sequence 1 has 4."""
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    lp = torch.zeros(2, 4, requires_grad=True)
    loss, _ = policy_loss(
        lp, None, None, torch.tensor([1.0, 1.0]), mask, loss_type=loss_type, beta=0.0, max_completion_length=4
    )
    (grad,) = torch.autograd.grad(loss, lp)
    return grad[0, 0].item(), grad[1, 0].item()


def test_grpo_weights_tokens_by_their_sequence_length_dr_grpo_does_not():
    short, long = _token_weights("grpo")
    assert short == pytest.approx(4 * long)  # 1/(2*1) vs 1/(2*4)
    short, long = _token_weights("dr_grpo")
    assert short == pytest.approx(long)
    short, long = _token_weights("dapo")
    assert short == pytest.approx(long)


@pytest.mark.parametrize("loss_type", sorted(LOSSES))
def test_gradient_at_ratio_one_is_the_reinforce_gradient(loss_type):
    g = torch.Generator().manual_seed(4)
    lp = (torch.randn(6, 5, generator=g) - 2).requires_grad_(True)
    mask = (torch.rand(6, 5, generator=g) > 0.3).double()
    mask[:, 0] = 1
    adv = torch.randn(6, generator=g)
    loss, _ = policy_loss(
        lp, lp.detach(), None, adv, mask, loss_type=loss_type, beta=0.0, max_completion_length=5
    )
    (ours,) = torch.autograd.grad(loss, lp)
    # REINFORCE: -A * log pi, aggregated the same way (dgro: -A log pi(y), a sum over the
    # sequence's tokens, averaged over sequences)
    if loss_type == "dgro":
        reinforce = (-adv.unsqueeze(1) * lp * mask).sum() / 6
    else:
        mode = "grpo" if loss_type == "gspo" else loss_type
        reinforce = AGGREGATIONS[mode](-adv.unsqueeze(1) * lp, mask, max_completion_length=5)
    (ref,) = torch.autograd.grad(reinforce, lp)
    assert torch.allclose(ours, ref, atol=1e-12)


def _loop_loss(lp, old, ref, adv, mask, eps_low, eps_high, beta, mode, max_len):
    n, t = len(lp), len(lp[0])
    per = [[0.0] * t for _ in range(n)]
    for i in range(n):
        for j in range(t):
            ratio = math.exp(lp[i][j] - old[i][j])
            clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
            loss = -min(ratio * adv[i], clipped * adv[i])
            lr = ref[i][j] - lp[i][j]
            per[i][j] = loss + beta * (math.exp(lr) - lr - 1)
    if mode == "grpo":
        return sum(sum(per[i][j] * mask[i][j] for j in range(t)) / max(1, sum(mask[i])) for i in range(n)) / n
    total = sum(per[i][j] * mask[i][j] for i in range(n) for j in range(t))
    if mode == "dr_grpo":
        return total / (n * max_len)
    return total / sum(sum(row) for row in mask)  # dapo / bnpo


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_losses_match_a_loop_reference(mode):
    g = torch.Generator().manual_seed(5)
    n, t = 8, 6
    lp = torch.randn(n, t, generator=g) * 0.3 - 1.5
    old = lp + torch.randn(n, t, generator=g) * 0.2
    ref = lp + torch.randn(n, t, generator=g) * 0.2
    adv = torch.randn(n, generator=g)
    mask = (torch.rand(n, t, generator=g) > 0.25).double()
    loss, _ = policy_loss(
        lp,
        old,
        ref,
        adv,
        mask,
        loss_type=mode,
        clip_eps=0.2,
        clip_eps_high=0.28,
        beta=0.04,
        max_completion_length=t,
    )
    expected = _loop_loss(
        lp.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28, 0.04, mode, t
    )
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_beta_zero_needs_no_reference_and_entropy_is_reported():
    lp = torch.log(torch.full((2, 3), 0.5))
    logits = torch.zeros(2, 3, 4)  # uniform over 4 tokens: entropy ln 4
    _, m = policy_loss(lp, lp, None, torch.tensor([1.0, -1.0]), torch.ones(2, 3), beta=0.0, logits=logits)
    assert m["kl"] == 0.0 and m["entropy"] == pytest.approx(math.log(4))
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, lp, None, torch.tensor([1.0, -1.0]), torch.ones(2, 3), beta=0.1)


def test_loss_errors_are_clear():
    lp = torch.zeros(1, 1)
    with pytest.raises(UserError, match="choose from"):
        policy_loss(lp, lp, None, torch.zeros(1), torch.ones(1, 1), loss_type="nope", beta=0.0)
    with pytest.raises(UserError, match="does not take"):
        policy_loss(lp, lp, None, torch.zeros(1), torch.ones(1, 1), beta=0.0, epsilon=0.3)


def loss_inputs(n: int, t: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random log-probs [n, t], old and reference log-probs near them, and advantages [n]."""
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(n, t, generator=g) - 1
    old, ref = lp + 0.1 * torch.randn(n, t, generator=g), lp + 0.1 * torch.randn(n, t, generator=g)
    return lp, old, ref, torch.randn(n, generator=g)


@pytest.mark.parametrize("loss_type", sorted(LOSSES))
def test_a_regroupable_loss_sums_alike_however_the_rows_are_grouped(loss_type):
    # The trainer puts rows of similar lengths into the same micro-batch only for these losses
    # (train/batch.py: length bucketing); for the others, which rows share a micro-batch changes
    # the sum (bnpo's local token count). Given the whole batch's counts, as the trainer gives
    # them (hybrid's longest completion among them: one alpha a step).
    n, t = 8, 6
    lp, old, ref, adv = loss_inputs(n, t, seed=8)
    lengths = torch.tensor([6, 1, 4, 2, 6, 3, 1, 5])
    mask = (torch.arange(t) < lengths[:, None]).float()
    common = {
        "loss_type": loss_type, "max_completion_length": t, "num_items": mask.sum(), "num_sequences": n,
        "longest_completion": 6,
    }  # fmt: skip

    def summed(groups):
        return sum(
            policy_loss(lp[i], old[i], ref[i], adv[i], mask[i], **common)[0].item()
            for i in (torch.tensor(rows) for rows in groups)
        )

    in_order = summed([[0, 1], [2, 3], [4, 5], [6, 7]])
    by_length = summed([[0, 4], [7, 2], [5, 3], [1, 6]])
    if regroupable(loss_type):
        assert by_length == pytest.approx(in_order, rel=1e-6)
    else:
        assert by_length != pytest.approx(in_order, rel=1e-3)


def test_a_loss_registered_from_outside_is_not_assumed_regroupable(monkeypatch):
    from axiom_rl.algorithms import losses

    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    monkeypatch.setattr(losses, "REGROUPABLE", set(losses.REGROUPABLE))
    monkeypatch.setattr(losses, "LOSS_OPTIONS", dict(losses.LOSS_OPTIONS))
    assert regroupable("grpo")
    for name in ("grpo", "my_loss"):  # one's own, even under a built-in name
        losses.register_loss(name)(lambda *a, **k: None)
        assert not regroupable(name)


@pytest.mark.parametrize("loss_type", sorted(set(LOSSES) - {"bnpo"}))
def test_micro_batches_add_up_to_the_whole_batch(loss_type):
    # Gradient accumulation: summing micro-batch losses computed with the whole batch's counts
    # gives the whole batch's loss (hybrid: alpha fixed here; from the whole batch's longest row
    # in the next test). bnpo is excluded by definition: it normalises each micro-batch by its
    # own tokens.
    n, t = 8, 5
    lp, old, ref, adv = loss_inputs(n, t, seed=6)
    mask = torch.ones(n, t)
    mask[::3, 3:] = 0
    common = {
        "loss_type": loss_type,
        "max_completion_length": t,
        "num_items": mask.sum(),
        "num_sequences": n,
        **({"hybrid_alpha": 0.3} if loss_type == "hybrid" else {}),
    }
    whole, _ = policy_loss(lp, old, ref, adv, mask, **common)
    parts = sum(
        policy_loss(lp[i : i + 2], old[i : i + 2], ref[i : i + 2], adv[i : i + 2], mask[i : i + 2], **common)[
            0
        ]
        for i in range(0, n, 2)
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12)


# ------------------------------------------------------------------ dgro's loss


def test_dgro_loss_hand_derived_with_its_penalty_towards_the_sampling_policy():
    # Two completions of two tokens, A = (+1, -2). Completion 0: log pi_theta = (-1, -2), log
    # pi_old = (-1.5, -2): sequence log-ratio 0.5. Completion 1: log pi_theta = (-1, -1), pi_old
    # equal: log-ratio 0. beta_2 = 0.1:
    #   loss = [-(1)(-3) + 0.1 * 0.5^2 + -(-2)(-2) + 0] / 2 = (3 + 0.025 - 4) / 2 = -0.4875
    #   d/d logp(0, t) = (-A_0 + 2 * 0.1 * 0.5) / 2 = (-1 + 0.1) / 2 = -0.45 for both tokens
    #   d/d logp(1, t) = (-A_1 + 0) / 2 = 1.0
    lp = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0], [-1.0, -1.0]])
    far_reference = torch.full((2, 2), -9.0)  # beta = 0: the reference plays no part
    loss, metrics = policy_loss(
        lp, old, far_reference, torch.tensor([1.0, -2.0]), torch.ones(2, 2), loss_type="dgro",
        beta=0.0, beta_sampling=0.1,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, lp)
    assert loss.item() == pytest.approx(-0.4875)
    assert torch.allclose(grad, torch.tensor([[-0.45, -0.45], [1.0, 1.0]]))
    assert metrics["sequence_log_ratio_sq"] == pytest.approx(0.125)  # (0.25 + 0) / 2
    assert metrics["kl"] == 0.0 and metrics["clip_frac"] == 0.0
    # On-policy (no old log-probs: one update per rollout) the penalty is 0 and has no gradient:
    # the loss is REINFORCE's with the sequence's log-prob
    loss, _ = policy_loss(
        lp, None, None, torch.tensor([1.0, -2.0]), torch.ones(2, 2), loss_type="dgro", beta=0.0,
        beta_sampling=5.0,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, lp)
    assert torch.allclose(grad, torch.tensor([[-0.5, -0.5], [1.0, 1.0]]))
    # beta > 0 adds the sequence's KL to the reference, summed over its tokens (k1 here)
    with_kl, m = policy_loss(
        lp, old, torch.full((2, 2), -1.5), torch.tensor([1.0, -2.0]), torch.ones(2, 2), loss_type="dgro",
        beta=0.5, kl_estimator="k1", beta_sampling=0.1,
    )  # fmt: skip
    # k1 = logp - ref: (0.5, -0.5) and (0.5, 0.5); sums 0 and 1; 0.5 * (0 + 1) / 2 = 0.25
    assert with_kl.item() == pytest.approx(-0.4875 + 0.25)
    assert m["kl"] == pytest.approx(0.25)


def test_dgro_loss_refuses_what_only_a_clipped_loss_takes():
    lp = torch.zeros(1, 1)
    for option in ({"dual_clip": 3.0}, {"importance_sampling": "sequence"}, {"hybrid_alpha": 0.5}):
        with pytest.raises(UserError, match="dgro"):
            policy_loss(
                lp, None, None, torch.zeros(1), torch.ones(1, 1), loss_type="dgro", beta=0.0, **option
            )
    with pytest.raises(UserError, match="beta_sampling"):
        policy_loss(
            lp, None, None, torch.zeros(1), torch.ones(1, 1), loss_type="dgro", beta=0.0, beta_sampling=-1
        )
    with pytest.raises(UserError, match="does not take"):  # and the clipped losses refuse dgro's
        policy_loss(lp, None, None, torch.zeros(1), torch.ones(1, 1), beta=0.0, beta_sampling=0.1)


# ------------------------------------------------------------------ advantages per token


@pytest.mark.parametrize("loss_type", sorted(LOSSES))
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_a_per_sequence_advantage_is_the_per_token_one_repeated(loss_type, beta):
    """Every loss takes advantages [B*G] or [B*G, T]: [B*G] repeated along T gives the same loss,
    metrics and gradients, clipping and the KL term included."""
    lp, old, ref, adv = loss_inputs(6, 5, seed=7)
    mask = torch.ones(6, 5)
    mask[1, 3:] = mask[4, 1:] = 0
    per_token = adv.unsqueeze(1).expand(6, 5).clone()
    clipped = loss_type != "dgro"  # dgro has no clipped ratio: its sampling penalty instead
    results = []
    for advantages in (adv, per_token):
        x = lp.clone().requires_grad_(True)
        loss, metrics = policy_loss(
            x, old, ref if beta else None, advantages, mask, loss_type=loss_type, beta=beta,
            clip_eps=0.05, max_completion_length=5, **({"dual_clip": 3.0} if clipped else {}),
        )  # fmt: skip
        (grad,) = torch.autograd.grad(loss, x)
        results.append((loss.detach(), metrics, grad))
    (loss_a, m_a, g_a), (loss_b, m_b, g_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(g_a, g_b) and m_a == m_b
    if clipped:
        assert m_a["clip_frac"] > 0  # the clipping was exercised
    else:
        assert m_a["sequence_log_ratio_sq"] > 0  # the sampling penalty was exercised


def test_per_token_advantages_hand_derived():
    # One sequence of two tokens at ratio 1 (on-policy), grpo aggregation (mean over its tokens):
    # loss = -(A_1 logp_1 + A_2 logp_2) / 2 in gradient, so d loss / d logp_t = -A_t / 2.
    # Advantages (+1, -1) push the first token up and the second down; the outcome-only
    # advantage (0, their mean) moves neither.
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = policy_loss(lp, None, None, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), beta=0.0)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.tolist() == [[-0.5, 0.5]]
    assert loss.item() == pytest.approx(0.0)  # -(1 * 1 + (-1) * 1) / 2 at ratio 1
    outcome, _ = policy_loss(lp, None, None, torch.tensor([0.0]), torch.ones(1, 2), beta=0.0)
    assert torch.autograd.grad(outcome, lp)[0].tolist() == [[0.0, 0.0]]
    # Clipped per token: ratio 1.5 on both tokens, A = (+1, -1), eps 0.2: the first token's
    # objective is clipped at 1.2 (no gradient), the second's is not (A < 0 takes the min,
    # 1.5 * -1 < 1.2 * -1): d/dlogp_2 of -(-1 * exp(logp_2 - old_2)) / 2 = 1.5 / 2.
    old = lp.detach() - math.log(1.5)
    loss, m = policy_loss(lp, old, None, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), beta=0.0)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad[0].tolist() == pytest.approx([0.0, 0.75])
    assert m["clip_frac_high"] == 0.5 and m["clip_frac_low"] == 0.0


def test_advantages_of_another_shape_are_refused():
    lp = torch.zeros(2, 3)
    for bad in (torch.zeros(3), torch.zeros(2, 4), torch.zeros(2, 3, 1)):
        with pytest.raises(
            ValueError, match=r"advantages must be \[B\*G\] = \[2\] or \[B\*G, T\] = \[2, 3\]"
        ):
            policy_loss(lp, None, None, bad, torch.ones(2, 3), beta=0.0)


def test_hybrid_takes_one_alpha_a_step_from_the_whole_batch_s_longest_completion():
    # Micro-batches of rows 3 and 5 tokens long, the batch's longest 5: alpha = 5 / 512 in both
    # (it was each micro-batch's own longest row, 3/512 and 5/512: two alphas in one step).
    n, t = 4, 5
    lp, old, ref, adv = loss_inputs(n, t, seed=9)
    mask = torch.ones(n, t)
    mask[:2, 3:] = 0
    common = {"loss_type": "hybrid", "max_completion_length": t, "num_sequences": n}
    whole, _ = policy_loss(lp, old, ref, adv, mask, **common)
    split = sum(
        policy_loss(lp[i : i + 2], old[i : i + 2], ref[i : i + 2], adv[i : i + 2], mask[i : i + 2],
                    longest_completion=5, **common)[0]
        for i in (0, 2)
    )  # fmt: skip
    assert split.item() == pytest.approx(whole.item(), rel=1e-12)
    fixed = policy_loss(lp, old, ref, adv, mask, hybrid_alpha=5 / 512, **common)[0]
    assert fixed.item() == pytest.approx(whole.item(), rel=1e-12)


# ------------------------------------------------------------------ estimators across steps


def test_an_estimator_hands_each_function_what_it_declares_and_keeps_its_state():
    """The trainer's one door: krpo gets the run's Kalman state and keys, dgro its step and a
    generator from seed and step; their results are the pure functions' on the same inputs."""
    from axiom_rl.algorithms import Estimator, Groups

    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    krpo = Estimator("krpo", {"scale": "none"})
    state = KalmanBaseline()
    for step in range(3):
        groups = Groups(("lcs/d1", "lcs/d1"), step, seed=5)
        ours = krpo(rewards, 4, groups).advantages
        theirs = compute_advantages(rewards, 4, "krpo", state=state, keys=list(groups.keys), scale="none")
        assert torch.equal(ours, theirs)
    restored = Estimator("krpo", {"scale": "none"})
    restored.load_state_dict(krpo.state_dict())
    assert restored.kalman.states == krpo.kalman.states and restored.kalman.states
    dgro = Estimator("dgro", {"explore_std": 0.5})
    flat = torch.zeros(8)
    a = dgro(flat, 4, Groups(("a", "b"), step=7, seed=5)).advantages
    b = compute_advantages(
        flat, 4, "dgro", explore_std=0.5, generator=torch.Generator().manual_seed(5 * 1_000_003 + 7)
    )
    assert torch.equal(a, b) and a.abs().sum() > 0
    assert not torch.equal(a, dgro(flat, 4, Groups(("a", "b"), step=8, seed=5)).advantages)
    assert Estimator("grpo").state_dict() == {}


def test_an_estimator_refuses_what_it_does_not_take_and_warns_once_when_keys_never_repeat():
    from axiom_rl.algorithms import Estimator, Groups

    with pytest.raises(
        UserError, match=r"advantage_params \['keys'\] unknown to 'krpo'; it takes: eps, scale"
    ):
        Estimator("krpo", {"keys": ["x"]})  # a run input, not a parameter
    with pytest.raises(UserError, match="unknown advantage estimator 'nope'"):
        Estimator("nope")
    fresh = Estimator("krpo")
    rewards = torch.tensor([1.0, 0.0] * 8)
    notes = [
        fresh(rewards, 2, Groups(tuple(f"p{step}-{i}" for i in range(8)), step)) and fresh.warning()
        for step in range(3)
    ]
    assert notes[0] is None and "none of the 16 groups so far shared a key" in notes[1] and notes[2] is None
    repeating = Estimator("krpo")
    for step in range(3):
        repeating(rewards, 2, Groups(("lcs/d1",) * 8, step))
        assert repeating.warning() is None


# ------------------------------------------------------------------ process supervision


def test_step_advantages_hand_derived():
    """DeepSeekMath's process supervision. One group of two rows. Row 0: steps ending at tokens 2
    and 4 with rewards 1 and 0; row 1: one step ending at token 3, reward 0. The group's step
    rewards {1, 0, 0}: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
    Normalised: step (0,0) (2/3)/sqrt(1/3) = 2/sqrt(3); the zeros -(1/3)/sqrt(1/3) = -1/sqrt(3).
    Row 0, tokens 0-1 (its first step): both steps, 2/sqrt(3) - 1/sqrt(3) = 1/sqrt(3); tokens
    2-3: -1/sqrt(3); token 4 on (after its last step): 0. Row 1: tokens 0-2 -1/sqrt(3), then 0."""
    from axiom_rl.algorithms import step_advantages

    out = step_advantages([[2, 4], [3]], [[1.0, 0.0], [0.0]], group_size=2, length=6, eps=0.0)
    s = 1 / math.sqrt(3)
    assert out[0].tolist() == pytest.approx([s, s, -s, -s, 0, 0])
    assert out[1].tolist() == pytest.approx([-s, -s, -s, 0, 0, 0])


def test_step_advantages_match_a_loop_reference():
    from axiom_rl.algorithms import step_advantages

    g = torch.Generator().manual_seed(11)
    group, length, rows = 4, 9, 8
    ends, rewards = [], []
    for _ in range(rows):
        k = int(torch.randint(0, 4, (), generator=g))
        cuts = sorted(set(int(x) for x in torch.randint(1, 12, (k,), generator=g).tolist()))
        ends.append(cuts)
        rewards.append(torch.rand(len(cuts), generator=g).tolist())
    got = step_advantages(ends, rewards, group, length)
    for b in range(0, rows, group):
        pooled = [r for i in range(b, b + group) for r in rewards[i]]
        mean = sum(pooled) / len(pooled)
        sd = math.sqrt(sum((r - mean) ** 2 for r in pooled) / (len(pooled) - 1)) if len(pooled) > 1 else 0.0
        for i in range(b, b + group):
            for t in range(length):
                want = sum((r - mean) / (sd + 1e-4) for e, r in zip(ends[i], rewards[i]) if t < e)
                assert got[i, t].item() == pytest.approx(want, abs=1e-9), (i, t)
    assert not step_advantages([[], []], [[], []], 2, 3).any()  # no steps: nothing
    with pytest.raises(ValueError, match="increasing token counts"):
        step_advantages([[3, 3], []], [[1.0, 1.0], []], 2, 4)
