"""Credit reweighted by the sample's perplexity and the token's position in its sequence, for the entropy plateau of
training (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.running_means import global_mean

STAGES = ("progress", "entropy_plateau")


def mean_surprisal(logp: Tensor, valid: Tensor) -> Tensor:
    """``[N]`` the mean ``−logπ`` of each sample's sampled tokens (an unbiased estimate of its mean token entropy);
    ``logp`` ``[N, T]``, ``valid`` ``[N, T]`` bool; 0 for a sample without actions."""
    return -torch.where(valid, logp, 0.0).sum(1) / valid.sum(1).clamp_min(1)


class EntropyPlateau:
    """The rising/plateau split of [180] detected from the entropy dynamics: the policy's mean token entropy (the
    batch's mean surprisal of the sampled tokens, over every process) is recorded every step, and the plateau starts
    at the first step where it changed by less than ``tolerance`` (relative) over the last ``window`` steps; it then
    lasts (state protocol: ``state_dict`` / ``load_state_dict``)."""

    def __init__(self, *, window: int, tolerance: float) -> None:
        self.window = window
        self.tolerance = tolerance
        self.entropies: list[float] = []
        self.reached = False

    def observe(self, entropy: float) -> bool:
        """Record this step's mean entropy; whether the plateau has been reached (this step included)."""
        self.entropies = [*self.entropies, entropy][-(self.window + 1) :]
        if not self.reached and len(self.entropies) == self.window + 1:
            before, now = self.entropies[0], self.entropies[-1]
            self.reached = abs(now - before) <= self.tolerance * max(abs(before), 1e-8)
        return self.reached

    def state_dict(self) -> dict[str, Any]:
        return {"entropies": list(self.entropies), "reached": self.reached}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entropies = [float(v) for v in state["entropies"]]
        self.reached = bool(state["reached"])


class PerplexityPosition:
    """:func:`perplexity_position` bound once; with ``stage: entropy_plateau`` the weights apply from the step the
    :class:`EntropyPlateau` detector finds the plateau (checkpointed with the run)."""

    def __init__(self, **hp: Any) -> None:
        self.hp = hp
        options = {**CREDIT_RULES.hyperparameters("perplexity_position"), **hp}  # every value, defaults included
        _check(**options)
        self.stage = options["stage"]
        self.detector = EntropyPlateau(window=options["window"], tolerance=options["tolerance"])

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        if self.stage == "progress":
            return perplexity_position(advantages, batch, **self.hp)
        logp = batch.require("behaviour_logp", "perplexity_position").detach().double().cpu()  # [N, T]
        valid = batch.mask.cpu() > 0
        present = valid.any(1)  # [N]
        entropy = float(global_mean(mean_surprisal(logp, valid)[present][:, None])[0])
        if not self.detector.observe(entropy):
            return advantages  # the rising stage
        return perplexity_position(advantages, batch, **{**self.hp, "stage": "progress", "start": 0.0})

    def state_dict(self) -> dict[str, Any]:
        return self.detector.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.detector.load_state_dict(state)


def _check(
    *, perplexity_coef: float, position_coef: float, start: float, stage: str, window: int, tolerance: float
) -> None:
    if not (perplexity_coef >= 0 and 0 <= position_coef <= 1 and 0 <= start <= 1):
        raise ValueError(
            f"perplexity_position needs perplexity_coef >= 0, 0 <= position_coef <= 1 and 0 <= start <= 1, got "
            f"{perplexity_coef!r}, {position_coef!r}, {start!r}"
        )
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r} must be one of {STAGES} (how the plateau stage is found)")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window={window!r} must be an integer >= 1 (steps the entropy change is measured over)")
    if not tolerance >= 0:
        raise ValueError(f"tolerance={tolerance!r} must be >= 0 (the relative entropy change of a plateau, e.g. 0.02)")


def perplexity_weights(logp: Tensor, valid: Tensor, coef: float) -> Tensor:
    """``[N]`` sample weights ``u_i = N'·exp(−α·z_i) / Σ_j exp(−α·z_j)`` over the ``N'`` samples with actions, ``z``
    the batch-standardised log-perplexity ``−mean_t logπ(o_it)`` (1 for a sample without actions, and for all when
    the batch has fewer than two or no spread).

    Args:
        logp: ``[N, T]`` log-probs of the sampled tokens; valid: ``[N, T]`` bool; coef: ``α >= 0``.
    """
    count = valid.sum(1)  # [N]
    present = count > 0  # [N]
    log_ppl = -torch.where(valid, logp, 0.0).sum(1) / count.clamp_min(1)  # [N]
    ones = torch.ones_like(log_ppl)
    if int(present.sum()) < 2:
        return ones
    values = log_ppl[present]
    spread = values.std()
    if not spread > 1e-8:
        return ones
    scores = torch.where(present, -coef * (log_ppl - values.mean()) / spread, -torch.inf)  # [N]
    weights = torch.softmax(scores, dim=0) * present.sum()  # [N], mean 1 over the present samples
    return torch.where(present, weights, ones)


@CREDIT_RULES.register(
    "perplexity_position",
    bind=PerplexityPosition,
    needs=("behaviour_logp",),
    formula="z_i = batch z-score of log PPL_i, PPL_i = exp(−mean_t logπ(o_it)); u_i = softmax_i(−α·z_i)·N; "
    "v_it = 1 + β·(2·(t − ½)/|o_i| − 1); w_it = u_i·v_it in the plateau (progress ≥ start, or the batch "
    "entropy changed < tol over `window` steps), else 1; A_it = w_it·A_it",
    source="[180] entropy-performance exchange (perplexity and position reward adjustment)",
    summary="In the entropy plateau, give more credit to low-perplexity samples and to the tokens near the end of "
    "each sequence.",
)
def perplexity_position(
    advantages: Tensor,
    batch: StepBatch,
    *,
    perplexity_coef: float = 0.5,
    position_coef: float = 0.5,
    start: float = 0.0,
    stage: Literal["progress", "entropy_plateau"] = "progress",
    window: int = 5,
    tolerance: float = 0.02,
) -> Tensor:
    """The two reward adjustments of [180]: in the plateau stage of training, learning efficiency tracks the tokens of
    low-perplexity samples and the tokens at the end of sequences, so both get a larger share of the update.

    * Perplexity: each sample's log-perplexity (from the behaviour log-probs) is standardised over the batch and
      ``u_i = softmax_i(−α·z_i)·N`` (mean 1 over the samples): confident samples weigh more.
    * Position: ``v_it = 1 + β·(2·(t − ½)/|o_i| − 1)`` rises linearly from ``≈ 1 − β`` at the first token to
      ``≈ 1 + β`` at the last and averages exactly 1 along each sequence (``t`` counts its valid actions).

    Reading chosen: the abstract gives the criteria (low perplexity, late position) but not the weighting; both forms
    and their defaults are ours, and the weights multiply the advantage of either sign. The rising/plateau stage
    split: ``stage: progress`` is a training-progress threshold ``start`` (weights are 1 before it); ``stage:
    entropy_plateau`` detects it from the entropy dynamics, as the paper divides training: the bound option
    (:class:`PerplexityPosition`) records the batch's mean token entropy every step and the plateau starts once it
    changed by at most ``tolerance`` (relative) over the last ``window`` steps (:class:`EntropyPlateau`; the entropy
    is estimated by the sampled tokens' mean surprisal, so no extra pass is needed). Called unbound, the function
    only knows ``progress``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``behaviour_logp`` ``[N, T]`` and ``progress`` (with ``start > 0``).
        perplexity_coef: ``α >= 0`` (0 turns the perplexity weight off).
        position_coef: ``β`` in ``[0, 1]`` (0 turns the position weight off).
        start: progress in ``[0, 1]`` from which the weights apply (``stage: progress``).
        stage: ``progress`` (threshold ``start``) or ``entropy_plateau`` (detected; the bound option).
        window: steps over which the entropy change is measured (``entropy_plateau``).
        tolerance: the relative entropy change at or below which the plateau starts (``entropy_plateau``).
    Returns:
        ``[N, T]`` ``advantages · u_i · v_it`` (unchanged on padding).
    """
    _check(perplexity_coef=perplexity_coef, position_coef=position_coef, start=start, stage=stage, window=window,
           tolerance=tolerance)  # fmt: skip
    if stage != "progress":
        raise ValueError("stage='entropy_plateau' keeps the entropy of earlier steps: bind the rule "
                         "(genalign.algorithms.bind_option), as a config does")  # fmt: skip
    if start > 0 and batch.require("progress", "perplexity_position") < start:
        return advantages
    device = advantages.device
    logp = batch.require("behaviour_logp", "perplexity_position").detach().double().to(device)  # [N, T]
    valid = batch.mask.to(device) > 0  # [N, T]
    sample = perplexity_weights(logp, valid, perplexity_coef)  # [N]
    count = valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    position = torch.cumsum(valid.double(), 1)  # [N, T] 1-based position among the valid actions
    ramp = 1.0 + position_coef * (2.0 * (position - 0.5) / count - 1.0)  # [N, T], mean 1 along each row
    weights = torch.where(valid, sample[:, None] * ramp, 1.0)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
