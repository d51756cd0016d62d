"""turn-PPO's learned turn-level critic [229] (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`;
experimental): turn-level GAE whose state values come from a linear probe on the policy's hidden states, fitted online
on the Monte-Carlo returns of earlier steps (the critic-free form, values from the group, is ``turn_baseline``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.turns import TurnLayout, group_turn_stats, per_turn, turn_layout
from genalign.experimental.credit.running_means import global_sum
from genalign.experimental.credit.turns import turn_gae, turn_returns
from genalign.experimental.shaping.probe import random_projection


def first_action_positions(layout: TurnLayout) -> Tensor:
    """``[N, K]`` long: the position of each turn's first valid action (``T`` where the turn is absent)."""
    n, width = layout.turns.shape
    positions = torch.arange(width, device=layout.turns.device).expand(n, width)  # [N, T]
    keys = torch.where(layout.valid, layout.turns.clamp(0, layout.width - 1), layout.width)  # [N, T]; K: not an action
    first = torch.full((n, layout.width + 1), width, dtype=torch.long, device=keys.device)
    return first.scatter_reduce_(1, keys, positions, "amin")[:, : layout.width]


def turn_state_features(hidden: Tensor, layout: TurnLayout, projection: Tensor) -> Tensor:
    """``[N, K, d + 1]`` float64 ``φ_ik = [P·unit(h_i,t_ik), 1]``: the detached hidden state at the first action
    ``t_ik`` of turn ``k`` (the state that predicts the turn's first token: the conversation before it), unit-normalised
    and projected by ``projection`` ``[H, d]``, and a bias; zeros but the bias on an absent turn. ``hidden`` is
    ``[N, T, H]``."""
    first = first_action_positions(layout).clamp(max=hidden.shape[1] - 1).to(hidden.device)  # [N, K]
    states = hidden.detach().gather(1, first[..., None].expand(-1, -1, hidden.shape[-1])).cpu().double()  # [N, K, H]
    unit = states / states.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    projected = torch.where(layout.present.cpu()[..., None], unit @ projection, 0.0)  # [N, K, d]
    return torch.cat([projected, torch.ones(*projected.shape[:2], 1, dtype=torch.float64)], -1)


def _check(*, gamma: float, lam: float, projection_dim: int, ridge: float, forgetting: float, **_: Any) -> None:
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"turn_critic: need gamma and lam in [0, 1] (discount and GAE λ over turns), got "
                         f"gamma={gamma!r}, lam={lam!r}")  # fmt: skip
    if isinstance(projection_dim, bool) or not isinstance(projection_dim, int) or projection_dim < 1:
        raise ValueError(f"turn_critic: projection_dim={projection_dim!r} must be an integer >= 1 (e.g. 64)")
    if not (ridge > 0 and math.isfinite(ridge)):
        raise ValueError(f"turn_critic: ridge={ridge!r} must be a finite number > 0 (e.g. 1.0)")
    if not 0 < forgetting <= 1:
        raise ValueError(f"turn_critic: forgetting={forgetting!r} must be in (0, 1] (1: every earlier step alike)")


class TurnCritic:
    """The critic of :func:`turn_critic`, bound once: the ridge probe's running sums ``A = Σ γ^s ΦᵀΦ`` ``[d+1, d+1]``
    and ``b = Σ γ^s ΦᵀG`` ``[d+1]`` over earlier steps' (state, return) pairs of every process
    (:func:`~genalign.experimental.credit.running_means.global_sum`, so all processes keep the same probe), kept across
    steps and checkpoints (the state protocol). Each call computes the advantages with the probe fitted so far, then
    adds this step's pairs. ``stats`` holds the last call's critic error (``turn_critic_mse``: the mean squared error
    of the values on this step's returns, before the update; NaN before the first fit) and ``turn_critic_fitted``
    (credit rules have no statistics channel to the trainer's log: read them from the bound rule)."""

    def __init__(self, **hp: Any) -> None:
        self.hp = {key: value for key, value in hp.items() if key != "critic_weight"}
        self.options = {**CREDIT_RULES.hyperparameters("turn_critic"), **self.hp}
        _check(**self.options)
        size = self.options["projection_dim"] + 1
        self.gram = torch.zeros(size, size, dtype=torch.float64)
        self.moment = torch.zeros(size, dtype=torch.float64)
        self.seen = 0
        self.stats: dict[str, float] = {}

    def weights(self) -> Tensor | None:
        """``[d + 1]`` the ridge solution ``(A + λI)⁻¹ b`` of the pairs seen so far; None before any."""
        if not self.seen:
            return None
        eye = torch.eye(self.gram.shape[0], dtype=torch.float64)
        return torch.linalg.solve(self.gram + self.options["ridge"] * eye, self.moment)

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        o, weight = self.options, self.weights()
        critic_weight = None if weight is None else weight.tolist()
        result = turn_critic(advantages, batch, **self.hp, critic_weight=critic_weight)
        layout = turn_layout(batch, "credit rule 'turn_critic'")
        _, returns = turn_returns(batch, "turn_critic", layout.present, o["gamma"], torch.float64)  # [N, K] G_ik
        hidden = batch.require("hidden", "credit rule 'turn_critic'")
        projection = random_projection(hidden.shape[-1], o["projection_dim"], o["seed"])
        features = turn_state_features(hidden, layout, projection)  # [N, K, d + 1]
        used = layout.present.cpu() & ~returns.cpu().isnan()  # [N, K]
        pairs, targets = features[used], returns.cpu()[used]  # [n, d + 1], [n]
        error = global_sum(torch.stack([((pairs @ weight - targets).square().sum() if weight is not None
                                         else torch.tensor(0.0, dtype=torch.float64)),
                                        torch.tensor(float(targets.numel()), dtype=torch.float64)]))  # fmt: skip
        mse = float(error[0] / error[1]) if weight is not None and error[1] > 0 else math.nan
        self.stats = {"turn_critic_mse": mse, "turn_critic_fitted": float(weight is not None)}
        self.update(pairs, targets)  # AFTER this step's advantages: a value never sees its own return
        return result

    def update(self, features: Tensor, targets: Tensor) -> None:
        """Add the pairs of every process (``features`` ``[n, d + 1]``, ``targets`` ``[n]``) with forgetting."""
        size = self.gram.shape[0]
        total = global_sum(torch.cat([(features.T @ features).reshape(-1), features.T @ targets,
                                      torch.tensor([float(targets.numel())], dtype=torch.float64)]))  # fmt: skip
        gamma = self.options["forgetting"]
        self.gram = gamma * self.gram + total[: size * size].reshape(size, size)
        self.moment = gamma * self.moment + total[size * size : -1]
        self.seen += int(total[-1])

    def state_dict(self) -> dict[str, Any]:
        return {"gram": self.gram.tolist(), "moment": self.moment.tolist(), "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        gram = torch.tensor(state["gram"], dtype=torch.float64)
        if tuple(gram.shape) != tuple(self.gram.shape):
            raise ValueError(f"turn_critic: the saved probe has {gram.shape[0]} features, this config "
                             f"{self.gram.shape[0]}; resume with the same projection_dim.")  # fmt: skip
        self.gram, self.moment = gram, torch.tensor(state["moment"], dtype=torch.float64)
        self.seen = int(state["seen"])


@CREDIT_RULES.register(
    "turn_critic",
    bind=TurnCritic,
    needs=("turn_ids", "turn_rewards", "combined_reward", "hidden"),
    replaces=True,
    formula="u_ik = r_ik (0 where none) + R_i at the last turn; G_ik = Σ_{j≥k} γ^{j−k} u_ij; "
    "φ_ik = [P·unit(h_i at the first action of turn k), 1]; V_ik = w·φ_ik with w = (Σ_s γ_f^s Φ_sᵀΦ_s + λ_r I)⁻¹ "
    "Σ_s γ_f^s Φ_sᵀG_s over EARLIER steps (before any: V_{G,k}, the group's mean G_·k); "
    "δ_ik = u_ik + γ·V_{i,k+1}·1[i reached k+1] − V_ik; A_ik = Σ_{j≥k} (γλ)^{j−k} δ_ij; A_it = A_ik; "
    "then the probe adds this step's (φ_ik, G_ik)",
    source="[229] turn-PPO (turn-level MDP with a learned turn-level critic)",
    summary="Turn-level GAE whose state values come from a learned critic: a linear probe on the policy's hidden "
    "state before each turn, fitted online by ridge regression on earlier steps' turn returns.",
)
def turn_critic(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    projection_dim: int = 64,
    ridge: float = 1.0,
    forgetting: float = 0.9,
    seed: int = 0,
    critic_weight: Sequence[float] | None = None,
) -> Tensor:
    """turn-PPO [229]: PPO on a turn-level MDP (a turn is one action, its state the conversation before it), with a
    turn-level critic and GAE over turns instead of tokens.

    The value of the state before turn ``k`` of sample ``i`` is ``V_ik = w·φ_ik`` with ``φ_ik`` the random projection
    ``P`` (dimension ``d``, :func:`~genalign.experimental.shaping.probe.random_projection`) of the unit-normalised last
    hidden state at the turn's first action (the hidden state that predicts the turn's first token, so it has read
    the whole conversation before the turn and none of the turn), plus a bias. The reward of turn ``k`` is its
    environment reward plus, at the sample's last turn, the episode's combined reward; advantages are GAE over the
    turns (``turn_gae``, as ``turn_baseline``), written on each turn's actions. It replaces the incoming advantages.
    The bound option (:class:`TurnCritic`, what the trainer runs) keeps the probe across steps and checkpoints: ``w``
    is the ridge solution (``λ_r = ridge``) of every EARLIER step's (``φ_ik``, ``G_ik``) pairs with forgetting
    ``γ_f`` per step, so a sample's value never sees its own return; after the advantages it adds this step's pairs.
    Before its first fit (and called directly without ``critic_weight``) the values are ``turn_baseline``'s group
    values ``V_{G,k}`` and the result equals ``turn_baseline`` (``scale_by_std=False``).

    Reading chosen: the critic is a linear probe on the policy's hidden states fitted online by ridge regression on
    Monte-Carlo turn returns (turn-PPO trains a value network by TD); genalign has no value network, and the probe is
    the established form of a learned value here (``probe_baseline`` [257]). The probe's features, the forgetting and
    the defaults are genalign's; the advantages are not normalised per turn (as PPO's).

    Args:
        advantages: ``[N, T]`` (ignored: the rule replaces them; put it first).
        batch: reads ``turn_ids``, ``turn_rewards``, ``combined_reward`` ``[N]``, ``hidden`` ``[N, T, H]``,
            ``group_ids`` and ``mask``.
        gamma: discount over turns, in ``[0, 1]``.
        lam: GAE ``λ`` over turns, in ``[0, 1]`` (1: ``G_ik − V_ik``; 0: the one-turn TD error).
        projection_dim: ``d >= 1``; ridge: ``λ_r > 0``; forgetting: ``γ_f`` in ``(0, 1]``; seed: of ``P``.
        critic_weight: the probe ``w`` ``[d + 1]`` (supplied by the bound option); None: the group values.
    Returns:
        ``[N, T]`` per-action advantages (0 on padding, environment tokens and samples without a combined reward).
    """
    _check(gamma=gamma, lam=lam, projection_dim=projection_dim, ridge=ridge, forgetting=forgetting)
    layout = turn_layout(batch, "credit rule 'turn_critic'")
    present = layout.present  # [N, K]
    earned, returns = turn_returns(batch, "turn_critic", present, gamma, torch.float64)  # [N, K] u_ik, G_ik
    if critic_weight is None:
        stats, groups = group_turn_stats(returns, batch.group_ids)
        values = stats.mean[groups.index]  # [N, K] V_{G,k}
    else:
        hidden = batch.require("hidden", "credit rule 'turn_critic'")
        if len(critic_weight) != projection_dim + 1:
            raise ValueError(f"turn_critic: critic_weight has {len(critic_weight)} entries; projection_dim + 1 = "
                             f"{projection_dim + 1} expected")  # fmt: skip
        features = turn_state_features(hidden, layout, random_projection(hidden.shape[-1], projection_dim, seed))
        values = (features @ torch.tensor(critic_weight, dtype=torch.float64)).to(earned.device)  # [N, K] V_ik
    result = turn_gae(earned, values, present, gamma, lam)  # [N, K]
    result = torch.where(present & ~returns.isnan(), result, 0.0).nan_to_num(0.0)  # a sample without an outcome: 0
    per_action = per_turn(result, layout.turns).to(advantages.device, advantages.dtype)  # [N, T]
    return torch.where(layout.valid, per_action, 0.0)
