"""Advantage estimators: f(rewards[B*G], group_size, **params) -> advantages[B*G].

Rewards come in groups of `group_size` (G) consecutive completions of the same prompt: rewards
[B*G] are B groups. Every estimator has that one signature; `compute_advantages` picks one by
name, and with `return_info=True` also says which groups had no reward variance (all G
completions scored alike: nothing to learn from, the groups DAPO's dynamic sampling refills).

    grpo        (r - group mean) / (group std + eps)                 DeepSeekMath (Shao et al. 2024)
    dr_grpo     r - group mean                                       Dr. GRPO (Liu et al. 2025)
    rloo        r - mean of the *other* G-1 rewards                  RLOO (Ahmadian et al. 2024)
    batch_norm  (r - group mean) / (std of the whole batch + eps)    REINFORCE++ / TRL scale_rewards="batch"
    dgro        beta_1 * (r - group mean) [/ (group std + eps)], exploration noise for
                zero-variance groups, beta_1 optionally cosine-annealed   DGRO (Su et al. 2025, arXiv 2505.12951)
    krpo        r - Kalman-filtered baseline per prompt key, state carried across steps
                                                                     KRPO (Wang et al. 2025, arXiv 2505.07527)

docs/algorithms.md gives each one's formula, bias and when to use it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UserError

AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES: dict[str, AdvantageFn] = {}
ZERO_VARIANCE_TOL = 1e-6


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    def deco(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES[name] = fn
        return fn

    return deco


def grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[B*G] -> [B, G], checking the shapes."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B*G], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.view(-1, group_size)


def group_std(r: torch.Tensor, std: str) -> torch.Tensor:
    """Per-group standard deviation [B, 1]: 'unbiased' divides by G-1 (as TRL does), 'population' by G."""
    if std not in ("unbiased", "population"):
        raise ValueError(f"std must be 'unbiased' or 'population', got {std!r}")
    if r.shape[1] == 1:
        return torch.zeros_like(r)
    return r.std(dim=1, keepdim=True, unbiased=(std == "unbiased"))


def zero_variance_groups(
    rewards: torch.Tensor, group_size: int, tol: float = ZERO_VARIANCE_TOL
) -> torch.Tensor:
    """bool [B]: groups whose rewards are all equal (within tol)."""
    r = grouped(rewards, group_size)
    return (r.max(dim=1).values - r.min(dim=1).values) <= tol


@register_advantage("grpo")
def grpo(rewards: torch.Tensor, group_size: int, eps: float = 1e-4, std: str = "unbiased") -> torch.Tensor:
    """(r - group mean) / (group std + eps). std: 'unbiased' (G-1, TRL's convention) or
    'population' (G). eps = 1e-4 as in TRL. A constant group gets advantage 0."""
    r = grouped(rewards, group_size)  # [B, G]
    centered = r - r.mean(dim=1, keepdim=True)
    return (centered / (group_std(r, std) + eps)).reshape(-1)


@register_advantage("dr_grpo")
def dr_grpo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """r - group mean: no division by the std, which Dr. GRPO shows biases updates toward
    questions that are too easy or too hard (their std is small)."""
    r = grouped(rewards, group_size)  # [B, G]
    return (r - r.mean(dim=1, keepdim=True)).reshape(-1)


@register_advantage("rloo")
def rloo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """r_i - mean_{j != i} r_j = G/(G-1) * (r_i - group mean): the baseline does not contain
    the sample itself, so the estimate is unbiased. Needs G >= 2."""
    if group_size < 2:
        raise ValueError("rloo needs group_size >= 2")
    r = grouped(rewards, group_size)  # [B, G]
    # In this form a constant group gives exactly 0 (r - (sum - r)/(G-1) leaves float residue).
    return (group_size / (group_size - 1) * (r - r.mean(dim=1, keepdim=True))).reshape(-1)


@register_advantage("batch_norm")
def batch_norm(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-4, std: str = "unbiased"
) -> torch.Tensor:
    """(r - group mean) / (std of all rewards in the batch + eps): the group baseline, one scale
    for the whole batch, so hard and easy prompts are not rescaled differently."""
    r = grouped(rewards, group_size)  # [B, G]
    scale = rewards.std(unbiased=(std == "unbiased")) if rewards.numel() > 1 else rewards.new_zeros(())
    return ((r - r.mean(dim=1, keepdim=True)) / (scale + eps)).reshape(-1)


def cosine_annealed(start: float, end: float | None, step: int, steps: int) -> float:
    """`start` at step 0 falling to `end` at `steps` along half a cosine, `end` after; `start`
    throughout when `end` is None or `steps` is 0."""
    if end is None or steps <= 0:
        return start
    progress = min(step, steps) / steps
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * progress))


@register_advantage("dgro")
def dgro(
    rewards: torch.Tensor,
    group_size: int,
    beta_reward: float = 1.0,
    scale: str = "group_std",
    eps: float = 1e-4,
    std: str = "unbiased",
    explore_std: float = 0.0,
    explore_threshold: float = ZERO_VARIANCE_TOL,
    beta_reward_end: float | None = None,
    anneal_steps: int = 0,
    step: int = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """DGRO's advantage: beta_1 * (r - group mean), divided by (group std + eps) when
    scale='group_std' (the original experiments' variance-aware form; scale='none' is the paper's r - V).

    beta_reward is DGRO's beta_1 (Su et al. 2025, arXiv 2505.12951): it scales the policy-gradient
    term apart from the regulariser, whose coefficient beta_2 is the `dgro` loss's
    `beta_sampling`. With beta_reward_end and anneal_steps, beta_1 follows a cosine from
    beta_reward at step 0 to beta_reward_end at anneal_steps (the original experiments' adaptive schedule).
    Groups whose std is at most `explore_threshold` would contribute nothing; with explore_std > 0
    they get N(0, explore_std^2) advantages instead, a small push to explore (deterministic
    given `generator`).
    """
    if scale not in ("group_std", "none"):
        raise UserError(f"dgro's scale must be 'group_std' or 'none', got {scale!r}")
    if anneal_steps < 0:
        raise UserError(f"dgro's anneal_steps must be >= 0, got {anneal_steps}")
    r = grouped(rewards, group_size)  # [B, G]
    sd = group_std(r, std)  # [B, 1]
    beta_1 = cosine_annealed(beta_reward, beta_reward_end, step, anneal_steps)
    adv = beta_1 * (r - r.mean(dim=1, keepdim=True))
    if scale == "group_std":
        adv = adv / (sd + eps)
    if explore_std > 0:
        flat = sd.squeeze(1) <= explore_threshold  # [B]
        noise = torch.randn(r.shape, generator=generator, dtype=r.dtype, device=r.device) * explore_std
        adv = torch.where(flat.unsqueeze(1), noise, adv)
    return adv.reshape(-1)


@dataclass
class KalmanBaseline:
    """Per-key scalar Kalman filters over successive group-mean rewards (the state of `krpo`).

    Each key (a problem id, or a task name) has a latent mean reward x and its variance P. A new
    group of that key is one noisy measurement z = the group's mean reward:
        predict  P- = P + process_noise              (the policy drifts between visits)
        update   K = P- / (P- + measurement_noise),  x = x + K (z - x),  P = (1 - K) P-
    The first measurement of a key sets x = z, P = measurement_noise. process_noise: how fast a
    prompt's expected reward may move between visits (1e-3: a few points per step);
    measurement_noise: the variance of a group mean (about p(1-p)/G, 1e-2 for G=8 near p=0.5).
    The trainer owns this object and saves it in checkpoints (state_dict / load_state_dict).
    """

    process_noise: float = 1e-3
    measurement_noise: float = 1e-2
    states: dict[str, tuple[float, float]] = field(default_factory=dict)

    def update(self, key: str, measurement: float) -> tuple[float, float]:
        if key not in self.states:
            self.states[key] = (measurement, self.measurement_noise)
            return self.states[key]
        x, p = self.states[key]
        p_pred = p + self.process_noise
        gain = p_pred / (p_pred + self.measurement_noise)
        x = x + gain * (measurement - x)
        self.states[key] = (x, (1 - gain) * p_pred)
        return self.states[key]

    def state_dict(self) -> dict[str, Any]:
        return {
            "process_noise": self.process_noise,
            "measurement_noise": self.measurement_noise,
            "states": dict(self.states),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.process_noise = float(state["process_noise"])
        self.measurement_noise = float(state["measurement_noise"])
        self.states = {k: (float(v[0]), float(v[1])) for k, v in state["states"].items()}


@register_advantage("krpo")
def krpo(
    rewards: torch.Tensor,
    group_size: int,
    state: KalmanBaseline | None = None,
    keys: Sequence[str] | None = None,
    scale: str = "none",
    eps: float = 1e-4,
) -> torch.Tensor:
    """r - b_key, b_key the Kalman posterior mean for the group's key after this group's mean.

    The baseline remembers how the prompt (or task) scored before, so an all-correct group of a
    prompt that used to fail still gets a positive advantage, which group-mean baselines zero
    out. scale: 'none' (reward units, like dr_grpo), 'group_std' (divide by the group std + eps,
    like grpo; a constant group then divides by eps, so use only with explore-free data), or
    'kalman' (divide by sqrt(P) + eps, as the paper's reference code does). `state` is updated in
    place (a fresh one is used if None: then every key is new and this reduces to dr_grpo).
    The paper's reference code runs a fresh filter over the rewards within each group; this
    filter runs across steps, per key, as the trainer needs.
    """
    if scale not in ("none", "group_std", "kalman"):
        raise ValueError(f"scale must be 'none', 'group_std' or 'kalman', got {scale!r}")
    r = grouped(rewards, group_size)  # [B, G]
    state = state if state is not None else KalmanBaseline()
    keys = list(keys) if keys is not None else ["*"] * r.shape[0]
    if len(keys) != r.shape[0]:
        raise ValueError(f"krpo needs one key per group: {r.shape[0]} groups, {len(keys)} keys")
    means = r.mean(dim=1).tolist()
    posterior = [state.update(k, m) for k, m in zip(keys, means)]
    baseline = r.new_tensor([x for x, _ in posterior]).unsqueeze(1)  # [B, 1]
    adv = r - baseline
    if scale == "group_std":
        adv = adv / (group_std(r, "unbiased") + eps)
    elif scale == "kalman":
        adv = adv / (r.new_tensor([math.sqrt(p) for _, p in posterior]).unsqueeze(1) + eps)
    return adv.reshape(-1)


@dataclass(frozen=True)
class AdvantageResult:
    advantages: torch.Tensor  # [B*G]
    zero_variance: torch.Tensor  # bool [B]: groups whose rewards were all equal
    zero_variance_frac: float


def compute_advantages(
    rewards: torch.Tensor,
    group_size: int,
    estimator: str = "grpo",
    *,
    return_info: bool = False,
    **params: Any,
) -> torch.Tensor | AdvantageResult:
    """Advantages [B*G] from rewards [B*G] with the named estimator (DESIGN.md's entry point).

    With return_info=True, an AdvantageResult that also holds the zero-variance group mask and
    fraction (for logging and for dynamic sampling)."""
    if estimator not in ADVANTAGES:
        raise UserError(
            f"unknown advantage estimator {estimator!r}; choose from: {', '.join(sorted(ADVANTAGES))}"
        )
    fn = ADVANTAGES[estimator]
    accepted = set(inspect.signature(fn).parameters) - {"rewards", "group_size"}
    unknown = set(params) - accepted
    if unknown:
        raise UserError(
            f"advantage estimator {estimator!r} does not take {', '.join(sorted(unknown))}; "
            f"it takes: {', '.join(sorted(accepted)) or 'nothing'}"
        )
    advantages = fn(rewards, group_size, **params)
    if not return_info:
        return advantages
    zero = zero_variance_groups(rewards, group_size)
    frac = float(zero.float().mean()) if zero.numel() else 0.0
    return AdvantageResult(advantages, zero, frac)


@dataclass(frozen=True)
class Groups:
    """What an estimator may know of a batch's groups besides their rewards (one entry a group),
    and when: the one argument through which a stateful or scheduled estimator sees the run."""

    keys: tuple[str, ...]  # which groups are "the same" across steps (krpo's baseline is per key)
    step: int = 0  # optimizer steps done before this batch
    seed: int = 0  # the run's seed (dgro's exploration noise is drawn from seed and step)


class Estimator:
    """A named estimator as a training run uses it, step after step: `estimator(rewards, G,
    groups)` gives an AdvantageResult, and whatever it carries across steps (krpo's Kalman
    filters) is in `state_dict`, which the trainer checkpoints. The registry's functions stay
    pure; this is the one place that hands each the inputs it declares (`state`, `keys`,
    `step`, `generator`), so a trainer never asks which estimator it runs."""

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        if name not in ADVANTAGES:
            raise UserError(
                f"unknown advantage estimator {name!r}; choose from: {', '.join(sorted(ADVANTAGES))}"
            )
        self.name, self.params = name, dict(params or {})
        self._wants = set(inspect.signature(ADVANTAGES[name]).parameters)
        settable = self._wants - {"rewards", "group_size", *RUN_INPUTS}
        unknown = set(self.params) - settable
        if unknown:
            raise UserError(
                f"advantage_params {sorted(unknown)} unknown to {name!r}; it takes: "
                f"{', '.join(sorted(settable)) or 'nothing'}"
            )
        self.kalman = KalmanBaseline() if "state" in self._wants else None
        self._groups_seen = 0
        self._warned = False

    def __call__(self, rewards: torch.Tensor, group_size: int, groups: Groups) -> AdvantageResult:
        run_inputs: dict[str, Any] = {
            "state": self.kalman,
            "keys": list(groups.keys),
            "step": groups.step,
            "generator": torch.Generator().manual_seed(groups.seed * 1_000_003 + groups.step),
        }
        given = {k: v for k, v in run_inputs.items() if k in self._wants}
        self._groups_seen += len(groups.keys)
        result = compute_advantages(rewards, group_size, self.name, return_info=True, **self.params, **given)
        assert isinstance(result, AdvantageResult)
        return result

    def warning(self) -> str | None:
        """Once, if the run's keys have not repeated after several batches (its baseline then
        never sees a key twice, and krpo is dr_grpo in effect); else None."""
        if self.kalman is None or self._warned or self._groups_seen < 16:
            return None
        if len(self.kalman.states) < self._groups_seen:
            return None
        self._warned = True
        return (
            f"{self.name}: none of the {self._groups_seen} groups so far shared a key with another, so "
            "its Kalman baseline never saw a key twice and the advantages are dr_grpo's: key groups "
            "by task or task/difficulty (krpo_key)"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"kalman": self.kalman.state_dict()} if self.kalman is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.kalman is not None and state.get("kalman"):
            self.kalman.load_state_dict(state["kalman"])


# What a run hands an estimator that declares it (Estimator): not settable as advantage_params.
RUN_INPUTS = ("state", "keys", "step", "generator")


def step_advantages(
    step_ends: Sequence[Sequence[int]],
    step_rewards: Sequence[Sequence[float]],
    group_size: int,
    length: int,
    eps: float = 1e-4,
    std: str = "unbiased",
) -> torch.Tensor:
    """Per-token advantages [B*G, length] from step rewards: process supervision as DeepSeekMath
    (Shao et al. 2024, §4.1.3) defines it. Each step reward is normalised by the mean and std of
    all the step rewards of its group, r~ = (r - mean) / (std + eps); a token's advantage is the
    sum of the normalised rewards of its step and of every step after it.

    step_ends[i]: where row i's steps end, as token counts (step j covers the tokens from the
    previous end up to step_ends[i][j] - 1), increasing; step_rewards[i] one reward each. A row
    without steps (empty lists) gets 0 everywhere, and so do tokens after a row's last step.
    Rows are prompt-major: group b is rows b*G .. b*G + G-1."""
    if len(step_ends) != len(step_rewards) or len(step_ends) % group_size:
        raise ValueError(
            f"{len(step_ends)} rows of step ends, {len(step_rewards)} of rewards, groups of {group_size}"
        )
    out = torch.zeros(len(step_ends), length)
    for start in range(0, len(step_ends), group_size):
        rows = range(start, start + group_size)
        pooled = torch.tensor([float(r) for i in rows for r in step_rewards[i]])
        if pooled.numel() == 0:
            continue
        mean = pooled.mean()
        spread = pooled.std(unbiased=(std == "unbiased")) if pooled.numel() > 1 else pooled.new_zeros(())
        for i in rows:
            ends, values = list(step_ends[i]), list(step_rewards[i])
            if len(ends) != len(values):
                raise ValueError(f"row {i}: {len(ends)} step ends for {len(values)} rewards")
            if any(b <= a for a, b in zip(ends, ends[1:])) or (ends and ends[0] <= 0):
                raise ValueError(f"row {i}: step ends must be increasing token counts, got {ends}")
            later = 0.0  # the normalised rewards of the steps after the one being filled
            for j in reversed(range(len(ends))):
                later += float((values[j] - mean) / (spread + eps))
                begin = ends[j - 1] if j else 0
                out[i, begin : min(ends[j], length)] = later
    return out
